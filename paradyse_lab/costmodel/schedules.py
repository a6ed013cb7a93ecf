"""The schedule of a strategy option: the compute every strategy shares, plus `+recompute`, `+tiled` and
`+offload`, per rank: FLOPs, communication, kept and transient bytes.

A `Schedule` is the strategy's algorithm written as counts; `analytic` turns it into seconds with a
`ClusterSpec`. The runtime (a module per strategy) implements the same algorithms, and its communication
byte counts are tested against `Schedule.collectives`. Each strategy's own work (its collectives, kept and
transient bytes, and the algorithms they count, with the notation) is in
`SCHEDULES`; `schedule` adds what every strategy shares (1/p of every FLOP) and the options:

- `+recompute`: keep only the sub-layer input [t, h]; the backward first repeats the forward (its compute
  and its communication, except ZeRO-3 weight gathers, which the backward gather serves), so the normal
  kept set becomes transient.
- `+tiled` (MLP sub-layers) and `+offload`: `techniques`; `+headchunk` (attention sub-layers): `head_chunks`.
- The replicated norm / output-bias gradients are all-reduced over the ranks in fp32 whatever the model dtype
  (`formulas.GRAD_REDUCE_BYTES`, `GRAD_REDUCE_DTYPE`), 4 bytes per element; with a
  16-bit model the transient bytes hold the fp32 bucket the reduction works in.
"""

from __future__ import annotations

from dataclasses import dataclass

from paradyse_lab.core.model_spec import ModelSpec
from paradyse_lab.core.strategies import StrategyOption, get_strategy
from paradyse_lab.costmodel import formulas as F
from paradyse_lab.costmodel.head_chunks import head_chunked_work
from paradyse_lab.costmodel.strategy_work import SCHEDULES, Sublayer
from paradyse_lab.costmodel.techniques import mlp_tile_positions, replace_work, tiled_mlp_work, with_offload
from paradyse_lab.costmodel.types import CollectiveCall
from paradyse_lab.workload.zigzag_balance import zigzag_imbalance


@dataclass(frozen=True)
class Schedule:
    """Per-rank work of one sub-layer for one training step (forward + backward)."""

    gemm_flops: float
    """GEMM FLOPs this rank runs."""
    gemm_min_dim: int
    """Smallest dimension among this rank's GEMMs (sets their efficiency)."""
    attention_calls: tuple[tuple[float, int], ...]
    """(FlashAttention FLOPs this rank runs, keys per kernel call) per sequence or packed document: s, or
    s/p for ring blocks (a packed document's: min(n, S/p)); empty for an MLP."""
    attention_kernel_causal: bool
    """Whether the kernel calls are causal (ring blocks are charged as full blocks)."""
    elementwise_bytes: float
    """HBM traffic of norms, residuals and activations."""
    collectives: tuple[CollectiveCall, ...]
    """Communication; `overlapped` calls hide behind compute."""
    ring_steps: int
    """Exchanges of the overlapped ring over the whole step (0 when nothing overlaps)."""
    ring_hides_all_compute: bool
    """True when the ring overlaps all compute (METP), False when only attention (ring attention)."""
    kept_bytes: int
    """Activations kept for backward."""
    transient_bytes: int
    """Working memory while the sub-layer runs."""
    host_bytes: int = 0
    """Activations moved to host memory between the forward and the backward (`+offload`)."""
    host_prefetched: bool = False
    """Whether the runtime brings the offloaded set back during the backward of the sub-layer after it (a
    prefetch: only a set no larger than that one's, so only one that is the sub-layer's input alone is sure to
    be, `offload_exposed_s`)."""

    @property
    def attention_flops(self) -> float:
        """FlashAttention FLOPs this rank runs over all its calls."""
        return sum(flops for flops, _ in self.attention_calls)


