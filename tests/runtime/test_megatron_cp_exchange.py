"""The weight exchange of tensor x context parallel (runtime/strategies/megatron_cp.py): for every split of a power
of two ranks it is a permutation that moves every shard when 1 < a < p (so every rank sends the bytes the cost model
counts) and none at a = 1 and a = p, and it leaves on the b ranks of each ring group the b p-blocks of one a-block
(the world-4 cases run it at 2 x 2; these splits are larger than the test worlds)."""

from __future__ import annotations

import pytest

from paradyse_lab.runtime.strategies.megatron_cp import exchange_peers

SPLITS = [(p, a) for p in (2, 4, 8, 16, 32, 64) for a in (1, 2, 4, 8) if p % a == 0]


@pytest.mark.parametrize("p, a", SPLITS, ids=[f"{a}x{p // a}" for p, a in SPLITS])
def test_the_exchange_is_a_derangement_that_assembles_each_a_block(p, a):
    peers = [exchange_peers(p, a, r) for r in range(p)]
    srcs, dsts = [s for s, _, _ in peers], [d for _, d, _ in peers]
    assert sorted(srcs) == list(range(p)) and all(dsts[srcs[r]] == r for r in range(p)), peers
    moved = [srcs[r] != r for r in range(p)]
    assert all(moved) if 1 < a < p else not any(moved), srcs
    b = p // a
    for i in range(a):  # ring group i = ranks i, a + i, ...: the a-block i = p-blocks i*b .. i*b + b - 1
        assert sorted(srcs[j * a + i] for j in range(b)) == list(range(i * b, (i + 1) * b)), (i, srcs)
