"""Bounds for the exact solvers: per transient cap, exact memory floors (`CapTable`); lower bounds on time
and near-optimal plans from the Lagrangian relaxation of the kept-bytes budget (for dp).

The peak's max-transient term is not additive, so dp and the ILP enumerate its value, the cap c: under cap
c only options with effective transient <= c are allowed, and the kept bytes may sum to at most
budget - fixed - c (`CapTable` says what each cap allows). For a cap with kept budget B and any multiplier
lam >= 0, every plan whose kept bytes fit has time >= min over plans of (time + lam * kept [+ switches])
- lam * B (weak duality). Without switch costs the min is per decision; with them it is a Viterbi pass
over the chain (`cost_to_go`).

The compiled kernels (numba, ~1 CPU s to import) are imported by the functions that
call them: `CapTable` is numpy only, and the ILP, which uses nothing else here, never loads numba.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from paradyse_lab.core.search_problem import SearchProblem


@dataclass(frozen=True)
class CapTable:
    """Per transient cap c (a value the max-transient term can take): what the decisions can do under it.

    An option is allowed under cap c at decision l when max(transient[l, o], fixed transient) <= c. In
    order of effective transient a decision's allowed options are a prefix, so the least of any value over
    them is a step function of c with at most O steps; sums over decisions are built from those steps
    (`sum_min_allowed`) in O(L O + C), never as [L, C] tables.
    """

    caps: np.ndarray
    """[C] the distinct effective transient values, ascending."""
    order: np.ndarray
    """[L, O] each decision's options sorted by effective transient."""
    position: np.ndarray
    """[L, O] index in `caps` of the effective transient of option order[l, j]: the least cap allowing it."""
    valid: np.ndarray
    """[C] whether every decision has an allowed option."""
    peak_floor: np.ndarray
    """[C] fixed + sum over decisions of the least kept bytes allowed + c (int64 max when not valid). No plan
    under cap c has a larger max-transient term than c, so the least of these over all caps is exactly the
    least peak of any plan."""

    @classmethod
    def build(cls, problem: SearchProblem) -> CapTable:
        eff = problem.effective_transient  # [L, O]
        caps = np.unique(eff)
        order = np.argsort(eff, axis=1, kind="stable")
        position = np.searchsorted(caps, np.take_along_axis(eff, order, 1))  # [L, O]
        valid = np.arange(caps.size) >= position[:, 0].max()
        table = cls(caps, order, position, valid, np.zeros(0, dtype=np.int64))
        kept = table.sum_min_allowed(problem.kept_bytes)
        floor = np.where(valid, problem.fixed_bytes + kept + caps, np.iinfo(np.int64).max)
        object.__setattr__(table, "peak_floor", floor)
        return table

    def sum_min_allowed(self, values: np.ndarray) -> np.ndarray:
        """[C] sum over decisions of the least of `values` [L, O] (finite) allowed under each cap; only
        entries where `valid` are meaningful. Integer values sum exactly; float sums are differences
        accumulated over caps, within about L * O * eps * max|sum| of the direct sum."""
        run = np.minimum.accumulate(np.take_along_axis(values, self.order, 1), axis=1)  # [L, O]
        steps = np.diff(run, axis=1, prepend=np.zeros_like(run[:, :1])).ravel()  # change at each position
        if np.issubdtype(values.dtype, np.integer):
            per_cap = np.zeros(self.caps.size, dtype=np.int64)
            np.add.at(per_cap, self.position.ravel(), steps)  # exact (bincount weights are float64)
        else:
            per_cap = np.bincount(self.position.ravel(), steps, minlength=self.caps.size)
        return np.cumsum(per_cap)


def dual_bound(times: np.ndarray, kept: np.ndarray, kept_budget: int, iterations: int = 30):
    """Lagrangian relaxation of the kept-bytes budget for one cap: (lambda, lower bound, a fitting plan,
    the least lambda seen whose relaxed plan fits, the relaxed plan just below that lambda).

    For every lambda >= 0, sum_l min_o (time + lambda * kept) - lambda * kept_budget is a lower bound on the
    time of any plan whose kept bytes fit (switch costs >= 0 left out). Bisection in log(lambda) on the
    subgradient finds the best such bound; the plan minimising time + lambda * kept at the upper end of
    the bracket fits, the one at the lower end does not (unless the budget does not bind: then both are
    the fastest plan). `times` holds inf where an option is not allowed; some plan must fit.
    (Compiled: `paradyse_lab.solvers.bound_kernels.lagrangian_dual`.)
    """
    from paradyse_lab.solvers.bound_kernels import lagrangian_dual  # numba: ~1 s to load; the ILP never needs it
    from paradyse_lab.solvers.kernels import writable  # numba: `kernels` compiles on import

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
    from paradyse_lab.solvers.bound_kernels import capped_viterbi_totals  # numba: ~1 s to load; the ILP never needs it
    from paradyse_lab.solvers.kernels import writable  # numba: `kernels` compiles on import

    least = capped_viterbi_totals(writable(problem.time_s, np.float64), writable(problem.kept_bytes, np.int64),
                                  writable(problem.effective_transient, np.int64),
                                  writable(table.caps[caps], np.int64), writable(lams, np.float64),
                                  writable(problem.switch_s, np.float64))
    return problem.fixed_time_s + least - lams * kept_budgets


def _steps(switch: np.ndarray) -> np.ndarray:
    """[S, O, O] float64 for the kernels: one [O, O] matrix as S = 1, per-step [L, O, O] as is."""
    from paradyse_lab.solvers.kernels import writable  # numba: `kernels` compiles on import

    return writable(switch[None] if switch.ndim == 2 else switch, np.float64)


def cost_to_go(values: np.ndarray, switch: np.ndarray | None) -> np.ndarray:
    """[L, O] least sum of `values` over the decisions after l (plus switches from l's option on).

    `switch` is None (no switch costs: the result does not depend on l's option), one [O, O] matrix for
    every step, or [L, O, O] per step (step l charged from decision l - 1 into l). With switches it is a
    backward Viterbi pass (`paradyse_lab.solvers.bound_kernels.viterbi_to_go`).
    """
    if switch is None:
        out = np.zeros_like(values)
        out[:-1] = np.cumsum(values.min(axis=1)[::-1])[::-1][1:, None]
        return out
    from paradyse_lab.solvers.bound_kernels import viterbi_to_go  # numba: ~1 s to load; the ILP never needs it
    from paradyse_lab.solvers.kernels import writable  # numba: `kernels` compiles on import

    return viterbi_to_go(writable(values, np.float64), _steps(switch))


def cost_to_come(values: np.ndarray, switch: np.ndarray | None) -> np.ndarray:
    """[L, O] least sum of `values` over the decisions before l plus the switches up to and into l's option
    (the forward twin of `cost_to_go`, same `switch` forms)."""
    if switch is None:
        out = np.zeros_like(values)
        out[1:] = np.cumsum(values.min(axis=1))[:-1, None]
        return out
    from paradyse_lab.solvers.bound_kernels import viterbi_to_come  # numba: ~1 s to load; the ILP never needs it
    from paradyse_lab.solvers.kernels import writable  # numba: `kernels` compiles on import

    return viterbi_to_come(writable(values, np.float64), _steps(switch))
