"""Ulysses with an uneven head split: DeepSpeed-Ulysses attention where p does not divide the heads, ZeRO-3
weights and MLP as ulysses_z, on the unified layout.

Library module (no command). DeepSpeed's uneven-heads all-to-all (deepspeed/sequence/layer.py
`uneven_heads_all2all`: `all_to_all_single` with split sizes, ceil or floor of the heads per rank) is the idea;
priced by `strategy_work._ulysses_uneven`. Rank r holds n_r consecutive query heads (ceil(H / p) for the first
H % p ranks, floor after) and the m_r K/V heads they read (`head_split`: a range that may span two K/V heads under
grouped-query attention, each K/V head sent to every rank that reads it). Attention on rank r: gather W_qkv,
W_proj; q, k, v of all heads for its t tokens, q and k rotated by their true positions; an all-to-all with
unequal parts sends rank g its q | k | v heads of these tokens (rank r receives n_r + 2 m_r heads of every
rank's t tokens, rank-major); attention of its heads over the whole sequence, one kernel call per run of K/V
heads that serve equally many of its query heads (`HeadSplit.kernel_groups`: a K/V head shared with the
neighbouring rank serves fewer here); the output back by the inverse all-to-all (rank g's n_g heads of this
rank's tokens, concatenated in head order); the full output projection. Backward: dO to heads, the kernels'
backward, dQ | dK | dV back, each K/V head's gradient summed over the ranks that read it. MLP: zero3.MLP.
Kept (the busiest rank's in `_ulysses_uneven`): x, u [b, t, h], each kernel call's q, k, v, o, lse of this
rank's heads over the whole sequence, and the attention output again as c [b, t, h] (as ulysses_z keeps).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch

from paradyse_lab.core.head_split import head_split
from paradyse_lab.runtime.attention.gathered import (
    gathered_attention_backward,
    gathered_attention_forward,
    gathered_order,
)
from paradyse_lab.runtime.comm import collectives as comm
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


class Attend(NamedTuple):
    """How a rank attends over its heads of the group's tokens (gathered rank-major, [b, n*t, heads*d]):
    `forward(q, k, v, heads)` -> (output [b, n*t, heads*d] in the same order, saved), `backward(do, saved)` ->
    (dq, dk, dv) in that order. Ulysses attends over the whole sequence (`gathered`), Ulysses x ring over the ring."""

    forward: Callable
    backward: Callable


def gathered(ctx: Ctx, device) -> Attend:
    """Attention over the whole sequence gathered over `ctx`'s ranks (ulysses_uneven)."""
    order = gathered_order(ctx, device)
    return Attend(lambda q, k, v, heads: gathered_attention_forward(q, k, v, heads, order, ctx.causal, ctx.cu_seqlens),
                  lambda do, saved: gathered_attention_backward(do, saved, order, ctx.causal, ctx.cu_seqlens))


def _to_heads(parts: list[torch.Tensor], width: int, ctx: Ctx) -> torch.Tensor:
    """parts[g] [b, t, n_g] (rank g's features of this rank's tokens) -> [b, p*t, width]: this rank's `width`
    features of every rank's tokens, rank-major (the gathered order)."""
    b, t, _ = parts[0].shape
    flat = comm.all_to_all_uneven(parts, [b * t * width] * ctx.p, ctx.group)  # -> [p(src) * b * t * width]
    return flat.view(ctx.p, b, t, width).transpose(0, 1).reshape(b, ctx.p * t, width)  # [p,b,t,w] -> [b, p*t, w]


def _to_sequence(z: torch.Tensor, widths: list[int], ctx: Ctx) -> list[torch.Tensor]:
    """Inverse of `_to_heads`: z [b, p*t, n] (this rank's features of every rank's tokens) -> per rank g its
    [b, t, widths[g]] features of this rank's t tokens."""
    b, s, n = z.shape
    t = s // ctx.p
    send = z.view(b, ctx.p, t, n).transpose(0, 1)  # [b, p*t, n] -> [p(dest), b, t, n]
    numels = [b * t * width for width in widths]
    flat = comm.all_to_all_uneven(list(send), numels, ctx.group)  # -> [sum over src of b * t * widths[src]]
    return [part.view(b, t, -1) for part in flat.split(numels)]  # [b, t, widths[g]] from each rank g


def _head_slice(z: torch.Tensor, heads: tuple[int, int], d: int) -> torch.Tensor:
    """Heads [start, end) of z [.., heads*d]: [.., (end - start)*d] (a view)."""
    return z[..., heads[0] * d:heads[1] * d]


