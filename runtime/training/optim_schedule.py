"""The optimizer step's schedule and clipping, and how gradient accumulation weighs its micro-steps.

Library module (the training loop calls it; `paradyse-lab train --help` lists the options):

- `lr_factor(schedule, step, warmup, total)`: the multiplier of `--lr` at optimizer step `step` (0-based):
  a linear warmup from 1/(warmup+1) to 1 over the first `warmup` steps, then `constant` (1), `linear` (down to
  0 at `total`) or `cosine` (half a cosine period down to 0 at `total`: SGDR's annealing, Loshchilov & Hutter,
  "SGDR: Stochastic Gradient Descent with Warm Restarts", ICLR 2017, eq. 5 with eta_min = 0 and no restart).
  `scheduler(opt, opts, start)` is the `torch.optim.lr_scheduler.LambdaLR` over it, continuing at `start` (a
  resumed run: the factor is a function of the step, so nothing of the scheduler needs saving).
- `global_grad_norm(named_grads, group)`: the L2 norm of the whole model's gradient over every rank, each
  parameter counted once: a sharded parameter (a layer's `w1`, `b1`, `w2`: `SHARDED`,
  one 1/p shard per rank) adds its shards' squares summed over the ranks (one all-reduce of a [1] float, tag
  'grad-norm'); a replicated one (embeddings, norms, `b2`; their gradients are already all-reduced, the same on
  every rank) adds its squares once. The same number on every rank, equal to `torch.nn.utils.get_total_norm`
  of the single-device model's gradients.
- `clip_to(grads, max_norm, total)`: scale the gradients by min(1, max_norm / (total + 1e-6)), as
  `torch.nn.utils.clip_grad_norm_` does (its `clip_grads_with_norm_`), so a clipped run is the reference's.
- `micro_weights(targets)`: gradient accumulation: the optimizer step's loss is the mean over the next-token
  targets of all its micro-steps (what one batch of them all would give), so micro-step k's mean loss is
  weighed by its share of the targets.
"""

from __future__ import annotations

import math

SCHEDULES = ("constant", "linear", "cosine")
"""The learning-rate schedules after the warmup (`--lr-schedule`)."""
GRAD_NORM_TAG = "grad-norm"
"""comm_record.tagged label of the global gradient norm's all-reduce (4 bytes per optimizer step)."""


def lr_factor(schedule: str, step: int, warmup: int, total: int) -> float:
    """Multiplier of the base learning rate at optimizer step `step` (0-based) of `total` (module docstring)."""
    if step < warmup:
        return (step + 1) / (warmup + 1)
    if schedule == "constant":
        return 1.0
    decay_steps = max(1, total - warmup)
    done = min(1.0, (step - warmup) / decay_steps)
    if schedule == "linear":
        return 1.0 - done
    if schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * done))
    raise ValueError(f"unknown schedule {schedule!r}; valid: {', '.join(SCHEDULES)}")


def scheduler(opt, opts, start: int = 0):
    """`LambdaLR` of `opts.lr_schedule` / `opts.warmup_steps` over `opts.steps`, whose first `step()` call sets the
    learning rate of optimizer step `start + 1` (it starts at step `start`'s). The groups' `lr` is reset to
    `opts.lr` first: a resumed optimizer's state holds the last scheduled rate, not the base."""
    import torch

    for group in opt.param_groups:
        group["lr"] = group["initial_lr"] = opts.lr
    return torch.optim.lr_scheduler.LambdaLR(
        opt, lambda i: lr_factor(opts.lr_schedule, start + i, opts.warmup_steps, opts.steps))


def is_sharded(name: str, vocab_parallel: bool = False) -> bool:
    """Whether the parameter `name` of a `ParallelGPT` is stored as 1/p shards (with
    `vocab_parallel` also the embedding and head rows, whose padding rows have zero gradients)."""
    from paradyse_lab.runtime.model.weight_shards import SHARDED, VOCAB_ROWS

    prefix, _, leaf = name.rpartition(".")
    return (prefix.startswith("layers.") and leaf in SHARDED) or (vocab_parallel and name in VOCAB_ROWS)


