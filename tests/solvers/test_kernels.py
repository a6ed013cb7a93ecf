"""The compiled kernels (`paradyse_lab.solvers.kernels`, `paradyse_lab.solvers.bound_kernels`) through their wrappers
in `paradyse_lab.solvers.bounds`,
against brute force."""

import itertools

import numpy as np
import pytest

from paradyse_lab.solvers.bounds import CapTable, cost_to_come, cost_to_go, dual_bound, switch_bounds
from paradyse_lab.solvers.instances import random_problem


def all_plans(L, O):
    return [np.array(p) for p in itertools.product(range(O), repeat=L)]


def total(values, sw, plan):
    return values[np.arange(plan.size), plan].sum() + sum(sw[a, b] for a, b in zip(plan[:-1], plan[1:]))


@pytest.mark.parametrize("seed", range(4))
def test_viterbi_passes_equal_brute_force(seed):
    rng = np.random.default_rng(seed)
    L, O = 4, 3
    values = rng.uniform(0, 1, (L, O))
    values[rng.uniform(size=(L, O)) < 0.2] = np.inf  # options left out
    values[:, 0] = rng.uniform(0, 1, L)  # every decision keeps one
    sw = rng.uniform(0, 0.5, (O, O))
    np.fill_diagonal(sw, 0)
    plans = all_plans(L, O)
    go, come = cost_to_go(values, sw), cost_to_come(values, sw)
    for l in range(L):
        for o in range(O):
            if not np.isfinite(values[l, o]):
                continue
            through = [p for p in plans if p[l] == o]
            after = min(total(values[l:], sw, p[l:]) - values[l, o] for p in through) if l < L - 1 else 0.0
            before = min(total(values[:l + 1], sw, p[:l + 1]) - values[l, o] for p in through) if l else 0.0
            assert go[l, o] == pytest.approx(after, rel=1e-12)
            assert come[l, o] == pytest.approx(before, rel=1e-12)
    best = min(total(values, sw, p) for p in plans)
    assert (values[0] + go[0]).min() == pytest.approx(best, rel=1e-12)
    per_step = np.stack([sw * (l + 1) for l in range(L)])  # [L, O, O]: step l charged from l - 1 into l
    go_steps = cost_to_go(values, per_step)
    for o in range(O):
        assert go_steps[0, o] == pytest.approx(min(
            sum(values[l, p[l]] + per_step[l, p[l - 1], p[l]] for l in range(1, L)) for p in plans if p[0] == o))


def plan_totals(values, sw, plans):
    """`total` of every plan of `plans` [N, L] at once: [N]."""
    return values[np.arange(plans.shape[1]), plans].sum(axis=1) + sw[plans[:, :-1], plans[:, 1:]].sum(axis=1)


@pytest.mark.parametrize("seed", range(6))
def test_lagrangian_bounds_are_below_the_optimum_and_their_plans_fit(seed):
    """Against brute force over all 3^5 plans, each plan's sums taken for all plans at once (`plan_totals`)."""
    rng = np.random.default_rng(seed)
    p = random_problem(rng, 5, 3, switch=True)
    table = CapTable.build(p)
    plans = np.array(all_plans(5, 3))  # [243, 5]
    rows = np.arange(5)
    for c in np.flatnonzero(p.budget_bytes >= table.peak_floor):
        cap = table.caps[c]
        budget = p.budget_bytes - p.fixed_bytes - int(cap)
        times = np.where(p.effective_transient <= cap, p.time_s, np.inf)
        fitting = plans[np.isfinite(times[rows, plans]).all(axis=1) & (p.kept_bytes[rows, plans].sum(axis=1) <= budget)]
        lam, bound, plan, lam_fit, over = dual_bound(times, p.kept_bytes, budget)
        assert lam >= 0 and lam_fit >= lam and (fitting == plan).all(axis=1).any()
        best_plain = p.time_s[rows, fitting].sum(axis=1).min()
        assert bound <= best_plain * (1 + 1e-12)
        best = p.fixed_time_s + plan_totals(p.time_s, p.switch_s, fitting).min()
        for lam_k in (0.0, lam, 2 * lam + 1e-12):
            sb = switch_bounds(p, table, np.array([c]), np.array([lam_k]), np.array([budget]))[0]
            relaxed = plan_totals(times + lam_k * p.kept_bytes, p.switch_s, plans).min()
            assert sb == pytest.approx(p.fixed_time_s + relaxed - lam_k * budget, rel=1e-12, abs=1e-12)
            assert sb <= best * (1 + 1e-12)


