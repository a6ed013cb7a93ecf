"""The long-context techniques of a `StrategyOption` in the cost model: the tiled MLP and activation offload.

`schedules.schedule` applies them to a strategy's `StrategyWork`; docs/tiled_mlp_and_offload.md is the design note.

Tiled MLP (`+tiled`, MLP sub-layers only; ALST's TiledMLP, Bekman et al., "Arctic Long Sequence Training",
arXiv 2506.13996, and DeepSpeed's `TiledMLP`): each rank cuts its s/p sequence positions into chunks of at most
`mlp_tile_positions` (ALST's rule: ceil(n / hidden) chunks, so a chunk's [tokens, ffn] tensors are about the size
of a [hidden, ffn] weight) and runs the MLP one chunk at a time, keeping only the sub-layer input x [t, h]. The
backward recomputes each chunk's norm, first GEMM and activation (not the second GEMM: its output is not needed)
and runs that chunk's backward, accumulating the weight gradients. Per strategy:
- megatron_ts: each chunk runs the whole schedule at chunk size (all-gather, reduce-scatter forward; all-gather
  dy and the recomputed u, reduce-scatter du backward): the same bytes as untiled in more, smaller calls.
- megatron_cz / ulysses_z (ZeRO-3): the weights are gathered once for the forward and once for the backward and
  the gradient reduce-scattered once, as untiled; the chunks only change the activations.
- megatron_cp:a: megatron_ts's chunks inside its tensor group of a ranks; its weight block fetched once per pass
  and its gradient reduced once, as untiled.
- metp: the weight shards travel the ring as untiled (its backward recomputes the first GEMM anyway); each shard
  is applied chunk by chunk, and u = norm(x) is recomputed instead of kept.
Kept: x [t, h]. Time: the first GEMM and the norm and activation traffic once more (metp: the norm), the GEMMs at
the efficiency of the chunk's size, megatron_ts's collectives split into per-chunk calls (more latency).
Transient: one chunk's working set (its recomputed intermediates and their gradients) and the whole input
gradient [t, h], and with 16-bit weights the fp32 sums of the weight gradients over the chunks (as the tiled
loss keeps its head gradient: one rounding to 16 bits at the end, not one per chunk), which ZeRO-3 and metp
reduce over the ranks in fp32 as they are (formulas.GRAD_REDUCE_BYTES) (`tiled_mlp_work`).

Activation offload (`+offload`): what a sub-layer keeps for the backward (under recomputation its input) is
copied to host memory while it runs forward and copied back for its backward. Kept on
the
device: nothing between the two; host: the kept bytes. The device still holds the set while it is copied out
and again from when it is brought back (during the next sub-layer's backward: prefetched) to the end of its own
backward, so the sub-layer's transient grows by two kept sets (its own and its neighbour's prefetched one,
taken to be the same size: exact under recomputation, where every sub-layer keeps its input [t, h]). Time: each
direction moves the kept bytes at what a pinned-memory copy over the host link reaches
(`ClusterSpec.host_link_bytes_per_s`: measured copies, 52.8 of the 64 GB/s of an H100's PCIe Gen5 x16,
docs/hardware.md section 7). The copy out overlaps the compute of the forward, so that phase takes max(its
compute, the copy). The copy back overlaps only where the runtime prefetches it: during the backward of the
sub-layer after it, and only a set no larger than that sub-layer's own (the one extra set the memory counts).
A sub-layer's plan cannot see its neighbour's, so the set that is sure to be prefetched is the input alone (under
recomputation or the tiled MLP: the smallest set any offloaded sub-layer moves), whose copy back overlaps a
backward of about its own length; a larger kept set (offload without recomputation) comes back when the backward
first needs it, all exposed (`offload_exposed_s`). An H100 measurement showed why: a 64K-token
Llama-3.2-1B-shaped plan offloading attention's whole kept set (1,160 MiB) beside METP MLPs (512 MiB) ran
5.29 s per step against 3.95 s predicted with every copy hidden (measurements/h100-2026-11-25). Not
modelled: the copies' share of HBM bandwidth (53 GB/s of 3.35 TB/s, under 2%), and the one set per run of
offloaded sub-layers whose successor does not offload (not prefetched either). The forward's share of a
sub-layer's time is its share of the GEMM FLOPs (`forward_share`). Host memory: a plan's offloaded bytes must
fit the GPU's share of the node's host memory (`ClusterSpec.host_budget_bytes`;
`host_limited` leaves out the offload choices that could overfill it).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from paradyse_lab.costmodel import formulas as F
from paradyse_lab.costmodel.strategy_work import (
    megatron_cp_activation_calls,
    megatron_cp_weight_bytes,
    megatron_cp_weight_calls,
)
from paradyse_lab.costmodel.types import CollectiveCall


def mlp_tile_positions(hidden: int, positions: int) -> int:
    """Sequence positions per chunk of the tiled MLP on a rank holding `positions` of them: ALST's rule,
    ceil(positions / hidden) chunks of equal size (the last one shorter), at least 1 position."""
    chunks = max(1, -(-positions // hidden))
    return max(1, -(-positions // chunks))


def mlp_chunks(positions: int, tile: int) -> tuple[int, ...]:
    """The chunk lengths of `positions` cut `tile` at a time (the last one shorter): what `torch.split` gives."""
    if tile <= 0:
        raise ValueError(f"tile must be a positive number of positions, got {tile}")
    return (tile,) * (positions // tile) + ((positions % tile,) if positions % tile else ())


@dataclass(frozen=True)
class TiledWork:
    """What the tiled MLP changes in a strategy's `StrategyWork`."""

    fwd: list[CollectiveCall]
    bwd: list[CollectiveCall]
    kept: int
    transient: int
    min_dim: int
    extra_gemm_flops: float
    """The recomputed first GEMM (0 for metp, whose backward recomputes it untiled too)."""
    extra_elementwise_bytes: float
    """The recomputed norm (and activation) traffic."""


