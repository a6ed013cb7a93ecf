"""The training loop of the runtime: one run on this rank, its model, optimizer and checkpoints, each step planned
by a policy passed in (library module; `paradyse-lab train` and the Python API call `train`).

- `train(opts, group, policy_for=..., groups_for=...)`: the loop (data: runtime/step_inputs.py; one optimizer step:
  runtime/train_step.py; checkpoints: runtime/dcp_checkpoint.py), holding its checkpoint folder's lock;
- `decide_plan_on_rank0`: rank 0's policy decides each step's `paradyse_lab.plan.Plan`, every rank runs it;
- `TrainState`: the model, the AdamW optimizer and (bf16 on GPU) the fp32 master weights;
- `StepLog`: the per-step CSV of `--log-file`.

`opts` is a plain object with the run's settings as attributes: the fields of the application's
`paradyse_lab.app.train_options.TrainOptions` (whose module docstring is the command's help: what a run does), or
any object with them (`types.SimpleNamespace`).
"""

from __future__ import annotations

import csv
import io
import resource
import sys
import threading
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import torch
from tqdm import tqdm

from paradyse_lab.atomic_write import write_text_atomic
from paradyse_lab.costmodel.head_loss import loss_tile_tokens
from paradyse_lab.costmodel.vocab_parallel import vocab_tile_tokens
from paradyse_lab.errors import RunStopped, UserInputError
from paradyse_lab.model_spec import get_model
from paradyse_lab.plan import Plan
from runtime import checkpoint, comm, comm_record, dcp_checkpoint
from runtime.dcp_checkpoint import OPTIONAL_SETTINGS
from runtime.hf_weights import model_source
from runtime.model import ParallelGPT
from runtime.optim_schedule import scheduler
from runtime.reference import GPTConfig
from runtime.step_inputs import StepInputs
from runtime.train_inputs import LOG_COLUMNS, check_log_file, check_options
from runtime.train_step import TrainLoop, cap_reason


def micro_per_step(opts) -> int:
    """Micro-steps (one sequence, or one pack, of the dataset each) per optimizer step: --accumulate, or the
    sequences of a --global-batch step."""
    return opts.global_batch or opts.accumulate


def decide_plan_on_rank0(decide, group=None):
    """`decide()` (the policy's choice for this step) run on rank 0 of `group` only, and its result sent to
    every rank: all ranks then run the same plan whatever the solver does. A solver need not be
    deterministic across processes (CP-SAT with several workers and a time limit can return different
    optimal or near-optimal plans), and ranks running different strategies post different collectives,
    which hangs NCCL or returns garbage. Other ranks never call `decide`."""
    decision = decide() if comm.rank(group) == 0 else None
    decision = comm.broadcast_object(decision, 0, group)  # pickled StepPlan (simulator/policies.py), rank 0 -> all
    if not isinstance(getattr(decision, "plan", None), Plan):  # names would leave the model to guess the granularity
        raise TypeError(f"a policy's decision must carry a paradyse_lab.plan.Plan, got {decision!r}")
    return decision


def _all_finite(tensors, group) -> bool:
    """Whether every tensor on every rank is finite (one all-reduce of a [1] flag: all ranks agree). The
    per-tensor checks stay on the device (one count of non-finite tensors); the host reads one number, once:
    one device sync per call, not one per parameter."""
    present = [t for t in tensors if t is not None and t.numel()]
    device = present[0].device if present else "cpu"
    flag = torch.zeros(1, device=device)  # [1]: non-finite tensors on this rank
    for t in present:
        flag += (~torch.isfinite(t).all()).to(flag.dtype)  # no host read here
    with comm_record.tagged("health"):
        return float(comm.all_reduce(flag, group)[0]) == 0.0  # [1] summed over ranks


def _stop(bar, message: str):
    """End the run with `message` (every rank reaches this together)."""
    if bar is not None:
        bar.close()
    raise RunStopped(message)


def _replicated_head_policy(policy):
    """`policy` planning only the heads a replicated embedding and head run (grouped runs store them so)."""
    if hasattr(policy, "restrict_heads"):
        policy.restrict_heads(("whole", "tiled"))
    return policy


