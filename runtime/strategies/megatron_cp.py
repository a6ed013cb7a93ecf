"""Tensor x context parallel: Megatron tensor parallelism with sequence parallelism inside groups of a ranks,
zig-zag ring attention over the b = p / a groups, on the unified layout.

Library module (no command). Megatron-LM's TP x CP (Korthikanti et al. 2023 for TP + SP; Megatron-Core's context
parallelism for the ring), priced by `megatron_cp_work`. The p ranks of the layer's group form a x b as in Ulysses x
ring (the same subgroups): tensor group j is the consecutive ranks j*a .. j*a + a - 1, ring group i the ranks i,
a + i, 2a + i, ...; rank r is member i = r % a of tensor group j = r // a. In the unified layout the a ranks of a
tensor group hold exactly ring member j's zig-zag tokens of a ring over b ranks (`ulysses_ring.ring_order`), so
all-gathering the group's tokens gives one ring member's tokens after a local permutation, and no token moves
between sub-layers or strategies.

Sub-layer on rank r (megatron_ts at degree a, with the attention's K/V around the ring group): u = norm(x) [b, t, h]
kept; all-gather u in the tensor group -> [b, a*t, h]; column-parallel GEMM with the rank's a-th of the heads (q
heads i*H/a.., K/V heads i*KV/a..: kv_heads % a == 0) or of the f-columns; attention of those heads over the
whole sequence by ring attention over the ring group (the gathered tokens put in ring order, rotated by their
true positions); row-parallel GEMM; reduce-scatter in the tensor group -> [b, t, h]. The MLP is megatron_ts's
MLP at degree a.

Weights. The runtime stores one 1/p shard per rank for every strategy (p-block r of each row section); this
strategy needs a 1/a tensor-parallel shard, a-block i = p-blocks i*b .. i*b + b - 1, on the b ranks of ring group i.
Fetched per pass as ZeRO-3 fetches, not kept: (1) one point-to-point exchange in the layer's group puts p-block
i*b + (j + c) % b on rank r (the shift c makes the exchange a derangement, `_shift`: every rank sends one W/p
shard and receives one, so every rank sends the same bytes); (2) an all-gather in ring group i ([W/p] -> [W/a]);
(3) the b blocks reordered into the a-block's section order (megatron_ts's shard layout at degree a). The
backward fetches them again; the a-block's gradient is reduce-scattered over the ring group (in fp32, as every
sharded gradient) and each summed p-block goes back to its owner by the inverse exchange. So the model states stay
1/p (the runtime's storage), the gathered weights are a transient 1/a, and the gradient traffic is a reduce-scatter
over b plus one shard. Megatron itself keeps the 1/a shard replicated over the context-parallel ranks and
all-reduces its gradient over them; over the shared storage this costs one extra W/p exchange each way instead.
Kept (attention): x, u [b, t, h], the ring's q, k, v, o [b, heads/a, a*t, d] and lse; the output projection's
input is o permuted back (re-derived in the backward, as megatron_ts does).
"""

from __future__ import annotations

from functools import cache

import torch

from paradyse_lab.core.strategies import exchange_shift
from paradyse_lab.runtime.attention.kernels import merge_heads, split_heads
from paradyse_lab.runtime.attention.ring import ring_attention_backward, ring_attention_forward
from paradyse_lab.runtime.comm import collectives as comm
from paradyse_lab.runtime.comm import grad_reduce, p2p
from paradyse_lab.runtime.model.layout import layout_documents
from paradyse_lab.runtime.model.reference import add_bias
from paradyse_lab.runtime.model.rope import cached_derived
from paradyse_lab.runtime.model.sublayer import (
    Ctx,
    Impl,
    TiledImpl,
    Weights,
    attention_sections,
    bias_grad,
    layer_norm,
    layer_norm_backward,
    rope_qk,
    rope_qk_backward,
    weight_grad,
)
from paradyse_lab.runtime.model.weight_shards import join_row_blocks, row_block, row_sections
from paradyse_lab.runtime.strategies import megatron_ts
from paradyse_lab.runtime.strategies.flat_shards import pack_shard, unpack_shard
from paradyse_lab.runtime.strategies.megatron_ts import gather_seq, scatter_seq
from paradyse_lab.runtime.strategies.ulysses_ring import ring_order, split_ctx

