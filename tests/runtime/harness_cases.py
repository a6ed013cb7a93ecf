"""Cases of the harness's own test (test_dist_harness.py): one passes after a pause, one fails, one checks what the
rank inherited from the forkserver, and one must never run (its only trace would be the file it writes)."""

from __future__ import annotations

import os
import time


def _passes(rank: int, p: int, group) -> None:
    time.sleep(0.3)


def _fails(rank: int, p: int, group) -> None:
    raise AssertionError(f"failed on purpose on rank {rank}")


def _preloaded(rank: int, p: int, group) -> None:
    """The forkserver imported dist_harness.PRELOAD before it forked this rank (rank_warmup lives beside the
    harness, where the forkserver's own sys.path does not look): the rank starts with the solver's kernels loaded,
    the objects it inherited frozen out of its garbage collections (gc_paused, rank_warmup) and the collector on."""
    import gc
    import sys

    from paradyse_lab.solvers import kernels

    assert "rank_warmup" in sys.modules and kernels._warm, "the forkserver did not import rank_warmup"
    assert gc.isenabled() and gc.get_freeze_count() > 100_000, (gc.isenabled(), gc.get_freeze_count())


def _pinned(rank: int, p: int, group) -> None:
    """The rank and every thread of it (gloo's event loop and workers included) run on one CPU: the CPU the
    harness gave this rank (dist_harness `_pin_to_one_cpu`)."""
    if not hasattr(os, "sched_setaffinity"):  # macOS, Windows: the harness pins nothing
        return
    threads = [int(t) for t in os.listdir("/proc/self/task")]
    cpus = {tid: os.sched_getaffinity(tid) for tid in threads}
    assert len(threads) > 1 and all(c == cpus[threads[0]] and len(c) == 1 for c in cpus.values()), cpus


def _not_selected(rank: int, p: int, group) -> None:
    open(os.environ["HARNESS_TRACE"], "w").close()


CASES = {"passes": _passes, "fails": _fails, "preloaded": _preloaded, "pinned": _pinned,
         "not-selected": _not_selected}