def _loss_tile(decision, model, tokens: int) -> int:
    """Tokens per tile of the tiled loss when the planner chose it for this step (paradyse_lab/costmodel/head_loss.py
    sizes the tiles), else 0 (the whole head); a vocabulary-parallel model's tiles of its `tokens` (this rank's) as
    paradyse_lab/costmodel/vocab_parallel.py sizes them."""
    if getattr(model, "vocab_parallel", False):
        return vocab_tile_tokens(model.cfg.model_spec("fp32" if model.wte.element_size() == 4 else "bf16"), model.p,
                                 tokens)
    if getattr(decision, "head", "whole") == "vocab":
        raise RuntimeError("the plan takes the vocabulary-parallel head but this model keeps the embedding and head "
                           "replicated (the policy's heads were not restricted to the run's storage)")
    if getattr(decision, "head", "whole") != "tiled":
        return 0
    return loss_tile_tokens(model.cfg.vocab_size, model.wte.element_size(), tokens)


def vocab_storage(policy, longest: int, batch: int, group) -> bool:
    """Whether the run stores the embedding and head by vocabulary rows (runtime/vocab_parallel.py): when the
    planner takes the head option 'vocab' at the run's longest step (rank 0 asks, every rank follows). The storage
    holds for the whole run, so the policy then plans every step with the heads it can run: 'vocab' alone, or the
    replicated 'whole' and 'tiled'. A policy without head options (`static:NAME`) keeps the replicated head, and so
    does one process (its one shard is the whole table: 'vocab' would only be the tiled loss)."""
    if not hasattr(policy, "storage_head"):
        return False
    head = policy.storage_head(longest, batch) if comm.rank(group) == 0 and comm.size(group) > 1 else None
    head = head if isinstance(head, str) else None  # a stand-in policy's answer is not a head option
    vocab = comm.broadcast_object(head, 0, group) == "vocab"
    policy.restrict_heads(("vocab",) if vocab else ("whole", "tiled"))
    return vocab


def train(opts, group=None, *, policy_for, groups_for=None) -> list[dict]:
    """Run the training loop on this rank (call on every rank); returns the per-step log.

    The run holds its --checkpoint-dir's lock from start to end (runtime/checkpoint.py `folder_lock`): a second
    run on the same folder is refused, naming the first.

    `policy_for(spec, p)` builds the policy that plans each step for the model `spec` (its dtype as trained)
    at world size `p`: an object whose `decide(step, batch)` (`step`: the sequence length, or with --pack-tokens
    the pack as a `paradyse_lab.costmodel.packed.PackedStep`) returns a decision with `plan` (a
    `paradyse_lab.plan.Plan`: one option per decision of the layer graph, and its granularity), `solve_s`,
    `cached` and `feasible`. The planner lives above the runtime:
    `paradyse_lab.app.training.train(opts, group)` passes the simulator's policies.

    With --global-batch, `groups_for(spec, p)` (given: a group planner, built on every rank) returns a function
    `plan(steps)` (rank 0 calls it) giving one step's `paradyse_lab.step_groups.GroupedStep` over the `p` ranks
    and each sequence's decision, for the sequences' `steps` as `decide` takes them; None: the fixed group policy
    of --group-size (paradyse_lab/fixed_groups.py), each sequence planned by `policy_for(spec, group size)`.
    """
    check_options(opts)
    _checked_on_rank0(partial(check_log_file, opts), group)  # before rank 0 makes the log file
    with checkpoint.folder_lock(opts.checkpoint_dir, group):
        return _train(opts, group, policy_for, groups_for)


def _checked_on_rank0(check, group) -> None:
    """Run `check` on rank 0 only and raise its `UserInputError` on every rank (one collective when p > 1)."""
    message = ""
    if comm.rank(group) == 0:
        try:
            check()
        except UserInputError as err:
            message = str(err)
    if comm.size(group) > 1:
        message = comm.broadcast_object(message, 0, group)  # '' when the check passed
    if message:
        raise UserInputError(message)


