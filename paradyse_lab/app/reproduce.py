"""Every experiment of the reproduction, cached and resumable: `paradyse-lab reproduce [--quick] [--out DIR]`.

Steps (each writes CSVs under DIR; the figures/ modules read them; the report is generated from them):

- fig2: Figure 2's six panels (simulator/experiments.py) -> fig2_summary.csv, fig2_headline.csv, runs/fig2/
- table5: Table 5's ablations of GPT on GRCh38 -> table5.csv, runs/table5/
- fig2_paper, table5_paper: the same, charged (and planned) by the authors' measured A100 times (the
  `paper` cost model) -> paper/*.csv, paper/runs/ (skipped on a cluster the measurements do not cover)
- seeds: Figure 2's headline metrics (the paper's heuristic against the four static strategies) on the
  workloads of every seed of `Settings.seeds` under each truth; seed 0 is fig2's and fig2_paper's runs, the
  other seeds run the statics and the heuristic only -> fig2_headline_seeds.csv, seeds/TRUTH/seedK/
- switch_memory: Figure 2 (statics and the heuristic) and Table 5 under both truths with the memory price
  of switching (simulator/engine.py Charger) -> switch-memory/{analytic,paper}/*.csv
- packing (beyond the paper): Figure 2's panels (quick: GPT on GitHubCode) with one sequence per step and
  with the documents packed into steps of 32K and 128K tokens, static strategies against the heuristic and
  dp, under each truth (simulator/experiments.py packing) -> packing.csv, paper/packing.csv, runs/packing/
- groups (beyond the paper; full runs only, minutes): global batches over groups of GPUs sized per step against
  ParaDySe, dynamic context parallelism and the best static strategy on 1, 4 and 16 nodes
  (simulator/groups_experiment.py) -> groups.csv, runs/groups/, figures/groups.png
- solvers: solve time and gap to the optimum of heuristic / greedy / dp / ilp (solvers/bench.py)
  -> solver_bench.csv; and the heuristic's and ilp's gap to dp on Figure 2's runs -> solver_quality_runs.csv
- costmodel: predicted against truth on held-out profile rows, inside and beyond the profiled range
  (costmodel/ablation.py split) -> costmodel_points.csv, costmodel_accuracy.csv
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
it (paradyse_lab/timings.py), so that two runs with the same settings write the same result CSVs byte for byte.

A finished step's CSVs are reused on the next run (and Figure 2's / Table 5's finished runs inside a step)
only when they were made with the same settings (quick or full, cluster) and the same code version and are
unchanged since (`paradyse_lab/result_key.py`: stamps under DIR/.stamps/, written when a step completes);
otherwise the step is recomputed, so a missing or truncated file is remade. `--force` reruns everything.
DIR/reproduce_settings.json records the settings after each completed step. A cluster without a bundled
profile gets a synthetic one (`source=analytic`, as `paradyse-lab synth-profile` writes it) under
DIR/profiles/ for the learned cost models.
"""

from __future__ import annotations

import importlib
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from paradyse_lab.costmodel.lowering import problem_from_cost_model
from paradyse_lab.errors import UserInputError
from paradyse_lab.timings import TIMINGS_DIR, read_with_timings, write_with_timings

FIGURE_SCRIPTS = ("fig2_cumulative_time", "table5_ablation", "solver_quality", "costmodel_accuracy", "plan_map",
                  "memory_breakdown", "packing")
PAPER_FIGURE_SCRIPTS = ("fig2_cumulative_time", "table5_ablation", "packing")
"""Drawn a second time from paper/ as NAME_paper.png."""
STEPS = ("fig2", "table5", "fig2_paper", "table5_paper", "seeds", "switch_memory", "packing", "solvers",
         "costmodel", "costmodel_paper", "plan_map", "memory", "groups", "figures", "report")
