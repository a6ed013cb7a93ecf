"""Execute short training runs of several policies for real and pair every step with its simulation.

Library module of `paradyse-lab validate-run --out DIR` (which
documents the outputs). `execute_policies` runs on every rank of a process group: for each policy, a fresh
model trained by the runtime's training loop for `steps` steps on the workload
(the same lengths for every policy), planned with the given cost model and cluster; rank 0 writes
DIR/validate_run_measured.csv (one row per step: policy, step, seq_len, step_s, plan, loss) and
DIR/validate_run_meta.json (world size, dtype, memory budget: what the simulation must use to plan the same
way). `pair` then replays each policy over the executed lengths and puts measured and
predicted times side by side.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import pandas as pd

from paradyse_lab.app.train_options import TrainOptions
from paradyse_lab.app.training import train
from paradyse_lab.cluster.files import get_cluster
from paradyse_lab.cluster.presets import DEFAULT_CLUSTER
from paradyse_lab.core.model_spec import get_model
from paradyse_lab.core.plan import short_text
from paradyse_lab.costmodel.factory import build_cost_model
from paradyse_lab.files.atomic_write import atomic_open, read_json_object, write_text_atomic
from paradyse_lab.simulator.experiments import STATIC_POLICIES
from paradyse_lab.simulator.replay import STEP_COLUMNS, replay

DYNAMIC_POLICIES = ("dynamic:heuristic", "dynamic:dp")
POLICIES = STATIC_POLICIES + DYNAMIC_POLICIES
MEASURED_FILE, META_FILE = "validate_run_measured.csv", "validate_run_meta.json"


@dataclass(frozen=True)
class ValidateOptions:
    """One validation: the runs every rank executes."""

    out: str
    nproc: int
    model: str
    dataset: str
    steps: int
    max_len: int
    cluster: str
    cost_model: str
    profiles: str
    policies: tuple[str, ...] = POLICIES
    seed: int = 0
    repeats: int = 1
    """Runs of every policy (interleaved: each round runs every policy once); a step's time is the median."""


def execute_policies(opts: ValidateOptions, progress: bool = False, group=None) -> None:
    """Train every policy on this rank (call on every rank); rank 0 writes the measured steps and meta."""
    import torch  # lazy: torch takes seconds to load; only this path runs it

    # lazy: torch takes seconds to load; only this path runs it
    from paradyse_lab.runtime.comm import collectives as comm

    rows = []
    bar = None
    if progress and comm.rank(group) == 0:
        from tqdm import tqdm

        bar = tqdm(total=opts.repeats * len(opts.policies) * opts.steps, desc="validate-run", dynamic_ncols=True)
    for repeat, policy in ((r, q) for r in range(opts.repeats) for q in opts.policies):
        if bar is not None:
            bar.set_postfix_str(f"{policy} (round {repeat + 1})")
        log = train(TrainOptions(model=opts.model, dataset=opts.dataset, policy=policy, steps=opts.steps,
                                 seed=opts.seed, max_len=opts.max_len, cluster=opts.cluster,
                                 cost_model=opts.cost_model, profiles=opts.profiles, progress=False), group,
                    quiet=True)
        rows += [{"policy": policy, "repeat": repeat, "step": r["step"], "seq_len": r["seq_len"], "step_s": r["step_s"],
                  "plan": r["plan"], "loss": r["loss"]} for r in log]
        if bar is not None:
            bar.update(opts.steps)
    if bar is not None:
        bar.close()
    if comm.rank(group) != 0:
        return
    out = Path(opts.out)
    with atomic_open(out / MEASURED_FILE) as f:
        pd.DataFrame(rows).to_csv(f, index=False)
    on_gpu = torch.cuda.is_available() and (comm.size(group) == 1 or comm.is_nccl(group))  # as train decides
    meta = {"p": comm.size(group), "dtype": "bf16" if on_gpu else "fp32", **asdict(opts)}
    write_text_atomic(out / META_FILE, json.dumps(meta, indent=1) + "\n")


def pair(out: str | Path, skip: int) -> pd.DataFrame:
    """paradyse_lab.simulator.replay.STEP_COLUMNS rows: every measured step of DIR beside its replay."""
    out = Path(out)
    meta = read_json_object(out / META_FILE)
    runs = pd.read_csv(out / MEASURED_FILE, keep_default_na=False)
    # one row per (policy, step): the median over the repeats; spread = (max - min) / median of the step
    measured = runs.groupby(["policy", "step"], sort=False).agg(
        seq_len=("seq_len", "first"), plan=("plan", "first"), step_s=("step_s", "median"),
        step_min_s=("step_s", "min"), step_max_s=("step_s", "max"), repeats=("step_s", "size")).reset_index()
    spec = replace(get_model(meta["model"]), dtype=meta["dtype"])
    cluster = get_cluster(meta["cluster"] or DEFAULT_CLUSTER)
    cost_model = build_cost_model(meta["cost_model"], spec, cluster, meta["p"], meta["profiles"] or None)
    frames = []
    for policy, g in measured.groupby("policy", sort=False):
        g = g.sort_values("step")
        sim = replay(policy, g["seq_len"].tolist(), spec, cost_model, cluster.memory_bytes)
        sim = sim.reindex(range(len(g)))  # a simulated OOM stops the replay early: NaN beyond it
        oom = sim["oom"].fillna(True).astype(bool).to_numpy()
        sim["charged_time_s"] = sim["charged_time_s"].where(~oom)  # the OOM step was not trained: no prediction
        sim["plan"] = sim["plan"].fillna("")
        sim_plans = [short_text(p.split(" ")) for p in sim["plan"]]
        counted = (g["step"].to_numpy() > skip)
        df = pd.DataFrame({
            "policy": policy, "step": g["step"].to_numpy(), "seq_len": g["seq_len"].to_numpy(),
            "measured_s": g["step_s"].to_numpy(float), "predicted_s": sim["charged_time_s"].to_numpy(float),
            "plan": g["plan"].to_numpy(), "simulated_plan": sim_plans, "counted": counted,
            "repeats": g["repeats"].to_numpy(), "measured_min_s": g["step_min_s"].to_numpy(float),
            "measured_max_s": g["step_max_s"].to_numpy(float)})
        df["plan_match"] = df["plan"] == df["simulated_plan"]
        df["measured_cum_s"] = df["measured_s"].where(df["counted"], 0.0).cumsum()
        df["predicted_cum_s"] = df["predicted_s"].where(df["counted"], 0.0).cumsum()
        frames.append(df[list(STEP_COLUMNS)])
    return pd.concat(frames, ignore_index=True)


def run_totals(out: str | Path, skip: int) -> dict[str, tuple[float, float]]:
    """Per policy: (min, max) over its repeated runs of the run's measured total (the counted steps: after the
    first `skip`), the spread of what `pair`'s per-step medians sum to."""
    runs = pd.read_csv(Path(out) / MEASURED_FILE, keep_default_na=False)
    totals = runs[runs["step"] > skip].groupby(["policy", "repeat"], sort=False)["step_s"].sum()
    return {policy: (float(g.min()), float(g.max())) for policy, g in totals.groupby(level="policy", sort=False)}