def test_each_kernel_has_one_specialisation_the_warm_up_made():
    """Real solves reuse what `warm_up` compiled: a second signature would be compiled on first use and
    timed as part of a solve."""
    from paradyse_lab.solvers import bound_kernels, kernels
    from paradyse_lab.solvers.dp import DPSolver
    from paradyse_lab.solvers.instances import model_problem

    kernels.warm_up()
    rng = np.random.default_rng(0)
    for problem in (random_problem(rng, 30, 6), random_problem(rng, 30, 6, switch=True),
                    model_problem(rng, "gpt", 6, 131072, True, "sublayer")):
        DPSolver().solve(problem)
    for module, names in ((bound_kernels, ("lagrangian_dual", "viterbi_to_go", "viterbi_to_come",
                                           "capped_viterbi_totals")),
                          (kernels, ("keep_across_options", "pareto_pass"))):
        for name in names:
            assert len(getattr(module, name).signatures) == 1, name


def test_orderings_sort_and_select_like_numpy():
    """`_argsort` (what `_undominated` orders candidates by) sorts like np.argsort, NaN last, and
    `_least(a, k)` (the beam cut) picks k least values, on arrays with many ties, around the size where the
    sort switches to insertion sort. Their order among ties is numba's by construction (the same steps)."""
    from paradyse_lab.solvers.kernels import _argsort, _least

    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 15, 16, 17, 40, 200):
        for _ in range(10):
            a = rng.choice([0.0, 1.0, 2.5, -np.inf, np.inf, np.nan], n)
            order = _argsort(a)
            assert sorted(order) == list(range(n))
            np.testing.assert_array_equal(a[order], np.sort(a))
            for k in {1, (n + 1) // 2, n}:
                chosen = _least(a, k)
                assert chosen.size == k and len(set(chosen)) == k
                np.testing.assert_array_equal(np.sort(a[chosen]), np.sort(a)[:k])


def test_bisection_finds_where_np_searchsorted_does():
    """`_first_not_before(a, lo, hi, v)` (how `keep_across_options` counts the faster states of a bucket) is
    lo + np.searchsorted(a[lo:hi], v) on ascending slices with ties, infinities and NaN, for values between,
    equal to and outside theirs."""
    from paradyse_lab.solvers.kernels import _first_not_before

    rng = np.random.default_rng(0)
    values = np.array([-np.inf, -1.0, 0.0, 0.5, 1.0, 2.5, np.inf, np.nan])
    for n in (0, 1, 2, 7, 30):
        a = np.sort(rng.choice(values[:-1], n))
        a[n - n // 4:] = np.nan if n > 3 else a[n - n // 4:]  # NaN sorts last
        for lo in range(n + 1):
            for hi in range(lo, n + 1, 3):
                for v in values:
                    assert _first_not_before(a, lo, hi, v) == lo + np.searchsorted(a[lo:hi], v), (a, lo, hi, v)


def test_rounded_plan_fits_and_splits_identical_decisions():
    from paradyse_lab.solvers.bounds import rounded_plan

    rng = np.random.default_rng(3)
    for _ in range(30):
        p = random_problem(rng, 12, 4)
        table = CapTable.build(p)
        for c in np.flatnonzero(p.budget_bytes >= table.peak_floor)[::5]:
            budget = p.budget_bytes - p.fixed_bytes - int(table.caps[c])
            times = np.where(p.effective_transient <= table.caps[c], p.time_s, np.inf)
            _, bound, fit, _, over = dual_bound(times, p.kept_bytes, budget)
            plan = rounded_plan(times, p.kept_bytes, budget, fit, over)
            rows = np.arange(12)
            assert p.kept_bytes[rows, plan].sum() <= budget and np.isfinite(times[rows, plan]).all()
            assert times[rows, fit].sum() >= times[rows, plan].sum() >= bound - 1e-12 * abs(bound)
    # ten identical decisions, a light slow option and a heavy fast one: the best split is 4 fast ones
    times = np.tile([3.0, 1.0], (10, 1))
    kept = np.tile([10, 30], (10, 1)).astype(np.int64)
    _, _, fit, _, over = dual_bound(times, kept, 180)
    assert sorted(rounded_plan(times, kept, 180, fit, over)) == [0] * 6 + [1] * 4


def test_warm_up_waits_for_the_process_compiling_the_kernels(monkeypatch):
    """warm_up() takes the compile lock (a file lock: another process compiling on a fresh install holds it),
    so it waits while the lock is held elsewhere and finishes once it is released."""
    import fcntl
    import threading
    from pathlib import Path

    import paradyse_lab.solvers.kernels

    paradyse_lab.solvers.kernels.warm_up()  # compiled (or loaded) here: the waiting call below only re-runs them
    monkeypatch.setattr(paradyse_lab.solvers.kernels, "_warm", False)
    lock = Path(paradyse_lab.solvers.kernels.__file__).resolve().parent / "__pycache__" / "kernels.compile.lock"
    with open(lock, "a") as held:  # its own open file: flock excludes it even from this process's other opens
        fcntl.flock(held, fcntl.LOCK_EX)
        waiting = threading.Thread(target=paradyse_lab.solvers.kernels.warm_up)
        waiting.start()
        waiting.join(timeout=0.5)
        blocked = waiting.is_alive()
    waiting.join(timeout=60)
    assert blocked and not waiting.is_alive() and paradyse_lab.solvers.kernels._warm
