"""Ring attention over the zig-zag layout (megatron_cz, and METP's per-head-group inner loop).

Library module (no command). Liu et al., "Ring Attention with Blockwise Transformers" (2023); the zig-zag
causal blocks follow ring-flash-attention's zigzag variant (docs/paper.md section 2: partial results merged by
log-sum-exp). Rank r holds chunks (r, 2p-1-r) of the sequence; at step i it holds the K/V of rank
src = (r - i) mod p:
- i = 0: its own K/V, causal mask on local indices (local order is increasing in position);
- src < r: every local query sees the first K/V chunk (chunk src) in full, none of the second;
- src > r: only the second local query chunk (2p-1-r) sees both K/V chunks, in full.
Non-causal: every block is full.
Packed documents (`cu_seqlens`, runtime/packed.py): the same blocks, each further masked to pairs in the same
document (and, causal, pos_j <= pos_i): every rank derives the documents of the K/V it holds from
`cu_seqlens` and the source rank, so no extra bytes travel. A block in which no query sees any key is
skipped (its K/V still travel); a query row that sees no key of a block gets lse -inf there and the merge
keeps it finite (attention.merge_partials).

Forward: p - 1 ring steps of K/V [b, H, t, d] x 2, double-buffered (the next block is in flight while the
current one is computed). Backward: the K/V ring again (p - 1 steps) and a travelling dK/dV accumulator:
rank r starts the accumulator of block r-1 at step 1, each later rank adds its part, and the last adds
and hands it to the owner (p - 1 steps); the owner adds the part of its own queries kept from step 0.
So the backward sends (p - 1) x [K, V] + (p - 1) x [dK, dV], as schedules.py counts.
"""

from __future__ import annotations

import torch

from runtime import comm
from runtime.attention import attention_backward, attention_forward, merge_partials
from runtime.packed import document_mask, local_documents

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


def _document_blocks(cu_seqlens, r: int, p: int, t: int, causal: bool, device):
    """Per ring step i: the [len(qs), len(ks)] document mask of the block of rank r's queries against the
    K/V of rank (r - i) mod p, or None when no query of the block sees any of its keys (the block is
    skipped); True for every step when the sequence is one document (`cu_seqlens` None: `_block`'s mask)."""
    if cu_seqlens is None:
        return [True] * p
    q_doc, q_pos = local_documents(cu_seqlens, p * t, p, r)  # [t] each
    out = []
    for i in range(p):
        src = (r - i) % p
        qs, ks, _ = _block(r, src, t, causal)
        k_doc, k_pos = local_documents(cu_seqlens, p * t, p, src)
        mask = document_mask(q_doc[qs], q_pos[qs], k_doc[ks], k_pos[ks], causal)  # [len(qs), len(ks)]
        out.append(mask.to(device) if bool(mask.any()) else None)
    return out


def _attend(masks, i: int):
    """(run this block?, the mask to pass the kernel) of ring step i."""
    mask = masks[i]
    return mask is not None, (None if mask is True else mask)


def ring_attention_forward(q, k, v, causal: bool, group=None, cu_seqlens=None):
    """q, k, v [b, H, t, d] of this rank's tokens -> (out [b, H, t, d], lse [b, H, t] fp32); `cu_seqlens`
    [n + 1]: the pack's document offsets (runtime/packed.py), None for one document."""
    p, r = comm.size(group), comm.rank(group)
    t = q.shape[2]
    masks = _document_blocks(cu_seqlens, r, p, t, causal, q.device)
    out = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    lse = torch.full(q.shape[:3], float("-inf"), dtype=torch.float32, device=q.device)
    kv = torch.stack([k, v])  # 2 x [b, H, t, d] -> [2, b, H, t, d]
    for i in range(p):
        pending = comm.ring_exchange(kv, group, tag=_TAG_KV) if i < p - 1 else None  # next block in flight
        qs, ks, block_causal = _block(r, (r - i) % p, t, causal)
        run, mask = _attend(masks, i)
        if run:
            o_b, lse_b = attention_forward(q[:, :, qs], kv[0][:, :, ks], kv[1][:, :, ks], block_causal, mask=mask)
            merge_partials(out[:, :, qs], lse[:, :, qs], o_b, lse_b)
        if pending is not None:
            kv = pending.wait()
    return out.to(q.dtype), lse


def ring_attention_backward(do, q, k, v, o, lse, causal: bool, group=None, cu_seqlens=None):
    """(dq, dk, dv) [b, H, t, d] of `ring_attention_forward` given its output and log-sum-exp."""
    p, r = comm.size(group), comm.rank(group)
    t = q.shape[2]
    masks = _document_blocks(cu_seqlens, r, p, t, causal, q.device)
    dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    kv = torch.stack([k, v])  # [2, b, H, t, d]
    own = acc_in = None
    for i in range(p):
        pending = comm.ring_exchange(kv, group, tag=_TAG_KV) if i < p - 1 else None
        qs, ks, block_causal = _block(r, (r - i) % p, t, causal)
        dkv = torch.zeros(kv.shape, dtype=torch.float32, device=q.device)  # [2, b, H, t, d]
        run, mask = _attend(masks, i)
        if run:
            dq_b, dk_b, dv_b = attention_backward(do[:, :, qs], q[:, :, qs], kv[0][:, :, ks], kv[1][:, :, ks],
                                                  o[:, :, qs], lse[:, :, qs], block_causal, mask=mask)
            dq[:, :, qs] += dq_b.float()
            dkv[0][:, :, ks] += dk_b.float()
            dkv[1][:, :, ks] += dv_b.float()
        if i == 0:
            own = dkv
        else:
            if acc_in is not None:
                dkv += acc_in.wait()  # the accumulator of this block from rank r-1
            acc_in = comm.ring_exchange(dkv, group, tag=_TAG_DKV)  # on to r+1 (at i = p-1: the owner)
        if pending is not None:
            kv = pending.wait()
    if acc_in is not None:
        own += acc_in.wait()
    return dq.to(q.dtype), own[0].to(k.dtype), own[1].to(v.dtype)
