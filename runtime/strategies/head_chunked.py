"""Head-chunked attention (`+headchunk`): ulysses_z's attention one chunk of heads at a time.

Library module (no command). The idea is UPipe's (Untied Ulysses, arXiv 2602.21196): Ulysses' all-to-all and the
attention kernel run over chunks of heads, so only one chunk's head-sharded q, k, v and output exist at a time; this
code is the project's own. Chunk j (of c = heads / p) holds query head j of every rank's head group, one per rank,
with the K/V head each reads (under grouped-query attention a K/V head read by several of a rank's query heads
travels with each, so no replica is kept). Forward: u = norm(x), qkv = u W_qkv, rotated; per chunk, all-to-all
[b, t, p*3d] -> [b, s, 3d], one head's attention over the whole sequence, all-to-all of its output back into
c [b, t, h]; the output projection. Kept: x, u, the rotated q, k, v in sequence layout (one [b, t, h + 2kv]
buffer), c and each chunk's fp32 log-sum-exp: nothing head-sharded. Backward: per chunk, all-to-all of q, k, v, o,
dO [b, t, p*5d] -> [b, s, 5d], the kernel's backward, all-to-all of dq, dk, dv back, summed into dQKV. Its design
note: docs/head_chunked_attention.md.
"""

from __future__ import annotations

import torch

from paradyse_lab.runtime.attention.gathered import gathered_attention_backward, gathered_attention_forward
from paradyse_lab.runtime.attention.kernels import split_heads
from paradyse_lab.runtime.model.layout import natural_order
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
from paradyse_lab.runtime.strategies.ulysses_z import heads_to_seq, seq_to_heads
from paradyse_lab.runtime.strategies.zero3 import prepare_backward, project_in, project_in_backward, scatter_grad


def chunk_heads(ctx: Ctx) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per chunk j: (the query head of each rank r, r*c + j, and the K/V head it reads) as [p] index tensors."""
    c = ctx.heads // ctx.p
    group = ctx.heads // ctx.kv  # query heads per K/V head
    out = []
    for j in range(c):
        q = torch.arange(ctx.p) * c + j
        out.append((q, q // group))
    return out


def _heads(z, d: int):
    """[b, t, n*d] -> [b, t, n, d] (a view)."""
    return z.unflatten(-1, (-1, d))


def _to_heads(parts, ctx: Ctx):
    """Each of `parts` [b, t, p, d] (one head per destination rank) -> [b, s, d] of this rank's head, by one
    all-to-all of them side by side."""
    b, t, p, d = parts[0].shape
    send = torch.cat(parts, dim=-1).reshape(b, t, p * d * len(parts))  # [b, t, p, n*d] -> [b, t, p*n*d]
    return seq_to_heads(send, ctx).split(d, dim=-1)  # [b, t, p*n*d] -> [b, s, n*d] -> n x [b, s, d]


def _natural(z, order):
    """[b, s, d] in gathered order -> [b, 1, s, d] in natural order (one head, the kernel's layout)."""
    return split_heads(z.index_select(1, order), 1)


def forward(x, w: Weights, ctx: Ctx, prep=None):
    h = x.shape[-1]
    d = h // ctx.heads
    (_, _, w2), u, a = project_in(x, w, ctx, prep)  # a [b, t, h + 2kv] (p rank groups of q | k | v)
    q, k, v = split_sections(a, attention_sections(ctx, h, 1), ctx.p)  # [b, t, h], [b, t, kv] x 2
    q, k = rope_qk(q, k, ctx.positions, ctx, h)
    qkv = torch.cat([q, k, v], dim=-1)  # [b, t, h + 2kv], kept: the chunks are cut from it again in backward
    q, k, v = (_heads(z, d) for z in qkv.split([h, k.shape[-1], v.shape[-1]], dim=-1))  # [b, t, n, d] views
    order = natural_order(ctx.seq_len, ctx.p, ctx.cu_seqlens, x.device)
    c = q.new_empty(q.shape)  # [b, t, H, d]
    lses = []
    for qi, kvi in chunk_heads(ctx):
        qh, kh, vh = _to_heads([q[:, :, qi], k[:, :, kvi], v[:, :, kvi]], ctx)  # [b, t, p, d] x 3 -> [b, s, d] x 3
        oh, (*_, lse) = gathered_attention_forward(qh, kh, vh, 1, order, ctx.causal, ctx.cu_seqlens)  # [b, s, d]
        c[:, :, qi] = heads_to_seq(oh, ctx).unflatten(-1, (ctx.p, d))  # [b, s, d] -> [b, t, p*d] -> [b, t, p, d]
        lses.append(lse)  # [b, 1, s] fp32
    c = c.flatten(-2)  # [b, t, H, d] -> [b, t, h]
    return add_bias(x + c @ w2, w.b2), (x, u, qkv, c, tuple(lses))


def backward(saved, dy, w: Weights, ctx: Ctx, prep):
    x, u, qkv, c, lses = saved
    h = x.shape[-1]
    d, kv = h // ctx.heads, ctx.kv * (h // ctx.heads)
    w2 = prep[2]
    sw2 = scatter_grad(weight_grad(c, dy), ctx, w.w2.dtype)  # [h, h] -> [h/p, h], reduce-scattered at once
    dc = _heads(dy @ w2.t(), d)  # [b, t, h] -> [b, t, H, d]
    q, k, v = (_heads(z, d) for z in qkv.split([h, kv, kv], dim=-1))  # [b, t, n, d] views
    o = _heads(c, d)
    dqkv = torch.zeros_like(qkv)  # [b, t, h + 2kv]
    dq, dk, dv = (_heads(z, d) for z in dqkv.split([h, kv, kv], dim=-1))
    order = natural_order(ctx.seq_len, ctx.p, ctx.cu_seqlens, x.device)
    for (qi, kvi), lse in zip(chunk_heads(ctx), lses):
        heads = _to_heads([q[:, :, qi], k[:, :, kvi], v[:, :, kvi], o[:, :, qi], dc[:, :, qi]], ctx)  # 5 x [b, s, d]
        qn, kn, vn, on = (_natural(z, order) for z in heads[:4])  # [b, 1, s, d] natural order
        grads = gathered_attention_backward(heads[4], (qn, kn, vn, on, lse), order, ctx.causal, ctx.cu_seqlens)
        back = heads_to_seq(torch.cat(grads, dim=-1), ctx).unflatten(-1, (ctx.p, 3 * d))  # [b,s,3d] -> [b,t,p,3d]
        gq, gk, gv = back.split(d, dim=-1)  # [b, t, p, d] each
        dq[:, :, qi] = gq
        dk.index_add_(2, kvi, gk)  # a K/V head's gradient summed over the query heads that read it
        dv.index_add_(2, kvi, gv)
    gq, gk, gv = dqkv.split([h, kv, kv], dim=-1)
    gq, gk = rope_qk_backward(gq, gk, ctx.positions, ctx, h)
    da = join_sections([gq, gk, gv], ctx.p)  # [b, t, h + 2kv] in gathered-weight order
    return project_in_backward(x, u, da, sw2, dy, w, ctx, prep)  # [b, t, h + 2kv] -> [b, t, h]


HEAD_CHUNKED_ATTENTION = {"ulysses_z": Impl("ulysses_z", forward, backward, prepare_backward)}
"""The head-chunked attention of each strategy whose catalog entry offers `+headchunk`."""
