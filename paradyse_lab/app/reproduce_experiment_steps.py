"""The steps of `paradyse-lab reproduce` that run the simulator's experiments: Figure 2 and
Table 5 under each truth, the seeds' spread, the memory price of switching, packing and, in full runs, groups.
Each takes (DIR, `Settings`, force) and returns the files it wrote, relative to DIR
(the `reproduce` module's docstring lists what each writes)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from paradyse_lab.app.reproduce_outputs import (
    HEADLINE_SEEDS_FILE,
    PAPER_DIR,
    SEEDS_DIR,
    STEP_OUTPUTS,
    SWITCH_MEMORY_DIR,
)
from paradyse_lab.app.reproduce_settings import Settings, profile_for
from paradyse_lab.results.timings import TIMINGS_DIR, read_with_timings, write_with_timings
from paradyse_lab.simulator import ablation_experiment, experiments, packing_experiment
from paradyse_lab.simulator.groups_experiment import GroupsSetup, groups
from paradyse_lab.simulator.results import run_path, write_csv_atomic


def step_fig2(out: Path, s: Settings, force: bool) -> list[str]:
    """Figure 2's six panels, and the heuristic's and ilp's gap to dp on them (solver_quality_runs.csv)."""
    setup = s.setup()
    experiments.fig2(setup, out, force=force, exact=True, progress=False, beyond=True)

    rows = []
    for d in experiments.DATASETS:
        for m in experiments.MODELS:
            dp = pd.read_csv(run_path(out, "fig2", d, m, "dynamic:dp"))
            for p in ("dynamic:heuristic", "dynamic:ilp"):
                r = read_with_timings(run_path(out, "fig2", d, m, p))
                both = min(int((~dp["oom"]).sum()), int((~r["oom"]).sum()))
                t_p = float(r[~r["oom"]]["cumulative_time_s"].iloc[both - 1]) if both else None
                t_dp = float(dp[~dp["oom"]]["cumulative_time_s"].iloc[both - 1]) if both else None
                planned = r[~r["cached"].astype(bool)]
                rows.append({"dataset": d, "model": m, "policy": p, "steps_compared": both, "time_s": t_p,
                             "dp_time_s": t_dp, "gap_to_dp": (t_p - t_dp) / t_dp if t_dp else None,
                             "max_len": int(r[~r["oom"]]["seq_len"].max()) if (~r["oom"]).any() else 0,
                             "dp_max_len": int(dp[~dp["oom"]]["seq_len"].max()) if (~dp["oom"]).any() else 0,
                             "solve_ms_mean": float(planned["solve_ms"].mean()) if len(planned) else 0.0})
    write_with_timings(pd.DataFrame(rows), out / "solver_quality_runs.csv", ("solve_ms_mean",),
                       ("dataset", "model", "policy"))
    return list(STEP_OUTPUTS["fig2"])


def step_table5(out: Path, s: Settings, force: bool) -> list[str]:
    """Table 5's ablations of GPT on GRCh38, the learned cost models fitted on `profile_for`'s profile."""
    ablation_experiment.table5(s.setup(profiles=str(profile_for(out, s))), out,
                               force=force, progress=False)
    return ["table5.csv"]


def step_fig2_paper(out: Path, s: Settings, force: bool) -> list[str]:
    """`step_fig2`'s panels charged by the authors' measured A100 times, into paper/ (none off their cluster)."""
    if not s.paper_truth:
        return []
    setup = s.setup(truth="paper")
    experiments.fig2(setup, out / PAPER_DIR, force=force, exact=True, progress=False, beyond=True)
    return list(STEP_OUTPUTS["fig2_paper"])


def step_table5_paper(out: Path, s: Settings, force: bool) -> list[str]:
    """Table 5 charged by the authors' measured A100 times, into paper/ (none off their cluster)."""
    if not s.paper_truth:
        return []
    ablation_experiment.table5(s.setup(truth="paper"), out / PAPER_DIR,
                               force=force, progress=False)
    return [f"{PAPER_DIR}/table5.csv"]


def step_seeds(out: Path, s: Settings, force: bool) -> list[str]:
    """Figure 2's headline metrics of the heuristic on every seed's workloads, per truth (seed 0: fig2's runs)."""
    frames = []
    for truth in s.truths():
        root = out if truth == "analytic" else out / PAPER_DIR
        for seed in s.seeds:
            if seed == 0:  # fig2's own runs (with dp and ilp beside)
                headlines = pd.read_csv(root / "fig2_headline.csv")
            else:
                seed_root = out / SEEDS_DIR / truth / f"seed{seed}"
                _, headlines = experiments.fig2(s.setup(truth=truth, seed=seed), seed_root, force=force,
                                                exact=False, progress=False)
            frames.append(headlines[headlines.policy == experiments.PAPER_POLICY].assign(truth=truth, seed=seed))
    write_csv_atomic(pd.concat(frames, ignore_index=True), out / HEADLINE_SEEDS_FILE)
    return [HEADLINE_SEEDS_FILE]


def step_switch_memory(out: Path, s: Settings, force: bool) -> list[str]:
    """Figure 2 (statics and the heuristic) and Table 5 with the memory price of switching, per truth."""
    written = []
    for truth in s.truths():
        profiles = str(profile_for(out, s)) if truth == "analytic" else ""
        setup = s.setup(truth=truth, switch_memory=True, profiles=profiles)
        root = out / SWITCH_MEMORY_DIR / truth
        experiments.fig2(setup, root, force=force, exact=False, progress=False)
        ablation_experiment.table5(setup, root, force=force, progress=False)
        written += [f"{SWITCH_MEMORY_DIR}/{truth}/{f}"
                    for f in ("fig2_summary.csv", "table5.csv", f"{TIMINGS_DIR}/fig2_summary.csv")]
    return written


def step_packing(out: Path, s: Settings, force: bool) -> list[str]:
    """One sequence per step against packed steps of 32K and 128K tokens, per truth."""
    written = []
    for truth in s.truths():
        root = out if truth == "analytic" else out / PAPER_DIR
        packing_experiment.packing(s.setup(truth=truth), root, force=force,
                                   panels=s.packing_panels, progress=False)
        written.append(str((root / "packing.csv").relative_to(out)))
    return written


def step_groups(out: Path, s: Settings, force: bool) -> list[str]:
    """Global batches over groups sized per step (`paradyse-lab experiment groups`); full runs only (minutes)."""
    if s.quick:  # FULL_ONLY_STEPS
        return []

    groups(GroupsSetup(), out, force=force, progress=False)
    return list(STEP_OUTPUTS["groups"])
