"""Head and loss options: the whole head (the logits [t, V] in fp32 kept for the backward) or the tiled loss.

The tiled loss (runtime/tiled_loss.py; ALST's sequence-tiled loss, Bekman et al., arXiv 2506.13996) runs the
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
vocabulary-parallel embedding and head, costmodel/vocab_parallel.py); the planner builds one problem per option and
keeps the fastest plan that fits (`cheapest_head`), so a length whose whole head fits pays nothing for the tiling.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from paradyse_lab.costmodel import formulas as F
from paradyse_lab.errors import unknown_name

HEAD_OPTIONS = ("whole", "tiled", "vocab")
"""How the head and loss run: whole logits, the tiled loss, or the vocabulary-parallel embedding and head with the
tiled loss (costmodel/vocab_parallel.py)."""
LOSS_TILE_BYTES = 2**30
"""Bytes of one tile's logits, fp32 and model dtype together (module docstring)."""
CE_CHUNK_BYTES = 2**28
"""Bytes of the fp32 [rows, V] buffer the cross-entropy works through at a time (runtime/tiled_loss.py
`chunked_cross_entropy`): the logits' softmax never exists in fp32 for all tokens at once."""


def ce_chunk_rows(vocab_size: int, rows: int) -> int:
    """Rows per chunk of the chunked cross-entropy: as many as keep one fp32 [rows, V] within CE_CHUNK_BYTES, at
    least 1 and at most `rows`."""
    return max(1, min(rows, CE_CHUNK_BYTES // (4 * vocab_size)))


def whole_head_bytes(model, tokens: int) -> tuple[int, int]:
    """(kept, transient) bytes of the embedding, final norm, whole head and chunked cross-entropy on `tokens`
    tokens of one rank (runtime/tiled_loss.py `whole_head_loss`): kept the embedding output and the final norm's
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
    (runtime/tiled_loss.py saves nothing else that is an activation; tests/runtime/test_tiled_loss.py measures it)."""
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
        vocabulary-parallel head's (costmodel/vocab_parallel.py) when 'vocab'."""
        whole = self.inner.fixed(seq_len, batch)
        m = self.inner.model
        if self.head == "whole" or not m.embedding_and_head:
            return whole
        if self.head == "vocab":
            from paradyse_lab.costmodel.vocab_parallel import vocab_fixed

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
    head, runtime/plan_handoff.py `vocab_storage`)."""
    if not model.embedding_and_head:
        return HEAD_OPTIONS[:1]
    return HEAD_OPTIONS if p > 1 else tuple(h for h in HEAD_OPTIONS if h != "vocab")


def head_cost_models(cost_model) -> dict:
    """Head option -> the cost model a plan with it is costed on (`usable_heads`): the whole head first (it wins
    ties), the tiled loss and the vocabulary-parallel head."""
    heads = usable_heads(cost_model.model, cost_model.p)
    return {h: cost_model if h == "whole" else HeadLossCostModel(cost_model, h) for h in heads}
