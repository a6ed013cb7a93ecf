"""Distributed cases of grouped steps whose groups the group planner sizes (paradyse_lab/app/training.py
`group_planner`, what `train --groups sized` plans with: simulator/grouped_steps.py `choose`, as
`simulate --global-batch` does). runtime_cases.py adds them to the per-world harness at p = 4.

Under a per-GPU budget where a long sequence of a tiny GPT-2 fits a group of two but not one (the analytic model's
peaks, with the grouped state phases: `BUDGET_GIB`), the planner gives each global batch other group sizes (1/1/1/1,
then 2/1/1, then 2/2). Trained one after another on the same world model, each step's loss and gradients equal the
single-device reference's over its whole global batch, every byte sent is the cost model's, and no parameter moves
(a change of group sizes moves no states); `train --groups sized` logs the sizes changing between steps and trains
as a run of four groups of one does (each item on one rank: the cheapest run of the same global batches; one group
of all ranks against four of one step by step: grouped-steps-2x2-4x1-1x4-mixed, and as a `train` run:
train-groups-rounds)."""

from __future__ import annotations

import os

import torch
from grouped_cases import _batch, _check_step, _reference_grads, _same_runs
from runtime_cases import _shared_tmpdir, random_state

from paradyse_lab.app.train_options import TrainOptions
from paradyse_lab.app.training import group_planner
from paradyse_lab.core.model_spec import ModelSpec, get_model
from paradyse_lab.runtime import ParallelGPT
from paradyse_lab.runtime.comm import collectives as comm

BUDGET_GIB = 0.00134
"""Per-GPU budget of the step cases (`_short()`): a sequence of 128 tokens needs a group of two, one of 8 fits a
GPU alone (the planner gives the sizes of `BATCHES` from 0.00104 to 0.00176 GiB)."""
BATCHES = {(8, 8, 8, 8): (1, 1, 1, 1), (128, 8, 8, 8): (2, 1, 1), (128, 128, 128, 128): (2, 2)}
"""Global batch (sequence lengths) -> the group sizes the planner gives it under `BUDGET_GIB`."""
TRAIN_BUDGET_GIB = 0.00036
"""The same for the micro GPT-2 of the `train` runs (runtime_cases.py `_micro_gpt2_config`, 64 positions) and
`TRAIN_LENGTHS` (sizes as there from 0.00028 to 0.00046 GiB)."""
TRAIN_LENGTHS = (8,) * 7 + (64,) * 5
"""A length file trained in ascending order, four per step: 8x4 (1/1/1/1), 8x3 + 64 (2/1/1), 64x4 (2/2)."""


def _short() -> ModelSpec:
    """gpt2-tiny's shape (12 heads: whole heads in every rank's 1/4 block) with 2 layers, at half its width and a
    quarter of its vocabulary (the sizes are the subject, not the model's), at 128 positions."""
    spec = get_model("gpt2-tiny")
    return ModelSpec(vocab_size=spec.vocab_size // 4, max_positions=128, hidden=spec.hidden // 2, heads=spec.heads,
                     layers=2, causal=True, name="runtime")


def planned_steps_case(rank: int, p: int, group) -> None:
    """The planner's steps against the single-device reference, one after another on one world model."""
    cfg = _short()
    sd = random_state(cfg)
    model = ParallelGPT(cfg, group, state_dict=sd)
    before = {n: q.detach().clone() for n, q in model.named_parameters()}
    opts = TrainOptions(model="gpt2-tiny", dataset="uniform", global_batch=4, groups="sized", budget_gib=BUDGET_GIB)
    plan = group_planner(opts, cfg.with_dtype("fp32"), p)
    steps = comm.broadcast_object([plan(list(b))[0] for b in BATCHES] if rank == 0 else None, 0, group)
    assert [s.sizes for s in steps] == list(BATCHES.values()), [s.sizes for s in steps]
    for lengths, step in zip(BATCHES, steps):
        batch = _batch(cfg, lengths)
        want = {4: _reference_grads(cfg, sd, batch, rank, group)}
        _check_step(f"planned {lengths}", step, model, cfg, batch, want, rank, lengths)
    for n, q in model.named_parameters():
        assert torch.equal(q.detach(), before[n]), f"{n} changed"


FIXED_SIZE_LOGS: dict[tuple, list[dict]] = {}
"""Logs of `train --group-size G` by (G, the model's config.json text, the length file's lengths, the other
options): the runs several cases compare their groups against (these and the sub-world cases' two-dimensional
groups: the same micro GPT-2, lengths and options), each trained once per world.
Every rank runs the same cases in the same order, so all ranks find a log here or none does."""


def fixed_size_log(common: dict, lengths: tuple[int, ...], group, size: int) -> list[dict]:
    """The log of `train` with the options `common` (a `model` config path, a `dataset` file of `lengths`) in
    groups of `size` ranks, from `FIXED_SIZE_LOGS` when an earlier case of this world trained the same run."""
    from paradyse_lab.app.training import train

    with open(common["model"]) as f:
        key = (size, f.read(), tuple(lengths), tuple(sorted((k, repr(v)) for k, v in common.items()
                                                            if k not in ("model", "dataset"))))
    if key not in FIXED_SIZE_LOGS:
        FIXED_SIZE_LOGS[key] = train(TrainOptions(**common, group_size=size), group)
    return FIXED_SIZE_LOGS[key]


def train_against_fixed_size(rank: int, p: int, group, lengths: tuple[int, ...], steps: int, what: str, size: int,
                             **planned) -> list[dict]:
    """`train --global-batch 4` of the micro GPT-2 (runtime_cases.py `_micro_gpt2_config`, 64 positions) over a
    length file of `lengths` in order, with the options `planned` (a group planner) and in groups of `size`
    ranks: the same losses and gradient norms (`what` names the check); returns the planned run's log."""
    import shutil

    import torch.distributed as dist
    from runtime_cases import _micro_gpt2_config

    from paradyse_lab.app.training import train

    root = _shared_tmpdir(rank, p, group)
    model = _micro_gpt2_config(root, rank, p, group, 96)  # the sizes are the subject, not the model's
    path = os.path.join(root, "lengths.txt")
    if rank == 0:
        with open(path, "w") as f:
            f.write("\n".join(map(str, lengths)) + "\n")
    dist.barrier(group=group)
    common = {"model": model, "dataset": f"file:{path}", "steps": steps, "lr": 3e-3, "max_len": 64,
              "global_batch": 4, "progress": False}
    log = train(TrainOptions(**common, **planned), group)
    fixed = fixed_size_log(common, lengths, group, size)
    _same_runs({1: fixed, 2: log}, f"{what} against groups of {size}:")
    dist.barrier(group=group)
    if rank == 0:
        shutil.rmtree(root)
    return log


def train_planned_groups_case(rank: int, p: int, group) -> None:
    """`train --global-batch 4 --groups sized` sizes its groups per step and matches four groups of one."""
    planned = train_against_fixed_size(rank, p, group, TRAIN_LENGTHS, 3, "--groups sized", 1, groups="sized",
                                       budget_gib=TRAIN_BUDGET_GIB)
    sizes = [row["plan"].split(":")[0] for row in planned]
    assert sizes == ["groups 1/1/1/1", "groups 2/1/1", "groups 2/2"], sizes


CASES = {"grouped-planned-sizes-change": planned_steps_case, "train-groups-sized": train_planned_groups_case}
ONLY_AT = {name: (4,) for name in CASES}
