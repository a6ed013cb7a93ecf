"""Ring attention over the zig-zag layout (megatron_cz, and METP's per-head-group inner loop).

Library module (no command). Liu et al., "Ring Attention with Blockwise Transformers" (2023); the zig-zag
causal blocks follow ring-flash-attention's zigzag variant (docs/paper.md section 2: partial results merged by
log-sum-exp). Rank r holds chunks (r, 2p-1-r) of the sequence; at step i it holds the K/V of rank
src = (r - i) mod p:
- i = 0: its own K/V, causal mask on local indices (local order is increasing in position);
- src < r: every local query sees the first K/V chunk (chunk src) in full, none of the second;
- src > r: only the second local query chunk (2p-1-r) sees both K/V chunks, in full.
Non-causal: every block is full.
Packed documents (`cu_seqlens`): the pack is laid out per document (each cut into 2p
chunks, rank r holding chunks r and 2p-1-r of every one), so the same three cases hold per document and a
block is one varlen call over the rank's whole t queries and the t received keys: each
segment's queries against its keys (`_varlen_block`), the tokens a case leaves out as documents without
keys or queries. Every rank derives the segments of the K/V it holds from `cu_seqlens` and the source rank,
so no extra bytes travel. A block in which no query sees any key is skipped (its K/V still travel); a query
row that sees no key of a block gets lse -inf there and the merge keeps it finite (attention.merge_partials).

Forward: p - 1 ring steps of K/V [b, H, t, d] x 2, double-buffered (the next block is in flight while the
current one is computed). Backward: the K/V ring again (p - 1 steps) and a travelling dK/dV accumulator:
rank r starts the accumulator of block r-1 at step 1, each later rank adds its part, and the last adds
and hands it to the owner (p - 1 steps); the owner adds the part of its own queries kept from step 0.
So the backward sends (p - 1) x [K, V] + (p - 1) x [dK, dV], as the cost model counts.
"""

from __future__ import annotations

from functools import lru_cache

import torch
import torch.nn.functional as F

from paradyse_lab.runtime.attention.kernels import attention_backward, attention_forward, merge_partials, merge_seen
from paradyse_lab.runtime.attention.varlen import host_offsets, varlen_backward, varlen_forward
from paradyse_lab.runtime.comm import collectives as comm
from paradyse_lab.runtime.comm import p2p as comm_p2p
from paradyse_lab.runtime.model.layout import layout_documents, ring_positions
from paradyse_lab.runtime.model.packed import document_of

_TAG_KV, _TAG_DKV = 11, 12


