"""One optimizer step of `train` (its micro-steps, the global gradient norm and clipping, AdamW) and one
evaluation on the held-out dataset.

Library module: the training loop makes one `TrainLoop` over the run's `TrainState`
(model, masters, optimizer) and calls `optimizer_step(step)` per optimizer step and
`evaluate(held_out)` every --eval-every steps. With --accumulate A, optimizer step i runs the micro-steps
m = i*A .. i*A+A-1 of the dataset, each planned by the policy on its own, their
gradients
summed with each mean loss weighed by its share of the step's next-token targets (`optim_schedule`
`micro_weights`), so the step is what one batch of them all would give. The log row's loss is that weighted mean;
its `seq_len` the longest micro-step's; `docs` and `tokens` the sums; `plan` each micro-step's plan, ' | ' between
them.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field

from paradyse_lab.core.policy_contract import CopyablePolicy
from paradyse_lab.runtime.training.plan_handoff import decide_plan_on_rank0, loss_tile
from paradyse_lab.runtime.training.state import micro_per_step
from paradyse_lab.runtime.training.step_health import finite_on_every_rank, stop_run
from paradyse_lab.runtime.training.step_log import step_peak_bytes

PEAK_OF = {True: "cuda_allocated", False: "process_rss"}
"""What `peak_bytes` measures (the log's `peak_of`): on CUDA the allocator's peak of this step
(torch.cuda.max_memory_allocated); on CPU the process's peak resident set since it started (getrusage
ru_maxrss: every buffer of Python, torch and the data, and never lower than an earlier step's)."""


def cap_reason(opts, max_positions: int, cap: int, unit: int) -> str:
    """Why documents are cut at `cap` (for the warning); warns on rank 0 (`print` to stderr) when --max-len asks
    for more than the model's positions, which then cut instead."""
    rounded = f", rounded down to {cap // unit * unit} (a multiple of the layout unit {unit})" if cap % unit else ""
    if opts.max_len and max_positions and opts.max_len > max_positions:
        print(f"warning: --max-len {opts.max_len} is above the model's {max_positions} positions: every step is cut "
              f"to {max_positions}", file=sys.stderr)
    if opts.max_len and (not max_positions or opts.max_len <= max_positions):
        return f"documents longer than --max-len {opts.max_len}{rounded} are cut to it"
    return f"documents longer than the model's {max_positions} positions{rounded} are cut to them"


@dataclass
class TrainLoop:
    """What an optimizer step needs from the run (`_train` builds it)."""

    run: object
    """The run's `paradyse_lab.runtime.training.state.TrainState`: options, model, fp32 masters (GPU), optimizer,
    group, device."""
    policy: object
    data: object
    """`paradyse_lab.runtime.training.step_inputs.StepInputs` of --dataset."""
    bar: object = None
    cut_reason: str = ""
    """What cuts a long document (`cap_reason`), named in the one warning a run gives about cut tokens."""
    warned: bool = False
    eval_policy: object = None
    """Plans the held-out steps (`_eval_decision`), made at the first evaluation; given, the world-size policy of a
    run of grouped steps, whose training policy plans at the group's size (evaluation runs at the world size)."""
    eval_decisions: dict = field(default_factory=dict)
    """Held-out step -> the decision it runs (`_eval_decision`)."""
    meshes: object = None
    """The run's `paradyse_lab.runtime.training.grouped.StepMeshes`, made at its first grouped step."""
    plan_groups: object = None
    """A group planner, `plan(steps) -> (GroupedStep or StepRounds, decisions)` (`train`'s
    `groups_for`), or None: the fixed group policy."""

    def _micro_step(self, m: int, weight: float) -> dict:
        """Forward and backward of micro-step m, its loss scaled by `weight`; what the row needs of it."""
        from paradyse_lab.runtime.attention.kernels import kernels_used

        run, data = self.run, self.data
        opts, model = run.opts, run.model
        s = data.length(m)
        decision = decide_plan_on_rank0(lambda: self.policy.decide(data.planned(m), opts.batch), run.group)
        ids, labels, cu_seqlens = self._on_device(data, m)
        with kernels_used() as ran:  # packed steps record their varlen kernel
            loss = model(ids, decision.plan, labels, cu_seqlens=cu_seqlens,  # the logits dropped at once
                         loss_tile=loss_tile(decision, model, ids.numel()))[1]
        value = float(loss.detach())
        self._stop_unless_finite(value, m, s)
        with kernels_used() as ran_backward:
            (loss if opts.accumulate == 1 else loss * weight).backward()
        self._warn_cut(m)
        return {"loss": value, "seq_len": s, "docs": data.documents(m), "tokens": data.tokens(m), "cut": data.cut(m),
                "plan": decision.plan.short_text(), "solve_s": decision.solve_s,
                "cached": decision.cached, "feasible": decision.feasible, "kernels": ran | ran_backward}

    def _stop_unless_finite(self, value: float, m: int, s: int) -> None:
        """Stop the run when micro-step m's loss (the same on every rank) is not finite."""
        if not math.isfinite(value):  # the loss is the global mean: every rank stops here
            stop_run(self.bar, f"the loss is {value} at step {m // micro_per_step(self.run.opts) + 1} (length {s}); "
                               "stopped before its optimizer step, the last checkpoint is unchanged (lower --lr, or "
                               "check the checkpoint and the data)")

    def _warn_cut(self, m: int) -> None:
        """The run's one warning about cut tokens, at the first micro-step that cuts some."""
        run, data, opts = self.run, self.data, self.run.opts
        cut = data.cut(m)
        if cut and not self.warned:
            self.warned = True
            from paradyse_lab.runtime.comm import collectives as comm

            if comm.rank(run.group) == 0:
                print(f"warning: step {m // micro_per_step(opts) + 1} leaves {cut} tokens of its documents "
                      f"untrained: {self.cut_reason}; the log's cut_tokens column and the end summary count every "
                      "step's (warned once)", file=sys.stderr)

    def _grouped_micro_steps(self, step: int) -> dict:
        """Forward and backward of the --global-batch sequences of optimizer step `step`, over groups of
        --group-size ranks or the groups (or rounds of splits) the group planner gives; what the row needs of them."""
        from paradyse_lab.core.step_rounds import StepRounds
        from paradyse_lab.runtime.attention.kernels import kernels_used
        from paradyse_lab.runtime.comm import collectives as comm
        from paradyse_lab.runtime.training.grouped import StepMeshes
        from paradyse_lab.runtime.training.grouped_rounds import rounds_step

        run, data, opts = self.run, self.data, self.run.opts
        items = range(step * opts.global_batch, (step + 1) * opts.global_batch)
        if self.meshes is None:  # every rank makes the meshes together, at the run's first grouped step
            self.meshes = StepMeshes.shared(run.device.type)
        grouped, decisions = comm.broadcast_object(self._plan_groups(items) if comm.rank(run.group) == 0 else None,
                                                   0, run.group)  # (the step's groups, decisions): rank 0 -> all
        rounds = grouped if isinstance(grouped, StepRounds) else StepRounds.one(grouped)
        size_of = rounds.size_of()
        tiles = [loss_tile(d, run.model, opts.batch * data.length(m) // size_of[i])  # the tokens on one rank
                 for i, (m, d) in enumerate(zip(items, decisions))]
        with kernels_used() as ran:
            value = rounds_step(run.model, rounds, self.meshes, lambda i, sp: self._on_device(data, items[i], sp),
                                [data.targets(m) for m in items], tiles)
        self._stop_unless_finite(value, items[0], max(data.length(m) for m in items))
        for m in items:
            self._warn_cut(m)
        plans = " | ".join(d.plan.short_text() for d in decisions)
        return {"loss": value, "seq_len": max(data.length(m) for m in items),
                "docs": sum(data.documents(m) for m in items), "tokens": sum(data.tokens(m) for m in items),
                "cut": sum(data.cut(m) for m in items), "plan": f"{rounds.label()}: {plans}",
                "solve_s": sum(d.solve_s for d in decisions),
                "cached": all(d.cached for d in decisions), "feasible": all(d.feasible for d in decisions),
                "kernels": ran}

    def _plan_groups(self, items: range):
        """(the step's `GroupedStep`, each sequence's decision), on rank 0: the group planner's, or the fixed group
        policy of --group-size, each sequence planned by the policy at the group's
        size."""
        from paradyse_lab.core.fixed_groups import fixed_size_groups
        from paradyse_lab.runtime.comm import collectives as comm

        opts, world = self.run.opts, comm.size(self.run.group)
        if self.plan_groups is not None:
            return self.plan_groups([self.data.planned(m) for m in items])
        decisions = [self.policy.decide(self.data.planned(m), opts.batch) for m in items]
        grouped = fixed_size_groups(world, len(items), opts.group_size or world, lambda i, g: decisions[i].plan)
        return grouped, decisions

    def _on_device(self, data, m: int, group=None):
        """(ids, labels, cu_seqlens) of step m of `data`, this rank's shard of the sequence over `group` (None:
        the run's), on the run's device."""
        from paradyse_lab.runtime.model.layout import shard_sequence

        run = self.run
        group = run.group if group is None else group
        tokens, labels, cu_seqlens = data.batch(m, run.model.cfg.vocab_size)
        ids, labels = (shard_sequence(x, 1, group, cu_seqlens).to(run.device) for x in (tokens, labels))
        return ids, labels, cu_seqlens.to(run.device) if cu_seqlens is not None else None

    def optimizer_step(self, step: int) -> dict:
        """Train optimizer step `step` (0-based); its log row."""
        import torch

        from paradyse_lab.runtime.training.optim_schedule import clip_to, global_grad_norm, micro_weights

        run = self.run
        opts, model, device = run.opts, run.model, run.device
        micro = range(step * opts.accumulate, (step + 1) * opts.accumulate)
        weights = micro_weights([self.data.targets(m) for m in micro]) if not opts.global_batch else [1.0]
        lr = run.optimizer.param_groups[0]["lr"]
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        t0 = time.perf_counter()
        if opts.global_batch:  # one grouped step: the global batch's loss and gradients over the world
            parts = [self._grouped_micro_steps(step)]
        else:
            parts = [self._micro_step(m, w) for m, w in zip(micro, weights)]
        run.master_grads()
        trained = run.trained
        norm = global_grad_norm([(n, t.grad) for n, t in trained.items()], run.group, model.vocab_parallel)
        if opts.clip_grad:
            clip_to(trained.values(), opts.clip_grad, norm)
        run.apply_optimizer()
        if not finite_on_every_rank(list(model.parameters()), run.group):  # never checkpoint diverged weights
            stop_run(self.bar, f"the weights are not finite after the optimizer step of step {step + 1}; stopped "
                               "before saving, the last checkpoint is unchanged (lower --lr)")
        return {"step": step + 1, "seq_len": max(x["seq_len"] for x in parts),
                "docs": sum(x["docs"] for x in parts), "tokens": sum(x["tokens"] for x in parts),
                "cut_tokens": sum(x["cut"] for x in parts),
                "loss": sum(w * x["loss"] for w, x in zip(weights, parts)) if len(parts) > 1 else parts[0]["loss"],
                "lr": lr, "grad_norm": float(norm), "step_s": time.perf_counter() - t0,
                "peak_bytes": int(step_peak_bytes(device)), "peak_of": PEAK_OF[device.type == "cuda"],
                "plan": " | ".join(x["plan"] for x in parts),
                "solve_s": sum(x["solve_s"] for x in parts), "cached": all(x["cached"] for x in parts),
                "feasible": all(x["feasible"] for x in parts),
                "attention_kernel": "+".join(sorted(set().union(*(x["kernels"] for x in parts))))}

    def evaluate(self, held_out) -> float:
        """Mean next-token loss over the held-out steps of `held_out` (a `StepInputs.held_out`: its `eval_steps`
        first steps, the same every time), each weighed by its targets, without gradients. Each step runs the
        plan and head (whole logits or the tiled loss) the planner gives for it (`_eval_decision`)."""
        import torch

        model = self.run.model
        total = count = 0.0
        with torch.no_grad():
            for m in range(held_out.eval_steps):
                decision = self._eval_decision(held_out, m)
                ids, labels, cu_seqlens = self._on_device(held_out, m)
                loss = model(ids, decision.plan, labels, cu_seqlens=cu_seqlens,
                             loss_tile=loss_tile(decision, model, ids.numel()))[1]
                n = held_out.targets(m)
                total, count = total + float(loss) * n, count + n
        return total / count if count else float("nan")

    def _eval_decision(self, held_out, m: int):
        """The planner's decision for held-out step m, made once (rank 0 decides, every rank runs it) by
        `eval_policy`: a fresh copy of the policy (`fresh_copy()`), so that evaluating leaves training's
        cache and smoothing as they were and a resumed run plans its steps as an unbroken one."""
        if m not in self.eval_decisions:
            if self.eval_policy is None:
                if not isinstance(self.policy, CopyablePolicy):
                    raise TypeError(f"evaluating needs a policy with fresh_copy() (simulator/policies.py), got "
                                    f"{self.policy!r}")
                self.eval_policy = self.policy.fresh_copy()
            batch = self.run.opts.batch
            self.eval_decisions[m] = decide_plan_on_rank0(
                lambda: self.eval_policy.decide(held_out.planned(m), batch), self.run.group)
        return self.eval_decisions[m]
