"""Every experiment of the reproduction, cached and resumable: `paradyse-lab reproduce [--quick] [--out DIR]`.

Steps (each writes CSVs under DIR; the figures/ modules read them; the report is generated from them):

- fig2: Figure 2's six panels -> fig2_summary.csv, fig2_headline.csv, runs/fig2/
- table5: Table 5's ablations of GPT on GRCh38 -> table5.csv, runs/table5/
- fig2_paper, table5_paper: the same, charged (and planned) by the authors' measured A100 times (the
  `paper` cost model) -> paper/*.csv, paper/runs/ (skipped on a cluster the measurements do not cover)
- seeds: Figure 2's headline metrics (the paper's heuristic against the four static strategies) on the
  workloads of every seed of `Settings.seeds` under each truth; seed 0 is fig2's and fig2_paper's runs, the
  other seeds run the statics and the heuristic only -> fig2_headline_seeds.csv, seeds/TRUTH/seedK/
- switch_memory: Figure 2 (statics and the heuristic) and Table 5 under both truths with the memory price
  of switching (the simulator's `Charger`) -> switch-memory/{analytic,paper}/*.csv
- packing (beyond the paper): Figure 2's panels (quick: GPT on GitHubCode) with one sequence per step and
  with the documents packed into steps of 32K and 128K tokens, static strategies against the heuristic and
  dp, under each truth -> packing.csv, paper/packing.csv, runs/packing/
- groups (beyond the paper; full runs only, minutes): global batches over groups of GPUs sized per step against
  ParaDySe, dynamic context parallelism and the best static strategy on 1, 4 and 16 nodes
  -> groups.csv, runs/groups/, figures/groups.png
- solvers: solve time and gap to the optimum of heuristic / greedy / dp / ilp
  -> solver_bench.csv; and the heuristic's and ilp's gap to dp on Figure 2's runs -> solver_quality_runs.csv
- costmodel: predicted against truth on held-out profile rows, inside and beyond the profiled range
  (`split_profiles`) -> costmodel_points.csv, costmodel_accuracy.csv
- costmodel_paper: the same split on the bundled paper profile, with the calibrated model, time MAPE per length
  band, leave-one-shape-out calibration and the parameters fitted on all of it -> costmodel_paper_accuracy.csv,
  calibration_loso.csv, calibration_params.csv
- plan_map: the plan each solver picks per layer and length -> plan_map.csv
- memory: model states, kept activations and transient bytes of every uniform plan -> memory_breakdown.csv
- figures: each figures/ module's `render` -> DIR/figures/*.png and *.pdf (quick: *.png alone)
- report: DIR/REPORT.md, the paper's numbers beside ours.
- execute (only with `--execute`): `paradyse-lab calibrate` and `paradyse-lab validate-run` on this machine
  -> DIR/execute/ (cluster.toml, profile.csv, validate_run*.csv, figures/validate_run.png).

Measured wall times (planning and solve times) are never in a result CSV: they go to `timings/NAME.csv` beside
it, so that two runs with the same settings write the same result CSVs byte for byte.

A finished step's CSVs are reused on the next run (and Figure 2's / Table 5's finished runs inside a step)
only when they were made with the same settings (quick or full, cluster) and the same code version and are
unchanged since (`result_key`: stamps under DIR/.stamps/, written when a step completes);
otherwise the step is recomputed, so a missing or truncated file is remade. `--force` reruns everything.
DIR/reproduce_settings.json records the settings after each completed step. A cluster without a bundled
profile gets a synthetic one (`source=analytic`, as `paradyse-lab costmodel synth-profile` writes it) under
DIR/profiles/ for the learned cost models.

This module is the loop (`reproduce`) and `--execute`; the rest of the pipeline lives beside it:
`reproduce_settings` (`Settings`, the profile the steps fit on), `reproduce_outputs` (the files of each
step), `reproduce_steps` (the steps by name, in order; the report), `reproduce_experiment_steps` (the simulator's
experiments), `reproduce_planner_steps` (solvers and cost models alone), `reproduce_figures` (the figures) and
`reproduce_background` (the steps run in processes of their own).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from tqdm import tqdm

from paradyse_lab.app.reproduce_background import join_background, start_background
from paradyse_lab.app.reproduce_outputs import step_outputs
from paradyse_lab.app.reproduce_settings import SETTINGS_FILE, Settings, json_settings
from paradyse_lab.app.reproduce_steps import BACKGROUND_STEPS, STEP_FUNCS, STEPS
from paradyse_lab.errors import UserInputError
from paradyse_lab.files.atomic_write import prepare_output_dir, write_text_atomic
from paradyse_lab.results.result_key import STAMP_DIR, input_files, is_fresh, result_key, stamp_path, write_stamp
from paradyse_lab.simulator.shared import sharing


def reproduce(out: str | Path = "results", quick: bool = False, force: bool = False, progress: bool = True,
              cluster: str = "a100-80gb-x8", log=print, execute: bool = False,
              sampling: str = "stratified", settings: Settings | None = None) -> dict:
    """Run every step (module docstring); returns {step: seconds} (0.0 for a reused step). `execute` adds
    the real runs on this machine: `paradyse-lab calibrate` and `validate-run` into DIR/execute/.
    `settings`: what the steps run (sequences per dataset, solver benchmark, cost models, ...), in place of
    `Settings.make(quick, cluster, sampling)`, whose arguments are then ignored (e.g. a run smaller than
    `--quick`; the report's first line then still names `reproduce --quick` or the full run, by `settings.quick`,
    and `--sampling` is not validated); the stamps key every step on them as on the made ones."""
    if settings is None:
        settings = Settings.make(quick, cluster, sampling)
    out = prepare_output_dir(out)
    settings_path = out / SETTINGS_FILE
    wanted = json_settings(settings)
    timings: dict = {}

    def step_key(name: str) -> str:
        inputs = input_files(settings.cluster)
        if name == "figures":  # figures are redrawn when any CSV they read changed
            inputs += sorted(f for f in out.rglob("*.csv") if STAMP_DIR not in f.parts)
        return result_key({**wanted, "step": name}, inputs)

    background = start_background([n for n in BACKGROUND_STEPS if not settings.quick and (
        force or not is_fresh(stamp_path(out, f"reproduce-{n}"), step_key(n)))], out, settings, force)
    try:
        with sharing():  # every step's runs share cost models and search problems
            bar = tqdm(STEPS, desc="reproduce", unit="step", disable=not progress)
            for name in bar:
                bar.set_postfix_str(name)
                outputs = step_outputs(name, settings)
                key = step_key(name)
                stamp = stamp_path(out, f"reproduce-{name}")
                if outputs and not force and name not in background:
                    if is_fresh(stamp, key):
                        timings[name] = 0.0
                        continue
                    if stamp.exists():
                        log(f"{name}: made with other settings or code, or its files changed since; recomputing")
                started = time.perf_counter()
                if name == "report":
                    STEP_FUNCS["report"](out, settings, force, timings)
                else:
                    produced = None
                    if name in background:  # its time: from its start in the background to its end
                        started = time.perf_counter() - join_background(name, background)
                    else:
                        produced = STEP_FUNCS[name](out, settings, force)
                    if outputs:  # the files the step wrote (none when it does not apply to these settings)
                        write_stamp(stamp, key, wanted,
                                    [out / f for f in (outputs if produced is None else produced)])
                write_text_atomic(settings_path, json.dumps(wanted, indent=1) + "\n")
                timings[name] = time.perf_counter() - started
        bar.close()
    finally:
        for proc, _ in background.values():  # stopped early (an error, Ctrl-C): end what runs in the background
            proc.terminate()
            proc.join()
    if execute:
        started = time.perf_counter()
        execute_step(out / "execute", log)
        timings["execute"] = time.perf_counter() - started
    return timings


def execute_step(out: Path, log=print) -> None:
    """`reproduce --execute`: `paradyse-lab calibrate --out OUT` then `validate-run --out OUT`, each in its own
    process (each starts its own process group), with this machine's defaults."""
    for cmd in (["calibrate", "--out", str(out)], ["validate-run", "--out", str(out)]):
        log(f"running paradyse-lab {' '.join(cmd)}")
        done = subprocess.run([sys.executable, "-m", "paradyse_lab", *cmd], stdout=subprocess.PIPE, text=True)
        if done.returncode:
            raise UserInputError(f"paradyse-lab {cmd[0]} failed with exit code {done.returncode}")
        log(done.stdout.rstrip())