def _train(opts, group, policy_for, groups_for=None) -> list[dict]:
    """The training loop of `train`, run while this run holds its checkpoint folder."""
    p = comm.size(group)
    device = _device(group)
    dtype = "bf16" if device.type == "cuda" else "fp32"
    spec = replace(get_model(model_source(opts.model, opts.init_from)), dtype=dtype)
    cfg = GPTConfig.from_model_spec(spec)
    meta = run_meta(opts)
    found = _checkpoint_to_resume(opts, meta, group)
    micro_steps = opts.steps * micro_per_step(opts)
    size = checkpoint.workload_size(found, micro_steps)  # a resumed run keeps the workload it started with
    inputs = StepInputs.build(opts, p, cfg, size)
    inputs.refuse_untrainable(micro_steps)
    held_out = StepInputs.held_out(opts, p, cfg) if opts.eval_every else None
    planned_p = (opts.group_size or p) if opts.global_batch else p  # a grouped step plans at the group's size
    policy = policy_for(spec, planned_p)  # after every input check: the planner's statement is the run's first line
    longest = max(inputs.length(m) for m in range(micro_steps))
    if opts.global_batch:  # grouped steps keep the embedding and head replicated
        _replicated_head_policy(policy)
    vocab = False if opts.global_batch else vocab_storage(policy, longest, opts.batch, group)
    run = TrainState.create(opts, cfg, group, device, meta, size, vocab)
    start = run.resume(found, lambda m: policy.decide(inputs.planned(m), opts.batch))
    lr_schedule = scheduler(run.optimizer, opts, start)
    rank = comm.rank(group)
    bar = _progress_bar(opts, start, rank)
    log: list[dict] = []
    log_csv = StepLog(opts.log_file, start) if opts.log_file and rank == 0 else None
    reason = cap_reason(opts, cfg.max_positions, inputs.cap, inputs.unit) if rank == 0 else ""
    if rank == 0 and held_out is not None:
        warn_few_eval_steps(opts, held_out.eval_steps)
    plan_groups = groups_for(spec, p) if groups_for is not None and opts.global_batch else None
    loop = TrainLoop(run, policy, inputs, bar, reason, plan_groups=plan_groups,
                     eval_policy=_replicated_head_policy(policy_for(spec, p))
                     if held_out is not None and planned_p != p else None)
    for step in range(start, opts.steps):
        row = loop.optimizer_step(step)
        lr_schedule.step()
        if held_out is not None and ((step + 1) % opts.eval_every == 0 or step + 1 == opts.steps):
            row["eval_loss"], row["eval_steps"] = loop.evaluate(held_out), held_out.eval_steps
        log.append(row)
        if log_csv is not None:
            log_csv.write(row)
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{row['loss']:.3f}", s=row["seq_len"], docs=row["docs"],
                            ms=f"{1e3 * row['step_s']:.0f}", plan=row["plan"],
                            **{"peak" if device.type == "cuda" else "rss": f"{row['peak_bytes'] / 2**20:.0f}MiB"})
        if opts.checkpoint_dir and opts.checkpoint_every and (step + 1) % opts.checkpoint_every == 0:
            run.save(step + 1)
    if bar is not None:
        bar.close()
    if opts.checkpoint_dir and log and not (opts.checkpoint_every and opts.steps % opts.checkpoint_every == 0):
        run.save(opts.steps)
    if log_csv is not None:
        log_csv.close()
    return log


def warn_few_eval_steps(opts, eval_steps: int) -> None:
    """Rank 0's warning when --eval-dataset has fewer different steps than --eval-batches asks
    (runtime/step_inputs.py `StepInputs.held_out`): each evaluation then averages the ones it has, once each."""
    if eval_steps < opts.eval_batches:
        unit = f"packs of --pack-tokens {opts.pack_tokens}" if opts.pack_tokens is not None else "steps"
        print(f"warning: --eval-dataset {opts.eval_dataset} has {eval_steps} different held-out {unit}, fewer than "
              f"--eval-batches {opts.eval_batches}: each evaluation averages those {eval_steps}, once each",
              file=sys.stderr)


