"""`--collective-timeout` holds for every process group of a run, not only the world's: the node groups and the
grouped steps' mesh groups made after the world joined wait the same timeout (torch gives a group made without
one its 30-minute default).

Run: `python -m pytest -q tests/runtime/test_group_timeouts.py` (two spawned gloo ranks, a few seconds)."""

from __future__ import annotations

from group_timeout_cases import EXPECTED_S, groups_carry_the_run_timeout

from paradyse_lab.runtime.launch.ranks import launch


def test_groups_made_after_the_world_wait_the_collective_timeout():
    launch(groups_carry_the_run_timeout, 2, timeout_s=EXPECTED_S)
