"""Head and loss options: the whole head (the logits [t, V] in fp32 kept for the backward) or the tiled loss.

The tiled loss (ALST's sequence-tiled loss, Bekman et al., arXiv 2506.13996) runs the
final norm, the head GEMM and the fp32 cross-entropy over tiles of `loss_tile_tokens` tokens and keeps only the
final norm's input x [t, h] for the backward, which recomputes each tile. Against the whole head
(`AnalyticCostModel.fixed`: kept embedding output, final norm input and output [t, h] each and the fp32
logits [t, V]; transient [t, V] in fp32 and the model dtype), per rank:

- kept: the embedding output and x, 2 t h e (no norm output, no logits);
- transient: one tile's [tile, V] softmax in fp32 and its gradient in the model dtype, tile V (4 + e), plus an
  fp32 [V, h] accumulator of the head's gradient when the model dtype is not fp32;
- time: the head GEMM once more, 2 t h V FLOPs, at the efficiency of a GEMM whose smallest dimension is
  min(tile, h), and the logits' element traffic once more.

A tile is as many tokens as keep its logits within `LOSS_TILE_BYTES` (E: large enough that the tile's GEMM
runs near the efficiency of a whole one, docs/hardware.md section 2's curve is flat above 1K).

`HeadLossCostModel(inner, head)` is `inner` with the head option `head` (`HEAD_OPTIONS`: also 'vocab', the
vocabulary-parallel embedding and head, below); the planner builds one problem per option and
keeps the fastest plan that fits (`cheapest_head`), so a length whose whole head fits pays nothing for the tiling.

The vocabulary-parallel embedding and head (head option 'vocab'): what the runtime keeps, sends
and holds of them, per rank.

Megatron-LM's vocabulary-parallel embedding and cross-entropy (Shoeybi et al., arXiv 1909.08053 section 3;
megatron/core/tensor_parallel/layers.py and cross_entropy.py), tiled over tokens like the tiled loss
above. With V the vocabulary, R = ceil(V / p) rows per rank (the last ranks' padded), t a
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

from collections.abc import Callable
from dataclasses import replace

from paradyse_lab.costmodel import formulas as F
from paradyse_lab.costmodel.types import CollectiveCall, FixedCost
from paradyse_lab.errors import unknown_name

HEAD_OPTIONS = ("whole", "tiled", "vocab")
"""How the head and loss run: whole logits, the tiled loss, or the vocabulary-parallel embedding and head with the
tiled loss."""
LOSS_TILE_BYTES = 2**30
"""Bytes of one tile's logits, fp32 and model dtype together (module docstring)."""
CE_CHUNK_BYTES = 2**28
"""Bytes of the fp32 [rows, V] buffer the cross-entropy works through at a time
(`chunked_cross_entropy`): the logits' softmax never exists in fp32 for all tokens at once."""


