from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from paradyse_lab.errors import UserInputError
from paradyse_lab.workload.packing import pack_document_indices, pack_documents


def _naive_first_fit(lengths, budget, visit):
    """First-fit written the slow obvious way: scan the open steps in order."""
    steps, used = [], []
    for i in visit:
        n = lengths[i]
        if n > budget:
            steps.append([i])
            used.append(float("inf"))
            continue
        for s, u in enumerate(used):
            if u + n <= budget:
                steps[s].append(i)
                used[s] += n
                break
        else:
            steps.append([i])
            used.append(n)
    return steps


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 120), min_size=1, max_size=40), st.integers(1, 100),
       st.sampled_from(["sorted", "shuffled"]), st.integers(0, 5))
def test_first_fit_matches_the_obvious_scan(lengths, budget, order, seed):
    steps = pack_document_indices(lengths, budget, order, seed)
    assert sorted(i for s in steps for i in s) == list(range(len(lengths)))  # every document once
    for s in steps:
        assert sum(lengths[i] for i in s) <= budget or len(s) == 1
    if order == "sorted":
        visit = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
        assert sorted(map(tuple, _naive_first_fit(lengths, budget, visit))) == sorted(steps)
        longest = [max(lengths[i] for i in s) for s in steps]
        assert longest == sorted(longest)  # short to long, as the paper trains
    else:
        visit = [int(i) for i in np.random.default_rng(seed).permutation(len(lengths))]
        assert [tuple(s) for s in _naive_first_fit(lengths, budget, visit)] == steps
    assert [tuple(lengths[i] for i in s) for s in steps] == pack_documents(lengths, budget, order, seed)


def test_shuffled_is_first_fit_in_the_seeded_order():
    lengths = [7, 3, 9, 2, 5, 5, 8, 1, 4, 6]
    visit = [int(i) for i in np.random.default_rng(3).permutation(len(lengths))]
    expected = [tuple(s) for s in _naive_first_fit(lengths, 10, visit)]
    assert pack_document_indices(lengths, 10, "shuffled", seed=3) == expected
    assert pack_documents(lengths, 10, "shuffled", 3) == pack_documents(lengths, 10, "shuffled", 3)
    assert pack_documents(lengths, 10, "shuffled", 3) != pack_documents(lengths, 10, "shuffled", 4)


def test_first_fit_decreasing_packs_tightly():
    # the optimum, 3 full steps, ordered by their longest document
    assert pack_documents([2, 5, 3, 6, 4, 5, 3, 2], 10) == [(3, 3, 2, 2), (5, 5), (6, 4)]


def test_a_document_longer_than_the_budget_is_a_step_of_its_own():
    steps = pack_documents([100, 3, 40, 7], 10)
    assert (100,) in steps and (40,) in steps
    assert Counter(n for s in steps for n in s) == Counter([100, 3, 40, 7])
    assert steps[-1] == (100,)  # sorted: the longest document comes last
    assert pack_documents([5], 5) == [(5,)]


@pytest.mark.parametrize("kwargs, match", [
    ({"token_budget": 0}, "--pack-tokens must be a positive integer"),
    ({"token_budget": 8, "order": "random"}, "pack order must be one of sorted, shuffled"),
])
def test_bad_arguments(kwargs, match):
    with pytest.raises(UserInputError, match=match):
        pack_documents([1, 2, 3], **kwargs)