"""In the order the loop takes them. `groups` and `solvers` (`BACKGROUND_STEPS`) run in processes of their own
from the start; `groups` is waited for only before the figures, its one reader."""
PAPER_DIR = "paper"
PAPER_FIGURE_NOTE = "simulated: charged by the authors' measured A100 times (source=paper), 8x A100-80GB"
SWITCH_MEMORY_DIR = "switch-memory"
SEEDS_DIR = "seeds"
HEADLINE_SEEDS_FILE = "fig2_headline_seeds.csv"
SETTINGS_FILE = "reproduce_settings.json"
QUICK_SIZE = 20
"""Sequences per sampled dataset in a `--quick` run (a full run: 200): the stratified sample keeps every length
band with a sequence in it, the longest (the dataset's maximum, pinned) included (paradyse_lab/workloads.py)."""
FIGURE_FORMATS = ("png", "pdf")
QUICK_FIGURE_FORMATS = ("png",)
"""A `--quick` run saves each figure as PNG alone: the PDF is a second drawing of every artist (about a quarter
of the figures step's time) of a figure that only shows the run worked."""
K = 1024


@dataclass(frozen=True)
class Settings:
    """What a reproduction run depends on (a change reruns every step)."""

    quick: bool
    size: int
    """Sequences per sampled dataset in Figure 2 and Table 5."""
    bench_sizes: tuple[int, ...]
    bench_options: tuple[int, ...]
    bench_kinds: tuple[str, ...]
    bench_instances: int
    costmodels: tuple[str, ...]
    map_lengths: int
    """Lengths in the plan map and memory breakdown grids."""
    packing_panels: tuple[tuple[str, str], ...]
    """(dataset, model) panels of the packing experiment."""
    seeds: tuple[int, ...] = (0,)
    """Workload seeds of the headline metrics' spread (seed 0: the runs of every other step)."""
    cluster: str = "a100-80gb-x8"
    sampling: str = "stratified"
    """How the paper datasets are sampled (paradyse_lab/workloads.py `SAMPLINGS`)."""

    def setup(self, **kw):
        """The simulator's `Setup` of this run's experiments (cluster, size, sampling), with `kw` on top."""
        from simulator.experiments import Setup

        return Setup(cluster=self.cluster, size=self.size, sampling=self.sampling, **kw)

    @property
    def paper_truth(self) -> bool:
        """Whether the authors' measurements cover this cluster (the paper-truth steps run)."""
        from paradyse_lab.cluster_lookup import get_cluster
        from paradyse_lab.costmodel.paper_measurements import covers_node

        c = get_cluster(self.cluster)
        return covers_node(c.gpu_name, c.gpus)

    @property
    def figure_formats(self) -> tuple[str, ...]:
        """The files each figure is saved as: PNG and PDF, a quick run PNG alone (`QUICK_FIGURE_FORMATS`)."""
        return QUICK_FIGURE_FORMATS if self.quick else FIGURE_FORMATS

    def truths(self) -> tuple[str, ...]:
        return ("analytic", "paper") if self.paper_truth else ("analytic",)

    @classmethod
    def make(cls, quick: bool, cluster: str = "a100-80gb-x8", sampling: str = "stratified") -> Settings:
        from paradyse_lab.errors import unknown_name
        from paradyse_lab.workloads import SAMPLINGS
        from simulator.experiments import DATASETS, MODELS

        if sampling not in SAMPLINGS:
            raise unknown_name("--sampling", sampling, SAMPLINGS)
        if quick:
            return cls(quick=True, size=QUICK_SIZE, bench_sizes=(8, 24, 96), bench_options=(4,),
                       bench_kinds=("random", "model"), bench_instances=1,
                       costmodels=("analytic", "hybrid", "polynomial"), map_lengths=24,
                       packing_panels=(("github_code", "gpt"),), seeds=(0,), cluster=cluster,
                       sampling=sampling)
        return cls(quick=False, size=200, bench_sizes=(8, 24, 48, 96, 192), bench_options=(4, 8),
                   bench_kinds=("random", "random+switch", "model", "model-sublayer"), bench_instances=2,
                   costmodels=("analytic", "hybrid", "forest", "polynomial", "residual"), map_lengths=64,
                   packing_panels=tuple((d, m) for d in DATASETS for m in MODELS), seeds=(0, 1, 2, 3, 4),
                   cluster=cluster, sampling=sampling)


def _json_settings(s: Settings) -> dict:
    return json.loads(json.dumps(asdict(s)))


def _write(df: pd.DataFrame, path: Path) -> Path:
    from simulator.results import write_csv_atomic

    return write_csv_atomic(df, path)


def _length_grid(n: int, lo: int = 2 * K, hi: int = 640 * K) -> list[int]:
    """n lengths, geometric from lo to hi, multiples of 512 (the paper's granule)."""
    xs = np.geomspace(lo, hi, n)
    return sorted({int(round(x / 512)) * 512 for x in xs})


