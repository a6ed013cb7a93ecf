"""The profiler (paradyse_lab/app/measure/profiler.py): kept activations measured with saved_tensors_hooks through the
fake process group at p = 8, against the analytic model; and the `paradyse-lab costmodel profile` command (CPU).

The distributed mode (`--mode distributed`, normally under torchrun) is tested inside the shared gloo process
groups of test_distributed.py (runtime_cases.py `profile-distributed`, world sizes 1-4), not here, so that no
test spawns a group of its own."""

from __future__ import annotations

import pytest

from paradyse_lab.cli import main
from paradyse_lab.core.model_spec import ModelSpec
from paradyse_lab.core.strategies import StrategyOption
from paradyse_lab.costmodel.profiles import read_profiles
from paradyse_lab.costmodel.schedules import schedule

P = 8
SEQ = 128
SPEC = ModelSpec(name="gpt2-tiny-p8", hidden=64, heads=8, layers=1, ffn_hidden=256, vocab_size=128,
                 max_positions=256, dtype="fp32")
"""gpt2-tiny-like shapes with heads and f divisible by 8; fp32 like the CPU runtime."""
STRATEGIES = ("megatron_ts", "megatron_cz", "ulysses_z", "metp")


@pytest.fixture(scope="module")
def cfg():

    return SPEC


