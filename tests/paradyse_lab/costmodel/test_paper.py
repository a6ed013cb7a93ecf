"""The paper truth: the authors' measured fits, the bundled source=paper profile, the paper cost model."""

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest

from paradyse_lab.cli import main
from paradyse_lab.cluster.files import get_cluster
from paradyse_lab.core.model_spec import get_model
from paradyse_lab.core.strategies import StrategyOption
from paradyse_lab.costmodel import AnalyticCostModel, uniform_plan_cost
from paradyse_lab.costmodel.paper import PaperCostModel
from paradyse_lab.costmodel.paper_measurements import MEASURED_SHAPES, PROVENANCE, shape_for
from paradyse_lab.costmodel.paper_profile import paper_profile
from paradyse_lab.costmodel.profiles import DATA_DIR, PAPER_PROFILE, read_profiles, write_profiles
from paradyse_lab.costmodel.synthetic import length_grid
from paradyse_lab.errors import UserInputError

A100 = get_cluster("a100-80gb-x8")


def fit_time(a, b, c, divisor, s):
    """The fit written out by hand, as the authors' table gives it: (a s^2 + b s + c) / divisor."""
    return (a * s * s + b * s + c) / divisor


@pytest.mark.parametrize("model, strategy, seq, coeffs, divisor", [
    ("bert", "megatron_ts", 1024, (2.36e-10, 5.22e-06, 0.028366), 24),
    ("bert", "metp", 65536, (3.28e-10, -1.2e-05, 1.368680), 24),
    ("gpt", "ulysses_z", 32768, (1.03e-10, 5.07e-06, 0.093456), 1),
    ("llama", "megatron_cz", 131072, (3.53e-10, 1.4e-05, 0.342677), 5),
    ("paper-7b", "metp", 4096, (1.18e-09, 3.9e-05, 1.436488), 32),
])
def test_bundled_profile_rows_recompute_from_the_coefficients(model, strategy, seq, coeffs, divisor):
    df = read_profiles(PAPER_PROFILE)
    layers = get_model(model).layers
    near = df[(df.model == model) & (df.strategy == strategy)]
    row = near.iloc[(near.seq_len - seq).abs().argmin()]
    expected = layers * fit_time(*coeffs, divisor, int(row.seq_len))
    assert row.time_s == pytest.approx(expected, rel=1e-5)  # the file keeps 6 significant digits


def test_bundled_profile_is_source_paper_with_provenance_and_regenerates_identically(tmp_path):
    df = read_profiles(PAPER_PROFILE)
    assert set(df.source) == {"paper"} and not df.causal.any()
    assert all(PROVENANCE["commit"] in s and "memory=paradyse-lab analytic model" in s for s in df.software)
    assert set(df.model) == {m.preset for m in MEASURED_SHAPES}
    assert df.groupby("model").strategy.nunique().eq(4).all()
    readme = (DATA_DIR / "README.md").read_text()
    assert PROVENANCE["repository"] in readme and PROVENANCE["commit"] in readme and PROVENANCE["path"] in readme
    fresh = write_profiles(paper_profile(), tmp_path / "paper.csv")
    assert fresh.read_text() == PAPER_PROFILE.read_text()


def test_profile_curves_stop_where_the_strategy_runs_out_of_memory():
    df = read_profiles(PAPER_PROFILE)
    budget = A100.memory_bytes - 2**30
    grid = length_grid(1 << 20, 1.05)
    stopped = 0
    for (model, strategy), g in df.groupby(["model", "strategy"]):
        last = int(g.seq_len.max())
        assert g.peak_bytes.max() <= budget
        if last < grid[-1]:
            cm = AnalyticCostModel(get_model(model), A100)
            nxt = grid[grid.index(last) + 1]
            assert uniform_plan_cost(cm, StrategyOption(strategy), nxt).peak_bytes > budget
            stopped += 1
    assert stopped >= 14  # all but BERT's lightest strategies stop at their OOM


def test_paper_cost_model_charges_the_fit_per_layer_and_analytic_memory():
    model = get_model("bert")
    cm, an = PaperCostModel(model, A100), AnalyticCostModel(model, A100)
    for strategy, (a, b, c) in {"megatron_ts": (2.36e-10, 5.22e-06, 0.028366),
                                "metp": (3.28e-10, -1.2e-05, 1.368680)}.items():
        opt = StrategyOption(strategy)
        u, ua = uniform_plan_cost(cm, opt, 4096), uniform_plan_cost(an, opt, 4096)
        assert u.time_s_per_layer == pytest.approx(fit_time(a, b, c, 24, 4096))
        assert (u.peak_bytes, u.kept_bytes_per_layer, u.transient_bytes) == (ua.peak_bytes, ua.kept_bytes_per_layer,
                                                                            ua.transient_bytes)
        att, mlp = cm.sublayer("attention", opt, 4096), cm.sublayer("mlp", opt, 4096)
        att_a, mlp_a = an.sublayer("attention", opt, 4096), an.sublayer("mlp", opt, 4096)
        assert att.time_s / mlp.time_s == pytest.approx(att_a.time_s / mlp_a.time_s)  # the analytic split


def test_paper_cost_model_splits_a_causal_preset_as_measured_non_causal():
    cm = PaperCostModel(get_model("gpt"), A100)
    causal, bidir = AnalyticCostModel(get_model("gpt"), A100), AnalyticCostModel(
        dataclasses.replace(get_model("gpt"), causal=False), A100)
    opt = StrategyOption("metp")
    share = cm.sublayer("attention", opt, 131072).time_s / cm.layer_time_s(opt, 131072)
    expected = [a.sublayer("attention", opt, 131072).time_s / (a.sublayer("attention", opt, 131072).time_s
                                                               + a.sublayer("mlp", opt, 131072).time_s)
                for a in (bidir, causal)]
    assert share == pytest.approx(expected[0]) and share != pytest.approx(expected[1])


