"""Every collective and point-to-point exchange of the runtime, with the process group as an argument.

Library module (no command). Works on gloo (CPU) and NCCL (GPU); a group of size 1, or no initialised
process group at all, short-circuits every call (nothing is sent, nothing is counted).

Byte counting: each call records the bytes this rank sends under the ring-algorithm convention of
`paradyse_lab.costmodel.types.CollectiveCall.sent_bytes` (nccl-tests' buffer S, docs/hardware.md section 3):
all_gather / reduce_scatter / all_to_all S(n-1)/n, all_reduce 2S(n-1)/n, p2p the message. The count is
of the logical collective, whatever the backend does underneath, so it can be compared with the
analytic schedule (paradyse_lab/costmodel/schedules.py). Wrap code in `count_bytes()` to collect them, and
in `trace_calls()` to record every call with its shapes, dtypes and peers in posting order (replayed across
ranks by runtime/comm_replay.py to find deadlocks and mismatches without a GPU).

A `runtime.fake_group.FakeGroup` in place of a process group makes every call return a correctly shaped
tensor without communicating (and still count its bytes): one process then plays one rank of a p-rank
world (the rank-local profiler, paradyse_lab/app/measure/profiler.py).

Gloo notes: `all_to_all_single` is used for all-to-all, and point-to-point exchanges are plain paired
`isend`/`irecv` (batched point-to-point can hang on gloo); on NCCL an exchange is one
`batch_isend_irecv` so that a send and a receive to the same peer cannot deadlock.
Point-to-point messages between a pair of ranks are matched in the order they are posted, so every
caller must post them in the same program order on all ranks (the strategies do).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from paradyse_lab.costmodel.formulas import GRAD_BUCKET_ELEMENTS  # the cost model's bucket: one number for both

_AG = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_RS = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


@dataclass
class ByteCounter:
    """Bytes this rank sent, by collective kind, and the list of calls."""

    by_op: dict[str, int] = field(default_factory=dict)
    """Sent bytes per op ('all_gather', 'reduce_scatter', 'all_to_all', 'all_reduce', 'p2p')."""
    calls: list[tuple[str, int, str]] = field(default_factory=list)
    """(op, sent bytes, tag) per call."""

    def add(self, op: str, nbytes: int, tag: str = "") -> None:
        self.by_op[op] = self.by_op.get(op, 0) + nbytes
        self.calls.append((op, nbytes, tag))

    def total(self, tag: str | None = None) -> dict[str, int]:
        """Bytes by op, only of calls with `tag` when given."""
        out: dict[str, int] = {}
        for op, n, t in self.calls:
            if tag is None or t == tag:
                out[op] = out.get(op, 0) + n
        return out


GRAD_REDUCE_DTYPE = torch.float32
"""The dtype every parameter gradient is summed over ranks in, whatever the model dtype: a 16-bit sum over p
ranks rounds at every addition, so bf16 partials would lose low-order bits p - 1 times. As Megatron-LM's
`DistributedDataParallelConfig.grad_reduce_in_fp32` ("If true, reduce grads in fp32",
megatron/core/distributed/distributed_data_parallel_config.py) and PyTorch FSDP2's
`MixedPrecisionPolicy(reduce_dtype=torch.float32)` ("the dtype for gradient reduction (i.e. reduce-scatter or
all-reduce) ... to run gradient reduction in full precision while using low precision for compute",
torch.distributed.fsdp) do: each 16-bit gradient (or bucket) is cast to fp32 just before its reduce-scatter,
all-reduce or point-to-point reduction, and the reduced fp32 sum is rounded once to the parameter's dtype.
fp32 gradients are reduced as they are (no copy). Activation gradients (megatron_ts's and Ulysses' sequence
collectives) stay in the model dtype, as in Megatron. The cost model counts the fp32 bytes sent and the fp32
buffers (paradyse_lab/costmodel/formulas.py `GRAD_REDUCE_BYTES`, `GRAD_BUCKET_ELEMENTS`)."""


def grad_reduce_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a gradient of `dtype` is reduced in: `GRAD_REDUCE_DTYPE` for 16-bit floats, else `dtype`."""
    return GRAD_REDUCE_DTYPE if dtype.is_floating_point and torch.finfo(dtype).bits < 32 else dtype


