"""What each strategy does to one sub-layer, per rank, beyond the 1/p of every FLOP that all of them share:
its collectives, the smallest dimension of its GEMMs, its kept and transient bytes (`StrategyWork`), per
strategy by the key its catalog entry names (`SCHEDULES`). `schedules.schedule` adds the shared compute and
the options (`+recompute`, `+tiled`, `+offload`) and returns the `Schedule`.

Notation: T = b*s tokens, t = T/p local tokens, h hidden, kv = kv_heads * head_dim, f ffn size, e bytes per
element, W the sub-layer's sharded parameters (`Sublayer`).

- megatron_ts (Megatron TP + SP, Korthikanti et al. 2023 section 4.2.2): all-gather the sequence-sharded
  norm output [t, h] -> [T, h], column-parallel GEMM on the rank's heads / f-columns, row-parallel GEMM,
  reduce-scatter [T, h] -> [t, h]. Backward: all-gather the output gradient, all-gather the input again
  (it is kept sharded), reduce-scatter the input gradient.
- ulysses_z (DeepSpeed-Ulysses, Jacobs et al. 2023) and megatron_cz (ring context parallel): the linear
  weights of a sub-layer are all-gathered from the 1/p shards before use, again in backward, and the full
  gradient is reduce-scattered (ZeRO-3). Ulysses turns Q, K, V [t, h+2kv] into head shards
  [T, (h+2kv)/p] by all-to-all and back (with kv_heads < p each K/V head is replicated p / kv_heads times
  first: kv becomes p*d in the all-to-all and in the kernel's kept K/V, `ulysses_kv_sent`); the ring
  passes K, V blocks [t, 2kv] around p - 1 steps (K, V and their gradients in backward, the gradients in
  fp32: `ACC_BYTES`), overlapped with the block attention.
- Kept activations (`formulas.kept_elements_*`: Korthikanti et al. 2023 with FlashAttention, dropout 0;
  every tensor sequence-sharded or head-sharded, so 1/p of it per rank): norm input and output, Q, K, V,
  the attention output and FlashAttention's log-sum-exp; the MLP's norm input and output and its f-wide
  activation input and output. One exception, ulysses_z attention keeps one [t, h] more: the attention
  output in head layout [T, h/p] (the kernel's, for its backward) and again in sequence layout [t, h]
  after the all-to-all back (the output projection's input, for the weight gradient). Deriving either
  from the other is an all-to-all, so DeepSpeed-Ulysses, and our ulysses_z, keep both (at
  p = 1 there is no all-to-all: the runtime re-derives the projection's input from the kernel's). (In
  megatron_ts both are one tensor up to a local permutation, kept once.) The runtime's kept tensors are
  measured against these counts (tests/paradyse_lab/app/measure/test_profiler.py).
- ulysses_ring:a (USP, Fang and Zhao, arXiv 2405.07719: Ulysses inside, ring outside), p = a x b: the
  weights as ZeRO-3 over all p; Q, K, V [t, h+2kv_a] go by all-to-all inside the head group of a ranks
  (kv_a = max(kv_heads, a) * d, the replicate rule at a), giving each rank h/a heads of the group's a*t tokens;
  those form the zig-zag layout of a ring of b ranks (the group's chunks r and 2p-1-r over its a ranks are
  chunks j and 2b-1-j of a 2b-chunk grid), so ring attention over b passes K, V blocks [a*t, 2kv_a/a]
  = t*2kv_a elements b - 1 times (K, V and fp32 dK/dV in backward), and the output goes back by all-to-all.
  Kept: ulysses_z's count with kv_a (the kernel's head-layout q, k, v, o, lse and the output again in
  sequence layout). a = p is ulysses_z's traffic, a = 1 megatron_cz's ring.
  Where the even rule fails at a (a < p), the head groups split the heads unevenly as ulysses_uneven below does
  over p (`uneven_heads_work`), and the ring passes the busiest member's K/V heads.
- ulysses_uneven (Ulysses with an uneven head split, as DeepSpeed's uneven-heads all-to-all): rank r holds n_r =
  ceil or floor of H / p query heads and the m_r K/V heads they read (`head_split`), so it receives
  w_r = n_r + 2 m_r heads of every rank's t tokens. An all-to-all with unequal parts takes as long as its busiest
  member: the widest rank receives (p - 1) t w_max d elements, and no rank sends more (a rank sends the others'
  widths of its t tokens), so each all-to-all is priced as the even one at the widest rank's width (buffer
  p t w_max d; the output's way back at the most query heads n_max). The rank with the most query heads sets the
  attention time (`StrategyWork.attention_share` n_max / H of every FLOP); kept and transient bytes are the
  busiest rank's: ulysses_z's set with that rank's heads in head layout.
- megatron_cp:a (Megatron-LM's tensor x context parallel), p = a x b: megatron_ts inside the tensor group of a
  consecutive ranks, the attention's K/V blocks around a zig-zag ring over b (ulysses_ring's groups); its 1/a
  weight block fetched per pass from the 1/p shards (a shard exchange and a ring-group all-gather), its gradient
  reduce-scattered over b in fp32 and sent back (`megatron_cp_work`). a = p is megatron_ts's traffic.
- metp (Liang et al., FITEE 2025): every rank keeps its t tokens; the weight shard of head group g (or of
  f-column group g) travels around a ring, double-buffered, and each rank applies it to its tokens; inside
  each head group a K/V ring runs (p - 1 steps of [t, 2kv/p]). Backward passes the shards around again and
  ring-reduces the gradient partial of each shard to its owner. We model METP as keeping only the norm
  inputs/outputs and the attention output, and recomputing the per-shard intermediates f(XB_g) when the
  shard comes round in backward: that is how it avoids "duplicated tensors" (FITEE abstract: at least
  41.7% less memory than TP with FlashAttention) and why it is the slowest.
- Grouped-query attention adds FlashAttention-2's full-heads dK/dV buffers of one backward kernel call to
  the transient bytes (`flash_gqa_grad_bytes`); K and V themselves are read with their own heads.
- Parameter gradients are summed over the ranks in fp32 whatever the model dtype (`formulas.GRAD_REDUCE_BYTES`;
  `GRAD_REDUCE_DTYPE`): ZeRO-3's reduce-scatter and METP's gradient partials send 4 bytes
  per element; with a 16-bit model the transient bytes hold the fp32 bucket the reduction works in (METP: its
  fp32 partial double buffer).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from paradyse_lab.core.head_split import head_split, splits_evenly
from paradyse_lab.core.model_spec import ModelSpec
from paradyse_lab.costmodel import formulas as F
from paradyse_lab.costmodel.types import CollectiveCall

ACC_BYTES = 4
"""Bytes per element of ring attention's travelling dK/dV accumulators: fp32 whatever the model dtype.
Each rank adds its block's dK/dV into an accumulator that crosses p - 1 ranks; rounding it to bf16 at every
hop loses low-order bits p - 1 times. ring-flash-attention (github.com/zhuzilin/ring-flash-attention,
zigzag_ring_flash_attn.py: dk, dv converted `.to(torch.float32)` and passed around the ring as such) and
our ring attention accumulate and send them in fp32, so the backward's K/V messages are priced at
the model dtype (e) and its dK/dV messages and buffers at ACC_BYTES (identical in fp32)."""


def ulysses_kv_sent(model: ModelSpec, p: int) -> int:
    """Width of K (and of V) that Ulysses' all-to-all carries per token: kv_heads * d, or p * d when
    kv_heads < p, where each K/V head is replicated p / kv_heads times so that every rank receives the one
    its query heads read (the strategy catalog's GQA rule)."""
    return max(model.kv_heads, p) * model.head_dim


def _coll(op, nbytes, p, count=1, overlapped=False, stride=1):
    return CollectiveCall(op, int(nbytes), p, count, overlapped, stride)


@dataclass(frozen=True)
class Sublayer:
    """One 'attention' or 'mlp' sub-layer at (seq_len, batch) on p ranks: what every strategy's schedule reads."""

    model: ModelSpec
    attn: bool
    """True for the attention sub-layer, False for the MLP."""
    seq_len: int
    p: int
    e: int
    """Bytes per element of the model dtype."""
    h: int
    kv: int
    """kv_heads * head_dim."""
    f: int
    T: int
    """b * s tokens."""
    t: int
    """T / p local tokens."""
    W: int
    """The sub-layer's sharded parameters."""
    width: int
    """Output width of the first GEMM(s): h + 2kv (QKV) for attention, f (x2 for SwiGLU) for the MLP."""
    kept: int
    """Bytes of the default kept set (module docstring): `kept_elements_*` plus the log-sum-exp."""
    lse: int
    """Bytes of FlashAttention's log-sum-exp (0 for the MLP)."""
    head_degree: int = 0
    """A two-dimensional strategy's head degree a (its catalog entry's); 0 for the others."""

    @classmethod
    def of(cls, model: ModelSpec, kind: str, seq_len: int, batch: int, p: int, head_degree: int = 0) -> Sublayer:
        attn = kind == "attention"
        e, h, kv, f = model.dtype_bytes, model.hidden, model.kv_hidden, model.ffn_hidden
        T = batch * seq_len
        t = T // p
        f_act = 2 if model.ffn_kind == "swiglu" else 1  # f-wide outputs of the first MLP GEMM(s)
        lse = F.lse_bytes(model, t) if attn else 0
        kept_elems = F.kept_elements_attention(model, t) if attn else F.kept_elements_mlp(model, t)
        return cls(model=model, attn=attn, seq_len=seq_len, p=p, e=e, h=h, kv=kv, f=f, T=T, t=t,
                   W=F.sharded_params(model, kind), width=(h + 2 * kv) if attn else f_act * f,
                   kept=kept_elems * e + lse, lse=lse, head_degree=head_degree)

    @property
    def qkv(self) -> int:
        """Width of Q, K, V together: h + 2kv."""
        return self.h + 2 * self.kv

    @property
    def f_act(self) -> int:
        """f-wide outputs of the first MLP GEMM(s): 2 for SwiGLU, 1 otherwise."""
        return 2 if self.model.ffn_kind == "swiglu" else 1


@dataclass
class StrategyWork:
    """What one strategy does to a `Sublayer` beyond the work all strategies share (1/p of every FLOP)."""

    fwd: list[CollectiveCall]
    """Forward collectives."""
    bwd: list[CollectiveCall]
    """Backward collectives (the replicated-gradient all-reduce is added by `schedule`)."""
    min_dim: int
    """Smallest dimension among this rank's GEMMs."""
    kept: int
    """Activation bytes kept for backward."""
    transient: int
    """Working bytes while the sub-layer runs."""
    extra_gemm_flops: float = 0.0
    """GEMM FLOPs beyond the shared forward + backward (METP's recomputed first GEMM)."""
    ring_steps: int = 0
    ring_hides_all_compute: bool = False
    ring_blocks: bool = False
    """Whether the attention kernels see ring blocks of s/p keys (else the whole sequence, or document)."""
    ring_ranks: int = 0
    """Ranks in the ring when it spans fewer than p (a two-dimensional strategy's b); 0: p."""
    kernel_causal: bool | None = None
    """Whether the kernel calls are causal when not the model's (ring blocks: full blocks; see
    `ring_kernel_causal`)."""
    gathers_weights: bool = False
    """ZeRO-3: the forward all-gathers are weight gathers, which a recomputed forward does not repeat (the
    backward's gather serves it)."""
    weight_calls: tuple[CollectiveCall, ...] = ()
    """Forward collectives (these very objects) that fetch weights beside others that move activations, which a
    recomputed forward does not repeat either (megatron_cp's shard exchange and ring-group gather)."""
    attention_share: float = 0.0
    """The busiest rank's share of every document's attention FLOPs when the ranks' shares differ (uneven heads:
    the most query heads over all); 0: the even 1/p."""


def flash_gqa_grad_bytes(s: Sublayer, keys: int, query_width: int, kernel_kv_width: int) -> int:
    """Transient bytes of one FlashAttention-2 backward call under grouped-query attention: with fewer K/V
    heads than query heads in the call, the kernel computes dK and dV per query head into [keys, query_width]
    buffers and then sums each group (flash-attn csrc/flash_attn/flash_api.cpp `mha_bwd`: `dk_expanded`,
    `dv_expanded`; PyTorch's flash kernel is the same port); 0 without GQA. (The runtime's own code makes
    no full-heads copy of K, V, dK or dV.)"""
    return 2 * keys * query_width * s.e if kernel_kv_width < query_width else 0


def ring_kernel_causal(s: Sublayer) -> bool | None:
    """Whether a ring strategy's kernels are priced as causal: on p > 1 ranks the zig-zag blocks are charged
    as full (non-causal) blocks of s/p keys (every step but the diagonal one is
    a full block); on one rank the ring is its single diagonal block, one causal kernel over the whole
    sequence when the model is causal, so the model's own mask (None) prices it."""
    return False if s.p > 1 else None


def _megatron_ts(s: Sublayer) -> StrategyWork:
    act = s.T * s.h * s.e  # [T, h]
    fwd = [_coll("all_gather", act, s.p), _coll("reduce_scatter", act, s.p)]
    bwd = [_coll("all_gather", act, s.p, count=2), _coll("reduce_scatter", act, s.p)]
    wide = s.width // s.p
    transient = s.e * (2 * s.T * s.h + s.T * wide + (0 if s.attn else s.T * s.f // s.p))
    if s.attn:  # one kernel over the whole sequence on this rank's h/p query and kv/p K/V heads
        transient += flash_gqa_grad_bytes(s, s.T, s.h // s.p, s.kv // s.p)
    return StrategyWork(fwd, bwd, min_dim=min(s.T, s.h, (s.h if s.attn else s.f) // s.p), kept=s.kept,
                        transient=transient)


def grad_reduce_bytes(s: Sublayer) -> int:
    """Bytes per element of a sharded gradient as it is reduced over the ranks: `formulas.GRAD_REDUCE_BYTES` (fp32)
    on p > 1 ranks, the model dtype's on one (nothing is reduced, no copy is made, as
    in the runtime's zero3 and metp)."""
    return F.GRAD_REDUCE_BYTES if s.p > 1 else s.e


def _zero3_weights(s: Sublayer) -> tuple[list[CollectiveCall], list[CollectiveCall], int]:
    """ZeRO-3's weight traffic (forward, backward) and its weight bytes: the current and the prefetched
    gathered weights, and the full gradient before its reduce-scatter, which sends it in fp32 (`grad_reduce_bytes`)
    one bucket at a time (16-bit weights: `formulas.reduce_scatter_bucket_bytes`). The runtime reduce-scatters each
    gradient tensor as soon as it is made (w2's, w1's, b1's: the same bytes in two or three calls, priced here as
    one, so the time misses one or two collective latencies per backward, which the replay model, tracing the real
    calls, does not), and at most the largest full gradient and its bucket are alive: the gradient and bucket terms,
    sized on the whole W, bound the runtime's from above."""
    w = s.W * s.e
    bucket = F.reduce_scatter_bucket_bytes(s.model, s.W // s.p, s.p)
    return [_coll("all_gather", w, s.p)], \
        [_coll("all_gather", w, s.p), _coll("reduce_scatter", s.W * grad_reduce_bytes(s), s.p)], 3 * w + bucket


def _zero3_mlp(s: Sublayer) -> StrategyWork:
    fwd, bwd, weights = _zero3_weights(s)
    acts = s.e * s.t * (2 * s.f_act * s.f + s.h)  # grads of the f-wide tensors and of the input
    return StrategyWork(fwd, bwd, min_dim=min(s.t, s.h), kept=s.kept, transient=weights + acts,
                        gathers_weights=True)


def _ulysses_z(s: Sublayer) -> StrategyWork:
    if not s.attn:
        return _zero3_mlp(s)
    fwd, bwd, weights = _zero3_weights(s)
    t, h, e = s.t, s.h, s.e
    kv_sent = ulysses_kv_sent(s.model, s.p)  # K/V width sent: kv_heads < p replicates each K/V head
    qkv = h + 2 * kv_sent
    fwd += [_coll("all_to_all", t * qkv * e, s.p), _coll("all_to_all", t * h * e, s.p)]
    bwd += [_coll("all_to_all", t * h * e, s.p), _coll("all_to_all", t * qkv * e, s.p)]
    acts = e * (2 * t * qkv + 2 * t * h)  # dQ/dK/dV before and after their all-to-all, dO, dX
    acts += flash_gqa_grad_bytes(s, s.T, h // s.p, kv_sent // s.p)  # whole sequence, this rank's heads
    kept = s.kept + (t * h * e if s.p > 1 else 0)  # the attention output in both layouts (module docstring)
    kept += 2 * t * (kv_sent - s.kv) * e  # the kernel keeps its K/V copy: 1 head per rank when kv_heads < p
    return StrategyWork(fwd, bwd, min_dim=min(t, h), kept=kept, transient=weights + acts, gathers_weights=True)


def _megatron_cz(s: Sublayer) -> StrategyWork:
    if not s.attn:
        return _zero3_mlp(s)
    fwd, bwd, weights = _zero3_weights(s)
    t, kv, e, p = s.t, s.kv, s.e, s.p
    ring_steps = 0
    if p > 1:
        fwd += [_coll("p2p", t * 2 * kv * e, p, count=p - 1, overlapped=True)]
        bwd += [_coll("p2p", t * 2 * kv * (e + ACC_BYTES), p, count=p - 1, overlapped=True)]  # K/V, fp32 dK/dV
        ring_steps = 2 * (p - 1)
    # K/V double buffer (e), fp32 dK/dV double buffer (ACC_BYTES), dQKV, fp32 dQ
    acts = e * (2 * t * 2 * kv + t * s.qkv) + ACC_BYTES * 2 * t * 2 * kv + 4 * t * s.h
    acts += flash_gqa_grad_bytes(s, t, s.h, kv)  # one ring block: t keys, every head
    return StrategyWork(fwd, bwd, min_dim=min(t, s.h), kept=s.kept, transient=weights + acts,
                        ring_steps=ring_steps, ring_blocks=True, kernel_causal=ring_kernel_causal(s),
                        gathers_weights=True)


def ulysses_ring_work(s: Sublayer, a: int) -> StrategyWork:
    """Ulysses x ring of head degree a on p = a x b ranks (module docstring); a = p is ulysses_z's traffic
    and kept set, a = 1 megatron_cz's ring."""
    if not s.attn:
        return _zero3_mlp(s)
    if not splits_evenly(s.model.heads, s.model.kv_heads, a):
        return uneven_heads_work(s, a)
    fwd, bwd, weights = _zero3_weights(s)
    t, h, e, b = s.t, s.h, s.e, s.p // a
    kv_a = ulysses_kv_sent(s.model, a)  # K/V width through the all-to-all (and the ring): replicated up to a
    qkv = h + 2 * kv_a
    if a > 1:
        fwd += [_coll("all_to_all", t * qkv * e, a), _coll("all_to_all", t * h * e, a)]
        bwd += [_coll("all_to_all", t * h * e, a), _coll("all_to_all", t * qkv * e, a)]
    ring_steps = 0
    if b > 1:  # a block: the group's a*t tokens of this rank's kv_a/a K/V width
        fwd += [_coll("p2p", t * 2 * kv_a * e, b, count=b - 1, overlapped=True, stride=a)]  # ranks a apart
        bwd += [_coll("p2p", t * 2 * kv_a * (e + ACC_BYTES), b, count=b - 1, overlapped=True,  # K/V, fp32 dK/dV
                      stride=a)]
        ring_steps = 2 * (b - 1)
    acts = e * (2 * t * qkv + 2 * t * h)  # dQ/dK/dV before and after their all-to-all, dO, dX
    acts += e * 2 * t * 2 * kv_a + ACC_BYTES * (2 * t * 2 * kv_a + t * h)  # K/V and fp32 dK/dV buffers, fp32 dQ
    acts += flash_gqa_grad_bytes(s, a * t, h // a, kv_a // a)  # one ring block: a*t keys, this rank's heads
    kept = s.kept + t * h * e + 2 * t * (kv_a - s.kv) * e  # as ulysses_z with kv_a
    return StrategyWork(fwd, bwd, min_dim=min(t, h), kept=kept, transient=weights + acts, ring_steps=ring_steps,
                        ring_blocks=True, ring_ranks=b, kernel_causal=False if b > 1 else None,
                        gathers_weights=True)


def _ulysses_ring(s: Sublayer) -> StrategyWork:
    """`ulysses_ring_work` at the head degree of the option (`schedule` passes it as `Sublayer.head_degree`)."""
    return ulysses_ring_work(s, s.head_degree)


def megatron_cp_work(s: Sublayer, a: int) -> StrategyWork:
    """Tensor x context parallel of tensor degree a on p = a x b ranks: megatron_ts inside the tensor group of a
    consecutive ranks (the sequence [t, h] -> [a*t, h] gathered and reduce-scattered, this rank's 1/a of the heads
    or f-columns), the attention's K/V blocks [a*t, 2kv/a] = t*2kv elements around the ring of b ranks (a apart:
    `stride`), as ulysses_ring's ring with the K/V heads split instead of replicated. Weights (the runtime's 1/p
    shards; an a-block fetched per pass): one shard [W/p] exchanged in the layer's group (when 1 < a < p), an
    all-gather [W/p] -> [W/a] over the ring group, the same again before the backward, and the a-block gradient
    reduce-scattered over the ring group in fp32 ([W/a] -> [W/p]) with its shard sent back (model dtype).
    a = p is megatron_ts's traffic (no weight traffic at all); a = 1 is megatron_cz's ring and ZeRO-3 weights.
    Kept: megatron_ts's set (the ring's q, k, v, o at the rank's heads over a*t tokens are t*h, t*kv, t*kv, t*h)."""
    t, h, e = s.t, s.h, s.e
    b, g = s.p // a, a * t  # ring ranks; the tensor group's gathered tokens
    fetch, grads = megatron_cp_weight_calls(s, a)
    act_fwd, act_bwd = megatron_cp_activation_calls(s, a)
    fwd = [*fetch, *act_fwd]
    bwd = [*(replace(c) for c in fetch), *act_bwd, *grads]  # fetched again (copies: a recomputation skips `fetch`)
    ring_steps = 0
    if s.attn and b > 1:  # a block: the group's a*t tokens of this rank's kv/a K/V width
        fwd.append(_coll("p2p", t * 2 * s.kv * e, b, count=b - 1, overlapped=True, stride=a))
        bwd.append(_coll("p2p", t * 2 * s.kv * (e + ACC_BYTES), b, count=b - 1, overlapped=True, stride=a))
        ring_steps = 2 * (b - 1)
    acts = e * (2 * g * h + g * s.width // a + (0 if s.attn else g * s.f // a))  # megatron_ts's at g tokens
    if s.attn:  # the ring's K/V and fp32 dK/dV double buffers, fp32 dQ; one ring block of g keys
        acts += e * 2 * t * 2 * s.kv + ACC_BYTES * (2 * t * 2 * s.kv + t * h)
        acts += flash_gqa_grad_bytes(s, g, h // a, s.kv // a)
    return StrategyWork(fwd, bwd, min_dim=min(g, h, (h if s.attn else s.f) // a), kept=s.kept,
                        transient=megatron_cp_weight_bytes(s, a) + acts, ring_steps=ring_steps, ring_blocks=s.attn,
                        ring_ranks=b, kernel_causal=(False if b > 1 else None) if s.attn else None,
                        weight_calls=tuple(fetch))


def megatron_cp_weight_calls(s: Sublayer, a: int) -> tuple[list[CollectiveCall], list[CollectiveCall]]:
    """megatron_cp's weight traffic (`megatron_cp_work`): (the a-block's fetch, once per pass: the shard exchange
    when 1 < a < p and the ring group's all-gather when b > 1; the gradient: the fp32 reduce-scatter over the ring
    group and the summed shard sent back)."""
    p, b = s.p, s.p // a
    shard, block = s.W // p * s.e, s.W // a  # one 1/p shard (bytes); the a-block (elements)
    exchange = 1 < a < p
    fetch = ([_coll("p2p", shard, p)] if exchange else []) + \
        ([_coll("all_gather", block * s.e, b, stride=a)] if b > 1 else [])  # [W/p] -> [W/a] over ranks a apart
    grads = ([_coll("reduce_scatter", block * F.GRAD_REDUCE_BYTES, b, stride=a)] if b > 1 else []) + \
        ([_coll("p2p", shard, p)] if exchange else [])
    return fetch, grads


def megatron_cp_activation_calls(s: Sublayer, a: int) -> tuple[list[CollectiveCall], list[CollectiveCall]]:
    """megatron_cp's sequence collectives in the tensor group (megatron_ts's at a ranks): forward all-gather and
    reduce-scatter of [a*t, h]; backward all-gathers of dy and u and reduce-scatter of du."""
    if a == 1:  # a tensor group of one rank gathers nothing
        return [], []
    act = a * s.t * s.h * s.e  # [a*t, h]
    return [_coll("all_gather", act, a), _coll("reduce_scatter", act, a)], \
        [_coll("all_gather", act, a, count=2), _coll("reduce_scatter", act, a)]


def megatron_cp_weight_bytes(s: Sublayer, a: int) -> int:
    """megatron_cp's transient weight bytes: the exchanged shard, the gathered a-block and its copy in section
    order, the a-block gradient packed in the gather's order and the fp32 bucket of its reduce-scatter (none at
    a = p: the shard is the block)."""
    if a == s.p:
        return 0
    shard, block = s.W // s.p, s.W // a
    return shard * s.e + 3 * block * s.e + F.reduce_scatter_bucket_bytes(s.model, shard, s.p // a)


def _megatron_cp(s: Sublayer) -> StrategyWork:
    """`megatron_cp_work` at the tensor degree of the option (`Sublayer.head_degree`)."""
    return megatron_cp_work(s, s.head_degree)


def uneven_heads_work(s: Sublayer, a: int) -> StrategyWork:
    """Ulysses with ceil or floor of H / a query heads per member of head groups of a ranks (module docstring),
    priced at its busiest rank; a = p is ulysses_uneven, a < p `ulysses_ring:a` where its even rule fails, whose
    ring over b = p / a passes each member's K/V heads of the group's a*t tokens (the busiest member's m_max)."""
    fwd, bwd, weights = _zero3_weights(s)
    t, h, e, d, b = s.t, s.h, s.e, s.model.head_dim, s.p // a
    split = head_split(s.model.heads, s.model.kv_heads, a)
    keys = a * t  # the group's tokens: a rank's keys per kernel call (the whole sequence when b = 1)
    qkv_max, q_max = keys * split.widest * d * e, keys * split.most_queries * d * e  # even buffers at the widest
    fwd += [_coll("all_to_all", qkv_max, a), _coll("all_to_all", q_max, a)]
    bwd += [_coll("all_to_all", q_max, a), _coll("all_to_all", qkv_max, a)]
    kv_max = max(m for _, m in (split.kept_heads(r) for r in range(a))) * d  # the widest member's K/V width
    ring_steps, ring = 0, 0
    if b > 1:  # a block: the group's a*t tokens of the member's K/V heads, to ranks a apart
        fwd += [_coll("p2p", keys * 2 * kv_max * e, b, count=b - 1, overlapped=True, stride=a)]
        bwd += [_coll("p2p", keys * 2 * kv_max * (e + ACC_BYTES), b, count=b - 1, overlapped=True, stride=a)]
        ring_steps = 2 * (b - 1)
        ring = e * 2 * keys * 2 * kv_max + ACC_BYTES * (2 * keys * 2 * kv_max + keys * split.most_queries * d)

    def head_layout(r: int) -> int:  # rank r's kernel keeps q, o of its query heads, k, v of its K/V heads, lse
        n, m = split.kept_heads(r)
        return keys * d * (2 * n + 2 * m) * e + keys * n * F.LSE_BYTES

    kept = 3 * t * h * e + max(head_layout(r) for r in range(a))  # x, u, and the output c in sequence layout
    received = t * d * sum(split.width(r) for r in range(a))  # every member's dQ/dK/dV widths of this rank's tokens
    acts = e * (keys * split.widest * d + received + 2 * t * h) + ring  # dQKV both layouts, dO, dX; ring buffers
    calls = {call for r in range(a) for call in split.kernel_groups(r)}  # (query heads, K/V heads) per kernel call
    acts += max(flash_gqa_grad_bytes(s, keys, n * d, m * d) for n, m in calls)  # one call at a time
    return StrategyWork(fwd, bwd, min_dim=min(t, h), kept=kept, transient=weights + acts, ring_steps=ring_steps,
                        ring_blocks=b > 1, ring_ranks=b if b > 1 else 0, kernel_causal=False if b > 1 else None,
                        gathers_weights=True, attention_share=split.most_queries / (s.model.heads * b))


def _ulysses_uneven(s: Sublayer) -> StrategyWork:
    """Ulysses with an uneven head split over all p ranks (`uneven_heads_work` at a = p)."""
    return _zero3_mlp(s) if not s.attn else uneven_heads_work(s, s.p)


def _metp(s: Sublayer) -> StrategyWork:
    t, h, kv, e, p = s.t, s.h, s.kv, s.e, s.p
    shard, partial = -(-s.W // p) * e, -(-s.W // p) * grad_reduce_bytes(s)  # a weight shard, a gradient partial
    fwd: list[CollectiveCall] = []
    bwd: list[CollectiveCall] = []
    ring_steps = 0
    if p > 1:
        fwd += [_coll("p2p", shard, p, count=p - 1, overlapped=True)]
        bwd += [_coll("p2p", shard, p, count=p - 1, overlapped=True),  # the weights again
                _coll("p2p", partial, p, count=p - 1, overlapped=True)]  # the gradient partials, fp32
        if s.attn:
            fwd += [_coll("p2p", t * 2 * kv * e // p, p, count=p * (p - 1), overlapped=True)]
            bwd += [_coll("p2p", t * 2 * kv * (e + ACC_BYTES) // p, p, count=p * (p - 1),  # K/V, fp32 dK/dV
                          overlapped=True)]
        ring_steps = 3 * (p - 1)
    kept = e * t * (3 * h if s.attn else 2 * h) + s.lse
    wide = s.width // p
    ring = 2 * t * 2 * kv // p * (e + ACC_BYTES) if s.attn else 0  # K/V (e) + fp32 dK/dV double buffers
    acts = e * (4 * t * wide + 2 * t * h) + ring
    if s.attn:  # one ring block of one head group: t keys, h/p query and kv/p K/V heads
        acts += flash_gqa_grad_bytes(s, t, h // p, kv // p)
    return StrategyWork(
        fwd, bwd, min_dim=min(t, (h if s.attn else s.f) // p), kept=kept,
        transient=2 * shard + 2 * partial + acts,  # weight double buffer + (fp32) gradient-partial double buffer
        extra_gemm_flops=2.0 * s.T * h * s.width / p,  # backward recomputes the per-shard first GEMM
        ring_steps=ring_steps, ring_hides_all_compute=True, ring_blocks=True, kernel_causal=ring_kernel_causal(s),
    )


SCHEDULES: dict[str, Callable[[Sublayer], StrategyWork]] = {
    "megatron_ts": _megatron_ts,
    "megatron_cz": _megatron_cz,
    "ulysses_z": _ulysses_z,
    "metp": _metp,
    "ulysses_ring": _ulysses_ring,
    "megatron_cp": _megatron_cp,
    "ulysses_uneven": _ulysses_uneven,
}
"""Each strategy's work on one sub-layer, by the key its catalog entry names (`Strategy.schedule`)."""
