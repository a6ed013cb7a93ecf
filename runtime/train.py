"""Train a GPT-2- or LLaMA-shaped model with a per-step, per-layer strategy plan chosen by a solver.

Commands (one machine):

    # under torchrun (one process per GPU, NCCL; or CPU processes with gloo):
    torchrun --standalone --nproc-per-node 4 -m paradyse_lab train --model gpt2-tiny --dataset uniform:512:1024 \\
        --policy dynamic:dp --steps 100
    # single-command launcher: spawns the processes itself (gloo on CPU, NCCL on GPUs)
    paradyse-lab train --nproc 2 --model gpt2-tiny --dataset uniform:512:1024 --policy dynamic:dp --steps 50

Each step takes its sequence length from the workload (`--dataset`: github_code, grch38, uniform:LO:HI,
lognormal:MEDIAN:SIGMA, or file:PATH), padded up to the layout unit 2p as `simulate` pads it (the padding
carries no loss); a length above `--max-len` (default the model's positions) is cut to it, rounded down to the
unit (`paradyse_lab.strategies.step_length`, the one rule). With `--pack-tokens N` a step is instead a pack of
the workload's documents (each cut to `--max-len`), packed first-fit up to N tokens (`--pack-order sorted|shuffled`,
paradyse_lab/packing.py), every document padded to the layout unit, attention confined to each and positions
restarting at each (runtime/packed.py); `--batch` must be 1 (a step is one pack). A packed length file (several
lengths per line, `paradyse-lab lengths --pack-tokens N`) trains its own steps as they are, as `simulate` does.
Tokens: a `file:*.jsonl` of token-id lists gives real tokens, each step its own documents whole
(runtime/train_inputs.py: lengths rounded up to 2p, padding masked out of the loss); otherwise a fixed random
sparse Markov chain (seeded; each token has 4 likely successors), which a model can learn, so the loss falls. The
policy (`static:NAME`, `dynamic:SOLVER`, simulator/policies.py, built by paradyse_lab/app/training.py and passed in
as `policy_for`) plans each step with `--cost-model` (default analytic; learned and calibrated ones fitted on
`--profiles`) on `--cluster` (a preset, or the measured DIR/cluster.toml of `paradyse-lab calibrate`) at this world
size. The log names the attention kernels that ran (`math_varlen`, `sdpa_flash_varlen`, `flash_attn_varlen`
for packed steps; `math-masked`, the masked math kernel's visible fallback). AdamW; bf16 weights with fp32
master weights on GPU, fp32 on CPU. Logs loss, step time, peak
memory and the plan (tqdm bar on rank 0, a CSV with `--log-file`); `--checkpoint-dir` writes atomic
checkpoints through torch.distributed.checkpoint (runtime/dcp_checkpoint.py) every `--checkpoint-every` steps and
at the end, and `--resume` continues from the newest one that verifies, at any world size (checksums; a resumed
run must keep the model, seed, lr, weight decay, dataset, batch, --max-len, packing and --init-from, and trains the
workload its checkpoint was trained on whatever its --steps; a new run never writes over a folder of checkpoints;
one run at a time holds a folder's lock, a second is refused naming the first). `--log-file` gets one flushed row
per step, one row per step even across a resume; a new run refuses a file holding an earlier run's log.
`--init-from DIR` starts from a Hugging Face model folder's weights (runtime/hf_weights.py; `paradyse-lab
export-hf` writes a checkpoint back as one). A non-finite loss stops the run (exit 1) before its optimizer step,
leaving the last checkpoint as it was.
Optimisation (runtime/optim_schedule.py, runtime/train_step.py): `--lr-schedule constant|linear|cosine` after
`--warmup-steps` of linear warmup (torch.optim.lr_scheduler.LambdaLR); `--clip-grad N` clips to the global L2 norm
of the whole model's gradient, each parameter counted once over the ranks (shards summed, replicas once);
`--accumulate A` sums the gradients of A micro-steps per optimizer step, each with its own data and plan, weighed
by their next-token targets; `--eval-dataset D --eval-every N` logs the held-out loss of D's first
`--eval-batches` steps every N steps. Real text: `--tokenizer PATH` (a tokenizer.json) makes `--dataset` a
`datasets` save_to_disk folder or .jsonl/.parquet/.arrow files with a `--text-column`
(paradyse_lab/text_data.py); token and text files train in `--data-order` (file order by default, shuffled, or
sorted as the paper's curriculum). The log gets tokens, cut_tokens (tokens beyond the length cap, warned once),
lr, grad_norm and eval_loss; rank 0 states the cluster, cost model and budget that plan the run, warns when the
cluster's GPU is not the one present, and ends with a summary (paradyse_lab/app/run_summary.py). On a CUDA
machine `--nproc` defaults to the local GPU count.
Options are checked before any rank starts; under `--nproc N` a rank's error is printed once, by the launcher, and
the ranks stop with it (runtime/launcher.py). The command line is paradyse_lab/cli/train_command.py.
"""

