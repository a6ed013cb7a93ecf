"""Distributed cases of the strategies that make their own process subgroups (Ulysses x ring `ulysses_ring:a`,
tensor x context parallel `megatron_cp:a`) and of uneven heads (`ulysses_uneven`) inside a layer group smaller
than the world: grouped steps (runtime/training/grouped.py, grouped_rounds.py) in the world of 4 whose groups of
two ranks run plans that name them, beside a group of four (the world, shard exchange included) in another round
and groups of one in another step. Each step's loss and every world gradient equal the single-device reference's
over the whole global batch (8 heads: interleaved group shards; 5 heads: contiguous ones, the heads split
unevenly at p = 2); the even model's steps also send the bytes of the cost model (grouped_cases' checks).
The hazard case: the two ranks of a group of two have made different numbers of process groups before the step
(as ranks from two different groups of two have, in a world of eight, when they meet in a group of four): the
group's subgroups must still be made, and the step must still equal the reference. And `train --global-batch`
runs whose groups of two run them (fixed groups, and groups sized per step) train as four groups of one do.
Read by runtime_cases.py, which adds these cases to its world."""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist
from grouped_cases import _batch, _check_step, _meshes, _reference_grads
from runtime_cases import TOL, grad_of, random_state
from torch.testing import assert_close

from paradyse_lab.core.model_spec import ModelSpec
from paradyse_lab.core.plan import Plan
from paradyse_lab.core.step_groups import GroupedStep, StepGroup
from paradyse_lab.core.step_rounds import StepRounds
from paradyse_lab.runtime import ParallelGPT, shard_sequence
from paradyse_lab.runtime.comm.group_timeout import run_timeout, set_run_timeout
from paradyse_lab.runtime.model.weight_shards import shard_state_dict
from paradyse_lab.runtime.strategies import ulysses_ring
from paradyse_lab.runtime.strategies.ulysses_ring import forget_subgroups
from paradyse_lab.runtime.training.grouped_rounds import rounds_step

LAYERS = 2
LENGTHS = (24, 8, 16, 8)
"""The global batch's sequence lengths (multiples of 2g for every group size g up to 4: the zig-zag ring)."""


def _gpt(heads: int, d: int) -> ModelSpec:
    """A 2-layer GPT-2-shaped model of `heads` heads of width d (vocab 256): the groups are the subject."""
    return ModelSpec(vocab_size=256, max_positions=64, hidden=heads * d, heads=heads, layers=LAYERS, causal=True,
                     name="runtime")


EVEN = _gpt(8, 8)
"""8 heads: every rank's 1/4 block is whole heads (the group shards are interleaved world blocks)."""
ODD = _gpt(5, 16)
"""5 heads: no even split at 2 or 4 (ulysses_uneven; ulysses_ring:2 splits its head group unevenly), contiguous
group shards."""

EVEN_PLANS = (("ulysses_ring:2", "megatron_cp:2+recompute"), ("ulysses_ring:1", "megatron_cp:2"),
              ("megatron_cp:1+recompute", "ulysses_ring:2"), ("megatron_cp:1", "ulysses_ring:1+recompute"))
"""One plan per item of the even model (one option per layer): both degrees of both strategies at p = 2."""
ODD_PLANS = (("ulysses_uneven", "ulysses_ring:1+recompute"), ("ulysses_ring:1", "ulysses_uneven+recompute"),
             ("megatron_cp:1", "ulysses_uneven"), ("ulysses_uneven", "megatron_cp:1+recompute"))
"""The odd model's plans: uneven heads over the group (a = 2 = p is ulysses_uneven itself), the ring alone."""
EVEN_WORLD_PLAN = ("megatron_cp:2", "ulysses_ring:2+recompute")
"""The item a group of four trains in a round beside the groups of two: the shard exchange of megatron_cp:2."""
ODD_WORLD_PLAN = ("ulysses_ring:2", "ulysses_uneven+recompute")
"""The odd model's item on four ranks: 5 heads split unevenly in Ulysses x ring's head groups of two."""


def _plan(plans, i: int) -> Plan:
    return Plan.for_layers(list(plans[i]), LAYERS)


def _two_by_two(world: int, plans, items=((0, 3), (1, 2))) -> GroupedStep:
    """Two groups of two: ranks 0, 1 train `items[0]`, ranks 2, 3 `items[1]`."""
    return GroupedStep(world, 4, tuple(StepGroup(2 * j, 2, own, tuple(_plan(plans, i) for i in own))
                                       for j, own in enumerate(items)))


SINGLE_PLAN = (("megatron_cz", "ulysses_z+recompute"),)
"""The plan of a group of one (a degree of two needs two ranks)."""


