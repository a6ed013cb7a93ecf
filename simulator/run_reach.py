"""How far a run's planner reaches when every length is tried, not only the sampled ones.

A sampled run stops at its first OOM, so the longest length it reports is the longest *sampled* length below
the first one that does not fit: with few long sequences the gap to the next sample hides how far the planner
could go. `longest_fitting` tries lengths on the layout unit's grid (2p tokens) instead: a length fits when the
run's policy, in a fresh process (no plan before it, an empty allocator cache), finds a plan that the truth
model charges within the budget. Fitting grows monotonically with the length (every kept, transient and fixed
byte does), so doubling then bisecting finds the longest multiple of the unit that fits.
"""

from __future__ import annotations

from collections.abc import Callable

from paradyse_lab.simulator.engine import fix_storage_head

FINE_CAP_TOKENS = 1 << 23
"""Longest length tried (8M tokens): beyond any node's memory for the catalog's models."""


def fits_fresh(make: Callable[[], tuple], seq_len: int, batch: int = 1) -> bool:
    """Whether a fresh run (`make()` -> (planner, charger)) trains one step of `seq_len` tokens."""
    planner, charger = make()
    policy = planner.policy
    fix_storage_head(policy, [seq_len], batch, charger.cost_model.p)
    decision = policy.decide(seq_len, batch)
    _, peak = charger.charge(decision.plan.names, seq_len, batch, getattr(decision, "head", "whole"))
    return bool(decision.feasible) and peak <= charger.budget_bytes


def longest_fitting(make: Callable[[], tuple], unit: int, start: int = 0, cap: int = FINE_CAP_TOKENS) -> int:
    """The longest multiple of `unit` up to `cap` that `fits_fresh`, 0 when even `unit` does not. `start`: a
    length known to fit (the run's longest trained), where the search begins."""
    low = max(start // unit, 0)
    if low == 0:
        if not fits_fresh(make, unit):
            return 0
        low = 1
    top = cap // unit
    high = None  # low fits; high (when known) does not
    while high is None:
        k = min(2 * low, top)
        if k == low:
            return low * unit
        if fits_fresh(make, k * unit):
            low = k
        else:
            high = k
    while high - low > 1:
        mid = (low + high) // 2
        if fits_fresh(make, mid * unit):
            low = mid
        else:
            high = mid
    return low * unit
