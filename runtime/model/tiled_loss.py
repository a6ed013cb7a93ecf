"""The tiled loss: final norm, head and cross-entropy over chunks of tokens, the logits never whole.

Library module (no command). `tiled_head_loss(x, lnf_w, lnf_b, head_w, labels, eps, tile)` returns the summed
cross-entropy of this rank's tokens (fp32, ignore_index -100) as `ParallelGPT`'s head and loss would, but runs
them `tile` tokens at a time: the forward keeps only x (the final norm's input) for the backward, and the
backward recomputes each tile's norm output u = norm(x), its logits u W^T and their fp32 softmax, forms the
logits' gradient softmax - onehot(label) in place, and accumulates dx, dW and the norm's gradients tile by tile.
What one tile holds at its peak is its [tile, V] logits in the model dtype and in fp32: the head's transient
shrinks from the whole [t, V] to one tile, and no [t, V] tensor is kept between forward and backward
(ALST's sequence-tiled loss, Bekman et al., arXiv 2506.13996; Liger kernel's fused linear cross-entropy
does the same per chunk). Its price: the head GEMM u W^T runs once more (in the backward), and the norm again.
The cost model counts the same bytes (`head_loss`).
"""

from __future__ import annotations

import torch

from paradyse_lab.costmodel.head_loss import ce_chunk_rows
from paradyse_lab.runtime.model.reference import norm


def _norm_with_grad(x_tile, lnf_w, lnf_b, eps):
    """u = norm(x_tile) with the graph to its inputs (x_tile, lnf_w, lnf_b as fresh leaves)."""
    leaves = tuple(t.detach().requires_grad_() for t in (x_tile, lnf_w, lnf_b))
    with torch.enable_grad():
        return norm(*leaves, eps), leaves


class TiledHeadLoss(torch.autograd.Function):
    """sum of cross-entropy(norm(x) W^T, labels) over the tokens, `tile` tokens at a time (module docstring)."""

    @staticmethod
    def forward(fctx, x, lnf_w, lnf_b, head_w, labels, eps: float, tile: int):
        h = x.shape[-1]
        flat_x, flat_labels = x.reshape(-1, h), labels.reshape(-1)  # [b, t, h] -> [b*t, h]; [b, t] -> [b*t]
        total = torch.zeros((), dtype=torch.float32, device=x.device)
        for start in range(0, flat_x.shape[0], tile):
            u = norm(flat_x[start:start + tile], lnf_w, lnf_b, eps)  # [tile, h]
            logits = u @ head_w.t()  # [tile, h] x [h, V] -> [tile, V]
            total += cross_entropy_sum(logits, flat_labels[start:start + tile])[0]
            del u, logits
        fctx.eps, fctx.tile = eps, tile
        fctx.save_for_backward(x, lnf_w, lnf_b, head_w, labels)  # x alone is an activation (the rest: states, data)
        return total

    @staticmethod
    def backward(fctx, g):
        x, lnf_w, lnf_b, head_w, labels = fctx.saved_tensors
        h, tile = x.shape[-1], fctx.tile
        flat_x, flat_labels = x.reshape(-1, h), labels.reshape(-1)  # [b, t, h] -> [b*t, h]; [b, t] -> [b*t]
        dx = torch.empty_like(flat_x)
        acc = torch.float32 if head_w.dtype != torch.float32 else head_w.dtype  # dW summed over tiles in fp32
        dw = torch.zeros(head_w.shape, dtype=acc, device=head_w.device)
        dlw, dlb = torch.zeros_like(lnf_w), torch.zeros_like(lnf_b)
        for start in range(0, flat_x.shape[0], tile):
            u, (x_tile, lw, lb) = _norm_with_grad(flat_x[start:start + tile], lnf_w, lnf_b, fctx.eps)  # [tile, h]
            dlogits = _logits_grad(u.detach(), head_w, flat_labels[start:start + tile], g)  # [tile, V]
            dw += (dlogits.t() @ u.detach()).to(acc)  # [V, tile] x [tile, h] -> [V, h]
            du = dlogits @ head_w  # [tile, V] x [V, h] -> [tile, h]
            del dlogits
            grads = torch.autograd.grad(u, (x_tile, lw, lb), du, allow_unused=True)
            dx[start:start + tile] = grads[0]
            dlw += grads[1]
            if grads[2] is not None:
                dlb += grads[2]
        return dx.view_as(x), dlw, dlb, dw.to(head_w.dtype), None, None, None


def _logits_grad(u, head_w, labels, g):
    """d(sum of cross-entropy)/d logits of one tile, logits = u W^T [tile, V], times g, in the logits' dtype:
    the tile's logits and their gradient in the model dtype and one fp32 chunk at a time (the cost model's
    count, `tiled_head_bytes`)."""
    logits = u @ head_w.t()  # [tile, h] x [h, V] -> [tile, V]
    lse = cross_entropy_sum(logits, labels)[1]  # [tile] fp32
    return cross_entropy_grad(logits, lse, labels, g)


