"""UlyssesZ: DeepSpeed-Ulysses attention with ZeRO-3 weights, on the unified layout.

Library module (no command). Jacobs et al., "DeepSpeed Ulysses" (2023); the cost model's `ulysses_z` schedule.
Attention on rank r: gather the full W_qkv, W_proj (`zero3`); q, k, v of all heads for its t tokens;
all-to-all sequence-sharded -> head-sharded (head group g goes to rank g; rank r receives its heads for
all s tokens, in rank-major order); attention of its heads over the whole sequence; all-to-all back; the
full output projection. Backward: all-to-all dO, then dQKV. Needs heads divisible by p. MLP: zero3.MLP.
Kept (as the cost model counts): x, u = LN(x) [b, t, h], the kernel's q, k, v, output o [b, H/p, s, d] and lse of this
rank's heads, and the attention output again as c [b, t, h] after the all-to-all back (the output
projection's input, for dW_proj). The two copies of the output cannot be re-derived from each other
without an all-to-all, so, as DeepSpeed-Ulysses does (the kernel keeps o, the projection its input c),
both are kept: one [t, h] more than Korthikanti et al.'s count, which the cost model adds for this pair
(at p = 1 there is no all-to-all: c is re-derived from o).
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
from paradyse_lab.runtime.model.rope import cached_rotation, rotate_heads_
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


def seq_to_heads(a, ctx: Ctx):
    """[b, t, p*n] (feature group g for rank g) -> [b, p*t, n] (this rank's group, all tokens)."""
    b, t, _ = a.shape
    send = a.view(b, t, ctx.p, -1).permute(2, 0, 1, 3)  # [b, t, p, n] -> [p(dest), b, t, n]
    recv = comm.all_to_all(send, ctx.group)  # [p(dest), b, t, n] -> [p(src), b, t, n]
    return recv.transpose(0, 1).reshape(b, ctx.p * t, -1)  # [p, b, t, n] -> [b, p*t, n]


def heads_to_seq(a, ctx: Ctx):
    """Inverse of `seq_to_heads`: [b, p*t, n] -> [b, t, p*n]."""
    b, pt, n = a.shape
    send = a.view(b, ctx.p, pt // ctx.p, n).transpose(0, 1)  # [b, p, t, n] -> [p(dest), b, t, n]
    recv = comm.all_to_all(send, ctx.group)  # [p(dest), b, t, n] -> [p(src group), b, t, n]
    return recv.permute(1, 2, 0, 3).reshape(b, pt // ctx.p, ctx.p * n)  # [b, t, p, n] -> [b, t, p*n]


def kv_replicas(ctx: Ctx) -> int:
    """Copies of each K/V head sent by the all-to-all: p / kv_heads when kv_heads < p, else 1."""
    return max(1, ctx.p // ctx.kv)


def _replicate(z, d: int, rep: int):
    """[b, t, kv*d] -> [b, t, kv*rep*d]: each K/V head `rep` times in a row (rank r gets copy r)."""
    return z if rep == 1 else z.unflatten(-1, (-1, d)).repeat_interleave(rep, dim=-2).flatten(-2)


def _sum_replicas(dz, d: int, rep: int):
    """Backward of `_replicate`: [b, t, kv*rep*d] -> [b, t, kv*d], each head's copies summed."""
    return dz if rep == 1 else dz.unflatten(-1, (-1, rep, d)).sum(-2).flatten(-2)


def _rotate_groups(a, ctx: Ctx, h: int, backward: bool) -> None:
    """Rotary embeddings (or their backward) in place on the q and k heads of a [b, t, p*(q|k|v)] whose
    features are p rank groups of this rank's tokens (each rotated by its true position); nothing without
    rotary embeddings."""
    if not ctx.rope_theta:
        return
    d = h // ctx.heads
    b, t, _ = a.shape
    cos, sin = cached_rotation(ctx.positions, d, ctx.rope_theta, a.dtype, ctx.rope_llama3, axes=2)  # [t, 1, 1, d]
    qk_heads = (ctx.heads + ctx.kv) // ctx.p  # a group's q and k heads, then its v heads
    groups = a.view(b, t, ctx.p, -1, d)  # [b, t, p*n/p] -> [b, t, p, n/(p d), d]
    rotate_heads_(groups[:, :, :, :qk_heads], cos, sin, backward)


def forward(x, w: Weights, ctx: Ctx, prep=None):
    h = x.shape[-1]
    d, rep = h // ctx.heads, kv_replicas(ctx)
    (_, _, w2), u, a = project_in(x, w, ctx, prep)  # a [b, t, h + 2kv] (p rank groups of q | k | v)
    if rep == 1:  # a's rank groups are the all-to-all's: q and k heads rotated where they lie
        _rotate_groups(a, ctx, h, backward=False)
        qkv = a
    else:
        q, k, v = split_sections(a, attention_sections(ctx, h, 1), ctx.p)  # [b, t, h], [b, t, kv] x 2
        q, k = rope_qk(q, k, ctx.positions, ctx, h)  # this rank's tokens, rotated by their true positions
        k, v = _replicate(k, d, rep), _replicate(v, d, rep)  # [b, t, kv] -> [b, t, max(kv_heads, p)*d]
        qkv = join_sections([q, k, v], ctx.p)  # rank g's group: its q heads, its K/V heads (or copy)
    heads = seq_to_heads(qkv, ctx)  # [b, t, p*n/p] -> [b, s, n/p]
    kv_sent = ctx.kv * d * rep
    qh, kh, vh = heads.split([h // ctx.p, kv_sent // ctx.p, kv_sent // ctx.p], dim=-1)
    order = gathered_order(ctx, x.device)
    ch, core = gathered_attention_forward(qh, kh, vh, ctx.heads // ctx.p, order, ctx.causal, ctx.cu_seqlens)
    c = heads_to_seq(ch, ctx)  # [b, s, h/p] -> [b, t, h]
    kept_c = c if ctx.p > 1 else None  # p = 1: c is the kernel's output o, re-derived locally in the backward
    return add_bias(x + c @ w2, w.b2), (x, u, kept_c, core)


def backward(saved, dy, w: Weights, ctx: Ctx, prep):
    x, u, c, core = saved
    if c is None:
        c = gathered_output(core[3], None)  # o [b, H, s, d] -> [b, s, h] (p = 1: no all-to-all)
    h = x.shape[-1]
    d, rep = h // ctx.heads, kv_replicas(ctx)
    w2 = prep[2]
    sw2 = scatter_grad(weight_grad(c, dy), ctx, w.w2.dtype)  # [h, h] -> [h/p, h], reduce-scattered at once
    order = gathered_order(ctx, x.device)
    dch = seq_to_heads(dy @ w2.t(), ctx)  # [b, t, h] -> [b, s, h/p]
    dheads = torch.cat(gathered_attention_backward(dch, core, order, ctx.causal, ctx.cu_seqlens), dim=-1)  # [b,s,n/p]
    kv_sent = ctx.kv * d * rep
    dgroups = heads_to_seq(dheads, ctx)  # [b, s, n/p] -> [b, t, p*n/p]
    if rep == 1:  # already in gathered-weight order: q and k heads rotated back where they lie
        _rotate_groups(dgroups, ctx, h, backward=True)
        da = dgroups
    else:
        dq, dk, dv = split_sections(dgroups, (h, kv_sent, kv_sent), ctx.p)  # -> [b, t, ..]
        dk, dv = _sum_replicas(dk, d, rep), _sum_replicas(dv, d, rep)  # copies' gradients summed: [b, t, kv]
        dq, dk = rope_qk_backward(dq, dk, ctx.positions, ctx, h)
        da = join_sections([dq, dk, dv], ctx.p)  # [b, t, h + 2kv] in gathered-weight order
    return project_in_backward(x, u, da, sw2, dy, w, ctx, prep)  # [b, t, h + 2kv] -> [b, t, h]


ATTENTION = Impl("ulysses_z", forward, backward, prepare_backward)
__all__ = ["ATTENTION", "MLP", "TILED_MLP"]