def test_paper_cost_model_charges_recompute_as_the_analytic_ratio():
    # the ratio is the analytic model's under the measured conditions: non-causal (the gpt preset is causal)
    cm = PaperCostModel(get_model("gpt"), A100)
    an = AnalyticCostModel(dataclasses.replace(get_model("gpt"), causal=False), A100)
    plain, rc = StrategyOption("metp"), StrategyOption("metp", True)
    ratio = uniform_plan_cost(an, rc, 65536).time_s_per_layer / uniform_plan_cost(an, plain, 65536).time_s_per_layer
    assert ratio > 1
    assert uniform_plan_cost(cm, rc, 65536).time_s_per_layer == pytest.approx(
        ratio * uniform_plan_cost(cm, plain, 65536).time_s_per_layer)


@pytest.mark.parametrize("model, cluster, p, batch", [
    (get_model("llama3-8b"), A100, None, 1),  # another architecture with h 4096 and 32 layers
    (get_model("bert").with_layers(12), A100, None, 1),  # another L
    (dataclasses.replace(get_model("gpt"), hidden=6144, ffn_hidden=4 * 6144), A100, None, 1),  # another h
    (get_model("gpt"), A100, 4, 1),  # another p
    (get_model("gpt"), get_cluster("h100-80gb-x8"), None, 1),  # another GPU
    (get_model("bert"), A100, None, 2),  # another batch
])
def test_paper_cost_model_refuses_what_the_fits_do_not_cover(model, cluster, p, batch):
    with pytest.raises(UserInputError, match="bert .*llama .*gpt .*paper-7b"):
        cm = PaperCostModel(model, cluster, p)
        cm.sublayer("attention", StrategyOption("megatron_ts"), 4096, batch)


def test_shape_lookup_covers_exactly_the_four_presets():
    for m in MEASURED_SHAPES:
        spec = get_model(m.preset)
        assert shape_for(spec.hidden, spec.heads, spec.layers) is m
    assert shape_for(4096, 32, 31) is None


def test_cost_cli_paper_json_matches_the_curves(capsys):
    assert main(["cost", "--model", "bert", "--seq", "4K", "--cost-model", "paper", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    expected = {"megatron_ts": (2.36e-10, 5.22e-06, 0.028366), "ulysses_z": (2.41e-10, 7.30e-07, 0.162314),
                "megatron_cz": (2.30e-10, 3.37e-06, 0.222728), "metp": (3.28e-10, -1.2e-05, 1.368680)}
    for strategy, coeffs in expected.items():
        assert out["strategies"][strategy]["time_s_per_layer"] == pytest.approx(fit_time(*coeffs, 24, 4096))
    assert out["strategies"]["megatron_ts"]["time_s_per_layer"] < out["strategies"]["ulysses_z"]["time_s_per_layer"] / 3
    assert set(out["strategies"]["metp"]) >= {"time_s_per_layer", "kept_bytes_per_layer", "peak_bytes", "fits"}


@pytest.mark.parametrize("argv", [
    ["cost", "--model", "llama3-8b", "--seq", "4K", "--cost-model", "paper"],
    ["cost", "--model", "gpt", "--seq", "4K", "--cost-model", "paper", "--cluster", "h100-80gb-x8"],
    ["cost", "--model", "bert", "--seq", "4K", "--cost-model", "paper", "--batch", "2"],
    ["simulate", "--model", "gpt2", "--dataset", "uniform:1024:2048", "--policy", "static:metp",
     "--truth-cost-model", "paper", "--size", "3"],
])
def test_cli_refusals_are_one_line_and_exit_2(capsys, argv):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "paper-7b (h 4096, 32 heads, 32 layers)" in err[0]


def test_profile_causal_column_is_optional_and_validated(tmp_path):
    df = read_profiles(PAPER_PROFILE).head(3).astype(str)
    df["causal"] = ["false", "true", "maybe"]
    path = tmp_path / "p.csv"
    df.to_csv(path, index=False)
    with pytest.raises(UserInputError, match="line 4: causal must be true or false"):
        read_profiles(path)
    df.drop(columns="causal").to_csv(path, index=False)
    assert "causal" not in read_profiles(path).columns
    df["causal"] = ["true", "", "false"]  # empty: the preset's mask
    df.to_csv(path, index=False)
    got = read_profiles(path)
    assert got.causal.tolist() == [True, None, False]
    assert write_profiles(got, tmp_path / "again.csv").read_text() == write_profiles(
        read_profiles(tmp_path / "again.csv"), tmp_path / "third.csv").read_text()
    assert read_profiles(tmp_path / "again.csv").causal.tolist() == [True, None, False]


def test_paper_and_synthetic_profiles_combine(tmp_path):
    from paradyse_lab.costmodel.learned_fit import analytic_whole

    both = pd.concat([read_profiles(PAPER_PROFILE).head(4), read_profiles(DATA_DIR / "analytic_a100-80gb-x8.csv")
                      .query("model == 'gpt'").head(4)], ignore_index=True)
    rows = read_profiles(write_profiles(both, tmp_path / "both.csv"))
    assert rows.causal.tolist()[:4] == [False] * 4 and rows.causal.tolist()[4:] == [None] * 4
    times, _ = analytic_whole(rows, A100)
    assert np.isfinite(times).all()