# ---------------------------------------------------------------- steps


def profile_for(out: Path, s: Settings) -> Path:
    """The cluster's bundled profile, else a synthetic one written under DIR/profiles/ (module docstring)."""
    from paradyse_lab.cluster_lookup import get_cluster
    from paradyse_lab.profiles import default_profile, read_profiles, write_profiles
    from paradyse_lab.result_key import is_fresh, result_key, stamp_path, write_stamp

    cluster = get_cluster(s.cluster)
    try:
        return default_profile(cluster.device)
    except UserInputError:
        pass
    from paradyse_lab.costmodel.synthetic import DEFAULT_MODELS, synthesize_profiles

    path = out / "profiles" / f"analytic_{cluster.name}.csv"
    settings = {"cluster": repr(cluster), "synthetic": "defaults, seed 0"}
    key, stamp = result_key(settings), stamp_path(path.parent, path.name)
    if is_fresh(stamp, key):
        read_profiles(path)  # a file made before: validated as every reader of it will read it
        return path
    df = synthesize_profiles(cluster, list(DEFAULT_MODELS), None, timestamp="2026-01-01T00:00:00+00:00")
    if df.empty:
        raise UserInputError(f"cluster {s.cluster!r}: no strategy fits the shortest profiled length")
    write_profiles(df, path)  # validates the rows as read_profiles reads them back (profiles.py)
    write_stamp(stamp, key, settings, [path])
    return path


def step_fig2(out: Path, s: Settings, force: bool) -> list[str]:
    from simulator import experiments

    setup = s.setup()
    experiments.fig2(setup, out, force=force, exact=True, progress=False, beyond=True)
    from simulator.results import run_path

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
    from simulator import experiments

    experiments.table5(s.setup(profiles=str(profile_for(out, s))), out,
                       force=force, progress=False)
    return ["table5.csv"]


def step_fig2_paper(out: Path, s: Settings, force: bool) -> list[str]:
    from simulator import experiments

    if not s.paper_truth:
        return []
    setup = s.setup(truth="paper")
    experiments.fig2(setup, out / PAPER_DIR, force=force, exact=True, progress=False, beyond=True)
    return list(STEP_OUTPUTS["fig2_paper"])


def step_table5_paper(out: Path, s: Settings, force: bool) -> list[str]:
    from simulator import experiments

    if not s.paper_truth:
        return []
    experiments.table5(s.setup(truth="paper"), out / PAPER_DIR,
                       force=force, progress=False)
    return [f"{PAPER_DIR}/table5.csv"]


def step_seeds(out: Path, s: Settings, force: bool) -> list[str]:
    """Figure 2's headline metrics of the heuristic on every seed's workloads, per truth (module docstring)."""
    from simulator import experiments

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
    _write(pd.concat(frames, ignore_index=True), out / HEADLINE_SEEDS_FILE)
    return [HEADLINE_SEEDS_FILE]


def step_switch_memory(out: Path, s: Settings, force: bool) -> list[str]:
    """Figure 2 (statics and the heuristic) and Table 5 with the memory price of switching, per truth."""
    from simulator import experiments

    written = []
    for truth in s.truths():
        profiles = str(profile_for(out, s)) if truth == "analytic" else ""
        setup = s.setup(truth=truth, switch_memory=True, profiles=profiles)
        root = out / SWITCH_MEMORY_DIR / truth
        experiments.fig2(setup, root, force=force, exact=False, progress=False)
        experiments.table5(setup, root, force=force, progress=False)
        written += [f"{SWITCH_MEMORY_DIR}/{truth}/{f}"
                    for f in ("fig2_summary.csv", "table5.csv", f"{TIMINGS_DIR}/fig2_summary.csv")]
    return written


def step_packing(out: Path, s: Settings, force: bool) -> list[str]:
    """One sequence per step against packed steps of 32K and 128K tokens, per truth."""
    from simulator import experiments

    written = []
    for truth in s.truths():
        root = out if truth == "analytic" else out / PAPER_DIR
        experiments.packing(s.setup(truth=truth), root, force=force,
                            panels=s.packing_panels, progress=False)
        written.append(str((root / "packing.csv").relative_to(out)))
    return written