_TAG_WEIGHTS = 7
"""Point-to-point tag of the weight and gradient exchanges (the ring's messages have their own)."""


def _shift(p: int, a: int) -> int:
    """The shift c of the weight exchange (module docstring; `exchange_shift`): the catalog refuses the splits that
    have none, so a plan never reaches one here."""
    c = exchange_shift(p, a)
    if c is None:
        raise ValueError(f"megatron_cp: no fixed-point-free weight exchange for a = {a}, b = {p // a}")
    return c


def exchange_peers(p: int, a: int, r: int) -> tuple[int, int, int]:
    """(src, dst, c) of group rank r: it holds p-block src during the layer (received from rank src) and sends its
    own p-block r to rank dst; c the exchange's shift. src == dst == r when nothing moves."""
    b, c = p // a, _shift(p, a)
    src = (r % a) * b + (r // a + c) % b
    dst = ((r % b - c) % b) * a + r // b
    return src, dst, c


def gather_weights(w: Weights, ctx: Ctx, a: int):
    """This rank's tensor-parallel a-block (w1 [n1/a, h], b1 [n1/a or 0], w2 [n2/a, h]) in megatron_ts's shard
    layout at degree a (each row section's rows one after another), from the 1/p shards (module docstring)."""
    b = ctx.p // a
    if b == 1:  # a = p: the shard is the block
        return w.w1, w.b1, w.w2
    src, dst, c = exchange_peers(ctx.p, a, ctx.rank)
    flat = pack_shard(w.w1, w.b1, w.w2)  # [W/p]: p-block r
    if src != ctx.rank:  # p-block r to rank dst, p-block src from rank src
        flat = p2p.exchange(flat, dst, src, group=ctx.group, tag=_TAG_WEIGHTS).wait()  # [W/p] -> [W/p]
    full = comm.all_gather(flat, split_ctx(ctx, a)[1]).view(b, -1)  # [W/p] -> [b, W/p], member jj: block (jj + c) % b
    n1p, h, nb1p = w.w1.shape[0], w.w1.shape[1], w.b1.shape[0]
    blocks = [unpack_shard(full[(m - c) % b], n1p, h, nb1p) for m in range(b)]  # the a-block's p-blocks in order
    sections = row_sections(ctx.kind, b * n1p, b * w.w2.shape[0])
    w1 = join_row_blocks([blk[0] for blk in blocks], sections)  # b x [n1/p, h] -> [n1/a, h], section by section
    b1 = join_row_blocks([blk[1] for blk in blocks], sections) if nb1p else w.b1.new_empty(0)  # [n1/a]
    return w1, b1, torch.cat([blk[2] for blk in blocks])  # b x [n2/p, h] -> [n2/a, h]


def scatter_grads(dw1, db1, dw2, ctx: Ctx, a: int, dtype: torch.dtype):
    """This rank's 1/p shard of the a-block gradients (`gather_weights`' layout) summed over the ring group: one
    reduce-scatter in fp32 (grad_reduce) of the blocks in the gather's order, then the summed p-block back to its
    owner (the inverse exchange)."""
    b = ctx.p // a
    if b == 1:  # a = p: nothing to sum, the block is the shard
        return dw1.to(dtype), db1.to(dtype), dw2.to(dtype)
    src, dst, c = exchange_peers(ctx.p, a, ctx.rank)
    sections = row_sections(ctx.kind, dw1.shape[0], dw2.shape[0])
    n2p = dw2.shape[0] // b
    packed = torch.cat([pack_shard(row_block(dw1, sections, m, b), row_block(db1, sections, m, b),
                                   dw2[m * n2p:(m + 1) * n2p])
                        for m in ((jj + c) % b for jj in range(b))])  # [b*W/p] = [W/a], member jj's block jj
    shard = grad_reduce.reduce_scatter_grads(packed, split_ctx(ctx, a)[1])  # [W/a] -> [W/p]: p-block src, summed
    if src != ctx.rank:  # p-block src back to its owner, this rank's own from rank dst
        shard = p2p.exchange(shard, src, dst, group=ctx.group, tag=_TAG_WEIGHTS).wait()  # [W/p] -> [W/p]
    w1, b1, w2 = unpack_shard(shard, dw1.shape[0] // b, dw1.shape[1], db1.shape[0] // b)
    return w1.to(dtype), b1.to(dtype), w2.to(dtype)


def _tensor_parallel(a: int, w: Weights, ctx: Ctx, prep):
    """(the sub-layer's weights with its a-block in place of w1, b1, w2, the tensor group's Ctx)."""
    w1, b1, w2 = prep if prep is not None else gather_weights(w, ctx, a)
    return w._replace(w1=w1, b1=b1, w2=w2), split_ctx(ctx, a)[0]


def _scatter(a: int, grads: dict, w: Weights, ctx: Ctx) -> dict:
    """`grads` with the a-block's w1, b1, w2 gradients replaced by this rank's summed 1/p shards."""
    grads["w1"], grads["b1"], grads["w2"] = scatter_grads(grads["w1"], grads["b1"], grads["w2"], ctx, a, w.w1.dtype)
    return grads


def _positions(ctx: Ctx, a: int, order):
    """True positions of the tensor group's gathered tokens in ring order [a*t], or None without rotary; derived
    once per step's positions (`cached_derived`), so that their rotary tables are made once too, not in every
    forward and backward."""
    if not ctx.rope_theta:
        return None
    t = ctx.positions.shape[0]
    j = ctx.rank // a
    layout = layout_documents(ctx.cu_seqlens, ctx.p) or (ctx.seq_len,)
    return cached_derived(ctx.all_positions, ("ring order", ctx.p, a, j, layout), lambda: ctx.all_positions[
        j * a * t:(j + 1) * a * t].index_select(0, order))  # member-major [a*t] -> ring order


def _attention_forward(a: int, x, w: Weights, ctx: Ctx, prep=None):
    h = x.shape[-1]
    d = h // ctx.heads
    wt, tctx = _tensor_parallel(a, w, ctx, prep)
    ring = split_ctx(ctx, a)[1]
    order, inverse = ring_order(ctx, a, x.device)
    u = layer_norm(x, w, ctx)  # [b, t, h], kept sequence-sharded
    qkv = add_bias(gather_seq(u, tctx.group) @ wt.w1.t(), wt.b1)  # [b, t, h] -> [b, a*t, h] -> [b, a*t, n1/a]
    q, k, v = qkv.index_select(1, order).split(attention_sections(ctx, h, a), dim=-1)  # ring order, its heads
    q, k = rope_qk(q, k, _positions(ctx, a, order), ctx, h)
    q, k, v = (split_heads(z, z.shape[-1] // d).contiguous() for z in (q, k, v))  # [b, a*t, n] -> [b, n/d, a*t, d]
    o, lse = ring_attention_forward(q, k, v, ctx.causal, ring, ctx.cu_seqlens, ctx.p)  # [b, heads/a, a*t, d]
    c = merge_heads(o).index_select(1, inverse)  # [b, heads/a, a*t, d] -> [b, a*t, h/a], member-major
    z = scatter_seq(c @ wt.w2, tctx.group)  # [b, a*t, h/a] -> [b, a*t, h] partial -> [b, t, h]
    return add_bias(x + z, w.b2), (x, u, q, k, v, o, lse)


def _attention_backward(a: int, saved, dy, w: Weights, ctx: Ctx, prep):
    x, u, q, k, v, o, lse = saved
    h = x.shape[-1]
    wt, tctx = _tensor_parallel(a, w, ctx, prep)
    ring = split_ctx(ctx, a)[1]
    order, inverse = ring_order(ctx, a, x.device)
    c = merge_heads(o).index_select(1, inverse)  # [b, a*t, h/a], member-major (the kept o permuted)
    big_dy = gather_seq(dy, tctx.group)  # [b, t, h] -> [b, a*t, h]
    dw2 = weight_grad(c, big_dy)  # [h/a, h]
    dc = (big_dy @ wt.w2.t()).index_select(1, order)  # [b, a*t, h] -> [b, a*t, h/a], ring order
    del big_dy, c
    dq, dk, dv = ring_attention_backward(split_heads(dc, ctx.heads // a), q, k, v, o, lse, ctx.causal, ring,
                                         ctx.cu_seqlens, ctx.p)  # [b, n, a*t, d] each
    del dc
    dq, dk, dv = (merge_heads(z) for z in (dq, dk, dv))  # [b, n, a*t, d] -> [b, a*t, n*d]
    dq, dk = rope_qk_backward(dq, dk, _positions(ctx, a, order), ctx, h)
    da = torch.cat([dq, dk, dv], dim=-1).index_select(1, inverse)  # [b, a*t, n1/a], member-major
    big_u = gather_seq(u, tctx.group)  # again, from the kept shard: [b, t, h] -> [b, a*t, h]
    dw1, db1 = weight_grad(da, big_u), bias_grad(da, wt.b1)
    del big_u
    du = scatter_seq(da @ wt.w1, tctx.group)  # [b, a*t, n1/a] -> [b, a*t, h] partial -> [b, t, h]
    del da
    dx, dln_w, dln_b = layer_norm_backward(x, w, ctx, du)
    grads = {"ln_w": dln_w, "ln_b": dln_b, "w1": dw1, "b1": db1, "w2": dw2, "b2": bias_grad(dy, w.b2)}
    return dy + dx, _scatter(a, grads, w, ctx)


def _mlp_forward(a: int, x, w: Weights, ctx: Ctx, prep=None):
    wt, tctx = _tensor_parallel(a, w, ctx, prep)
    return megatron_ts.forward(x, wt, tctx)  # megatron_ts's MLP in the tensor group


def _mlp_backward(a: int, saved, dy, w: Weights, ctx: Ctx, prep):
    wt, tctx = _tensor_parallel(a, w, ctx, prep)
    dx, grads = megatron_ts.backward(saved, dy, wt, tctx)
    return dx, _scatter(a, grads, w, ctx)


def _tiled_forward(a: int, x, w: Weights, ctx: Ctx, tile: int):
    wt, tctx = _tensor_parallel(a, w, ctx, None)
    return megatron_ts.tiled_mlp_forward(x, wt, tctx, tile)


def _tiled_backward(a: int, x, dy, w: Weights, ctx: Ctx, tile: int):
    wt, tctx = _tensor_parallel(a, w, ctx, None)
    dx, grads = megatron_ts.tiled_mlp_backward(x, dy, wt, tctx, tile)
    return dx, _scatter(a, grads, w, ctx)


def _prepare_backward(a: int):
    """The backward's fetch of the a-block (the weights are not kept)."""
    return lambda w, ctx: gather_weights(w, ctx, a)


@cache
def for_degree(a: int):
    """The implementation of tensor degree a (`Strategy.head_degree`): its `ATTENTION`, `MLP` and `TILED_MLP`, the
    attributes the runtime reads from a strategy module."""
    name = f"megatron_cp:{a}"

    class TensorDegree:
        ATTENTION = Impl(name, lambda *args: _attention_forward(a, *args), lambda *args: _attention_backward(a, *args),
                         _prepare_backward(a))
        MLP = Impl(name, lambda *args: _mlp_forward(a, *args), lambda *args: _mlp_backward(a, *args),
                   _prepare_backward(a))
        TILED_MLP = TiledImpl(name, lambda *args: _tiled_forward(a, *args), lambda *args: _tiled_backward(a, *args))
    TensorDegree.__name__ = f"megatron_cp_{a}"
    return TensorDegree
