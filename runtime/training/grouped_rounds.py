"""A step as rounds of group splits: the rounds of a `paradyse_lab.core.step_rounds.StepRounds` run one after
another on their groups' meshes, their gradients summed on each rank and reduced over the groups once, after the
last round (docs/grouped_steps.md).

Library module (no command). Each round is a grouped step's compute: its own
gather of the group shards from the world shards (over the "dp" dimension of its smallest group's mesh), its
groups' items trained under their plans. The gradient of a sharded tensor is kept, between rounds, in one
[d, F] buffer of the world blocks of the step's reduction mesh: the "dp" dimension of the smallest group of any
round (`step_gather`; the whole world when a round's shards are contiguous), d = W / that size. Row k holds
world block rank % g + k g, and every round's group shard is made of such blocks (its blocks rank % g' + k' g',
g dividing g'; contiguous: g = 1, every block), so each round adds its group's gradient at its blocks' rows and
one reduce-scatter over that "dp" group after the last round gives every world block each group's gradient of
each round exactly once (one rank of each group holds a block, and it is in the block owner's "dp" group). The
replicated tensors' gradients are summed into one [R] buffer by each group's first g ranks only, and the loss
likewise; both are all-reduced over the same "dp" group once. For 16-bit weights both buffers are fp32
(grad_reduce.GRAD_REDUCE_DTYPE) and rounded once after the reduction. One round runs exactly as a grouped step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from paradyse_lab.core.step_rounds import StepRounds
from paradyse_lab.runtime.comm import collectives as comm
from paradyse_lab.runtime.comm import record as comm_record
from paradyse_lab.runtime.comm.grad_reduce import grad_reduce_dtype
from paradyse_lab.runtime.training.grouped import (
    STATES_TAG,
    StepMeshes,
    add_replicated_grads,
    all_reduce_replicated,
    check_grouped_step,
    group_view,
    grouped_step,
    make_step_subgroups,
    place_group_grads,
    reduce_replicated_grads,
    reduce_scattered_grads,
    scatter_group_grads,
    state_numels,
    step_gather,
    train_group_items,
)


def reduction_mesh(cfg, step: StepRounds, world: int) -> int:
    """The group size g whose mesh's "dp" dimension reduces the step's gradients: the smallest of the rounds'
    gather meshes (`step_gather`: 1 when any round's shards are contiguous)."""
    return min(step_gather(cfg, r.sizes, world)[0] for r in step.rounds)


class RoundGrads:
    """The gradients of a step's rounds summed on this rank (module docstring), reduced once by `reduce`."""

    def __init__(self, model, g: int, dp):
        self.model, self.g, self.dp = model, g, dp
        self.sharded: torch.Tensor | None = None  # [d, F], made at the first round's end
        self.replicated: torch.Tensor | None = None  # [R], made at the first round this rank contributes to

    def add(self, view, size: int, contiguous: bool, contributes: bool) -> None:
        """Add a round's view gradients (this rank in a group of `size`; `contiguous` shards; `contributes`: one
        of its group's first g ranks) to the step's."""
        model = self.model
        if self.g == model.p:  # every round one group of the whole world: the view's gradients are the world's
            scatter_group_grads(model, view, size, self.g, self.dp, contiguous)
            reduce_replicated_grads(model, view, contributes, self.dp)
            return
        if self.sharded is None:
            self.sharded = self._zeros(model.p // self.g, state_numels(model)[0])  # [d, F]
        place_group_grads(model, view, size, self.g, self.sharded, contiguous)
        if contributes:
            if self.replicated is None:
                self.replicated = self._zeros(state_numels(model)[1])  # [R]
            add_replicated_grads(model, view, self.replicated)

    def _zeros(self, *shape: int) -> torch.Tensor:
        """A zero buffer in the gradients' reduction dtype (fp32 for 16-bit weights), on the model's device."""
        wte = self.model.wte
        return torch.zeros(*shape, dtype=grad_reduce_dtype(wte.dtype), device=wte.device)

    def reduce(self) -> None:
        """The summed gradients reduced over the groups onto the world model's `.grad`: one reduce-scatter of the
        [d, F] buffer, one all-reduce of the [R] buffer (zeros on a rank that contributed to no round)."""
        model = self.model
        if self.g == model.p:
            return
        sharded, self.sharded = self.sharded, None
        reduce_scattered_grads(model, sharded, self.dp)  # [d*F] -> [F]
        del sharded
        replicated, self.replicated = self.replicated, None
        if replicated is None:
            replicated = self._zeros(state_numels(model)[1])  # [R]
        all_reduce_replicated(model, replicated, self.dp)


def rounds_step(model, step: StepRounds, meshes: StepMeshes, load_item: Callable, targets: Sequence[int],
                loss_tiles: Sequence[int] = ()) -> float:
    """Forward and backward of the global batch of `step`, its rounds one after another, on the world model
    `model` (every rank calls it); `load_item(i, sp_group)`, `targets[i]` and `loss_tiles[i]` by the step's item i,
    as `grouped_step` takes them. The world shards' `.grad` get the gradient of the mean loss over every target of
    the batch, reduced once after the last round; returns that loss (on every rank)."""
    if len(step.rounds) == 1:  # one split: the grouped step itself (its reduce phase as the cost model counts it)
        items = step.items[0]
        return grouped_step(model, step.rounds[0], meshes, lambda j, sp: load_item(items[j], sp),
                            [targets[i] for i in items], [loss_tiles[i] for i in items] if loss_tiles else ())
    for r in step.rounds:
        check_grouped_step(model.cfg, r, meshes)
    make_step_subgroups(step.rounds, model.p)
    rank = model.rank
    g = reduction_mesh(model.cfg, step, model.p)
    dp_reduce = meshes.group(g, "dp")
    grads = RoundGrads(model, g, dp_reduce)
    loss_sum = torch.zeros(1, dtype=torch.float32, device=model.wte.device)  # [1]
    for r, items in zip(step.rounds, step.items):
        group = r.group_of(rank)
        g_min, contiguous = step_gather(model.cfg, r.sizes, model.p)
        sp = meshes.group(group.size, "sp")
        view = group_view(model, group.size, g_min, meshes.group(g_min, "dp"), sp, contiguous)
        loss = train_group_items(view, group, sp, load_item, targets, loss_tiles, items)
        contributes = rank - group.start < g  # one rank per group in each "dp" group of the reduction mesh
        grads.add(view, group.size, contiguous, contributes)
        if contributes:
            loss_sum += loss
        del view  # its group shard and gradients, before the next round gathers its own
    grads.reduce()
    with comm_record.tagged(STATES_TAG):
        step_loss = comm.all_reduce(loss_sum, dp_reduce)  # [1] summed over the groups
    return float(step_loss[0])
