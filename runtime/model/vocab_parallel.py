"""The vocabulary-parallel embedding and head: token embedding and head rows sharded over the group by vocabulary.

Library module (no command; `ParallelGPT(..., vocab_parallel=True)` runs it). The scheme is Megatron-LM's
(Shoeybi et al., arXiv 1909.08053 section 3; megatron/core/tensor_parallel/layers.py `VocabParallelEmbedding` and
cross_entropy.py `VocabParallelCrossEntropy`; with sequence parallelism, Korthikanti et al., MLSys 2023 section
4.2.2), on the unified layout ([b, s/p, h] per rank in and out) and tiled over tokens like the tiled loss
(`tiled_loss`), so neither the logits nor the gathered activations are ever whole:

- Rows: rank r holds rows r R .. (r + 1) R of the vocabulary as one [R, h] tensor, R = ceil(V / p)
  (`vocab_shard_rows`). Rows past V (the last ranks' when p does not divide V, as V = 50257 or 128256 at p = 3)
  are padding: zero, never looked up, and their logits are -inf, so they never win the softmax and their
  gradient is zero.
- Embedding, per tile of k of this rank's tokens: all-gather the ids [k] -> [p k]; look up the rows this rank
  owns, zero for the others [p k, h]; reduce-scatter -> [k, h] (Megatron's embedding followed by
  `reduce_scatter_to_sequence_parallel_region`). Backward: all-gather the output's gradient [k, h] -> [p k, h]
  and the ids again, and add each owned row's gradient to the shard.
- Head and loss, per tile of k tokens: u = norm(x) [k, h] and its labels [k] all-gathered to [p k, h], [p k];
  this rank's logits u W_r^T [p k, R] in the model dtype; their row maximum all-reduced with MAX; the sum of
  exp(logit - max) (in fp32, one chunk of rows at a time as the tiled loss's cross-entropy) and the
  target's logit (taken by the rank whose rows hold the target, zero elsewhere) all-reduced together [2, p k];
  loss = max + log(sum) - target. The forward keeps x [n, h] and the log-sum-exp of every gathered row [p n]
  fp32; the backward all-gathers the loss's gradient of each rank (a scalar), then per tile recomputes u and the
  logits (the tiled loss's price), writes g (softmax - onehot) of its own columns into one gradient buffer in
  the model dtype chunk by chunk, adds dlogits^T U to dW_r and reduce-scatters dU = dlogits W_r [p k, h] ->
  [k, h] (the partial sums over the vocabulary slices).
Each rank's loss is the sum over its own tokens (the model sums the ranks' shares, as it does for the whole head).
The cost model counts the bytes sent and kept (`head_loss`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from paradyse_lab.runtime.comm import autograd as comm_autograd
from paradyse_lab.runtime.comm import collectives as comm
from paradyse_lab.runtime.comm import record as comm_record
from paradyse_lab.runtime.model.reference import norm
from paradyse_lab.runtime.model.tiled_loss import _chunks, _norm_with_grad


def vocab_shard_rows(vocab: int, p: int) -> int:
    """Rows R of each rank's shard: ceil(V / p)."""
    return -(-vocab // p)


def vocab_range(vocab: int, p: int, r: int) -> tuple[int, int]:
    """(first, last + 1) vocabulary row rank r holds (the rest of its R rows are padding; empty when V <= r R)."""
    rows = vocab_shard_rows(vocab, p)
    return min(r * rows, vocab), min((r + 1) * rows, vocab)


def shard_vocab_rows(full: torch.Tensor, r: int, p: int) -> torch.Tensor:
    """Rank r's padded shard of a [V, h] matrix: [R, h], rows past V zero."""
    start, stop = vocab_range(full.shape[0], p, r)
    out = full.new_zeros((vocab_shard_rows(full.shape[0], p), *full.shape[1:]))
    out[:stop - start] = full[start:stop]
    return out


def unshard_vocab_rows(shards: torch.Tensor, vocab: int) -> torch.Tensor:
    """Inverse of `shard_vocab_rows` over all ranks' shards stacked rank-major: [p, R, h] -> [V, h]."""
    return shards.reshape(-1, shards.shape[-1])[:vocab]  # [p, R, h] -> [p R, h] -> [V, h]


def _tiles(n: int, tile: int):
    """(start, size) of each tile of `tile` tokens over n (the last may be shorter)."""
    return [(start, min(tile, n - start)) for start in range(0, n, tile)]


def _owned(ids: torch.Tensor, start: int, rows: int):
    """(row in this rank's shard, or 0 outside it; mask of the ids outside it): [m] -> [m], [m]."""
    local = ids - start
    outside = (local < 0) | (local >= rows)
    return local.masked_fill(outside, 0), outside


class VocabParallelEmbedding(torch.autograd.Function):
    """ids [b, t] -> embeddings [b, t, h] from the rank's vocabulary shard [R, h] (module docstring)."""

    @staticmethod
    def forward(fctx, ids, weight, group, start: int, rows: int, tile: int):
        flat = ids.reshape(-1)  # [b, t] -> [n]
        out = torch.empty(flat.numel(), weight.shape[1], dtype=weight.dtype, device=weight.device)
        with comm_record.tagged("embedding"):
            for first, k in _tiles(flat.numel(), tile):
                local, outside = _owned(comm.all_gather(flat[first:first + k], group), start, rows)  # [k] -> [p k]
                part = F.embedding(local, weight).masked_fill_(outside.unsqueeze(1), 0.0)  # [p k, h], owned rows
                out[first:first + k] = comm.reduce_scatter(part, group)  # [p k, h] summed -> [k, h]
        fctx.save_for_backward(ids)  # data, not an activation
        fctx.group, fctx.start, fctx.rows, fctx.tile, fctx.shard_rows = group, start, rows, tile, weight.shape[0]
        return out.view(*ids.shape, -1)  # [n, h] -> [b, t, h]

    @staticmethod
    def backward(fctx, dy):
        (ids,) = fctx.saved_tensors
        flat, h = ids.reshape(-1), dy.shape[-1]
        flat_dy = dy.reshape(-1, h)  # [b, t, h] -> [n, h]
        weight_dtype = dy.dtype
        acc = torch.float32 if weight_dtype != torch.float32 else weight_dtype  # summed over tiles in fp32
        dw = torch.zeros(fctx.shard_rows, h, dtype=acc, device=dy.device)
        with comm_record.tagged("embedding"):
            for first, k in _tiles(flat.numel(), fctx.tile):
                local, outside = _owned(comm.all_gather(flat[first:first + k], fctx.group), fctx.start, fctx.rows)
                big_dy = comm.all_gather(flat_dy[first:first + k], fctx.group)  # [k, h] -> [p k, h]
                inside = ~outside
                dw.index_add_(0, local[inside], big_dy[inside].to(acc))  # [owned, h] into [R, h]
        return None, dw.to(weight_dtype), None, None, None, None


def vocab_parallel_embedding(ids, weight, group, vocab: int, tile: int) -> torch.Tensor:
    """Embeddings [b, t, h] of this rank's ids [b, t] from its shard `weight` [R, h] of the [V, h] table,
    `tile` tokens per all-gather / reduce-scatter (module docstring)."""
    p, r = comm.size(group), comm.rank(group)
    start, stop = vocab_range(vocab, p, r)
    tile = max(1, min(tile, ids.numel())) if tile > 0 else max(1, ids.numel())
    return VocabParallelEmbedding.apply(ids, weight, group, start, stop - start, tile)


def _masked_logits(big_u: torch.Tensor, weight: torch.Tensor, rows: int) -> torch.Tensor:
    """This rank's logits of the gathered rows in the model dtype, its padding columns -inf: [p k, h] -> [p k, R]."""
    logits = big_u @ weight.t()  # [p k, h] x [h, R] -> [p k, R]
    if rows < weight.shape[0]:
        logits[:, rows:] = float("-inf")
    return logits


def _lse_and_target(logits, labels, start: int, rows: int, group):
    """(log-sum-exp over the whole vocabulary, target logit) of each gathered row, fp32: [p k, R] -> [p k], [p k].
    The fp32 exponentials are made one chunk of rows at a time (the tiled loss's chunks)."""
    peak = logits.amax(dim=-1).float()  # [p k] this rank's columns
    comm.all_reduce(peak, group, op="max")  # [p k] the maximum over the vocabulary
    local, outside = _owned(labels, start, rows)
    sums = torch.empty(2, logits.shape[0], dtype=torch.float32, device=logits.device)  # [2, p k]
    sums[1] = logits.gather(1, local.unsqueeze(1)).squeeze(1).float().masked_fill_(outside, 0.0)  # owner only
    for first, stop in _chunks(*logits.shape):
        z = logits[first:stop].to(torch.float32, copy=True)  # [rows, R] fp32
        sums[0, first:stop] = z.sub_(peak[first:stop].unsqueeze(1)).exp_().sum(dim=-1)
        del z
    comm.all_reduce(sums, group)  # [2, p k] summed over the vocabulary slices
    return peak + sums[0].log(), sums[1]


def _logits_grad(logits, rows: int, lse, labels, start: int, g_rows):
    """d loss / d logits of this rank's columns, g times (softmax - onehot(label)), zero on ignored rows (-100),
    in the logits' dtype [p k, R], one fp32 chunk of rows at a time written into the one gradient buffer."""
    grad = torch.empty_like(logits)  # [p k, R]
    local, outside = _owned(labels, start, rows)
    for first, stop in _chunks(*logits.shape):
        z = logits[first:stop].to(torch.float32, copy=True).sub_(lse[first:stop].unsqueeze(1)).exp_()  # softmax
        inside = (~outside[first:stop]).nonzero().squeeze(1)  # [rows of the chunk whose target this rank holds]
        z[inside, local[first:stop][inside]] -= 1.0
        z[labels[first:stop] == -100] = 0.0
        grad[first:stop].copy_(z.mul_(g_rows[first:stop].unsqueeze(1)))
        del z
    return grad


class VocabParallelHeadLoss(torch.autograd.Function):
    """Sum of the cross-entropy of this rank's tokens against the vocabulary-sharded head (module docstring)."""

    @staticmethod
    def forward(fctx, x, lnf_w, lnf_b, weight, labels, eps: float, tile: int, group, start: int, rows: int):
        p, r, h = comm.size(group), comm.rank(group), x.shape[-1]
        flat_x, flat_labels = x.reshape(-1, h), labels.reshape(-1)  # [b, t, h] -> [n, h]; [b, t] -> [n]
        lse = torch.empty(p * flat_x.shape[0], dtype=torch.float32, device=x.device)  # [p n], kept
        total = torch.zeros((), dtype=torch.float32, device=x.device)
        with comm_record.tagged("head"):
            for first, k in _tiles(flat_x.shape[0], tile):
                big_u = comm.all_gather(norm(flat_x[first:first + k], lnf_w, lnf_b, eps), group)  # [k, h] -> [p k, h]
                big_labels = comm.all_gather(flat_labels[first:first + k], group)  # [k] -> [p k]
                logits = _masked_logits(big_u, weight, rows)  # [p k, R]
                del big_u
                tile_lse, target = _lse_and_target(logits, big_labels, start, rows, group)  # [p k] each
                del logits
                lse[p * first:p * (first + k)] = tile_lse
                own = slice(r * k, (r + 1) * k)  # this rank's tokens among the gathered rows
                total += torch.where(big_labels[own] != -100, tile_lse[own] - target[own], 0.0).sum()
        fctx.eps, fctx.tile, fctx.group, fctx.start, fctx.rows = eps, tile, group, start, rows
        fctx.save_for_backward(x, lnf_w, lnf_b, weight, labels, lse)  # activations: x and lse
        return total

    @staticmethod
    def backward(fctx, g):
        x, lnf_w, lnf_b, weight, labels, lse = fctx.saved_tensors
        group, h = fctx.group, x.shape[-1]
        p = comm.size(group)
        flat_x, flat_labels = x.reshape(-1, h), labels.reshape(-1)  # [b, t, h] -> [n, h]; [b, t] -> [n]
        dx = torch.empty_like(flat_x)
        acc = torch.float32 if weight.dtype != torch.float32 else weight.dtype  # dW summed over tiles in fp32
        dw = torch.zeros(weight.shape, dtype=acc, device=weight.device)
        dlw, dlb = torch.zeros_like(lnf_w), torch.zeros_like(lnf_b)
        with comm_record.tagged("head"):
            g_ranks = comm.all_gather(g.reshape(1).float(), group)  # [1] -> [p]: each rank's loss gradient
            for first, k in _tiles(flat_x.shape[0], fctx.tile):
                u, leaves = _norm_with_grad(flat_x[first:first + k], lnf_w, lnf_b, fctx.eps)  # [k, h]
                big_u = comm.all_gather(u.detach(), group)  # [k, h] -> [p k, h]
                big_labels = comm.all_gather(flat_labels[first:first + k], group)  # [k] -> [p k]
                logits = _masked_logits(big_u, weight, fctx.rows)  # [p k, R], again
                dlogits = _logits_grad(logits, fctx.rows, lse[p * first:p * (first + k)], big_labels, fctx.start,
                                       g_ranks.repeat_interleave(k))  # [p k, R]
                del logits
                dw += (dlogits.t() @ big_u).to(acc)  # [R, p k] x [p k, h] -> [R, h]
                del big_u
                du = comm.reduce_scatter(dlogits @ weight, group)  # [p k, R] x [R, h] -> [p k, h] -> [k, h]
                del dlogits
                grads = torch.autograd.grad(u, leaves, du, allow_unused=True)
                dx[first:first + k] = grads[0]
                dlw += grads[1]
                if grads[2] is not None:
                    dlb += grads[2]
        return dx.view_as(x), dlw, dlb, dw.to(weight.dtype), None, None, None, None, None, None


def vocab_parallel_loss(x, lnf_w, lnf_b, weight, labels, eps: float, tile: int, group, vocab: int) -> torch.Tensor:
    """Summed fp32 cross-entropy of this rank's tokens, norm(x) against the vocabulary-sharded head `weight`
    [R, h]: x [b, t, h], labels [b, t] (-100 ignored) -> []; `tile` tokens per rank at a time (0: all)."""
    p, r = comm.size(group), comm.rank(group)
    start, stop = vocab_range(vocab, p, r)
    tile = max(1, min(tile, labels.numel())) if tile > 0 else max(1, labels.numel())
    return VocabParallelHeadLoss.apply(x, lnf_w, lnf_b, weight, labels, eps, tile, group, start, stop - start)


def vocab_parallel_logits(u: torch.Tensor, weight: torch.Tensor, group, vocab: int) -> torch.Tensor:
    """The logits of this rank's tokens over the whole vocabulary from the sharded head: u [b, t, h] ->
    [b, t, V] (all-gather u, this rank's columns of every token, all-to-all each token's columns to its rank)."""
    b, t, h = u.shape
    p = comm.size(group)
    with comm_record.tagged("head"):
        big_u = comm_autograd.all_gather_autograd(u.reshape(-1, h), group)  # [n, h] -> [p n, h] rank-major
        part = big_u @ weight.t()  # [p n, h] x [h, R] -> [p n, R]: rows of rank j's tokens, this rank's columns
        mine = comm_autograd.all_to_all_autograd(part, group)  # [p(token owner) n, R] -> [p(vocabulary slice) n, R]
    rows = weight.shape[0]
    full = mine.view(p, b * t, rows).transpose(0, 1).reshape(b * t, p * rows)  # [p, n, R] -> [n, p R]
    return full[:, :vocab].reshape(b, t, vocab)  # [n, V] -> [b, t, V]