def step_groups(out: Path, s: Settings, force: bool) -> list[str]:
    """Global batches over groups sized per step (`paradyse-lab experiment groups`); full runs only (minutes)."""
    if s.quick:  # FULL_ONLY_STEPS
        return []
    from simulator.groups_experiment import GroupsSetup, groups

    groups(GroupsSetup(), out, force=force, progress=False)
    return list(STEP_OUTPUTS["groups"])


def step_costmodel_paper(out: Path, s: Settings, force: bool) -> list[str]:
    """Accuracy of every cost model on the paper profile, per length band, and leave-one-shape-out."""
    from paradyse_lab.cluster_lookup import get_cluster
    from paradyse_lab.cluster_spec import CALIBRATION_PARAMETERS
    from paradyse_lab.costmodel.ablation import accuracy
    from paradyse_lab.costmodel.calibration import fit_calibration, leave_one_shape_out, loso_summary, row_features
    from paradyse_lab.profiles import PAPER_PROFILE, read_profiles

    df = read_profiles(PAPER_PROFILE)
    cluster = get_cluster("a100-80gb-x8")
    models = ("analytic", "calibrated") + tuple(m for m in s.costmodels if m != "analytic")
    summary, _ = accuracy(df, models, cluster)
    rows = []
    for m, r in summary.items():
        rows.append({"cost_model": m, "split": "interp", "time_mape": r["time_mape_interp"],
                     "mem_mape": r["mem_mape_interp"]})
        rows.append({"cost_model": m, "split": "extrap", "time_mape": r["time_mape_extrap"],
                     "mem_mape": r["mem_mape_extrap"]})
        rows += [{"cost_model": m, "split": f"band {b}", "time_mape": v, "mem_mape": None}
                 for b, v in r["time_mape_by_band"].items()]
    _write(pd.DataFrame(rows).assign(source="paper"), out / "costmodel_paper_accuracy.csv")
    features = row_features(df, cluster)  # the analytic costs of every row, for both fits below
    loso = loso_summary(leave_one_shape_out(df, cluster, features))
    rows = []
    for m, r in loso.items():
        rows.append({"cost_model": m, "kind": "mean", "key": "all", "time_mape": r["time_mape_leave_one_shape_out"]})
        for kind in ("by_strategy", "by_band", "by_shape"):
            rows += [{"cost_model": m, "kind": kind[3:], "key": k, "time_mape": v} for k, v in r[kind].items()]
    _write(pd.DataFrame(rows), out / "calibration_loso.csv")
    params = fit_calibration(df, cluster, features)
    _write(pd.DataFrame([{"strategy": k, **{p: getattr(c, p) for p in CALIBRATION_PARAMETERS}}
                         for k, c in params.items()]), out / "calibration_params.csv")
    return ["costmodel_paper_accuracy.csv", "calibration_loso.csv", "calibration_params.csv"]


def step_solvers(out: Path, s: Settings, force: bool) -> list[str]:
    from solvers import bench

    rows = bench.run(s.bench_sizes, s.bench_options, s.bench_kinds, s.bench_instances, 3 if not s.quick else 1,
                     ("heuristic", "greedy", "dp", "ilp", "brute_force"), 2.0 if not s.quick else 1.0, 0)
    write_with_timings(pd.DataFrame(rows, columns=list(bench.CSV_COLUMNS)), out / "solver_bench.csv",
                       bench.TIMING_COLUMNS, bench.KEY_COLUMNS)
    return list(STEP_OUTPUTS["solvers"])


def step_costmodel(out: Path, s: Settings, force: bool) -> list[str]:
    from paradyse_lab.cluster_lookup import get_cluster
    from paradyse_lab.costmodel.ablation import mape, split_profiles
    from paradyse_lab.costmodel.learned_fit import analytic_whole, fit_each, profile_cluster
    from paradyse_lab.profiles import profile_sources, read_profiles

    df = read_profiles(profile_for(out, s))
    source = profile_sources(df)
    train, interp, extrap = split_profiles(df)
    cl = profile_cluster(df, get_cluster(s.cluster))
    tests = {"interp": interp, "extrap": extrap}
    frames, acc = [], []
    fits = fit_each([name for name in s.costmodels if name != "analytic"], train, cl)
    for name in s.costmodels:
        fitted = fits.get(name)
        for split, t in tests.items():
            pt, pm = analytic_whole(t, cl) if fitted is None else fitted.predict_rows(t)
            f = t[["model", "strategy", "seq_len", "time_s", "peak_bytes"]].copy()
            f.insert(0, "split", split)
            f.insert(0, "cost_model", name)
            f["pred_time_s"], f["pred_peak_bytes"] = pt, pm
            f["source"] = source
            frames.append(f)
            acc.append({"cost_model": name, "split": split, "rows": len(t), "source": source,
                        "time_mape": mape(pt, t["time_s"]), "mem_mape": mape(pm, t["peak_bytes"]),
                        "train_rows": len(train), "train_max_len_median": int(
                            train.groupby(["model", "strategy"])["seq_len"].max().median())})
    _write(pd.concat(frames, ignore_index=True), out / "costmodel_points.csv")
    _write(pd.DataFrame(acc), out / "costmodel_accuracy.csv")
    return ["costmodel_points.csv", "costmodel_accuracy.csv"]


