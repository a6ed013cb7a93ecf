"""The process group's queries and the collectives of the runtime, with the process group as an argument.

Library module (no command). Works on gloo (CPU) and NCCL (GPU); a group of size 1, or no initialised
process group at all, short-circuits every call (nothing is sent, nothing is counted). Every collective
records the bytes this rank sends and the call itself (`count_bytes`, `trace_calls`,
`tagged`). Point-to-point exchanges, the fp32 gradient reductions and the autograd-aware collectives are their
own modules.

A `paradyse_lab.runtime.comm.fake_group.FakeGroup` in place of a process group makes every call return a correctly
shaped
tensor without communicating (and still count its bytes): one process then plays one rank of a p-rank
world (the rank-local profiler).

Gloo note: `all_to_all_single` is used for all-to-all.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from paradyse_lab.runtime.comm import record as comm_record

_AG = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_RS = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


# --- the group ------------------------------------------------------------------------------------------

def is_fake_group(group) -> bool:
    """A `paradyse_lab.runtime.comm.fake_group.FakeGroup`: shapes exact, nothing sent."""
    return bool(getattr(group, "is_fake", False))


def size(group=None) -> int:
    """Ranks in `group` (1 when torch.distributed is not initialised)."""
    if is_fake_group(group):
        return group.size
    return dist.get_world_size(group) if dist.is_available() and dist.is_initialized() else 1


def rank(group=None) -> int:
    """This rank's index in `group` (0 when torch.distributed is not initialised)."""
    if is_fake_group(group):
        return group.rank
    return dist.get_rank(group) if dist.is_available() and dist.is_initialized() else 0


def global_rank(group, group_rank: int) -> int:
    """The global rank of `group_rank` in `group` (point-to-point calls take global ranks)."""
    if group is None or is_fake_group(group) or group is dist.group.WORLD:
        return group_rank
    return dist.get_global_rank(group, group_rank)


def is_nccl(group=None, tensor: torch.Tensor | None = None) -> bool:
    """Whether calls on `group` (for `tensor`) run on NCCL: the backend is 'nccl', or a per-device backend
    string such as 'cpu:gloo,cuda:nccl' (what `init_process_group()` without a backend gives, torch.distributed
    docs) maps CUDA to nccl and `tensor` is on CUDA (or is not given)."""
    if is_fake_group(group) or not (dist.is_available() and dist.is_initialized()):
        return False
    name = str(dist.get_backend(group))
    if ":" not in name:
        return name == "nccl"
    by_device = dict(part.split(":", 1) for part in name.split(",") if ":" in part)
    return by_device.get("cuda") == "nccl" and (tensor is None or tensor.device.type == "cuda")


# --- collectives (dim 0 is the one gathered / scattered) ----------------------------------------------

def _control_device(group) -> torch.device | None:
    """Where a control-plane broadcast's buffer lives: the current CUDA device under NCCL (which sends only CUDA
    tensors), else the CPU (None)."""
    return torch.device("cuda", torch.cuda.current_device()) if is_nccl(group) else None


def broadcast_object(obj, src: int = 0, group=None):
    """Rank `src`'s picklable `obj` on every rank of `group` (others pass anything, e.g. None)."""
    if size(group) == 1 or is_fake_group(group):
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=global_rank(group, src), group=group,  # pickled bytes
                               device=_control_device(group))
    return box[0]


def broadcast_flag(flag: bool, src: int = 0, group=None) -> bool:
    """Rank `src`'s `flag` on every rank of `group` (every rank passes a bool): one broadcast of a one-byte
    tensor, where `broadcast_object` takes two (the pickle's length, then its bytes) and a pickling."""
    if size(group) == 1 or is_fake_group(group):
        return bool(flag)
    box = torch.tensor([bool(flag)], dtype=torch.uint8, device=_control_device(group))  # [1]
    dist.broadcast(box, src=global_rank(group, src), group=group)  # [1] -> [1], src's
    return bool(box.item())


def _leading(shape, dim: int) -> None:
    """A collective along `dim` > 0 needs every dimension before it of size 1 (then its buffer is the dim-0
    one's)."""
    if any(n != 1 for n in shape[:dim]):
        raise ValueError(f"collective along dim {dim} of a {tuple(shape)} tensor: the dimensions before it must be 1")


