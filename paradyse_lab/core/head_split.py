"""The uneven split of attention heads over n ranks, one rule for the catalog, the cost model and the runtime.

When n does not divide the query heads H, rank r gets ceil(H / n) heads if r < H % n, else floor(H / n), as
consecutive heads (DeepSpeed's uneven-heads Ulysses splits them so too: `get_shard_size_list`, ranks in order,
the remainder on the first ranks). Under grouped-query attention (g = H / KV query heads per K/V head, query head
i reading K/V head i // g) a rank receives exactly the K/V heads its query heads read: a consecutive range, which
may span two (or more) K/V heads, and ranks whose query heads share one K/V head each receive a copy of it (the
copies' gradients are summed back). Without GQA every query head is its own K/V head.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache


@dataclass(frozen=True)
class HeadSplit:
    """Which query and K/V heads each of n ranks holds: half-open ranges [start, end) per rank."""

    queries: tuple[tuple[int, int], ...]
    """Query heads of each rank."""
    kv: tuple[tuple[int, int], ...]
    """K/V heads of each rank: those its query heads read."""
    group: int
    """Query heads per K/V head (g = H / KV)."""

    def width(self, rank: int) -> int:
        """Heads a rank receives through the q | k | v all-to-all: its query heads and twice its K/V heads."""
        (q0, q1), (k0, k1) = self.queries[rank], self.kv[rank]
        return (q1 - q0) + 2 * (k1 - k0)

    @property
    def most_queries(self) -> int:
        """The most query heads of any rank (ceil(H / n)): that rank sets the attention time."""
        return max(q1 - q0 for q0, q1 in self.queries)

    @property
    def widest(self) -> int:
        """The most heads any rank receives through the q | k | v all-to-all (`width`)."""
        return max(self.width(r) for r in range(len(self.queries)))

    def kept_heads(self, rank: int) -> tuple[int, int]:
        """(query heads, K/V heads) of a rank: its kernel keeps q and o of the first, k and v of the second."""
        (q0, q1), (k0, k1) = self.queries[rank], self.kv[rank]
        return q1 - q0, k1 - k0

    def kernel_groups(self, rank: int) -> tuple[tuple[int, int], ...]:
        """A rank's attention as kernel calls that each see whole GQA groups: (query heads, K/V heads) per call,
        in head order, consecutive K/V heads serving the same number of this rank's query heads merged into one
        call (MHA: one call; a rank whose query heads start or end inside a K/V head's group: one call per run)."""
        (q0, q1), (k0, k1) = self.queries[rank], self.kv[rank]
        g = self.group
        served = [min(q1, (j + 1) * g) - max(q0, j * g) for j in range(k0, k1)]  # this rank's query heads per K/V
        calls: list[list[int]] = []
        for count in served:
            if calls and calls[-1][0] == count:
                calls[-1][1] += 1
            else:
                calls.append([count, 1])
        return tuple((count * kv, kv) for count, kv in calls)

    def uneven_kernel_rank(self) -> int | None:
        """The first rank whose attention needs more than one kernel call (`kernel_groups`), or None: a ring
        attention runs its heads as one call, so a ring over such a split would need one ring per call."""
        return next((r for r in range(len(self.queries)) if len(self.kernel_groups(r)) > 1), None)


def splits_evenly(heads: int, kv_heads: int, n: int) -> bool:
    """Whether Ulysses' even rule holds at n: n divides the heads, and the K/V heads divide n or n divides them
    (each K/V head then replicated n / kv_heads times); where it fails, the split is this module's uneven one."""
    return heads % n == 0 and (kv_heads % n == 0 or n % kv_heads == 0)


@cache
def head_split(heads: int, kv_heads: int, n: int) -> HeadSplit:
    """The split of `heads` query heads (`kv_heads` K/V heads, dividing them) over n ranks (module docstring).
    Every rank needs one query head at least: n <= heads."""
    if not 0 < n <= heads or heads % kv_heads:
        raise ValueError(f"cannot split {heads} heads ({kv_heads} K/V heads) over {n} ranks")
    g = heads // kv_heads
    queries, start = [], 0
    for r in range(n):
        count = heads // n + (1 if r < heads % n else 0)
        queries.append((start, start + count))
        start += count
    kv = tuple((q0 // g, (q1 - 1) // g + 1) for q0, q1 in queries)
    return HeadSplit(tuple(queries), kv, g)
