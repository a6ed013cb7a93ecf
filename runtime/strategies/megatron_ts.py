"""MegatronTS: Megatron-LM tensor parallelism with sequence parallelism, on the unified layout.

Library module (no command). Korthikanti et al., "Reducing Activation Recomputation in Large Transformer
Models" (MLSys 2023) section 4.2.2; the cost model's `megatron_ts` schedule. Per sub-layer on rank r:
forward: u = norm(x) [b, t, h]; all-gather u -> U [b, s, h]; column-parallel GEMM with this rank's w1 rows
(attention: its heads' q, and its kv_heads/p K/V heads, which needs kv_heads % p == 0; MLP: its
f-columns, SwiGLU: of gate and up); the core (rotary embeddings by the gathered tokens' true positions,
attention of its heads over the whole sequence / GELU or SwiGLU); row-parallel GEMM with its w2 rows ->
partial [b, s, h]; reduce-scatter -> [b, t, h].
Kept (Korthikanti et al. 2023 section 4.2.2, as the cost model counts): x, u [b, t, h] (sequence-sharded,
as Megatron's sequence parallelism keeps it), the core input and output (MLP: a [b, s, f/p] (SwiGLU:
[b, s, 2f/p]) and its activation [b, s, f/p]; attention: q, k, v (k, v: [b, KV/p, s, d]), the output
o [b, H/p, s, d] in natural order and lse of its heads). The attention
output is kept once: c [b, s, h/p] in gathered order, the input of the row-parallel GEMM, is o permuted
locally (`gathered_output`), re-derived in backward. Backward: all-gather dy, all-gather the kept u again,
reduce-scatter dU.
"""

from __future__ import annotations

import torch

from paradyse_lab.runtime.attention.gathered import (
    gathered_attention_backward,
    gathered_attention_forward,
    gathered_order,
    gathered_output,
)
from paradyse_lab.runtime.comm import collectives as comm
from paradyse_lab.runtime.model.reference import add_bias
from paradyse_lab.runtime.model.sublayer import (
    Ctx,
    Impl,
    TiledImpl,
    Weights,
    attention_sections,
    bias_grad,
    grad_accumulator,
    layer_norm,
    layer_norm_backward,
    mlp_core,
    mlp_core_backward,
    rope_qk,
    rope_qk_backward,
    weight_grad,
)


def gather_seq(x: torch.Tensor, group) -> torch.Tensor:
    """[b, t, h] -> [b, p*t, h] (rank-major token order); for b = 1 the gathered buffer is already
    [1, p*t, h], so no transpose is dispatched."""
    if comm.size(group) == 1:
        return x
    if x.shape[0] == 1:
        return comm.all_gather(x, group, dim=1)  # [1, t, h] -> [1, p*t, h]
    full = comm.all_gather(x.transpose(0, 1), group)  # [t, b, h] -> [p*t, b, h]
    return full.transpose(0, 1)  # [p*t, b, h] -> [b, p*t, h]


def scatter_seq(x: torch.Tensor, group) -> torch.Tensor:
    """Sum over ranks and keep this rank's tokens: [b, p*t, h] -> [b, t, h] (no transpose for b = 1)."""
    if comm.size(group) == 1:
        return x
    if x.shape[0] == 1:
        return comm.reduce_scatter(x, group, dim=1)  # [1, p*t, h] -> [1, t, h]
    part = comm.reduce_scatter(x.transpose(0, 1), group)  # [p*t, b, h] -> [t, b, h]
    return part.transpose(0, 1)  # [t, b, h] -> [b, t, h]


