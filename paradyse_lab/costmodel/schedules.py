"""What each strategy does to one sub-layer, per rank: FLOPs, communication, kept and transient bytes.

A `Schedule` is the strategy's algorithm written as counts; `analytic.py` turns it into seconds with a
`ClusterSpec`. The runtime (runtime/<strategy>.py) implements the same algorithms, and its communication
byte counts are tested against `Schedule.collectives`. Notation: T = b*s tokens, t = T/p local tokens,
h hidden, kv = kv_heads * head_dim, f ffn size, e bytes per element, W the sub-layer's sharded parameters.

- megatron_ts (Megatron TP + SP, Korthikanti et al. 2023 section 4.2.2): all-gather the sequence-sharded
  norm output [t, h] -> [T, h], column-parallel GEMM on the rank's heads / f-columns, row-parallel GEMM,
  reduce-scatter [T, h] -> [t, h]. Backward: all-gather the output gradient, all-gather the input again
  (it is kept sharded), reduce-scatter the input gradient.
- ulysses_z (DeepSpeed-Ulysses, Jacobs et al. 2023) and megatron_cz (ring context parallel): the linear
  weights of a sub-layer are all-gathered from the 1/p shards before use, again in backward, and the full
  gradient is reduce-scattered (ZeRO-3). Ulysses turns Q, K, V [t, h+2kv] into head shards
  [T, (h+2kv)/p] by all-to-all and back; the ring passes K, V blocks [t, 2kv] around p - 1 steps (K, V
  and their gradients in backward, the gradients in fp32: `ACC_BYTES`), overlapped with the block attention.
- Kept activations (`formulas.kept_elements_*`: Korthikanti et al. 2023 with FlashAttention, dropout 0;
  every tensor sequence-sharded or head-sharded, so 1/p of it per rank): norm input and output, Q, K, V,
  the attention output and FlashAttention's log-sum-exp; the MLP's norm input and output and its f-wide
  activation input and output. One exception, ulysses_z attention keeps one [t, h] more: the attention
  output in head layout [T, h/p] (the kernel's, for its backward) and again in sequence layout [t, h]
  after the all-to-all back (the output projection's input, for the weight gradient). Deriving either
  from the other is an all-to-all, so DeepSpeed-Ulysses, and runtime/ulysses_z.py, keep both. (In
  megatron_ts both are one tensor up to a local permutation, kept once.) The runtime's kept tensors are
  measured against these counts (tests/runtime/test_profiler.py).
- metp (Liang et al., FITEE 2025): every rank keeps its t tokens; the weight shard of head group g (or of
  f-column group g) travels around a ring, double-buffered, and each rank applies it to its tokens; inside
  each head group a K/V ring runs (p - 1 steps of [t, 2kv/p]). Backward passes the shards around again and
  ring-reduces the gradient partial of each shard to its owner. We model METP as keeping only the norm
  inputs/outputs and the attention output, and recomputing the per-shard intermediates f(XB_g) when the
  shard comes round in backward: that is how it avoids "duplicated tensors" (FITEE abstract: at least
  41.7% less memory than TP with FlashAttention) and why it is the slowest.
- `+recompute`: keep only the sub-layer input [t, h]; the backward first repeats the forward (its compute
  and its communication, except ZeRO-3 weight gathers, which the backward gather serves), so the normal
  kept set becomes transient.
"""

from __future__ import annotations

from dataclasses import dataclass

from paradyse_lab.costmodel import formulas as F
from paradyse_lab.costmodel.types import CollectiveCall
from paradyse_lab.model_spec import ModelSpec
from paradyse_lab.strategies import StrategyOption


@dataclass(frozen=True)
class Schedule:
    """Per-rank work of one sub-layer for one training step (forward + backward)."""

    gemm_flops: float
    """GEMM FLOPs this rank runs."""
    gemm_min_dim: int
    """Smallest dimension among this rank's GEMMs (sets their efficiency)."""
    attention_flops: float
    """FlashAttention FLOPs this rank runs (0 for an MLP)."""
    attention_kernel_len: int
    """Keys per attention kernel call: s, or s/p for ring blocks."""
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


ACC_BYTES = 4
"""Bytes per element of ring attention's travelling dK/dV accumulators: fp32 whatever the model dtype.
Each rank adds its block's dK/dV into an accumulator that crosses p - 1 ranks; rounding it to bf16 at every
hop loses low-order bits p - 1 times. ring-flash-attention (github.com/zhuzilin/ring-flash-attention,
zigzag_ring_flash_attn.py: dk, dv converted `.to(torch.float32)` and passed around the ring as such) and
runtime/ring_attention.py accumulate and send them in fp32, so the backward's K/V messages are priced at
the model dtype (e) and its dK/dV messages and buffers at ACC_BYTES (identical in fp32)."""


def _coll(op, nbytes, p, count=1, overlapped=False):
    return CollectiveCall(op, int(nbytes), p, count, overlapped)


