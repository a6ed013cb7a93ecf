"""Distributed runtime tests on CPU: one gloo process group per world size (1, 2, 3, 4), many cases in it.

Run: `python -m pytest -q tests/runtime`. Each case (runtime_cases.py) asserts outputs, input gradients and
every parameter gradient against the single-device reference (fp32), that no parameter changes during a
forward pass, that the bytes comm.py counts equal the analytic schedule (paradyse_lab/costmodel) per
sub-layer, that a switch between layers moves no bytes, Hugging Face logits, the input errors, training with
checkpoint / resume, and the profiler's distributed mode against its rank-local mode.
"""

from __future__ import annotations

import functools

import pytest
import runtime_cases
from dist_harness import run_world

WORLD_SIZES = (1, 2, 3, 4)


@functools.cache
def outcomes(p: int) -> dict[str, str | None]:
    return run_world(p, "runtime_cases", list(runtime_cases.CASES), timeout_s=400)


@pytest.mark.parametrize("case", list(runtime_cases.CASES))
@pytest.mark.parametrize("p", WORLD_SIZES)
def test_case(p: int, case: str) -> None:
    error = outcomes(p)[case]
    assert error is None, error
