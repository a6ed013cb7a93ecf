"""METP: memory-efficient tensor parallelism (Liang et al., FITEE 2025), on the unified layout.

Library module (no command); priced by the cost model's `metp` schedule. Every rank keeps its t tokens; weights
travel, never activations of the whole sequence. A weight shard is the flat `cat(w1, b1, w2)` of one head group / one
block of f-columns (flat_shards.pack_shard).
- Attention: an outer loop over head groups g = 0..p-1. Shard g is broadcast from rank g along the ring
  by point-to-point messages (comm_p2p.chain_broadcast: each rank sends it at most once; the shard of g+1 is
  fetched before group g is computed: double buffering). With it every rank computes q, k, v of group g
  for its tokens (q and k rotated by their true positions under rotary embeddings), runs ring attention
  of that group (the ring attention: p - 1 K/V steps of [t, 2kv/p]: the group's kv_heads/p K/V heads,
  which needs kv_heads % p == 0), and adds its output times w2_g to the output.
- MLP: the shards rotate around the ring (p - 1 steps, the next shard in flight while the current one is
  applied); each rank adds GELU(u w1_g^T + b1_g) w2_g for its tokens.
Kept (as the cost model counts): the sub-layer input x and u = LN(x) [b, t, h], and for attention the output of all
heads and its lse.
Backward: the shards travel the same way again; the first GEMM of each shard (q, k, v / the f-wide
activation) is recomputed when the shard comes round; each shard's gradient partial is reduced onto its
owner by point-to-point (attention: comm_p2p.chain_reduce per group; MLP: a travelling accumulator that ends
at the owner), in fp32 for 16-bit weights (grad_reduce.GRAD_REDUCE_DTYPE: the partials and the accumulator are fp32 and
travel as such; the owner's sum is cast to the weights' dtype once). Per rank: p - 1 weight messages forward,
2(p - 1) backward (p - 1 of them gradient partials), as the cost model counts.
"""

from __future__ import annotations

import torch

from paradyse_lab.runtime.attention.kernels import merge_heads, split_heads
from paradyse_lab.runtime.attention.ring import ring_attention_backward, ring_attention_forward
from paradyse_lab.runtime.comm import grad_reduce
from paradyse_lab.runtime.comm import p2p as comm_p2p
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
from paradyse_lab.runtime.strategies.flat_shards import pack_shard, unpack_shard

_TAG_W, _TAG_G = 21, 22


def _own(w: Weights) -> torch.Tensor:
    return pack_shard(w.w1, w.b1, w.w2)  # [W/p]


def _partial_dtype(w: Weights, ctx: Ctx) -> torch.dtype:
    """The dtype of the gradient partials reduced onto the shards' owners: fp32 for 16-bit weights on p > 1 ranks
    (grad_reduce.GRAD_REDUCE_DTYPE; cast to the weights' dtype once summed), else the weights'."""
    return grad_reduce.grad_reduce_dtype(w.w1.dtype) if ctx.p > 1 else w.w1.dtype


# --- attention -----------------------------------------------------------------------------------------

def _broadcast(own, g: int, ctx: Ctx, sends: list):
    value, send = comm_p2p.chain_broadcast(own if ctx.rank == g else None, own, g, ctx.group, tag=_TAG_W)
    if send is not None:
        sends.append(send)
    return value