def _chunked(calls: list[CollectiveCall], chunks: tuple[int, ...], positions: int) -> list[CollectiveCall]:
    """Each activation collective of an untiled schedule as one call per chunk, its buffer scaled to the chunk."""
    out = []
    for c in calls:
        for length in sorted(set(chunks), reverse=True):
            out.append(CollectiveCall(c.op, c.buffer_bytes // positions * length, c.ranks,
                                      c.count * chunks.count(length), c.overlapped))
    return out


def tiled_mlp_work(s, work, strategy_schedule: str, tile: int) -> TiledWork:
    """The tiled MLP of `work` (a `strategy_work.StrategyWork` of the MLP `Sublayer` s) under the schedule key of its
    strategy, `tile` positions per chunk (module docstring). A schedule without a tiled-MLP cost is refused, never
    priced as another strategy's."""
    if strategy_schedule not in TILED_SCHEDULES:
        raise ValueError(f"the tiled MLP has no cost for the {strategy_schedule!r} schedule; "
                         f"priced: {', '.join(TILED_SCHEDULES)}")
    positions = s.seq_len // s.p
    chunks = mlp_chunks(positions, min(tile, positions))
    batch = s.T // s.seq_len
    tc = batch * chunks[0]  # local tokens of the largest chunk
    return TILED_SCHEDULES[strategy_schedule](s, work, chunks, positions, tc)


def _acc(s) -> int:
    """Bytes per weight of the fp32 gradient sums over the chunks (none when the weights are fp32 already)."""
    return 4 if s.e < 4 else 0


def _norm_and_act(s) -> int:
    """Norm read + write and the activation's reads + write of this rank's tokens."""
    return s.e * s.t * (2 * s.h + (s.f_act + 1) * s.f)


def _refwd_flops(s) -> float:
    """The recomputed first GEMM, this rank's share."""
    return 2.0 * s.T * s.h * s.width / s.p


