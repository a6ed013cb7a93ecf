"""The checkpointed layer: a whole layer (attention then MLP) that keeps only its input for the backward.

Library module (no command). ALST's layer checkpoint (Bekman et al., "Arctic Long Sequence Training", arXiv
2506.13996, section 3: each layer's hidden-states input is the checkpoint, offloaded to host memory). A block plan's
layer under `+recompute+offload` runs here: the forward runs the attention and
the MLP keeping nothing but the layer input x0, which the caller's offload moves to host memory; the backward
recomputes the attention's forward (keeping its saved set), runs the MLP's backward from the recomputed MLP input x1
(recomputing the MLP, or a tiled MLP chunk by chunk, as the sub-layer options do), then the attention's backward.
So each sub-layer communicates and computes exactly what it does as a recomputed (or tiled) sub-layer of its own,
and one hidden-state copy per layer waits in host memory instead of two.
"""

from __future__ import annotations

import torch

from paradyse_lab.runtime.comm import record as comm_record
from paradyse_lab.runtime.model.sublayer import Ctx, Impl, TiledImpl, Weights, reduce_replicated
from paradyse_lab.runtime.model.weight_shards import PARAM_NAMES


class CheckpointedLayerFunction(torch.autograd.Function):
    """y = MLP(attention(x)) keeping only x; parameters: the attention's then the MLP's, each in `PARAM_NAMES`
    order. `mlp` is an `Impl` (recomputed in the backward) or a `TiledImpl` (tiled over `tile` positions)."""

    @staticmethod
    def forward(fctx, attn: Impl, mlp, ctxs: tuple[Ctx, Ctx], tile: int, x, *params):
        n = len(PARAM_NAMES)
        wa, wm = Weights(*params[:n]), Weights(*params[n:])
        with comm_record.tagged(ctxs[0].tag):
            x1 = attn.forward(x, wa, ctxs[0], None)[0]  # [b, t, h] -> [b, t, h], its saved set dropped
        with comm_record.tagged(ctxs[1].tag):
            y = mlp.forward(x1, wm, ctxs[1], tile) if isinstance(mlp, TiledImpl) else mlp.forward(x1, wm, ctxs[1],
                                                                                                 None)[0]
        fctx.attn, fctx.mlp, fctx.ctxs, fctx.tile = attn, mlp, ctxs, tile
        fctx.save_for_backward(x, *params)  # x alone is an activation (the rest: model states)
        return y

    @staticmethod
    def backward(fctx, dy):
        x, *params = fctx.saved_tensors
        n = len(PARAM_NAMES)
        pa, pm = params[:n], params[n:]
        wa, wm = Weights(*pa), Weights(*pm)
        (ca, cm), attn, mlp, dy = fctx.ctxs, fctx.attn, fctx.mlp, dy.contiguous()
        with comm_record.tagged(ca.tag):
            prep_a = attn.prepare_backward(wa, ca)
            x1, saved_a = attn.forward(x, wa, ca, prep_a)  # the attention recomputed, its saved set kept
        with comm_record.tagged(cm.tag):
            if isinstance(mlp, TiledImpl):
                dx1, grads_m = mlp.backward(x1, dy, wm, cm, fctx.tile)
            else:
                prep_m = mlp.prepare_backward(wm, cm)
                saved_m = mlp.forward(x1, wm, cm, prep_m)[1]
                dx1, grads_m = mlp.backward(saved_m, dy, wm, cm, prep_m)
                del saved_m
        del x1
        with comm_record.tagged(ca.tag):
            dx, grads_a = attn.backward(saved_a, dx1, wa, ca, prep_a)
        return (None, None, None, None, dx, *reduce_replicated(grads_a, pa, ca), *reduce_replicated(grads_m, pm, cm))


def run_checkpointed_layer(attn: Impl, mlp, ctxs: tuple[Ctx, Ctx], tile: int, x: torch.Tensor, attn_params,
                           mlp_params) -> torch.Tensor:
    """Apply one checkpointed layer (x [b, t, h] -> [b, t, h]); `mlp` an `Impl`, or a `TiledImpl` over `tile`
    positions; each parameter list in `PARAM_NAMES` order."""
    return CheckpointedLayerFunction.apply(attn, mlp, tuple(ctxs), tile, x, *attn_params, *mlp_params)