def run_meta(opts) -> dict:
    """What a resumed run must keep: model, seed, lr, weight decay, dataset, batch, --max-len, packing and
    --init-from, and when given the tokenizer and data order and the optimisation options (a checkpoint of other
    settings is refused; a run without the newer options keeps the older checkpoints' meta)."""
    meta = {"model": opts.model, "seed": opts.seed, "lr": opts.lr, "weight_decay": opts.weight_decay,
            "dataset": opts.dataset, "batch": opts.batch, "max_len": opts.max_len, "pack_tokens": opts.pack_tokens,
            "pack_order": opts.pack_order, "init_from": opts.init_from}
    meta.update({key: getattr(opts, key) for key in OPTIONAL_SETTINGS})
    return meta


def _device(group):
    """The GPU of this rank when every rank has one (one process, or NCCL), else the CPU."""
    on_gpu = torch.cuda.is_available() and (comm.size(group) == 1 or comm.is_nccl(group))
    return torch.device("cuda", torch.cuda.current_device()) if on_gpu else torch.device("cpu")


def _progress_bar(opts, start: int, rank: int):
    """A tqdm bar on rank 0 with --progress, else None. It starts no thread and no process-shared lock: no
    monitor thread (`tqdm.monitor_interval = 0`, tqdm's documented switch) alive at the rank's exit, and a thread
    lock instead of tqdm's default multiprocessing one, a named semaphore that a rank ending without
    interpreter finalization (runtime/launcher.py `end_process`) would leave behind ("leaked semaphore")."""
    if not (opts.progress and rank == 0):
        return None
    tqdm.monitor_interval = 0
    tqdm.set_lock(threading.RLock())
    return tqdm(total=opts.steps, initial=start, desc="train", dynamic_ncols=True)


def _peak_bytes(device) -> int:
    """Peak memory of this step: the GPU's allocated peak, or on the CPU the process's peak RSS."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        return int(torch.cuda.max_memory_allocated(device))
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


@dataclass
class TrainState:
    """The model, the optimizer and (bf16 on GPU) the fp32 master weights of one run, and what a
    checkpoint of it must match (`meta`) and record (`workload_size`)."""

    opts: object
    """The run's settings (module docstring)."""
    group: object
    device: object
    model: object
    optimizer: object
    masters: list | None
    """fp32 copies of the bf16 weights the optimizer updates (GPU), or None (fp32 weights on the CPU)."""
    meta: dict
    """What a resumed run must keep (`run_meta`)."""
    workload_size: int
    """Sequences of the run's workload (its first --steps), recorded in each checkpoint so a resumed run trains
    the same lengths."""

    @classmethod
    def create(cls, opts, cfg, group, device, meta: dict, workload_size: int,
               vocab_parallel: bool = False) -> TrainState:
        """A new model (initialised from --seed, or the --init-from folder's weights; `vocab_parallel`: its
        embedding and head sharded by vocabulary rows) and its optimizer."""
        model = ParallelGPT(cfg, group, seed=opts.seed, hf_folder=opts.init_from or None,
                            vocab_parallel=vocab_parallel).to(device)
        masters = None
        if device.type == "cuda":  # bf16 weights, fp32 master weights in the optimizer
            model.to(torch.bfloat16)
            masters = [q.detach().float().clone().requires_grad_() for q in model.parameters()]
        optimizer = torch.optim.AdamW(masters or list(model.parameters()), lr=opts.lr,
                                      weight_decay=opts.weight_decay,
                                      fused=device.type == "cuda" or None)  # CUDA: one kernel, no temporaries
        return cls(opts, group, device, model, optimizer, masters, meta, workload_size)

    @property
    def trained(self) -> dict:
        """The tensors AdamW steps, by parameter name: the fp32 masters on GPU, else the weights."""
        names = (n for n, _ in self.model.named_parameters())
        return dict(zip(names, self.masters or self.model.parameters()))

    def resume(self, found, replay_decision) -> int:
        """The first step to train: 0, or the step of the checkpoint `found` (`_checkpoint_to_resume`), loaded
        at any world size (runtime/dcp_checkpoint.py reshards it), and `replay_decision(m)` called for every
        micro-step m before it on rank 0 (the policy's cache and smoothing state; --accumulate A: A per step):
        only rank 0's policy decides (`decide_plan_on_rank0`), so the other ranks replay nothing."""
        if found is None:
            return 0
        start = dcp_checkpoint.load(found, self.trained, self.optimizer, self.model.cfg, self.meta,
                                    self.group)["step"]
        _copy_masters(self.masters, self.model)
        if comm.rank(self.group) == 0:  # the one rank that decides (decide_plan_on_rank0); the others wait for it
            for m in range(start * micro_per_step(self.opts)):  # every micro-step of the steps trained
                replay_decision(m)
        return start

    def save(self, step: int) -> None:
        """A checkpoint after `step` steps, readable at any world size (runtime/dcp_checkpoint.py)."""
        cfg = self.model.cfg
        record = {**dcp_checkpoint.model_record(cfg, self.opts.init_from), "workload_size": self.workload_size}
        dcp_checkpoint.save(self.opts.checkpoint_dir, step, self.trained, self.optimizer, cfg, self.meta, record,
                            self.group)

    def master_grads(self) -> None:
        """On GPU, the fp32 masters' gradients from the bf16 weights' (a [0]-sized or unused weight: zeros)."""
        if self.masters is not None:
            for m, q in zip(self.masters, self.model.parameters()):
                m.grad = q.grad.float() if q.grad is not None else torch.zeros_like(m)  # [0]-sized: wpe, lnf_b
                q.grad = None  # each bf16 gradient freed once copied: never both precisions of every gradient

    def apply_optimizer(self) -> None:
        """AdamW on the weights (or the fp32 masters, copied back into the bf16 weights after); gradients zeroed."""
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.model.zero_grad(set_to_none=True)
        _copy_masters(self.masters, self.model)


