"""Parameter gradients summed over ranks in fp32, whatever the model dtype, one bounded bucket at a time.

Library module (no command). The all-reduces and reduce-scatters go through the counted collectives (and are counted
there); the buckets are the cost model's (`paradyse_lab.costmodel.formulas.GRAD_BUCKET_ELEMENTS`).
"""

from __future__ import annotations

import torch

from paradyse_lab.costmodel.formulas import GRAD_BUCKET_ELEMENTS  # the cost model's bucket: one number for both
from paradyse_lab.runtime.comm import collectives as comm

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
buffers (`GRAD_REDUCE_BYTES`, `GRAD_BUCKET_ELEMENTS`)."""


def grad_reduce_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a gradient of `dtype` is reduced in: `GRAD_REDUCE_DTYPE` for 16-bit floats, else `dtype`."""
    return GRAD_REDUCE_DTYPE if dtype.is_floating_point and torch.finfo(dtype).bits < 32 else dtype


def all_reduce_grads(grads, group=None, bucket: int | None = None) -> list[torch.Tensor]:
    """The gradients `grads` (one dtype) summed over ranks: views of one flat [sum numel] buffer of their dtype
    (`all_reduce_flat_grads_`)."""
    if comm.size(group) == 1:
        return list(grads)
    flat_in = [g.reshape(-1) for g in grads]  # each [..] -> [numel]
    flat = torch.cat(flat_in)  # [sum numel], the results
    all_reduce_flat_grads_(flat, group, bucket)
    return [piece.view_as(g) for piece, g in zip(flat.split([g.numel() for g in flat_in]), grads)]  # [numel] -> [..]


def all_reduce_flat_grads_(flat: torch.Tensor, group=None, bucket: int | None = None) -> None:
    """Sum the flat gradient buffer `flat` [n] over ranks in place, one bucket of at most `bucket` elements
    (default `GRAD_BUCKET_ELEMENTS`) at a time, each bucket one all-reduce in `grad_reduce_dtype`: for 16-bit
    gradients a fresh fp32 [c] copy of the bucket, summed, rounded once back and freed before the next bucket;
    fp32 gradients in place (no other copy)."""
    if comm.size(group) == 1:
        return
    step, reduce_dtype = bucket or GRAD_BUCKET_ELEMENTS, grad_reduce_dtype(flat.dtype)
    for start in range(0, flat.numel(), step):
        piece = flat if flat.numel() <= step else flat[start:start + step]  # [c], a view (one bucket: flat itself)
        if reduce_dtype == flat.dtype:
            comm.all_reduce(piece, group)  # [c] summed in place
            continue
        buf = piece.to(reduce_dtype)  # [c] fp32
        comm.all_reduce(buf, group)  # [c] fp32, summed over ranks
        piece.copy_(buf)  # rounded once to the gradients' dtype
        del buf


def reduce_scatter_grads(x: torch.Tensor, group=None, bucket: int | None = None) -> torch.Tensor:
    """`reduce_scatter` of the rank-major gradient `x` [p*n, ..] -> [n, ..] (dim 0 in p rank blocks), in x's dtype,
    summed in `grad_reduce_dtype`: a 16-bit `x` one bucket of [p, c] columns (c = `bucket` // p, default
    `GRAD_BUCKET_ELEMENTS` // p) at a time, each copied to fp32, reduce-scattered [p*c] -> [c] and rounded once into
    the output before the next; fp32 as it is."""
    p = comm.size(group)
    reduce_dtype = grad_reduce_dtype(x.dtype)
    if p == 1 or reduce_dtype == x.dtype:
        return comm.reduce_scatter(x, group)  # [p*n] -> [n] summed
    rows = x.reshape(p, -1)  # [p*n] -> [p, n], rank-major
    n = rows.shape[1]
    out = torch.empty(n, dtype=x.dtype, device=x.device)  # [n]
    cols = max(1, (bucket or GRAD_BUCKET_ELEMENTS) // p)
    for start in range(0, n, cols):
        stop = min(start + cols, n)
        part = rows[:, start:stop].to(reduce_dtype, memory_format=torch.contiguous_format)  # [p, c] fp32
        out[start:stop].copy_(comm.reduce_scatter(part.reshape(-1), group))  # [p*c] -> [c] summed, rounded once
        del part
    return out if x.dim() == 1 else out.view(x.shape[0] // p, *x.shape[1:])  # [n] -> [n/row, ..] as x's rows