from __future__ import annotations

import csv
import dataclasses
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from paradyse_lab.errors import RunStopped, UserInputError
from runtime.optim_schedule import SCHEDULES
from runtime.train_inputs import LOG_COLUMNS


@dataclass(frozen=True)
class TrainOptions:
    """One training run. Each field is one flag of `train` (paradyse_lab/options.py turns the fields and the
    docstrings under them into the flags and their help)."""

    model: str = field(metadata={"default": ""})
    """Model preset (e.g. gpt2-tiny, llama-tiny) or a Hugging Face GPT-2 or LLaMA-shaped config.json ('': the
    config.json of --init-from)."""
    dataset: str
    """Workload giving each step's sequence length: github_code, grch38, uniform:LO:HI, lognormal:MEDIAN:SIGMA,
    file:PATH (file:*.jsonl of token-id lists gives real tokens)."""
    tokenizer: str = ""
    """tokenizer.json (or a folder holding one) the text of --dataset is tokenized with; --dataset then names a
    datasets save_to_disk folder, or .jsonl / .parquet / .arrow files (or a folder of them) ('': --dataset is a
    workload, a length file or a token file)."""
    text_column: str = "text"
    """Column of the text dataset holding the documents."""
    data_order: str = field(default="", metadata={"choices": ("", "file", "shuffled", "sorted")})
    """Order a token or text file's documents train in: file, shuffled (seeded by --seed) or sorted (ascending
    length, the paper's curriculum) ('': file)."""
    policy: str = "dynamic:dp"
    """static:NAME[+recompute] or dynamic:SOLVER[+recompute][+sublayer]."""
    steps: int = 100
    """Optimizer steps in total (a resumed run continues up to this)."""
    batch: int = 1
    """Sequences per step."""
    lr: float = 1e-3
    """AdamW learning rate."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    lr_schedule: str = field(default="constant", metadata={"choices": SCHEDULES})
    """Learning rate after the warmup: constant, linear or cosine (both down to 0 at --steps)."""
    warmup_steps: int = 0
    """Optimizer steps of linear warmup up to --lr."""
    clip_grad: float = 0.0
    """Clip the gradient to this global L2 norm, over every shard of every rank (0: no clipping)."""
    accumulate: int = 1
    """Micro-steps per optimizer step (gradient accumulation), each with its own data and plan."""
    global_batch: int = 0
    """Sequences per optimizer step trained at once by groups of --group-size ranks (a grouped step: each
    sequence one group's, dealt round-robin, each with its own plan at the group's size; gradients summed over
    the world; runtime/grouped.py) (0: one sequence per step on all ranks)."""
    group_size: int = 0
    """Ranks per group of a --global-batch step: a power of two dividing the world size (0: the world, one group)."""
    eval_dataset: str = ""
    """Held-out dataset (same forms as --dataset) whose loss is logged every --eval-every steps ('': none)."""
    eval_every: int = 0
    """Evaluate every this many optimizer steps, and after the last (0: never)."""
    eval_batches: int = 4
    """Steps of --eval-dataset each evaluation averages over (its first ones, the same every time)."""
    seed: int = 0
    """Seed of the initial weights, the workload and the synthetic tokens."""
    max_len: int = 0
    """Cap on the sequence length (0: the model's positions; none for a rotary model without a limit)."""
    cluster: str = ""
    """Cluster preset or .toml (e.g. paradyse-lab calibrate's DIR/cluster.toml) the policy plans for ('': the
    default preset)."""
    cost_model: str = "analytic"
    """Cost model the policy plans with:"""
    profiles: str = ""
    """Profile CSV the learned and calibrated cost models are fitted on ('': the cluster's bundled one)."""
    budget_gib: float = 0.0
    """Memory budget of a plan per GPU in GiB (0: the cluster's GPU memory less its reserve, `reserve_gib` in its
    file; --budget-gb, in GB, is deprecated)."""
    recompute: bool = False
    """Let the policy choose activation recomputation per layer."""
    granularity: str = "block"
    """What one decision of the policy covers: block (one decision per layer, the paper) or sublayer (attention
    and MLP apart)."""
    checkpoint_dir: str = ""
    """Where to write sharded checkpoints ('': none)."""
    checkpoint_every: int = 0
    """Checkpoint period in steps (0: only at the end)."""
    resume: bool = False
    """Continue from the latest checkpoint in --checkpoint-dir."""
    log_file: str = ""
    """CSV of the per-step loss, time, memory and plan (rank 0). A new run refuses a file that already holds a
    log (remove it or name another: two runs' rows are never mixed); with --resume the rows after the resumed
    checkpoint's step are dropped and trained again, so each step has one row."""
    progress: bool = True
    """A progress bar on rank 0 (--no-progress: none)."""
    pack_tokens: int | None = field(default=None, metadata={"type": int})
    """Token budget of a packed step (a positive integer): the workload's documents packed greedily first-fit
    into steps of at most this many tokens (paradyse_lab/packing.py), attention confined to each document;
    not given: one sequence per step."""
    pack_order: str = "sorted"
    """Order first-fit packs the documents in: sorted (longest first, steps shortest first) or shuffled."""
    init_from: str = ""
    """Hugging Face model folder (config.json and safetensors: GPT-2, LLaMA, Mistral, Qwen2) whose weights the
    run starts from, each rank reading only its slices ('': initialised from --seed)."""


def micro_per_step(opts: TrainOptions) -> int:
    """Micro-steps (one sequence, or one pack, of the dataset each) per optimizer step: --accumulate, or the
    sequences of a --global-batch step."""
    return opts.global_batch or opts.accumulate


def decide_plan_on_rank0(decide, group=None):
    """`decide()` (the policy's choice for this step) run on rank 0 of `group` only, and its result sent to
    every rank: all ranks then run the same plan whatever the solver does. A solver need not be
    deterministic across processes (CP-SAT with several workers and a time limit can return different
    optimal or near-optimal plans), and ranks running different strategies post different collectives,
    which hangs NCCL or returns garbage. Other ranks never call `decide`."""
    from paradyse_lab.plan import Plan
    from runtime import comm

    decision = decide() if comm.rank(group) == 0 else None
    decision = comm.broadcast_object(decision, 0, group)  # pickled StepPlan (simulator/policies.py), rank 0 -> all
    if not isinstance(getattr(decision, "plan", None), Plan):  # names would leave the model to guess the granularity
        raise TypeError(f"a policy's decision must carry a paradyse_lab.plan.Plan, got {decision!r}")
    return decision


def backend_for(world: int, env, cuda_available: bool, device_count: int) -> str:
    """'nccl' when every process on this node has a GPU of its own, else 'gloo'. The node's process count
    is torchrun's LOCAL_WORLD_SIZE (the world size under the single-machine launcher, which does not set it),
    so a multi-node torchrun with 8 GPUs per node and 16 ranks uses NCCL."""
    local_world = int(env.get("LOCAL_WORLD_SIZE", world))
    return "nccl" if cuda_available and device_count >= local_world else "gloo"


def _all_finite(tensors, group) -> bool:
    """Whether every tensor on every rank is finite (one all-reduce of a [1] flag: all ranks agree). The
    per-tensor checks stay on the device (one count of non-finite tensors); the host reads one number, once:
    one device sync per call, not one per parameter."""
    import torch

    from runtime import comm

    present = [t for t in tensors if t is not None and t.numel()]
    device = present[0].device if present else "cpu"
    flag = torch.zeros(1, device=device)  # [1]: non-finite tensors on this rank
    for t in present:
        flag += (~torch.isfinite(t).all()).to(flag.dtype)  # no host read here
    with comm.tagged("health"):
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
        from paradyse_lab.costmodel.vocab_parallel import vocab_tile_tokens

        return vocab_tile_tokens(model.cfg.model_spec("fp32" if model.wte.element_size() == 4 else "bf16"), model.p,
                                 tokens)
    if getattr(decision, "head", "whole") == "vocab":
        raise RuntimeError("the plan takes the vocabulary-parallel head but this model keeps the embedding and head "
                           "replicated (the policy's heads were not restricted to the run's storage)")
    if getattr(decision, "head", "whole") != "tiled":
        return 0
    from paradyse_lab.costmodel.head_loss import loss_tile_tokens

    return loss_tile_tokens(model.cfg.vocab_size, model.wte.element_size(), tokens)


def vocab_storage(policy, longest: int, batch: int, group) -> bool:
    """Whether the run stores the embedding and head by vocabulary rows (runtime/vocab_parallel.py): when the
    planner takes the head option 'vocab' at the run's longest step (rank 0 asks, every rank follows). The storage
    holds for the whole run, so the policy then plans every step with the heads it can run: 'vocab' alone, or the
    replicated 'whole' and 'tiled'. A policy without head options (`static:NAME`) keeps the replicated head, and so
    does one process (its one shard is the whole table: 'vocab' would only be the tiled loss)."""
    from runtime import comm

    if not hasattr(policy, "storage_head"):
        return False
    head = policy.storage_head(longest, batch) if comm.rank(group) == 0 and comm.size(group) > 1 else None
    head = head if isinstance(head, str) else None  # a stand-in policy's answer is not a head option
    vocab = comm.broadcast_object(head, 0, group) == "vocab"
    policy.restrict_heads(("vocab",) if vocab else ("whole", "tiled"))
    return vocab


def train(opts: TrainOptions, group=None, *, policy_for, plan_groups=None) -> list[dict]:
    """Run the training loop on this rank (call on every rank); returns the per-step log.

    The run holds its --checkpoint-dir's lock from start to end (runtime/checkpoint.py `folder_lock`): a second
    run on the same folder is refused, naming the first.

    `policy_for(spec, p)` builds the policy that plans each step for the model `spec` (its dtype as trained)
    at world size `p`: an object whose `decide(step, batch)` (`step`: the sequence length, or with --pack-tokens
    the pack as a `paradyse_lab.costmodel.packed.PackedStep`) returns a decision with `plan` (a
    `paradyse_lab.plan.Plan`: one option per decision of the layer graph, and its granularity), `solve_s`,
    `cached` and `feasible`. The planner lives above the runtime:
    `paradyse_lab.app.training.train(opts, group)` passes the simulator's policies.

    With --global-batch, `plan_groups(steps, world)` (given: a group planner; rank 0 calls it) returns one step's
    `paradyse_lab.step_groups.GroupedStep` over `world` ranks and each sequence's decision, for the sequences'
    `steps` as `decide` takes them; None: the fixed group policy of --group-size (paradyse_lab/fixed_groups.py),
    each sequence planned by `policy_for(spec, group size)`.
    """
    from runtime import checkpoint
    from runtime.train_inputs import check_log_file, check_options

    check_options(opts)
    _checked_on_rank0(partial(check_log_file, opts), group)  # before rank 0 makes the log file
    with checkpoint.folder_lock(opts.checkpoint_dir, group):
        return _train(opts, group, policy_for, plan_groups)


def _checked_on_rank0(check, group) -> None:
    """Run `check` on rank 0 only and raise its `UserInputError` on every rank (one collective when p > 1)."""
    from runtime import comm

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


def _train(opts: TrainOptions, group, policy_for, plan_groups=None) -> list[dict]:
    """The training loop of `train`, run while this run holds its checkpoint folder."""
    from dataclasses import replace

    from paradyse_lab.model_spec import get_model
    from runtime import checkpoint, comm
    from runtime.hf_weights import model_source
    from runtime.optim_schedule import scheduler
    from runtime.reference import GPTConfig
    from runtime.step_inputs import StepInputs
    from runtime.train_step import TrainLoop, cap_reason

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


def warn_few_eval_steps(opts: TrainOptions, eval_steps: int) -> None:
    """Rank 0's warning when --eval-dataset has fewer different steps than --eval-batches asks
    (runtime/step_inputs.py `StepInputs.held_out`): each evaluation then averages the ones it has, once each."""
    import sys

    if eval_steps < opts.eval_batches:
        unit = f"packs of --pack-tokens {opts.pack_tokens}" if opts.pack_tokens is not None else "steps"
        print(f"warning: --eval-dataset {opts.eval_dataset} has {eval_steps} different held-out {unit}, fewer than "
              f"--eval-batches {opts.eval_batches}: each evaluation averages those {eval_steps}, once each",
              file=sys.stderr)


def run_meta(opts: TrainOptions) -> dict:
    """What a resumed run must keep: model, seed, lr, weight decay, dataset, batch, --max-len, packing and
    --init-from, and when given the tokenizer and data order and the optimisation options (a checkpoint of other
    settings is refused; a run without the newer options keeps the older checkpoints' meta)."""
    meta = {"model": opts.model, "seed": opts.seed, "lr": opts.lr, "weight_decay": opts.weight_decay,
            "dataset": opts.dataset, "batch": opts.batch, "max_len": opts.max_len, "pack_tokens": opts.pack_tokens,
            "pack_order": opts.pack_order, "init_from": opts.init_from}
    meta.update({key: getattr(opts, key) for key in OPTIONAL_SETTINGS})
    return meta


OPTIONAL_SETTINGS = {key: f.default for f in dataclasses.fields(TrainOptions) if (key := f.name) in (
    "tokenizer", "text_column", "data_order", "accumulate", "lr_schedule", "warmup_steps", "clip_grad",
    "global_batch")}
"""Settings a resumed run must keep that checkpoints of earlier versions do not record: a checkpoint without one
was written with its default (runtime/dcp_checkpoint.py compares them so)."""


def _device(group):
    """The GPU of this rank when every rank has one (one process, or NCCL), else the CPU."""
    import torch

    from runtime import comm

    on_gpu = torch.cuda.is_available() and (comm.size(group) == 1 or comm.is_nccl(group))
    return torch.device("cuda", torch.cuda.current_device()) if on_gpu else torch.device("cpu")


def _progress_bar(opts: TrainOptions, start: int, rank: int):
    """A tqdm bar on rank 0 with --progress, else None. It starts no thread and no process-shared lock: no
    monitor thread (`tqdm.monitor_interval = 0`, tqdm's documented switch) alive at the rank's exit, and a thread
    lock instead of tqdm's default multiprocessing one, a named semaphore that a rank ending without
    interpreter finalization (runtime/launcher.py `end_process`) would leave behind ("leaked semaphore")."""
    if not (opts.progress and rank == 0):
        return None
    import threading

    from tqdm import tqdm

    tqdm.monitor_interval = 0
    tqdm.set_lock(threading.RLock())
    return tqdm(total=opts.steps, initial=start, desc="train", dynamic_ncols=True)


def _peak_bytes(device) -> int:
    """Peak memory of this step: the GPU's allocated peak, or on the CPU the process's peak RSS."""
    import resource

    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)
        return int(torch.cuda.max_memory_allocated(device))
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


