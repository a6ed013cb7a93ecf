"""Lower bounds and near-optimal plans from the Lagrangian relaxation of the kept-bytes budget (for dp).

For a transient cap with kept budget B and any multiplier lam >= 0, every plan whose kept bytes fit has
time >= min over plans of (time + lam * kept [+ switches]) - lam * B (weak duality). Without switch costs
the min is per decision; with them it is a Viterbi pass over the chain (`cost_to_go`).
"""

from __future__ import annotations

import numpy as np

from paradyse_lab.search_problem import SearchProblem
from solvers.base import CapTable
from solvers.kernels import capped_viterbi_totals, lagrangian_dual, viterbi_to_come, viterbi_to_go, writable


def dual_bound(times: np.ndarray, kept: np.ndarray, kept_budget: int, iterations: int = 30):
    """Lagrangian relaxation of the kept-bytes budget for one cap: (lambda, lower bound, a fitting plan,
    the least lambda seen whose relaxed plan fits, the relaxed plan just below that lambda).

    For every lambda >= 0, sum_l min_o (time + lambda * kept) - lambda * kept_budget is a lower bound on the
    time of any plan whose kept bytes fit (switch costs >= 0 left out). Bisection in log(lambda) on the
    subgradient finds the best such bound; the plan minimising time + lambda * kept at the upper end of
    the bracket fits, the one at the lower end does not (unless the budget does not bind: then both are
    the fastest plan). `times` holds inf where an option is not allowed; some plan must fit.
    (Compiled: `solvers.kernels.lagrangian_dual`.)
    """
    lam, bound, plan, lam_fit, over = lagrangian_dual(writable(times, np.float64), writable(kept, np.int64),
                                                      int(kept_budget), int(iterations))
    return float(lam), float(bound), plan, float(lam_fit), over


def rounded_plan(times: np.ndarray, kept: np.ndarray, kept_budget: int, fit: np.ndarray,
                 over: np.ndarray) -> np.ndarray:
    """A fitting plan near the LP optimum of the budgeted choice (switch costs left out), from the two
    relaxed plans of `dual_bound` (`fit` fits, `over` is its choice just below the multiplier): move
    decisions from `fit` to `over`, most time saved per extra byte first, while the kept bytes still fit.
    With identical decisions this is the best split between two options. `times`: inf where not allowed."""
    rows = np.arange(fit.size)
    saved = times[rows, fit] - times[rows, over]  # [L]
    extra = np.maximum(kept[rows, over] - kept[rows, fit], 0)  # [L]
    moves = np.flatnonzero((saved > 0) & np.isfinite(saved))
    order = moves[np.argsort(-saved[moves] / np.maximum(extra[moves], 1), kind="stable")]
    slack = kept_budget - int(kept[rows, fit].sum())
    take = order[:int(np.searchsorted(np.cumsum(extra[order]), slack, "right"))]
    plan = fit.copy()
    plan[take] = over[take]
    return plan


def switch_bounds(problem: SearchProblem, table: CapTable, caps: np.ndarray, lams: np.ndarray,
                  kept_budgets: np.ndarray) -> np.ndarray:
    """[K] Lagrangian lower bounds with switch costs for the caps `caps` (indices), one multiplier each:
    min over plans of time + lam * kept + switches (a backward Viterbi pass per cap, compiled) - lam * kept
    budget."""
    least = capped_viterbi_totals(writable(problem.time_s, np.float64), writable(problem.kept_bytes, np.int64),
                                  writable(problem.effective_transient, np.int64),
                                  writable(table.caps[caps], np.int64), writable(lams, np.float64),
                                  writable(problem.switch_s, np.float64))
    return problem.fixed_time_s + least - lams * kept_budgets


def _steps(switch: np.ndarray) -> np.ndarray:
    """[S, O, O] float64 for the kernels: one [O, O] matrix as S = 1, per-step [L, O, O] as is."""
    return writable(switch[None] if switch.ndim == 2 else switch, np.float64)


def cost_to_go(values: np.ndarray, switch: np.ndarray | None) -> np.ndarray:
    """[L, O] least sum of `values` over the decisions after l (plus switches from l's option on).

    `switch` is None (no switch costs: the result does not depend on l's option), one [O, O] matrix for
    every step, or [L, O, O] per step (step l charged from decision l - 1 into l). With switches it is a
    backward Viterbi pass (`solvers.kernels.viterbi_to_go`).
    """
    if switch is None:
        out = np.zeros_like(values)
        out[:-1] = np.cumsum(values.min(axis=1)[::-1])[::-1][1:, None]
        return out
    return viterbi_to_go(writable(values, np.float64), _steps(switch))


def cost_to_come(values: np.ndarray, switch: np.ndarray | None) -> np.ndarray:
    """[L, O] least sum of `values` over the decisions before l plus the switches up to and into l's option
    (the forward twin of `cost_to_go`, same `switch` forms)."""
    if switch is None:
        out = np.zeros_like(values)
        out[1:] = np.cumsum(values.min(axis=1))[:-1, None]
        return out
    return viterbi_to_come(writable(values, np.float64), _steps(switch))
