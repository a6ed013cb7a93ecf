"""Model states of a grouped step (a global batch split over groups of ranks):
what a rank keeps and sends so that every group trains under its own plan while the states stay in one
layout over the whole world (docs/grouped_steps.md).

The world layout: every sub-layer matrix is stored as the unified layout's 1/W row shards (W = world size,
one block per rank, docs/paper.md section 3); norms, output biases, embeddings and head replicated. A step whose
smallest group has g_min ranks uses the data-parallel dimension of the (W/g_min x g_min) device mesh, d = W/g_min
ranks (one per g_min-block), for three collectives, each counted here under the runtime's convention
(all-gather and reduce-scatter S(n-1)/n, all-reduce 2S(n-1)/n):
- all-gather of the flat world shards of every sharded matrix (F = P_s/W elements) -> [d, F];
- reduce-scatter of the gradients laid out the same way -> [F], in fp32 (`formulas.GRAD_REDUCE_BYTES`);
- all-reduce of the replicated gradients (R elements) in fp32 buckets (`formulas.grad_all_reduces`), and one of
  the step's fp32 loss.
Rajbhandari et al., "ZeRO" (SC 2020) stage 3 for the gather / reduce-scatter of sharded states; the hybrid
(shard within, replicate across) split as in Zhao et al., "PyTorch FSDP" (VLDB 2023) hybrid sharding.
"""

from __future__ import annotations

from collections.abc import Sequence

from paradyse_lab.core.model_spec import ModelSpec
from paradyse_lab.costmodel.formulas import (
    GRAD_REDUCE_BYTES,
    embedding_params,
    grad_all_reduces,
    grad_bucket_copy_bytes,
    reduce_scatter_bucket_bytes,
    replicated_params,
    sharded_params,
)

LOSS_BYTES = 4
"""The step's loss is summed over groups in fp32 (one element)."""


def sharded_total(model: ModelSpec) -> int:
    """Elements of every sharded matrix (and input bias) of the model, P_s."""
    return model.layers * (sharded_params(model, "attention") + sharded_params(model, "mlp"))


def replicated_total(model: ModelSpec) -> int:
    """Elements of every replicated tensor (sub-layer norms and output biases, embeddings, final norm, head), R."""
    return 2 * model.layers * replicated_params(model) + embedding_params(model)


def data_parallel_width(world: int, sizes: Sequence[int], model: ModelSpec | None = None) -> int:
    """d = W / g_min: the ranks of one data-parallel group of the mesh the step's state collectives use; W when
    `model`'s 1/W blocks are not whole heads (heads or kv_heads not divisible by W) and a group is strictly
    between 1 and W: its shards are then contiguous row blocks, gathered from the whole world."""
    whole_heads = model is None or (model.heads % world == 0 and model.kv_heads % world == 0)
    if not whole_heads and any(1 < g < world for g in sizes):
        return world
    return world // min(sizes)


