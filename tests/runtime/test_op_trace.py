"""The operation tracer (runtime/trace/op_trace.py) against what the runtime really dispatches, and its collectives
against the bytes the runtime counts and the analytic schedule.

Run: `python -m pytest -q tests/runtime/test_op_trace.py`. The distributed part (op_trace_cases.py: every strategy
plain at p = 1, 2 and 3, each flag at p = 2; both sub-layers; the operations each rank
dispatched equal its meta trace, one for one) runs in the distributed tests' worlds:
`python -m pytest -q tests/runtime/test_distributed.py -k op-trace`.
"""

from __future__ import annotations

import dataclasses

import op_trace_cases
import pytest
import torch

from paradyse_lab.core.strategies import StrategyOption, get_strategy
from paradyse_lab.costmodel.replay.ops import counts
from paradyse_lab.costmodel.schedules import schedule
from paradyse_lab.costmodel.types import CollectiveCall
from paradyse_lab.runtime.comm import record as comm_record
from paradyse_lab.runtime.comm.fake_group import FakeGroup
from paradyse_lab.runtime.model.parallel_gpt import STRATEGY_MODULES
from paradyse_lab.runtime.trace.op_trace import recording, run_sublayer_step, sublayer_inputs, trace_sublayer

CFG, S = op_trace_cases.CFG, op_trace_cases.S


def _sent(op) -> int:
    """Bytes this rank sends for one traced collective or exchange (CollectiveCall's ring convention)."""
    if op.kind == "p2p":
        return op.nbytes
    return CollectiveCall(op.name, op.nbytes, op.group).sent_bytes


@pytest.mark.parametrize("flags", ["", "+recompute"])
def test_traced_collectives_send_the_counted_and_scheduled_bytes(flags):
    """At p = 4 (every strategy's collectives at their largest count; the schedules' bytes at p = 1..4 are the
    distributed tests'): the tracer's collectives are those the runtime counts and the schedule prices."""
    p = 4
    spec = CFG.with_dtype("bf16")
    for strategy in STRATEGY_MODULES:
        if get_strategy(strategy).violation(spec, p, S):
            continue
        option = StrategyOption.parse(strategy + flags)
        for kind in ("attention", "mlp"):
            params, x = sublayer_inputs(CFG, kind, S, p, 1, torch.bfloat16, "cpu")
            with comm_record.count_bytes() as counter, recording() as rec:
                run_sublayer_step(CFG, kind, option, S, FakeGroup(p, 0), params, x)
            traced: dict[str, int] = {}
            for op in rec.ops:
                if op.kind in ("collective", "p2p"):
                    key = "p2p" if op.kind == "p2p" else op.name
                    traced[key] = traced.get(key, 0) + _sent(op)
            want: dict[str, int] = {}
            for call in schedule(spec, kind, option, S, 1, p).collectives:
                want[call.op] = want.get(call.op, 0) + call.sent_bytes
            assert traced == counter.total() == {k: v for k, v in want.items() if v}, (option.name, kind)
            meta = trace_sublayer(CFG, kind, option, S, p, dtype="bf16")
            assert [o for o in meta if o.kind in ("collective", "p2p", "wait")] == \
                [o for o in rec.ops if o.kind in ("collective", "p2p", "wait")]


