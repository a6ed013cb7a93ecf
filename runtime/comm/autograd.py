"""Autograd-aware collectives of the runtime: each forward collective with the backward collective that is
its adjoint.

Library module (no command). The calls go through the counted collectives and gradient reductions (and are
counted
there); a group of size 1 passes the tensors through without building an autograd node.
"""

from __future__ import annotations

import torch

from paradyse_lab.runtime.comm import collectives as comm
from paradyse_lab.runtime.comm import grad_reduce
from paradyse_lab.runtime.comm import record as comm_record


class _AllGather(torch.autograd.Function):
    """`all_gather`, whose adjoint is `reduce_scatter`."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return comm.all_gather(x, group)  # [n, ...] -> [p*n, ...]

    @staticmethod
    def backward(ctx, dy):
        return comm.reduce_scatter(dy, ctx.group), None  # [p*n, ...] -> [n, ...]


class _AllToAll(torch.autograd.Function):
    """`all_to_all`, whose adjoint is itself: output chunk j of rank r is input chunk r of rank j."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return comm.all_to_all(x, group)  # [p*n, ...] -> [p*n, ...]

    @staticmethod
    def backward(ctx, dy):
        return comm.all_to_all(dy, ctx.group), None  # [p*n, ...] -> [p*n, ...]


class _ReplicatedSum(torch.autograd.Function):
    """Sum over ranks whose result every rank treats as the same replicated value: backward is identity
    (the objective is the one replicated value, not p copies of it)."""

    @staticmethod
    def forward(ctx, x, group):
        return comm.all_reduce(x.clone(), group)  # [...] summed over ranks

    @staticmethod
    def backward(ctx, dy):
        return dy, None


class _ReplicatedMean(torch.autograd.Function):
    """Sum over ranks of a value divided by the sum over ranks of a count, both summed by one all-reduce of their
    [2] stack: the value's gradient is the incoming one over the summed count (as `_ReplicatedSum` then a
    division give)."""

    @staticmethod
    def forward(ctx, x, count, group):
        both = comm.all_reduce(torch.stack([x.detach(), count.to(x.dtype)]), group)  # [], [] -> [2], summed over ranks
        denom = both[1].clamp(min=1)
        ctx.save_for_backward(denom)
        return both[0] / denom

    @staticmethod
    def backward(ctx, dy):
        (denom,) = ctx.saved_tensors
        return dy / denom, None, None


class _ReduceGrads(torch.autograd.Function):
    """Identity on replicated tensors whose gradients are summed over ranks (`grad_reduce.all_reduce_grads`: in
    fp32, one all-reduce per bucket of their flat concatenation)."""

    @staticmethod
    def forward(ctx, group, *xs):
        ctx.group = group
        return tuple(x.view_as(x) for x in xs)  # each [..] -> [..], a view

    @staticmethod
    def backward(ctx, *dys):
        with comm_record.tagged("embedding"):
            out = grad_reduce.all_reduce_grads(dys, ctx.group)  # each [..] summed over ranks in fp32 buckets
        return (None, *out)


def all_gather_autograd(x: torch.Tensor, group=None) -> torch.Tensor:
    """`all_gather` whose backward reduce-scatters the gradient."""
    return x if comm.size(group) == 1 else _AllGather.apply(x, group)


def all_to_all_autograd(x: torch.Tensor, group=None) -> torch.Tensor:
    """`all_to_all` whose backward all-to-alls the gradient back."""
    return x if comm.size(group) == 1 else _AllToAll.apply(x, group)


def replicated_sum(x: torch.Tensor, group=None) -> torch.Tensor:
    """Sum over ranks of a value every rank then holds (a loss); gradient passes through unchanged."""
    return x if comm.size(group) == 1 else _ReplicatedSum.apply(x, group)


def replicated_mean(x: torch.Tensor, count: torch.Tensor, group=None) -> torch.Tensor:
    """sum over ranks of the [] `x` / max(1, sum over ranks of the [] `count`) (a loss over every rank's targets),
    every rank holding it; the gradient passes to `x` over the summed count. The count is summed in fp32: with an
    fp32 `x`, in one all-reduce of both; with another dtype, `x` keeps its dtype and takes an all-reduce of its
    own."""
    if comm.size(group) == 1 or x.dtype != torch.float32:
        count = comm.all_reduce(count.to(torch.float32), group)  # [] summed
        return replicated_sum(x, group) / count.clamp(min=1)
    return _ReplicatedMean.apply(x, count, group)


def reduce_grads(group, *xs: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Pass replicated parameters through; their gradients are all-reduced over `group` (one call)."""
    return xs if comm.size(group) == 1 else _ReduceGrads.apply(group, *xs)
