"""Distributed cases of steps as rounds of group splits (runtime/training/grouped_rounds.py; runtime_cases.py adds
them to the per-world harness at p = 4 only: the rounds split the world differently).

A global batch of four sequences trained as rounds run one after another, the gradients summed over the rounds and
reduced once: one group of four on the long sequence then two groups of two on the short ones; the same split
twice (two groups of two, and one group of four: the one-split grouped steps of the same groups meet the same
reference in grouped-steps-2x2-4x1-1x4-mixed, and their state bytes are the rounds' less one gather,
test_rounds_fake.py); and three
rounds of a LLaMA whose 1/4 blocks are not whole heads (one group of four, then two groups of two with contiguous
shards, then four groups of one), where every round's group shards are other rows of the world shards. Each
against the single-device reference over the whole global batch with `assert_close`: the loss, every parameter's
gradient, and the parameters after one AdamW step; the state collectives send the bytes of
paradyse_lab/costmodel/grouped_states.py `rounds_state_sent_bytes` (every round's gather, one reduce-scatter and
one all-reduce). `train --global-batch --groups rounds` plans and trains a step of two rounds and matches one group
of four."""

from __future__ import annotations

import torch
from grouped_cases import LENGTHS, PLANS, _batch, _cfg, _meshes
from planned_groups_cases import train_against_fixed_size
from runtime_cases import TOL, grad_of, llama_config, random_state
from torch.testing import assert_close

from paradyse_lab.core.plan import Plan
from paradyse_lab.core.step_groups import GroupedStep, StepGroup
from paradyse_lab.core.step_rounds import StepRounds
from paradyse_lab.costmodel.grouped_states import rounds_state_sent_bytes
from paradyse_lab.runtime import ParallelGPT, shard_sequence
from paradyse_lab.runtime.comm import collectives as comm
from paradyse_lab.runtime.comm.record import count_bytes
from paradyse_lab.runtime.model.reference import ReferenceGPT
from paradyse_lab.runtime.model.weight_shards import shard_state_dict
from paradyse_lab.runtime.training.grouped import STATES_TAG
from paradyse_lab.runtime.training.grouped_rounds import rounds_step

ADAMW = {"lr": 1e-3, "eps": 1e-3}
"""AdamW of the one optimizer step checked after the rounds. Its first step moves a weight by lr g / (|g| + eps):
with the default eps (1e-8) a gradient at the level of the sums' rounding moves it by ~lr either way, so eps is
lr's, bounding the step's sensitivity to the gradient by lr / eps = 1."""


CP_PLAN = ("megatron_cz", "megatron_cz+recompute")
"""The plan of the LLaMA's long sequence on all four ranks: its 2 K/V heads do not split over four ranks, so its
attention runs context-parallel (ring)."""


def _plan(i: int, cp: tuple[int, ...] = ()) -> Plan:
    """Item i's plan: `PLANS[i]` (every strategy), or `CP_PLAN` for the items of `cp`."""
    return Plan.for_layers(list(CP_PLAN if i in cp else PLANS[i]), 2)


def _round(world: int, groups: list[tuple[int, int, tuple[int, ...]]], items: tuple[int, ...],
           cp: tuple[int, ...] = ()) -> GroupedStep:
    """A round of `groups` (start, size, round-local items) over the step's `items`, each item under its plan."""
    return GroupedStep(world, len(items), tuple(
        StepGroup(start, size, local, tuple(_plan(items[j], cp) for j in local)) for start, size, local in groups))


def _rounds(world: int, rounds: list[tuple[list, tuple[int, ...]]], cp: tuple[int, ...] = ()) -> StepRounds:
    return StepRounds(world, len(LENGTHS), tuple(_round(world, g, items, cp) for g, items in rounds),
                      tuple(items for _, items in rounds))


def _steps(world: int) -> dict[str, StepRounds]:
    return {
        # the long sequence (24 tokens) alone on all four ranks, then the short ones on two groups of two
        "4-then-2x2": _rounds(world, [([(0, 4, (0,))], (0,)), ([(0, 2, (0, 2)), (2, 2, (1,))], (1, 2, 3))]),
        # the same split twice: the one-split step of the same groups, less one gather (module docstring)
        "2x2-twice": _rounds(world, [([(0, 2, (0,)), (2, 2, (1,))], (0, 1)), ([(0, 2, (0,)), (2, 2, (1,))], (2, 3))]),
        # the whole world twice: nothing to reduce across groups, each round's gradients added to the world's
        "4-twice": _rounds(world, [([(0, 4, (0, 1))], (0, 1)), ([(0, 4, (0, 1))], (2, 3))]),
        # three rounds: one group of four, two of two, four of one (three idle)
        "4-then-2x2-then-4x1": _rounds(world, [([(0, 4, (0,))], (0,)), ([(0, 2, (0,)), (2, 2, (1,))], (1, 2)),
                                              ([(0, 1, ()), (1, 1, ()), (2, 1, (0,)), (3, 1, ())], (3,))], cp=(0,)),
    }