def _mixed(world: int, plans) -> GroupedStep:
    """Ranks 0, 1 a group of two (items 0 and 3, under `plans`), ranks 2 and 3 groups of one (items 1 and 2)."""
    return GroupedStep(world, 4, (StepGroup(0, 2, (0, 3), (_plan(plans, 0), _plan(plans, 3))),
                                  StepGroup(2, 1, (1,), (_plan(SINGLE_PLAN, 0),)),
                                  StepGroup(3, 1, (2,), (_plan(SINGLE_PLAN, 0),))))


def _four_then_two_by_two(world: int, plans, world_plan) -> StepRounds:
    """Round one: item 0 on all four ranks (`world_plan`); round two: items 1, 2, 3 on two groups of two."""
    first = GroupedStep(world, 1, (StepGroup(0, 4, (0,), (Plan.for_layers(list(world_plan), LAYERS),)),))
    second = GroupedStep(world, 3, (StepGroup(0, 2, (0, 2), (_plan(plans, 1), _plan(plans, 3))),
                                    StepGroup(2, 2, (1,), (_plan(plans, 2),))))
    return StepRounds(world, 4, (first, second), ((0,), (1, 2, 3)))


def _targets(batch) -> list[int]:
    return [int((labels != -100).sum()) for _, labels in batch]


def _load(batch):
    def load(i: int, sp):
        return shard_sequence(batch[i][0], 1, sp), shard_sequence(batch[i][1], 1, sp), None
    return load


def _check_grads(name: str, model, loss: float, want, rank: int) -> None:
    """The step's loss and every world gradient against the reference's (`want`: loss, gradients)."""
    loss_ref, grads_ref = want
    assert_close(torch.tensor(loss), loss_ref, **TOL, msg=lambda m: f"{name}: loss: {m}")
    ref = shard_state_dict(grads_ref, rank, 4)
    for n, q in model.named_parameters():
        assert_close(grad_of(q), ref[n], **TOL, msg=lambda m, n=n: f"{name}: grad {n}: {m}")


def _run_grouped(name: str, step: GroupedStep, model, batch, want, rank: int) -> None:
    """A grouped step on `model` against the reference: loss and every gradient (no byte counts: the uneven
    split's ranks send different bytes, ulysses_uneven_cases checks them)."""
    from paradyse_lab.runtime.training.grouped import grouped_step

    model.zero_grad(set_to_none=True)
    loss = grouped_step(model, step, _meshes(), _load(batch), _targets(batch))
    _check_grads(name, model, loss, want, rank)


def _run_rounds(name: str, step: StepRounds, model, batch, want, rank: int) -> None:
    model.zero_grad(set_to_none=True)
    loss = rounds_step(model, step, _meshes(), _load(batch), _targets(batch))
    _check_grads(name, model, loss, want, rank)