@pytest.mark.parametrize("recompute", [False, True], ids=["keep", "recompute"])
@pytest.mark.parametrize("kind", ["attention", "mlp"])
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_kept_bytes_match_analytic_at_p8(cfg, strategy, kind, recompute):
    from paradyse_lab.app.measure.profile_memory import measure_kept_bytes

    rec = measure_kept_bytes(kind, strategy, recompute, cfg, P, SEQ)
    analytic = schedule(SPEC, kind, StrategyOption(strategy, recompute), SEQ, 1, P).kept_bytes
    t_h_bytes = SEQ // P * SPEC.hidden * SPEC.dtype_bytes
    detail = [(k.shape, k.dtype, k.nbytes) for k in rec.kept.values()]
    assert rec.nbytes == analytic, f"{strategy} {kind}: measured {rec.nbytes}, analytic {analytic}: {detail}"
    if recompute:  # only the sub-layer input x [1, t, h]
        assert detail == [((1, SEQ // P, SPEC.hidden), "float32", t_h_bytes)]
    else:  # x and its LayerNorm output u, sequence-sharded [1, t, h] (Korthikanti; not recomputed)
        assert detail[:2] == [((1, SEQ // P, SPEC.hidden), "float32", t_h_bytes)] * 2
    if kind == "attention" and not recompute:  # FlashAttention's log-sum-exp [b, heads(/p), tokens] in fp32
        lse_bytes = 4 * SPEC.heads * SEQ // P
        assert [k for k in rec.kept.values() if len(k.shape) == 3 and k.nbytes == lse_bytes
                and k.shape[-1] != SPEC.hidden]

@pytest.mark.parametrize("strategy", STRATEGIES)
def test_kept_bytes_of_a_pack_are_the_schedules_byte_for_byte(cfg, strategy):
    """A packed attention sub-layer (documents of 1, 37 and 50 tokens, each padded to 2p = 16: 128 tokens)
    keeps exactly what the schedule of the pack charges, which is the unpacked sequence's: the varlen kernels
    keep no mask and no [s, s] tensor, only q, k, v, the output and the lse."""
    from paradyse_lab.app.measure.profile_memory import measure_kept_bytes
    from paradyse_lab.costmodel.packed import PackedStep
    from paradyse_lab.runtime.model.packed import cu_seqlens, pack_sequence

    pack = pack_sequence([1, 37, 50], P)
    step = PackedStep(pack.documents, unit=2 * P)
    assert pack == step and step.padded_len == SEQ
    rec = measure_kept_bytes("attention", strategy, False, cfg, P, SEQ, cu_seqlens=cu_seqlens(pack))
    analytic = schedule(SPEC, "attention", StrategyOption(strategy), SEQ, 1, P, step.segments).kept_bytes
    assert rec.nbytes == analytic == schedule(SPEC, "attention", StrategyOption(strategy), SEQ, 1, P).kept_bytes


def test_fake_group_counts_the_schedules_bytes(cfg):
    """The fake group still records every call as a real group would (comm_record.count_bytes)."""
    import torch

    from paradyse_lab.runtime.comm import collectives as comm
    from paradyse_lab.runtime.comm import p2p as comm_p2p
    from paradyse_lab.runtime.comm import record as comm_record
    from paradyse_lab.runtime.comm.fake_group import FakeGroup

    assert comm.size(FakeGroup(P, 3)) == P and comm.rank(FakeGroup(P, 3)) == 3
    x = torch.arange(6.0).view(2, 3)
    with comm_record.count_bytes() as c:
        g = comm.all_gather(x, FakeGroup(4, 1))
        r = comm.reduce_scatter(g, FakeGroup(4, 1))
        a = comm.all_to_all(g, FakeGroup(4, 1))
        recv = comm_p2p.ring_exchange(x, FakeGroup(4, 1)).wait()
    assert g.shape == (8, 3) and r.shape == (2, 3) and a.shape == (8, 3) and torch.equal(recv, x)
    assert c.by_op == {"all_gather": 72, "reduce_scatter": 72, "all_to_all": 72, "p2p": 24}


def test_profile_command_writes_a_valid_profile(tmp_path, capsys):
    out = tmp_path / "prof.csv"
    code = main(["costmodel", "profile", "--model", "gpt2-tiny", "--seqs", "64,128", "--strategies",
                 "megatron_ts,metp+recompute",
                 "--mode", "rank-local", "--p", "4", "--layers", "1", "--warmup", "0", "--repeats", "1",
                 "--out", str(out)])
    assert code == 0
    df = read_profiles(out)
    assert len(df) == 4 and set(df["source"]) == {"measured-rank-local"}
    assert list(df["seq_len"]) == [64, 128, 64, 128] and list(df["recompute"]) == [False, False, True, True]
    assert (df["p"] == 4).all() and (df["layers"] == 1).all() and (df["time_s"] > 0).all()
    assert (df["kept_bytes"] > 0).all() and (df["peak_bytes"] >= df["kept_bytes"]).all()
    assert df["software"].str.contains("torch=").all()
    kept = dict(zip(zip(df["strategy"], df["seq_len"]), df["kept_bytes"]))
    assert kept[("megatron_ts", 128)] > kept[("metp", 128)]  # recomputation keeps less
    assert not [f.name for f in tmp_path.iterdir() if f.name.startswith(".")]  # the temporary file was renamed


@pytest.mark.parametrize("args, message", [
    (["--strategies", "nosuch"], "nosuch"),
    (["--strategies", "megatron_ts", "--seqs", "60"], "multiple of 8"),
])
def test_profile_command_bad_input_exits_2_with_one_line(tmp_path, capsys, args, message):
    base = {"--seqs": "64", "--strategies": "megatron_ts"}
    argv = ["costmodel", "profile", "--model", "gpt2-tiny", "--p", "4", "--out", str(tmp_path / "x.csv")]
    merged = dict(base)
    merged.update(dict(zip(args[::2], args[1::2])))
    for k, v in merged.items():
        argv += [k, v]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err
    assert not (tmp_path / "x.csv").exists()


LLAMA_SPECS = {kv: ModelSpec(name=f"llama-tiny-p8-kv{kv}", hidden=64, heads=8, kv_heads=kv, layers=1, ffn_hidden=128,
                             ffn_kind="swiglu", norm="rmsnorm", bias=False, vocab_size=128, max_positions=0,
                             tied=False, rope_theta=10000.0, dtype="fp32") for kv in (2, 8)}
"""LLaMA-shaped (RMSNorm, SwiGLU, RoPE, no biases) with 2 K/V heads (< p: ring and Ulysses only, Ulysses
replicating each K/V head 4 times) and 8 (= p: every strategy)."""


@pytest.mark.parametrize("kv_heads", [2, 8])
@pytest.mark.parametrize("kind", ["attention", "mlp"])
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_llama_kept_bytes_match_analytic_at_p8(strategy, kind, kv_heads):
    from paradyse_lab.app.measure.profile_memory import measure_kept_bytes
    from paradyse_lab.core.strategies import get_strategy

    spec = LLAMA_SPECS[kv_heads]
    if get_strategy(strategy).violation(spec, P, SEQ):
        pytest.skip(f"{strategy} is infeasible with kv_heads {kv_heads} at p = {P} (the GQA rule)")
    cfg = spec
    for recompute in (False, True):
        rec = measure_kept_bytes(kind, strategy, recompute, cfg, P, SEQ)
        analytic = schedule(spec, kind, StrategyOption(strategy, recompute), SEQ, 1, P).kept_bytes
        detail = [(k.shape, k.dtype, k.nbytes) for k in rec.kept.values()]
        assert rec.nbytes == analytic, f"{strategy} {kind} {recompute}: measured {rec.nbytes}, analytic {analytic}: " \
            f"{detail}"


@pytest.mark.parametrize("spec", [SPEC, LLAMA_SPECS[2]], ids=["gpt", "llama-gqa"])
def test_kept_bytes_match_analytic_on_one_rank(spec):
    """p = 1: a ring strategy's q, k, v are slices of the one QKV output; each kept slice must own its
    storage (a kept view of v keeps the whole output alive under rotary embeddings, which copy q and k)."""
    from paradyse_lab.app.measure.profile_memory import measure_kept_bytes

    cfg = spec
    for strategy in STRATEGIES:
        for kind in ("attention", "mlp"):
            rec = measure_kept_bytes(kind, strategy, False, cfg, 1, SEQ)
            analytic = schedule(spec, kind, StrategyOption(strategy), SEQ, 1, 1).kept_bytes
            detail = [(k.shape, k.nbytes) for k in rec.kept.values()]
            assert rec.nbytes == analytic, f"{strategy} {kind}: measured {rec.nbytes}, analytic {analytic}: {detail}"


@pytest.mark.parametrize("spec", [SPEC, LLAMA_SPECS[2]], ids=["gpt", "llama-gqa"])
def test_tiled_mlp_and_offload_bytes_match_analytic_at_p8(spec):
    """`+offload` (the whole kept set) and `+tiled+offload` (3 positions a chunk: uneven chunks of the 16 per rank)
    at p = 8: what a sub-layer keeps on the device and what it moves to host memory are the schedule's, byte for
    byte (the distributed cases check the same at p = 1..4 with the values and gradients: runtime_cases.py)."""
    from paradyse_lab.app.measure.profile_memory import measure_kept_bytes
    from paradyse_lab.core.strategies import get_strategy

    cfg = spec
    for strategy in STRATEGIES:
        for kind in ("attention", "mlp"):
            if get_strategy(strategy).violation(spec, P, SEQ, kind):
                continue  # the GQA rule: megatron_ts and metp attention need kv_heads % p == 0
            for flags in ("+offload", "+tiled+offload") if kind == "mlp" else ("+offload",):
                option = StrategyOption.parse(strategy + flags)  # +tiled+offload: its input x, and 0 on the device
                rec = measure_kept_bytes(kind, option.name, False, cfg, P, SEQ, mlp_tile=3)
                want = schedule(spec, kind, option, SEQ, 1, P, mlp_tile=3)
                assert (rec.nbytes, rec.host_bytes) == (want.kept_bytes, want.host_bytes), (option.name, kind)
                assert want.host_bytes > 0 or not option.offload
