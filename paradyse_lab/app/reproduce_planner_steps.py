"""The steps of `paradyse-lab reproduce` that examine the planner's parts alone, with no simulated training: the
solvers' benchmark, the cost models' accuracy (on this cluster's profile and on the paper's), the plan each solver
picks per layer and length, the memory of every uniform plan, and what the strategies beyond the paper's four
(two-dimensional, uneven heads) change on one 8-GPU node. Each takes (DIR, `Settings`, force) and returns
the files it wrote, relative to DIR (the `reproduce` module's docstring lists what each writes)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from paradyse_lab.app.max_length import longest_length
from paradyse_lab.app.reproduce_outputs import STEP_OUTPUTS
from paradyse_lab.app.reproduce_settings import Settings, profile_for
from paradyse_lab.app.step_question import QuestionContext, StepQuestion, plan_question
from paradyse_lab.cluster.files import get_cluster
from paradyse_lab.cluster.spec import CALIBRATION_PARAMETERS
from paradyse_lab.core.layer_graph import LayerGraph
from paradyse_lab.core.model_spec import get_model
from paradyse_lab.core.strategies import USABLE, StrategyOption, layout_unit, options, step_length
from paradyse_lab.costmodel.ablation import accuracy, mape, split_profiles
from paradyse_lab.costmodel.analytic import AnalyticCostModel
from paradyse_lab.costmodel.calibration import fit_calibration, leave_one_shape_out, loso_summary, row_features
from paradyse_lab.costmodel.learned_fit import analytic_whole, fit_each, profile_cluster
from paradyse_lab.costmodel.lowering import problem_from_cost_model
from paradyse_lab.costmodel.profiles import PAPER_PROFILE, profile_sources, read_profiles
from paradyse_lab.costmodel.uniform_plan import uniform_plan_cost
from paradyse_lab.results.timings import write_with_timings
from paradyse_lab.simulator.results import write_csv_atomic
from paradyse_lab.solvers import bench
from paradyse_lab.solvers.registry import get_solver

K = 1024


def _length_grid(n: int, lo: int = 2 * K, hi: int = 640 * K) -> list[int]:
    """n lengths, geometric from lo to hi, multiples of 512 (the paper's granule)."""
    xs = np.geomspace(lo, hi, n)
    return sorted({int(round(x / 512)) * 512 for x in xs})


def _write(df: pd.DataFrame, path: Path) -> Path:
    return write_csv_atomic(df, path)


def step_solvers(out: Path, s: Settings, force: bool) -> list[str]:
    """Solve time and gap to the optimum of heuristic / greedy / dp / ilp / brute force."""
    rows = bench.run(s.bench_sizes, s.bench_options, s.bench_kinds, s.bench_instances, 3 if not s.quick else 1,
                     ("heuristic", "greedy", "dp", "ilp", "brute_force"), 2.0 if not s.quick else 1.0, 0)
    write_with_timings(pd.DataFrame(rows, columns=list(bench.CSV_COLUMNS)), out / "solver_bench.csv",
                       bench.TIMING_COLUMNS, bench.KEY_COLUMNS)
    return list(STEP_OUTPUTS["solvers"])


def step_costmodel(out: Path, s: Settings, force: bool) -> list[str]:
    """Each cost model's predictions against the truth on held-out rows of `profile_for`'s profile, inside and
    beyond the profiled range (`split_profiles`)."""
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


def step_costmodel_paper(out: Path, s: Settings, force: bool) -> list[str]:
    """Accuracy of every cost model on the paper profile, per length band, and leave-one-shape-out."""
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


def step_plan_map(out: Path, s: Settings, force: bool) -> list[str]:
    """The plan the heuristic and dp pick per layer, for GPT and Llama over a grid of lengths (analytic model)."""
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
                for i, name in enumerate(sol.assignment):
                    rows.append({"model": model_name, "solver": solver, "seq_len": seq, "layer": i,
                                 "strategy": name if sol.feasible else "OOM", "feasible": sol.feasible,
                                 "predicted_time_s": sol.predicted_time_s, "peak_bytes": sol.peak_bytes,
                                 "cost_model": "analytic"})
    _write(pd.DataFrame(rows), out / "plan_map.csv")
    return ["plan_map.csv"]


def step_memory(out: Path, s: Settings, force: bool) -> list[str]:
    """Model states, kept activations and transient bytes of every uniform plan, per model and length."""
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


TWO_D_CLUSTER = "h100-80gb-x8"
TWO_D_MODELS = ("qwen2-7b", "gpt2-xl", "llama3-8b")
"""Models whose head counts 8 does not divide (Qwen2-7B: 28 heads, 4 K/V heads; GPT-2 XL: 25) beside one it does."""
TWO_D_SERIES = {"paper's four": False, "+ 2-D and uneven heads": True}
"""The option sets compared (`StepQuestion.two_d`)."""


def two_d_rows(quick: bool, models=TWO_D_MODELS) -> list[dict]:
    """Per model and option set, on one node of 8 H100s under the analytic model with sub-layer plans (dp): the
    step at 8K tokens (at the model's learned positions where fewer) and at 128K, and (not in a quick run) the
    longest length, all without recompute; the options each plan takes."""
    dp = get_solver("dp")
    rows = []
    for name in models:
        cap = get_model(name).max_positions
        for series, two_d in TWO_D_SERIES.items():
            question = StepQuestion(name, TWO_D_CLUSTER, granularity="sublayer", cost_model="analytic", two_d=two_d)
            short = min(8 * K, cap or 8 * K)
            for seq in (short, 128 * K):
                if cap and seq > cap:  # past the learned positions: the planner refuses it
                    continue
                answer = plan_question(replace(question, seq_len=seq), dp)
                what = f"{seq // K}K" + (" (its positions)" if seq == cap else "")
                rows.append(_two_d_row(name, series, what, seq, answer.solution))
            if not quick:
                ctx = QuestionContext(replace(question, seq_len=1))
                found = longest_length(lambda n, head, ctx=ctx: ctx.problem(head, n)[0], dp,
                                       layout_unit(ctx.cluster.gpus), cap or 1 << 30, ctx.heads)
                rows.append(_two_d_row(name, series, "longest without recompute", found.seq_len, found.solution))
    return rows


def _two_d_row(model: str, series: str, what: str, seq: int, sol) -> dict:
    return {"model": model, "series": series, "step": what, "seq_len": seq, "feasible": bool(sol.feasible),
            "predicted_time_s": sol.predicted_time_s if sol.feasible else float("nan"),
            "options": " ".join(dict.fromkeys(sol.assignment)) if sol.feasible else "",
            "cluster": TWO_D_CLUSTER, "granularity": "sublayer", "cost_model": "analytic"}


def step_two_d(out: Path, s: Settings, force: bool) -> list[str]:
    """`two_d_rows` (two_d.csv)."""
    _write(pd.DataFrame(two_d_rows(s.quick, TWO_D_MODELS)), out / "two_d.csv")
    return ["two_d.csv"]
