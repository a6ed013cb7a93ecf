"""ZeRO-3 weights and the ZeRO-3 MLP, shared by megatron_cz and ulysses_z.

Library module (no command). Rajbhandari et al., "ZeRO" (SC 2020) stage 3, as the cost model's ZeRO-3 terms
count it: the sharded parameters of a sub-layer (w1, b1, w2) are all-gathered as one buffer of W elements before
the forward, again before the backward (they are not kept), and each full gradient is reduce-scattered back to its
1/p shard as soon as it is made, summed in fp32 for 16-bit weights (grad_reduce.GRAD_REDUCE_DTYPE: fp32 buckets,
`scatter_grad`).
The gathered w1/b1 rows come grouped by rank (flat_shards.unpack_gathered): for the MLP that is the natural
f order; for attention, head group g's q, k, v rows, group after group.
The MLP keeps (as the cost model counts) x, u = norm(x) [b, t, h], and the activation's input a [b, t, f] (SwiGLU:
gate and up, [b, t, 2f]) and output c [b, t, f].
"""

from __future__ import annotations

import torch

from paradyse_lab.runtime.comm import collectives as comm
from paradyse_lab.runtime.comm import grad_reduce
from paradyse_lab.runtime.model.reference import add_bias
from paradyse_lab.runtime.model.sublayer import (
    Ctx,
    Impl,
    TiledImpl,
    Weights,
    bias_grad,
    grad_accumulator,
    layer_norm,
    layer_norm_backward,
    mlp_core,
    mlp_core_backward,
    weight_grad,
)
from paradyse_lab.runtime.strategies.flat_shards import (
    pack_rows,
    pack_shard,
    unpack_gathered,
    unpack_gathered_rows,
)


def gather_weights(w: Weights, ctx: Ctx):
    """Full (w1 [n1, h], b1 [n1 or 0], w2 [n2, h]) from every rank's shard: one all-gather of [W/p] -> [W].
    w1's rows (and the first GEMM's outputs) come grouped by rank, each group in section order
    (flat_shards.split_sections reads them)."""
    if ctx.p == 1:  # the shard is the whole: nothing to gather
        return w.w1, w.b1, w.w2
    if not w.b1.numel():  # no bias: the shards' rows, [(n1 + n2)/p, h] -> [p(n1 + n2)/p, h]; b1 is empty either way
        w1, w2 = unpack_gathered_rows(comm.all_gather(pack_rows(w.w1, w.w2), ctx.group), ctx.p, w.w1.shape[0])
        return w1, w.b1, w2
    full = comm.all_gather(pack_shard(w.w1, w.b1, w.w2), ctx.group)  # [W/p] -> [W]
    return unpack_gathered(full, ctx.p, w.w1.shape[0], w.w1.shape[1], w.b1.shape[0])


def scatter_grad(g: torch.Tensor, ctx: Ctx, dtype: torch.dtype) -> torch.Tensor:
    """This rank's shard of one full gradient g [p*n, ..] (rows grouped by rank, as the weights were gathered)
    summed over ranks: one reduce-scatter [p*n, ..] -> [n, ..] straight from g (no packed copy), in fp32
    (grad_reduce.reduce_scatter_grads: a 16-bit g reduce-scattered in fp32 buckets, each rounded once into the
    shard; a tiled MLP's fp32 sums reduced as they are). The shard is in g's dtype (the sub-layer's backward casts
    it to the parameter's); on one rank g itself in `dtype`, and an empty g (no bias) is returned as it is.
    Untiled sub-layers call it as soon as g is made, so no two full gradients are alive together."""
    if ctx.p == 1 or not g.numel():  # nothing to sum over, or nothing to sum
        return g.to(dtype)
    return grad_reduce.reduce_scatter_grads(g, ctx.group)  # [p*n, ..] -> [n, ..]


def prepare_backward(w: Weights, ctx: Ctx):
    """The backward's all-gather of the weights."""
    return gather_weights(w, ctx)


def project_in(x, w: Weights, ctx: Ctx, prep=None):
    """A ZeRO-3 sub-layer's way in: ((w1, b1, w2) gathered, or `prep`'s), u = norm(x) [b, t, h] (kept) and the
    first GEMM's output [b, t, n1] (p rank groups of its sections: q | k | v, or gate | up)."""
    w1, b1, w2 = prep if prep is not None else gather_weights(w, ctx)
    u = layer_norm(x, w, ctx)  # [b, t, h], kept
    return (w1, b1, w2), u, add_bias(u @ w1.t(), b1)  # [b, t, h] -> [b, t, n1]


def project_in_backward(x, u, da, sw2, dy, w: Weights, ctx: Ctx, prep):
    """Backward of `project_in` and of the residual, given the first GEMM's output gradient da [b, t, n1] and the
    second GEMM's weight gradient already reduce-scattered, sw2 (`scatter_grad`): (dx [b, t, h], the shards'
    gradients)."""
    w1, b1, _ = prep
    sw1 = scatter_grad(weight_grad(da, u), ctx, w.w1.dtype)  # [n1, h] -> [n1/p, h]
    sb1 = scatter_grad(bias_grad(da, b1), ctx, w.b1.dtype)  # [n1] -> [n1/p]
    dx, dln_w, dln_b = layer_norm_backward(x, w, ctx, da @ w1)  # [b, t, n1] -> [b, t, h]
    grads = {"ln_w": dln_w, "ln_b": dln_b, "w1": sw1, "b1": sb1, "w2": sw2, "b2": bias_grad(dy, w.b2)}
    return dy + dx, grads