def _block(r: int, src: int, t: int, causal: bool):
    """(query slice, key slice, causal mask) of the block of queries of rank r against the K/V of src."""
    full = slice(0, t)
    if not causal:
        return full, full, False
    if src == r:
        return full, full, True
    if src < r:
        return full, slice(0, t // 2), False
    return slice(t // 2, t), full, False


def _runs(labels: list[int]) -> list[tuple[int, int]]:
    """(label, length) of each run of equal consecutive labels."""
    runs: list[tuple[int, int]] = []
    for x in labels:
        if runs and runs[-1][0] == x:
            runs[-1] = (x, runs[-1][1] + 1)
        else:
            runs.append((x, 1))
    return runs


def _pair_runs(q_runs, k_runs) -> tuple[list[int], list[int]]:
    """Varlen offsets pairing each query run with the key run of the same segment (label >= 0; -1: left
    out of the block); every other run becomes a document with no keys or no queries."""
    cu_q, cu_k, i, j = [0], [0], 0, 0
    while i < len(q_runs) or j < len(k_runs):
        (ql, qn), (kl, kn) = q_runs[i] if i < len(q_runs) else (None, 0), k_runs[j] if j < len(k_runs) else (None, 0)
        take_q = j == len(k_runs) or (i < len(q_runs) and (ql < 0 or (kl >= 0 and ql <= kl)))
        take_k = i == len(q_runs) or (j < len(k_runs) and (kl < 0 or (ql >= 0 and kl <= ql)))
        cu_q.append(cu_q[-1] + (qn if take_q else 0))
        cu_k.append(cu_k[-1] + (kn if take_k else 0))
        i, j = i + take_q, j + take_k
    return cu_q, cu_k


@lru_cache(maxsize=1024)
def _varlen_block(cu: tuple[int, ...], p: int, r: int, src: int, causal: bool, layout_p: int):
    """(cu_q, cu_k, causal) of the block of rank r's queries against the K/V of rank src on a pack: every
    segment's queries against its keys (the per-document zig-zag's blocks: src == r its
    own tokens, causal; src < r every query against the first chunk of each document of src; src > r the
    second chunk of each of its documents against every key of src); None when no query sees a key. The
    documents are those of the layout on `layout_p` ranks (p itself, or a multiple of it when each ring rank
    holds a group's tokens: ulysses_ring), each cut into 2p chunks."""
    cu_t = torch.tensor(cu)
    documents = layout_documents(cu_t, layout_p)
    q_seg, _ = document_of(cu_t, ring_positions(documents, p, r))  # [t]: segment of each local token
    k_seg, _ = document_of(cu_t, ring_positions(documents, p, src))
    first = _first_chunks(documents, p)
    q_in = ~first if causal and src > r else torch.ones_like(first)
    k_in = first if causal and src < r else torch.ones_like(first)
    cu_q, cu_k = _pair_runs(_runs(torch.where(q_in, q_seg, -1).tolist()), _runs(torch.where(k_in, k_seg, -1).tolist()))
    if not any(b > a and d > c for a, b, c, d in zip(cu_q[:-1], cu_q[1:], cu_k[:-1], cu_k[1:])):
        return None
    return tuple(cu_q), tuple(cu_k), causal and src == r


def _first_chunks(documents: tuple[int, ...], p: int) -> torch.Tensor:
    """[t] bool: whether each local token is in the first of its document's two chunks on its rank."""
    if p == 1:
        return torch.ones(sum(documents), dtype=torch.bool)
    halves = [torch.tensor([True, False]).repeat_interleave(n // (2 * p)) for n in documents]
    return torch.cat(halves)


def _blocks(cu_seqlens, r: int, p: int, causal: bool, layout_p: int | None = None):
    """Per ring step i: the varlen block of a pack (`_varlen_block`) with rank (r - i) mod p, or None when
    the sequence is one document (`cu_seqlens` None: `_block`'s slices)."""
    if cu_seqlens is None:
        return [None] * p
    cu = host_offsets(cu_seqlens)
    return [_varlen_block(cu, p, r, (r - i) % p, causal, layout_p or p) or "skip" for i in range(p)]


def _rows(x: torch.Tensor, s: slice, t: int) -> torch.Tensor:
    """x[:, :, s], or x itself when s is all t rows (no operator for the whole)."""
    return x if s == slice(0, t) else x[:, :, s]


def _block_forward(q, k, v, r, src, t, causal, block):
    """(query slice, out, lse) of one ring block, or None when it is skipped."""
    if block == "skip":
        return None
    if block is not None:  # a pack: every local query against every received key, by segment
        cu_q, cu_k, block_causal = block
        return (slice(0, t), *varlen_forward(q, k, v, cu_q, cu_k, block_causal))
    qs, ks, block_causal = _block(r, src, t, causal)
    return (qs, *attention_forward(_rows(q, qs, t), _rows(k, ks, t), _rows(v, ks, t), block_causal))


def _block_backward(do, q, k, v, o, lse, r, src, t, causal, block):
    """(query slice, key slice, dq, dk, dv) of one ring block, or None when it is skipped."""
    if block == "skip":
        return None
    if block is not None:
        cu_q, cu_k, block_causal = block
        return (slice(0, t), slice(0, t), *varlen_backward(do, q, k, v, o, lse, cu_q, cu_k, block_causal))
    qs, ks, block_causal = _block(r, src, t, causal)
    return (qs, ks, *attention_backward(*(_rows(x, qs, t) for x in (do, q)), _rows(k, ks, t), _rows(v, ks, t),
                                        *(_rows(x, qs, t) for x in (o, lse)), block_causal))


def ring_attention_forward(q, k, v, causal: bool, group=None, cu_seqlens=None, layout_p: int | None = None):
    """q, k, v [b, H, t, d] of this rank's tokens -> (out [b, H, t, d], lse [b, H, t] fp32); `cu_seqlens`
    [n + 1]: the pack's segment offsets, None for one document; `layout_p`: the ranks
    whose layout unit cut the pack into documents (default: the ring's)."""
    p, r = comm.size(group), comm.rank(group)
    if p == 1 and cu_seqlens is None:  # one block: the kernel's own result
        return attention_forward(q, k, v, causal)
    t = q.shape[2]
    blocks = _blocks(cu_seqlens, r, p, causal, layout_p)
    # one document: every query row of every block sees a key (module docstring), so no lse is ever -inf
    merge = merge_partials if cu_seqlens is not None else merge_seen
    out = lse = None
    kv = torch.stack([k, v])  # 2 x [b, H, t, d] -> [2, b, H, t, d]
    for i in range(p):
        pending = comm_p2p.ring_exchange(kv, group, tag=_TAG_KV) if i < p - 1 else None  # next block in flight
        kb, vb = (k, v) if i == 0 else kv.unbind(0)  # [b, H, t, d] x 2: step 0 holds its own
        done = _block_forward(q, kb, vb, r, (r - i) % p, t, causal, blocks[i])
        if done is not None:
            qs, o_b, lse_b = done
            if out is None and blocks[i] is None and qs == slice(0, t):  # the own (diagonal) block: every
                out, lse = o_b.float(), lse_b  # query sees a key, so it starts the fp32 accumulators as it is
            else:
                if out is None:
                    out, lse = _accumulators(q)
                merge(_rows(out, qs, t), _rows(lse, qs, t), o_b, lse_b)
        if pending is not None:
            kv = pending.wait()
    if out is None:
        out, lse = _accumulators(q)
    return out.to(q.dtype), lse


def _accumulators(q: torch.Tensor):
    """Empty fp32 results (out 0 [b, H, t, d], lse -inf [b, H, t]) to merge blocks into."""
    return (torch.zeros(q.shape, dtype=torch.float32, device=q.device),
            torch.full(q.shape[:3], float("-inf"), dtype=torch.float32, device=q.device))


def ring_attention_backward(do, q, k, v, o, lse, causal: bool, group=None, cu_seqlens=None,
                            layout_p: int | None = None):
    """(dq, dk, dv) [b, H, t, d] of `ring_attention_forward` given its output and log-sum-exp."""
    p, r = comm.size(group), comm.rank(group)
    if p == 1 and cu_seqlens is None:  # one block
        return attention_backward(do, q, k, v, o, lse, causal)
    t = q.shape[2]
    blocks = _blocks(cu_seqlens, r, p, causal, layout_p)
    dq = own = acc_in = None
    kv = torch.stack([k, v])  # [2, b, H, t, d]
    for i in range(p):
        pending = comm_p2p.ring_exchange(kv, group, tag=_TAG_KV) if i < p - 1 else None
        kb, vb = (k, v) if i == 0 else kv.unbind(0)  # [b, H, t, d] x 2
        done = _block_backward(do, q, kb, vb, o, lse, r, (r - i) % p, t, causal, blocks[i])
        if done is None:
            dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device) if dq is None else dq
            dkv = torch.zeros(kv.shape, dtype=torch.float32, device=q.device)  # [2, b, H, t, d]
        else:
            qs, ks, dq_b, dk_b, dv_b = done
            if dq is None and qs == slice(0, t):  # the first block over every query starts dq as it is
                dq = dq_b.float()
            else:
                dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device) if dq is None else dq
                _rows(dq, qs, t).add_(dq_b)  # fp32 += the block's
            dkv = _kv_grads(dk_b, dv_b, ks, t)  # [2, b, H, t, d] fp32
        if i == 0:
            own = dkv
        else:
            if acc_in is not None:
                dkv += acc_in.wait()  # the accumulator of this block from rank r-1
            acc_in = comm_p2p.ring_exchange(dkv, group, tag=_TAG_DKV)  # on to r+1 (at i = p-1: the owner)
        if pending is not None:
            kv = pending.wait()
    if acc_in is not None:
        own += acc_in.wait()
    dk, dv = own.unbind(0)  # [b, H, t, d] x 2
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


def _kv_grads(dk_b, dv_b, ks: slice, t: int) -> torch.Tensor:
    """One block's dK, dV over the key rows `ks` as the fp32 accumulator of all t rows, zeros elsewhere:
    [b, H, n, d] x 2 -> [2, b, H, t, d]."""
    dkv = torch.stack([dk_b, dv_b]).float()  # [2, b, H, n, d]
    if ks == slice(0, t):
        return dkv
    return F.pad(dkv, (0, 0, ks.start, t - ks.stop))  # [2, b, H, n, d] -> [2, b, H, t, d], zero rows outside ks
