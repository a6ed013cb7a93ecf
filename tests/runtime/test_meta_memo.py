"""The meta kernels' memo (runtime/trace/meta_memo.py): a remembered call gives what the kernel gives, and only
meta-device calls of operators that return new tensors are remembered.

Run: `python -m pytest -q tests/runtime/test_meta_memo.py`. That a memoized trace still equals a real run operation
for operation is the operation tracer's distributed cases' (op_trace_cases.py, tpcp- / usp- / uneven-ops-traced).
"""

from __future__ import annotations

import op_trace_cases
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


def test_calls_off_the_meta_device_in_place_and_views_are_run():
    memo = MetaMemo()
    x, y = _meta(3, 4), _meta(3, 4)
    with memo:
        for _ in range(2):
            ones = torch.ones(2, 3)  # a factory on the CPU, no tensor argument: its values are needed
            assert ones.device.type == "cpu" and torch.equal(ones, torch.ones(2, 3))
            cpu = torch.full((3,), 2.0) * 2  # a CPU element-wise result
            assert cpu.device.type == "cpu" and torch.equal(cpu, torch.full((3,), 4.0))
            assert x.add_(y) is x  # in place: the input itself
            view = x.view(12)
            assert view._base is x  # a view shares the input's storage
    assert memo.hits == 0


def test_a_trace_with_the_memo_warm_equals_one_with_it_cleared():
    """The same sub-layer traced from a cleared memo and again from the memo the first trace filled: the same
    operations, the second without running a meta kernel it had run."""
    cfg, s = op_trace_cases.CFG, op_trace_cases.S
    option = StrategyOption.parse("metp+recompute")
    op_trace.META_MEMO.memo.clear()
    cold = op_trace.trace_sublayer(cfg, "attention", option, s, 4, dtype="fp32", rank=1)
    misses = op_trace.META_MEMO.misses
    warm = op_trace.trace_sublayer(cfg, "attention", option, s, 4, dtype="fp32", rank=1)
    assert warm == cold and op_trace.META_MEMO.misses == misses
