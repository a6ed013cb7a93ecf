"""The vocabulary-parallel embedding and head (head option 'vocab'): what runtime/vocab_parallel.py keeps, sends
and holds, per rank.

Megatron-LM's vocabulary-parallel embedding and cross-entropy (Shoeybi et al., arXiv 1909.08053 section 3;
megatron/core/tensor_parallel/layers.py and cross_entropy.py), tiled over tokens like the tiled loss
(costmodel/head_loss.py). With V the vocabulary, R = ceil(V / p) rows per rank (the last ranks' padded), t a
rank's tokens (batch x s / p), tiles of k tokens (`vocab_tile_tokens`), e the model dtype's bytes:

- model states: the embedding's and the untied head's R rows each (not V), learned positions and the final
  norm, at the optimizer's bytes per parameter;
- kept: the embedding output and the final norm's input [t, h] (as the tiled loss) and the log-sum-exp of every
  token of the sequence in fp32 (each rank keeps it for the p k gathered rows of each tile: batch x s x 4);
- transient (the head's backward, its peak): one tile's logits [p k, R] and their gradient in the model dtype,
  one fp32 chunk of rows of the cross-entropy (head_loss.py `ce_chunk_rows`), the gathered norm output [p k, h]
  (p > 1) and the partial dU [p k, h], and an fp32 [R, h] accumulator of the head's gradient when the model
  dtype is not fp32 (`vocab_head_bytes`);
- sent (`vocab_parallel_collectives`), per tile: the embedding's all-gather of the ids (int64) in the forward
  and again in the backward, its reduce-scatter of [p k, h] and the all-gather of its gradient; the head's
  all-gather of the norm output and of the labels (forward, and again in the backward's recomputation), the
  all-reduce (MAX) of the row maxima [p k] and the one of the sums of exp and the target logits [2, p k] in
  fp32, and the reduce-scatter of dU [p k, h]; once per step the all-gather of each rank's loss gradient [1]
  fp32 and the all-reduce of the replicated gradients (positions, final norm) in place of today's all-reduce
  of the whole embedding and head;
- time: four head GEMMs of 2 (p t) h R FLOPs each (forward, the backward's recomputation, dW, dU) at the
  efficiency of a GEMM whose smallest dimension is min(p k, h), the whole head's element traffic with p R
  columns plus the recomputed logits once more, and the collectives above.
Against the replicated head the states shrink by p and the per-step all-reduce of the [V, h] gradients (twice
when untied) disappears; each token instead sends O(h) bytes per collective. The planner weighs the two per
length (`HeadLossCostModel` with head 'vocab').
"""

from __future__ import annotations

from paradyse_lab.costmodel import formulas as F
from paradyse_lab.costmodel.types import CollectiveCall

ID_BYTES = 8
"""Bytes of a token id or label as the runtime gathers them (int64)."""
LSE_BYTES = 4
"""Bytes of one kept log-sum-exp (fp32)."""


