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
The layer's shape comes from `Ctx` and the weights: LayerNorm or RMSNorm (empty `ln_b`), biases or none
(empty `b1`, `b2`), GELU or SwiGLU (`ffn_kind`), multi-head or grouped-query attention (`kv_heads`), learned
or rotary positions (`rope_theta`, applied to q and k with `positions` / `all_positions`).
`SubLayerFunction` runs them; with `recompute` it keeps only x and re-runs the forward (with its
communication, except what `prepare_backward` already fetched) inside the backward.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F

from paradyse_lab.runtime.comm import collectives as comm
from paradyse_lab.runtime.comm import grad_reduce
from paradyse_lab.runtime.comm import record as comm_record
from paradyse_lab.runtime.model.layout import gathered_positions, local_positions
from paradyse_lab.runtime.model.packed import pack_positions
from paradyse_lab.runtime.model.reference import norm
from paradyse_lab.runtime.model.rope import cached_rotation, rotate, rotate_backward
from paradyse_lab.runtime.model.weight_shards import PARAM_NAMES, REPLICATED


class Weights(NamedTuple):
    """A sub-layer's parameters on this rank (`weight_shards`): w1 [n1/p, h], b1 [n1/p], w2 [n2/p, h]."""

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
    """Norm epsilon."""
    tag: str = ""
    """Label of the sub-layer's communication in `comm_record.count_bytes` (for example 'layers.0.mlp')."""
    kv_heads: int = 0
    """Key/value heads (grouped-query attention); 0 means `heads`."""
    ffn_kind: str = "gelu"
    """MLP core: 'gelu' or 'swiglu' (w1 rows gate | up: silu(gate) * up)."""
    rope_theta: float = 0.0
    """Rotary embeddings' base; 0: none (learned positions are added before the first layer)."""
    rope_llama3: tuple[float, float, float, int] | None = None
    """Llama 3.1's frequency scaling of the rotary embeddings (rope.llama3_scaled), or None."""
    positions: torch.Tensor | None = None
    """True sequence position of each of this rank's t tokens, in local order: [t] (layout.local_positions);
    rotary embeddings rotate q and k by them."""
    all_positions: torch.Tensor | None = None
    """The same for the whole sequence in rank-major gathered order (every rank's `positions` one after
    another): [s] (layout.gathered_positions); used by the strategies that gather the sequence."""
    doc_ids: torch.Tensor | None = None
    """[t] document index of each local token in its pack (`positions` then restart at each
    document); None: one document."""
    cu_seqlens: torch.Tensor | None = None
    """[n + 1] document offsets of the whole pack, a host (CPU) int64 tensor, from which
    every rank derives the documents of any rank's tokens and the varlen kernels read their offsets without a
    device sync; None: the sequence is one document."""

    @property
    def kv(self) -> int:
        """K/V heads (`heads` without GQA)."""
        return self.kv_heads or self.heads


@lru_cache(maxsize=16)
def _layout_positions(seq_len: int, p: int, r: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(local_positions, gathered_positions) of one sequence on `device`, made once per length as a step makes them
    once for all its sub-layers: a sub-layer run alone (a traced or measured one) then copies nothing to the device
    per call, and finds its rotary tables cached (they are kept per positions tensor)."""
    return local_positions(seq_len, p, r).to(device), gathered_positions(seq_len, p).to(device)


def make_ctx(cfg, group, kind: str, seq_len: int, tag: str = "", device=None, positions=None,
             all_positions=None, doc_ids=None, cu_seqlens=None) -> Ctx:
    """The `Ctx` of one sub-layer of a model config (paradyse_lab.core.model_spec.ModelSpec) on this rank.
    Rotary models get `positions` / `all_positions` as given, else the layout's (layout.local_positions /
    gathered_positions) on `device`: a pack's (`cu_seqlens`: positions within each document, as a model step
    makes them), or one sequence's, made once per length (`_layout_positions`)."""
    p, r = comm.size(group), comm.rank(group)
    rope = getattr(cfg, "rope_theta", 0.0)
    if not rope:
        positions = all_positions = None
    elif cu_seqlens is not None and positions is None:  # a pack: positions restart at every document
        _, local, gathered = pack_positions(cu_seqlens, seq_len, p, r)  # [t], [s] rank-major
        positions = local.to(device or "cpu")
        all_positions = gathered.to(device or "cpu") if all_positions is None else all_positions
    else:
        local, gathered = _layout_positions(seq_len, p, r, str(device or "cpu"))
        positions = local if positions is None else positions
        all_positions = gathered if all_positions is None else all_positions
    return Ctx(group=group, p=p, rank=r, kind=kind, heads=cfg.heads, causal=cfg.causal, seq_len=seq_len,
               eps=cfg.norm_eps, tag=tag, kv_heads=getattr(cfg, "kv_heads", 0),
               ffn_kind=getattr(cfg, "ffn_kind", "gelu"), rope_theta=rope,
               rope_llama3=getattr(cfg, "rope_llama3", None), positions=positions, all_positions=all_positions,
               doc_ids=doc_ids, cu_seqlens=cu_seqlens)


