"""Activation offload: what a sub-layer keeps for its backward, held in host memory in between.

Library module (no command). `Offloader.sublayer(tag, params)` is a context manager around one sub-layer's
forward: inside it, `torch.autograd.graph.saved_tensors_hooks` (the mechanism of PyTorch's own
`torch.autograd.graph.save_on_cpu` and of DeepSpeed's CPU checkpointing) hands every tensor the sub-layer saves
for backward, the parameters excepted, to `_pack`, which copies it to host memory and lets the device copy go;
`_unpack` brings it back when the backward asks for it. Under recomputation the only such tensor is the
sub-layer input x [b, t, h].

On CUDA the copy out runs on a side stream after the compute that made the tensor (the stream waits for the
compute stream), into pinned host memory, and the tensor's memory is not reused before the copy has run
(`record_stream`); the copy back runs on the side stream too, and the compute stream waits for it only when it
needs the tensor. The backward of an offloaded sub-layer starts bringing back the tensors of the offloaded one
before it (the next one the backward reaches: a prefetch), so that copy overlaps this sub-layer's backward, as
the cost model's overlap assumes (`offload_exposed_s`). On CPU the "host"
copy is a separate buffer made the same way (the copies are synchronous there), so the bytes moved and the
schedule of the copies are the same on both.

`OffloadStats` (one per step, `Offloader.stats`) counts the bytes each sub-layer moved each way and records
each copy with the sub-layer whose pass it overlaps: ("to_host", tag, tag) when copied out during its own
forward, ("to_device", tag, other) when brought back during the backward of `other` (the next offloaded
sub-layer, when prefetched; itself for the last one). A tensor saved twice by one sub-layer (one storage)
moves once.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch
from torch.multiprocessing.reductions import StorageWeakRef


@dataclass
class OffloadStats:
    """What the offload of one step moved (module docstring)."""

    to_host: dict[str, int] = field(default_factory=dict)
    """Sub-layer tag -> bytes copied to host memory."""
    to_device: dict[str, int] = field(default_factory=dict)
    """Sub-layer tag -> bytes copied back for the backward."""
    copies: list[tuple[str, str, str]] = field(default_factory=list)
    """(direction, tag of the tensors, tag of the sub-layer pass it overlaps), in issue order."""


class _Held:
    """One storage in host memory: its host copy, and its device copy once brought back."""

    def __init__(self, tag: str, host: torch.Tensor, device: torch.device, done):
        self.tag, self.host, self.device, self.done = tag, host, device, done
        self.back: torch.Tensor | None = None
        self.back_done = None
        self.uses = 0
        """Saved tensors of this storage not yet unpacked: the copies are dropped when it reaches 0."""


def _storage_key(t: torch.Tensor) -> StorageWeakRef:
    """The identity of t's storage, the same for every view of it: the storage object itself (held weakly, so its
    identity is not reused while the key lives), not its address, which is 0 for every storage on the meta device
    (a traced step would see one storage where a real run sees several) and for every empty one."""
    return StorageWeakRef(t.untyped_storage())


class Offloader:
    """Moves the saved tensors of the sub-layers run inside `sublayer(...)` to host memory and back (module
    docstring); one per training step."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.stream = torch.cuda.Stream(device) if self.cuda else None
        self.stats = OffloadStats()
        self._order: list[str] = []
        self._held: dict[str, list[_Held]] = {}

    @contextlib.contextmanager
    def sublayer(self, tag: str, params):
        """Offload what the sub-layer `tag` saves for backward, except `params` (its model states)."""
        skip = {_storage_key(q) for q in params}
        seen: dict[StorageWeakRef, _Held] = {}
        self._order.append(tag)
        self._held[tag] = []

        def pack(t):
            key = _storage_key(t)
            if key in skip:
                return t
            if key not in seen:
                seen[key] = self._copy_out(tag, t)
            seen[key].uses += 1
            return (seen[key], t.shape, t.stride(), t.storage_offset())

        with torch.autograd.graph.saved_tensors_hooks(pack, self._unpack):
            yield

    def _copy_out(self, tag: str, t: torch.Tensor) -> _Held:
        """The host copy of t's whole storage (views of it are rebuilt from it), started now."""
        storage = torch.empty(0, dtype=t.dtype, device=t.device).set_(t.untyped_storage())  # [n], the storage
        if self.cuda:
            host = torch.empty(storage.shape, dtype=t.dtype, pin_memory=True)
            self.stream.wait_stream(torch.cuda.current_stream(t.device))  # t is computed
            with torch.cuda.stream(self.stream):
                host.copy_(storage, non_blocking=True)
                done = torch.cuda.Event()
                done.record(self.stream)
            t.record_stream(self.stream)  # t's memory is not reused before the copy has read it
        else:
            host, done = storage.clone(), None  # a separate buffer: the CPU's "host" copy
        held = _Held(tag, host, t.device, done)
        self._held[tag].append(held)
        self.stats.to_host[tag] = self.stats.to_host.get(tag, 0) + host.nbytes
        self.stats.copies.append(("to_host", tag, tag))
        return held

    def _unpack(self, packed):
        if isinstance(packed, torch.Tensor):
            return packed
        held, shape, stride, offset = packed
        if held.back is None:
            self._bring_back(held.tag, held.tag)
        index = self._order.index(held.tag)
        if index > 0 and self._prefetchable(self._order[index - 1], held.tag):
            self._bring_back(self._order[index - 1], held.tag)  # prefetch: the next one the backward reaches
        if self.cuda:
            torch.cuda.current_stream(held.device).wait_event(held.back_done)
        out = held.back.as_strided(shape, stride, offset)
        held.uses -= 1
        if held.uses == 0:  # the backward holds what it needs; neither copy is kept here any longer
            self._held[held.tag].remove(held)
            held.back = held.host = None
        return out

    def _prefetchable(self, previous: str, tag: str) -> bool:
        """Whether the backward of `tag` may bring `previous` back early: only the sub-layer just before it in
        execution order, and no larger than `tag`'s own offloaded bytes, the one extra set the cost model counts
        (`with_offload`); otherwise it comes back when first needed."""
        before, at = _span(previous), _span(tag)
        adjacent = before[1] == at[0] - 1 if before is not None and at is not None else True  # other tags: in order
        return adjacent and self.stats.to_host.get(previous, 0) <= self.stats.to_host.get(tag, 0)

    def _bring_back(self, tag: str, during: str) -> None:
        """Start copying the tensors of sub-layer `tag` back to the device, during the backward of `during`."""
        for held in self._held.get(tag, ()):
            if held.back is not None:
                continue
            if self.cuda:
                with torch.cuda.stream(self.stream):
                    self.stream.wait_event(held.done)
                    back = torch.empty(held.host.shape, dtype=held.host.dtype, device=held.device)
                    back.copy_(held.host, non_blocking=True)
                    held.back_done = torch.cuda.Event()
                    held.back_done.record(self.stream)
                back.record_stream(torch.cuda.current_stream(held.device))
            else:
                back = held.host.clone()
            held.back = back
            self.stats.to_device[tag] = self.stats.to_device.get(tag, 0) + back.nbytes
            self.stats.copies.append(("to_device", tag, during))


def _span(tag: str) -> tuple[int, int] | None:
    """The first and last execution positions of the sub-layers of `tag` (`layers.{i}.attention` 2i,
    `layers.{i}.mlp` 2i + 1, a checkpointed layer `layers.{i}` both), or None for a tag of another form."""
    parts = tag.split(".")
    if len(parts) == 2 and parts[0] == "layers" and parts[1].isdigit():
        return 2 * int(parts[1]), 2 * int(parts[1]) + 1
    if len(parts) == 3 and parts[0] == "layers" and parts[1].isdigit() and parts[2] in ("attention", "mlp"):
        position = 2 * int(parts[1]) + (parts[2] == "mlp")
        return position, position
    return None
