"""The training loop of the runtime: one run on this rank, its model, optimizer and checkpoints, each step planned
by a policy passed in (library module; `paradyse-lab train` and the Python API call `train`).

- `train(opts, group, policy_for=..., groups_for=...)`: the loop, holding its checkpoint folder's lock: each
  optimizer step, its log row, the held-out evaluation and the checkpoints;
- its parts, one module each: the set-up before the first step (device, resume, rank-0 checks, progress bar); the
  plan of each step decided on rank 0 and run by every rank
  (`decide_plan_on_rank0`); the model, the AdamW optimizer and (bf16 on GPU) the fp32
  master weights (`TrainState`); one optimizer step and one evaluation
  (`TrainLoop`), with its health checks; the per-step CSV of `--log-file`
  (`StepLog`); each step's data; checkpoints.

`opts` is a plain object with the run's settings as attributes: the fields of the application's
`paradyse_lab.app.train_options.TrainOptions` (whose module docstring is the command's help: what a run does), or
any object with them (`types.SimpleNamespace`).
"""

from __future__ import annotations

import sys
from dataclasses import replace
from functools import partial

import torch

from paradyse_lab.core.model_folder import weights_line
from paradyse_lab.core.model_spec import get_model
from paradyse_lab.core.policy_contract import CopyablePolicy
from paradyse_lab.runtime.checkpoints import folder as checkpoint
from paradyse_lab.runtime.comm import collectives as comm
from paradyse_lab.runtime.hf.weights import check_folder, model_source
from paradyse_lab.runtime.model.reference import GPTConfig
from paradyse_lab.runtime.training.optim_schedule import scheduler
from paradyse_lab.runtime.training.plan_handoff import replicated_head_policy, vocab_storage
from paradyse_lab.runtime.training.run_inputs import check_log_file, check_log_owner, check_options, log_cells
from paradyse_lab.runtime.training.setup import (
    checked_on_rank0,
    checkpoint_to_resume,
    progress_bar,
    run_device,
    run_meta,
    warn_few_eval_steps,
)
from paradyse_lab.runtime.training.state import TrainState, micro_per_step
from paradyse_lab.runtime.training.step import TrainLoop, cap_reason
from paradyse_lab.runtime.training.step_inputs import StepInputs
from paradyse_lab.runtime.training.step_log import StepLog


def train(opts, group=None, *, policy_for, groups_for=None) -> list[dict]:
    """Run the training loop on this rank (call on every rank); returns the per-step log.

    The run holds its --checkpoint-dir's lock from start to end (`folder_lock`): a second
    run on the same folder is refused, naming the first.

    `policy_for(spec, p)` builds the policy that plans each step for the model `spec` (its dtype as trained)
    at world size `p`: an object whose `decide(step, batch)` (`step`: the sequence length, or with --pack-tokens
    the pack as a `paradyse_lab.costmodel.packed.PackedStep`) returns a decision with `plan` (a
    `paradyse_lab.core.plan.Plan`: one option per decision of the layer graph, and its granularity), `solve_s`,
    `cached` and `feasible`. The planner lives above the runtime:
    `paradyse_lab.app.training.train(opts, group)` passes the simulator's policies.

    With --global-batch, `groups_for(spec, p)` (given: a group planner, built on every rank) returns a function
    `plan(steps)` (rank 0 calls it) giving one step's `paradyse_lab.core.step_groups.GroupedStep` over the `p` ranks
    (or its rounds of splits, a `paradyse_lab.core.step_rounds.StepRounds`) and each sequence's decision, for the
    sequences' `steps` as `decide` takes them; None: the fixed group policy of --group-size,
    each sequence planned by `policy_for(spec, group size)`.
    """
    check_options(opts)
    checked_on_rank0(partial(check_log_file, opts), group)  # before rank 0 makes the log file
    with checkpoint.folder_lock(opts.checkpoint_dir, group):
        return _train(opts, group, policy_for, groups_for)


