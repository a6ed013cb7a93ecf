"""The dynamic policy's smoothing rule (the paper's Algorithm 1, step 5), simulator/policies.py."""

from paradyse_lab.core.search_problem import SearchProblem
from paradyse_lab.simulator.policies import keep_previous
from paradyse_lab.solvers.heuristic import HeuristicSolver


def chain_problem(budget, kept=(30, 20, 10), times=(1.0, 2.0, 3.0), L=4):
    O = len(kept)
    return SearchProblem(tuple(f"s{i}" for i in range(O)), [list(times)] * L, [list(kept)] * L,
                         [[0] * O] * L, None, fixed_bytes=0, budget_bytes=budget)


def test_keep_previous_is_the_smoothing_rule():
    p = chain_problem(100)
    best = HeuristicSolver().solve(p)  # time 6
    assert keep_previous(p, ("s1",) * 4, best, gamma=0.5)  # 8 <= 1.5 * 6 and fits
    assert not keep_previous(p, ("s1",) * 4, best, gamma=0.05)
    assert not keep_previous(p, ("s0",) * 4, best, gamma=10)  # does not fit
    assert not keep_previous(p, None, best)