def test_attention_calls_carry_lengths_heads_causality_and_kernel():
    ring = trace_sublayer(CFG, "attention", StrategyOption("megatron_cz"), S, 4, dtype="fp32")
    calls = [o for o in ring if o.kind == "attention"]
    assert counts(ring)["p2p"] == counts(ring)["wait"] > 0
    assert {o.which for o in calls} == {"forward", "backward"}
    assert all(o.heads == 12 and o.head_dim == 8 and o.kernel == "sdpa_cpu" for o in calls)  # a CPU trace
    t = S // 4  # a rank's positions: the diagonal block is causal, the others half of the zig-zag against all
    assert {(o.sq, o.sk, o.causal) for o in calls} == {(t, t, True), (t // 2, t, False)}
    gathered = [o for o in trace_sublayer(CFG, "attention", StrategyOption("megatron_ts"), S, 4, dtype="fp32")
                if o.kind == "attention"]
    assert [(o.which, o.sq, o.sk, o.heads, o.causal) for o in gathered] == \
        [("forward", S, S, 3, True), ("backward", S, S, 3, True)]


@pytest.mark.parametrize("option", ["megatron_cz", "metp+recompute", "ulysses_z+tiled"])
def test_shape_class_gives_the_trace_at_any_length(option, tmp_path, monkeypatch):
    """A shape class recorded at three lengths, instantiated at another, equals the trace made there (a tiled
    MLP's chunk count follows the length: not affine, traced at the length itself); the second lookup reads the
    class from the disk cache."""
    from paradyse_lab.app.replay_traces import SublayerTraces
    from paradyse_lab.core.model_spec import get_model

    monkeypatch.setenv("PARADYSE_TRACE_CACHE", str(tmp_path))
    spec = dataclasses.replace(get_model("gpt2-tiny"), dtype="fp32")
    traces = SublayerTraces(spec, 4, device="cpu")
    opt = StrategyOption.parse(option)
    for kind in ("attention", "mlp"):
        assert traces.shape_class(kind, opt).affine == (kind == "attention" or not opt.tiled)
        assert traces.trace(kind, opt, 40 * 8) == trace_sublayer(traces.cfg, kind, opt, 40 * 8, 4, dtype="fp32")
    again = SublayerTraces(spec, 4, device="cpu")
    assert again.trace("attention", opt, 8 * 50) == traces.trace("attention", opt, 8 * 50) and again.traced == 0


def test_views_that_their_schema_does_not_mark_cost_no_kernel():
    """`_unsafe_view` (what a reshape of a fresh result dispatches) returns a view: host work, no bytes moved."""
    ops = trace_sublayer(CFG, "attention", StrategyOption("megatron_cz"), S, 4, dtype="fp32")
    assert any(o.name == "_unsafe_view" for o in ops)
    assert all(o.kind == "host" and o.nbytes == 0 for o in ops if o.name == "_unsafe_view")


def test_a_trace_names_the_kernel_the_runtime_picks_on_the_device_it_stands_for():
    """Traced on meta tensors, the attention calls carry the kernel of the device the trace is for: PyTorch's fused
    CPU kernel on a CPU; on CUDA in 16 bits flash-attn where installed, else PyTorch's flash kernel."""
    from paradyse_lab.runtime.attention import flash

    def kernels(device, dtype):
        ops = trace_sublayer(CFG, "attention", StrategyOption("megatron_ts"), S, 2, dtype=dtype, device=device)
        return {o.kernel for o in ops if o.kind == "attention"}

    assert kernels("cpu", "fp32") == {"sdpa_cpu"}
    assert kernels("cuda", "bf16") == {"flash_attn" if flash._fa is not None else "sdpa_flash"}
    assert kernels("cuda", "fp32") == {"math"}


def test_the_trace_cache_key_follows_every_runtime_module(tmp_path):
    """The digest that keys cached traces covers the runtime's modules in its concept folders: editing a nested
    module changes it (a digest of the top folder alone saw only runtime/__init__.py and never changed)."""
    from paradyse_lab.app.replay_traces import runtime_digest
    from paradyse_lab.results.result_key import package_folder, source_files

    runtime = package_folder("paradyse_lab.runtime")
    assert runtime / "attention" / "kernels.py" in source_files(runtime, (".py",))
    (tmp_path / "attention").mkdir()
    (tmp_path / "__init__.py").write_text("")
    nested = tmp_path / "attention" / "kernels.py"
    nested.write_text("A = 1\n")
    before = runtime_digest(tmp_path)
    nested.write_text("A = 2\n")
    assert runtime_digest(tmp_path) != before


def test_a_cached_trace_is_not_read_under_another_torch(tmp_path, monkeypatch):
    """Operators are torch's: a shape class cached under one torch version is traced again under another."""
    from paradyse_lab.app import replay_traces
    from paradyse_lab.core.model_spec import get_model

    monkeypatch.setenv("PARADYSE_TRACE_CACHE", str(tmp_path))
    spec = dataclasses.replace(get_model("gpt2-tiny"), dtype="fp32")
    opt = StrategyOption.parse("megatron_cz")
    replay_traces.SublayerTraces(spec, 2, device="cpu").shape_class("attention", opt)
    same = replay_traces.SublayerTraces(spec, 2, device="cpu")
    same.shape_class("attention", opt)
    assert same.traced == 0  # read from the cache
    monkeypatch.setattr(replay_traces, "software_versions", lambda *a, **k: {"torch": "0.0.0-other"})
    other = replay_traces.SublayerTraces(spec, 2, device="cpu")
    other.shape_class("attention", opt)
    assert other.traced > 0


def test_a_process_reads_each_cached_class_once(tmp_path, monkeypatch):
    """A second SublayerTraces of the process (one per cost model built) takes a class the process already read
    or wrote from memory, not the file: the same class the file holds; the installed runtime's digest, read once,
    is the digest of its folder."""
    import pickle

    from paradyse_lab.app import replay_traces
    from paradyse_lab.core.model_spec import get_model
    from paradyse_lab.results.result_key import package_folder

    monkeypatch.setenv("PARADYSE_TRACE_CACHE", str(tmp_path))
    spec = dataclasses.replace(get_model("gpt2-tiny"), dtype="fp32")
    opt = StrategyOption.parse("megatron_cz")
    written = replay_traces.SublayerTraces(spec, 2, device="cpu").shape_class("attention", opt)
    (path,) = tmp_path.glob("*.pkl")
    with open(path, "rb") as f:
        assert pickle.load(f) == written

    def no_read(_f):
        raise AssertionError("read the file again")

    monkeypatch.setattr(replay_traces.pickle, "load", no_read)
    again = replay_traces.SublayerTraces(spec, 2, device="cpu")
    assert again.shape_class("attention", opt) is written and again.traced == 0
    assert replay_traces.runtime_digest() == replay_traces.runtime_digest(package_folder("paradyse_lab.runtime"))
