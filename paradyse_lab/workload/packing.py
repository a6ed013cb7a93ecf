"""Packing documents into training steps: several documents per step up to a token budget.

Real training concatenates documents of different lengths into one step (attention stays inside each
document, a block-diagonal mask), instead of one padded sequence per step. `pack_documents` is greedy
first-fit (Garey & Johnson, "Computers and Intractability", 1979, section 6.1; the bin-packing heuristic):
each document goes into the first open step whose tokens still leave room for it, else opens a new step.

- `order="sorted"`: documents longest first (first-fit decreasing: at most 11/9 OPT + 6/9 steps, Dosa 2007),
  the tightest packing, so the least padding; the steps are then returned ordered by their longest document,
  shortest first, so a run still goes from short to long documents as the paper trains (ParaDySe section 5).
  Its steps group documents of similar length (long ones fill a step alone, short ones fill steps together).
- `order="shuffled"`: documents in a seeded random order (numpy's default_rng(seed)), steps in the order they
  were opened: what a streaming data loader sees, every step a mix of lengths; a little more padding.

A document longer than `token_budget` is never cut and never refused: it forms a step of its own (tokens
above the budget). Truncating it would change the data a run trains on, and refusing it would make the
paper's datasets unpackable below their longest document (309K and 624K tokens), while the question packing
asks is how long a document each strategy still trains; a step of one document is exactly the unpacked step.

Try it: `python -m paradyse_lab data workload github_code --pack-tokens 32768`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from paradyse_lab.errors import UserInputError, require_positive_int, require_seed

PACK_ORDERS = ("sorted", "shuffled")
MAX_TOKEN_BUDGET = 2**40
"""Largest token budget a step may have (the longest length a workload may hold)."""


def _document_order(lengths: Sequence[int], order: str, seed: int) -> list[int]:
    """Indices of `lengths` in the order first-fit visits them."""
    if order == "sorted":
        return sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    if order == "shuffled":
        return [int(i) for i in np.random.default_rng(require_seed("--seed", seed)).permutation(len(lengths))]
    raise UserInputError(f"pack order must be one of {', '.join(PACK_ORDERS)}, got {order!r}")


class _FirstFitTree:
    """Open steps' free tokens in a max segment tree: the first step with room for `n` in O(log steps)."""

    def __init__(self, capacity: int):
        self.size = 1
        while self.size < max(capacity, 1):
            self.size *= 2
        self.free = np.full(2 * self.size, -1, dtype=np.int64)  # -1: no step there yet (or closed)
        self.count = 0

    def first_with_room(self, n: int) -> int:
        """The lowest step index whose free tokens are >= n, or -1."""
        if self.free[1] < n:
            return -1
        node = 1
        while node < self.size:
            node = 2 * node if self.free[2 * node] >= n else 2 * node + 1
        return node - self.size

    def set_free(self, step: int, free: int) -> None:
        node = step + self.size
        self.free[node] = free
        node //= 2
        while node:
            self.free[node] = max(self.free[2 * node], self.free[2 * node + 1])
            node //= 2


def pack_document_indices(lengths: Sequence[int], token_budget: int, order: str = "sorted",
                          seed: int = 0) -> list[tuple[int, ...]]:
    """Greedy first-fit of documents into steps of at most `token_budget` tokens, as indices into `lengths`.

    Every index appears in exactly one step; a document longer than the budget is a step alone (module
    docstring). Inside a step the indices are in the order they were placed.
    """
    token_budget = require_positive_int("--pack-tokens", token_budget, MAX_TOKEN_BUDGET)
    values = [require_positive_int("document length", n) for n in lengths]
    visit = _document_order(values, order, seed)
    tree = _FirstFitTree(len(values))
    steps: list[list[int]] = []
    for i in visit:
        n = values[i]
        if n > token_budget:
            steps.append([i])
            tree.set_free(tree.count, -1)  # a closed step of one document
            tree.count += 1
            continue
        step = tree.first_with_room(n)
        if step < 0:
            step = tree.count
            tree.count += 1
            steps.append([])
            free = token_budget
        else:
            free = int(tree.free[step + tree.size])
        steps[step].append(i)
        tree.set_free(step, free - n)
    if order == "sorted":  # shortest longest-document first; ties: fewer tokens first, then opening order
        keyed = sorted(range(len(steps)), key=lambda s: (values[steps[s][0]], sum(values[i] for i in steps[s]), s))
        steps = [steps[s] for s in keyed]
    return [tuple(step) for step in steps]


def pack_documents(lengths: Sequence[int], token_budget: int, order: str = "sorted",
                   seed: int = 0) -> list[tuple[int, ...]]:
    """Greedy first-fit of document `lengths` into steps of at most `token_budget` tokens.

    Returns one tuple of document lengths per step, in training order (module docstring: `order` is
    "sorted", first-fit decreasing with steps shortest first, or "shuffled", seeded). A document longer than
    the budget forms a step of its own. `pack_document_indices` gives the same steps as indices.
    """
    return [tuple(int(lengths[i]) for i in step)
            for step in pack_document_indices(lengths, token_budget, order, seed)]
