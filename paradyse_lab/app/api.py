"""The public Python API (`import paradyse_lab`; docs/api.md): plan a step, build the model, train it, save and
load it, export it.

    import paradyse_lab as pl
    plan = pl.plan_step("llama-tiny", p=2, seq_len=64, solver="dp")      # -> StepAnswer: strategies, time, memory
    model = pl.build_model("llama-tiny", group)                          # ParallelGPT in the caller's group
    loss = pl.train_step(model, plan, tokens, optimizer)                 # forward + backward + optimizer step
    pl.save("ck", step, model, optimizer); pl.load("ck", model, optimizer)
    pl.export_hf("ck", "hf-folder")                                      # transformers' from_pretrained loads it

The planner is the one `paradyse-lab plan` runs (a SearchProblem from the cost model, solved by a solver);
the model is the runtime's `ParallelGPT`; checkpoints are the runtime's DCP checkpoints (any
world size), and so is
the Hugging Face export. Every function runs on every rank of the caller's process group (the
caller sets the group up: torchrun, or `torch.distributed.init_process_group`), and the plan is pure Python
(no torch), the same on every rank.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from paradyse_lab.app.step_question import StepQuestion, plan_question
from paradyse_lab.core.model_folder import has_weights
from paradyse_lab.core.model_spec import ModelSpec, get_model
from paradyse_lab.errors import UserInputError
from paradyse_lab.solvers import get_solver
from paradyse_lab.units import gib_to_bytes


@dataclass(frozen=True)
class StepAnswer:
    """What `plan_step` reports: a solver's plan for one training step (its option names) with the cost model's
    prediction of its time and memory. Not `paradyse_lab.core.plan.Plan`, the plan a policy hands the runtime (options
    and granularity): `strategies` here are the names `forward_backward` and `train_step` take."""

    strategies: tuple[str, ...]
    """One option (`NAME` or `NAME+recompute`) per decision: per layer, or per sub-layer (attention, MLP)."""
    predicted_time_s: float
    """Forward + backward seconds of the step on the cluster, per the cost model."""
    memory: dict[str, int]
    """Peak bytes per GPU and its parts: `fixed` (model states, embedding and head), `kept_activations` (kept
    for the backward by every decision), `transient` (the largest working set), `peak`, and the `budget`."""
    feasible: bool
    """Whether the peak fits the budget."""
    solver: str
    """The solver that chose it, and its answer: 'optimal', 'feasible' or 'infeasible'."""
    status: str
    p: int
    """GPUs (ranks) the step is planned for."""
    seq_len: int
    """Tokens of the step (a pack: each of its documents padded to the layout unit)."""
    documents: tuple[int, ...] | None = None
    """The pack's document lengths, or None for one sequence."""
    head: str = "whole"
    """The head option of the plan: whole (replicated head, whole logits), tiled (the tiled loss) or vocab (the
    embedding and head sharded by vocabulary rows)."""


def _model_spec(model):
    """A ModelSpec from a ModelSpec, a preset name, a config.json, or a Hugging Face folder."""
    if isinstance(model, ModelSpec):
        return model
    path = Path(str(model))
    return get_model(str(path / "config.json") if path.is_dir() else str(model))


