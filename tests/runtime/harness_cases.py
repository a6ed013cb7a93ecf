"""Cases of the harness's own test (test_dist_harness.py): one passes after a pause, one fails, and one must
never run (its only trace would be the file it writes)."""

from __future__ import annotations

import os
import time


def _passes(rank: int, p: int, group) -> None:
    time.sleep(0.3)


def _fails(rank: int, p: int, group) -> None:
    raise AssertionError(f"failed on purpose on rank {rank}")


def _not_selected(rank: int, p: int, group) -> None:
    open(os.environ["HARNESS_TRACE"], "w").close()


CASES = {"passes": _passes, "fails": _fails, "not-selected": _not_selected}
