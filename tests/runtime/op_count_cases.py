"""Operators per layer and step of each strategy at most its torch-native peer's: one LLaMA block's forward and
backward counted by a TorchDispatchMode (runtime/trace/dispatch_count.py), run by tests/runtime/test_op_count.py
in a gloo world of 1 and of 2.

The block and the peers are examples/peer_benchmark.py's (hidden 512, 8 query / 4 K/V heads, ffn 1408, RMSNorm,
rotary, SwiGLU, fp32; here 64 tokens): ours under each strategy against torch TP + SP with torchtitan's plan
(megatron_ts), FSDP2 + Ulysses (ulysses_z) and FSDP2 + ring attention (megatron_cz) at p = 2, and against the
plain torch block at p = 1. Each side
runs one step to warm up (the rotary tables of its positions, made once per step by a model, and caches such
as the layout's orders fill then), then one counted step; ours must dispatch at most the peer's aten operators
(a DTensor operator counts once, as the mode sees it) and its output and input gradient must equal the fp64
single-device reference's.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path

from torch.testing import assert_close

OVER_MESSAGE = "aten operators per block step, over its peer's"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
S = 64
PEERS = {1: {"megatron_ts": "plain", "ulysses_z": "plain", "megatron_cz": "plain"},
         2: {"megatron_ts": "tensor_parallel", "ulysses_z": "fsdp_ulysses", "megatron_cz": "fsdp_ring"}}
"""World size -> our strategy -> its peer (a builder of examples/peer_blocks.py; 'plain': the plain block)."""


def _benchmark():
    """examples/peer_benchmark.py as a module (it imports examples/peer_blocks.py beside it)."""
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    module = sys.modules.get("peer_benchmark")
    if module is None:
        spec = importlib.util.spec_from_file_location("peer_benchmark", EXAMPLES / "peer_benchmark.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["peer_benchmark"] = module
        spec.loader.exec_module(module)
    return module


@functools.cache
def _reference():
    """(y, dx) of the fp64 plain block on the benchmark's layer and inputs: the same for every case of a rank,
    computed once (from its own copies of the seeded weights and inputs; ~0.13 CPU s a case and rank)."""
    pb = _benchmark()
    attn, mlp = pb._sublayers()
    x, dy = pb._inputs(S)
    return pb._reference(S, attn, mlp, x, dy)


def op_count_case(strategy: str):
    def case(rank: int, p: int, group) -> None:
        pb = _benchmark()
        peer_name = PEERS[p].get(strategy)
        if peer_name is None:
            return
        attn, mlp = pb._sublayers()
        x, dy = pb._inputs(S)
        ours = pb.Ours(strategy, S, attn, mlp, rank, p)
        peer = pb.make_peer(peer_name, S, attn, mlp, rank, p)
        counts = {}
        for name, impl in (("ours", ours), ("peer", peer)):
            pb._timed(impl, x, dy, p)  # warm-up
            counts[name] = pb._counted(impl, x, dy)[0]
        want_y, want_dx = _reference()
        xl = ours.local(x).requires_grad_()
        y = ours.step(xl, ours.local(dy))
        assert_close(ours.full(y.detach()).double(), want_y, rtol=1e-4, atol=1e-4)
        assert_close(ours.full(xl.grad).double(), want_dx, rtol=1e-4, atol=1e-4)
        print(f"OPS {strategy} {p} ours {counts['ours']} peer {counts['peer']}", flush=True)
        assert counts["ours"] <= counts["peer"], (
            f"{strategy} at p = {p}: {counts['ours']} {OVER_MESSAGE} ({peer_name}) {counts['peer']}")
    return case


CASES = {f"ops-{s}": op_count_case(s) for s in ("megatron_ts", "ulysses_z", "megatron_cz")}
