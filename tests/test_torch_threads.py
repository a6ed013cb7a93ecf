"""Every test starts with torch on one intra-op thread, whatever the test before it left (the suite's conftest)."""

from __future__ import annotations

import torch


def test_a_test_may_leave_another_thread_count():
    torch.set_num_threads(2)  # as an in-process one-process `train` does (its free cores)
    assert torch.get_num_threads() == 2


def test_the_next_test_runs_on_one_thread_again():
    assert torch.get_num_threads() == 1
