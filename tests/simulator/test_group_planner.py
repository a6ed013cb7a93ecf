"""The group planner: exact against brute force, greedy never worse than the choices it is given, the item times
and synchronisation of a real model, and the `GroupedStep` it hands the runtime."""

import itertools
import math

import numpy as np
import pytest

from paradyse_lab.cluster.files import cluster_with_gpus
from paradyse_lab.cluster.presets import PRESETS
from paradyse_lab.core.model_spec import get_model
from paradyse_lab.costmodel import formulas as F
from paradyse_lab.costmodel.grouped_states import grouped_state_kept_bytes, reduce_phase_bytes, sharded_total
from paradyse_lab.errors import UserInputError
from paradyse_lab.simulator.group_dynamic_cp import smallest_fit_partition
from paradyse_lab.simulator.group_exact import plan_exact
from paradyse_lab.simulator.group_greedy import lpt, plan_greedy, rebalance
from paradyse_lab.simulator.group_problem import (
    GroupChoice,
    ItemTimes,
    binary_partitions,
    fill,
    lower_bound_s,
    reassess,
)
from paradyse_lab.simulator.grouped_runs import global_batches, simulate_grouped
from paradyse_lab.simulator.grouped_steps import (
    RING_POLICY,
    GroupPricer,
    choose,
    grouped_step,
    power_sizes,
    sharded_layer_params,
)


def _random_costs(rng, world: int, items: int) -> ItemTimes:
    """Times that fall with the group size, and items too large for the small groups (inf)."""
    work = rng.uniform(1, 10, items)
    need = rng.choice(power_sizes(world), items, p=None)
    return ItemTimes(world, {s: np.where(need <= s, work / s ** rng.uniform(0.5, 1.0) + 0.2 * s, math.inf)
                               for s in power_sizes(world)})


def _sync(sizes):
    return 0.0 if len(sizes) == 1 else 0.3 / min(sizes)


def _brute_force(costs: ItemTimes, sync) -> float:
    best = math.inf
    for sizes in binary_partitions(costs.world):
        for where in itertools.product(range(len(sizes)), repeat=costs.items):
            loads = [0.0] * len(sizes)
            for i, j in enumerate(where):
                loads[j] += costs.times[sizes[j]][i]
            best = min(best, max(loads) + sync(sizes))
    return best


def test_binary_partitions_are_every_power_of_two_split():
    assert binary_partitions(4) == [(4,), (2, 2), (2, 1, 1), (1, 1, 1, 1)]
    assert len(binary_partitions(8)) == 10
    assert fill([4, 1], 8) == (4, 2, 1, 1)


@pytest.mark.parametrize("seed", range(6))
def test_exact_equals_brute_force(seed):
    rng = np.random.default_rng(seed)
    costs = _random_costs(rng, 4, int(rng.integers(1, 5)))
    exact = plan_exact(costs, _sync)
    assert exact.step_s == pytest.approx(_brute_force(costs, _sync))
    loads = [sum(costs.times[s][i] for i in items) for s, items in zip(exact.sizes, exact.assignment)]
    assert max(loads) == pytest.approx(exact.makespan_s)
    assert sorted(i for a in exact.assignment for i in a) == list(range(costs.items))


@pytest.mark.parametrize("seed", range(6))
def test_greedy_is_never_worse_than_one_group_or_the_smallest_fit_and_never_beats_exact(seed):
    rng = np.random.default_rng(100 + seed)
    costs = _random_costs(rng, 8, 7)
    one = lpt(costs, (8,), _sync)
    smallest = smallest_fit_partition(costs, _sync)
    greedy = plan_greedy(costs, _sync, [smallest])
    assert greedy.step_s <= min(one.step_s, smallest.step_s) + 1e-12
    assert plan_exact(costs, _sync).step_s <= greedy.step_s + 1e-12


def test_the_exact_planner_refuses_large_instances():
    costs = ItemTimes(32, {s: np.ones(3) for s in power_sizes(32)})
    with pytest.raises(UserInputError, match="exact group planner takes at most"):
        plan_exact(costs, _sync)
    with pytest.raises(UserInputError, match="power-of-two number of GPUs"):
        ItemTimes(24, {1: np.ones(2)})


