"""What `--help` says about the commands whose library documentation is long: what the command does and an
example, in the user's words (the library's own docstrings say how it works, for readers of the code)."""

from __future__ import annotations

TRAIN = """\
Train a GPT-2- or LLaMA-shaped model with a per-layer strategy plan chosen for every step by a solver.

    paradyse-lab train --nproc 2 --model gpt2-tiny --dataset uniform:512:1024 --policy dynamic:dp --steps 50
    torchrun --standalone --nproc-per-node 4 -m paradyse_lab train --model gpt2-tiny --dataset uniform:512:1024

Each step takes its length from the workload (--dataset), padded to a multiple of twice the number of ranks
(the padding carries no loss); a document longer than --max-len is cut to it. With --pack-tokens a step is a
pack of whole documents with attention inside each. Text datasets are tokenized with --tokenizer; a workload
of lengths alone trains on tokens of a seeded random Markov chain, which a model can learn. The policy plans
each step with --cost-model on --cluster at this world size. AdamW; bf16 weights with fp32 master weights on
GPU, fp32 on CPU. Logs loss, step time, peak memory and the plan (a progress bar, and a CSV with --log-file);
--checkpoint-dir writes checkpoints that --resume continues from at any world size. A non-finite loss stops
the run (exit 1) before its optimizer step. The exact rules of every option are in the training guide of the
documentation."""

PROFILE = """\
Measure the runtime: time, peak memory and kept activations of every strategy per sequence length, one row
per (strategy option, length), written as a profile the cost models are fitted on.

    paradyse-lab costmodel profile --model gpt2-tiny --seqs 512,1024 --strategies megatron_ts,metp+recompute \\
        --mode rank-local --p 8 --out profile.csv
    torchrun --standalone --nproc-per-node 8 -m paradyse_lab costmodel profile --model gpt2-tiny \\
        --seqs 512,1024 --strategies megatron_ts,metp --mode distributed --out profile.csv

A row is one training step (forward and backward, no optimizer step) of the whole model, seen from one rank:
--warmup untimed steps, then the median of --repeats timed ones. --mode distributed runs every rank for real
(NCCL on GPUs, gloo on CPU); --mode rank-local runs one process as rank 0 of a p-rank world whose collectives
move nothing, and adds the communication time the analytic model predicts (the row says it is modelled).
Every model state is resident while measuring (16 bytes per parameter). On CPU there is no allocator peak
counter: the peak is model states plus kept activations, a lower bound; use GPU rows for peak memory."""

CALIBRATE = """\
Measure the machine it runs on and write a cluster file and a measured profile into --out.

    paradyse-lab calibrate --out DIR              # defaults suit the machine (CPU: gpt2-cpu, p = 2, 6 min)
    paradyse-lab calibrate --out DIR --nproc 8 --model gpt2 --max-len 1024 --budget-s 540   # a GPU node
    torchrun --standalone --nproc-per-node 8 -m paradyse_lab calibrate --out DIR             # the same

Everything is measured through the runtime on p ranks at once (gloo on CPU, NCCL on GPUs); rank 0 writes.
Three stages share --budget-s: the collectives the strategies use over buffer sizes (fitted per kind to a
latency and a bandwidth; across nodes also over the network), the kernels (GEMMs at the model's shapes, the
attention kernel, the per-operator dispatch cost and memory bandwidths), and a profile of every strategy
over the lengths up to --max-len. A stage stops measuring when its next point would not fit the budget, and
says so. Writes DIR/cluster.toml (every command takes it with --cluster), DIR/profile.csv and the raw CSVs;
a rerun with the same settings skips what is finished (--force starts over)."""

VALIDATE_RUN = """\
Train each policy for real, simulate the same runs, and compare them step by step.

    paradyse-lab calibrate --out DIR          # first: DIR/cluster.toml and DIR/profile.csv of this machine
    paradyse-lab validate-run --out DIR       # then: the four static policies, dynamic:heuristic, dynamic:dp
    paradyse-lab validate-run --out DIR --cost-model analytic   # the analytic model on the measured cluster

Each policy trains a fresh model for --steps steps on --nproc ranks over the same lengths, planning with
--cost-model on --cluster; the simulator then replays each policy over the executed lengths with the same
cost model, cluster and budget. Defaults come from DIR (its model, world size and lengths, its cluster file
and profile, and the calibrated cost model when DIR holds both). The first --skip-steps steps are left out.
Every policy runs --repeats times, round by round; a step's measured time is the median of its runs.
Writes DIR/validate_run.csv (per step), DIR/validate_run_summary.csv (per policy) and a figure, and prints
per policy the error of the predicted total, the per-step error, whether the measured and simulated rankings
agree, and each dynamic policy's speed-up over the best static one."""

EXPORT_HF = """\
Write a training checkpoint as a Hugging Face model folder that transformers loads.

    paradyse-lab train --nproc 2 --init-from llama-folder --dataset file:tokens.jsonl --checkpoint-dir ck
    paradyse-lab export-hf --checkpoint ck --out llama-finetuned     # newest checkpoint in ck
    python -c "import transformers; transformers.AutoModelForCausalLM.from_pretrained('llama-finetuned')"

The checkpoint may come from any world size. Bad input (no checkpoint there, a damaged one, an --out that is
not a new or empty folder, a bad --max-shard-size) is one line on stderr and exit 2, and nothing is written."""

TRAIN_FLAGS = {
    "global_batch": "sequences per optimizer step, trained at once by groups of --group-size ranks (each "
                    "sequence one group's, with its own plan at the group's size; gradients summed over all "
                    "ranks); 0: one sequence per step on all ranks (default 0)",
    "groups": "plan each --global-batch step's groups as `simulate` does: sized (group sizes per step, "
              "per-layer plans; --policy dynamic:SOLVER), sized-exact (the same, exact: at most 10 sequences "
              "on at most 16 ranks), paradyse (one group of all ranks), smallest-fit (the smallest group "
              "that fits each sequence, one strategy; --policy static:megatron_cz) or static (one group, one "
              "strategy), one split per step; or rounds (a step as rounds of splits run one after another, "
              "gradients reduced once; per-layer plans) and rounds-exact (the same, exact: at most 6 "
              "sequences on at most 8 ranks); not given: the fixed groups of --group-size. `simulate`'s "
              "megatron is simulated only",
    "pack_tokens": "token budget of a packed step (a positive integer): the workload's documents packed "
                   "greedily first-fit into steps of at most this many tokens, attention confined to each "
                   "document; not given: one sequence per step",
}
"""`train` flags whose option docstrings name the code that implements them: the help text instead."""


def rewrite_flag_help(parser, texts: dict[str, str]) -> None:
    """Set the help of the flags of `parser` whose destination is in `texts`."""
    missing = set(texts) - {action.dest for action in parser._actions}
    if missing:
        raise ValueError(f"no such flags: {sorted(missing)}")
    for action in parser._actions:
        if action.dest in texts:
            action.help = texts[action.dest].replace("%", "%%")
