"""The unified layout (docs/paper.md section 3, the paper's Table 2) of the sequence: which tokens every rank
holds, for every strategy. The weights' half of the table is `weight_shards`.

Library module (no command).

Activations: `[b, s/p, h]` per rank at every sub-layer boundary. **Chunk order: zig-zag, always.** The
sequence is cut into 2p equal chunks; rank r holds chunks r and 2p-1-r, in that order (for p = 1 this is
the identity). Zig-zag balances causal ring attention (every rank gets one early and one late chunk:
ring-flash-attention's `zigzag_ring_flash_attn`, and Megatron-LM context parallelism's load balancing) and
it is the same order for every strategy, so a switch between layers moves no bytes. The layout unit is
therefore 2p tokens (1 when p = 1): a sequence length not divisible by it is **an error** (no silent
padding); callers that want padding pad to `layout_unit(p)` themselves. Strategies that gather the whole
sequence (megatron_ts, ulysses_z) reorder it to natural order locally (`natural_order`) before attention.
A pack of documents (given by its `cu_seqlens`) is cut per document instead: each
(padded) document into 2p chunks, rank r holding chunks r and 2p-1-r of every one, documents in order.
Callers never compute the order themselves: they use `shard_sequence` / `gather_sequence`.
"""

from __future__ import annotations

from functools import lru_cache

import torch

from paradyse_lab.core.strategies import layout_unit
from paradyse_lab.errors import UserInputError
from paradyse_lab.runtime.comm import autograd as comm_autograd
from paradyse_lab.runtime.comm import collectives as comm


def check_length(seq_len: int, p: int) -> None:
    """Raise `UserInputError` when `seq_len` does not split into the zig-zag layout."""
    unit = layout_unit(p)
    if seq_len <= 0 or seq_len % unit:
        raise UserInputError(
            f"sequence length {seq_len} must be a positive multiple of {unit} (2p zig-zag chunks for p = {p}); "
            f"pad it to a multiple of {unit}")


def layout_documents(cu_seqlens, p: int) -> tuple[int, ...]:
    """The lengths of the documents the zig-zag layout cuts separately, from a pack's offsets:
    walking its segments in order, a layout document closes at the first segment end
    at which its length is a multiple of the layout unit (2p). A pack of `packed.pack_sequence` (each
    document followed by its own padding segment to the unit) gives one layout document per real document.
    None (one sequence) -> None."""
    if cu_seqlens is None:
        return None
    return _layout_documents(tuple(int(x) for x in torch.as_tensor(cu_seqlens).tolist()), p)


@lru_cache(maxsize=256)
def _layout_documents(cu: tuple[int, ...], p: int) -> tuple[int, ...]:
    unit = layout_unit(p)
    out, start = [], 0
    for end in cu[1:]:
        if (end - start) % unit == 0:
            out.append(end - start)
            start = end
    if start != cu[-1]:
        raise UserInputError(f"pack of {cu[-1]} tokens does not split into the zig-zag layout (unit {unit})")
    return tuple(out)


def local_positions(seq_len: int, p: int, r: int, cu_seqlens=None) -> torch.Tensor:
    """Global positions of rank r's s/p tokens, in local order: [s/p] (a cached tensor: do not modify it).
    A pack (`cu_seqlens`) is laid out per document: each layout document (`layout_documents`) is cut into
    2p chunks and rank r holds chunks r and 2p-1-r of every document, documents in pack order (Megatron-LM's
    THD layout for context parallelism, ring-flash-attention's varlen zig-zag); the local order is increasing
    in position."""
    check_length(seq_len, p)
    return _local_positions(layout_documents(cu_seqlens, p) or (seq_len,), p, r)


@lru_cache(maxsize=256)
def _local_positions(documents: tuple[int, ...], p: int, r: int) -> torch.Tensor:
    if p == 1:
        return torch.arange(sum(documents))
    parts, start = [], 0
    for n in documents:
        c = n // (2 * p)
        parts += [torch.arange(start + r * c, start + (r + 1) * c),
                  torch.arange(start + (2 * p - 1 - r) * c, start + (2 * p - r) * c)]
        start += n
    return torch.cat(parts)


def ring_positions(documents: tuple[int, ...], p: int, r: int) -> torch.Tensor:
    """Global positions of rank r's tokens when each of `documents` (lengths, each a multiple of 2p) is cut into
    2p chunks and r holds chunks r and 2p-1-r of every one: [sum / p] (cached: do not modify it)."""
    return _local_positions(tuple(documents), p, r)


def gathered_positions(seq_len: int, p: int, cu_seqlens=None) -> torch.Tensor:
    """Global position of each token of the rank-major concatenation of all ranks' local tokens: [s]."""
    return torch.cat([local_positions(seq_len, p, r, cu_seqlens) for r in range(p)])


def natural_order(seq_len: int, p: int, cu_seqlens=None, device=None) -> torch.Tensor:
    """Index `i` with `gathered[..., i, :]` in natural order (argsort of `gathered_positions`): [s], on
    `device` (cached per layout and device: built and copied once, not per sub-layer call)."""
    check_length(seq_len, p)
    return _natural_order(layout_documents(cu_seqlens, p) or (seq_len,), p, str(device or "cpu"))


@lru_cache(maxsize=64)
def _natural_order(documents: tuple[int, ...], p: int, device: str) -> torch.Tensor:
    positions = torch.cat([_local_positions(documents, p, r) for r in range(p)])
    return torch.argsort(positions).to(device)


def shard_sequence(x: torch.Tensor, dim: int = 1, group=None, cu_seqlens=None) -> torch.Tensor:
    """This rank's zig-zag chunks of the full sequence `x` along `dim` (a pack's: per document, given its
    `cu_seqlens`): [.., s, ..] -> [.., s/p, ..]."""
    p, r = comm.size(group), comm.rank(group)
    idx = local_positions(x.shape[dim], p, r, cu_seqlens).to(x.device)
    return x.index_select(dim, idx)


def gather_sequence(x_local: torch.Tensor, dim: int = 1, group=None, cu_seqlens=None) -> torch.Tensor:
    """The full sequence in natural order from every rank's local part (autograd-aware):
    [.., s/p, ..] -> [.., s, ..]."""
    p = comm.size(group)
    if p == 1:
        return x_local
    moved = x_local.movedim(dim, 0)  # [.., t, ..] -> [t, ..]
    full = comm_autograd.all_gather_autograd(moved, group)  # [t, ..] -> [p*t, ..] (rank-major)
    full = full.index_select(0, natural_order(full.shape[0], p, cu_seqlens, full.device))  # natural order
    return full.movedim(0, dim)  # [s, ..] -> [.., s, ..]
