"""Aten operators per layer and step of each strategy at most their stated bounds (tests/runtime/op_count_cases.py),
in one gloo world of 1 and one of 2 (run: `python -m pytest -q tests/runtime/test_op_count.py`)."""

from __future__ import annotations

import functools

import op_count_cases
import pytest
from dist_harness import run_world


@functools.cache
def _world(p: int):
    return run_world(p, "op_count_cases", list(op_count_cases.CASES), timeout_s=300)


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("case", list(op_count_cases.CASES))
def test_operators_per_block_step_within_bound(p, case):
    error = _world(p).errors[case]
    assert error is None, error