def schedule(model: ModelSpec, kind: str, option: StrategyOption, seq_len: int, batch: int, p: int) -> Schedule:
    """The schedule of `option` on one 'attention' or 'mlp' sub-layer at (seq_len, batch) on p ranks."""
    e, h, kv, f = model.dtype_bytes, model.hidden, model.kv_hidden, model.ffn_hidden
    T = batch * seq_len
    t = T // p
    W = F.sharded_params(model, kind)
    name = option.strategy
    attn = kind == "attention"
    qkv = h + 2 * kv
    f_act = 2 if model.ffn_kind == "swiglu" else 1  # f-wide outputs of the first MLP GEMM(s)

    # --- compute (all strategies split the work evenly: 1/p of every FLOP) -------------------------
    lin_fwd = F.linear_flops_forward(model, kind, T) / p
    att_fwd = F.attention_core_flops_forward(model, seq_len, batch) / p if attn else 0.0
    elem_fwd = F.elementwise_bytes_forward(model, kind, T) / p
    gemm = lin_fwd * (1 + F.GEMM_BWD_OVER_FWD)
    att = att_fwd * (1 + F.FLASH_BWD_OVER_FWD)
    elem = elem_fwd * 3
    if name == "metp":  # backward recomputes the per-shard first GEMM (QKV / fc1) when the shard returns
        gemm += 2.0 * T * h * (qkv if attn else f_act * f) / p

    # --- kept activations, and the forward / backward collectives ----------------------------------
    kept_elems = F.kept_elements_attention(model, t) if attn else F.kept_elements_mlp(model, t)
    kept = kept_elems * e + (F.lse_bytes(model, t) if attn else 0)
    fwd: list[CollectiveCall] = []
    bwd: list[CollectiveCall] = []
    ring_steps = 0
    hides_all = False
    kernel_len, kernel_causal = seq_len, model.causal
    ring_p2p = p > 1

    if name == "megatron_ts":
        act = T * h * e  # [T, h]
        fwd += [_coll("all_gather", act, p), _coll("reduce_scatter", act, p)]
        bwd += [_coll("all_gather", act, p, count=2), _coll("reduce_scatter", act, p)]
        min_dim = min(T, h, (h if attn else f) // p)
        wide = (qkv if attn else f_act * f) // p
        transient = e * (2 * T * h + T * wide + (0 if attn else T * f // p))
    elif name in ("megatron_cz", "ulysses_z"):
        w = W * e
        fwd += [_coll("all_gather", w, p)]
        bwd += [_coll("all_gather", w, p), _coll("reduce_scatter", w, p)]
        min_dim = min(t, h)
        weights = 3 * w  # current + prefetched gathered weights, and the full gradient before its RS
        if not attn:
            acts = e * t * (2 * f_act * f + h)  # grads of the f-wide tensors and of the input
        elif name == "ulysses_z":
            kept += t * h * e  # the attention output in both layouts (module docstring)
            fwd += [_coll("all_to_all", t * qkv * e, p), _coll("all_to_all", t * h * e, p)]
            bwd += [_coll("all_to_all", t * h * e, p), _coll("all_to_all", t * qkv * e, p)]
            acts = e * (2 * t * qkv + 2 * t * h)  # dQ/dK/dV before and after their all-to-all, dO, dX
        else:
            kernel_len, kernel_causal = max(seq_len // p, 1), False
            if ring_p2p:
                fwd += [_coll("p2p", t * 2 * kv * e, p, count=p - 1, overlapped=True)]
                bwd += [_coll("p2p", t * 2 * kv * (e + ACC_BYTES), p, count=p - 1, overlapped=True)]  # K/V, fp32 dK/dV
                ring_steps = 2 * (p - 1)
            # K/V double buffer (e), fp32 dK/dV double buffer (ACC_BYTES), dQKV, fp32 dQ
            acts = e * (2 * t * 2 * kv + t * qkv) + ACC_BYTES * 2 * t * 2 * kv + 4 * t * h
        transient = weights + acts
    elif name == "metp":
        shard = -(-W // p) * e
        if ring_p2p:
            fwd += [_coll("p2p", shard, p, count=p - 1, overlapped=True)]
            bwd += [_coll("p2p", shard, p, count=2 * (p - 1), overlapped=True)]  # weights, then grad partials
            if attn:
                fwd += [_coll("p2p", t * 2 * kv * e // p, p, count=p * (p - 1), overlapped=True)]
                bwd += [_coll("p2p", t * 2 * kv * (e + ACC_BYTES) // p, p, count=p * (p - 1),  # K/V, fp32 dK/dV
                              overlapped=True)]
            ring_steps = 3 * (p - 1)
        hides_all = True
        kernel_len, kernel_causal = max(seq_len // p, 1), False
        min_dim = min(t, (h if attn else f) // p)
        kept = e * t * (3 * h if attn else 2 * h) + (F.lse_bytes(model, t) if attn else 0)
        wide = (qkv if attn else f_act * f) // p
        ring = 2 * t * 2 * kv // p * (e + ACC_BYTES) if attn else 0  # K/V (e) + fp32 dK/dV double buffers
        acts = e * (4 * t * wide + 2 * t * h) + ring
        transient = 4 * shard + acts  # weight double buffer + gradient-partial double buffer
    else:
        raise ValueError(f"no schedule for strategy {name!r}")

    if p > 1:  # replicated norm / output-bias gradients
        bwd.append(_coll("all_reduce", F.replicated_params(model) * e, p))

    if option.recompute:
        gemm += lin_fwd
        att += att_fwd
        elem += elem_fwd
        refwd = [c for c in fwd if not (name in ("megatron_cz", "ulysses_z") and c.op == "all_gather")]
        bwd = refwd + bwd
        if ring_steps:
            ring_steps += (p - 1)
        transient += kept
        kept = t * h * e

    return Schedule(
        gemm_flops=gemm, gemm_min_dim=max(min_dim, 1), attention_flops=att,
        attention_kernel_len=kernel_len, attention_kernel_causal=kernel_causal, elementwise_bytes=elem,
        collectives=tuple(fwd + bwd), ring_steps=ring_steps, ring_hides_all_compute=hides_all,
        kept_bytes=int(kept), transient_bytes=int(transient),
    )