def step_plan_map(out: Path, s: Settings, force: bool) -> list[str]:
    from paradyse_lab.cluster_lookup import get_cluster
    from paradyse_lab.costmodel.analytic import AnalyticCostModel
    from paradyse_lab.layer_graph import LayerGraph
    from paradyse_lab.model_spec import get_model
    from paradyse_lab.strategies import USABLE, layout_unit, options, step_length
    from solvers.registry import get_solver

    cluster = get_cluster(s.cluster)
    rows = []
    for model_name in ("gpt", "llama"):
        model = get_model(model_name)
        cm = AnalyticCostModel(model, cluster)
        graph = LayerGraph(model, "block")
        unit = layout_unit(cm.p)
        for seq in _length_grid(s.map_lengths):
            seq = step_length(seq, unit)
            problem = problem_from_cost_model(graph, cm, seq, 1, cluster.plan_budget_bytes,
                                                    options(USABLE))
            for solver in ("heuristic", "dp"):
                sol = get_solver(solver).solve(problem)
                for i, name in enumerate(sol.plan):
                    rows.append({"model": model_name, "solver": solver, "seq_len": seq, "layer": i,
                                 "strategy": name if sol.feasible else "OOM", "feasible": sol.feasible,
                                 "predicted_time_s": sol.predicted_time_s, "peak_bytes": sol.peak_bytes,
                                 "cost_model": "analytic"})
    _write(pd.DataFrame(rows), out / "plan_map.csv")
    return ["plan_map.csv"]


