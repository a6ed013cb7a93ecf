"""Count the operators a step dispatches and the tensor bytes it holds at its peak.

Library module (no command). `DispatchCount` is a `TorchDispatchMode`: inside its block every operator call that
reaches Python dispatch is counted by namespace (`aten`, `c10d`, ...) and by name, and every tensor an operator
creates is tracked until it is freed, so `peak_bytes` is the most bytes of tensors created inside the block that
were alive at once (views and in-place results share their input's storage and add nothing). A tensor subclass
(DTensor) call is counted once, as the mode sees it, not the local operators it runs for it; allocations made
inside one operator and freed before it returns (a kernel's scratch tiles) are not seen. The forward and the
backward of a step run in the caller's thread on CPU, so both are counted.
"""

from __future__ import annotations

import weakref
from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


def _storage_of(t: torch.Tensor):
    """(data pointer, bytes) of the storage under t (a DTensor's local tensor), or None when it has none."""
    local = getattr(t, "_local_tensor", t)
    try:
        storage = local.untyped_storage()
        ptr = storage.data_ptr()
    except (RuntimeError, NotImplementedError):  # a wrapper subclass or a fake tensor: no storage of its own
        return None
    return (ptr, storage.nbytes()) if ptr else None


class DispatchCount(TorchDispatchMode):
    """Operator counts (`ops`: Counter of 'namespace::name') and live tensor bytes (`peak_bytes`) of a block."""

    def __init__(self):
        super().__init__()
        self.ops: Counter = Counter()
        self.live_bytes = 0
        self.peak_bytes = 0
        self._refs: dict[int, list[int]] = {}  # storage pointer -> [live tensors, bytes]

    def count(self, namespace: str = "aten") -> int:
        """Calls of operators in `namespace`."""
        return sum(n for name, n in self.ops.items() if name.split("::")[0] == namespace)

    def _release(self, ptr: int) -> None:
        entry = self._refs.get(ptr)
        if entry is None:
            return
        entry[0] -= 1
        if entry[0] == 0:
            self.live_bytes -= entry[1]
            del self._refs[ptr]

    def _track(self, outputs, inputs) -> None:
        known = {s[0] for s in (_storage_of(t) for t in inputs if isinstance(t, torch.Tensor)) if s}
        for t in outputs:
            if not isinstance(t, torch.Tensor):
                continue
            found = _storage_of(t)
            if found is None:
                continue
            ptr, nbytes = found
            if ptr in known and ptr not in self._refs:
                continue  # an input's storage made before the block (in place, or a view of it)
            if ptr not in self._refs:
                self._refs[ptr] = [0, nbytes]
                self.live_bytes += nbytes
                self.peak_bytes = max(self.peak_bytes, self.live_bytes)
            self._refs[ptr][0] += 1
            weakref.finalize(t, self._release, ptr)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.ops[f"{func.namespace}::{func.__name__.split('.')[0]}"] += 1
        out = func(*args, **kwargs)
        self._track(tree_flatten(out)[0], tree_flatten((args, kwargs))[0])
        return out