def schedule(model: ModelSpec, kind: str, option: StrategyOption, seq_len: int, batch: int, p: int,
             segments: tuple[int, ...] | None = None, mlp_tile: int | None = None) -> Schedule:
    """The schedule of `option` on one 'attention' or 'mlp' sub-layer at (seq_len, batch) on p ranks.

    `segments`: the documents of a packed step (batch 1, summing to seq_len, its padding one more segment).
    Attention stays inside each document (a block-diagonal mask, as varlen FlashAttention takes it through
    cumulative sequence offsets), so its FLOPs are the sum over the documents and its kernels run one per
    document. Strategies that split heads over the whole pack (megatron_ts, ulysses_z) share those FLOPs
    evenly. Ring strategies (megatron_cz, metp) cut every document (with its padding) into 2p chunks, as the
    runtime does: a rank's queries are its two chunks of each document, a document's keys
    in one ring block n/p, and the ring waits for the rank with the most (query, key) pairs, so each rank is
    charged the busiest rank's share: the even share times `zigzag_imbalance` (1.0 for documents without
    padding). Everything else (GEMMs, element-wise traffic, communication,
    kept and
    transient bytes, all linear in the tokens) counts the seq_len tokens of the pack: FlashAttention keeps no
    s^2 tensor, so a pack holds what one sequence of its total length holds. `segments=(seq_len,)` is exactly
    the unpacked schedule. `mlp_tile`: positions per chunk of a tiled MLP (`+tiled`; default ALST's rule,
    `techniques.mlp_tile_positions`).
    """
    if segments is not None and (batch != 1 or sum(segments) != seq_len):
        raise ValueError(f"packed segments {segments} must sum to seq_len {seq_len} at batch 1")
    strategy = get_strategy(option.strategy)
    key = strategy.schedule
    if key not in SCHEDULES:
        raise ValueError(f"no schedule for strategy {option.strategy!r}")
    s = Sublayer.of(model, kind, seq_len, batch, p, strategy.head_degree)
    work = SCHEDULES[key](s)
    if option.headchunk and s.attn:
        work = head_chunked_work(s, work, key)
    tiled = None
    if option.tiled and not s.attn:
        tile = mlp_tile if mlp_tile is not None else mlp_tile_positions(model.hidden, seq_len // p)
        tiled = tiled_mlp_work(s, work, key, tile)
        work = replace_work(work, tiled)

    # --- compute (all strategies split the work evenly: 1/p of every FLOP) -------------------------
    lin_fwd = F.linear_flops_forward(model, kind, s.T) / p
    elem_fwd = F.elementwise_bytes_forward(model, kind, s.T) / p
    gemm = lin_fwd * (1 + F.GEMM_BWD_OVER_FWD) + work.extra_gemm_flops
    elem = elem_fwd * 3
    if tiled is not None:
        gemm += tiled.extra_gemm_flops
        elem += tiled.extra_elementwise_bytes
    calls = ()
    if s.attn:  # per sequence length, or per document of a pack: (FLOPs, keys per kernel call)
        docs, per = ((seq_len,), batch) if segments is None else (segments, 1)
        passes = 1 + F.FLASH_BWD_OVER_FWD + (1 if option.recompute else 0)  # forward, backward, recomputed forward
        share = work.attention_share or 1.0 / p  # of every document's FLOPs, per rank (uneven heads: the busiest's)
        ring = work.ring_ranks or p  # ranks in the ring (a two-dimensional strategy's b)
        if segments is not None and len(segments) > 1 and work.ring_blocks and ring > 1:  # per-document zig-zag
            share *= zigzag_imbalance(tuple(segments), ring, model.causal)

        def keys(n: int) -> int:  # per kernel call: a ring block holds 2 of the 2*ring chunks of every document
            return max(n // ring, 1) if work.ring_blocks else n

        calls = tuple((F.attention_core_flops_forward(model, n, per) * share * passes, keys(n)) for n in docs)

    fwd, bwd = list(work.fwd), list(work.bwd)
    kept, transient, ring_steps = work.kept, work.transient, work.ring_steps
    if p > 1:  # replicated norm / output-bias gradients, summed in fp32 (`all_reduce_grads`)
        bwd += F.grad_all_reduces(F.replicated_params(model), p)
        transient += F.grad_bucket_copy_bytes(model, F.replicated_params(model))  # its fp32 bucket

    if option.recompute and tiled is None:  # a tiled MLP recomputes its own way
        gemm += lin_fwd
        elem += elem_fwd
        refwd = [c for c in fwd if not (work.gathers_weights and c.op == "all_gather")
                 and not any(c is w for w in work.weight_calls)]
        bwd = refwd + bwd
        if ring_steps:
            ring_steps += (work.ring_ranks or p) - 1
        transient += kept
        kept = s.t * s.h * s.e
    host = 0
    if option.offload:
        kept, transient, host = with_offload(kept, transient)
    input_only = host <= s.t * s.h * s.e  # the smallest set any offloaded sub-layer moves: its input [t, h]

    return Schedule(
        gemm_flops=gemm, gemm_min_dim=max(work.min_dim, 1), attention_calls=calls,
        attention_kernel_causal=model.causal if work.kernel_causal is None else work.kernel_causal,
        elementwise_bytes=elem, collectives=tuple(fwd + bwd), ring_steps=ring_steps,
        ring_hides_all_compute=work.ring_hides_all_compute, kept_bytes=int(kept), transient_bytes=int(transient),
        host_bytes=int(host), host_prefetched=bool(host) and input_only,
    )
