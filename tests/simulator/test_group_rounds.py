"""Steps as rounds of splits: the exact rounds planner against brute force, the greedy one between one split and
the exact one, the rounds' lower bound, and Megatron's dynamic context-parallel scheduler's rules."""

import itertools
import math

import numpy as np
import pytest
from test_group_planner import _random_costs, _sync

from paradyse_lab.cluster.files import cluster_with_gpus
from paradyse_lab.cluster.presets import PRESETS
from paradyse_lab.core.model_spec import get_model
from paradyse_lab.errors import UserInputError
from paradyse_lab.simulator.group_exact import plan_exact
from paradyse_lab.simulator.group_greedy import plan_greedy
from paradyse_lab.simulator.group_megatron import (
    PER_RANK_CANDIDATES,
    buckets,
    choose_per_rank,
    fitting,
    gpus_needed,
    megatron_rounds,
    schedule,
)
from paradyse_lab.simulator.group_problem import ItemTimes, binary_partitions
from paradyse_lab.simulator.group_rounds import plan_rounds, plan_rounds_exact, rounds_lower_bound_s
from paradyse_lab.simulator.grouped_runs import simulate_grouped
from paradyse_lab.simulator.grouped_steps import RING_POLICY, GroupPricer, power_sizes
from paradyse_lab.simulator.round_steps import choose_rounds, grouped_rounds


def _set_partitions(items):
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in _set_partitions(rest):
        yield [[first]] + part
        for k in range(len(part)):
            yield part[:k] + [[first] + part[k]] + part[k + 1:]


def _brute_force_rounds(costs: ItemTimes, sync) -> float:
    """Every division of the items into rounds, every split and assignment per round: rounds' makespans summed
    plus the largest round sync."""
    best = math.inf
    for rounds in _set_partitions(list(range(costs.items))):
        options = []
        for block in rounds:
            choices = []
            for sizes in binary_partitions(costs.world):
                span = min(max(sum(costs.times[sizes[j]][i] for i, j in zip(block, where) if j == g)
                               for g in range(len(sizes)))
                           for where in itertools.product(range(len(sizes)), repeat=len(block)))
                choices.append((span, sync(sizes)))
            options.append(choices)
        for pick in itertools.product(*options):
            best = min(best, sum(s for s, _ in pick) + max(y for _, y in pick))
    return best


@pytest.mark.parametrize("seed", range(5))
def test_exact_rounds_equal_brute_force_and_bound_them(seed):
    rng = np.random.default_rng(seed)
    costs = _random_costs(rng, 4, int(rng.integers(1, 5)))
    exact = plan_rounds_exact(costs, _sync)
    assert exact.step_s == pytest.approx(_brute_force_rounds(costs, _sync))
    assert sorted(i for r in exact.rounds for a in r.assignment for i in a) == list(range(costs.items))
    assert rounds_lower_bound_s(costs, _sync) <= exact.step_s + 1e-12
    assert exact.step_s <= plan_exact(costs, _sync).step_s + 1e-12  # one split is one round


@pytest.mark.parametrize("seed", range(4))
def test_greedy_rounds_lie_between_the_exact_rounds_and_one_split(seed):
    rng = np.random.default_rng(50 + seed)
    costs = _random_costs(rng, 8, 6)
    greedy = plan_rounds(costs, _sync)
    assert greedy.step_s <= plan_greedy(costs, _sync).step_s + 1e-12
    assert plan_rounds_exact(costs, _sync).step_s <= greedy.step_s + 1e-12
    assert sorted(i for r in greedy.rounds for a in r.assignment for i in a) == list(range(costs.items))


def test_a_long_item_runs_alone_on_every_gpu_and_the_short_ones_on_small_groups():
    """One item fastest on all 8 GPUs beside eight short ones fastest alone: one split trains all nine on the
    whole world (or the long one slowly on a small group); two rounds do better."""
    long = {1: 40.0, 2: 20.0, 4: 10.0, 8: 5.0}
    short = {1: 1.0, 2: 0.9, 4: 0.8, 8: 0.7}
    costs = ItemTimes(8, {s: np.array([long[s]] + [short[s]] * 8) for s in power_sizes(8)})
    one = plan_greedy(costs, _sync)
    rounds = plan_rounds(costs, _sync)
    assert rounds.step_s < one.step_s - 1
    assert [r.sizes for r in rounds.rounds] == [(8,), (1,) * 8]
    assert rounds.step_s == pytest.approx(5.0 + 1.0 + _sync((1,) * 8))