def steps_case(cfg: ModelSpec, plans, world_plan, even: bool):
    """2x2, mixed 2/1/1 and rounds 4 (`world_plan`) then 2x2 of `plans` on one world model of `cfg`, against the
    reference;
    `even`: also the bytes of grouped_cases' checks (the 2x2 and mixed steps). The subgroups are forgotten first,
    so that this case makes the groups of two's subgroups itself."""
    def case(rank: int, p: int, group) -> None:
        forget_subgroups()
        sd = random_state(cfg)
        batch = _batch(cfg, LENGTHS)
        want = _reference_grads(cfg, sd, batch, rank, group)
        model = ParallelGPT(cfg, group, state_dict=sd)
        for name, step in (("2x2", _two_by_two(p, plans)), ("mixed-2-1-1", _mixed(p, plans))):
            if even:
                _check_step(name, step, model, cfg, batch, {4: want}, rank, LENGTHS)
            else:
                _run_grouped(name, step, model, batch, want, rank)
        mine = tuple(range(rank // 2 * 2, rank // 2 * 2 + 2))  # the subgroups were made for this group of two
        named = {int(o.partition(":")[2].partition("+")[0]) for plan in plans for o in plan if ":" in o}
        assert {a for ranks, a in ulysses_ring._GROUPS if ranks == mine} == named, ulysses_ring._GROUPS
        _run_rounds("4-then-2x2", _four_then_two_by_two(p, plans, world_plan), model, batch, want, rank)
    return case


HAZARD_TIMEOUT = timedelta(seconds=20)
"""The wait of the groups the hazard case makes: a pair of ranks that name one subgroup differently waits for
the other under its own name until this runs out (torch's default: 30 minutes)."""


def uneven_history_case(rank: int, p: int, group) -> None:
    """Ranks 1 and 2 make one process group of their own (any group made by some ranks only: in a world of eight,
    the subgroups a group of two made before its ranks meet others in a group of four), then two groups of two
    run the even plans, whose subgroups are made for ranks whose counts of earlier groups differ; then 2x2 again
    with the items swapped between the groups (the subgroups made once serve other items): every step equals the
    reference. (The even model's step of groups of two and one: subworld-even-2x2-mixed-rounds.)"""
    previous = run_timeout()
    set_run_timeout(HAZARD_TIMEOUT)
    try:
        forget_subgroups()
        if rank in (1, 2):
            dist.new_group([rank], timeout=HAZARD_TIMEOUT, use_local_synchronization=True)
        sd = random_state(EVEN)
        batch = _batch(EVEN, LENGTHS)
        want = _reference_grads(EVEN, sd, batch, rank, group)
        model = ParallelGPT(EVEN, group, state_dict=sd)
        _run_grouped("2x2 after a group of ranks 1 and 2 only", _two_by_two(p, EVEN_PLANS), model, batch, want,
                     rank)
        _run_grouped("2x2 swapped", _two_by_two(p, EVEN_PLANS, ((1, 2), (0, 3))), model, batch, want, rank)
    finally:
        set_run_timeout(previous)


CASES = {"subworld-even-2x2-mixed-rounds": steps_case(EVEN, EVEN_PLANS, EVEN_WORLD_PLAN, True),
         "subworld-odd-heads-2x2-mixed-rounds": steps_case(ODD, ODD_PLANS, ODD_WORLD_PLAN, False),
         "subworld-uneven-group-history": uneven_history_case}


TRAIN_TWO_D_BUDGET_GIB = 0.0004
"""Per-GPU budget under which `--groups smallest-fit` of one strategy of degree one sizes the steps of
planned_groups_cases' lengths 1/1/1/1, 2/1/1, 2/2 (the analytic model's peaks)."""
TRAIN_TWO_D_RUNS = (
    ("--group-size 2 --policy static:ulysses_ring:2", {"group_size": 2, "policy": "static:ulysses_ring:2"},
     ["groups 2/2: U2"] * 3),
    ("--groups smallest-fit --policy static:megatron_cp:1",
     {"groups": "smallest-fit", "policy": "static:megatron_cp:1", "budget_gib": TRAIN_TWO_D_BUDGET_GIB},
     ["groups 1/1/1/1: C1", "groups 2/1/1: C1", "groups 2/2: C1"]))
"""The `train` runs whose groups of two run a two-dimensional strategy: (what, options, how the log's plans of the
steps start: group sizes, then the strategy's abbreviation)."""


def train_two_d_groups_case(rank: int, p: int, group) -> None:
    """`train --global-batch 4` whose groups of two run the two-dimensional strategies (fixed groups of two; and
    groups the planner sizes per step, 1/1/1/1, 2/1/1, 2/2): each run's losses and gradient norms equal those of
    four groups of one (planned_groups_cases' micro GPT-2 and lengths: train-groups-sized's run of groups of one,
    trained once per world)."""
    import os
    import shutil

    from grouped_cases import _same_runs
    from planned_groups_cases import TRAIN_LENGTHS, fixed_size_log
    from runtime_cases import _micro_gpt2_config, _shared_tmpdir

    from paradyse_lab.app.train_options import TrainOptions
    from paradyse_lab.app.training import train

    forget_subgroups()
    root = _shared_tmpdir(rank, p, group)
    path = os.path.join(root, "lengths.txt")
    if rank == 0:
        with open(path, "w") as f:
            f.write("\n".join(map(str, TRAIN_LENGTHS)) + "\n")
    common = {"model": _micro_gpt2_config(root, rank, p, group, 96), "dataset": f"file:{path}", "steps": 3,
              "lr": 3e-3, "max_len": 64, "global_batch": 4, "progress": False}
    logs = {"groups of one": fixed_size_log(common, TRAIN_LENGTHS, group, 1)}  # train-groups-sized's, when it ran
    for what, options, starts in TRAIN_TWO_D_RUNS:
        logs[what] = train(TrainOptions(**common, **options), group)
        plans = [row["plan"] for row in logs[what]]
        assert len(plans) == 3 and all(plan.startswith(want) for plan, want in zip(plans, starts)), (what, plans)
    _same_runs(dict(enumerate(logs.values())), "two-dimensional groups against groups of one:")
    dist.barrier(group=group)
    if rank == 0:
        shutil.rmtree(root)


CASES["train-subworld-two-d-groups"] = train_two_d_groups_case
ONLY_AT = {name: (4,) for name in CASES}