def _tiled_megatron_ts(s, work, chunks, positions, tc) -> TiledWork:
    """Tensor parallelism: each chunk's activations gathered and reduce-scattered, the same bytes in more calls."""
    e, h, t, width = s.e, s.h, s.t, s.width
    gathered = s.p * tc
    transient = e * gathered * (3 * h + 2 * width // s.p + 2 * s.f // s.p) + e * t * h + _acc(s) * -(-s.W // s.p)
    return TiledWork(_chunked(work.fwd, chunks, positions), _chunked(work.bwd, chunks, positions), t * h * e,
                     transient, min(gathered, h, s.f // s.p), _refwd_flops(s), _norm_and_act(s))


def _tiled_metp(s, work, chunks, positions, tc) -> TiledWork:
    """METP: the weight shards travel the ring as untiled; each chunk's activations are the only change."""
    e, h, t, width = s.e, s.h, s.t, s.width
    wide = width // s.p
    shards = work.transient - e * (4 * t * wide + 2 * t * h)  # the weight and gradient double buffers
    transient = shards + e * (4 * tc * wide + 3 * t * h) + _acc(s) * -(-s.W // s.p)
    return TiledWork(list(work.fwd), list(work.bwd), t * h * e, transient, min(tc, s.f // s.p), 0.0,
                     2.0 * e * t * h)


def _tiled_zero3(s, work, chunks, positions, tc) -> TiledWork:
    """ZeRO-3 weights (megatron_cz, ulysses_z): gathered once per pass and each gradient reduce-scattered once from
    its sum over the chunks (no packed copy), as untiled."""
    e, h, t, width = s.e, s.h, s.t, s.width
    sums = max(e, F.GRAD_REDUCE_BYTES)  # the gradients summed over the chunks, fp32 for 16-bit weights
    cast = e if s.p == 1 and e < F.GRAD_REDUCE_BYTES else 0  # one rank: the sums rounded to the weights' dtype
    weights = 2 * s.W * e + s.W * (sums + cast)  # ZeRO-3: the gathered weights, the prefetched ones, the sums
    transient = weights + e * tc * (2 * h + 2 * width + 2 * s.f) + e * t * h
    return TiledWork(list(work.fwd), list(work.bwd), t * h * e, transient, min(tc, h), _refwd_flops(s),
                     _norm_and_act(s))


def _tiled_megatron_cp(s, work, chunks, positions, tc) -> TiledWork:
    """Tensor x context parallel: megatron_ts's tiling inside the tensor group of a ranks (each chunk's
    activations gathered and reduce-scattered); the weight block fetched once per pass and its gradient reduced
    once, as untiled."""
    a = s.head_degree
    e, h, t, width = s.e, s.h, s.t, s.width
    fetch, grads = megatron_cp_weight_calls(s, a)
    act_fwd, act_bwd = megatron_cp_activation_calls(s, a)
    gathered = a * tc
    transient = (e * gathered * (3 * h + 2 * width // a + 2 * s.f // a) + e * t * h + _acc(s) * -(-s.W // a)
                 + megatron_cp_weight_bytes(s, a))
    return TiledWork([*fetch, *_chunked(act_fwd, chunks, positions)],
                     [*fetch, *_chunked(act_bwd, chunks, positions), *grads], t * h * e, transient,
                     min(gathered, h, s.f // a), _refwd_flops(s), _norm_and_act(s))


TILED_SCHEDULES = {"megatron_ts": _tiled_megatron_ts, "metp": _tiled_metp, "megatron_cz": _tiled_zero3,
                   "ulysses_z": _tiled_zero3, "ulysses_ring": _tiled_zero3, "megatron_cp": _tiled_megatron_cp,
                   "ulysses_uneven": _tiled_zero3}
"""The tiled MLP's work per schedule key (the catalog's `Strategy.schedule`): a strategy that offers `+tiled` adds
its function here beside its schedule; one without is refused when a `+tiled` option of it is priced."""


def forward_share(recomputes: bool) -> float:
    """The forward's share of a sub-layer's time, taken as its share of the GEMM FLOPs: 1 / (1 + 2) plain, 1 / (1 +
    2 + 1) when the backward repeats (part of) the forward (formulas.GEMM_BWD_OVER_FWD)."""
    return 1.0 / (1.0 + F.GEMM_BWD_OVER_FWD + (1.0 if recomputes else 0.0))


def offload_exposed_s(time_s: float, copy_s: float, share: float, prefetched: bool = True) -> float:
    """Seconds offload adds to a sub-layer of `time_s` whose kept set takes `copy_s` over the host link each way:
    the copy out overlaps the forward (`share` of the time), each phase lasting the longer of the two; the copy
    back overlaps a backward of about the same length when `prefetched` (brought back during the backward of the
    sub-layer after it), and is all exposed when not (brought back when the backward first needs it; module
    docstring)."""
    forward_s = time_s * share
    back_s = max(0.0, copy_s - (time_s - forward_s)) if prefetched else copy_s
    return max(0.0, copy_s - forward_s) + back_s


def with_offload(kept: int, transient: int) -> tuple[int, int, int]:
    """(kept on the device, transient, host bytes) of a sub-layer keeping `kept` and working in `transient` bytes,
    with offload (module docstring)."""
    return 0, transient + 2 * kept, kept


def replace_work(work, tiled: TiledWork):
    """`work` (a `StrategyWork`) with the tiled MLP's collectives, bytes and GEMM shape."""
    return replace(work, fwd=tiled.fwd, bwd=tiled.bwd, kept=tiled.kept, transient=tiled.transient,
                   min_dim=tiled.min_dim)