def _chunks(rows: int, vocab: int):
    """Row ranges of the chunked cross-entropy (`ce_chunk_rows` rows each)."""
    step = ce_chunk_rows(vocab, rows)
    return ((start, min(start + step, rows)) for start in range(0, rows, step))


def cross_entropy_sum(logits, labels):
    """(summed fp32 cross-entropy, fp32 log-sum-exp [n]) of logits [n, V] (any float dtype) against labels [n]
    (-100 ignored), one fp32 [rows, V] chunk at a time: no fp32 copy of the whole logits."""
    n, vocab = logits.shape
    lse = torch.empty(n, dtype=torch.float32, device=logits.device)  # [n]
    for start, stop in _chunks(n, vocab):
        z = logits[start:stop].to(torch.float32, copy=True)  # [rows, V] fp32, written in place below
        top = z.amax(dim=-1, keepdim=True)  # [rows, 1]
        lse[start:stop] = z.sub_(top).exp_().sum(dim=-1).log_() + top.squeeze(-1)
        del z
    valid = labels != -100
    target = logits.gather(1, labels.clamp(min=0).unsqueeze(1)).squeeze(1).float()  # [n]
    return ((lse - target) * valid).sum(), lse


def cross_entropy_grad(logits, lse, labels, g):
    """g * (softmax(logits) - onehot(labels)) [n, V] in the logits' dtype, zero on ignored rows (-100), from the
    fp32 log-sum-exp [n]: one fp32 [rows, V] chunk at a time, written into the one gradient buffer."""
    n, vocab = logits.shape
    grad = torch.empty_like(logits)  # [n, V]
    valid = labels != -100
    for start, stop in _chunks(n, vocab):
        z = logits[start:stop].to(torch.float32, copy=True)  # [rows, V] fp32
        z.sub_(lse[start:stop].unsqueeze(1)).exp_()  # softmax
        rows = valid[start:stop].nonzero().squeeze(1)  # [valid rows of the chunk]
        z[rows, labels[start:stop][rows]] -= 1.0
        z[~valid[start:stop]] = 0.0
        grad[start:stop].copy_(z.mul_(g))
        del z
    return grad


class ChunkedCrossEntropy(torch.autograd.Function):
    """The summed fp32 cross-entropy of logits [n, V] against labels [n] (-100 ignored): keeps the logits (model
    dtype) and their fp32 log-sum-exp; the backward writes softmax - onehot chunk by chunk (`cross_entropy_sum`,
    `cross_entropy_grad`). The same as F.cross_entropy(logits.float(), reduction="sum") without its fp32 [n, V]
    log-softmax kept and its two fp32 [n, V] gradients."""

    @staticmethod
    def forward(fctx, logits, labels):
        total, lse = cross_entropy_sum(logits, labels)
        fctx.save_for_backward(logits, labels, lse)
        return total

    @staticmethod
    def backward(fctx, g):
        logits, labels, lse = fctx.saved_tensors
        return cross_entropy_grad(logits, lse, labels, g), None


def whole_head_loss(x, lnf_w, lnf_b, head_w, labels, eps: float, keep_logits: bool = False):
    """The summed fp32 cross-entropy of norm(x) W^T against labels (-100 ignored) with the whole logits:
    x [b, t, h], labels [b, t] -> [] (and the logits [b, t, V] when `keep_logits`). It keeps the logits in the
    model dtype and their fp32 log-sum-exp for the backward, which makes the logits' gradient in the model dtype
    and one fp32 chunk at a time (`ChunkedCrossEntropy`, `whole_head_bytes`).
    Training drops the logits (`keep_logits` False): holding them would keep [t, V] in the model dtype through
    the backward, which the cost model does not count (`fixed`)."""
    logits = norm(x, lnf_w, lnf_b, eps) @ head_w.t()  # [b, t, h] x [h, V] -> [b, t, V]
    total = ChunkedCrossEntropy.apply(logits.flatten(0, 1), labels.flatten())  # [b*t, V], [b*t] -> []
    return (total, logits) if keep_logits else total


def tiled_head_loss(x, lnf_w, lnf_b, head_w, labels, eps: float, tile: int) -> torch.Tensor:
    """The summed fp32 cross-entropy of norm(x) W^T against labels (-100 ignored), `tile` tokens at a time:
    x [b, t, h], labels [b, t] -> [] (module docstring)."""
    if tile <= 0:
        raise ValueError(f"tile must be a positive number of tokens, got {tile}")
    return TiledHeadLoss.apply(x, lnf_w, lnf_b, head_w, labels, eps, tile)
