"""Solver benchmark: median solve time and gap to the exact optimum over random and model-derived problems.

`paradyse-lab solvers bench` runs it and writes results/solver_bench.csv. Problems come from
`paradyse_lab.solvers.instances`: kind 'random' (heterogeneous decisions, no switch costs), 'random+switch' (with switch
costs), 'model' (the `gpt` preset with L layers at 64K, 256K, 16K tokens, one per problem in turn; 8
options = with recomputation), 'model-sublayer' (the same with L/2 layers, attention and MLP deciding apart).
The exact optimum of each problem is the DP's; an ILP answer it calls optimal that disagrees by more than
its documented rounding is counted in `disagree`. The ILP stops at `ilp_time_limit_s` of CP-SAT's
deterministic time on one worker (`ILPSolver.deterministic`), so every column but the measured
times (`TIMING_COLUMNS`) is the same in every run, however busy the machine.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import numpy as np

from paradyse_lab.solvers.instances import model_problem, random_problem
from paradyse_lab.solvers.registry import get_solver

KINDS = ("random", "random+switch", "model", "model-sublayer")
MODEL_SEQS = (65536, 262144, 16384)
CSV_COLUMNS = ("kind", "layers", "options", "solver", "instances", "median_ms", "max_ms", "mean_gap_pct",
               "max_gap_pct", "optimal", "infeasible", "disagree")
TIMING_COLUMNS = ("median_ms", "max_ms")
"""The measured columns (wall time); `KEY_COLUMNS` name a row."""
KEY_COLUMNS = ("kind", "layers", "options", "solver")


@dataclass
class Cell:
    """Measurements of one solver on one (kind, L, O) group."""

    times: list
    gaps: list
    optimal: int = 0
    infeasible: int = 0
    disagree: int = 0


def make_problem(kind: str, layers: int, options: int, index: int, rng: np.random.Generator):
    if kind.startswith("model"):
        seq = MODEL_SEQS[index % len(MODEL_SEQS)]
        if kind == "model-sublayer":
            return model_problem(rng, "gpt", max(layers // 2, 1), seq, recompute=options == 8, granularity="sublayer")
        return model_problem(rng, "gpt", layers, seq, recompute=options == 8)
    return random_problem(rng, layers, options, switch=kind == "random+switch")


def run(sizes=(8, 24, 96, 192), options=(4, 8), kinds=KINDS, instances: int = 3, repeats: int = 3,
        solvers=("heuristic", "greedy", "dp", "ilp", "brute_force"), ilp_time_limit_s: float = 2.0,
        seed: int = 0, progress=None) -> list[dict]:
    """One row per (kind, L, O, solver); `progress(n)` is called with the (solver, problem) pairs done."""
    rows = []
    for kind in kinds:
        for L in sizes:
            for O in options:
                rng = np.random.default_rng([seed, KINDS.index(kind), L, O])
                cells = {s: Cell([], []) for s in solvers}
                problems = [make_problem(kind, L, O, i, rng) for i in range(instances)]
                exacts = [get_solver("dp").solve(problem) for problem in problems]
                # solver by solver, so that no solver is timed while another's threads wind down (CP-SAT
                # runs a portfolio of worker threads)
                for name in solvers:
                    if name == "brute_force" and O**L > 70_000:
                        if progress:
                            progress(instances)
                        continue
                    solver = (get_solver(name, time_limit_s=ilp_time_limit_s, deterministic=True) if name == "ilp"
                              else get_solver(name))
                    runs = 1 if name in ("ilp", "brute_force") else repeats
                    for problem, exact in zip(problems, exacts):
                        results = [solver.solve(problem) for _ in range(runs)]
                        sol, cell = results[0], cells[name]
                        cell.times += [r.solve_time_s for r in results]
                        cell.optimal += sol.status == "optimal"
                        cell.infeasible += sol.status == "infeasible"
                        if sol.feasible and exact.feasible:
                            gap = (sol.predicted_time_s - exact.predicted_time_s) / exact.predicted_time_s
                            cell.gaps.append(gap)
                            cell.disagree += sol.status == "optimal" and abs(gap) > 1e-6
                        if progress:
                            progress(1)
                for name, cell in cells.items():
                    if not cell.times:
                        continue
                    rows.append({
                        "kind": kind, "layers": L, "options": O, "solver": name, "instances": instances,
                        "median_ms": round(1e3 * statistics.median(cell.times), 3),
                        "max_ms": round(1e3 * max(cell.times), 3),
                        "mean_gap_pct": round(100 * statistics.fmean(cell.gaps), 3) if cell.gaps else None,
                        "max_gap_pct": round(100 * max(cell.gaps), 3) if cell.gaps else None,
                        "optimal": cell.optimal, "infeasible": cell.infeasible, "disagree": cell.disagree,
                    })
    return rows

