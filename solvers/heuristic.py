"""The paper's switching heuristic (ParaDySe Algorithm 1, docs/paper.md section 5), with its code's defects fixed.

Steps, on the whole-model cost of each option used uniformly (`SearchProblem.uniform_costs`: time, exact peak):
1. dominance: sort options by (time, peak); keep one only when it is lighter than every faster one kept,
   so the survivors form a chain, each slower but lighter than the one before (`dominance_chain`);
3. the fastest on every layer, if it fits;
4. otherwise every uniform plan that fits, and for each option i that does not fit and each lighter k of
   the chain that does, every split "first m decisions i, the other L - m decisions k" (0 < m < L) that
   fits; the fastest candidate wins;
6. nothing fits: the least-memory option on every layer, status 'infeasible' (the paper's fallback).
Steps 2 (the cache by (batch, length)) and 5 (the 5% smoothing) need the previous sequence, so they belong
to the dynamic policy of the simulator (its cache and `keep_previous`).

Defects of the authors' code not copied (docs/paper.md section 5): a candidate is costed from fresh arrays and
re-checked with exact integer bytes (their list aliasing could return a plan one layer over the limit);
the dominance loop compares every adjacent pair, the last included; nothing is remembered between calls
(their sticky flag forced the fallback for every later sequence once one did not fit).
Cost: O(O^2 L) array work, all splits of all pairs costed at once from prefix sums.

Example: `paradyse-lab plan --model gpt --seq 256K --solver heuristic --recompute`.
"""

from __future__ import annotations

import time

import numpy as np

from paradyse_lab.core.search_problem import SearchProblem
from paradyse_lab.solvers.base import Solution, make_solution


def dominance_chain(times: np.ndarray, peaks: np.ndarray) -> list[int]:
    """Options sorted by (time, peak), each kept only when strictly lighter than all faster ones kept.

    The result runs fastest -> lightest; its last entry is the least-memory option.
    """
    order = np.lexsort((peaks, times))
    chain: list[int] = []
    for o in order:  # every option is compared, the last pair included
        if not chain or peaks[o] < peaks[chain[-1]]:
            chain.append(int(o))
    return chain


def best_split(problem: SearchProblem, heavy: list[int], light: list[int]) -> tuple[float, int, int, int] | None:
    """Fastest fitting plan "first m decisions i, the rest k" over i in heavy, k in light, 0 < m < L.

    Returns (time, i, k, m) or None when no split fits.
    """
    if not heavy or not light:
        return None
    L = problem.num_decisions
    if L < 2:
        return None
    T, K, R = problem.time_s.T, problem.kept_bytes.T, problem.transient_bytes.T  # [O, L]
    zero = np.zeros((T.shape[0], 1))
    cum_t = np.hstack([zero, np.cumsum(T, axis=1)])  # [O, L+1]: time of decisions < m
    cum_k = np.hstack([zero.astype(np.int64), np.cumsum(K, axis=1)])
    pre_r = np.hstack([zero.astype(np.int64), np.maximum.accumulate(R, axis=1)])  # max over decisions < m
    suf_r = np.hstack([np.maximum.accumulate(R[:, ::-1], axis=1)[:, ::-1], zero.astype(np.int64)])  # >= m
    # edges crossing the cut at m, in each direction
    m = np.arange(L + 1)
    fw = np.zeros(L + 1)
    bw = np.zeros(L + 1)
    for a, b in problem.edges:
        (fw if a < b else bw)[(m > min(a, b)) & (m <= max(a, b))] += 1
    i = np.repeat(heavy, len(light))
    k = np.tile(light, len(heavy))
    times = (problem.fixed_time_s + cum_t[i] + cum_t[k, -1:] - cum_t[k]
             + fw * problem.switch_s[i, k][:, None] + bw * problem.switch_s[k, i][:, None])  # [P, L+1]
    peaks = (problem.fixed_bytes + cum_k[i] + cum_k[k, -1:] - cum_k[k]
             + np.maximum(np.maximum(pre_r[i], suf_r[k]), problem.fixed_transient_bytes))
    ok = peaks <= problem.budget_bytes
    ok[:, 0] = ok[:, -1] = False  # m = 0 and m = L are the uniform plans
    if not ok.any():
        return None
    flat = int(np.argmin(np.where(ok, times, np.inf)))
    p, cut = divmod(flat, L + 1)
    return float(times[p, cut]), int(i[p]), int(k[p]), cut


class HeuristicSolver:
    """ParaDySe's Algorithm 1 (steps 1, 3, 4, 6); stateless."""

    name = "heuristic"

    def solve(self, problem: SearchProblem) -> Solution:
        started = time.perf_counter()
        L = problem.num_decisions
        times, peaks = problem.uniform_costs()
        chain = dominance_chain(times, peaks)
        fits = [o for o in chain if peaks[o] <= problem.budget_bytes]
        if not fits:  # step 6: the least-memory option everywhere
            return make_solution(problem, [chain[-1]] * L, "infeasible", self.name, started)
        best = fits[0]  # fastest fitting uniform plan (the chain is ordered by time)
        plan = [best] * L
        if best != chain[0]:  # step 4: the two-option splits
            heavy = [o for o in chain if peaks[o] > problem.budget_bytes]
            split = best_split(problem, heavy, fits)
            if split is not None and split[0] < times[best]:
                _, i, k, m = split
                plan = [i] * m + [k] * (L - m)
        return make_solution(problem, plan, "feasible", self.name, started)
