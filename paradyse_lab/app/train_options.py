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
unit (`paradyse_lab.core.strategies.step_length`, the one rule). With `--pack-tokens N` a step is instead a pack of
the workload's documents (each longer than the cap split into chunks of it, `--long-documents`), packed
first-fit up to N tokens (`--pack-order sorted|shuffled`),
every document padded to the layout unit, attention confined to each and positions
restarting at each; `--batch` must be 1 (a step is one pack). A packed length file (several
lengths per line, `paradyse-lab data lengths --pack-tokens N`) trains its own steps as they are, as `simulate` does.
Tokens: a `file:*.jsonl` of token-id lists gives real tokens, each step its own documents whole (a document
longer than the cap split into consecutive chunks of at most the cap by default, or cut with `--long-documents cut`;
the run's first lines say how many)
(lengths rounded up to 2p, padding masked out of the loss); otherwise a fixed random
sparse Markov chain (seeded; each token has 4 likely successors), which a model can learn, so the loss falls. The
policy (`static:NAME`, `dynamic:SOLVER`, built by the application and passed to the runtime
as `policy_for`) plans each step with `--cost-model` (default auto; learned and calibrated ones fitted on
`--profiles`) on `--cluster` (a preset, or the measured DIR/cluster.toml of `paradyse-lab calibrate`) at this world
size. The log names the attention kernels that ran (`sdpa_cpu_varlen`, `math_varlen`, `sdpa_flash_varlen`,
`flash_attn_varlen` for packed steps; `math-masked`, the masked math kernel's visible fallback). AdamW; bf16
weights with fp32 master weights on GPU, fp32 on CPU. Logs loss, step time, peak memory and the plan (tqdm bar
on rank 0, a CSV with `--log-file`); `--checkpoint-dir` writes atomic
checkpoints through torch.distributed.checkpoint every `--checkpoint-every` steps and
at the end, and `--resume` continues from the newest one that verifies, at any world size (checksums; a resumed
run must keep the model, seed, lr, weight decay, dataset, batch, --max-len, packing and --init-from, and trains the
workload its checkpoint was trained on whatever its --steps; a new run never writes over a folder of checkpoints;
one run at a time holds a folder's lock, a second is refused naming the first). `--log-file` gets one flushed row
per step, one row per step even across a resume; a new run refuses a file holding an earlier run's log.
`--init-from DIR` starts from a Hugging Face model folder's weights (`paradyse-lab
export-hf` writes a checkpoint back as one). A non-finite loss stops the run (exit 1) before its optimizer step,
leaving the last checkpoint as it was.
Optimisation: `--lr-schedule constant|linear|cosine`
after
`--warmup-steps` of linear warmup (torch.optim.lr_scheduler.LambdaLR); `--clip-grad N` clips to the global L2 norm
of the whole model's gradient, each parameter counted once over the ranks (shards summed, replicas once);
`--accumulate A` sums the gradients of A micro-steps per optimizer step, each with its own data and plan, weighed
by their next-token targets; `--eval-dataset D --eval-every N` logs the held-out loss of D's first
`--eval-batches` steps every N steps. Real text: `--tokenizer PATH` (a tokenizer.json) makes `--dataset` a
`datasets` save_to_disk folder or .jsonl/.parquet/.arrow files with a `--text-column`;
token and text files train in `--data-order` (file order by default, shuffled, or
sorted as the paper's curriculum). The log gets tokens, cut_tokens (tokens beyond the length cap, warned once),
lr, grad_norm and eval_loss; rank 0 states the cluster, cost model and budget that plan the run, warns when the
cluster's GPU is not the one present, and ends with a summary. On a CUDA
machine `--nproc` defaults to the local GPU count.
Options are checked before any rank starts; under `--nproc N` a rank's error is printed once, by the launcher, and
the ranks stop with it. The training
loop these options drive is the runtime's (which takes them as a plain object).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from paradyse_lab.core.step_groups import TRAIN_GROUP_POLICIES
from paradyse_lab.runtime.training.optim_schedule import SCHEDULES


@dataclass(frozen=True)
class TrainOptions:
    """One training run. Each field is one flag of `train` (the fields and the
    docstrings under them become the flags and their help)."""

    model: str = field(metadata={"default": ""})
    """Model preset (e.g. gpt2-tiny, llama-tiny), a Hugging Face GPT-2 or LLaMA-shaped config.json, or a model
    folder: one holding weights (model.safetensors or its shards) starts from them, as --init-from; one with only a
    config.json from random weights ('': the config.json of --init-from). The run's first lines say which."""
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
    the world) (0: one sequence per step on all ranks)."""
    group_size: int = 0
    """Ranks per group of a --global-batch step: a power of two dividing the world size (0: the world, one group)."""
    groups: str = field(default="", metadata={"choices": ("", *TRAIN_GROUP_POLICIES)})
    """Plan each --global-batch step's groups with the group planner `simulate` uses
    (`group_planner`): sized (group sizes per step, per-layer plans; --policy dynamic:SOLVER), sized-exact (the
    same, exact: at most 10 sequences on at most 16 ranks), paradyse (one group of all ranks), smallest-fit
    (the smallest group that fits each sequence, one strategy, one split; --policy static:megatron_cz) or static
    (one group, one strategy), one split per step; or rounds (a step as rounds of splits run one after another,
    gradients reduced once; per-layer plans, greedy) and rounds-exact (the same, exact: at most 6 sequences on at
    most 8 ranks) ('': the fixed groups of --group-size). `simulate`'s megatron is simulated only."""
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
    long_documents: str = field(default="chunk", metadata={"choices": ("chunk", "cut")})
    """A token or text file's document (or a packed workload's) longer than the cap: chunk (split into
    consecutive documents of at most the cap, every token trained) or cut (its tail untrained); the run's first
    lines say how many documents were chunked or cut. One synthetic sequence per step is cut to the cap."""
    cluster: str = ""
    """Cluster preset or .toml (e.g. paradyse-lab calibrate's DIR/cluster.toml) the policy plans for ('': the
    default preset)."""
    cost_model: str = "auto"
    """Cost model the policy plans with (auto: replay where the cluster has measured kernel tables, bundled or
    beside its cluster file, else analytic):"""
    profiles: str = ""
    """Profile CSV the learned and calibrated cost models are fitted on ('': the cluster's bundled one)."""
    budget_gib: float = 0.0
    """Memory budget of a plan per GPU in GiB (0: the cluster's GPU memory less its reserve, `reserve_gib` in its
    file; --budget-gb, in GB, is deprecated)."""
    allow_infeasible: bool = False
    """Train even when the planner finds no plan within the budget for the run's longest step (default: the run is
    refused before its first step, naming the budget; on a CPU without --cluster the budget is this host's memory
    over the ranks)."""
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
    into steps of at most this many tokens, attention confined to each document;
    not given: one sequence per step."""
    pack_order: str = "sorted"
    """Order first-fit packs the documents in: sorted (longest first, steps shortest first) or shuffled."""
    init_from: str = ""
    """Hugging Face model folder (config.json and safetensors: GPT-2, LLaMA, Mistral, Qwen2) whose weights the
    run starts from, each rank reading only its slices ('': initialised from --seed)."""
