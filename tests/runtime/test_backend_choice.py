"""How the runtime picks NCCL, and the fake group's all-gather, checked on CPU.

Run: `python -m pytest -q tests/runtime/test_backend_choice.py`.
- `comm.is_nccl`: `init_process_group()` without a backend gives the per-device backend 'cpu:gloo,cuda:nccl'
  (torch.distributed docs); CUDA tensors then go through NCCL (and its batched point-to-point).
- `launch.backend_for`: a multi-node torchrun (16 ranks, 8 GPUs per node) uses NCCL, not gloo.
- the fake all-gather writes its output in place, without a second full-size temporary.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from paradyse_lab.runtime.comm import collectives as comm
from paradyse_lab.runtime.comm.fake_group import FakeGroup
from paradyse_lab.runtime.launch.ranks import backend_for


@pytest.mark.parametrize("backend, device, want", [
    ("nccl", "cuda", True), ("gloo", "cpu", False), ("gloo", "cuda", False),
    ("cpu:gloo,cuda:nccl", "cuda", True), ("cpu:gloo,cuda:nccl", "cpu", False),
])
def test_nccl_is_recognised_in_per_device_backend_strings(monkeypatch, backend, device, want):
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_backend", lambda group=None: backend)
    tensor = SimpleNamespace(device=torch.device(device))
    assert comm.is_nccl(object(), tensor) is want
    if device == "cuda":
        assert comm.is_nccl(object()) is want  # the group as a whole (train's device choice)


@pytest.mark.parametrize("world, env, devices, want", [
    (16, {"LOCAL_WORLD_SIZE": "8", "LOCAL_RANK": "3"}, 8, "nccl"),  # 2 nodes x 8 GPUs under torchrun
    (8, {"LOCAL_WORLD_SIZE": "8"}, 8, "nccl"),
    (4, {}, 8, "nccl"),  # the single-machine launcher
    (16, {"LOCAL_WORLD_SIZE": "16"}, 8, "gloo"),  # more processes than GPUs on the node
    (2, {}, 0, "gloo"),
])
def test_backend_for_multi_node_torchrun(world, env, devices, want):
    assert backend_for(world, env, devices > 0, devices) == want


class _NewStorages(TorchDispatchMode):
    """Ops whose output is a fresh storage of at least `numel` elements."""

    def __init__(self, numel: int):
        super().__init__()
        self.numel, self.allocations = numel, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        seen = {t.untyped_storage().data_ptr() for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.numel() >= self.numel and t.untyped_storage().data_ptr() not in seen:
                self.allocations.append(str(func))
        return out


def test_fake_all_gather_allocates_only_its_output():
    x = torch.arange(24.0).view(3, 8)  # [n, ...]
    p = 4
    with _NewStorages(p * x.numel()) as mode:
        out = comm.all_gather(x, FakeGroup(p, 1))  # [n, ...] -> [p*n, ...]
    assert torch.equal(out, x.repeat(p, 1))
    assert len(mode.allocations) == 1, mode.allocations  # the output buffer, no full-size temporary