def all_reduce_grads(grads, group=None, bucket: int | None = None) -> list[torch.Tensor]:
    """The gradients `grads` (one dtype) summed over ranks: views of one flat [sum numel] buffer of their dtype
    (`all_reduce_flat_grads_`)."""
    if size(group) == 1:
        return list(grads)
    flat_in = [g.reshape(-1) for g in grads]
    flat = torch.cat(flat_in)  # [sum numel], the results
    all_reduce_flat_grads_(flat, group, bucket)
    return [piece.view_as(g) for piece, g in zip(flat.split([g.numel() for g in flat_in]), grads)]


def all_reduce_flat_grads_(flat: torch.Tensor, group=None, bucket: int | None = None) -> None:
    """Sum the flat gradient buffer `flat` [n] over ranks in place, one bucket of at most `bucket` elements
    (default `GRAD_BUCKET_ELEMENTS`) at a time, each bucket one all-reduce in `grad_reduce_dtype`: for 16-bit
    gradients a fresh fp32 [c] copy of the bucket, summed, rounded once back and freed before the next bucket;
    fp32 gradients in place (no other copy)."""
    if size(group) == 1:
        return
    step, reduce_dtype = bucket or GRAD_BUCKET_ELEMENTS, grad_reduce_dtype(flat.dtype)
    for start in range(0, flat.numel(), step):
        piece = flat[start:start + step]  # [c], a view
        if reduce_dtype == flat.dtype:
            all_reduce(piece, group)  # [c] summed in place
            continue
        buf = piece.to(reduce_dtype)  # [c] fp32
        all_reduce(buf, group)  # [c] fp32, summed over ranks
        piece.copy_(buf)  # rounded once to the gradients' dtype
        del buf