def _train(opts, group, policy_for, groups_for=None) -> list[dict]:
    """The training loop of `train`, run while this run holds its checkpoint folder: the run set up (its model,
    data, policy and resumed state), then its steps (`_train_steps`)."""
    p = comm.size(group)
    device = run_device(group)
    dtype = "bf16" if device.type == "cuda" else "fp32"
    spec = replace(get_model(model_source(opts.model, opts.init_from)), dtype=dtype)
    cfg = GPTConfig.from_model_spec(spec)
    if opts.init_from:  # every tensor's shape against config.json, before the plan is stated
        checked_on_rank0(partial(check_folder, opts.init_from, cfg), group)
    meta = run_meta(opts, cfg, group)
    found = checkpoint_to_resume(opts, meta, group)
    if opts.log_file and opts.resume:  # before rank 0 rewrites the log: only this run's
        checked_on_rank0(partial(check_log_owner, opts, None if found is None else checkpoint.read_meta(found)), group)
    micro_steps = opts.steps * micro_per_step(opts)
    size = checkpoint.workload_size(found, micro_steps)  # a resumed run keeps the workload it started with
    inputs = StepInputs.build(opts, p, cfg, size)
    inputs.refuse_untrainable(micro_steps)
    held_out = StepInputs.held_out(opts, p, cfg) if opts.eval_every else None
    planned_p = (opts.group_size or p) if opts.global_batch else p  # a grouped step plans at the group's size
    plan_groups = groups_for(spec, p) if groups_for is not None and opts.global_batch else None  # refuses first
    policy = policy_for(spec, planned_p)  # after every input check: the planner's statement is the run's first line
    longest = max(inputs.length(m) for m in range(micro_steps))
    if not opts.global_batch and not getattr(opts, "allow_infeasible", False):
        refuse_infeasible(policy, inputs, max(range(micro_steps), key=inputs.length), opts.batch)
    if opts.global_batch:  # grouped steps keep the embedding and head replicated
        replicated_head_policy(policy)
    vocab = False if opts.global_batch else vocab_storage(policy, longest, opts.batch, group)
    run = TrainState.create(opts, cfg, group, device, meta, size, vocab)
    start = run.resume(found, lambda m: policy.decide(inputs.planned(m), opts.batch))
    if comm.rank(group) == 0:
        print(weights_line(opts.init_from, opts.seed, str(found) if found is not None else ""), flush=True)
        if device.type == "cpu":
            print(f"CPU threads per rank: {torch.get_num_threads()} (the cores free of load; OMP_NUM_THREADS sets "
                  "them)", flush=True)
    lr_schedule = scheduler(run.optimizer, opts, start)
    rank = comm.rank(group)
    bar = progress_bar(opts, start, rank)
    log_csv = StepLog(opts.log_file, start) if opts.log_file and rank == 0 else None
    reason = cap_reason(opts, cfg.max_positions, inputs.cap, inputs.unit) if rank == 0 else ""
    if rank == 0 and inputs.long_documents is not None:
        print(inputs.long_documents.line())
    if rank == 0 and held_out is not None:
        warn_few_eval_steps(opts, held_out.eval_steps)
    loop = TrainLoop(run, policy, inputs, bar, reason, plan_groups=plan_groups,
                     eval_policy=replicated_head_policy(policy_for(spec, p))
                     if held_out is not None and planned_p != p else None)
    return _train_steps(loop, lr_schedule, held_out, start, log_csv)


def refuse_infeasible(policy, inputs, step: int, batch: int) -> None:
    """`UserInputError` before the first step when the policy's plan for `step` (the run's longest) does not fit
    its budget; asked of a fresh copy of the policy, so that the run's own first decisions (smoothing) are
    untouched. A static policy claims no fit and is not refused; a policy that cannot make a fresh copy of itself
    (`CopyablePolicy`) is not asked, since asking it would change its own first decisions."""
    from paradyse_lab.errors import UserInputError

    if not isinstance(policy, CopyablePolicy):
        return
    if not policy.fresh_copy().decide(inputs.planned(step), batch).feasible:
        raise UserInputError(f"no plan fits: the planner finds no plan of step {step + 1} ({inputs.length(step)} "
                             "tokens) within the budget stated above; give a shorter --max-len, --recompute, more "
                             "ranks, a larger --budget-gib, or --allow-infeasible to train it anyway")


def _train_steps(loop: TrainLoop, lr_schedule, held_out, start: int, log_csv: StepLog | None) -> list[dict]:
    """Optimizer steps `start` .. --steps of `loop`'s run, each row logged (`log_csv` on rank 0, the progress
    bar), the held-out loss (`held_out`, or None) every --eval-every steps and at the last, a checkpoint every
    --checkpoint-every steps and at the end; returns the rows."""
    run, bar = loop.run, loop.bar
    opts = run.opts
    log: list[dict] = []
    for step in range(start, opts.steps):
        row = loop.optimizer_step(step)
        lr_schedule.step()
        if held_out is not None and ((step + 1) % opts.eval_every == 0 or step + 1 == opts.steps):
            row["eval_loss"], row["eval_steps"] = loop.evaluate(held_out), held_out.eval_steps
        log.append(row)
        if log_csv is not None:
            log_csv.write(row)
        if bar is not None:
            _show_step(bar, row, run.device)
        if opts.checkpoint_dir and opts.checkpoint_every and (step + 1) % opts.checkpoint_every == 0:
            run.save(step + 1, log_cells(row))
    if bar is not None:
        bar.close()
    if opts.checkpoint_dir and log and not (opts.checkpoint_every and opts.steps % opts.checkpoint_every == 0):
        run.save(opts.steps, log_cells(log[-1]))
    if log_csv is not None:
        log_csv.close()
    return log


def _show_step(bar, row: dict, device) -> None:
    """Advance the progress bar by one step and show the step's loss, length, documents, time, plan and memory."""
    bar.update(1)
    bar.set_postfix(loss=f"{row['loss']:.3f}", s=row["seq_len"], docs=row["docs"],
                    ms=f"{1e3 * row['step_s']:.0f}", plan=row["plan"],
                    **{"peak" if device.type == "cuda" else "rss": f"{row['peak_bytes'] / 2**20:.0f}MiB"})


if __name__ == "__main__":  # the command line lives in paradyse_lab/cli/; refuse instead of doing nothing
    print("error: run `paradyse-lab train ...` (or `torchrun --nproc-per-node N -m paradyse_lab train ...`); "
          "this module is a library", file=sys.stderr)
    raise SystemExit(2)