def _reference(cfg, sd: dict, batch) -> tuple[torch.Tensor, dict, dict]:
    """The single-device model's mean loss over every target of the batch, its gradients, and its parameters
    after one AdamW step of them."""
    ref = ReferenceGPT(cfg)
    ref.load_state_dict(sd)
    total = sum(int((labels != -100).sum()) for _, labels in batch)
    loss = sum(ref(ids, labels)[1] * int((labels != -100).sum()) for ids, labels in batch) / total
    loss.backward()
    grads = {n: grad_of(q).clone() for n, q in ref.named_parameters()}
    torch.optim.AdamW(ref.parameters(), **ADAMW).step()
    return loss.detach(), grads, {n: q.detach().clone() for n, q in ref.named_parameters()}


def _run(step: StepRounds, model, batch, targets) -> tuple[float, dict]:
    """The step's rounds on `model`: its loss and the bytes its state collectives sent."""
    def load(i: int, sp):
        return shard_sequence(batch[i][0], 1, sp), shard_sequence(batch[i][1], 1, sp), None

    model.zero_grad(set_to_none=True)
    with count_bytes() as counter:
        loss = rounds_step(model, step, _meshes(), load, targets)
    return loss, counter.total(STATES_TAG)


def rounds_case(make_cfg, name: str):
    """The step `name` of `_steps` on a fresh world model of config `make_cfg()` against the reference."""
    def case(rank: int, p: int, group) -> None:
        cfg = make_cfg()
        sd = random_state(cfg)
        batch = _batch(cfg)
        targets = [int((labels != -100).sum()) for _, labels in batch]
        loss_ref, grads_ref, after_ref = comm.broadcast_object(_reference(cfg, sd, batch) if rank == 0 else None,
                                                               0, group)
        step = _steps(p)[name]
        model = ParallelGPT(cfg, group, state_dict=sd)
        loss, sent = _run(step, model, batch, targets)
        assert_close(torch.tensor(loss), loss_ref, **TOL, msg=lambda m: f"{name}: loss: {m}")
        want = shard_state_dict(grads_ref, rank, p)
        grads = {n: grad_of(q).clone() for n, q in model.named_parameters()}
        for n, g in grads.items():
            assert_close(g, want[n], **TOL, msg=lambda m, n=n: f"{name}: grad {n}: {m}")
        rounds = [r.sizes for r in step.rounds]
        assert sent == rounds_state_sent_bytes(cfg.with_dtype("fp32"), p, rounds), (name, sent)
        torch.optim.AdamW(model.parameters(), **ADAMW).step()
        want = shard_state_dict(after_ref, rank, p)
        for n, q in model.named_parameters():
            assert_close(q.detach(), want[n], **TOL, msg=lambda m, n=n: f"{name}: after AdamW {n}: {m}")
    return case


TRAIN_BUDGET_GIB = 0.00025
"""Per-GPU budget of the `train` case's micro GPT-2 (runtime_cases.py `_micro_gpt2_config`, 64 positions) under
which the rounds planner trains `TRAIN_LENGTHS` as two rounds: the long sequence alone on all four ranks, then the
short ones on two groups of two (`rounds 4 / 2,2` from 0.0002 to 0.00026 GiB; one split on either side)."""
TRAIN_LENGTHS = (8, 8, 8, 64)
"""The length file of the `train` case: one step of four sequences."""


def train_rounds_case(rank: int, p: int, group) -> None:
    """`train --global-batch 4 --groups rounds` plans a step of two rounds, logs them, and trains as a run of one
    group of all ranks does."""
    log = train_against_fixed_size(rank, p, group, TRAIN_LENGTHS, 1, "--groups rounds", 4, groups="rounds",
                                  budget_gib=TRAIN_BUDGET_GIB)
    assert [row["plan"].split(":")[0] for row in log] == ["rounds 4 / 2,2"], [row["plan"] for row in log]


CASES = {"rounds-4-then-2x2": rounds_case(_cfg, "4-then-2x2"),
         "rounds-2x2-twice": rounds_case(_cfg, "2x2-twice"),  # the one split of its groups against the same
         "rounds-4-twice": rounds_case(_cfg, "4-twice"),  # reference: grouped-steps' 2x2 and 1x4 (no second run here)
         "rounds-llama-kv2-4-2x2-4x1": rounds_case(lambda: llama_config(2), "4-then-2x2-then-4x1"),
         "train-groups-rounds": train_rounds_case}
ONLY_AT = {name: (4,) for name in CASES}
