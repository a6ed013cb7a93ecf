"""Attention over a whole sequence given in rank-major gathered order (megatron_ts, ulysses_z).

Library module (no command). The strategies that gather the sequence hold it rank-major (every rank's zig-zag
chunks one after another); attention reorders it to natural order locally
(`layout.natural_order`) for the causal mask, runs the whole-sequence kernels, and puts the output back
in gathered order. Packed sequences run the varlen kernels
with the
pack's offsets instead: no [s, s] buffer.
"""

from __future__ import annotations

import torch

from paradyse_lab.runtime.attention.kernels import attention_backward, attention_forward, merge_heads, split_heads
from paradyse_lab.runtime.attention.varlen import host_offsets, varlen_backward, varlen_forward
from paradyse_lab.runtime.model.layout import natural_order


def _pack_attention(which: int, causal: bool, cu_seqlens, *args):
    """`attention_forward` / `attention_backward` (which 0 / 1) over a whole sequence in natural order, or,
    for a pack (`cu_seqlens` [n + 1]), the varlen kernels over its documents
    (no [s, s] buffer)."""
    if cu_seqlens is None:
        return (attention_forward, attention_backward)[which](*args, causal)
    cu = host_offsets(cu_seqlens)
    return (varlen_forward, varlen_backward)[which](*args, cu, cu, causal)


def gathered_order(ctx, device):
    """The index that puts a sequence gathered over `ctx`'s ranks in natural order (layout.natural_order), or
    None when it is natural already (one rank)."""
    return None if ctx.p == 1 else natural_order(ctx.seq_len, ctx.p, ctx.cu_seqlens, device)


def _natural(x: torch.Tensor, order) -> torch.Tensor:
    """x [b, s, n] in gathered order -> natural order (x itself when `order` is None)."""
    return x if order is None else x.index_select(1, order)


def gathered_attention_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int, order: torch.Tensor,
                               causal: bool, cu_seqlens=None):
    """Attention of `heads` query heads over a whole sequence given in rank-major gathered order.
    q [b, s, heads*d], k, v [b, s, kv*d] (kv heads dividing `heads`) -> (out [b, s, heads*d] in gathered
    order, saved for backward). `order` (layout.natural_order) puts the tokens in natural order for the
    causal mask (None: they are in natural order already, p = 1); `cu_seqlens` [n + 1] confines attention to
    each document of a pack."""
    d = q.shape[-1] // heads
    q, k, v = (split_heads(_natural(x, order), x.shape[-1] // d) for x in (q, k, v))  # natural, [b,n,s,d]
    o, lse = _pack_attention(0, causal, cu_seqlens, q, k, v)
    return gathered_output(o, order), (q, k, v, o, lse)


def gathered_output(o: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """The attention output o [b, heads, s, d] in natural order as [b, s, heads*d] in gathered order
    (a local permutation: callers keep o for the kernel's backward and re-derive this from it)."""
    nat = merge_heads(o)  # [b, heads, s, d] -> [b, s, heads*d], natural order
    if order is None:
        return nat
    out = torch.empty_like(nat)
    out.index_copy_(1, order, nat)  # natural -> gathered token order
    return out


def gathered_attention_backward(dout: torch.Tensor, saved, order: torch.Tensor, causal: bool, cu_seqlens=None):
    """(dq [b, s, heads*d], dk, dv [b, s, kv*d]) in gathered order from dout [b, s, heads*d] in gathered
    order."""
    q, k, v, o, lse = saved
    do = split_heads(_natural(dout, order), q.shape[1])  # gathered -> natural, [b,heads,s,d]
    grads = _pack_attention(1, causal, cu_seqlens, do, q, k, v, o, lse)
    return tuple(gathered_output(g, order) for g in grads)  # [b,n,s,d] natural -> [b, s, n*d] gathered
