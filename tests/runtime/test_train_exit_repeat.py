"""A finished `paradyse-lab train --nproc 2` run exits 0 every time (no abort in the ranks' teardown at exit).

Slow (it launches the run 20 times: tests/runtime/repeat_train_launch.py), so it runs only with
PARADYSE_SLOW_TESTS=1; the default suite stays fast."""

from __future__ import annotations

import os

import pytest
from repeat_train_launch import repeat


@pytest.mark.skipif(os.environ.get("PARADYSE_SLOW_TESTS") != "1", reason="slow: set PARADYSE_SLOW_TESTS=1")
def test_a_finished_two_rank_run_exits_0_every_time():
    rows = repeat(20, jobs=2, load=2)
    failed = [(row["exit_code"], row["last_stderr_line"]) for row in rows if row["exit_code"]]
    assert not failed, f"{len(failed)} of {len(rows)} runs failed: {failed[:3]}"