def plan_step(model, *, p: int | None = None, seq_len: int | None = None, documents: Sequence[int] | None = None,
              cluster: str = "", solver: str = "dp", recompute: bool = False, granularity: str = "block",
              batch: int = 1, budget_gib: float | None = None, cost_model: str = "auto",
              strategies: Sequence[str] | None = None, budget_gb: float | None = None, tiled: bool = False,
              offload: bool = False, head: str = "auto", reserve_gib: float | None = None,
              kv_heads: int | None = None, profiles: str = "", head_chunks: bool = False) -> StepAnswer:
    """Plan one step of `model` (preset, config.json, Hugging Face folder or ModelSpec) on `p` GPUs of
    `cluster` (preset or .toml; '' the default; `p` None: the cluster's own count): a sequence of `seq_len` tokens
    (`batch` of them), or one pack of `documents`. The same question, defaults and answer as `paradyse-lab plan`.
    `solver`: heuristic, dp, ilp, greedy, brute_force or static:NAME;
    `strategies` limits the options (default every usable one), `recompute` adds each with recomputation,
    `tiled` each with the tiled MLP, `offload` each with activation offload (docs/tiled_mlp_and_offload.md),
    `head_chunks` each of a strategy that offers it with head-chunked attention (docs/head_chunked_attention.md);
    `granularity` 'block' or 'sublayer'; `head` auto (the fastest head option that fits), whole, tiled or vocab;
    `budget_gib` per GPU in GiB (default the GPU's memory less `reserve_gib`, else less the cluster's reserve;
    `budget_gb`, in GB, is deprecated); `cost_model` as `paradyse-lab plan --cost-model` (default auto: the replay model
    where the cluster has measured kernel tables, else analytic; fitted on `profiles` when it learns),
    which caps the budget as it does for every planner (`planning_model`: a learned model
    of the paper's kind at the largest peak it profiled); `kv_heads` overrides the model's key/value heads."""
    if (seq_len is None) == (documents is None):
        raise UserInputError("plan_step needs exactly one of seq_len (one sequence) and documents (one pack)")
    question = StepQuestion(
        model=_model_spec(model), cluster=cluster, gpus=p, seq_len=int(seq_len) if seq_len is not None else None,
        documents=tuple(int(n) for n in documents) if documents is not None else None, batch=batch,
        strategies=tuple(strategies) if strategies else None, recompute=recompute, tiled=tiled, offload=offload,
        headchunk=head_chunks, granularity=granularity, head=head, budget_bytes=_budget_bytes(budget_gib, budget_gb),
        reserve_bytes=gib_to_bytes(reserve_gib) if reserve_gib is not None else None, cost_model=cost_model,
        profiles=profiles, kv_heads=kv_heads)
    planned = plan_question(question, get_solver(solver))
    solution, problem = planned.solution, planned.problem
    return StepAnswer(strategies=tuple(solution.assignment), predicted_time_s=solution.predicted_time_s,
                      memory=memory_breakdown(problem, solution.assignment), feasible=solution.feasible,
                      solver=solution.solver, status=solution.status, p=planned.p,
                      seq_len=planned.seq_len, documents=question.documents, head=planned.head)


def _budget_bytes(budget_gib: float | None, budget_gb: float | None) -> int | None:
    """Bytes of a plan's budget: `budget_gib` GiB, or the deprecated `budget_gb` GB (with a DeprecationWarning)."""
    if budget_gb:
        import warnings

        warnings.warn("plan_step(budget_gb=) is deprecated (GB, while every output is GiB): pass budget_gib",
                      DeprecationWarning, stacklevel=3)
        return int(budget_gb * 1e9) if not budget_gib else gib_to_bytes(budget_gib)
    return gib_to_bytes(budget_gib) if budget_gib else None


def memory_breakdown(problem, plan: Sequence[str]) -> dict[str, int]:
    """The parts of a plan's peak bytes (SearchProblem.peak_bytes: fixed + kept + largest transient)."""
    idx = problem.indices(plan)
    rows = range(len(idx))
    kept = int(sum(int(problem.kept_bytes[r, i]) for r, i in zip(rows, idx)))
    transient = max(problem.fixed_transient_bytes, max(int(problem.transient_bytes[r, i]) for r, i in zip(rows, idx)))
    out = {"fixed": problem.fixed_bytes, "kept_activations": kept, "transient": transient,
           "peak": problem.peak_bytes(plan), "budget": problem.budget_bytes}
    if problem.host_bytes is not None:  # activations offloaded to host memory, per GPU
        out["host_offloaded"] = int(sum(int(problem.host_bytes[r, i]) for r, i in zip(rows, idx)))
    return out


