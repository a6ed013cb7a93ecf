"""How the zig-zag layout of a whole packed step shares attention among the ranks of a ring.

Library module (the cost model's schedules charge ring strategies with it; the runtime's packed steps lay
out tokens this way: runtime/packed.py, and `python -m runtime.measure.pack_balance github_code
--pack-tokens 32768 --p 8` prints the imbalance over a workload).

A packed step of S tokens (its documents, then its padding as one more segment, S a multiple of 2p) is cut
into 2p chunks of S/2p tokens, and rank r holds chunks r and 2p-1-r (the zig-zag order of ring attention:
ring-flash-attention's `zigzag_ring_flash_attn`, Megatron-LM context parallelism's load balancing; here over
the whole pack, not per document). Under ring
attention a rank computes the attention of its own queries against every key of their document, so its
work is the (query, key) pairs of its tokens: pos + 1 keys for a token at position pos of its document
(causal), n for a document of n tokens (non-causal). The zig-zag order makes those equal across ranks for
one sequence; a pack's document boundaries fall anywhere in the chunks, so a rank holding the end of a long
document does more than one holding its start or short documents: the ring then waits for its busiest rank.

Counts are exact integers in O(documents + p) (each document cut at chunk boundaries, the causal work of a
piece an arithmetic series).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from paradyse_lab.strategies import layout_unit


def _triangle(m: int) -> int:
    """1 + 2 + ... + m."""
    return m * (m + 1) // 2


def rank_attention_pairs(segments: Sequence[int], p: int, causal: bool) -> list[int]:
    """(query, key) pairs of each rank's queries under the zig-zag layout of the whole pack (module docstring).

    `segments`: the pack's documents and its padding, in order; their sum must be a multiple of 2p (p > 1)."""
    segments = tuple(int(n) for n in segments)
    total = sum(segments)
    if p == 1:
        return [sum(_triangle(n) if causal else n * n for n in segments)]
    chunks = layout_unit(p)  # 2p zig-zag chunks (p > 1)
    if total % chunks or any(n <= 0 for n in segments):
        raise ValueError(f"segments {segments[:8]}... must be positive and sum to a multiple of 2p = {chunks}, "
                         f"got {total}")
    chunk = total // chunks
    work = [0] * chunks  # per chunk
    start = 0
    for n in segments:
        end = start + n
        for c in range(start // chunk, (end - 1) // chunk + 1):  # the chunks the document touches
            lo, hi = max(start, c * chunk), min(end, (c + 1) * chunk)
            # causal: positions lo-start .. hi-start-1 see (pos + 1) keys each
            work[c] += _triangle(hi - start) - _triangle(lo - start) if causal else n * (hi - lo)
        start = end
    return [work[r] + work[chunks - 1 - r] for r in range(p)]  # rank r: chunks r and 2p-1-r


@lru_cache(maxsize=4096)
def zigzag_imbalance(segments: tuple[int, ...], p: int, causal: bool) -> float:
    """The busiest rank's attention pairs over the mean rank's (1.0: balanced; one sequence whose length is a
    multiple of 2p is exactly 1.0). A ring strategy's attention time on a packed step is its even 1/p share
    times this."""
    pairs = rank_attention_pairs(segments, p, causal)
    return max(pairs) * len(pairs) / sum(pairs)