def ce_chunk_rows(vocab_size: int, rows: int) -> int:
    """Rows per chunk of the chunked cross-entropy: as many as keep one fp32 [rows, V] within CE_CHUNK_BYTES, at
    least 1 and at most `rows`."""
    return max(1, min(rows, CE_CHUNK_BYTES // (4 * vocab_size)))


def whole_head_bytes(model, tokens: int) -> tuple[int, int]:
    """(kept, transient) bytes of the embedding, final norm, whole head and chunked cross-entropy on `tokens`
    tokens of one rank (`whole_head_loss`): kept the embedding output and the final norm's
    input and output [t, h], the logits [t, V] in the model dtype and the fp32 log-sum-exp [t]; transient the
    logits' gradient [t, V] in the model dtype and one fp32 chunk [rows, V] (`ce_chunk_rows`)."""
    e, h, v = model.dtype_bytes, model.hidden, model.vocab_size
    kept = 3 * tokens * h * e + tokens * v * e + tokens * 4
    return kept, tokens * v * e + ce_chunk_rows(v, tokens) * v * 4


def loss_tile_tokens(vocab_size: int, dtype_bytes: int, tokens: int) -> int:
    """Tokens per tile of the tiled loss: as many as keep [tile, V] (4 + e bytes each) within LOSS_TILE_BYTES,
    at least 1 and at most the rank's `tokens`."""
    return max(1, min(tokens, LOSS_TILE_BYTES // (vocab_size * (4 + dtype_bytes))))


def tiled_loss_kept_bytes(model, tokens: int) -> int:
    """What the tiled loss itself keeps for the backward on `tokens` tokens: the final norm's input [t, h]
    (the tiled loss saves nothing else that is an activation; tests/runtime/test_tiled_loss.py measures
    it)."""
    return tokens * model.hidden * model.dtype_bytes


def tiled_head_bytes(model, tokens: int, tile: int = 0) -> tuple[int, int]:
    """(kept, transient) bytes of the embedding, head and tiled loss on `tokens` tokens of one rank, `tile` tokens
    a tile (0: `loss_tile_tokens`): the embedding output and `tiled_loss_kept_bytes`; one tile's logits and their
    gradient in the model dtype, its fp32 log-sum-exp, one fp32 chunk of the cross-entropy and the fp32
    head-gradient accumulator."""
    e, h, v = model.dtype_bytes, model.hidden, model.vocab_size
    tile = tile or loss_tile_tokens(v, e, tokens)
    accumulator = v * h * 4 if e != 4 else 0
    working = 2 * tile * v * e + tile * 4 + ce_chunk_rows(v, tile) * v * 4
    return tokens * h * e + tiled_loss_kept_bytes(model, tokens), working + accumulator


class HeadLossCostModel:
    """`inner` whose embedding/head/loss part runs with the head option `head` (module docstring)."""

    def __init__(self, inner, head: str):
        if head not in HEAD_OPTIONS:
            raise unknown_name("head option", head, HEAD_OPTIONS)
        self.inner, self.head = inner, head

    def __getattr__(self, name):  # model, p, cluster, name, label, sublayer, collective_s, budget_bytes, ...
        return getattr(self.inner, name)

    def fixed(self, seq_len: int, batch: int = 1):
        """The inner model's fixed part, with the tiled loss's kept, transient and time when `head` is 'tiled', the
        vocabulary-parallel head's when 'vocab'."""
        whole = self.inner.fixed(seq_len, batch)
        m = self.inner.model
        if self.head == "whole" or not m.embedding_and_head:
            return whole
        if self.head == "vocab":

            return vocab_fixed(self, seq_len, batch, whole.optimizer_s)
        t = batch * seq_len // self.inner.p
        e, h, v = m.dtype_bytes, m.hidden, m.vocab_size
        kept, transient = tiled_head_bytes(m, t)
        cluster = self.inner.cluster
        tile = loss_tile_tokens(v, e, t)
        again_s = 2.0 * t * h * v / (cluster.peak_flops * cluster.gemm_eff(min(tile, h)))
        again_s += t * v * (4 + e) / cluster.hbm_bytes_per_s
        reduce_bytes = F.grad_bucket_copy_bytes(m, F.embedding_params(m)) if self.inner.p > 1 else 0
        return replace(whole, time_s=whole.time_s + again_s, kept_bytes=kept,
                       transient_bytes=max(transient, reduce_bytes))


def cheapest_head(solve: Callable[[str], object], heads: tuple[str, ...] = HEAD_OPTIONS):
    """(head option, solution) of the fastest feasible plan over `heads`; `solve(head)` returns a solver's
    solution (`feasible`, `predicted_time_s`). The first head (the whole one) wins ties, and when nothing
    fits the first head's infeasible solution is returned."""
    best = None
    for head in heads:
        sol = solve(head)
        if sol.feasible and (best is None or not best[1].feasible or sol.predicted_time_s < best[1].predicted_time_s):
            best = (head, sol)
        elif best is None:
            best = (head, sol)
    return best


def usable_heads(model, p: int) -> tuple[str, ...]:
    """The head options of `model` at `p` GPUs: the whole head alone for a model without a head; no 'vocab' at one
    GPU (its one shard is the whole table, so it would be the tiled loss: a one-process run keeps the replicated
    head, `vocab_storage`)."""
    if not model.embedding_and_head:
        return HEAD_OPTIONS[:1]
    return HEAD_OPTIONS if p > 1 else tuple(h for h in HEAD_OPTIONS if h != "vocab")


def head_cost_models(cost_model) -> dict:
    """Head option -> the cost model a plan with it is costed on (`usable_heads`): the whole head first (it wins
    ties), the tiled loss and the vocabulary-parallel head."""
    heads = usable_heads(cost_model.model, cost_model.p)
    return {h: cost_model if h == "whole" else HeadLossCostModel(cost_model, h) for h in heads}


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
    tokens, `tile` at a time (module docstring); the runtime tags them 'embedding' and 'head'."""
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

    e, h = model.dtype_bytes, model.hidden
    rows, k = vocab_shard_rows(model.vocab_size, p), tile or vocab_tile_tokens(model, p, tokens)
    accumulator = rows * h * 4 if e != 4 else 0
    logits = 2 * rows * e * p * k + ce_chunk_rows(rows, p * k) * rows * 4 + p * k * 4
    gathered = (2 if p > 1 else 1) * p * k * h * e
    return tokens * h * e + vocab_loss_kept_bytes(model, p, tokens), logits + gathered + accumulator


def vocab_fixed(cost_model, seq_len: int, batch: int, optimizer_s: float = 0.0):
    """`FixedCost` of the embedding, head and loss under the vocabulary-parallel head on `cost_model`'s cluster
    and p (module docstring); `optimizer_s`: the optimizer step's time, as the whole head's."""
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