@pytest.fixture(scope="module")
def pricers():
    cluster = cluster_with_gpus(PRESETS["a100-80gb-x8"], 4)
    model = get_model("bert")
    dyn = GroupPricer(model, cluster, "dynamic:dp", cluster.plan_budget_bytes)
    ring = GroupPricer(model, cluster, RING_POLICY, cluster.plan_budget_bytes)
    return dyn, ring


LENGTHS = (512, 2048, 1024, 700, 16384, 4096)


def test_sized_groups_are_never_slower_than_paradyse_or_smallest_fit(pricers):
    dyn, ring = pricers
    sized = choose("sized", LENGTHS, dyn, ring)
    paradyse = choose("paradyse", LENGTHS, dyn)
    dcp = choose("smallest-fit", LENGTHS, ring)
    assert sized.step_s <= min(paradyse.step_s, dcp.step_s) + 1e-12
    assert paradyse.sizes == (4,) and paradyse.sync_s == 0
    assert choose("sized-exact", LENGTHS, dyn).step_s <= sized.step_s + 1e-12
    step = grouped_step(sized, LENGTHS, dyn)
    assert step.sizes == sized.sizes and all(len(g.plans) == len(g.items) for g in step.groups)
    layers = get_model("bert").layers
    assert all(len(plan) == layers for g in step.groups for plan in g.plans)


def test_per_layer_plans_beat_the_ring_item_by_item_and_short_items_prefer_small_groups(pricers):
    dyn, ring = pricers
    for g in power_sizes(4):
        for n in LENGTHS:
            assert dyn.item(g, n)[0] <= ring.item(g, n)[0] + 1e-12
    # 512 tokens on one GPU beat 512 tokens on 4 per GPU-second (4 groups of one train 4 such items at once)
    assert dyn.item(1, 512)[0] < 4 * dyn.item(4, 512)[0]


def test_world_sharded_optimizer_states_raise_a_small_groups_budget_and_sync_costs_more_across_nodes(pricers):
    dyn, _ = pricers
    assert dyn.budget_for(4) == dyn.budget_bytes and dyn.budget_for(1) > dyn.budget_for(2) > dyn.budget_bytes
    assert dyn.sync_s((4,)) == 0 and dyn.sync_s((1, 1, 1, 1)) > dyn.sync_s((2, 2)) > 0
    model = get_model("bert")
    one_node = GroupPricer(model, PRESETS["h100-80gb-x8"], "dynamic:dp", 10**10)
    two_nodes = GroupPricer(model, PRESETS["h100-80gb-2x8"], "dynamic:dp", 10**10)
    assert two_nodes.sync_s((8, 8)) > 0 and two_nodes.sync_s((8, 8)) > one_node.sync_s((4, 4))


def test_global_batches_by_sequences_and_by_tokens():
    lengths = [10, 20, 30, 40, 50]
    by_count = global_batches(lengths, batch=2, seed=1)
    assert [len(b) for b in by_count] == [2, 2, 1] and sorted(sum(by_count, ())) == lengths
    by_tokens = global_batches(lengths, tokens=60, seed=1)
    assert all(sum(b) <= 60 for b in by_tokens) and sorted(sum(by_tokens, ())) == lengths


def test_a_run_of_grouped_steps_drops_what_fits_no_group(pricers):
    dyn, _ = pricers
    rows = simulate_grouped([(512, 1024), (10**8,)], "sized", dyn)
    assert list(rows["dropped"]) == [0, 1] and rows["step_time_s"].iloc[1] == 0
    assert rows["group_sizes"].iloc[0] and rows["step_time_s"].iloc[0] > 0


def test_reassessing_a_choice_that_trains_nothing_stays_infinite():
    costs = ItemTimes(2, {1: np.array([1.0, 2.0]), 2: np.array([1.0, 1.0])})
    nothing = GroupChoice((2,), ((),), math.inf, 0.0)
    assert reassess(nothing, costs, _sync).step_s == math.inf
    assert plan_greedy(costs, _sync, [reassess(nothing, costs, _sync)]).assignment != ((),)