def _group_qkv(u, w1, b1, ctx: Ctx, h: int):
    """Head group g's rotated q [b, h/p heads, t, d] and k, v [b, kv/p heads, t, d] for this rank's tokens."""
    a = add_bias(u @ w1.t(), b1)  # [b, t, h] -> [b, t, (h + 2kv)/p]
    q, k, v = a.split(attention_sections(ctx, h, ctx.p), dim=-1)
    q, k = rope_qk(q, k, ctx.positions, ctx, h)
    d = h // ctx.heads
    return tuple(split_heads(z, z.shape[-1] // d) for z in (q, k, v))  # [b, n, t, d]


def attention_forward(x, w: Weights, ctx: Ctx, prep=None):
    b, t, h = x.shape
    u, own, sends = layer_norm(x, w, ctx), _own(w), []
    hl = ctx.heads // ctx.p
    o = torch.empty(b, ctx.heads, t, h // ctx.heads, dtype=x.dtype, device=x.device)
    lse = torch.empty(b, ctx.heads, t, dtype=torch.float32, device=x.device)
    y = add_bias(x, w.b2)
    nxt = _broadcast(own, 0, ctx, sends)
    for g in range(ctx.p):
        cur = nxt
        if g + 1 < ctx.p:
            nxt = _broadcast(own, g + 1, ctx, sends)  # next shard before this group's compute
        w1, b1, w2 = unpack_shard(cur, w.w1.shape[0], h, w.b1.shape[0])
        q, k, v = _group_qkv(u, w1, b1, ctx, h)
        o_g, lse_g = ring_attention_forward(q, k, v, ctx.causal, ctx.group, ctx.cu_seqlens)
        o[:, g * hl:(g + 1) * hl], lse[:, g * hl:(g + 1) * hl] = o_g, lse_g
        y = y + merge_heads(o_g) @ w2  # [b, t, h/p] -> [b, t, h]
    for s in sends:
        s.wait()
    return y, (x, u, o, lse)


def attention_backward(saved, dy, w: Weights, ctx: Ctx, prep=None):
    x, u, o, lse = saved
    h = x.shape[-1]
    own, sends = _own(w), []
    hl = ctx.heads // ctx.p
    du = torch.zeros_like(x)
    mine = None
    nxt = _broadcast(own, 0, ctx, sends)
    for g in range(ctx.p):
        cur = nxt
        if g + 1 < ctx.p:
            nxt = _broadcast(own, g + 1, ctx, sends)
        w1, b1, w2 = unpack_shard(cur, w.w1.shape[0], h, w.b1.shape[0])
        o_g, lse_g = o[:, g * hl:(g + 1) * hl], lse[:, g * hl:(g + 1) * hl]
        dw2 = weight_grad(merge_heads(o_g), dy)  # [h/p, h]
        do = split_heads(dy @ w2.t(), hl)  # [b, t, h] -> [b, h/p heads, t, d]
        q, k, v = _group_qkv(u, w1, b1, ctx, h)  # recomputed first GEMM (and rotation)
        dq, dk, dv = ring_attention_backward(do, q, k, v, o_g, lse_g, ctx.causal, ctx.group, ctx.cu_seqlens)
        dq, dk = rope_qk_backward(merge_heads(dq), merge_heads(dk), ctx.positions, ctx, h)
        da = torch.cat([dq, dk, merge_heads(dv)], dim=-1)  # [b, t, (h + 2kv)/p]
        du += da @ w1  # [b, t, (h + 2kv)/p] -> [b, t, h]
        part = pack_shard(weight_grad(da, u), bias_grad(da, b1), dw2, _partial_dtype(w, ctx))  # partial of shard g
        total, send = comm_p2p.chain_reduce(part, g, ctx.group, tag=_TAG_G)
        if send is not None:
            sends.append(send)
        if total is not None:
            mine = total
    for s in sends:
        s.wait()
    return _finish(x, dy, du, mine, w, ctx)


def _finish(x, dy, du, mine, w: Weights, ctx: Ctx):
    dx, dln_w, dln_b = layer_norm_backward(x, w, ctx, du)
    dw1, db1, dw2 = unpack_shard(mine, w.w1.shape[0], x.shape[-1], w.b1.shape[0])
    grads = {"ln_w": dln_w, "ln_b": dln_b, "w1": dw1, "b1": db1, "w2": dw2, "b2": bias_grad(dy, w.b2)}
    return dy + dx, grads


# --- MLP -----------------------------------------------------------------------------------------------

def mlp_forward(x, w: Weights, ctx: Ctx, prep=None):
    u = layer_norm(x, w, ctx)
    return _ring_forward(x, u, w, ctx, 0), (x, u)  # 0: every position at once, nothing chunked


def tiled_mlp_forward(x, w: Weights, ctx: Ctx, tile: int):
    """The ring MLP, each shard applied to `tile` of this rank's positions at a time:
    no [b, t, f/p] tensor of all of them exists."""
    return _ring_forward(x, layer_norm(x, w, ctx), w, ctx, tile)


def _ring_forward(x, u, w: Weights, ctx: Ctx, tile: int):
    """y = x + b2 + the MLP of u = norm(x) under every shard in turn (`_add_shard_output`)."""
    h = x.shape[-1]
    cur = _own(w)
    y = None
    for i in range(ctx.p):
        pending = comm_p2p.ring_exchange(cur, ctx.group, tag=_TAG_W) if i < ctx.p - 1 else None  # shard in flight
        w1, b1, w2 = unpack_shard(cur, w.w1.shape[0], h, w.b1.shape[0])
        y = _add_shard_output(y, x, u, w1, b1, w2, w.b2, ctx, tile)
        if pending is not None:
            cur = pending.wait()
    return y


def _add_shard_output(y, x, u, w1, b1, w2, b2, ctx: Ctx, tile: int):
    """y (None before the first shard: x + b2) plus one shard's MLP output [b, t, h], in place. `tile` > 0:
    `tile` positions at a time, into an output made first; 0 (the plain sub-layer): all positions at once, the
    first shard's product taking x + b2 in place, so no [b, t, h] output exists beside its [b, t, f/p]
    intermediates."""
    if not tile:
        out = mlp_core(add_bias(u @ w1.t(), b1), ctx) @ w2  # [b, t, h] -> [b, t, f/p] -> [b, t, h]
        return out.add_(add_bias(x, b2)) if y is None else y.add_(out)  # (x + b2) + each shard's product
    if y is None:  # the output, accumulated in place chunk by chunk (never x itself)
        y = x + b2 if b2.numel() else x.clone()
    start = 0
    for uc in u.split(tile, dim=1):  # [b, c, h] chunks
        end = start + uc.shape[1]
        y[:, start:end] += mlp_core(add_bias(uc @ w1.t(), b1), ctx) @ w2  # [b, c, h] -> [b, c, f/p] -> [b, c, h]
        start = end
    return y


def _shard_partial(u, dy, du, w1, b1, w2, ctx: Ctx, tile: int, dtype: torch.dtype):
    """This rank's gradient partial of one weight shard (packed in `dtype`), `tile` positions at a time (0: all at
    once, `_whole_partial`), adding its share to du. Chunks' weight gradients are summed in fp32 for 16-bit weights
    (`grad_accumulator`; counted by `tiled_mlp_work`)."""
    if not tile:
        return _whole_partial(u, dy, du, w1, b1, w2, ctx, dtype)
    dw1, db1, dw2 = grad_accumulator(w1), grad_accumulator(b1), grad_accumulator(w2)  # summed over chunks
    start = 0
    for uc, dyc in zip(u.split(tile, dim=1), dy.split(tile, dim=1)):  # [b, c, h] each
        end = start + uc.shape[1]
        a = add_bias(uc @ w1.t(), b1)  # recomputed: [b, c, h] -> [b, c, f/p] (SwiGLU: 2f/p)
        dw2 += weight_grad(mlp_core(a, ctx), dyc)  # [f/p, h]
        da = mlp_core_backward(a, dyc @ w2.t(), ctx)  # [b, c, h] -> [b, c, f/p] (SwiGLU: 2f/p)
        du[:, start:end] += da @ w1  # [b, c, n1/p] -> [b, c, h]
        dw1 += weight_grad(da, uc)
        db1 += bias_grad(da, b1)
        start = end
    return pack_shard(dw1, db1, dw2, dtype)  # [W/p]


def _whole_partial(u, dy, du, w1, b1, w2, ctx: Ctx, dtype: torch.dtype):
    """`_shard_partial` of all positions at once (the plain sub-layer): each weight gradient is its one GEMM's
    result in the model dtype, packed in `dtype`; nothing is summed, so no fp32 sums of the weights' size exist
    (the plain sub-layer's transient, `_metp`, counts none)."""
    a = add_bias(u @ w1.t(), b1)  # recomputed: [b, t, h] -> [b, t, f/p] (SwiGLU: 2f/p)
    dw2 = weight_grad(mlp_core(a, ctx), dy)  # [f/p, h]
    da = mlp_core_backward(a, dy @ w2.t(), ctx)  # [b, t, h] -> [b, t, f/p] (SwiGLU: 2f/p)
    du += da @ w1  # [b, t, n1/p] -> [b, t, h]
    return pack_shard(weight_grad(da, u), bias_grad(da, b1), dw2, dtype)  # [W/p]


def mlp_backward(saved, dy, w: Weights, ctx: Ctx, prep=None):
    x, u = saved
    return _ring_backward(x, u, dy, w, ctx, 0)  # 0: every position at once, nothing chunked


def tiled_mlp_backward(x, dy, w: Weights, ctx: Ctx, tile: int):
    """Backward of `tiled_mlp_forward`: u = norm(x) recomputed, each shard's gradient partial chunk by chunk."""
    return _ring_backward(x, layer_norm(x, w, ctx), dy, w, ctx, tile)


def _ring_backward(x, u, dy, w: Weights, ctx: Ctx, tile: int):
    h = x.shape[-1]
    cur = _own(w)
    du = torch.zeros_like(x)
    mine = acc_in = None
    for i in range(ctx.p):
        pending = comm_p2p.ring_exchange(cur, ctx.group, tag=_TAG_W) if i < ctx.p - 1 else None
        w1, b1, w2 = unpack_shard(cur, w.w1.shape[0], h, w.b1.shape[0])
        part = _shard_partial(u, dy, du, w1, b1, w2, ctx, tile, _partial_dtype(w, ctx))  # of shard (r - i) mod p
        if i == 0:
            mine = part
        else:
            if acc_in is not None:
                part = part + acc_in.wait()  # accumulator of this shard from rank r-1
            acc_in = comm_p2p.ring_exchange(part, ctx.group, tag=_TAG_G)  # on to r+1 (at i = p-1: the owner)
        if pending is not None:
            cur = pending.wait()
    if acc_in is not None:
        mine = mine + acc_in.wait()
    return _finish(x, dy, du, mine, w, ctx)


ATTENTION = Impl("metp", attention_forward, attention_backward)
MLP = Impl("metp", mlp_forward, mlp_backward)
TILED_MLP = TiledImpl("metp", tiled_mlp_forward, tiled_mlp_backward)
