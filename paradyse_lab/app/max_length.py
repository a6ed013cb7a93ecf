"""The longest sequence that trains: a search over lengths of the planner (`paradyse-lab plan --max-length`).

A length fits when the planner finds a plan whose peak is within the budget, with the techniques the caller
allows (recomputation and sub-layer decisions through the options and the graph it builds, and the head
options). Fitting is monotone in the length (every kept, transient and fixed byte
grows with it), so the longest length is found by doubling from the layout unit until a length does not fit,
then bisecting between the last that fits and the first that does not, on multiples of the unit (2p). At every
length the planner takes the fastest plan that fits over the head options (`cheapest_head`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from paradyse_lab.core.search_problem import SearchProblem
from paradyse_lab.costmodel.head_loss import HEAD_OPTIONS, cheapest_head
from paradyse_lab.errors import UserInputError


@dataclass(frozen=True)
class PlannedLength:
    """The plan the planner picks at one length, with its head option and problem."""

    seq_len: int
    head: str
    problem: SearchProblem
    solution: object
    """The solver's `Solution` (plan, predicted_time_s, peak_bytes, feasible)."""


def plan_length(build: Callable[[int, str], SearchProblem], solver, seq_len: int,
                heads: tuple[str, ...] = HEAD_OPTIONS) -> PlannedLength | None:
    """The fastest plan that fits at `seq_len` over `heads` (or the first head's infeasible one); None when no
    option can run the length (its shapes do not split). `build(seq_len, head)` makes the problem."""
    try:
        problems = {head: build(seq_len, head) for head in heads}
    except UserInputError:  # no option runs these shapes
        return None
    head, solution = cheapest_head(lambda h: solver.solve(problems[h]), heads)
    return PlannedLength(seq_len, head, problems[head], solution)


def longest_length(build: Callable[[int, str], SearchProblem], solver, unit: int, cap: int,
                   heads: tuple[str, ...] = HEAD_OPTIONS) -> PlannedLength | None:
    """The longest multiple of `unit` up to `cap` at which a plan fits (module docstring), or None when even
    `unit` tokens do not."""
    def fits(k: int) -> PlannedLength | None:
        planned = plan_length(build, solver, k * unit, heads)
        return planned if planned is not None and planned.solution.feasible else None

    best = fits(1)
    if best is None:
        return None
    low, high = 1, None  # low fits; high (when known) does not
    while high is None:
        k = min(2 * low, cap // unit)
        if k == low:
            return best
        planned = fits(k)
        if planned is None:
            high = k
        else:
            low, best = k, planned
    while high - low > 1:
        mid = (low + high) // 2
        planned = fits(mid)
        if planned is None:
            high = mid
        else:
            low, best = mid, planned
    return best
