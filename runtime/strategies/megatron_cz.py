"""MegatronCZ: ring context parallelism for attention, ZeRO-3 for the weights, on the unified layout.

Library module (no command). Megatron-LM context parallelism (ring attention, Liu et al. 2023) with
ZeRO-3 (Rajbhandari et al. 2020); the cost model's `megatron_cz` schedule. Attention on rank r: gather the full W_qkv,
W_proj (`zero3`); q, k, v of all heads for its t tokens (q and k rotated by the tokens' true positions
under rotary embeddings); ring attention (ring_attention.py: p - 1 K/V steps forward; K/V and dK/dV steps
backward); the full output projection. The MLP is zero3.MLP. Grouped-query attention: any kv_heads
dividing heads; the ring carries only the kv_heads K/V heads, so its K/V and dK/dV traffic is kv_heads/heads
of multi-head attention's. Kept (as the cost model counts): x, u = norm(x) [b, t, h], q and the output o
[b, heads, t, d], k, v [b, kv_heads, t, d], lse.
"""

from __future__ import annotations

import torch

from paradyse_lab.runtime.attention.kernels import merge_heads, split_heads
from paradyse_lab.runtime.attention.ring import ring_attention_backward, ring_attention_forward
from paradyse_lab.runtime.model.reference import add_bias
from paradyse_lab.runtime.model.sublayer import (
    Ctx,
    Impl,
    Weights,
    attention_sections,
    rope_qk,
    rope_qk_backward,
    weight_grad,
)
from paradyse_lab.runtime.strategies.flat_shards import join_sections, split_sections
from paradyse_lab.runtime.strategies.zero3 import (
    MLP,
    TILED_MLP,
    prepare_backward,
    project_in,
    project_in_backward,
    scatter_grad,
)


def _split_qkv(a: torch.Tensor, ctx: Ctx, h: int):
    """Gathered-weight QKV [b, t, n1] (p rank groups of q | k | v) -> rotated q [b, heads, t, d] and
    k, v [b, kv_heads, t, d]."""
    q, k, v = split_sections(a, attention_sections(ctx, h, 1), ctx.p)  # [b, t, h], [b, t, kv] x 2
    q, k = rope_qk(q, k, ctx.positions, ctx, h)  # this rank's tokens, rotated by their true positions
    # Each kept tensor owns its storage: at p > 1 the sections are copies already; at p = 1 they are views
    # of `a`, and keeping one view (v, or all three without rotary embeddings) would keep all of `a` alive.
    q, k, v = (z.contiguous() for z in (q, k, v))  # [b, t, h], [b, t, kv] x 2
    d = h // ctx.heads
    return tuple(split_heads(z, z.shape[-1] // d) for z in (q, k, v))  # [b, n, t, d]


def _join_qkv(dq, dk, dv, ctx: Ctx, h: int) -> torch.Tensor:
    """Inverse of `_split_qkv` (with the rotation's backward): [b, n, t, d] x 3 -> [b, t, n1] in
    gathered-weight order."""
    dq, dk = rope_qk_backward(merge_heads(dq), merge_heads(dk), ctx.positions, ctx, h)
    return join_sections([dq, dk, merge_heads(dv)], ctx.p)  # [b, t, h], [b, t, kv] x 2 -> [b, t, n1]


def forward(x, w: Weights, ctx: Ctx, prep=None):
    h = x.shape[-1]
    (_, _, w2), u, a = project_in(x, w, ctx, prep)  # a [b, t, h + 2kv]
    q, k, v = _split_qkv(a, ctx, h)
    o, lse = ring_attention_forward(q, k, v, ctx.causal, ctx.group, ctx.cu_seqlens)  # [b, heads, t, d]; K/V: kv only
    c = merge_heads(o)  # [b, heads, t, d] -> [b, t, h]
    return add_bias(x + c @ w2, w.b2), (x, u, q, k, v, o, lse)


def backward(saved, dy, w: Weights, ctx: Ctx, prep):
    x, u, q, k, v, o, lse = saved
    h = x.shape[-1]
    w2 = prep[2]
    sw2 = scatter_grad(weight_grad(merge_heads(o), dy), ctx, w.w2.dtype)  # [h, h] -> [h/p, h], reduce-scattered at once
    do = split_heads(dy @ w2.t(), ctx.heads)  # [b, t, h] -> [b, heads, t, d]
    dq, dk, dv = ring_attention_backward(do, q, k, v, o, lse, ctx.causal, ctx.group, ctx.cu_seqlens)
    da = _join_qkv(dq, dk, dv, ctx, h)  # [b, t, h + 2kv]
    return project_in_backward(x, u, da, sw2, dy, w, ctx, prep)  # [b, t, h + 2kv] -> [b, t, h]


ATTENTION = Impl("megatron_cz", forward, backward, prepare_backward)
__all__ = ["ATTENTION", "MLP", "TILED_MLP"]
