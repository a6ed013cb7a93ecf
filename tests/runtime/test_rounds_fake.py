"""Steps as rounds at a world of 8 without a process group: every rank played in this process through fake
meshes (shapes exact, nothing sent, every byte counted; test_grouped_fake.py `FakeMeshes`). Each rank's state
collectives send paradyse_lab/costmodel/grouped_states.py `rounds_state_sent_bytes` (every round's gather, one
reduction at the widest round's width), the buffers it holds between rounds are `rounds_held_bytes` (fp32 for a
bf16 model), and the world's gradients come out in the model's dtype. (The values are checked against the
single-device reference by the gloo cases at a world of 4, tests/runtime/round_cases.py.)"""

from __future__ import annotations

from unittest import mock

import pytest
import torch
from test_grouped_fake import CFG, GQA, GQA_PLAN, PLAN, WORLD, B, FakeMeshes, S, one_thread  # noqa: F401

from paradyse_lab.core.step_groups import GroupedStep, StepGroup
from paradyse_lab.core.step_rounds import StepRounds
from paradyse_lab.costmodel.grouped_states import (
    grouped_state_sent_bytes,
    rounds_held_bytes,
    rounds_state_sent_bytes,
)
from paradyse_lab.runtime import ParallelGPT, shard_sequence
from paradyse_lab.runtime.comm.fake_group import FakeGroup
from paradyse_lab.runtime.comm.record import count_bytes
from paradyse_lab.runtime.training.grouped import STATES_TAG
from paradyse_lab.runtime.training.grouped_rounds import RoundGrads, rounds_step


def _rounds(rounds: tuple[tuple[int, ...], ...], plan) -> StepRounds:
    """One item per group of each round (sizes in rank order), the items numbered on through the rounds."""
    steps, items, first = [], [], 0
    for sizes in rounds:
        groups, start = [], 0
        for i, size in enumerate(sizes):
            groups.append(StepGroup(start, size, (i,), (plan,)))
            start += size
        steps.append(GroupedStep(WORLD, len(sizes), tuple(groups)))
        items.append(tuple(range(first, first + len(sizes))))
        first += len(sizes)
    return StepRounds(WORLD, first, tuple(steps), tuple(items))


CASES = [(CFG, PLAN, ((8,), (4, 2, 1, 1))), (GQA, GQA_PLAN, ((8,), (2, 2, 2, 2)))]
"""Whole heads (interleaved shards, the reduction over the groups-of-one mesh), and 2 K/V heads (the second
round's shards contiguous, gathered and reduced over the whole world)."""
RANKS = (0, 5)
"""Rank 0 adds its replicated gradients in both rounds (the first of its group), rank 5 in neither."""


@pytest.mark.parametrize("cfg, plan, rounds", CASES,
                         ids=[("gqa-" if c is GQA else "") + "-then-".join("-".join(map(str, s)) for s in r)
                              for c, _, r in CASES])
def test_every_rank_sends_and_holds_the_cost_models_bytes(cfg, plan, rounds, one_thread):  # noqa: F811
    step = _rounds(rounds, plan)
    spec = cfg.with_dtype("bf16")
    ids = torch.randint(0, cfg.vocab_size, (B, S), generator=torch.Generator().manual_seed(0))
    held, real_reduce = [], RoundGrads.reduce

    def reduce(self):  # what the step holds at its one reduction
        held.append([(t.dtype, t.numel() * t.element_size()) for t in (self.sharded, self.replicated)
                     if t is not None])
        real_reduce(self)

    for rank in RANKS:
        meshes = FakeMeshes(WORLD, rank)
        model = ParallelGPT(cfg, FakeGroup(WORLD, rank), seed=1).to(torch.bfloat16)
        held.clear()
        with count_bytes() as counter, mock.patch.object(RoundGrads, "reduce", reduce):
            loss = rounds_step(model, step, meshes, lambda i, sp: (shard_sequence(ids, 1, sp),) * 2 + (None,),
                               [S] * step.batch)
        assert torch.isfinite(torch.tensor(loss))
        assert counter.total(STATES_TAG) == rounds_state_sent_bytes(spec, WORLD, rounds), (rank, counter.total())
        assert all(q.grad is not None and q.grad.shape == q.shape and q.grad.dtype == torch.bfloat16
                   for q in model.parameters())
        (buffers,) = held
        assert all(dtype == torch.float32 for dtype, _ in buffers)
        assert len(buffers) == (2 if rank == 0 else 1), (rank, buffers)  # [d, F], and [R] where it contributes
        if rank == 0:
            assert sum(n for _, n in buffers) == rounds_held_bytes(spec, WORLD, rounds), (rank, buffers)


@pytest.mark.parametrize("world, sizes", [(4, (2, 2)), (4, (4,)), (WORLD, (4, 2, 1, 1))])
def test_the_same_split_twice_sends_the_one_splits_bytes_and_a_gather_per_round(world, sizes):
    """Two rounds of the same groups send what the one split of those groups sends (one reduction at its width),
    with its gather once per round: what the gloo cases rounds-2x2-twice and rounds-4-twice run, whose one-split
    steps grouped-steps-2x2-4x1-1x4-mixed runs (each against the single-device reference and these bytes)."""
    spec = CFG.with_dtype("fp32")
    one, twice = grouped_state_sent_bytes(spec, world, sizes), rounds_state_sent_bytes(spec, world, (sizes, sizes))
    assert one.get("all_gather", 0) > 0 or min(sizes) == world  # a gather whenever a group is narrower than the world
    assert twice.get("all_gather", 0) == 2 * one.get("all_gather", 0), (one, twice)
    assert {k: v for k, v in twice.items() if k != "all_gather"} == \
        {k: v for k, v in one.items() if k != "all_gather"}, (one, twice)
