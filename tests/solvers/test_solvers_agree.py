"""Solvers check each other (docs/design.md section 7): dp == ilp == brute force, heuristic >= optimum, plans fit."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from paradyse_lab.core.search_problem import SearchProblem
from paradyse_lab.costmodel.lowering import problem_from_cost_model
from paradyse_lab.errors import UserInputError
from paradyse_lab.solvers import get_solver
from paradyse_lab.solvers.base import min_peak_plan
from paradyse_lab.solvers.instances import model_problem, random_problem

EXACT = ("dp", "ilp", "brute_force")
ALL = EXACT + ("heuristic", "greedy")
SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
"""100 small problems each with and without switch costs (150 before: ~20 ms of CPU an example, five solvers). The
exact solvers' agreement is also checked on the random trade-off and model problems below, on the reference DP's
chains of up to 20 decisions (test_reference_dp.py) and by the solver benchmark (its exact solvers gap 0,
test_solver_cli.py)."""


ILP_ONE_WORKER = {"deterministic": True}
"""The ILP as the solver benchmark runs it: one CP-SAT worker with a fixed seed and a deterministic time limit,
so a busy machine cannot stop it short of the optimum; on these tiny problems the default parallel portfolio
only adds a second thread's start-up (~5 ms of CPU a solve). The portfolio is checked by
`test_dp_and_ilp_agree_on_larger_problems` and the regression problems below."""


def solve_all(problem, names=ALL, ilp=ILP_ONE_WORKER):
    return {n: get_solver(n, **(ilp if n == "ilp" else {})).solve(problem) for n in names}


def check_agreement(problem, names=ALL, ilp=ILP_ONE_WORKER):
    """Exact solvers agree with the oracle; the others are no better; every plan claimed feasible fits."""
    sols = solve_all(problem, names, ilp)
    oracle = sols["brute_force"]
    for name, sol in sols.items():
        assert len(sol.assignment) == problem.num_decisions
        assert sol.peak_bytes == problem.peak_bytes(list(sol.assignment))
        assert sol.predicted_time_s == pytest.approx(problem.time_of(list(sol.assignment)), rel=1e-12)
        if sol.feasible:
            assert sol.peak_bytes <= problem.budget_bytes, name
        if not oracle.feasible:
            assert sol.status == "infeasible", name
            continue
        if name in EXACT:
            assert sol.status == "optimal", name
            assert sol.predicted_time_s == pytest.approx(oracle.predicted_time_s, rel=1e-7, abs=1e-9), name
        elif sol.feasible:
            assert sol.predicted_time_s >= oracle.predicted_time_s * (1 - 1e-12), name
    return sols


@st.composite
def problems(draw, switch=None, max_layers=6, max_options=4):
    """Small integer-valued problems (ties are likely), budget anywhere from below the least peak upward."""
    L = draw(st.integers(1, max_layers))
    O = draw(st.integers(1, max_options))
    cells = st.lists(st.lists(st.integers(0, 12), min_size=O, max_size=O), min_size=L, max_size=L)
    time_s = np.array(draw(cells), dtype=float) + 1
    kept, transient = draw(cells), draw(cells)
    with_switch = draw(st.booleans()) if switch is None else switch
    sw = np.array(draw(st.lists(st.lists(st.integers(0, 4), min_size=O, max_size=O), min_size=O, max_size=O)),
                  dtype=float) / 2 if with_switch else np.zeros((O, O))
    np.fill_diagonal(sw, 0)
    p = SearchProblem(tuple(f"o{i}" for i in range(O)), time_s, kept, transient, sw,
                      fixed_bytes=draw(st.integers(0, 20)), budget_bytes=0,
                      fixed_transient_bytes=draw(st.integers(0, 8)))
    _, least = min_peak_plan(p)
    budget = least + draw(st.integers(-5, 12 * L))
    return SearchProblem(p.options, p.time_s, p.kept_bytes, p.transient_bytes, p.switch_s, p.fixed_bytes,
                         max(budget, 0), p.fixed_transient_bytes)


@SETTINGS
@given(problems(switch=False))
def test_exact_solvers_agree_without_switch_costs(problem):
    check_agreement(problem)


@SETTINGS
@given(problems(switch=True))
def test_exact_solvers_agree_with_switch_costs(problem):
    check_agreement(problem)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31), switch=st.booleans())
def test_agree_on_random_trade_off_problems(seed, switch):
    rng = np.random.default_rng(seed)
    check_agreement(random_problem(rng, int(rng.integers(2, 7)), int(rng.integers(2, 5)), switch=switch))


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31), seq=st.sampled_from([4096, 65536, 262144]),
       granularity=st.sampled_from(["block", "sublayer"]))
def test_agree_on_model_problems_with_recomputation(seed, seq, granularity):
    # gpt with 2 layers: 2 or 4 decisions x 8 options (4 strategies, each with and without recomputation)
    p = model_problem(np.random.default_rng(seed), "gpt", 2, seq, recompute=True, granularity=granularity)
    assert p.num_options == 8 and p.num_decisions == (2 if granularity == "block" else 4)
    check_agreement(p)


@settings(max_examples=60, deadline=None)
@given(problems(max_layers=5), st.data())
def test_ilp_serves_non_chain_graphs(problem, data):
    L = problem.num_decisions
    pairs = [(a, b) for a in range(L) for b in range(L) if a != b]
    edges = data.draw(st.lists(st.sampled_from(pairs), max_size=6, unique=True)) if pairs else []
    p = SearchProblem(problem.options, problem.time_s, problem.kept_bytes, problem.transient_bytes,
                      problem.switch_s, problem.fixed_bytes, problem.budget_bytes, problem.fixed_transient_bytes,
                      edges=tuple(edges))
    sols = check_agreement(p, names=("ilp", "brute_force", "heuristic", "greedy"))
    if not p.is_chain:
        with pytest.raises(UserInputError, match="use ilp"):
            get_solver("dp").solve(p)
    assert sols


def test_everyone_says_infeasible_when_nothing_fits():
    rng = np.random.default_rng(3)
    p = random_problem(rng, 6, 4, switch=True)
    _, least = min_peak_plan(p)
    d = p.to_dict()
    d["budget_bytes"] = least - 1
    q = SearchProblem.from_dict(d)
    names = ALL + tuple(f"static:{o}" for o in q.options)
    for name, sol in solve_all(q, names).items():
        assert sol.status == "infeasible", name
        assert sol.peak_bytes > q.budget_bytes
    # the exact solvers' infeasible answer is the least-memory plan
    assert get_solver("dp").solve(q).peak_bytes == least
    d["budget_bytes"] = least
    assert get_solver("dp").solve(SearchProblem.from_dict(d)).peak_bytes == least  # exactly at the budget


def test_dp_keeps_a_plan_a_rounded_up_grid_would_lose():
    # Two decisions whose kept bytes are just off any coarse grid: the only fitting plan uses the budget
    # to the byte, so rounding kept bytes up would call it infeasible.
    p = SearchProblem(("fast", "lean"), [[1.0, 3.0], [1.0, 3.0]], [[1_000_003, 500_001], [1_000_004, 500_001]],
                      [[0, 0], [0, 0]], None, fixed_bytes=7, budget_bytes=7 + 1_000_003 + 500_001)
    for name in EXACT:
        sol = get_solver(name).solve(p)
        assert sol.status == "optimal" and sol.peak_bytes == p.budget_bytes
        assert sol.predicted_time_s == 4.0 and sol.assignment == ("fast", "lean")


@pytest.mark.parametrize("L, O, switch", [(24, 4, True), (96, 8, False)])
def test_dp_and_ilp_agree_on_larger_problems(L, O, switch):
    p = random_problem(np.random.default_rng(L + O), L, O, switch=switch)
    dp, ilp = get_solver("dp").solve(p), get_solver("ilp", time_limit_s=20).solve(p)
    heur = get_solver("heuristic").solve(p)
    assert dp.status == "optimal" and dp.peak_bytes <= p.budget_bytes
    assert ilp.feasible and ilp.predicted_time_s >= dp.predicted_time_s * (1 - 1e-7)
    if ilp.status == "optimal":
        assert ilp.predicted_time_s == pytest.approx(dp.predicted_time_s, rel=1e-7)
    assert not heur.feasible or heur.predicted_time_s >= dp.predicted_time_s * (1 - 1e-12)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**31), seq=st.sampled_from([65536, 262144]))
def test_agree_at_sublayer_granularity_with_switch_costs(seed, seq):
    from paradyse_lab.cluster.files import get_cluster
    from paradyse_lab.core.layer_graph import LayerGraph
    from paradyse_lab.core.model_spec import get_model
    from paradyse_lab.costmodel import AnalyticCostModel
    from paradyse_lab.solvers.instances import with_tight_budget

    model = get_model("gpt").with_layers(2)
    cm = AnalyticCostModel(model, get_cluster("a100-80gb-x8"))
    p = problem_from_cost_model(LayerGraph(model, "sublayer"), cm, seq, recompute=True,
                                      switch_cost=lambda a, b: 0.0 if a.strategy == b.strategy else 0.05)
    assert p.switch_s.any() and p.num_decisions == 4
    check_agreement(with_tight_budget(p, np.random.default_rng(seed)))


@pytest.mark.parametrize("seed", [118, 203])
def test_ilp_agrees_where_an_incremental_max_term_went_wrong(seed):
    """With the incremental max-transient form CP-SAT's presolve called a 10-20% slower plan optimal here
    (solvers/ilp.py `_max_transient`)."""
    rng = np.random.default_rng(seed)
    problem = random_problem(rng, int(rng.integers(2, 7)), int(rng.integers(2, 5)), switch=bool(seed % 2))
    check_agreement(problem, ilp={})


def test_ilp_agrees_where_cp_sat_presolve_called_a_slower_plan_optimal():
    """CP-SAT 9.15 with presolve returned 'optimal' at 6.2451 s on this problem, whose optimum is 6.1753 s."""
    rng = np.random.default_rng(9665)
    check_agreement(random_problem(rng, int(rng.integers(2, 7)), int(rng.integers(2, 5)), switch=False), ilp={})
