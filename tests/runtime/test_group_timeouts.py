"""`--collective-timeout` holds for every process group of a run, not only the world's: the node groups and the
grouped steps' mesh groups made after the world joined wait the same timeout (torch gives a group made without
one its 30-minute default).

Run: `python -m pytest -q tests/runtime/test_group_timeouts.py` (two spawned gloo ranks, a few seconds)."""

from __future__ import annotations

import pytest
from group_timeout_cases import EXPECTED_S, groups_carry_the_run_timeout

from paradyse_lab.runtime.launch.ranks import launch

pytestmark = pytest.mark.xdist_group("gloo-worlds")
"""Run on the pytest worker of the distributed tests' worlds (tests/conftest.py's `WORLDS_GROUP`), after them: the
launches here fork their ranks from that worker's fork server, which has imported torch and the runtime for the
worlds, instead of starting one that imports torch again (~3 CPU s a launch)."""


def test_groups_made_after_the_world_wait_the_collective_timeout():
    launch(groups_carry_the_run_timeout, 2, timeout_s=EXPECTED_S)