@pytest.mark.parametrize("seed", range(4))
def test_the_lower_bound_never_exceeds_the_exact_optimum(seed):
    costs = _random_costs(np.random.default_rng(200 + seed), 4, 4)
    assert lower_bound_s(costs) <= plan_exact(costs, lambda sizes: 0.0).step_s + 1e-12


def test_a_step_whose_gather_buffers_do_not_fit_is_refused():
    model = get_model("llama3-8b")
    cluster = PRESETS["h100-80gb-x8"]
    roomy = GroupPricer(model, cluster, "dynamic:dp", cluster.plan_budget_bytes)
    tight = GroupPricer(model, cluster, "dynamic:dp", 20 * 2**30)
    assert roomy.state_phase_fits((1,) * 8) and math.isfinite(roomy.sync_s((1,) * 8))
    assert not tight.state_phase_fits((1,) * 8) and tight.sync_s((1,) * 8) == math.inf
    assert tight.sync_s((8,)) == 0.0  # one group of all GPUs gathers nothing


def test_the_state_phases_fit_exactly_the_bytes_the_cost_model_counts_for_them():
    # BERT's matrices do not split evenly over 6 ranks: the buffers are the counted ones (whole-model flat shards),
    # not per-matrix rounded shards, so the step fits at exactly its counted need and not one byte below
    model, sizes = get_model("bert"), (2, 4)
    cluster = cluster_with_gpus(PRESETS["a100-80gb-x8"], 6)
    kept = grouped_state_kept_bytes(model, 6, 2, sizes)
    phase = reduce_phase_bytes(model, 6, sizes)
    replicated = 2 * model.layers * F.replicated_params(model) + F.embedding_params(model)
    states = F.model_state_bytes_per_param(model) * (sharded_layer_params(model, 6) + replicated)
    gather = kept["group_weights"] + kept["send_buffer"] + kept["gather_buffer"]
    reduce = kept["group_weights"] + kept["group_grads"] + phase["world_grads"] + phase["transient"] - \
        model.dtype_bytes * (sharded_total(model) // 6)
    need = states + max(gather, reduce)
    assert GroupPricer(model, cluster, "dynamic:dp", need).state_phase_fits(sizes)
    assert not GroupPricer(model, cluster, "dynamic:dp", need - 1).state_phase_fits(sizes)


@pytest.mark.parametrize("seed", range(6))
def test_the_lower_bound_with_its_sync_never_exceeds_brute_force(seed):
    # brute force over every partition and assignment: the bound (per set of sizes, with its sync) is below it
    rng = np.random.default_rng(200 + seed)
    costs = _random_costs(rng, 4, int(rng.integers(1, 5)))
    assert lower_bound_s(costs, _sync) <= _brute_force(costs, _sync) + 1e-12


def test_a_step_whose_item_needs_every_gpu_is_bounded_by_one_group():
    # one item fits only the world: the step is one group of 8, every item after another (the bound is exact)
    times = {s: np.array([math.inf if s < 8 else 5.0, 4.0 / s, 4.0 / s]) for s in power_sizes(8)}
    costs = ItemTimes(8, times)
    assert lower_bound_s(costs, _sync) == pytest.approx(5.0 + 1.0)
    assert plan_greedy(costs, _sync).step_s == pytest.approx(5.0 + 1.0)


def test_rebalance_swaps_what_lpt_leaves():
    # two groups of 2 (one item fits only there) and two of 1: LPT fills the 2s first; a swap evens the loads
    times = {1: np.array([math.inf, 3.0, 3.0, 2.0]), 2: np.array([4.0, 1.0, 1.0, 2.5]), 4: np.full(4, math.inf),
             8: np.full(4, math.inf)}
    costs = ItemTimes(8, {s: times[s] for s in (1, 2, 4, 8)})
    start = GroupChoice((2, 2, 1, 1, 1, 1), ((0, 3), (1, 2), (), (), (), ()), 6.5, 0.0)
    better = rebalance(costs, start)
    assert better.makespan_s < start.makespan_s
    loads = [sum(costs.times[s][i] for i in items) for s, items in zip(better.sizes, better.assignment)]
    assert max(loads) == pytest.approx(better.makespan_s) == pytest.approx(4.0)
    assert sorted(i for a in better.assignment for i in a) == [0, 1, 2, 3]
