"""Lower bounds and near-optimal plans from the Lagrangian relaxation of the kept-bytes budget (for dp).

For a transient cap with kept budget B and any multiplier lam >= 0, every plan whose kept bytes fit has
time >= min over plans of (time + lam * kept [+ switches]) - lam * B (weak duality). Without switch costs
the min is per decision; with them it is a Viterbi pass over the chain (`cost_to_go`).
"""

from __future__ import annotations

import numpy as np

from paradyse_lab.search_problem import SearchProblem
from solvers.base import CapTable


def dual_bound(times: np.ndarray, kept: np.ndarray, kept_budget: int, iterations: int = 30):
    """Lagrangian relaxation of the kept-bytes budget for one cap: (lambda, lower bound, a fitting plan,
    the least lambda seen whose relaxed plan fits).

    For every lambda >= 0, sum_l min_o (time + lambda * kept) - lambda * kept_budget is a lower bound on the
    time of any plan whose kept bytes fit (switch costs >= 0 left out). Bisection in log(lambda) on the
    subgradient finds the best such bound; the plan minimising time + lambda * kept at the upper end of
    the bracket fits. `times` holds inf where an option is not allowed; some plan must fit.
    """
    rows = np.arange(times.shape[0])
    kf = kept.astype(np.float64)

    def at(lam: float):
        v = times + lam * kf
        plan = np.argmin(v, axis=1)
        return float(v[rows, plan].sum()) - lam * kept_budget, plan, int(kept[rows, plan].sum())

    bound, plan, used = at(0.0)
    if used <= kept_budget:
        return 0.0, bound, plan, 0.0
    finite = times[np.isfinite(times)]
    lo, hi = 0.0, max(float(np.ptp(finite)), 1e-30) / max(float(kf.mean()), 1.0)
    best_lam = 0.0
    while True:  # grow hi until the relaxed plan fits (it does once lambda exceeds every time difference)
        b, p, used = at(hi)
        if b > bound:
            bound, best_lam = b, hi
        if used <= kept_budget:
            plan = p
            break
        lo, hi = hi, hi * 16
    for _ in range(iterations):
        mid = (lo + hi) / 2 if lo == 0.0 else float(np.sqrt(lo * hi))
        b, p, used = at(mid)
        if b > bound:
            bound, best_lam = b, mid
        if used <= kept_budget:
            hi, plan = mid, p
        else:
            lo = mid
    return best_lam, bound, plan, hi


def switch_bounds(problem: SearchProblem, table: CapTable, caps: np.ndarray, lams: np.ndarray,
                  kept_budgets: np.ndarray) -> np.ndarray:
    """[K] Lagrangian lower bounds with switch costs for the caps `caps` (indices), one multiplier each:
    min over plans of time + lam * kept + switches (a backward Viterbi pass, batched over the caps)
    - lam * kept budget."""
    allowed = problem.effective_transient[None] <= table.caps[caps][:, None, None]  # [K, L, O]
    values = np.where(allowed, problem.time_s[None], np.inf) + lams[:, None, None] * problem.kept_bytes[None]
    to_go = values[:, -1]  # [K, O]: value of the last decision
    for l in range(values.shape[1] - 2, -1, -1):
        to_go = values[:, l] + np.min(problem.switch_s[None] + to_go[:, None, :], axis=2)  # [K, O, O'] -> [K, O]
    return problem.fixed_time_s + to_go.min(axis=1) - lams * kept_budgets


def viterbi(values: np.ndarray, switch: np.ndarray, to_go: np.ndarray) -> np.ndarray:
    """The plan minimising sum of `values` plus switches, read forward from its `cost_to_go`."""
    plan = np.empty(values.shape[0], dtype=np.int64)
    plan[0] = np.argmin(values[0] + to_go[0])
    for l in range(1, values.shape[0]):
        plan[l] = np.argmin(switch[plan[l - 1]] + values[l] + to_go[l])
    return plan


def _step(switch: np.ndarray, l: int) -> np.ndarray:
    """[O, O] switch from decision l - 1 into decision l: the one matrix, or step l of per-step ones."""
    return switch if switch.ndim == 2 else switch[l]


def cost_to_go(values: np.ndarray, switch: np.ndarray | None) -> np.ndarray:
    """[L, O] least sum of `values` over the decisions after l (plus switches from l's option on).

    `switch` is None (no switch costs: the result does not depend on l's option), one [O, O] matrix for
    every step, or [L, O, O] per step (step l charged from decision l - 1 into l). With switches it is a
    backward Viterbi pass.
    """
    L = values.shape[0]
    out = np.zeros_like(values)
    if switch is None:
        out[:-1] = np.cumsum(values.min(axis=1)[::-1])[::-1][1:, None]
        return out
    for l in range(L - 2, -1, -1):
        out[l] = np.min(_step(switch, l + 1) + (values[l + 1] + out[l + 1])[None, :], axis=1)  # [O, O'] -> [O]
    return out


def cost_to_come(values: np.ndarray, switch: np.ndarray | None) -> np.ndarray:
    """[L, O] least sum of `values` over the decisions before l plus the switches up to and into l's option
    (the forward twin of `cost_to_go`, same `switch` forms)."""
    L = values.shape[0]
    out = np.zeros_like(values)
    if switch is None:
        out[1:] = np.cumsum(values.min(axis=1))[:-1, None]
        return out
    for l in range(1, L):
        out[l] = np.min((values[l - 1] + out[l - 1])[:, None] + _step(switch, l), axis=0)  # [O', O] -> [O]
    return out