def _core_forward(a, ctx: Ctx, h: int):
    """The core on this rank's columns [b, s, n1/p] (gathered order) -> (c [b, s, n2/p], what it keeps)."""
    if ctx.kind == "mlp":
        return mlp_core(a, ctx), a
    q, k, v = a.split(attention_sections(ctx, h, ctx.p), dim=-1)  # this rank's q | k | v heads
    q, k = rope_qk(q, k, ctx.all_positions, ctx, h)  # every token rotated by its true position
    order = gathered_order(ctx, a.device)
    if ctx.rope_theta and order is None:  # p = 1: nothing reorders v, and rotated q, k no longer share a's storage
        v = v.contiguous()  # [b, s, kv/p] of its own, so the kept v does not keep the whole [b, s, n1/p] alive
    return gathered_attention_forward(q, k, v, ctx.heads // ctx.p, order, ctx.causal, ctx.cu_seqlens)


def _core_backward(dc, core_saved, ctx: Ctx, h: int):
    if ctx.kind == "mlp":
        return mlp_core_backward(core_saved, dc, ctx)
    order = gathered_order(ctx, dc.device)
    dq, dk, dv = gathered_attention_backward(dc, core_saved, order, ctx.causal, ctx.cu_seqlens)
    dq, dk = rope_qk_backward(dq, dk, ctx.all_positions, ctx, h)
    return torch.cat([dq, dk, dv], dim=-1)  # [b, s, n1/p]


def _core_output(core_saved, ctx: Ctx):
    """The core's output c [b, s, n2/p] in gathered order from what the core keeps (attention only)."""
    order = gathered_order(ctx, core_saved[3].device)
    return gathered_output(core_saved[3], order)  # o [b, H/p, s, d] natural -> [b, s, h/p] gathered


def forward(x, w: Weights, ctx: Ctx, prep=None):
    h = x.shape[-1]
    u = layer_norm(x, w, ctx)  # [b, t, h], kept sequence-sharded
    big_u = gather_seq(u, ctx.group)  # [b, t, h] -> [b, s, h]
    a = add_bias(big_u @ w.w1.t(), w.b1)  # [b, s, h] -> [b, s, n1/p]
    c, core_saved = _core_forward(a, ctx, h)  # [b, s, n1/p] -> [b, s, n2/p]
    z = scatter_seq(c @ w.w2, ctx.group)  # [b, s, n2/p] -> [b, s, h] partial -> [b, t, h]
    kept_c = c if ctx.kind == "mlp" else None  # attention: c is the kept o permuted (`_core_output`)
    return add_bias(x + z, w.b2), (x, u, kept_c, core_saved)


def backward(saved, dy, w: Weights, ctx: Ctx, prep=None):
    x, u, c, core_saved = saved
    h = x.shape[-1]
    if c is None:
        c = _core_output(core_saved, ctx)  # [b, s, h/p] in gathered order
    # each whole-sequence temporary is dropped once used, so the norm's backward runs beside none of them
    big_dy = gather_seq(dy, ctx.group)  # [b, t, h] -> [b, s, h]
    dw2 = weight_grad(c, big_dy)  # [n2/p, h]
    dc = big_dy @ w.w2.t()  # [b, s, h] -> [b, s, n2/p]
    del big_dy, c
    da = _core_backward(dc, core_saved, ctx, h)  # [b, s, n2/p] -> [b, s, n1/p]
    del dc
    big_u = gather_seq(u, ctx.group)  # again, from the kept shard: [b, t, h] -> [b, s, h]
    dw1, db1 = weight_grad(da, big_u), bias_grad(da, w.b1)
    del big_u
    du = scatter_seq(da @ w.w1, ctx.group)  # [b, s, n1/p] -> [b, s, h] partial -> [b, t, h]
    del da
    dx, dln_w, dln_b = layer_norm_backward(x, w, ctx, du)
    grads = {"ln_w": dln_w, "ln_b": dln_b, "w1": dw1, "b1": db1, "w2": dw2, "b2": bias_grad(dy, w.b2)}
    return dy + dx, grads


def tiled_mlp_forward(x, w: Weights, ctx: Ctx, tile: int):
    """The MLP `tile` positions of this rank at a time: each chunk is gathered, run
    and
    reduce-scattered on its own, so no [b, s, f/p] tensor of the whole sequence exists."""
    out = []
    for xc in x.split(tile, dim=1):  # [b, c, h] chunks of this rank's positions
        big_u = gather_seq(layer_norm(xc, w, ctx), ctx.group)  # [b, c, h] -> [b, p*c, h]
        c = mlp_core(add_bias(big_u @ w.w1.t(), w.b1), ctx)  # [b, p*c, h] -> [b, p*c, n1/p] -> [b, p*c, f/p]
        out.append(add_bias(xc + scatter_seq(c @ w.w2, ctx.group), w.b2))  # [b, p*c, f/p] -> [b, p*c, h] -> [b, c, h]
    return torch.cat(out, dim=1)  # [b, t, h]


def tiled_mlp_backward(x, dy, w: Weights, ctx: Ctx, tile: int):
    """Backward of `tiled_mlp_forward` chunk by chunk: the chunk's norm output is recomputed and gathered again,
    its first GEMM and activation recomputed; dy gathered and du reduce-scattered per chunk."""
    dx = torch.empty_like(x)
    grads = {n: grad_accumulator(getattr(w, n)) for n in ("ln_w", "ln_b", "w1", "b1", "w2")}  # summed over chunks
    start = 0
    for xc, dyc in zip(x.split(tile, dim=1), dy.split(tile, dim=1)):  # [b, c, h] each
        big_u = gather_seq(layer_norm(xc, w, ctx), ctx.group)  # [b, c, h] -> [b, p*c, h]
        a = add_bias(big_u @ w.w1.t(), w.b1)  # [b, p*c, n1/p]
        big_dy = gather_seq(dyc, ctx.group)  # [b, c, h] -> [b, p*c, h]
        grads["w2"] += weight_grad(mlp_core(a, ctx), big_dy)  # [f/p, h]
        da = mlp_core_backward(a, big_dy @ w.w2.t(), ctx)  # [b, p*c, h] -> [b, p*c, n1/p]
        grads["w1"] += weight_grad(da, big_u)
        grads["b1"] += bias_grad(da, w.b1)
        du = scatter_seq(da @ w.w1, ctx.group)  # [b, p*c, n1/p] -> [b, p*c, h] partial -> [b, c, h]
        dxc, dln_w, dln_b = layer_norm_backward(xc, w, ctx, du)
        dx[:, start:start + xc.shape[1]] = dyc + dxc
        grads["ln_w"] += dln_w
        grads["ln_b"] += dln_b
        start += xc.shape[1]
    grads = {n: g.to(getattr(w, n).dtype) for n, g in grads.items()}
    grads["b2"] = bias_grad(dy, w.b2)
    return dx, grads


ATTENTION = Impl("megatron_ts", forward, backward)
MLP = Impl("megatron_ts", forward, backward)
TILED_MLP = TiledImpl("megatron_ts", tiled_mlp_forward, tiled_mlp_backward)
