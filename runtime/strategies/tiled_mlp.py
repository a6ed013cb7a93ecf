"""The tiled MLP: an MLP sub-layer run over chunks of the sequence, keeping only its input for the backward.

Library module (no command). ALST's TiledMLP (Bekman et al., "Arctic Long Sequence Training", arXiv
2506.13996, section 3; DeepSpeed `TiledMLP`): the forward runs the MLP on `tile` of this rank's positions at a
time and keeps only the sub-layer input x [b, t, h]; the backward recomputes each chunk's norm, first GEMM and
activation and runs that chunk's backward, summing the weight gradients over the chunks. So the [tokens, ffn]
intermediates (and their gradients) exist one chunk at a time. Each strategy module has its own `TILED_MLP`
(a `sublayer.TiledImpl`) that keeps its communication: megatron_ts gathers and scatters each chunk;
megatron_cz and ulysses_z gather the weights once per pass and reduce-scatter the gradient
once; metp passes its shards around the ring once per pass and applies each to every chunk. What it costs
and keeps: the cost model's `techniques`; the chunk size: `techniques.mlp_tile_positions` (ALST's rule,
about `hidden` positions), or the caller's.
"""

from __future__ import annotations

import torch

from paradyse_lab.runtime.comm import record as comm_record
from paradyse_lab.runtime.model.sublayer import Ctx, TiledImpl, Weights, reduce_replicated
from paradyse_lab.runtime.model.weight_shards import PARAM_NAMES


class TiledMLPFunction(torch.autograd.Function):
    """y = MLP(x) under `impl`, `tile` positions at a time; parameters in `PARAM_NAMES` order."""

    @staticmethod
    def forward(fctx, impl: TiledImpl, ctx: Ctx, tile: int, x, *params):
        with comm_record.tagged(ctx.tag):
            y = impl.forward(x, Weights(*params), ctx, tile)
        fctx.impl, fctx.ctx, fctx.tile = impl, ctx, tile
        fctx.save_for_backward(x, *params)  # x alone is an activation (the rest: model states)
        return y

    @staticmethod
    def backward(fctx, dy):
        x, *params = fctx.saved_tensors
        with comm_record.tagged(fctx.ctx.tag):
            dx, grads = fctx.impl.backward(x, dy.contiguous(), Weights(*params), fctx.ctx, fctx.tile)
        return (None, None, None, dx, *reduce_replicated(grads, params, fctx.ctx))


def run_tiled_mlp(impl: TiledImpl, ctx: Ctx, tile: int, x: torch.Tensor, params) -> torch.Tensor:
    """Apply one MLP sub-layer tiled over `tile` positions (x [b, t, h]); `params` in `PARAM_NAMES` order."""
    if tile <= 0:
        raise ValueError(f"tile must be a positive number of positions, got {tile}")
    if len(params) != len(PARAM_NAMES):
        raise ValueError(f"expected {len(PARAM_NAMES)} parameters, got {len(params)}")
    return TiledMLPFunction.apply(impl, ctx, tile, x, *params)
