"""How the per-document zig-zag layout of a packed step shares attention among the ranks of a ring.

Library module (the cost model's schedules charge ring strategies with it; the runtime's packed steps lay
out tokens this way; `python -m
paradyse_lab.app.measure.pack_balance
github_code --pack-tokens 32768 --p 8` prints the imbalance over a workload).

A packed step is a sequence of attention segments: each document, then its padding to a multiple of 2p
(a segment of its own: its tokens attend only to each other). The layout cuts every layout document (a
document with its padding: `layout_groups`) into 2p chunks, and rank r holds chunks r and 2p-1-r of each
(Megatron-LM's THD layout for context parallelism and ring-flash-attention's varlen zig-zag cut every
sequence of a batch this way). Under ring attention a rank computes the attention of its own queries
against every key of their segment, so its work is the (query, key) pairs of its tokens: pos + 1 keys for a
token at position pos of its segment (causal), n for a segment of n tokens (non-causal). Each padded
document's pairs are shared evenly by the chunk pairs (r, 2p-1-r) when it has no padding; a document's
padding (fewer than 2p tokens, in its last chunks, which rank 0 holds) moves at most about 2p * n_i / p
pairs from rank 0's share, so on long documents the busiest rank over the mean is 1 to within a few
parts in ten thousand.

Counts are exact integers in O(segments * p) (each segment cut at chunk boundaries, the causal work of a
piece an arithmetic series).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from paradyse_lab.core.strategies import layout_unit


def _triangle(m: int) -> int:
    """1 + 2 + ... + m."""
    return m * (m + 1) // 2


def layout_groups(segments: Sequence[int], p: int) -> list[tuple[int, ...]]:
    """The segments grouped into layout documents: a group closes at the first segment end at which its
    length is a multiple of 2p (a document and its padding; `layout_documents` reads a
    pack's offsets the same way)."""
    unit = layout_unit(p)
    groups, current = [], []
    for n in segments:
        current.append(n)
        if sum(current) % unit == 0:
            groups.append(tuple(current))
            current = []
    if current:
        raise ValueError(f"segments {tuple(segments)[:8]}... must sum to a multiple of 2p = {unit}")
    return groups


def _chunk_pairs(group: tuple[int, ...], chunks: int, causal: bool) -> list[int]:
    """(query, key) pairs of each of the `chunks` chunks of one layout document of these segments."""
    chunk = sum(group) // chunks
    work = [0] * chunks
    start = 0
    for n in group:
        end = start + n
        for c in range(start // chunk, (end - 1) // chunk + 1):  # the chunks the segment touches
            lo, hi = max(start, c * chunk), min(end, (c + 1) * chunk)
            # causal: positions lo-start .. hi-start-1 see (pos + 1) keys each
            work[c] += _triangle(hi - start) - _triangle(lo - start) if causal else n * (hi - lo)
        start = end
    return work


def rank_attention_pairs(segments: Sequence[int], p: int, causal: bool) -> list[int]:
    """(query, key) pairs of each rank's queries under the per-document zig-zag layout (module docstring).

    `segments`: the pack's attention segments in order (documents, each followed by its padding); every
    layout document (`layout_groups`) a multiple of 2p (p > 1)."""
    segments = tuple(int(n) for n in segments)
    if any(n <= 0 for n in segments):
        raise ValueError(f"segments {segments[:8]}... must be positive")
    if p == 1:
        return [sum(_triangle(n) if causal else n * n for n in segments)]
    chunks = layout_unit(p)  # 2p zig-zag chunks (p > 1)
    pairs = [0] * p
    for group in layout_groups(segments, p):
        work = _chunk_pairs(group, chunks, causal)
        for r in range(p):
            pairs[r] += work[r] + work[chunks - 1 - r]  # rank r: chunks r and 2p-1-r of every document
    return pairs


@lru_cache(maxsize=4096)
def zigzag_imbalance(segments: tuple[int, ...], p: int, causal: bool) -> float:
    """The busiest rank's attention pairs over the mean rank's (1.0: balanced; one sequence whose length is a
    multiple of 2p is exactly 1.0). A ring strategy's attention time on a packed step is its even 1/p share
    times this."""
    pairs = rank_attention_pairs(segments, p, causal)
    return max(pairs) * len(pairs) / sum(pairs)
