"""The meta kernels' memo: a remembered call gives what the kernel gives, and only
meta-device calls of operators that return new tensors are remembered.

Run: `python -m pytest -q tests/runtime/test_meta_memo.py`. That a memoized trace still equals a real run operation
for operation is the operation tracer's distributed cases' (tpcp- / usp- / uneven-ops-traced and op-trace-*).
"""

from __future__ import annotations

import op_trace_cases
import pytest
import torch

from paradyse_lab.core.strategies import StrategyOption
from paradyse_lab.runtime.trace import op_trace
from paradyse_lab.runtime.trace.meta_memo import MetaMemo


def _meta(*shape):
    return torch.empty(*shape, device="meta")


def test_a_remembered_call_returns_a_new_tensor_of_the_kernels_metadata():
    x = _meta(4, 6).t()  # strides (1, 6): the kernel's output follows the input's layout
    want = torch.nn.functional.gelu(x)
    memo = MetaMemo()
    with memo:
        first = torch.nn.functional.gelu(x)
        again = torch.nn.functional.gelu(x)
    assert memo.hits >= 1
    for got in (first, again):
        assert (got.shape, got.stride(), got.dtype, got.device) == (want.shape, want.stride(), want.dtype, want.device)
    assert again is not first and again is not x


def test_calls_off_the_meta_device_and_views_are_run():
    memo = MetaMemo()
    x = _meta(3, 4)
    with memo:
        for _ in range(2):
            ones = torch.ones(2, 3)  # a factory on the CPU, no tensor argument: its values are needed
            assert ones.device.type == "cpu" and torch.equal(ones, torch.ones(2, 3))
            cpu = torch.full((3,), 2.0) * 2  # a CPU element-wise result
            assert cpu.device.type == "cpu" and torch.equal(cpu, torch.full((3,), 4.0))
            cpu.add_(1)  # in place off the meta device: its values are needed
            view = x.view(12)
            assert view._base is x  # a view shares the input's storage
    assert memo.hits == 0 and torch.equal(cpu, torch.full((3,), 5.0))


def test_a_repeated_call_that_writes_an_input_returns_that_input():
    """In place and through `out=`, a repeated meta call returns the input it writes, as the kernel does; an `out=`
    the kernel resizes is not remembered (each call resizes it again), and a call the kernel refuses still
    raises."""
    x, y, lse = _meta(3, 4), _meta(3, 4), _meta(3)
    memo = MetaMemo()
    with memo:
        for _ in range(2):
            assert x.add_(y) is x and x.shape == (3, 4)
            assert torch.logaddexp(lse, lse, out=lse) is lse and lse.shape == (3,)
    assert memo.hits == 2
    outs, bad = [_meta(0), _meta(0)], _meta(5)
    with memo:
        for out in outs:
            assert torch.add(x, y, out=out) is out and out.shape == (3, 4) and out.stride() == (4, 1)
            with pytest.raises(RuntimeError):
                x.add_(bad)  # does not broadcast to x's shape
    assert memo.hits == 2


def test_a_scalar_of_another_type_or_another_default_dtype_is_another_call():
    """1, 1.0 and True are equal and hash alike, yet promote an int tensor to other dtypes; a float scalar takes the
    default dtype. Each is a call of its own, answered as the kernel answers it."""
    ints, flags = torch.empty(3, dtype=torch.int64, device="meta"), torch.empty(3, dtype=torch.bool, device="meta")
    memo = MetaMemo()
    with memo:
        assert (ints + 1).dtype == torch.int64 and (ints + 1.0).dtype == torch.float32
        assert (flags * True).dtype == torch.bool and (flags * 1).dtype == torch.int64
        assert torch.full((2,), 1, device="meta").dtype == torch.int64
        assert torch.full((2,), 1.0, device="meta").dtype == torch.float32
        before = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        try:
            assert (ints + 1.0).dtype == torch.float64
        finally:
            torch.set_default_dtype(before)


def test_a_trace_through_the_memo_equals_one_that_runs_every_meta_kernel(monkeypatch):
    """The same sub-layer traced through the memo (cold, then warm) and with the memo answering nothing: the same
    operations; the warm trace without running a meta kernel the cold one had run."""
    cfg, s = op_trace_cases.CFG, op_trace_cases.S
    option = StrategyOption.parse("metp+recompute")
    op_trace.META_MEMO.memo.clear()
    cold = op_trace.trace_sublayer(cfg, "attention", option, s, 4, dtype="fp32", rank=1)
    misses = op_trace.META_MEMO.misses
    warm = op_trace.trace_sublayer(cfg, "attention", option, s, 4, dtype="fp32", rank=1)
    assert warm == cold and op_trace.META_MEMO.misses == misses
    monkeypatch.setattr(op_trace.META_MEMO, "returns_fresh", lambda func: False)  # every call runs its kernel,
    monkeypatch.setattr(op_trace.META_MEMO, "written_input", lambda func: None)  # in place and `out=` ones too
    hits = op_trace.META_MEMO.hits
    plain = op_trace.trace_sublayer(cfg, "attention", option, s, 4, dtype="fp32", rank=1)
    assert plain == cold and op_trace.META_MEMO.hits == hits


def test_a_repeated_set_takes_the_sources_storage():
    """`set_` from a source of the same metadata leaves the target's metadata as it was yet makes it view the
    source's storage: a repeated call must run the kernel, not return the target untouched."""
    memo = MetaMemo()
    with memo:
        for _ in range(2):
            target, source = _meta(4), _meta(4)
            target.set_(source)
            assert target.untyped_storage()._cdata == source.untyped_storage()._cdata
