"""Operators per layer and step of each strategy: one LLaMA block's forward and backward counted by a
TorchDispatchMode (runtime/trace/dispatch_count.py), run by tests/runtime/test_op_count.py in a gloo world of 1 and of
2.

A case runs the block once to warm up (caches such as the layout's orders fill then), then counts one step:
the attention and the MLP sub-layer (hidden 512, 8 query / 4 K/V heads, ffn 1408, RMSNorm, rotary, SwiGLU,
fp32, 64 tokens), the rotary tables of the step's positions computed in it, as in a model's first layer.
Each count must be at most `BOUNDS` (the counts these strategies issue; a change that adds operators fails
here and must raise its bound on purpose), and the output must equal the single-device reference's.
"""

from __future__ import annotations

import contextlib

import torch
from torch.testing import assert_close

from paradyse_lab.core.model_spec import ModelSpec
from paradyse_lab.core.strategies import StrategyOption
from paradyse_lab.runtime.model.layout import gather_sequence, gathered_positions, local_positions, shard_sequence
from paradyse_lab.runtime.model.parallel_gpt import run_option
from paradyse_lab.runtime.model.reference import init_state_dict, reference_sublayer
from paradyse_lab.runtime.model.sublayer import make_ctx
from paradyse_lab.runtime.model.weight_shards import PARAM_NAMES, shard_sublayer
from paradyse_lab.runtime.trace.dispatch_count import DispatchCount

CONFIG = ModelSpec(vocab_size=32, max_positions=0, hidden=512, heads=8, layers=1, ffn_hidden=1408, kv_heads=4,
                   norm="rmsnorm", ffn_kind="swiglu", bias=False, rope_theta=10000.0, tied=False, name="runtime")
S = 64
BOUNDS = {(1, "megatron_ts"): 263, (1, "ulysses_z"): 326, (1, "megatron_cz"): 342,
          (2, "megatron_ts"): 299, (2, "ulysses_z"): 380, (2, "megatron_cz"): 434}
"""(p, strategy) -> the most aten operators one block's forward and backward may dispatch on a rank. For
comparison, the torch-native peers of examples/peer_benchmark.py dispatch (same block, counted the same way):
the plain torch block 204 (p = 1), torch TP + SP with torchtitan's plan 234 (p = 2, a DTensor operator counted
once), FSDP2 + Ulysses 297 (p = 2)."""


def _step(strategy: str, rank: int, p: int, group, x, dy):
    """(y in natural order, aten operators of the counted step) of the block under `strategy`."""
    sd = init_state_dict(CONFIG, seed=0)
    option = StrategyOption(strategy, False, False, False)
    weights = {kind: [shard_sublayer({n: sd[f"layers.0.{part}.{n}"] for n in PARAM_NAMES}, kind, rank, p)[n]
                      .requires_grad_() for n in PARAM_NAMES] for kind, part in (("attention", "attn"), ("mlp", "mlp"))}

    def block(counter=None):
        positions = local_positions(S, p, rank)  # fresh tensors per step, as a model's forward makes them
        all_positions = gathered_positions(S, p)
        xl = shard_sequence(x, 1, group).requires_grad_()
        dyl = shard_sequence(dy, 1, group)
        with counter if counter is not None else contextlib.nullcontext():
            y = xl
            for kind in ("attention", "mlp"):
                ctx = make_ctx(CONFIG, group, kind, S, kind, positions=positions, all_positions=all_positions)
                y = run_option(option, ctx, y, weights[kind], 0)
            y.backward(dyl)
        return y

    block()
    counter = DispatchCount()
    y = block(counter)
    return gather_sequence(y.detach(), 1, group), counter.count("aten")


def _reference(x):
    sd = init_state_dict(CONFIG, seed=0)
    y = x
    for kind, part in (("attention", "attn"), ("mlp", "mlp")):
        y = reference_sublayer(y, {n: sd[f"layers.0.{part}.{n}"] for n in PARAM_NAMES}, kind, CONFIG)
    return y


def op_count_case(strategy: str):
    def case(rank: int, p: int, group) -> None:
        gen = torch.Generator().manual_seed(0)
        x, dy = (torch.randn(1, S, CONFIG.hidden, generator=gen) for _ in range(2))
        y, count = _step(strategy, rank, p, group, x, dy)
        assert_close(y, _reference(x), rtol=1e-4, atol=1e-4)
        bound = BOUNDS[(p, strategy)]
        assert count <= bound, f"{strategy} at p = {p}: {count} aten operators per block step, bound {bound}"
        print(f"OPS {strategy} {p} {count}", flush=True)
    return case


CASES = {f"ops-{s}": op_count_case(s) for s in ("megatron_ts", "ulysses_z", "megatron_cz")}
