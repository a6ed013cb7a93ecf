"""The checkpointed layer: a block decision (one option for a whole layer) whose option both recomputes and
offloads keeps only the layer's input, in host memory, and recomputes the whole layer in its backward.

Source: ALST (Bekman et al., "Arctic Long Sequence Training", arXiv 2506.13996, section 3: activation checkpoints
of each layer's hidden-states input, offloaded to host memory). At sub-layer granularity each recomputed sub-layer
keeps its own input, so a layer offloads two hidden-state copies per token (the attention's input and the MLP's);
a checkpointed layer offloads one, its input x0 [t, h], and the MLP's input x1 is recomputed from it.

Per rank, for the layer's option o (its attention with o's flags but offload, the MLP likewise):
- host: the attention's offloaded input [t, h]; the MLP moves nothing; nothing is kept on the device.
- time and communication: the attention under o (recomputed, its input offloaded, the copy back prefetched) plus
  the MLP recomputed (or tiled) without offload: the backward recomputes the attention's forward and then runs
  each sub-layer's backward as its own recomputed (or tiled) option does, nothing more.
- transient: the larger of the two phases of the backward, plus the two offloaded sets (its own and its
  neighbour's prefetched one, as every offload): the MLP's backward with the recomputed attention's whole kept set
  live (and the MLP's input with the MLP's own working set), then the attention's backward (the attention's
  recomputed transient, its kept set included).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from paradyse_lab.core.strategies import StrategyOption
from paradyse_lab.costmodel.types import CollectiveCall


def checkpoints_layer(option: StrategyOption, kinds) -> bool:
    """Whether a decision over sub-layers `kinds` under `option` is a checkpointed layer (module docstring): a whole
    layer (attention and MLP), recomputed and offloaded."""
    return set(kinds) == {"attention", "mlp"} and option.recompute and option.offload


@dataclass(frozen=True)
class CheckpointedLayer:
    """What a checkpointed layer costs per rank (module docstring)."""

    time_s: float
    kept_bytes: int
    transient_bytes: int
    host_bytes: int
    collectives: tuple[CollectiveCall, ...]


def checkpointed_layer(cost_model, option: StrategyOption, seq_len: int, batch: int = 1) -> CheckpointedLayer:
    """The checkpointed layer of `option` (recompute and offload) under `cost_model` at (seq_len, batch)."""
    if not checkpoints_layer(option, ("attention", "mlp")):
        raise ValueError(f"{option.name} does not checkpoint a layer: it needs +recompute and +offload")
    on_device = replace(option, offload=False)
    attn = cost_model.sublayer("attention", option, seq_len, batch)
    attn_rec = cost_model.sublayer("attention", on_device, seq_len, batch)
    attn_kept = cost_model.sublayer("attention", replace(on_device, recompute=False), seq_len, batch).kept_bytes
    mlp = cost_model.sublayer("mlp", on_device, seq_len, batch)
    mlp_phase = attn_kept + mlp.kept_bytes + mlp.transient_bytes
    return CheckpointedLayer(
        time_s=attn.time_s + mlp.time_s,
        kept_bytes=0, transient_bytes=max(mlp_phase, attn_rec.transient_bytes) + 2 * attn.host_bytes,
        host_bytes=attn.host_bytes, collectives=attn.collectives + mlp.collectives)