def build_model(source, group=None, *, seed: int = 0, vocab_parallel: bool = False):
    """A `runtime.ParallelGPT` sharded over `group` (None: the default group; no group: one process): from a
    Hugging Face folder holding weights (its weights, each rank reading only its slices), or from a preset name,
    config.json, a folder with only a config.json, or a ModelSpec (initialised from `seed`, the same on every
    rank): a model folder means what it means to `paradyse-lab train --model`. `vocab_parallel`: the embedding
    and head sharded by vocabulary rows, not replicated."""
    from paradyse_lab.runtime.model.parallel_gpt import ParallelGPT  # lazy: safetensors: only checkpoint paths need it

    if has_weights(source):
        return ParallelGPT.from_hf_folder(Path(str(source)), group, vocab_parallel=vocab_parallel)
    return ParallelGPT(_model_spec(source), group, seed=seed, vocab_parallel=vocab_parallel)


def _plan_names(plan) -> list[str]:
    return list(plan.strategies if isinstance(plan, StepAnswer) else plan)


def forward_backward(model, plan, tokens, labels=None):
    """Forward and backward of one step under `plan` (a StepAnswer or a list of option names): `tokens` [b, s] is the
    whole step, the same on every rank (each keeps its zig-zag share); `labels` [b, s] default the next tokens.
    Gradients land on each rank's shards; returns the loss (the global mean, the same on every rank)."""
    import torch  # lazy: torch takes seconds to load; only this path runs it

    # lazy: torch takes seconds to load; only this path runs it
    from paradyse_lab.runtime.model.layout import shard_sequence

    if labels is None:
        labels = torch.cat([tokens[:, 1:], torch.full_like(tokens[:, :1], -100)], dim=1)  # [b, s]: next tokens
    device = next(model.parameters()).device
    ids, targets = (shard_sequence(x, 1, model.group).to(device) for x in (tokens, labels))  # [b, s] -> [b, s/p]
    loss = model(ids, _plan_names(plan), targets)[1]
    loss.backward()
    return loss.detach()


def train_step(model, plan, tokens, optimizer, labels=None) -> float:
    """`forward_backward`, then the optimizer's step and zeroed gradients; returns the loss."""
    loss = forward_backward(model, plan, tokens, labels)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return float(loss)


def save(directory, step: int, model, optimizer) -> Path:
    """Checkpoint `model`'s weights and `optimizer`'s state as `directory`/step-N (torch.distributed.checkpoint,
    atomic, checksummed); every rank calls it. Returns the checkpoint's folder."""
    # lazy: safetensors: only checkpoint paths need it
    from paradyse_lab.runtime.checkpoints import dcp as dcp_checkpoint

    return dcp_checkpoint.save(directory, step, dict(model.named_parameters()), optimizer, model.cfg, {},
                               dcp_checkpoint.model_record(model.cfg), model.group)


def load(directory, model, optimizer=None) -> int:
    """Load the newest verifying checkpoint under `directory` (or the checkpoint `directory` itself), written
    at any world size, into `model` (and `optimizer`, when given); every rank calls it. Returns its step."""
    import torch  # lazy: torch takes seconds to load; only this path runs it

    # lazy: safetensors: only checkpoint paths need it
    from paradyse_lab.runtime.checkpoints import dcp as dcp_checkpoint

    path = Path(directory)
    if not (path / "meta.json").is_file():
        path = dcp_checkpoint.resumable(directory, {}, model.group)
        if path is None:
            raise UserInputError(f"no checkpoint under {str(directory)!r}")
    opt = optimizer if optimizer is not None else torch.optim.SGD(model.parameters(), lr=0.0)  # state unused
    return dcp_checkpoint.load(path, dict(model.named_parameters()), opt, model.cfg, {}, model.group)["step"]


def export_hf(checkpoint, out, max_shard_size: str = "5GB") -> dict:
    """Write `checkpoint` (a step-N folder, or the newest in a checkpoint folder) as a Hugging Face folder `out`
    (`paradyse-lab export-hf`); call on one process. Returns what was written."""
    from paradyse_lab.runtime.hf.export import export_hf as export  # lazy: safetensors: only checkpoint paths need it
    from paradyse_lab.runtime.hf.export import parse_size  # lazy: safetensors: only checkpoint paths need it

    return export(checkpoint, out, parse_size(max_shard_size, "max_shard_size"))