def step_memory(out: Path, s: Settings, force: bool) -> list[str]:
    from paradyse_lab.cluster_lookup import get_cluster
    from paradyse_lab.costmodel.analytic import AnalyticCostModel
    from paradyse_lab.costmodel.uniform_plan import uniform_plan_cost
    from paradyse_lab.model_spec import get_model
    from paradyse_lab.strategies import USABLE, StrategyOption, layout_unit, step_length

    cluster = get_cluster(s.cluster)
    rows = []
    for model_name in ("bert", "llama", "gpt"):
        cm = AnalyticCostModel(get_model(model_name), cluster)
        unit = layout_unit(cm.p)
        for seq in _length_grid(s.map_lengths // 2, 1 * K, 640 * K):
            seq = step_length(seq, unit)
            for strategy in USABLE:
                u = uniform_plan_cost(cm, StrategyOption(strategy), seq)
                rows.append({"model": model_name, "strategy": strategy, "seq_len": seq,
                             "model_state_bytes": u.model_state_bytes,
                             "kept_bytes": u.peak_bytes - u.model_state_bytes - u.transient_bytes,
                             "transient_bytes": u.transient_bytes, "peak_bytes": u.peak_bytes,
                             "budget_bytes": cluster.plan_budget_bytes,
                             "memory_bytes": cluster.memory_bytes, "cost_model": "analytic"})
    _write(pd.DataFrame(rows), out / "memory_breakdown.csv")
    return ["memory_breakdown.csv"]


def draw_figure(module: str, results: Path, figures: Path, name: str, note: str | None,
                formats: tuple[str, ...] = FIGURE_FORMATS) -> list[str]:
    """Render figures/MODULE.py from the CSVs under `results` into `figures`/NAME.png and .pdf (or `formats`)."""
    from figures._common import SOURCE_NOTE, MissingCSV, render

    figure = importlib.import_module(f"figures.{module}")
    try:
        path = render(module, figure.draw, results, figures, name, note or SOURCE_NOTE, formats)
    except MissingCSV as err:
        raise UserInputError(f"figures/{module}.py: {err}") from None
    print(f"wrote {path}." + " and .".join(formats))
    return [f"figures/{name}.{ext}" for ext in formats]


def step_figures(out: Path, s: Settings, force: bool) -> list[str]:
    jobs = [(name, out, name, None) for name in FIGURE_SCRIPTS]
    if s.paper_truth:
        jobs += [(name, out / PAPER_DIR, f"{name}_paper", PAPER_FIGURE_NOTE) for name in PAPER_FIGURE_SCRIPTS]
    if (out / "groups.csv").exists():  # full runs only (step_groups)
        from figures.groups import NOTE

        jobs.append(("groups", out, "groups", NOTE))
    written = []
    for module, results, name, note in jobs:
        written += draw_figure(module, results, out / "figures", name, note, s.figure_formats)
    return written


def step_report(out: Path, s: Settings, force: bool, timings: dict | None = None) -> list[str]:
    from paradyse_lab.app.report import write_report

    write_report(out, s, timings or {})
    return ["REPORT.md"]


STEP_FUNCS = {"fig2": step_fig2, "table5": step_table5, "fig2_paper": step_fig2_paper,
              "table5_paper": step_table5_paper, "seeds": step_seeds, "switch_memory": step_switch_memory,
              "packing": step_packing, "groups": step_groups,
              "solvers": step_solvers, "costmodel": step_costmodel, "costmodel_paper": step_costmodel_paper,
              "plan_map": step_plan_map, "memory": step_memory, "figures": step_figures, "report": step_report}


def figure_files(formats: tuple[str, ...]) -> tuple[str, ...]:
    """Every figure's file, relative to the output folder, in each of `formats`."""
    return tuple(f"figures/{n}.{e}" for n in FIGURE_SCRIPTS for e in formats)


STEP_OUTPUTS = {"fig2": ("fig2_summary.csv", "fig2_headline.csv", "fig2_beyond.csv", "solver_quality_runs.csv",
                         f"{TIMINGS_DIR}/fig2_summary.csv", f"{TIMINGS_DIR}/solver_quality_runs.csv"),
                "table5": ("table5.csv",), "solvers": ("solver_bench.csv", f"{TIMINGS_DIR}/solver_bench.csv"),
                "fig2_paper": (f"{PAPER_DIR}/fig2_summary.csv", f"{PAPER_DIR}/fig2_headline.csv",
                               f"{PAPER_DIR}/fig2_beyond.csv", f"{PAPER_DIR}/{TIMINGS_DIR}/fig2_summary.csv"),
                "table5_paper": (f"{PAPER_DIR}/table5.csv",), "seeds": (HEADLINE_SEEDS_FILE,),
                "packing": ("packing.csv", f"{PAPER_DIR}/packing.csv"),
                "groups": ("groups.csv", f"{TIMINGS_DIR}/groups.csv"),
                "switch_memory": tuple(f"{SWITCH_MEMORY_DIR}/{t}/{f}" for t in ("analytic", "paper")
                                       for f in ("fig2_summary.csv", "table5.csv", f"{TIMINGS_DIR}/fig2_summary.csv")),
                "costmodel": ("costmodel_points.csv", "costmodel_accuracy.csv"),
                "costmodel_paper": ("costmodel_paper_accuracy.csv", "calibration_loso.csv", "calibration_params.csv"),
                "plan_map": ("plan_map.csv",), "memory": ("memory_breakdown.csv",),
                "figures": figure_files(FIGURE_FORMATS)}
"""Steps whose outputs, once present (with the same settings and code, unchanged), are reused; the figures
also need every CSV they read unchanged; the report is always rewritten. A quick run's figures are the PNGs
alone (`QUICK_FIGURE_FORMATS`; `step_outputs`)."""


def step_outputs(name: str, s: Settings) -> tuple[str, ...]:
    """The files step `name` writes under settings `s` (`STEP_OUTPUTS`, a quick run's figures PNG alone)."""
    if name == "figures":
        return figure_files(s.figure_formats)
    return STEP_OUTPUTS.get(name, ())


FULL_ONLY_STEPS = ("groups",)
"""Steps a `--quick` run skips (they take minutes): they write none of their outputs there."""
BACKGROUND_STEPS = ("groups", "solvers")
"""Steps that read no other step's output and share no cost model with them: a full run starts each in a
process of its own at its start (beside the foreground's steps on the second core), and stamps them when the
loop reaches them."""


def _run_in_child(name: str, out: Path, s: Settings, force: bool, parent_pid: int) -> None:
    """A background step's process: the step; exit code 130 on Ctrl-C (the parent prints the one line), 2 on a
    user error (its one line printed here, no traceback). It dies with its parent (`stop_with_parent`: a
    `reproduce` killed by SIGKILL leaves no step computing on)."""
    import os
    import sys

    from runtime.launcher import stop_with_parent

    stop_with_parent(parent_pid)
    try:
        STEP_FUNCS[name](out, s, force)
    except KeyboardInterrupt:
        os._exit(130)
    except UserInputError as err:
        print(f"paradyse-lab reproduce: error: {err}", file=sys.stderr, flush=True)
        os._exit(2)


def start_background(names, out: Path, s: Settings, force: bool) -> dict:
    """{step: (process, start time)} of `names` started in forked processes (before any thread of this one)."""
    import multiprocessing
    import os

    started = {}
    for name in names:
        proc = multiprocessing.get_context("fork").Process(target=_run_in_child,
                                                           args=(name, out, s, force, os.getpid()),
                                                           name=f"reproduce-{name}")
        proc.start()
        started[name] = (proc, time.perf_counter())
    return started


def join_background(name: str, started: dict) -> float:
    """Wait for background step `name`; its seconds from start to end. A failed step is a `UserInputError`."""
    proc, began = started[name]
    proc.join()
    del started[name]  # only once joined: an interrupted join leaves it for the caller's clean-up to stop
    if proc.exitcode == 130:
        raise KeyboardInterrupt
    if proc.exitcode == 2:  # a user error: the step's one line is printed already
        raise SystemExit(2)
    if proc.exitcode:
        raise UserInputError(f"reproduce step {name} failed (exit code {proc.exitcode}); see its message above")
    return time.perf_counter() - began


def reproduce(out: str | Path = "results", quick: bool = False, force: bool = False, progress: bool = True,
              cluster: str = "a100-80gb-x8", log=print, execute: bool = False,
              sampling: str = "stratified", settings: Settings | None = None) -> dict:
    """Run every step (module docstring); returns {step: seconds} (0.0 for a reused step). `execute` adds
    the real runs on this machine: `paradyse-lab calibrate` and `validate-run` into DIR/execute/.
    `settings`: what the steps run (sequences per dataset, solver benchmark, cost models, ...), in place of
    `Settings.make(quick, cluster, sampling)`, whose arguments are then ignored (e.g. a run smaller than
    `--quick`; the report's first line then still names `reproduce --quick` or the full run, by `settings.quick`,
    and `--sampling` is not validated); the stamps key every step on them as on the made ones."""
    from tqdm import tqdm

    from paradyse_lab.atomic_write import prepare_output_dir, write_text_atomic
    from paradyse_lab.result_key import STAMP_DIR, input_files, is_fresh, result_key, stamp_path, write_stamp
    from simulator.shared import sharing

    if settings is None:
        settings = Settings.make(quick, cluster, sampling)
    out = prepare_output_dir(out)
    settings_path = out / SETTINGS_FILE
    wanted = _json_settings(settings)
    timings: dict = {}

    def step_key(name: str) -> str:
        inputs = input_files(settings.cluster)
        if name == "figures":  # figures are redrawn when any CSV they read changed
            inputs += sorted(f for f in out.rglob("*.csv") if STAMP_DIR not in f.parts)
        return result_key({**wanted, "step": name}, inputs)

    background = start_background([n for n in BACKGROUND_STEPS if not settings.quick and (
        force or not is_fresh(stamp_path(out, f"reproduce-{n}"), step_key(n)))], out, settings, force)
    try:
        with sharing():  # every step's runs share cost models and search problems (simulator/shared.py)
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
                    step_report(out, settings, force, timings)
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
    import subprocess
    import sys

    for cmd in (["calibrate", "--out", str(out)], ["validate-run", "--out", str(out)]):
        log(f"running paradyse-lab {' '.join(cmd)}")
        done = subprocess.run([sys.executable, "-m", "paradyse_lab", *cmd], stdout=subprocess.PIPE, text=True)
        if done.returncode:
            raise UserInputError(f"paradyse-lab {cmd[0]} failed with exit code {done.returncode}")
        log(done.stdout.rstrip())
