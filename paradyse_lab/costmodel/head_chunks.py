"""Head-chunked attention (`+headchunk`) in the cost model: what running an attention sub-layer one chunk of heads
at a time changes in a strategy's `StrategyWork`.

Source of the idea: UPipe / Untied Ulysses (arXiv 2602.21196): Ulysses' all-to-all and attention run over chunks
of heads, so only one chunk's head-sharded q, k, v and output exist at a time ("attention intermediates -87.5%"
for a 32B model); the code and the counts here are this project's. docs/head_chunked_attention.md is the design note.

ulysses_z (the one strategy that offers it: its catalog entry's `head_chunks`): c = heads / p chunks, chunk j
holding query head j of every rank's heads (one per rank) and the K/V head each of them reads.
Notation as in `strategy_work`, d = head_dim:
- Forward, per chunk: all-to-all of q, k, v [t, 3pd] -> [T, 3d], one attention kernel over one head, all-to-all
  of the output back [T, d] -> [t, pd] into c [t, h]. Under grouped-query attention a K/V head read by several
  query heads of a rank travels with each of them: K and V carry c * p * d per token instead of
  max(kv_heads, p) * d (more bytes, no replicas kept).
- Kept: x, u, q, k, v in sequence layout (rotated), the output c [t, h] in sequence layout and the fp32
  log-sum-exp: Korthikanti's count (`Sublayer.kept`) exactly. Plain Ulysses keeps one [t, h] more (the output in
  both layouts) and, with kv_heads < p, its K/V replicas; the chunked form keeps neither.
- Backward, per chunk: all-to-all of q, k, v, o, dO [t, 5pd] -> [T, 5d] (q, k, v and o again: the price of not
  keeping them head-sharded), the kernel's backward, all-to-all of dq, dk, dv back [T, 3d] -> [t, 3pd], summed into
  dQKV [t, h + 2kv] (a K/V head's gradient from each query head that read it).
- Transient: ZeRO-3's weights, dQKV [t, h + 2kv], dO and dX [t, h], and one chunk's head-layout tensors: q, k, v,
  o, dO, dq, dk, dv and dq, dk, dv after their all-to-all, 11 [T, d]. No full-heads dK/dV buffer: a chunk's kernel
  has one query and one K/V head.
- Time: the same FLOPs; c times as many all-to-alls, each 1/c of the size (priced per call: more latency), and the
  backward's extra all-to-all of q, k, v, o.
"""

from __future__ import annotations

from dataclasses import replace

from paradyse_lab.costmodel.strategy_work import flash_gqa_grad_bytes, ulysses_kv_sent
from paradyse_lab.costmodel.types import CollectiveCall


def head_chunk_count(heads: int, p: int) -> int:
    """Chunks of a head-chunked attention on p ranks: one query head per rank per chunk, heads / p (heads % p == 0
    is the strategy's own rule)."""
    if heads % p:
        raise ValueError(f"heads ({heads}) must be divisible by p ({p}) for head-chunked attention")
    return heads // p


def _ulysses_z(s, work):
    """ulysses_z's attention one chunk of heads at a time (module docstring)."""
    p, t, h, e = s.p, s.t, s.h, s.e
    c = head_chunk_count(s.model.heads, p)
    pd = h // c  # p * head_dim: one head per rank, per token
    weights_fwd = [x for x in work.fwd if x.op != "all_to_all"]
    weights_bwd = [x for x in work.bwd if x.op != "all_to_all"]
    fwd = weights_fwd + [CollectiveCall("all_to_all", t * 3 * pd * e, p, c),  # q, k, v of the chunk -> head layout
                         CollectiveCall("all_to_all", t * pd * e, p, c)]  # its output back
    bwd = weights_bwd + [CollectiveCall("all_to_all", t * 5 * pd * e, p, c),  # q, k, v, o, dO -> head layout
                         CollectiveCall("all_to_all", t * 3 * pd * e, p, c)]  # dq, dk, dv back
    weights = work.transient - _ulysses_acts(s, work)
    acts = e * (t * s.qkv + 2 * t * h + 11 * t * pd)
    return replace(work, fwd=fwd, bwd=bwd, kept=s.kept, transient=weights + acts)


def _ulysses_acts(s, work) -> int:
    """The activation part of plain ulysses_z's transient (`_ulysses_z`): its weights are the rest."""
    kv_sent = ulysses_kv_sent(s.model, s.p)
    qkv = s.h + 2 * kv_sent
    return s.e * (2 * s.t * qkv + 2 * s.t * s.h) + flash_gqa_grad_bytes(s, s.T, s.h // s.p, kv_sent // s.p)


HEAD_CHUNK_SCHEDULES = {"ulysses_z": _ulysses_z}
"""Head-chunked attention's work per schedule key (the catalog's `Strategy.schedule`): a strategy whose entry offers
`+headchunk` has its function here."""


def head_chunked_work(s, work, strategy_schedule: str):
    """`work` (a `strategy_work.StrategyWork` of the attention `Sublayer` s) run over chunks of heads; a schedule
    without a head-chunked cost is refused, never priced as another strategy's."""
    if strategy_schedule not in HEAD_CHUNK_SCHEDULES:
        raise ValueError(f"head-chunked attention has no cost for the {strategy_schedule!r} schedule; "
                         f"priced: {', '.join(HEAD_CHUNK_SCHEDULES)}")
    return HEAD_CHUNK_SCHEDULES[strategy_schedule](s, work)
