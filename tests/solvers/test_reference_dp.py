"""The plain reference DP (`paradyse_lab.solvers.reference_dp`) as the oracle of the fast one
(`paradyse_lab.solvers.dp`) and the ILP.

Brute force checks the reference up to 7 decisions; the reference then checks dp on chains of up to 20
decisions (and the ILP on some of them), where brute force cannot go.
"""

import numpy as np
import pytest

from paradyse_lab.core.search_problem import SearchProblem
from paradyse_lab.solvers.base import min_peak_plan
from paradyse_lab.solvers.brute_force import BruteForceSolver
from paradyse_lab.solvers.dp import DPSolver
from paradyse_lab.solvers.ilp import ILPSolver
from paradyse_lab.solvers.instances import model_problem, random_problem
from paradyse_lab.solvers.reference_dp import ReferenceDPSolver, pareto


def integer_problem(rng: np.random.Generator, L: int, O: int, switch: bool) -> SearchProblem:
    """Small integer times and bytes (ties are likely), a budget from just below the least peak upward."""
    time_s = rng.integers(1, 14, (L, O)).astype(float)
    kept, transient = rng.integers(0, 13, (L, O)), rng.integers(0, 13, (L, O))
    sw = rng.integers(0, 5, (O, O)) / 2 if switch else np.zeros((O, O))
    np.fill_diagonal(sw, 0)
    p = SearchProblem(tuple(f"o{i}" for i in range(O)), time_s, kept, transient, sw,
                      fixed_bytes=int(rng.integers(0, 20)), budget_bytes=0,
                      fixed_transient_bytes=int(rng.integers(0, 8)))
    _, least = min_peak_plan(p)
    d = p.to_dict()
    d["budget_bytes"] = max(least + int(rng.integers(-4, 6 * L)), 0)
    return SearchProblem.from_dict(d)


def assert_same_optimum(problem: SearchProblem, oracle, sol, what: str) -> None:
    """`sol` has the oracle's status and optimal time, and its plan is costed right and fits."""
    assert sol.status == oracle.status, what
    assert sol.peak_bytes == problem.peak_bytes(list(sol.assignment)), what
    assert sol.predicted_time_s == pytest.approx(problem.time_of(list(sol.assignment)), rel=1e-12), what
    if oracle.feasible:
        assert sol.peak_bytes <= problem.budget_bytes, what
        assert sol.predicted_time_s == pytest.approx(oracle.predicted_time_s, rel=1e-9), what
    else:  # both give the least-peak plan
        assert sol.peak_bytes == oracle.peak_bytes == min_peak_plan(problem)[1], what


def test_pareto_keeps_exactly_the_undominated_labels():
    labels = [(2.0, 5, 1, "a"), (1.0, 9, 3, "b"), (2.0, 5, 1, "dup"), (3.0, 6, 0, "c"), (3.0, 9, 3, "beaten"),
              (1.0, 9, 4, "tie-worse")]
    assert [x[3] for x in pareto(labels)] == ["b", "a", "c"]


def test_pareto_is_the_plain_definition_on_random_labels():
    """The staircase `pareto` keeps exactly the labels that no other label matches or beats in t, k and m (the
    plain pairwise definition; of equal labels, the first in sorted order), in sorted order."""
    rng = np.random.default_rng(5)
    for _ in range(300):
        n = int(rng.integers(0, 40))
        labels = [(float(t), int(k), int(m), (i,)) for i, (t, k, m) in enumerate(rng.integers(0, 6, (n, 3)))]
        ordered = sorted(labels)
        plain = [a for i, a in enumerate(ordered)
                 if not any(b[0] <= a[0] and b[1] <= a[1] and b[2] <= a[2] and (b[:3] != a[:3] or j < i)
                            for j, b in enumerate(ordered) if j != i)]
        assert pareto(labels) == plain


def test_reference_equals_brute_force_on_small_problems():
    rng = np.random.default_rng(0)
    ref, brute = ReferenceDPSolver(), BruteForceSolver()
    for i in range(120):
        L, O = int(rng.integers(1, 8)), int(rng.integers(1, 5))
        p = integer_problem(rng, L, O, switch=i % 2 == 1) if i % 3 else random_problem(rng, L, O, switch=i % 2 == 1)
        assert_same_optimum(p, brute.solve(p), ref.solve(p), f"problem {i}: {L} x {O}")


def test_dp_and_ilp_equal_the_reference_on_chains_up_to_20_decisions():
    rng = np.random.default_rng(1)
    ref, dp, ilp = ReferenceDPSolver(), DPSolver(), ILPSolver()
    problems = []
    for i in range(40):  # integer-valued: fronts stay small enough for the reference at 20 decisions
        problems.append(integer_problem(rng, int(rng.integers(8, 21)), int(rng.integers(2, 5)), i % 2 == 1))
    for i in range(6):  # the benchmark's trade-off problems (continuous values: larger fronts)
        problems.append(random_problem(rng, int(rng.integers(8, 12)), 3, switch=i % 2 == 1))
    for layers, seq, granularity in ((20, 65536, "block"), (6, 262144, "sublayer")):  # 8 options
        problems.append(model_problem(rng, "gpt", layers, seq, recompute=True, granularity=granularity))
    statuses = set()
    for i, p in enumerate(problems):
        what = f"problem {i}: {p.num_decisions} x {p.num_options}"
        oracle = ref.solve(p)
        statuses.add(oracle.status)
        assert_same_optimum(p, oracle, dp.solve(p), "dp, " + what)
        if i % 8 == 0:
            assert_same_optimum(p, oracle, ilp.solve(p), "ilp, " + what)
    assert statuses == {"optimal", "infeasible"}  # both branches exercised