def vocab_shard_rows(vocab: int, p: int) -> int:
    """R = ceil(V / p): rows of each rank's shard of the embedding and of the head."""
    return -(-vocab // p)


def vocab_tile_tokens(model, p: int, tokens: int) -> int:
    """A rank's tokens per tile: as many k as keep the tile's logits [p k, R] (4 + e bytes each) within the tiled
    loss's `LOSS_TILE_BYTES`, at least 1 and at most the rank's `tokens`."""
    from paradyse_lab.costmodel.head_loss import LOSS_TILE_BYTES

    width = p * vocab_shard_rows(model.vocab_size, p) * (4 + model.dtype_bytes)
    return max(1, min(tokens, LOSS_TILE_BYTES // width))


def _tile_counts(tokens: int, tile: int) -> list[tuple[int, int]]:
    """(tokens per tile, how many such tiles) over a rank's `tokens` (the last tile may be shorter)."""
    full, rest = divmod(tokens, tile)
    return [(k, n) for k, n in ((tile, full), (rest, 1 if rest else 0)) if n]


def vocab_state_params(model, p: int) -> int:
    """Parameters a rank holds of the embedding, the untied head, the positions and the final norm."""
    rows = vocab_shard_rows(model.vocab_size, p) * (1 if model.tied else 2)
    return (rows + model.max_positions) * model.hidden + F.norm_params(model)


def vocab_parallel_collectives(model, p: int, tokens: int, tile: int) -> tuple[CollectiveCall, ...]:
    """Every collective one rank takes part in for the embedding, head and loss of one step on its `tokens`
    tokens, `tile` at a time (module docstring); runtime/vocab_parallel.py tags them 'embedding' and 'head'."""
    h, e = model.hidden, model.dtype_bytes
    calls = []
    for k, n in _tile_counts(tokens, tile):
        rows = p * k
        calls += [CollectiveCall("all_gather", rows * ID_BYTES, p, 4 * n),  # ids and labels, forward and backward
                  CollectiveCall("reduce_scatter", rows * h * e, p, 2 * n),  # embedding output; head's dU
                  CollectiveCall("all_gather", rows * h * e, p, 3 * n),  # embedding's dy; norm output twice
                  CollectiveCall("all_reduce", rows * LSE_BYTES, p, n),  # row maxima (MAX)
                  CollectiveCall("all_reduce", 2 * rows * 4, p, n)]  # sums of exp and target logits
    calls.append(CollectiveCall("all_gather", p * 4, p))  # each rank's loss gradient
    calls += F.grad_all_reduces(model.max_positions * h + F.norm_params(model), p)  # positions, final norm: fp32
    return tuple(calls)


def vocab_head_flops(model, p: int, tokens: int) -> float:
    """FLOPs of the head's GEMMs on a rank's `tokens` tokens: four of [p t, h] x [h, R] (forward, the backward's
    recomputation, dW, dU)."""
    return 4 * 2.0 * p * tokens * model.hidden * vocab_shard_rows(model.vocab_size, p)


def vocab_loss_kept_bytes(model, p: int, tokens: int) -> int:
    """What the vocabulary-parallel loss keeps for the backward on a rank's `tokens` tokens: the final norm's
    input [t, h] and the log-sum-exp of the p t gathered rows in fp32 (the embedding keeps only the ids)."""
    return tokens * model.hidden * model.dtype_bytes + p * tokens * LSE_BYTES


def vocab_head_bytes(model, p: int, tokens: int, tile: int = 0) -> tuple[int, int]:
    """(kept, transient) bytes of the vocabulary-parallel embedding, head and loss on a rank's `tokens` tokens,
    `tile` a tile (0: `vocab_tile_tokens`): the embedding output and `vocab_loss_kept_bytes`; the head backward's
    peak (module docstring): the tile's logits and their gradient [p k, R] in the model dtype, one fp32 chunk of
    the cross-entropy (`ce_chunk_rows`), the rows' loss gradients [p k] fp32, the gathered norm output (p > 1) and
    the partial dU [p k, h], and the fp32 head-gradient accumulator."""
    from paradyse_lab.costmodel.head_loss import ce_chunk_rows

    e, h = model.dtype_bytes, model.hidden
    rows, k = vocab_shard_rows(model.vocab_size, p), tile or vocab_tile_tokens(model, p, tokens)
    accumulator = rows * h * 4 if e != 4 else 0
    logits = 2 * rows * e * p * k + ce_chunk_rows(rows, p * k) * rows * 4 + p * k * 4
    gathered = (2 if p > 1 else 1) * p * k * h * e
    return tokens * h * e + vocab_loss_kept_bytes(model, p, tokens), logits + gathered + accumulator


def vocab_fixed(cost_model, seq_len: int, batch: int, optimizer_s: float = 0.0):
    """`FixedCost` of the embedding, head and loss under the vocabulary-parallel head on `cost_model`'s cluster
    and p (module docstring); `optimizer_s`: the optimizer step's time, as the whole head's."""
    from paradyse_lab.costmodel.types import FixedCost

    m, c, p = cost_model.model, cost_model.cluster, cost_model.p
    t = batch * seq_len // p
    e, h = m.dtype_bytes, m.hidden
    rows, tile = vocab_shard_rows(m.vocab_size, p), vocab_tile_tokens(m, p, t)
    gemm_s = vocab_head_flops(m, p, t) / (c.peak_flops * c.gemm_eff(min(p * tile, h)))
    traffic_s = (3 * t * (4 * h * e + 2 * rows * 4 * p) + p * t * rows * (4 + e)) / c.hbm_bytes_per_s
    comm_s = sum(cost_model.collective_s(call) for call in vocab_parallel_collectives(m, p, t, tile))
    kept, transient = vocab_head_bytes(m, p, t)
    if p > 1:  # the fp32 bucket of the replicated gradients' all-reduce, after the head's backward
        transient = max(transient, F.grad_bucket_copy_bytes(m, m.max_positions * h + F.norm_params(m)))
    return FixedCost(time_s=gemm_s + traffic_s + comm_s,
                     model_state_bytes=F.model_state_bytes_per_param(m) * vocab_state_params(m, p),
                     kept_bytes=kept, transient_bytes=transient, optimizer_s=optimizer_s)