def _copy_masters(masters, model) -> None:
    """Copy the fp32 master weights into the bf16 model (GPU runs; nothing on CPU, where they are one)."""
    if masters is not None:
        with torch.no_grad():
            for m, q in zip(masters, model.parameters()):
                q.copy_(m)


def _checkpoint_to_resume(opts, meta: dict, group):
    """The checkpoint this run continues from (--resume), or None; a new run over checkpoints, and a resumed
    one whose --steps is below its checkpoint's step, are refused (`UserInputError`)."""
    if not opts.checkpoint_dir:
        return None
    if not opts.resume:
        checkpoint.refuse_overwrite(opts.checkpoint_dir)
        return None
    found = dcp_checkpoint.resumable(opts.checkpoint_dir, meta, group, log=print if comm.rank(group) == 0 else None)
    done = checkpoint.read_meta(found)["step"] if found is not None else 0
    if done > opts.steps:
        raise UserInputError(f"--steps {opts.steps} is below the step {done} of the checkpoint {found.name}: "
                             "nothing to train (give --steps above it)")
    return found


class StepLog:
    """The per-step CSV of `--log-file` (rank 0): a header and one flushed row per step. Made before the first
    step: a new run starts the file (check_options refuses one that holds another run's log); a resumed run
    keeps the rows up to the step it resumes from and drops the later ones, which it trains again, so the
    file never holds two rows for one step."""

    def __init__(self, path: str, keep_through: int = 0):
        rows = []
        if Path(path).is_file():
            rows = [r for r in csv.reader(io.StringIO(Path(path).read_text(encoding="utf-8", errors="replace")))
                    if r and r[0].isdigit() and int(r[0]) <= keep_through]
        text = io.StringIO()
        csv.writer(text).writerows([list(LOG_COLUMNS), *rows])
        write_text_atomic(path, text.getvalue())
        self.handle = open(path, "a", newline="")
        # a row's keys beyond the columns (eval_steps: for the end summary) stay out of the file
        self.writer = csv.DictWriter(self.handle, fieldnames=LOG_COLUMNS, extrasaction="ignore")

    def write(self, row: dict) -> None:
        self.writer.writerow(row)
        self.handle.flush()

    def close(self) -> None:
        self.handle.close()


if __name__ == "__main__":  # the command line lives in paradyse_lab/cli/; refuse instead of doing nothing
    print("error: run `paradyse-lab train ...` (or `torchrun --nproc-per-node N -m paradyse_lab train ...`); "
          "this module is a library", file=sys.stderr)
    raise SystemExit(2)