@dataclass
class TrainState:
    """The model, the optimizer and (bf16 on GPU) the fp32 master weights of one run, and what a
    checkpoint of it must match (`meta`) and record (`workload_size`)."""

    opts: TrainOptions
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
    def create(cls, opts: TrainOptions, cfg, group, device, meta: dict, workload_size: int,
               vocab_parallel: bool = False) -> TrainState:
        """A new model (initialised from --seed, or the --init-from folder's weights; `vocab_parallel`: its
        embedding and head sharded by vocabulary rows) and its optimizer."""
        import torch

        from runtime.model import ParallelGPT

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

        from runtime import comm, dcp_checkpoint

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
        from runtime import dcp_checkpoint

        cfg = self.model.cfg
        record = {**dcp_checkpoint.model_record(cfg, self.opts.init_from), "workload_size": self.workload_size}
        dcp_checkpoint.save(self.opts.checkpoint_dir, step, self.trained, self.optimizer, cfg, self.meta, record,
                            self.group)

    def master_grads(self) -> None:
        """On GPU, the fp32 masters' gradients from the bf16 weights' (a [0]-sized or unused weight: zeros)."""
        import torch

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
    import torch

    if masters is not None:
        with torch.no_grad():
            for m, q in zip(masters, model.parameters()):
                q.copy_(m)


def _checkpoint_to_resume(opts: TrainOptions, meta: dict, group):
    """The checkpoint this run continues from (--resume), or None; a new run over checkpoints, and a resumed
    one whose --steps is below its checkpoint's step, are refused (`UserInputError`)."""
    from runtime import checkpoint, comm, dcp_checkpoint

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
        import io

        from paradyse_lab.atomic_write import write_text_atomic

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
    import sys

    print("error: run `paradyse-lab train ...` (or `torchrun --nproc-per-node N -m paradyse_lab train ...`); "
          "this module is a library", file=sys.stderr)
    raise SystemExit(2)
