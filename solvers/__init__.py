"""Strategy-search solvers over a `SearchProblem` (docs/design.md section 4).

`get_solver(name).solve(problem) -> Solution`. Names: heuristic (the paper's Algorithm 1), dp (exact
Pareto-front dynamic programming, chains), ilp (OR-Tools CP-SAT, any graph), brute_force (exhaustive, the
tests' oracle), greedy (the ILP's hint), static:NAME (one option everywhere: the paper's baselines).
"""

from paradyse_lab.solvers.base import Solution, Solver, SolverError
from paradyse_lab.solvers.registry import SOLVER_NAMES, get_solver

__all__ = ["SOLVER_NAMES", "Solution", "Solver", "SolverError", "get_solver"]
