"""What `paradyse-lab train` says besides its per-step log: the planner it starts with, a warning when the
cluster it plans for describes another device than the one present, and the end-of-run summary.

All of it is printed by rank 0 only, with or without the progress bar (`--no-progress`):
- `planner_line(opts, cluster, budget_bytes, p)`: the cluster (its GPU, count and memory), the cost model and the
  memory budget that plan every step, at the run's world size.
- `device_warning(cluster, device_name)`: a warning when CUDA is present and its device is not the cluster's GPU
  (the default preset is an A100 node, whatever the machine): the plans then assume another GPU's speed and
  memory; `paradyse-lab calibrate` measures this one.
- `summary_lines(log, ...)`: tokens trained and cut, tokens per second (tokens over the steps' summed time),
  mean step time, the peak memory (named for what it measures: CUDA's allocated peak, or on CPU the process's
  peak resident set), the plan mix (each plan's share of the steps), the last evaluation loss and how many
  held-out steps it averages, and the cluster and cost model that planned.
"""

from __future__ import annotations

from collections import Counter

from paradyse_lab.costmodel.factory import resolve_cost_model

GIB = 2**30


def model_words(opts, cluster) -> tuple[str, str]:
    """(the cost model that plans the run, what chose it): `auto` names the model it stands for on `cluster`;
    `--groups` plans with the analytic model whatever `auto` would take."""
    if getattr(opts, "groups", "") and opts.cost_model == "auto":
        return "analytic", " (--groups plans with the analytic cost model)"
    resolved = resolve_cost_model(opts.cost_model, cluster)
    return resolved, (" (--cost-model auto)" if resolved != opts.cost_model else "")


def planner_line(opts, cluster, budget_bytes: int, p: int) -> str:
    """The start-of-run statement of what plans the run."""
    default = "" if opts.budget_gib else " (the GPU memory less the reserve; --budget-gib)"
    model, chosen = model_words(opts, cluster)
    return (f"planning each step with the {model} cost model for cluster {cluster.name} ({cluster.gpu_name}, "
            f"{cluster.memory_bytes / GIB:.2f} GiB each) at {p} rank{'s' if p > 1 else ''}, budget "
            f"{budget_bytes / GIB:.2f} GiB per GPU{default}, policy {opts.policy}{chosen}")


def _words(name: str) -> set[str]:
    return {w for w in name.lower().replace("-", " ").replace("_", " ").split() if w not in ("nvidia", "sxm4", "sxm5")}


def present_device() -> str | None:
    """The name of this process's CUDA device, or None without CUDA."""
    import torch  # lazy: torch takes seconds to load; only this path runs it

    return torch.cuda.get_device_name() if torch.cuda.is_available() else None


def device_warning(cluster, device_name: str | None) -> str | None:
    """A warning when the present CUDA device (`device_name`; None: no CUDA) is not the GPU `cluster` describes."""
    if not device_name:
        return None
    ours, theirs = _words(device_name), _words(cluster.gpu_name)
    model = {w for w in theirs if any(c.isdigit() for c in w) and not w.endswith("gb")}  # a100, h100, ...
    if model and model <= ours:
        return None
    return (f"warning: cluster {cluster.name} describes {cluster.gpu_name}, but this machine has {device_name}: the "
            "plans assume another GPU's speed and memory (give --cluster for this GPU, or measure one with "
            "`paradyse-lab calibrate`)")


def step_time_words(log: list[dict]) -> str:
    """The summary's step time: the mean over the steps after the run's first, which is warm-up (allocator,
    kernel choice, first imports) and said apart; a one-step run's one step, warm-up included."""
    if len(log) == 1:
        return f"one step {log[0]['step_s']:.3f} s (warm-up included)"
    rest = [r["step_s"] for r in log[1:]]
    return (f"mean step {sum(rest) / len(rest):.3f} s over the {len(rest)} after the first (the first, "
            f"{log[0]['step_s']:.3f} s, is warm-up and left out)")


def summary_lines(log: list[dict], opts, cluster) -> list[str]:
    """The end-of-run summary of a run's per-step log (module docstring)."""
    if not log:
        return ["run summary: no step trained"]
    tokens, cut = sum(r["tokens"] for r in log), sum(r.get("cut_tokens", 0) for r in log)
    seconds = sum(r["step_s"] for r in log)
    peak = max(r["peak_bytes"] for r in log)
    peak_of = {"cuda_allocated": "peak CUDA memory allocated", "process_rss": "peak process RSS (CPU)"}.get(
        log[-1].get("peak_of"), "peak memory")
    mix = Counter(r["plan"] for r in log)
    lines = [f"run summary: {len(log)} steps, {tokens:,} tokens trained"
             + (f", {cut:,} tokens cut (beyond the length cap; see the warning)" if cut else ", none cut"),
             f"  {tokens / seconds if seconds else float('nan'):,.1f} tokens/s over every step, "
             f"{step_time_words(log)}, {peak_of} {peak / 2**20:,.0f} MiB (rank 0)",
             "  plans: " + "; ".join(f"{plan} {n / len(log):.0%}" for plan, n in mix.most_common(4))
             + (f"; {len(mix) - 4} more" if len(mix) > 4 else "")]
    evals = [r for r in log if r.get("eval_loss") is not None]
    if evals:
        lines.append(_eval_line(evals, opts))
    model, chosen = model_words(opts, cluster)
    lines.append(f"  planned by the {model} cost model on cluster {cluster.name}{chosen}")
    return lines


def _eval_line(evals: list[dict], opts) -> str:
    """The summary's evaluation line: the last and first held-out loss, over how many held-out steps (fewer than
    --eval-batches when the held-out data has no more, `StepInputs.held_out`)."""
    steps = evals[-1].get("eval_steps", opts.eval_batches)
    fewer = f", of the {opts.eval_batches} --eval-batches asked: the held-out data has no more" if (
        steps < opts.eval_batches) else ""
    return (f"  eval loss {evals[-1]['eval_loss']:.4f} (first {evals[0]['eval_loss']:.4f}), each over {steps} "
            f"held-out step{'s' if steps != 1 else ''}{fewer}")