def reduce_scatter_grads(x: torch.Tensor, group=None, bucket: int | None = None) -> torch.Tensor:
    """`reduce_scatter` of the rank-major gradient `x` [p*n] -> [n], in x's dtype, summed in `grad_reduce_dtype`: a
    16-bit `x` one bucket of [p, c] columns (c = `bucket` // p, default `GRAD_BUCKET_ELEMENTS` // p) at a time, each
    copied to fp32, reduce-scattered [p*c] -> [c] and rounded once into the output before the next; fp32 as it is."""
    p = size(group)
    reduce_dtype = grad_reduce_dtype(x.dtype)
    if p == 1 or reduce_dtype == x.dtype:
        return reduce_scatter(x, group)
    rows = x.reshape(p, -1)  # [p*n] -> [p, n], rank-major
    n = rows.shape[1]
    out = torch.empty(n, dtype=x.dtype, device=x.device)  # [n]
    cols = max(1, (bucket or GRAD_BUCKET_ELEMENTS) // p)
    for start in range(0, n, cols):
        stop = min(start + cols, n)
        part = rows[:, start:stop].to(reduce_dtype, memory_format=torch.contiguous_format)  # [p, c] fp32
        out[start:stop].copy_(reduce_scatter(part.reshape(-1), group))  # [p*c] -> [c] summed, rounded once
        del part
    return out


_COUNTERS: list[ByteCounter] = []
_TAG: list[str] = [""]


@dataclass(frozen=True)
class TracedCall:
    """One call as this rank posts it (for runtime/comm_replay.py): a collective, or one point-to-point
    exchange (its sends and receives, posted together: one `batch_isend_irecv` on NCCL)."""

    op: str
    """'all_gather', 'reduce_scatter', 'all_to_all', 'all_reduce' or 'p2p'."""
    group_size: int
    shape: tuple[int, ...] = ()
    """Collectives: the input's shape."""
    dtype: str = ""
    sends: tuple[tuple[int, tuple[int, ...], str, int], ...] = ()
    """p2p: (destination group rank, shape, dtype, message tag) per message sent."""
    recvs: tuple[tuple[int, tuple[int, ...], str, int], ...] = ()
    """p2p: (source group rank, shape, dtype, message tag) per message received."""
    tag: str = ""
    """The `tagged()` label (layer and sub-layer) the call was made under."""


_TRACES: list[list[TracedCall]] = []


@contextlib.contextmanager
def trace_calls():
    """Record every call inside the block, in posting order: `with trace_calls() as calls: ...`."""
    calls: list[TracedCall] = []
    _TRACES.append(calls)
    try:
        yield calls
    finally:
        _TRACES.remove(calls)


def _trace(op: str, group, x: torch.Tensor | None = None, sends=(), recvs=()) -> None:
    if not _TRACES:
        return
    call = TracedCall(op, size(group), tuple(x.shape) if x is not None else (), _dtype(x) if x is not None else "",
                      tuple(sends), tuple(recvs), _TAG[-1])
    for t in _TRACES:
        t.append(call)


@contextlib.contextmanager
def count_bytes():
    """Collect the bytes every call inside the block sends: `with count_bytes() as c: ...; c.by_op`."""
    counter = ByteCounter()
    _COUNTERS.append(counter)
    try:
        yield counter
    finally:
        _COUNTERS.remove(counter)


@contextlib.contextmanager
def tagged(tag: str):
    """Label the calls made inside the block (for example 'loss' or 'embedding')."""
    _TAG.append(tag)
    try:
        yield
    finally:
        _TAG.pop()


def _record(op: str, nbytes: int) -> None:
    for c in _COUNTERS:
        c.add(op, int(nbytes), _TAG[-1])


def _dtype(x: torch.Tensor) -> str:
    return str(x.dtype).replace("torch.", "")


def _nbytes(x: torch.Tensor) -> int:
    return x.numel() * x.element_size()


def _fake(group) -> bool:
    """A `runtime.fake_group.FakeGroup`: shapes exact, nothing sent."""
    return bool(getattr(group, "is_fake", False))


def size(group=None) -> int:
    """Ranks in `group` (1 when torch.distributed is not initialised)."""
    if _fake(group):
        return group.size
    return dist.get_world_size(group) if dist.is_available() and dist.is_initialized() else 1


def rank(group=None) -> int:
    """This rank's index in `group` (0 when torch.distributed is not initialised)."""
    if _fake(group):
        return group.rank
    return dist.get_rank(group) if dist.is_available() and dist.is_initialized() else 0


def global_rank(group, group_rank: int) -> int:
    """The global rank of `group_rank` in `group` (point-to-point calls take global ranks)."""
    if group is None or _fake(group) or group is dist.group.WORLD:
        return group_rank
    return dist.get_global_rank(group, group_rank)


def is_nccl(group=None, tensor: torch.Tensor | None = None) -> bool:
    """Whether calls on `group` (for `tensor`) run on NCCL: the backend is 'nccl', or a per-device backend
    string such as 'cpu:gloo,cuda:nccl' (what `init_process_group()` without a backend gives, torch.distributed
    docs) maps CUDA to nccl and `tensor` is on CUDA (or is not given)."""
    if _fake(group) or not (dist.is_available() and dist.is_initialized()):
        return False
    name = str(dist.get_backend(group))
    if ":" not in name:
        return name == "nccl"
    by_device = dict(part.split(":", 1) for part in name.split(",") if ":" in part)
    return by_device.get("cuda") == "nccl" and (tensor is None or tensor.device.type == "cuda")


# --- collectives (dim 0 is the one gathered / scattered) ----------------------------------------------

def broadcast_object(obj, src: int = 0, group=None):
    """Rank `src`'s picklable `obj` on every rank of `group` (others pass anything, e.g. None)."""
    if size(group) == 1 or _fake(group):
        return obj
    box = [obj]
    device = torch.device("cuda", torch.cuda.current_device()) if is_nccl(group) else None
    dist.broadcast_object_list(box, src=global_rank(group, src), group=group, device=device)  # pickled bytes
    return box[0]


def all_gather(x: torch.Tensor, group=None) -> torch.Tensor:
    """Concatenate every rank's `x` along dim 0: [n, ...] -> [p*n, ...] (rank-major)."""
    p = size(group)
    if p == 1:
        return x
    x = x.contiguous()
    out = torch.empty((p * x.shape[0], *x.shape[1:]), dtype=x.dtype, device=x.device)
    _trace("all_gather", group, x)
    if _fake(group):  # fake: every rank "sent" the local values; copied in place, no full-size temporary
        out.view(p, *x.shape).copy_(x.unsqueeze(0).expand(p, *x.shape))  # [n, ...] -> [p, n, ...] = [p*n, ...]
    else:
        _AG(out, x, group=group)  # [n, ...] -> [p*n, ...]
    _record("all_gather", _nbytes(out) * (p - 1) // p)
    return out


def reduce_scatter(x: torch.Tensor, group=None) -> torch.Tensor:
    """Sum over ranks and keep this rank's dim-0 chunk: [p*n, ...] -> [n, ...]."""
    p = size(group)
    if p == 1:
        return x
    x = x.contiguous()
    out = torch.empty((x.shape[0] // p, *x.shape[1:]), dtype=x.dtype, device=x.device)
    _trace("reduce_scatter", group, x)
    if _fake(group):
        out.copy_(x[rank(group) * out.shape[0]:(rank(group) + 1) * out.shape[0]])  # fake: own chunk, unsummed
    else:
        _RS(out, x, group=group)  # [p*n, ...] -> [n, ...]
    _record("reduce_scatter", _nbytes(x) * (p - 1) // p)
    return out


def all_to_all(x: torch.Tensor, group=None) -> torch.Tensor:
    """Dim-0 chunk j goes to rank j; output chunk j comes from rank j: [p*n, ...] -> [p*n, ...]."""
    p = size(group)
    if p == 1:
        return x
    x = x.contiguous()
    out = torch.empty_like(x)
    _trace("all_to_all", group, x)
    if _fake(group):
        out.copy_(x)  # fake: shapes exact, values not exchanged
    else:
        dist.all_to_all_single(out, x, group=group)  # [p(dest)*n, ...] -> [p(src)*n, ...]
    _record("all_to_all", _nbytes(x) * (p - 1) // p)
    return out


def all_reduce(x: torch.Tensor, group=None, op: str = "sum") -> torch.Tensor:
    """Sum `x` over ranks (`op` 'max': the elementwise maximum), in place; returns `x`."""
    p = size(group)
    if p == 1:
        return x
    _trace("all_reduce", group, x)
    if not _fake(group):
        dist.all_reduce(x, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM, group=group)  # [...] -> [...]
    _record("all_reduce", 2 * _nbytes(x) * (p - 1) // p)
    return x


# --- point-to-point ------------------------------------------------------------------------------------

class Pending:
    """An exchange in flight: `wait()` returns the received tensor (or None when nothing is received)."""

    def __init__(self, works, recv: torch.Tensor | None):
        self._works, self._recv = works, recv

    def wait(self) -> torch.Tensor | None:
        for w in self._works:
            w.wait()
        self._works = []
        return self._recv


def exchange(send: torch.Tensor | None, dst: int | None, src: int | None, recv_like: torch.Tensor | None = None,
             group=None, tag: int = 0) -> Pending:
    """Start sending `send` to group rank `dst` and receiving a tensor shaped like `recv_like` (or `send`)
    from group rank `src`; either side may be None. Double-buffered callers start the next exchange
    before computing on the current block and `wait()` after."""
    works = []
    recv = None
    if src is not None:
        like = recv_like if recv_like is not None else send
        recv = torch.empty_like(like, memory_format=torch.contiguous_format)
    if send is not None:
        send = send.contiguous()
        _record("p2p", _nbytes(send))
    if send is not None or recv is not None:
        _trace("p2p", group, sends=[(dst, tuple(send.shape), _dtype(send), tag)] if send is not None else [],
               recvs=[(src, tuple(recv.shape), _dtype(recv), tag)] if recv is not None else [])
    if _fake(group):  # nothing sent: the "received" tensor is a copy of what would be sent
        if recv is not None:
            recv.copy_(send if send is not None and send.shape == recv.shape else like)
    elif is_nccl(group, send if send is not None else recv):
        ops = []
        if send is not None:
            ops.append(dist.P2POp(dist.isend, send, global_rank(group, dst), group))
        if recv is not None:
            ops.append(dist.P2POp(dist.irecv, recv, global_rank(group, src), group))
        works = dist.batch_isend_irecv(ops) if ops else []
    else:  # gloo: plain paired isend / irecv
        if send is not None:
            works.append(dist.isend(send, global_rank(group, dst), group=group, tag=tag))
        if recv is not None:
            works.append(dist.irecv(recv, global_rank(group, src), group=group, tag=tag))
    return Pending(works, recv)


def ring_exchange(send: torch.Tensor, group=None, tag: int = 0) -> Pending:
    """Send `send` to the next rank (r+1) and receive the previous rank's (r-1) tensor of the same shape."""
    p, r = size(group), rank(group)
    return exchange(send, (r + 1) % p, (r - 1) % p, group=group, tag=tag)


def chain_broadcast(x: torch.Tensor | None, like: torch.Tensor, root: int, group=None, tag: int = 0):
    """Pipelined broadcast from `root` along the ring root -> root+1 -> ... -> root-1 by point-to-point
    messages: every rank but the last in the chain sends the tensor once. Returns (tensor, pending sends)."""
    p, r = size(group), rank(group)
    pos = (r - root) % p
    value = x if pos == 0 else exchange(None, None, (r - 1) % p, recv_like=like, group=group, tag=tag).wait()
    send = exchange(value, (r + 1) % p, None, group=group, tag=tag) if pos < p - 1 else None
    return value, send


def chain_reduce(x: torch.Tensor, root: int, group=None, tag: int = 0):
    """Sum `x` over ranks onto `root` along the chain root+1 -> root+2 -> ... -> root by point-to-point
    messages (every rank but the root sends once). Returns (the sum on the root, else None; pending send)."""
    p, r = size(group), rank(group)
    pos = (r - root) % p
    if pos == 1 or (p == 1):
        acc = x
    else:
        acc = x + exchange(None, None, (r - 1) % p, recv_like=x, group=group, tag=tag).wait()
    if pos == 0:
        return acc, None
    return None, exchange(acc, (r + 1) % p, None, group=group, tag=tag)


# --- autograd-aware wrappers ---------------------------------------------------------------------------

class _AllGather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return all_gather(x, group)  # [n, ...] -> [p*n, ...]

    @staticmethod
    def backward(ctx, dy):
        return reduce_scatter(dy, ctx.group), None  # [p*n, ...] -> [n, ...]


class _AllToAll(torch.autograd.Function):
    """`all_to_all`, whose adjoint is itself: output chunk j of rank r is input chunk r of rank j."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return all_to_all(x, group)  # [p*n, ...] -> [p*n, ...]

    @staticmethod
    def backward(ctx, dy):
        return all_to_all(dy, ctx.group), None  # [p*n, ...] -> [p*n, ...]


class _ReplicatedSum(torch.autograd.Function):
    """Sum over ranks whose result every rank treats as the same replicated value: backward is identity
    (the objective is the one replicated value, not p copies of it)."""

    @staticmethod
    def forward(ctx, x, group):
        return all_reduce(x.clone(), group)

    @staticmethod
    def backward(ctx, dy):
        return dy, None


class _ReduceGrads(torch.autograd.Function):
    """Identity on replicated tensors whose gradients are summed over ranks (`all_reduce_grads`: in fp32, one
    all-reduce per bucket of their flat concatenation)."""

    @staticmethod
    def forward(ctx, group, *xs):
        ctx.group = group
        return tuple(x.view_as(x) for x in xs)

    @staticmethod
    def backward(ctx, *dys):
        with tagged("embedding"):
            out = all_reduce_grads(dys, ctx.group)  # each [..] summed over ranks in fp32 buckets
        return (None, *out)


def all_gather_autograd(x: torch.Tensor, group=None) -> torch.Tensor:
    """`all_gather` whose backward reduce-scatters the gradient."""
    return x if size(group) == 1 else _AllGather.apply(x, group)


def all_to_all_autograd(x: torch.Tensor, group=None) -> torch.Tensor:
    """`all_to_all` whose backward all-to-alls the gradient back."""
    return x if size(group) == 1 else _AllToAll.apply(x, group)


def replicated_sum(x: torch.Tensor, group=None) -> torch.Tensor:
    """Sum over ranks of a value every rank then holds (a loss); gradient passes through unchanged."""
    return x if size(group) == 1 else _ReplicatedSum.apply(x, group)


def reduce_grads(group, *xs: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Pass replicated parameters through; their gradients are all-reduced over `group` (one call)."""
    return xs if size(group) == 1 else _ReduceGrads.apply(group, *xs)
