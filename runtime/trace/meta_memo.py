"""Meta-tensor results remembered by their inputs' shapes, so that a trace on the meta device runs each meta kernel
once per distinct call instead of once per call.

Library module (no command). Under torch 2.x most meta kernels are Python reference implementations
(`torch._refs` through `torch._prims`): an element-wise `add` costs a few hundred microseconds on meta tensors, a
`gelu` or `logaddexp` milliseconds, more than the traced step's own Python. A meta kernel's result is a function
of its arguments' metadata (shape, strides, storage offset, dtype), its other arguments (with their types)
and the default dtype, so `MetaMemo`, a
`TorchDispatchMode`, keeps the result's metadata per call and answers a repeated call with a fresh meta tensor of
the same metadata (a fresh storage, as the kernel allocates one). It remembers operators that return new tensors,
and those that write one input in place or through `out=` and return it (a ring's `logaddexp(..., out=lse)` costs
milliseconds on meta tensors): a repeated call of these, whose first call left the written input's metadata as it
was, returns that input without running the kernel (a meta tensor holds no values to write). It remembers no other
operator whose schema mutates or aliases an input (views, several written inputs or results, and the view-like
operators the tracer names in `ALIAS_OPS`), and only calls whose tensor arguments and results are all on the meta
device.
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

MAX_ENTRIES = 200_000
"""Calls remembered before the memo starts again (a few hundred bytes each)."""


class _NotMeta(Exception):
    """An argument is a tensor off the meta device: the call is not remembered."""


def _key(x):
    """A hashable stand-in for one argument: a tensor by its metadata, lists and tuples element by element, any
    other value with its type (1, 1.0 and True are equal and hash alike, yet promote a tensor to other dtypes)."""
    if isinstance(x, torch.Tensor):
        if not x.is_meta or x.layout != torch.strided:  # a sparse tensor has no strides to key on
            raise _NotMeta
        return ("T", tuple(x.shape), x.stride(), x.storage_offset(), x.dtype)
    if isinstance(x, (list, tuple)):
        return (type(x), tuple([_key(y) for y in x]))  # a list, not a generator: called for every dispatched op
    return (type(x), x)


def _describe(out):
    """The metadata of a result (a meta tensor at the start of its storage, None, or a list or tuple of them), None
    when it cannot be rebuilt."""
    if isinstance(out, torch.Tensor):
        if out.device.type != "meta" or out.storage_offset():  # a new tensor starts its storage
            return None
        return ("T", tuple(out.shape), out.stride(), out.dtype)
    if out is None:
        return ("N",)
    if isinstance(out, (list, tuple)):
        parts = [_describe(x) for x in out]
        return None if any(p is None for p in parts) else (type(out), tuple(parts))
    return None


def _rebuild(d):
    """A fresh result of the metadata `_describe` gave."""
    if d[0] == "T":
        _, shape, stride, dtype = d
        return torch.empty_strided(shape, stride, dtype=dtype, device="meta")
    if d[0] == "N":
        return None
    return d[0](_rebuild(x) for x in d[1])


def _written_state(t: torch.Tensor) -> tuple:
    """What an in-place kernel may change of the tensor it writes: its metadata and which storage it views."""
    return _key(t), t.untyped_storage()._cdata


class MetaMemo(TorchDispatchMode):
    """Answers a repeated meta-tensor call of an operator that returns new tensors from the first call's result
    metadata (module docstring); `hits` and `misses` count the calls it could remember."""

    def __init__(self, alias_ops=frozenset()):
        super().__init__()
        self.alias_ops = frozenset(alias_ops)
        self.memo: dict = {}
        self.fresh: dict = {}
        self.written: dict = {}
        self.hits = 0
        self.misses = 0

    def returns_fresh(self, func) -> bool:
        """Whether `func` returns new tensors only: its schema mutates nothing and aliases no input."""
        fresh = self.fresh.get(func)
        if fresh is None:
            schema = func._schema
            fresh = (not schema.is_mutable and all(r.alias_info is None for r in schema.returns)
                     and not getattr(func, "is_view", False) and schema.name.split("::")[-1] not in self.alias_ops)
            self.fresh[func] = fresh
        return fresh

    def written_input(self, func) -> tuple[int, str, bool] | None:
        """(position, name, keyword-only) of the one input `func` writes and returns (in place, or `out=`), None
        for an operator that writes none, several, returns anything else or is a view."""
        if func not in self.written:
            schema = func._schema
            written = [(i, a) for i, a in enumerate(schema.arguments) if a.alias_info is not None
                       and a.alias_info.is_write]
            returns = schema.returns
            self.written[func] = None
            if (len(written) == 1 and len(returns) == 1 and returns[0].alias_info is not None
                    and returns[0].alias_info.is_write and not getattr(func, "is_view", False)
                    and schema.name.split("::")[-1] not in self.alias_ops):
                i, arg = written[0]
                self.written[func] = (i, arg.name, arg.kwarg_only)
        return self.written[func]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        fresh = self.returns_fresh(func)
        writes = None if fresh else self.written_input(func)
        if not fresh and writes is None:
            return func(*args, **kwargs)
        try:
            # the default dtype is an input too: a float scalar or factory call takes it
            key = (func, torch.get_default_dtype(), _key(args), _key(tuple(sorted(kwargs.items()))))
            hash(key)
        except (_NotMeta, TypeError):
            return func(*args, **kwargs)
        if writes is not None:
            i, name, kwarg_only = writes
            target = kwargs.get(name) if kwarg_only or i >= len(args) else args[i]
        known = self.memo.get(key)
        if known is not None:
            self.hits += 1
            return target if writes is not None else _rebuild(known)
        if writes is not None:
            before = _written_state(target) if isinstance(target, torch.Tensor) else None
        out = func(*args, **kwargs)
        if writes is not None:  # remembered when the kernel returned the input it wrote, its metadata and storage
            # unchanged (`set_` keeps the metadata of a same-shaped source yet takes its storage)
            described = ("W",) if before is not None and out is target and _written_state(out) == before else None
        else:
            described = _describe(out)
        if described is not None:
            if len(self.memo) >= MAX_ENTRIES:
                self.memo.clear()
            self.memo[key] = described
            self.misses += 1
        return out