def test_the_exact_rounds_planner_refuses_large_instances():
    with pytest.raises(UserInputError, match="exact rounds planner takes at most"):
        plan_rounds_exact(ItemTimes(8, {s: np.ones(9) for s in power_sizes(8)}), _sync)


def test_megatron_gpus_needed_and_buckets():
    assert [gpus_needed(n, 1024) for n in (100, 1024, 1025, 4096, 5000)] == [1, 1, 2, 4, 8]
    items = list(enumerate([8192, 4096, 2048, 1024, 512, 512]))
    cut = buckets(items, 1024)
    assert [i for b in cut for i, _ in b] == list(range(6))  # order kept
    assert len(cut) <= len({gpus_needed(n, 1024) for _, n in items})


def test_megatron_rounds_leave_no_gpu_idle_and_train_each_sequence_once():
    lengths = [8192, 600, 700, 800, 900, 1000, 500, 4000, 3000, 300]
    rounds = schedule(lengths, 1024, 8)
    assert sorted(i for r in rounds for _, items in r for i in items) == list(range(len(lengths)))
    assert all(sum(s for s, _ in r) == 8 for r in rounds)  # the smallest group doubled until every GPU works
    assert rounds[0] == [(8, [0])]  # the 8-GPU sequence fills the first round alone
    assert schedule([20000], 1024, 8) is None  # needs 32 ranks


@pytest.mark.parametrize("seed", range(20))
def test_megatron_schedules_random_batches(seed):
    """Every sequence once, every round on every GPU, whatever the lengths (buckets may empty in any order)."""
    rng = np.random.default_rng(seed)
    lengths = [int(x) for x in rng.choice([300, 900, 1500, 3000, 6000, 7000], int(rng.integers(1, 40)))]
    for world in (8, 16, 32):
        rounds = schedule(lengths, 1024, world)
        assert sorted(i for r in rounds for _, items in r for i in items) == list(range(len(lengths)))
        assert all(sum(s for s, _ in r) == world and all(items for _, items in r) for r in rounds)


def test_megatron_per_rank_length_is_chosen_where_every_sequence_fits():
    # a sequence of n tokens fits a group of g when n / g <= 2048; a larger group costs more per GPU-second
    lengths = [4096, 1024, 512, 2048]
    costs = ItemTimes(8, {s: np.array([n / s + 100 * s if n / s <= 2048 else math.inf for n in lengths])
                          for s in power_sizes(8)})
    per_rank = choose_per_rank([(costs, lengths)], _sync)
    chosen = megatron_rounds(costs, lengths, per_rank, _sync).step_s
    assert math.isfinite(chosen)
    for other in PER_RANK_CANDIDATES:
        assert megatron_rounds(costs, lengths, other, _sync).step_s >= chosen
    assert fitting(costs, lengths, 4096) == [1, 2, 3]  # 4096 tokens on one rank do not fit


@pytest.fixture(scope="module")
def pricers():
    cluster = cluster_with_gpus(PRESETS["a100-80gb-x8"], 4)
    model = get_model("bert")
    return (GroupPricer(model, cluster, "dynamic:dp", cluster.plan_budget_bytes),
            GroupPricer(model, cluster, RING_POLICY, cluster.plan_budget_bytes))


LENGTHS = (512, 2048, 1024, 700, 16384, 4096)


def test_our_rounds_are_never_slower_than_megatron_or_one_split(pricers):
    dyn, ring = pricers
    ours = choose_rounds("rounds", LENGTHS, dyn, ring, per_rank=4096)
    megatron = choose_rounds("megatron", LENGTHS, ring, per_rank=4096)
    one_split = choose_rounds("sized", LENGTHS, dyn, ring)
    assert len(one_split.rounds) == 1
    assert ours.step_s <= min(megatron.step_s, one_split.step_s) + 1e-12
    steps = grouped_rounds(ours, LENGTHS, dyn)  # what the runtime runs: each round's groups, its items mapped back
    assert [s.sizes for s in steps.rounds] == [r.sizes for r in ours.rounds]
    assert [set(items) for items in steps.items] == [{i for a in r.assignment for i in a} for r in ours.rounds]
    size_of = steps.size_of()
    assert all(size_of[i] == size for r in ours.rounds for size, a in zip(r.sizes, r.assignment) for i in a)
    rows = simulate_grouped([LENGTHS, LENGTHS[:3]], "megatron", ring, per_rank=4096)
    assert rows.step_time_s[0] == pytest.approx(megatron.step_s)
    assert (rows.lower_bound_s <= rows.step_time_s + 1e-12).all() and set(rows.rounds) >= {1}
    with pytest.raises(UserInputError, match="per-rank length"):
        choose_rounds("megatron", LENGTHS, ring)
