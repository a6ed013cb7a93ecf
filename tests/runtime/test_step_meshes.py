"""`StepMeshes.shared` (runtime/training/grouped.py): the step meshes of a process's world are made once per world, and
a
new world (a process group destroyed and started again) gets its own. The four-rank check that `train` runs make
them at most once: tests/runtime/grouped_cases.py `train_global_batch_case`.

Run: `python -m pytest -q tests/runtime/test_step_meshes.py` (one in-process gloo rank, about a second)."""

from __future__ import annotations

import datetime
import os

import torch.distributed as dist
from dist_harness import free_port

from paradyse_lab.runtime.training.grouped import StepMeshes


def _start_world() -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1, timeout=datetime.timedelta(seconds=60))


def test_the_meshes_are_made_once_per_world(monkeypatch):
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")  # restored after the test, with MASTER_PORT
    monkeypatch.setenv("MASTER_PORT", "0")
    alone = StepMeshes.shared()
    assert alone is StepMeshes.shared() and alone.sizes == (1,)  # no process group: one rank, no meshes
    _start_world()
    try:
        first = StepMeshes.shared()
        assert first is not alone and first is StepMeshes.shared()
    finally:
        dist.destroy_process_group()
    _start_world()
    try:
        assert StepMeshes.shared() is not first  # a new world: its own meshes
    finally:
        dist.destroy_process_group()


def test_leaving_the_world_drops_the_shared_meshes_and_the_group(monkeypatch):
    import gc
    import weakref

    from paradyse_lab.runtime.launch.ranks import leave_process_group
    from paradyse_lab.runtime.training import grouped

    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "0")
    _start_world()
    try:
        StepMeshes.shared()
        world = weakref.ref(dist.group.WORLD)
    finally:
        leave_process_group()  # barrier, forget the meshes, destroy, collect
    gc.collect()
    assert not grouped._SHARED and world() is None  # nothing keeps the left world's group alive