def all_gather(x: torch.Tensor, group=None, dim: int = 0) -> torch.Tensor:
    """Concatenate every rank's `x` along dim 0: [n, ...] -> [p*n, ...] (rank-major); along `dim` when every
    dimension before it is 1 (the same bytes: [1, n, ...] -> [1, p*n, ...], no transpose needed)."""
    p = size(group)
    if p == 1:
        return x
    _leading(x.shape, dim)
    x = x.contiguous()
    out = torch.empty((*x.shape[:dim], p * x.shape[dim], *x.shape[dim + 1:]), dtype=x.dtype, device=x.device)
    comm_record.record_call("all_gather", p, x)
    if is_fake_group(group):  # fake: every rank "sent" the local values; copied in place, no full-size temporary
        out.view(p, *x.shape).copy_(x.unsqueeze(0).expand(p, *x.shape))  # [n, ...] -> [p, n, ...] = [p*n, ...]
    else:
        _AG(out.view(p, *x.shape[1:]) if dim else out, x, group=group)  # [n, ...] -> [p*n, ...]
    comm_record.record_sent_bytes("all_gather", comm_record.tensor_bytes(out) * (p - 1) // p)
    return out


def reduce_scatter(x: torch.Tensor, group=None, dim: int = 0) -> torch.Tensor:
    """Sum over ranks and keep this rank's dim-0 chunk: [p*n, ...] -> [n, ...]; along `dim` when every
    dimension before it is 1 ([1, p*n, ...] -> [1, n, ...])."""
    p = size(group)
    if p == 1:
        return x
    _leading(x.shape, dim)
    x = x.contiguous()
    out = torch.empty((*x.shape[:dim], x.shape[dim] // p, *x.shape[dim + 1:]), dtype=x.dtype, device=x.device)
    comm_record.record_call("reduce_scatter", p, x)
    if is_fake_group(group):
        out.copy_(x.view(p, *out.shape)[rank(group)])  # fake: own chunk, unsummed
    else:
        _RS(out, x.view(p, *out.shape[1:]) if dim else x, group=group)  # [p*n, ...] -> [n, ...]
    comm_record.record_sent_bytes("reduce_scatter", comm_record.tensor_bytes(x) * (p - 1) // p)
    return out


def all_to_all(x: torch.Tensor, group=None) -> torch.Tensor:
    """Dim-0 chunk j goes to rank j; output chunk j comes from rank j: [p*n, ...] -> [p*n, ...]."""
    p = size(group)
    if p == 1:
        return x
    x = x.contiguous()
    out = torch.empty_like(x)
    comm_record.record_call("all_to_all", p, x)
    if is_fake_group(group):
        out.copy_(x)  # fake: shapes exact, values not exchanged
    else:
        dist.all_to_all_single(out, x, group=group)  # [p(dest)*n, ...] -> [p(src)*n, ...]
    comm_record.record_sent_bytes("all_to_all", comm_record.tensor_bytes(x) * (p - 1) // p)
    return out


def all_to_all_uneven(parts: list[torch.Tensor], out_numels: list[int], group=None) -> torch.Tensor:
    """An all-to-all with unequal parts (one `all_to_all_single` with split sizes): `parts[j]` goes to rank j;
    returns the flat [sum(out_numels)] received, rank j's out_numels[j] elements after rank j - 1's. It records
    the bytes of this rank's busier direction, what it sends or what it receives (equal in an even all-to-all),
    so that the busiest member's count is the collective's price (`CollectiveCall.sent_bytes` of the even
    all-to-all at the largest part)."""
    p = size(group)
    if p == 1:
        return parts[0].reshape(-1)
    me = rank(group)
    x = torch.cat([part.reshape(-1) for part in parts])  # [sum of parts] in destination order
    out = torch.empty(sum(out_numels), dtype=x.dtype, device=x.device)
    comm_record.record_call("all_to_all", p, torch.empty((p,), dtype=x.dtype, device="meta"))  # shapes differ
    if is_fake_group(group):
        out.zero_()  # fake: shapes exact, values not exchanged
    else:
        dist.all_to_all_single(out, x, output_split_sizes=list(out_numels),  # [sum(in)] -> [sum(out)]
                               input_split_sizes=[part.numel() for part in parts], group=group)
    sent = sum(part.numel() for j, part in enumerate(parts) if j != me)
    received = sum(n for j, n in enumerate(out_numels) if j != me)
    comm_record.record_sent_bytes("all_to_all", max(sent, received) * x.element_size())
    return out


def all_reduce(x: torch.Tensor, group=None, op: str = "sum") -> torch.Tensor:
    """Sum `x` over ranks (`op` 'max': the elementwise maximum), in place; returns `x`."""
    p = size(group)
    if p == 1:
        return x
    comm_record.record_call("all_reduce", p, x)
    if not is_fake_group(group):
        dist.all_reduce(x, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM, group=group)  # [...] -> [...]
    comm_record.record_sent_bytes("all_reduce", 2 * comm_record.tensor_bytes(x) * (p - 1) // p)
    return x