@dataclass(frozen=True)
class Impl:
    """One strategy's implementation of one sub-layer kind."""

    name: str
    forward: Callable
    backward: Callable
    prepare_backward: Callable = lambda w, ctx: None


@dataclass(frozen=True)
class TiledImpl:
    """One strategy's tiled MLP: `forward(x, w, ctx, tile) -> y` keeps nothing,
    `backward(x, dy, w, ctx, tile) -> (dx, grads)` recomputes each chunk of `tile` positions."""

    name: str
    forward: Callable
    backward: Callable


# --- local math (no communication) ---------------------------------------------------------------------

def layer_norm(x, w: Weights, ctx: Ctx):
    """The sub-layer's norm of [.., h]: LayerNorm, or RMSNorm when `ln_b` is empty. Outside autograd (a
    sub-layer's forward) each is one fused operator, `native_layer_norm` / `_fused_rms_norm`, whose output
    equals `F.layer_norm` / `F.rms_norm` bit for bit; under autograd (a caller differentiating through it)
    the differentiable functions."""
    if torch.is_grad_enabled():
        return norm(x, w.ln_w, w.ln_b, ctx.eps)
    if w.ln_b.numel():
        return torch.native_layer_norm(x, (x.shape[-1],), w.ln_w, w.ln_b, ctx.eps)[0]
    return torch.ops.aten._fused_rms_norm(x, [x.shape[-1]], w.ln_w, ctx.eps)[0]


def layer_norm_backward(x, w: Weights, ctx: Ctx, du):
    """(dx, d ln_w, d ln_b) of `layer_norm` at x, its statistics recomputed by one fused operator (d ln_b
    empty under RMSNorm). LayerNorm: aten's `native_layer_norm_backward`. RMSNorm (no CPU backward operator
    in torch): with x^ = x r, r = (mean(x^2) + eps)^-1/2 and g = du w, dx = r (g - x^ mean(g x^)) and
    d ln_w = sum over tokens of du x^, in fp32 for 16-bit inputs."""
    h = x.shape[-1]
    if w.ln_b.numel():
        _, mean, rstd = torch.native_layer_norm(x, (h,), w.ln_w, w.ln_b, ctx.eps)
        dx, dw, db = torch.ops.aten.native_layer_norm_backward(du, x, [h], mean, rstd, w.ln_w, w.ln_b,
                                                               [True, True, True])
        return dx, dw, db
    if x.element_size() < 4:  # 16-bit: the statistics and gradients in fp32
        xs, dus = x.float(), du.float()
        rstd = torch.ops.aten._fused_rms_norm(xs, [h], None, ctx.eps)[1]  # [.., 1]
        xhat = xs * rstd  # [.., h]
    else:
        dus = du
        xhat, rstd = torch.ops.aten._fused_rms_norm(x, [h], None, ctx.eps)  # x^ [.., h], r [.., 1]
    g = dus * w.ln_w  # [.., h]
    dw = (dus * xhat).sum(tuple(range(x.dim() - 1)))  # summed over tokens: [h]
    dx = rstd * (g - xhat * (g * xhat).mean(-1, keepdim=True))  # [.., h]
    return dx.to(x.dtype), dw.to(w.ln_w.dtype), torch.zeros_like(w.ln_b)


