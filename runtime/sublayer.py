"""One sub-layer (attention or MLP) under one strategy, as one autograd node; local math helpers.

Library module (no command). Every strategy module (megatron_ts, megatron_cz, ulysses_z, metp) exposes
`ATTENTION` and `MLP`, each an `Impl` with the same three functions:
- `forward(x, w, ctx, prep) -> (y, saved)`: x, y [b, t, h] in the unified layout; `w` the sub-layer's
  `Weights` (its 1/p shards and replicated vectors); `prep` what `prepare_backward` returned when the
  forward is a recomputation inside the backward, else None;
- `prepare_backward(w, ctx) -> prep`: work the backward needs before anything else (ZeRO-3: gather the
  weights again); None for the others;
- `backward(saved, dy, w, ctx, prep) -> (dx, grads)`: grads of the sub-layer's parameters, each summed over
  all tokens and landing on its owning shard (before the replicated ones are all-reduced here).
`SubLayerFunction` runs them; with `recompute` it keeps only x and re-runs the forward (with its
communication, except what `prepare_backward` already fetched) inside the backward.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F

from runtime import comm
from runtime.layout import PARAM_NAMES, REPLICATED


class Weights(NamedTuple):
    """A sub-layer's parameters on this rank (layout.py): w1 [n1/p, h], b1 [n1/p], w2 [n2/p, h]."""

    ln_w: torch.Tensor
    ln_b: torch.Tensor
    w1: torch.Tensor
    b1: torch.Tensor
    w2: torch.Tensor
    b2: torch.Tensor


@dataclass(frozen=True)
class Ctx:
    """What a strategy needs besides tensors."""

    group: Any
    """Process group (None: the default group)."""
    p: int
    """Ranks in the group."""
    rank: int
    """This rank in the group."""
    kind: str
    """'attention' or 'mlp'."""
    heads: int
    """Attention heads of the model (all ranks together)."""
    causal: bool
    """Causal attention."""
    seq_len: int
    """Full sequence length s."""
    eps: float
    """LayerNorm epsilon."""
    tag: str = ""
    """Label of the sub-layer's communication in `comm.count_bytes` (for example 'layers.0.mlp')."""


@dataclass(frozen=True)
class Impl:
    """One strategy's implementation of one sub-layer kind."""

    name: str
    forward: Callable
    backward: Callable
    prepare_backward: Callable = lambda w, ctx: None


# --- local math (no communication) ---------------------------------------------------------------------

def layer_norm(x, w: Weights, ctx: Ctx):
    """LayerNorm of [.., h]."""
    return F.layer_norm(x, (x.shape[-1],), w.ln_w, w.ln_b, ctx.eps)


def layer_norm_backward(x, w: Weights, ctx: Ctx, du):
    """(dx, d ln_w, d ln_b) of `layer_norm` at x (recomputed locally)."""
    with torch.enable_grad():
        xs, lw, lb = (t.detach().requires_grad_() for t in (x, w.ln_w, w.ln_b))
        u = F.layer_norm(xs, (xs.shape[-1],), lw, lb, ctx.eps)
        return torch.autograd.grad(u, (xs, lw, lb), du)


def gelu(x):
    """GPT-2's tanh-approximated GELU."""
    return F.gelu(x, approximate="tanh")


def gelu_backward(x, dy):
    """d gelu(x) given dy (recomputed locally)."""
    with torch.enable_grad():
        xs = x.detach().requires_grad_()
        return torch.autograd.grad(gelu(xs), xs, dy)[0]


def flat(x: torch.Tensor) -> torch.Tensor:
    """[b, s, n] -> [b*s, n]."""
    return x.reshape(-1, x.shape[-1])  # [b, s, n] -> [b*s, n]


def weight_grad(dy: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """sum over tokens of dy^T x: [b, s, m], [b, s, n] -> [m, n]."""
    return flat(dy).t() @ flat(x)


def _flatten(tree) -> tuple[list[torch.Tensor], Any]:
    """Tensors of a nested tuple/list of tensors (and None), and the structure to rebuild it."""
    if isinstance(tree, (tuple, list)):
        leaves: list[torch.Tensor] = []
        specs = []
        for item in tree:
            sub, spec = _flatten(item)
            leaves += sub
            specs.append((len(sub), spec))
        return leaves, (type(tree), specs)
    if tree is None:
        return [], "none"
    return [tree], "leaf"


def _unflatten(leaves, structure):
    """Inverse of `_flatten`."""
    if structure == "leaf":
        return leaves[0]
    if structure == "none":
        return None
    kind, specs = structure
    out, i = [], 0
    for n, spec in specs:
        out.append(_unflatten(leaves[i:i + n], spec))
        i += n
    return kind(out)


# --- the autograd node ---------------------------------------------------------------------------------

class SubLayerFunction(torch.autograd.Function):
    """y = sub-layer(x) under `impl`; parameters in `PARAM_NAMES` order."""

    @staticmethod
    def forward(fctx, impl: Impl, ctx: Ctx, recompute: bool, x, *params):
        w = Weights(*params)
        with comm.tagged(ctx.tag):
            y, saved = impl.forward(x, w, ctx, None)
        fctx.impl, fctx.ctx, fctx.recompute = impl, ctx, recompute
        leaves, fctx.structure = ([], None) if recompute else _flatten(saved)
        # every tensor kept for backward goes through save_for_backward, so saved_tensors_hooks see them all
        # (the profiler measures kept activations with them: runtime/measure/profiler.py)
        fctx.save_for_backward(x, *params, *leaves)
        return y

    @staticmethod
    def backward(fctx, dy):
        x, *rest = fctx.saved_tensors
        params, leaves = rest[:len(PARAM_NAMES)], rest[len(PARAM_NAMES):]
        w, impl, ctx = Weights(*params), fctx.impl, fctx.ctx
        with comm.tagged(ctx.tag):
            prep = impl.prepare_backward(w, ctx)
            saved = impl.forward(x, w, ctx, prep)[1] if fctx.recompute else _unflatten(leaves, fctx.structure)
            del leaves, rest
            dx, grads = impl.backward(saved, dy.contiguous(), w, ctx, prep)
            rep = [grads[n] for n in REPLICATED]
            buf = comm.all_reduce(torch.cat([g.reshape(-1) for g in rep]), ctx.group)  # [3h] summed over ranks
        for n, piece in zip(REPLICATED, buf.split([g.numel() for g in rep])):
            grads[n] = piece.view_as(grads[n])
        return (None, None, None, dx, *[grads[n].to(p.dtype) for n, p in zip(PARAM_NAMES, params)])


def run_sublayer(impl: Impl, ctx: Ctx, recompute: bool, x: torch.Tensor, params) -> torch.Tensor:
    """Apply one sub-layer: `params` in `PARAM_NAMES` order."""
    return SubLayerFunction.apply(impl, ctx, recompute, x, *params)
