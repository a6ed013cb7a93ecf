import pytest

from paradyse_lab.cluster.files import get_cluster
from paradyse_lab.cluster.presets import PRESETS
from paradyse_lab.cluster.spec import COLLECTIVES, interpolate_loglinear
from paradyse_lab.errors import UserInputError


def test_presets_and_default():
    one_node = {"a100-80gb-x8", "a100-40gb-x8", "h100-80gb-x8", "h200-x8"}
    several = {f"{gpu}-{n}x8" for gpu in ("a100-80gb", "h100-80gb") for n in (2, 4, 16)}
    assert set(PRESETS) == one_node | several
    for name in several:
        c = PRESETS[name]
        assert c.nodes * c.node_gpus == c.gpus and c.node_gpus == 8 and c.nodes > 1
        assert c.device == name.replace(f"-{c.nodes}x8", "-x8")  # the one-node preset's profiles
    a100 = PRESETS["a100-80gb-x8"]
    assert a100.gpus == 8 and a100.memory_bytes == 81251 * 2**20 and a100.peak_flops == 312e12
    assert PRESETS["h200-x8"].memory_bytes > PRESETS["h100-80gb-x8"].memory_bytes
    for c in PRESETS.values():
        assert c.source and set(c.busbw_bytes_per_s) == set(COLLECTIVES)


def test_bandwidth_grows_with_message_size_to_the_measured_peak():
    a100 = PRESETS["a100-80gb-x8"]
    sizes = [2**k for k in range(10, 33)]
    bws = [a100.busbw("all_gather", s) for s in sizes]
    assert bws == sorted(bws)
    assert bws[-1] == pytest.approx(230e9)
    # Azure all_reduce sweep [AZ]: 109 GB/s at 16 MB.
    assert a100.busbw("all_reduce", 16 * 2**20) == pytest.approx(109e9 * 231.6 / 230)


def test_efficiencies_are_fractions_and_monotone():
    for c in PRESETS.values():
        effs = [c.gemm_eff(d) for d in (64, 1024, 4096, 16384, 65536)]
        assert all(0 < e <= 1 for e in effs) and effs == sorted(effs)
        assert c.attention_eff(512, True) < c.attention_eff(16384, True)


def test_interpolation_clamps():
    pts = ((10.0, 0.1), (1000.0, 0.5))
    assert interpolate_loglinear(pts, 1) == 0.1
    assert interpolate_loglinear(pts, 100) == pytest.approx(0.3)
    assert interpolate_loglinear(pts, 1e9) == 0.5


def test_toml_cluster_from_preset_and_full(tmp_path):
    f = tmp_path / "mynode.toml"
    f.write_text('base = "a100-80gb-x8"\ngpus = 4\nmemory_gib = 24\n[busbw_gbps]\nall_to_all = 100\n')
    c = get_cluster(str(f))
    assert c.name == "mynode" and c.gpus == 4 and c.memory_bytes == 24 * 2**30
    assert c.busbw_bytes_per_s["all_to_all"] == 100e9 and c.peak_flops == 312e12


@pytest.mark.parametrize("text, match", [
    ("gpus = 4\n", "lacks"),
    ('base = "a100-80gb-x8"\ncolor = 1\n', "unknown key .* valid:"),
    ('base = "a100-80gb-x8"\ngpus = "four"\n', "gpus must be a finite number"),
    ('base = "a100-80gb-x8"\n[busbw_gbps]\nmagic = 3\n', "valid: all_gather"),
    ('base = "nope"\n', "unknown cluster"),
    ("gpus = [", "not valid TOML"),
])
def test_bad_toml(tmp_path, text, match):
    f = tmp_path / "c.toml"
    f.write_text(text)
    with pytest.raises(UserInputError, match=match):
        get_cluster(str(f))


def test_unknown_cluster_lists_names():
    with pytest.raises(UserInputError, match="a100-80gb-x8"):
        get_cluster("tpu")