def mlp_forward(x, w: Weights, ctx: Ctx, prep=None):
    (w1, b1, w2), u, a = project_in(x, w, ctx, prep)  # a [b, t, f] (SwiGLU: [b, t, 2f], groups of gate | up)
    c = mlp_core(a, ctx, ctx.p)  # [b, t, f]
    return add_bias(x + c @ w2, w.b2), (x, u, a, c)  # [b, t, f] -> [b, t, h]


def mlp_backward(saved, dy, w: Weights, ctx: Ctx, prep):
    x, u, a, c = saved
    w1, b1, w2 = prep
    sw2 = scatter_grad(weight_grad(c, dy), ctx, w.w2.dtype)  # [f, h] -> [f/p, h], not beside dw1
    da = mlp_core_backward(a, dy @ w2.t(), ctx, ctx.p)  # [b, t, h] -> [b, t, f] (SwiGLU: 2f)
    dw1, db1 = weight_grad(da, u), bias_grad(da, b1)
    du = da @ w1  # [b, t, n1] -> [b, t, h]
    del da  # not beside the reduce-scatter or the norm's backward
    sw1 = scatter_grad(dw1, ctx, w.w1.dtype)  # [n1, h] -> [n1/p, h]
    del dw1
    sb1 = scatter_grad(db1, ctx, w.b1.dtype)  # [n1] -> [n1/p]
    dx, dln_w, dln_b = layer_norm_backward(x, w, ctx, du)
    grads = {"ln_w": dln_w, "ln_b": dln_b, "w1": sw1, "b1": sb1, "w2": sw2, "b2": bias_grad(dy, w.b2)}
    return dy + dx, grads


def tiled_mlp_forward(x, w: Weights, ctx: Ctx, tile: int):
    """The MLP `tile` positions of this rank at a time, the weights gathered once."""
    w1, b1, w2 = gather_weights(w, ctx)
    out = []
    for xc in x.split(tile, dim=1):  # [b, c, h] chunks of this rank's positions
        c = mlp_core(add_bias(layer_norm(xc, w, ctx) @ w1.t(), b1), ctx, ctx.p)  # [b, c, h] -> [b, c, n1] -> [b, c, f]
        out.append(add_bias(xc + c @ w2, w.b2))  # [b, c, f] -> [b, c, h]
    return torch.cat(out, dim=1)  # [b, t, h]


def tiled_mlp_backward(x, dy, w: Weights, ctx: Ctx, tile: int):
    """Backward of `tiled_mlp_forward`: the weights gathered once more, each chunk's norm, first GEMM and
    activation recomputed, the full gradients summed over the chunks and reduce-scattered once."""
    w1, b1, w2 = gather_weights(w, ctx)
    dx = torch.empty_like(x)
    dw1, db1, dw2 = grad_accumulator(w1), grad_accumulator(b1), grad_accumulator(w2)  # summed over chunks
    dln_w, dln_b = grad_accumulator(w.ln_w), grad_accumulator(w.ln_b)
    start = 0
    for xc, dyc in zip(x.split(tile, dim=1), dy.split(tile, dim=1)):  # [b, c, h] each
        u = layer_norm(xc, w, ctx)
        a = add_bias(u @ w1.t(), b1)  # [b, c, h] -> [b, c, n1]
        dw2 += weight_grad(mlp_core(a, ctx, ctx.p), dyc)  # [f, h]
        da = mlp_core_backward(a, dyc @ w2.t(), ctx, ctx.p)  # [b, c, h] -> [b, c, n1]
        dw1 += weight_grad(da, u)
        db1 += bias_grad(da, b1)
        dxc, lw, lb = layer_norm_backward(xc, w, ctx, da @ w1)  # [b, c, n1] -> [b, c, h]
        dx[:, start:start + xc.shape[1]] = dyc + dxc
        dln_w += lw
        dln_b += lb
        start += xc.shape[1]
    # the sums reduce-scattered as they are, one at a time
    sw2, sw1, sb1 = (scatter_grad(g, ctx, dtype) for g, dtype in ((dw2, w.w2.dtype), (dw1, w.w1.dtype),
                                                                  (db1, w.b1.dtype)))
    return dx, {"ln_w": dln_w.to(w.ln_w.dtype), "ln_b": dln_b.to(w.ln_b.dtype), "w1": sw1, "b1": sb1, "w2": sw2,
                "b2": bias_grad(dy, w.b2)}


MLP = Impl("zero3", mlp_forward, mlp_backward, prepare_backward)
TILED_MLP = TiledImpl("zero3", tiled_mlp_forward, tiled_mlp_backward)
