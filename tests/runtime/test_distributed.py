"""Distributed runtime tests on CPU: one gloo process group per world size (1, 2, 3, 4), many cases in it.

Run: `python -m pytest -q tests/runtime`. Each case (runtime_cases.py) asserts outputs, input gradients and
every parameter gradient against the single-device reference (fp32), that no parameter changes during a
forward pass, that the bytes comm_record.py counts equal the analytic schedule (paradyse_lab/costmodel) per
sub-layer, that a switch between layers moves no bytes, Hugging Face logits, the input errors, training with
checkpoint / resume (also at another world size, weights_cases.py), Hugging Face folders in and out, the
Python API's example, and the profiler's distributed mode against its rank-local mode.

Each (world size, case) is its own pytest item, and selection is honoured: the spawned ranks run only the
selected cases (`-k metp`, `-k "2-model"`, a node id). A world size's processes start once, in the setup of
its first selected item; every item's call time is its case's own time in the ranks (the slowest rank's), so
`--durations=N` ranks cases by what they cost, and the world's start-up and wall time are in that first
item's setup and in the summary table at the end of the run (tests/runtime/conftest.py).
"""

from __future__ import annotations

import functools

import pytest
import runtime_cases
from dist_harness import START, World, run_world

WORLD_SIZES = (1, 2, 3, 4)


@functools.cache
def world(p: int, names: tuple[str, ...]) -> World:
    return run_world(p, "runtime_cases", list(names), timeout_s=400)


def selected_cases(session: pytest.Session, p: int) -> tuple[str, ...]:
    """The cases of world size p among the items this run selected (after -k, -m and node ids), in case order."""
    chosen = {item.callspec.params["case"] for item in session.items
              if item.originalname == "test_case" and item.module.__name__ == __name__
              and item.callspec.params["p"] == p}
    return tuple(name for name in runtime_cases.CASES if name in chosen)


@pytest.fixture
def world_run(request: pytest.FixtureRequest) -> World:
    """The run of this item's world size over the selected cases (started by the first item that asks)."""
    p = request.node.callspec.params["p"]
    result = world(p, selected_cases(request.session, p))
    WORLDS[p] = result
    return result


WORLDS: dict[int, World] = {}
"""The worlds this session ran, for the summary table (tests/runtime/conftest.py)."""


ITEMS = [(p, case) for p in WORLD_SIZES for case in runtime_cases.CASES
         if p in runtime_cases.ONLY_AT.get(case, WORLD_SIZES)]
"""(world size, case) pairs: every case at every world size, except those runtime_cases.ONLY_AT restricts."""


@pytest.mark.parametrize("p, case", ITEMS, ids=[f"{p}-{case}" for p, case in ITEMS])
def test_case(p: int, case: str, world_run: World, request: pytest.FixtureRequest) -> None:
    request.node.case_seconds = world_run.seconds.get(case)  # the call's reported duration (conftest.py)
    request.node.case_cpu = (p, case, world_run.cpu.get(case, 0.0),  # the summary's numbers (conftest.py)
                             world_run.cpu.get(START, 0.0), world_run.wall_s, world_run.cpu_s)
    error = world_run.errors[case]
    assert error is None, error