def global_grad_norm(named_grads, group, vocab_parallel: bool = False):
    """[] L2 norm of the whole model's gradient over all ranks (module docstring); `named_grads`: (name,
    gradient or None) of this rank's parameters; `vocab_parallel`: the model's embedding and head are sharded."""
    import torch

    from paradyse_lab.runtime.comm import collectives as comm
    from paradyse_lab.runtime.comm import record as comm_record

    sharded = replicated = None
    for name, grad in named_grads:
        if grad is None:
            continue
        sq = grad.detach().float().pow(2).sum()  # [] this rank's part
        if is_sharded(name, vocab_parallel):
            sharded = sq if sharded is None else sharded + sq
        else:
            replicated = sq if replicated is None else replicated + sq
    device = next((g.device for _, g in named_grads if g is not None), torch.device("cpu"))
    total = torch.zeros(1, device=device) + (sharded if sharded is not None else 0.0)  # [1]
    with comm_record.tagged(GRAD_NORM_TAG):
        total = comm.all_reduce(total, group)  # [1] summed over ranks: each shard once
    if replicated is not None:
        total = total + replicated  # [1] the same on every rank: once
    return total[0].sqrt()


def clip_to(params, max_norm: float, total) -> None:
    """Scale the gradients of `params` in place so their global norm `total` is at most `max_norm`."""
    import torch

    torch.nn.utils.clip_grads_with_norm_([q for q in params if q.grad is not None], max_norm, total)


def check_optimisation_options(opts) -> None:
    """The schedule, clipping, accumulation, evaluation and data-order options of `opts`; `UserInputError` naming
    one."""
    from paradyse_lab.errors import UserInputError, require_number, unknown_name

    if opts.lr_schedule not in SCHEDULES:
        raise unknown_name("--lr-schedule", opts.lr_schedule, SCHEDULES)
    require_number("--clip-grad", opts.clip_grad, 0.0, 1e9)
    for flag, value, low in (("--warmup-steps", opts.warmup_steps, 0), ("--accumulate", opts.accumulate, 1),
                             ("--eval-every", opts.eval_every, 0), ("--eval-batches", opts.eval_batches, 1),
                             ("--global-batch", opts.global_batch, 0), ("--group-size", opts.group_size, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= 10**9:
            raise UserInputError(f"{flag} must be an integer >= {low}, got {value!r}")
    documents = opts.tokenizer or (opts.dataset.startswith("file:") and opts.dataset.endswith(".jsonl"))
    if opts.data_order and not documents:
        raise UserInputError(f"--data-order applies to token files (file:*.jsonl) and text datasets (--tokenizer); "
                             f"--dataset {opts.dataset} trains its workload's sorted lengths")
    if opts.group_size & (opts.group_size - 1):
        raise UserInputError(f"--group-size must be 0 (the world) or a power of two, got {opts.group_size}")
    if opts.global_batch and opts.accumulate != 1:
        raise UserInputError(f"--accumulate must be 1 with --global-batch (a step's sequences are its global "
                             f"batch), got {opts.accumulate}")
    if opts.group_size and not opts.global_batch:
        raise UserInputError("--group-size applies to --global-batch steps; give --global-batch N too")
    _check_groups(opts)
    if bool(opts.eval_dataset) != bool(opts.eval_every):
        raise UserInputError("--eval-dataset and --eval-every go together (evaluate that dataset every N optimizer "
                             "steps); give both or neither")


def _check_groups(opts) -> None:
    """--groups: a group policy, with --global-batch and without --group-size (one-line errors)."""
    from paradyse_lab.core.step_groups import TRAIN_GROUP_POLICIES
    from paradyse_lab.errors import UserInputError, unknown_name

    if not opts.groups:
        return
    if opts.groups not in TRAIN_GROUP_POLICIES:
        raise unknown_name("--groups", opts.groups, TRAIN_GROUP_POLICIES)
    if not opts.global_batch:
        raise UserInputError("--groups applies to --global-batch steps; give --global-batch N too")
    if opts.batch != 1:
        raise UserInputError(f"--groups plans each sequence of the global batch on its own: --batch must be 1, "
                             f"got {opts.batch}")
    if opts.group_size:
        raise UserInputError(f"give --groups {opts.groups} (groups planned per step) or --group-size "
                             f"{opts.group_size} (fixed groups), not both")


def micro_weights(targets: list[int]) -> list[float]:
    """The weight of each micro-step's mean loss in the optimizer step's loss: its share of the targets."""
    whole = sum(targets)
    return [n / whole for n in targets] if whole else [1.0 / len(targets)] * len(targets)
