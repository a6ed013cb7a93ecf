"""Distributed case of the one-collective yes-or-no decision (`agree_flag`) that `calibrate`'s measuring loops
take before each point: ranks that pass different flags all get rank 0's, after one broadcast (where `agree` takes
two). It runs at p = 2 only: rank 0 against one other rank is the whole mechanism."""

from __future__ import annotations

from unittest import mock

import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from paradyse_lab.runtime.launch.ranks import agree, agree_flag


def _broadcasts(fn) -> tuple[object, int]:
    """`fn()` and the broadcasts it made (through torch.distributed or inside its c10d module)."""
    spy = mock.Mock(wraps=c10d.broadcast)
    with mock.patch.object(dist, "broadcast", spy), mock.patch.object(c10d, "broadcast", spy):
        return fn(), spy.call_count


def flag_agreed_case(rank: int, p: int, group) -> None:
    got, calls = _broadcasts(lambda: [agree_flag(rank == 0, group), agree_flag(rank != 0, group),
                                      agree_flag(True, group)])
    assert got == [True, False, True] and calls == 3, (got, calls)
    got, calls = _broadcasts(lambda: agree(rank == 0, group))
    assert got is True and calls == 2, (got, calls)  # the pickled object's length, then its bytes


CASES = {"flag-agreed-from-rank0": flag_agreed_case}
ONLY_AT = {name: (2,) for name in CASES}