def bias_grad(da: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """Gradient of a bias added to da's [b, s, n] rows: summed over tokens; empty without a bias."""
    return da.sum((0, 1)) if bias.numel() else torch.zeros_like(bias)


def mlp_core(a: torch.Tensor, ctx: Ctx, groups: int = 1) -> torch.Tensor:
    """The MLP's activation: GELU(a), or SwiGLU silu(gate) * up of a [.., groups * 2f/groups] whose features
    are `groups` rank groups of (gate, up) (flat_shards.split_sections) -> [.., f] in natural order."""
    if ctx.ffn_kind != "swiglu":
        return gelu(a)
    gate, up = _gate_up(a, groups)
    c = F.silu(gate) * up  # [.., f], or [.., groups, f/groups]
    return c if groups == 1 else c.flatten(-2)  # [.., groups, f/groups] -> [.., f]


def _gate_up(a: torch.Tensor, groups: int):
    """(gate, up) of a SwiGLU GEMM output (`mlp_core`), views: [.., f] each, or [.., groups, f/groups] when
    the features are rank groups."""
    if groups == 1:
        return a.chunk(2, dim=-1)  # [.., 2f] -> [.., f] x 2
    return a.unflatten(-1, (groups, 2, -1)).unbind(-2)  # [.., 2f] -> [.., groups, 2, f/groups] -> 2 x [.., groups, f/g]


def mlp_core_backward(a: torch.Tensor, dc: torch.Tensor, ctx: Ctx, groups: int = 1) -> torch.Tensor:
    """da of `mlp_core` at a given dc (recomputed locally): GELU's by autograd; SwiGLU's explicitly,
    d gate = silu'(gate) dc up and d up = silu(gate) dc, in the layout of a."""
    if ctx.ffn_kind != "swiglu":
        return gelu_backward(a, dc)
    gate, up = _gate_up(a, groups)
    if groups > 1:
        dc = dc.unflatten(-1, (groups, -1))  # [.., f] -> [.., groups, f/groups]
    da = torch.empty_like(a)  # [.., 2f], written in place: no d gate, d up or temporary beside it
    dgate, dup = _gate_up(da, groups)  # views of da, laid out as gate and up in a
    torch.mul(dc, up, out=dgate)
    torch.ops.aten.silu_backward.grad_input(dgate, gate, grad_input=dgate)  # elementwise, in place
    torch.ops.aten.silu.out(gate, out=dup)
    dup.mul_(dc)
    return da


def attention_sections(ctx: Ctx, h: int, parts: int) -> tuple[int, int, int]:
    """Widths of q, k, v in 1/parts of the attention's first GEMM output (parts = p: one rank's shard;
    1: the full, gathered weights): (h, kv, kv) / parts."""
    kv = ctx.kv * (h // ctx.heads)
    return h // parts, kv // parts, kv // parts


def rope_qk(q, k, positions, ctx: Ctx, h: int):
    """q, k [b, n, heads*d] rotated by the tokens' positions [n] (`rope`); unchanged without rotary."""
    if not ctx.rope_theta:
        return q, k
    d = h // ctx.heads
    cos, sin = cached_rotation(positions, d, ctx.rope_theta, q.dtype, ctx.rope_llama3)
    return rotate(q, cos, sin, d), rotate(k, cos, sin, d)


def rope_qk_backward(dq, dk, positions, ctx: Ctx, h: int):
    """dq, dk before the rotation from those after it."""
    if not ctx.rope_theta:
        return dq, dk
    d = h // ctx.heads
    cos, sin = cached_rotation(positions, d, ctx.rope_theta, dq.dtype, ctx.rope_llama3)
    return rotate_backward(dq, cos, sin, d), rotate_backward(dk, cos, sin, d)


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


def grad_accumulator(weight: torch.Tensor) -> torch.Tensor:
    """Zeros to sum `weight`'s gradient over chunks in (the tiled MLP): fp32 for a 16-bit weight, whose
    gradient would otherwise be rounded once per chunk; cast back to the weight's dtype before it is sent."""
    dtype = torch.float32 if weight.element_size() < 4 else weight.dtype
    return torch.zeros(weight.shape, dtype=dtype, device=weight.device)


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
        with comm_record.tagged(ctx.tag):
            y, saved = impl.forward(x, w, ctx, None)
        fctx.impl, fctx.ctx, fctx.recompute = impl, ctx, recompute
        leaves, fctx.structure = ([], None) if recompute else _flatten(saved)
        # every tensor kept for backward goes through save_for_backward, so saved_tensors_hooks see them all
        # (the profiler measures kept activations with them)
        fctx.save_for_backward(x, *params, *leaves)
        return y

    @staticmethod
    def backward(fctx, dy):
        x, *rest = fctx.saved_tensors
        params, leaves = rest[:len(PARAM_NAMES)], rest[len(PARAM_NAMES):]
        w, impl, ctx = Weights(*params), fctx.impl, fctx.ctx
        with comm_record.tagged(ctx.tag):
            prep = impl.prepare_backward(w, ctx)
            saved = impl.forward(x, w, ctx, prep)[1] if fctx.recompute else _unflatten(leaves, fctx.structure)
            del leaves, rest
            dx, grads = impl.backward(saved, dy.contiguous(), w, ctx, prep)
        return (None, None, None, dx, *reduce_replicated(grads, params, ctx))


def reduce_replicated(grads: dict, params, ctx: Ctx) -> list[torch.Tensor]:
    """The gradients of `params` (`PARAM_NAMES` order) from a backward's `grads`, the replicated ones (norm, output
    bias) summed over the ranks in one fp32 all-reduce (`grad_reduce.all_reduce_grads`), each in its parameter's
    dtype."""
    names = [n for n in REPLICATED if grads[n].numel()]  # an absent norm bias / output bias has nothing to sum
    with comm_record.tagged(ctx.tag):  # [h, 2h or 3h] elements summed over ranks in fp32 (GRAD_REDUCE_DTYPE)
        if len(names) == 1 and grads[names[0]].dim() == 1 and grads[names[0]].is_contiguous():
            # RMSNorm without biases: the one gradient, the backward's own [h] buffer, summed in place (no
            # concatenation); the same fp32 bucket all_reduce_grads would use
            grad_reduce.all_reduce_flat_grads_(grads[names[0]], ctx.group)
        else:
            grads.update(zip(names, grad_reduce.all_reduce_grads([grads[n] for n in names], ctx.group)))
    return [grads[n].to(p.dtype) for n, p in zip(PARAM_NAMES, params)]


def run_sublayer(impl: Impl, ctx: Ctx, recompute: bool, x: torch.Tensor, params) -> torch.Tensor:
    """Apply one sub-layer: `params` in `PARAM_NAMES` order."""
    return SubLayerFunction.apply(impl, ctx, recompute, x, *params)