def uneven_forward(x, w: Weights, ctx: Ctx, prep, hctx: Ctx, attend: Attend):
    """The attention sub-layer with the heads split unevenly over the head group `hctx` (all p ranks, or a
    Ulysses x ring head group of a): -> (y [b, t, h], saved)."""
    h = x.shape[-1]
    d, split = h // ctx.heads, head_split(ctx.heads, ctx.kv, hctx.p)
    (_, _, w2), u, a = project_in(x, w, ctx, prep)  # a [b, t, h + 2kv] (p rank groups of q | k | v)
    q, k, v = split_sections(a, attention_sections(ctx, h, 1), ctx.p)  # [b, t, h], [b, t, kv] x 2
    q, k = rope_qk(q, k, ctx.positions, ctx, h)  # this rank's tokens, rotated by their true positions
    parts = [torch.cat([_head_slice(q, qs, d), _head_slice(k, ks, d), _head_slice(v, ks, d)], dim=-1)
             for qs, ks in zip(split.queries, split.kv)]  # member g's [b, t, (n_g + 2 m_g) d]
    n, m = split.kept_heads(hctx.rank)
    heads = _to_heads(parts, (n + 2 * m) * d, hctx)  # -> [b, n*t, (n + 2m) d]
    qh, kh, vh = heads.split([n * d, m * d, m * d], dim=-1)  # [b, n*t, n d], [b, n*t, m d] x 2
    outs, cores, qi, ki = [], [], 0, 0
    for nq, nk in split.kernel_groups(hctx.rank):  # whole GQA groups per call
        o, core = attend.forward(_head_slice(qh, (qi, qi + nq), d), _head_slice(kh, (ki, ki + nk), d),
                                 _head_slice(vh, (ki, ki + nk), d), nq)
        outs.append(o)  # [b, n*t, nq d]
        cores.append(core)
        qi, ki = qi + nq, ki + nk
    ch = torch.cat(outs, dim=-1) if len(outs) > 1 else outs[0]  # [b, n*t, n d]
    widths = [(q1 - q0) * d for q0, q1 in split.queries]
    c = torch.cat(_to_sequence(ch, widths, hctx), dim=-1)  # [b, n*t, n d] -> members' [b, t, n_g d] -> [b, t, h]
    return add_bias(x + c @ w2, w.b2), (x, u, c, tuple(cores))


def uneven_backward(saved, dy, w: Weights, ctx: Ctx, prep, hctx: Ctx, attend: Attend):
    """Backward of `uneven_forward`: (dx [b, t, h], the shards' gradients)."""
    x, u, c, cores = saved
    h = x.shape[-1]
    d, split = h // ctx.heads, head_split(ctx.heads, ctx.kv, hctx.p)
    sw2 = scatter_grad(weight_grad(c, dy), ctx, w.w2.dtype)  # [h, h] -> [h/p, h], reduce-scattered at once
    dc = dy @ prep[2].t()  # [b, t, h]
    n, m = split.kept_heads(hctx.rank)
    dch = _to_heads([_head_slice(dc, qs, d) for qs in split.queries], n * d, hctx)  # -> [b, n*t, n d]
    dq, dk, dv, qi = [], [], [], 0
    for (nq, _), core in zip(split.kernel_groups(hctx.rank), cores):
        gq, gk, gv = attend.backward(_head_slice(dch, (qi, qi + nq), d), core)  # [b, n*t, nq d], [b, n*t, nk d] x 2
        dq.append(gq)
        dk.append(gk)
        dv.append(gv)
        qi += nq
    dheads = torch.cat([*dq, *dk, *dv], dim=-1)  # [b, n*t, (n + 2m) d]
    back = _to_sequence(dheads, [split.width(g) * d for g in range(hctx.p)], hctx)  # members' [b, t, (n_g+2m_g) d]
    dq = torch.cat([part[..., :(q1 - q0) * d] for part, (q0, q1) in zip(back, split.queries)], dim=-1)  # [b, t, h]
    dk = x.new_zeros(*x.shape[:2], ctx.kv * d)  # [b, t, kv]: each K/V head's gradient summed over its readers
    dv = torch.zeros_like(dk)
    for part, (q0, q1), ks in zip(back, split.queries, split.kv):
        gk, gv = part[..., (q1 - q0) * d:].chunk(2, dim=-1)  # [b, t, m_g d] x 2
        _head_slice(dk, ks, d).add_(gk)
        _head_slice(dv, ks, d).add_(gv)
    dq, dk = rope_qk_backward(dq, dk, ctx.positions, ctx, h)
    da = join_sections([dq, dk, dv], ctx.p)  # [b, t, h + 2kv] in gathered-weight order
    return project_in_backward(x, u, da, sw2, dy, w, ctx, prep)  # [b, t, h + 2kv] -> [b, t, h]


def forward(x, w: Weights, ctx: Ctx, prep=None):
    return uneven_forward(x, w, ctx, prep, ctx, gathered(ctx, x.device))


def backward(saved, dy, w: Weights, ctx: Ctx, prep):
    return uneven_backward(saved, dy, w, ctx, prep, ctx, gathered(ctx, saved[0].device))


ATTENTION = Impl("ulysses_uneven", forward, backward, prepare_backward)
__all__ = ["ATTENTION", "MLP", "TILED_MLP"]
