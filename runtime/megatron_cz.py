"""MegatronCZ: ring context parallelism for attention, ZeRO-3 for the weights, on the unified layout.

Library module (no command). Megatron-LM context parallelism (ring attention, Liu et al. 2023) with
ZeRO-3 (Rajbhandari et al. 2020); schedules.py `megatron_cz`. Attention on rank r: gather the full W_qkv,
W_proj (zero3.py); q, k, v of all heads for its t tokens; ring attention (ring_attention.py: p - 1 K/V
steps forward; K/V and dK/dV steps backward); the full output projection. The MLP is zero3.MLP.
Kept (schedules.py): x, u = LN(x) [b, t, h], q, k, v and the output o [b, heads, t, d], lse.
"""

from __future__ import annotations

import torch

from runtime.attention import merge_heads, split_heads
from runtime.ring_attention import ring_attention_backward, ring_attention_forward
from runtime.sublayer import Ctx, Impl, Weights, layer_norm, layer_norm_backward, weight_grad
from runtime.zero3 import MLP, gather_weights, prepare_backward, scatter_grads


def _split_qkv(a: torch.Tensor, ctx: Ctx):
    """Gathered-weight QKV [b, t, p*3*h/p] (per head group: q, k, v) -> q, k, v [b, heads, t, d]."""
    b, t, n = a.shape
    g = a.view(b, t, ctx.p, 3, n // (3 * ctx.p))  # [b, t, 3h] -> [b, t, p, 3, h/p]
    return tuple(split_heads(g[:, :, :, j].reshape(b, t, -1), ctx.heads) for j in range(3))  # [b, heads, t, d]


def _join_qkv(dq, dk, dv, ctx: Ctx) -> torch.Tensor:
    """Inverse of `_split_qkv`: 3 x [b, heads, t, d] -> [b, t, 3h] in gathered-weight order."""
    parts = [merge_heads(x).unflatten(-1, (ctx.p, -1)) for x in (dq, dk, dv)]  # [b, t, p, h/p] each
    return torch.stack(parts, dim=3).flatten(2)  # [b, t, p, 3, h/p] -> [b, t, 3h]


def forward(x, w: Weights, ctx: Ctx, prep=None):
    w1, b1, w2 = prep if prep is not None else gather_weights(w, ctx)
    u = layer_norm(x, w, ctx)  # [b, t, h], kept
    a = u @ w1.t() + b1  # [b, t, h] -> [b, t, 3h]
    q, k, v = _split_qkv(a, ctx)
    o, lse = ring_attention_forward(q, k, v, ctx.causal, ctx.group)  # [b, heads, t, d]
    c = merge_heads(o)  # [b, heads, t, d] -> [b, t, h]
    return x + c @ w2 + w.b2, (x, u, q, k, v, o, lse)


def backward(saved, dy, w: Weights, ctx: Ctx, prep):
    x, u, q, k, v, o, lse = saved
    w1, b1, w2 = prep
    dw2 = weight_grad(merge_heads(o), dy)  # [h, h]
    do = split_heads(dy @ w2.t(), ctx.heads)  # [b, t, h] -> [b, heads, t, d]
    dq, dk, dv = ring_attention_backward(do, q, k, v, o, lse, ctx.causal, ctx.group)
    da = _join_qkv(dq, dk, dv, ctx)  # [b, t, 3h]
    dw1, db1 = weight_grad(da, u), da.sum((0, 1))
    dx, dln_w, dln_b = layer_norm_backward(x, w, ctx, da @ w1)  # [b, t, 3h] -> [b, t, h]
    sw1, sb1, sw2 = scatter_grads(dw1, db1, dw2, ctx)
    grads = {"ln_w": dln_w, "ln_b": dln_b, "w1": sw1, "b1": sb1, "w2": sw2, "b2": dy.sum((0, 1))}
    return dy + dx, grads


ATTENTION = Impl("megatron_cz", forward, backward, prepare_backward)
__all__ = ["ATTENTION", "MLP"]
