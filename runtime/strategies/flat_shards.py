"""Flat shards: one rank's sub-layer shard as a single buffer `cat(w1, b1, w2)` (ZeRO-3 gathers and METP's
travelling shards), and the rank-major order of a gather of them (the weights' layout).

Library module (no command). ZeRO-3 strategies gather the flat `cat(w1, b1, w2)` of all ranks, whose
rank-major order is the full matrix with its output features grouped by rank, each rank's group ordered by
section (`pack_shard` / `unpack_gathered`; without a bias the same elements as rows, `pack_rows` /
`unpack_gathered_rows`; `split_sections` reads the sections back).
"""

from __future__ import annotations

import torch


def pack_shard(w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """One flat shard `cat(w1, b1, w2)`: [n1/p, h], [n1/p], [n2/p, h] -> [W/p], in `dtype` (default w1's: no other
    copy is made)."""
    pieces = [w1.reshape(-1), b1.reshape(-1), w2.reshape(-1)] if b1.numel() else [w1.reshape(-1), w2.reshape(-1)]
    return _cat(pieces, dtype)  # [n1/p*h + n1/p + n2/p*h] = [W/p]


def _cat(pieces: list[torch.Tensor], dtype: torch.dtype | None, dim: int = 0) -> torch.Tensor:
    """`torch.cat(pieces, dim)` written straight into a buffer of `dtype` (default the pieces' own)."""
    if dtype is None or dtype == pieces[0].dtype:
        return torch.cat(pieces, dim=dim)
    shape = list(pieces[0].shape)
    shape[dim] = sum(x.shape[dim] for x in pieces)
    return torch.cat(pieces, dim=dim, out=torch.empty(shape, dtype=dtype, device=pieces[0].device))


def unpack_shard(flat: torch.Tensor, n1p: int, h: int, nb1p: int | None = None):
    """Views (w1 [n1p, h], b1 [nb1p], w2 [n2p, h]) of one flat shard [W/p]; nb1p: n1p, or 0 without biases."""
    nb1p = n1p if nb1p is None else nb1p
    a, b = n1p * h, n1p * h + nb1p
    return flat[:a].view(n1p, h), flat[a:b], flat[b:].view(-1, h)  # [W/p] -> [n1p, h], [n1p], [n2p, h]


def unpack_gathered(flat: torch.Tensor, p: int, n1p: int, h: int, nb1p: int | None = None):
    """Full (w1 [p*n1p, h], b1 [p*nb1p], w2 [p*n2p, h]) from p rank-major flat shards [p*W/p]; rows are
    grouped by rank (for attention: rank group, then q/k/v, then the group's features). `nb1p`: b1's
    length per rank (n1p, or 0 without biases)."""
    nb1p = n1p if nb1p is None else nb1p
    per = flat.view(p, -1)  # [W] -> [p, W/p]
    a = n1p * h
    # one copy out into three buffers (none a view that would keep `flat` alive): [p, n1p*h], [p, nb1p], [p, n2p*h]
    w1, b1, w2 = torch.split_with_sizes_copy(per, [a, nb1p, per.shape[1] - a - nb1p], dim=1)
    return w1.view(p * n1p, h), b1.view(-1), w2.view(-1, h)  # [p*n1p, h], [p*nb1p], [p*n2p, h]


def pack_rows(w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    """One shard without a bias as rows `cat(w1, w2)`: [n1/p, h], [n2/p, h] -> [(n1 + n2)/p, h] (`pack_shard`'s
    elements in its order, not flattened: one operator)."""
    return torch.cat([w1, w2])  # [n1/p + n2/p, h]


def unpack_gathered_rows(full: torch.Tensor, p: int, n1p: int):
    """Full (w1 [p*n1p, h], w2 [p*n2p, h]) from p rank-major `pack_rows` [p*(n1p + n2p), h]: `unpack_gathered`
    without a bias, each an own copy (none keeps `full` alive)."""
    h = full.shape[-1]
    per = full.view(p, -1, h)  # [p*(n1p + n2p), h] -> [p, n1p + n2p, h]
    w1, w2 = torch.split_with_sizes_copy(per, [n1p, per.shape[1] - n1p], dim=1)  # [p, n1p, h], [p, n2p, h]
    return w1.view(-1, h), w2.view(-1, h)  # [p*n1p, h], [p*n2p, h]


def split_sections(a: torch.Tensor, sections: tuple[int, ...], groups: int) -> list[torch.Tensor]:
    """The sections of features grouped by `groups` ranks (rank-major, each rank's features ordered by
    section: a gathered ZeRO-3 GEMM output, or one rank's own with groups = 1), each in natural order:
    [.., groups * sum(sections)/groups] -> [.., n] per section."""
    grouped = a.unflatten(-1, (groups, -1))  # [.., n1] -> [.., groups, n1/groups]
    parts = grouped.split([n // groups for n in sections], dim=-1)  # [.., groups, n/groups] each
    return [part.flatten(-2) for part in parts]  # [.., groups, n/groups] -> [.., n]


def join_sections(parts: list[torch.Tensor], groups: int) -> torch.Tensor:
    """Inverse of `split_sections`: [.., n] per section -> [.., groups * sum(n)/groups]."""
    grouped = [part.unflatten(-1, (groups, -1)) for part in parts]  # [.., n] -> [.., groups, n/groups]
    return torch.cat(grouped, dim=-1).flatten(-2)  # [.., groups, n1/groups] -> [.., n1]