def grouped_state_sent_bytes(model: ModelSpec, world: int, sizes: Sequence[int]) -> dict[str, int]:
    """Bytes one rank sends for the states of one grouped step whose groups have `sizes` ranks, by op (nothing
    when one group holds the whole world: d = 1). The same whatever the previous step's sizes: a change of
    group sizes moves no states."""
    d = data_parallel_width(world, sizes, model)
    if d == 1:
        return {}
    elements = sharded_total(model) // world  # one rank's world shard
    replicated = sum(call.sent_bytes for call in grad_all_reduces(replicated_total(model), d))
    return {"all_gather": (d - 1) * elements * model.dtype_bytes,
            "reduce_scatter": (d - 1) * elements * GRAD_REDUCE_BYTES,
            "all_reduce": replicated + 2 * LOSS_BYTES * (d - 1) // d}


def grouped_state_kept_bytes(model: ModelSpec, world: int, size: int, sizes: Sequence[int]) -> dict[str, int]:
    """Bytes a rank of a group of `size` ranks keeps for the states during the step, beside the world shard
    and its optimizer states (`formulas.model_state_bytes_per_param`, at p = W): the group's 1/size shard of
    every sharded matrix (none when one group holds the world: its shards are the world's) and its gradient
    (the strategies' layout at the group's size), and the gradients of the replicated tensors on the group's
    view. Transient (none when one group holds the world): the flat send buffer of the gather (F elements),
    then the [d, F] buffer it fills, beside one tensor's blocks at a time (the reduce phase after the backward:
    `reduce_phase_bytes`)."""
    e = model.dtype_bytes
    group_shard = sharded_total(model) // size * e
    whole = size == world
    flat = sharded_total(model) // world * e
    return {"group_weights": 0 if whole else group_shard, "group_grads": group_shard,
            "replicated_grads": replicated_total(model) * e, "send_buffer": 0 if whole else flat,
            "gather_buffer": 0 if whole else data_parallel_width(world, sizes, model) * flat}


def reduce_phase_bytes(model: ModelSpec, world: int, sizes: Sequence[int]) -> dict[str, int]:
    """Bytes a rank allocates in the step's reduce phase (after the backward, its activations freed), at its peak
    (`reduce_step_grads`): 'world_grads', the gradients of the world shards and of the
    replicated tensors, which are views of the phase's two buffers (the reduce-scatter's [F] output and the [R]
    all-reduce buffer) and part of the model states counted at p = W; with one group of the whole world its
    gradients, sharded and replicated, are the group's own (nothing new). 'transient': what the
    peak holds beyond them, the [d, F] buffer the reduce-scatter reads (alive beside its [F] output, freed
    before the [R] buffer is made) or, with a 16-bit model, the fp32 bucket of the replicated gradients'
    all-reduce (`formulas.grad_bucket_copy_bytes`) beside [R]; the reduce-scatter's fp32 bucket
    (`formulas.reduce_scatter_bucket_bytes`) adds to the [d, F] buffer: max(0, d F + bucket - R, R bucket)."""
    d = data_parallel_width(world, sizes, model)
    e = model.dtype_bytes
    replicated = replicated_total(model) * e
    if d == 1:  # no "dp" peers: the view's gradients become the world's, nothing is allocated
        return {"world_grads": 0, "transient": 0}
    replicated_bucket = grad_bucket_copy_bytes(model, replicated_total(model))
    elements = sharded_total(model) // world
    flat = elements * e
    scatter = d * flat + reduce_scatter_bucket_bytes(model, elements, d) - replicated
    return {"world_grads": flat + replicated, "transient": max(0, scatter, replicated_bucket)}


def rounds_reduce_width(model: ModelSpec, world: int, rounds: Sequence[Sequence[int]]) -> int:
    """d of a step of rounds (each round's group sizes): the widest of its rounds' `data_parallel_width`, the
    "dp" group the runtime reduces the whole step's gradients over, once."""
    return max(data_parallel_width(world, sizes, model) for sizes in rounds)


def rounds_state_sent_bytes(model: ModelSpec, world: int, rounds: Sequence[Sequence[int]]) -> dict[str, int]:
    """Bytes one rank sends for the states of a step of rounds (each round's group sizes), by op: every round's
    own all-gather of its group shards, then one reduce-scatter and one all-reduce (and the loss's) at the
    widest round's width (`rounds_reduce_width`). One round: `grouped_state_sent_bytes`."""
    d = rounds_reduce_width(model, world, rounds)
    reduce = grouped_state_sent_bytes(model, world, (world // d,) * d)  # a split of width d
    gather = sum(grouped_state_sent_bytes(model, world, sizes).get("all_gather", 0) for sizes in rounds)
    out = {"all_gather": gather, **{op: n for op, n in reduce.items() if op != "all_gather"}}
    return {op: n for op, n in out.items() if n}


def rounds_held_bytes(model: ModelSpec, world: int, rounds: Sequence[Sequence[int]]) -> int:
    """Bytes a rank holds from its first round's end to the step's reduction when a step has several rounds:
    the [d, F] buffer of the step's sharded gradients and (at most) the [R] one of its replicated gradients, in the
    reduction dtype (fp32, `formulas.GRAD_REDUCE_BYTES`, for 16-bit models); none with one round (its reduce
    phase is `reduce_phase_bytes`) or when every round is one group of the whole world (d = 1)."""
    d = rounds_reduce_width(model, world, rounds)
    if len(rounds) == 1 or d == 1:
        return 0
    e = max(model.dtype_bytes, GRAD_REDUCE_BYTES)
    return (d * (sharded_total(model) // world) + replicated_total(model)) * e
