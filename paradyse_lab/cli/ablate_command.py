"""`paradyse-lab costmodel ablate`: accuracy and planning regret of the cost models on a profile.

Example:
    paradyse-lab costmodel ablate --profiles paradyse_lab/data/profiles/paper_a100-80gb-x8.csv --format json
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

from paradyse_lab.cli.costmodel_commands import profile_path
from paradyse_lab.cli.output import add_format_argument, add_reserve_argument, print_json, print_table, reserve_bytes
from paradyse_lab.cluster.files import get_cluster
from paradyse_lab.cluster.presets import DEFAULT_CLUSTER, PRESETS
from paradyse_lab.costmodel.replay.tables import bundled_tables
from paradyse_lab.errors import UserInputError, require_positive_int, unknown_name
from paradyse_lab.options import integer

DEFAULT_SIM = ("gpt", "grch38", 200)
"""Regret is simulated on the paper's Table 5 setting: GPT on GRCh38."""


def register(sub) -> None:
    p = sub.add_parser(
        "ablate-costmodel", help="accuracy and planning regret of the cost models on a profile",
        description="Per cost model (analytic, the paper's hybrid random forest + polynomial, forest only, "
        "polynomial only, analytic x learned residual) and strategy: MAPE of whole-model time and peak "
        "memory on held-out lengths inside the profiled range (interp) and up to 2x beyond it (extrap): each "
        "profiled curve is cut at half its longest length, the models fit below the cut. Regret: simulated "
        "total time of the plans a model chooses (dynamic:dp, no smoothing, models fitted on the whole "
        "profile), charged by the truth, over that of the plans the truth chooses, over the steps both "
        "trained (1.0 = no loss). calibrated: the analytic model with four parameters per strategy fitted on "
        "the same training rows; with two or more model shapes in the profile, also leave-one-shape-out: "
        "calibrate on all shapes but one, predict that one, in turn (time MAPE per strategy, length band, shape). "
        "replay (where the cluster has measured kernel tables, or spec-derived ones on the paper profile): the "
        "runtime's traced operations priced from the tables on the host / device / communication critical path, "
        "its per-call costs (dispatch per operation, Python per sub-layer, and on real runs a collective call's "
        "cost) fitted on the same training rows (and on the other shapes only when one is left out); no regret "
        "simulation.")
    p.add_argument("--profiles", default="", help="profile CSV (default: the cluster's bundled profile)")
    p.add_argument("--cost-models", default=None,
                   help="comma-separated cost models to compare (default all: analytic, calibrated, hybrid, "
                   "forest, polynomial, residual, and replay where the cluster has measured kernel tables or on the "
                   "paper profile)")
    p.add_argument("--holdout-every", type=integer, default=4,
                   help="hold out every Nth distinct length inside the range (default 4)")
    p.add_argument("--cluster", default=None,
                   help="cluster of the analytic model when the profile's device is not a preset (default: the "
                   f"cluster.toml beside the profile, as `paradyse-lab calibrate` writes it, else {DEFAULT_CLUSTER})")
    p.add_argument("--model", default=DEFAULT_SIM[0], help="transformer of the regret simulation (default gpt)")
    p.add_argument("--dataset", default=DEFAULT_SIM[1], help="workload of the regret simulation (default grch38)")
    p.add_argument("--size", type=integer, default=DEFAULT_SIM[2], help="sequences in the workload (default 200)")
    p.add_argument("--seed", type=integer, default=0, help="workload sampling seed (default 0)")
    p.add_argument("--solver", default="dp", help="solver of the dynamic policy (default dp)")
    p.add_argument("--truth-cost-model", default="analytic", help="cost model that charges plans (default analytic)")
    add_reserve_argument(p)
    p.add_argument("--no-regret", action="store_true", help="skip the simulations (regret is then null)")
    add_format_argument(p)
    p.set_defaults(func=run_ablate)


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.2f}%"


def run_ablate(args) -> int:
    from paradyse_lab.app.replay_ablation import NAME as REPLAY  # lazy: pandas: slow to load, only this path needs it

    # lazy: pandas: slow to load, only this path needs it
    from paradyse_lab.costmodel.ablation import ABLATION_MODELS, accuracy

    # lazy: pandas: slow to load, only this path needs it
    from paradyse_lab.costmodel.profiles import profile_sources, read_profiles

    started = time.perf_counter()
    names = [n.strip() for n in (args.cost_models or ",".join(ABLATION_MODELS)).split(",") if n.strip()]
    for n in names:
        if n not in ABLATION_MODELS + (REPLAY,):
            raise unknown_name("cost model in --cost-models", n, ABLATION_MODELS + (REPLAY,))
    if not names:
        raise UserInputError("--cost-models names no cost model")
    size = require_positive_int("--size", args.size)
    reserve_bytes(args)
    if not args.profiles:
        args.cluster = args.cluster or DEFAULT_CLUSTER
    path = profile_path(args)
    df = read_profiles(path)
    source = profile_sources(df)
    args.cluster = args.cluster or _cluster_beside(df, path)
    cluster = get_cluster(args.cluster)
    tables = bundled_tables(cluster.name)
    if tables is not None and tables.derived and source != "paper":  # nothing measured to score them against
        if REPLAY in names:
            raise UserInputError(f"--cost-models replay: the {cluster.name} kernel tables are spec-derived, not "
                                 "measured; score them on the authors' measured curves (--profiles "
                                 "paradyse_lab/data/profiles/paper_a100-80gb-x8.csv)")
        tables = None
    if args.cost_models is None and tables is not None:
        names.append(REPLAY)
    others = [n for n in names if n != REPLAY]
    summary, per_strategy = accuracy(df, others, cluster, args.holdout_every) if others else ({}, None)
    loso = _leave_one_shape_out(df, cluster, others)
    replay_info = None
    if REPLAY in names:
        summary, per_strategy, loso, replay_info = _with_replay(df, cluster, args.holdout_every, summary,
                                                                per_strategy, loso)
    runs = {}
    if not args.no_regret:
        try:
            runs = _regret(args, others, path, size)
        except UserInputError as err:
            raise UserInputError(f"regret simulation: {err} (--model picks one of the profile's models: "
                                 f"{', '.join(sorted(set(df['model'])))}; --no-regret skips it)") from None
    models = {n: {**summary[n], "regret": runs[n]["regret"] if n in runs else None,
                  "time_mape_leave_one_shape_out": loso[n]["time_mape_leave_one_shape_out"] if n in loso else None}
              for n in names}
    out = {
        "models": models,
        "leave_one_shape_out": loso,
        "by_strategy": per_strategy.to_dict(orient="records"),
        "regret_runs": runs,
        "profile": str(path), "profile_source": source, "rows": len(df), "cluster": cluster.name,
        "simulation": None if args.no_regret else {
            "model": args.model, "dataset": args.dataset, "size": size, "seed": args.seed,
            "policy": f"dynamic:{args.solver}", "smoothing": False, "truth_cost_model": args.truth_cost_model},
        "replay": replay_info,
        "wall_s": time.perf_counter() - started,
    }
    if args.format == "json":
        print_json(out)
        return 0
    _print_ablation(out, args, size)
    return 0


def _print_ablation(out: dict, args, size: int) -> None:
    """`run_ablate`'s answer as tables: the models' errors, per strategy, per band, leaving one shape out, the
    replay model's fitted per-call costs and the regret runs."""
    models, loso, replay_info, runs = out["models"], out["leave_one_shape_out"], out["replay"], out["regret_runs"]
    path, source = out["profile"], out["profile_source"]
    print(f"profile {path} ({out['rows']} rows, source={source})")
    rows = [[n, _pct(m["time_mape_interp"]), _pct(m["time_mape_extrap"]), _pct(m["mem_mape_interp"]),
             _pct(m["mem_mape_extrap"]), "-" if m["regret"] is None else f"{m['regret']:.4f}"]
            for n, m in models.items()]
    print_table(["cost model", "time interp", "time extrap", "mem interp", "mem extrap", "regret"], rows)
    print()
    rows = [[r["model"], r["strategy"]] + [_pct(r[k]) for k in ("time_mape_interp", "time_mape_extrap",
                                                                   "mem_mape_interp", "mem_mape_extrap")]
            for r in out["by_strategy"]]
    print_table(["cost model", "strategy", "time interp", "time extrap", "mem interp", "mem extrap"], rows)
    bands = list(next(iter(models.values()))["time_mape_by_band"])
    print()
    print_table(["cost model"] + [f"time {b}" for b in bands],
                [[n] + [_pct(m["time_mape_by_band"].get(b)) for b in bands] for n, m in models.items()])
    if loso:
        print()
        strategies = sorted(next(iter(loso.values()))["by_strategy"])
        loso_bands = list(next(iter(loso.values()))["by_band"])
        print_table(["leave one shape out", "mean"] + strategies + loso_bands,
                    [[n, _pct(r["time_mape_leave_one_shape_out"])] + [_pct(r["by_strategy"][s]) for s in strategies]
                     + [_pct(r["by_band"][b]) for b in loso_bands] for n, r in loso.items()])
    if replay_info:
        info = replay_info
        loso_fits = ", ".join(_call_costs_text(c) for c in info["loso_call_costs"].values())
        print(f"\nreplay: {info['tables']}; fitted {_call_costs_text(info)} (leave one shape out: {loso_fits}); "
              f"fitted on every row: {_call_costs_text(info['every_row'])}; "
              f"{info['traced']} sub-layer traces in {info['trace_s']:.1f} s, priced in "
              f"{info['wall_s'] - info['trace_s']:.1f} s")
    if runs:
        print()
        rows = [[n, r["steps"], r["truth_steps"], f"{r['time_s']:.1f}", f"{r['truth_time_s']:.1f}",
                 r["max_len"], r["oom_at_seq_len"] or "-"] for n, r in runs.items()]
        print_table(["plan cost model", "steps", "truth steps", "time s", "truth time s", "max len", "OOM at"], rows)
        print(f"\nregret: {args.model} on {args.dataset} ({size} sequences), dynamic:{args.solver} without smoothing, "
              f"charged by {args.truth_cost_model}; learned models fitted on the whole profile (source={source})")


def _call_costs_text(c: dict) -> str:
    """Fitted per-call costs as `dispatch 14.0 us + 64 per sub-layer, collective +120.0 us`."""
    ops = c.get("sublayer_ops", c.get("pass_ops"))
    text = f"dispatch {1e6 * c['dispatch_s']:.1f} us + {ops} per sub-layer"
    return text + (f", collective +{1e6 * c['collective_s']:.1f} us" if c.get("collective_s") else "")


def _with_replay(df, cluster, holdout_every, summary, per_strategy, loso):
    """The other models' results with the replay model's added."""
    import pandas as pd  # lazy: pandas: slow to load, only this path needs it

    # lazy: pandas: slow to load, only this path needs it
    from paradyse_lab.app.replay_ablation import NAME, replay_accuracy

    got = replay_accuracy(df, cluster, holdout_every)
    summary = {**summary, NAME: {k: v for k, v in got["summary"].items() if k != "call_costs"}}
    rows = pd.DataFrame(got["by_strategy"])
    per_strategy = rows if per_strategy is None else pd.concat([per_strategy, rows], ignore_index=True)
    if got["loso"] is not None:
        loso = {**loso, NAME: {k: v for k, v in got["loso"].items() if k != "call_costs"}}
    costs = got["summary"]["call_costs"]
    info = {**got["info"], "every_row": dataclasses.asdict(got["info"]["every_row"]), "dispatch_s": costs.dispatch_s,
            "pass_ops": costs.sublayer_ops, "collective_s": costs.collective_s,
            "loso_call_costs": {s: dataclasses.asdict(c) for s, c in (got["loso"] or {}).get("call_costs", {}).items()}}
    return summary, per_strategy, loso, info


def _cluster_beside(df, path: Path) -> str:
    """The cluster of a profile taken on a machine that is no preset: the cluster.toml `paradyse-lab calibrate`
    writes beside it, else the default preset."""
    sibling = Path(path).parent / "cluster.toml"
    if not set(df["device"]) <= set(PRESETS) and sibling.is_file():
        return str(sibling)
    return DEFAULT_CLUSTER


def _leave_one_shape_out(df, cluster, names) -> dict:
    """Leave-one-shape-out time accuracy of the analytic and calibrated models (empty with one shape)."""
    # lazy: pandas: slow to load, only this path needs it
    from paradyse_lab.costmodel.calibration import SHAPE_COLUMNS, leave_one_shape_out, loso_summary

    # lazy: pandas: slow to load, only this path needs it
    from paradyse_lab.costmodel.learned_fit import profile_cluster

    wanted = [n for n in ("analytic", "calibrated") if n in names]
    if not wanted or len(df[list(SHAPE_COLUMNS)].drop_duplicates()) < 2:
        return {}
    return loso_summary(leave_one_shape_out(df, profile_cluster(df, cluster)), wanted)


def _regret(args, names, path: Path, size: int) -> dict:
    """Per plan cost model: the truth-charged run against the truth-planned run (common trained steps)."""
    from paradyse_lab.simulator.experiments import Setup, run_one  # lazy: pandas: slow to load, only this path needs it

    # lazy: pandas: slow to load, only this path needs it
    from paradyse_lab.simulator.run_metrics import summarize, time_to_reach

    setup = Setup(cluster=args.cluster, size=size, seed=args.seed, reserve_bytes=reserve_bytes(args),
                  profiles=str(path))
    policy = f"dynamic:{args.solver}"
    truth = args.truth_cost_model
    kw = {"smoothing": False, "truth_cost_model": truth, "progress": sys.stderr.isatty()}
    base = run_one(setup, args.model, args.dataset, policy, plan_cost_model=truth, **kw)
    base_s = summarize(base, args.model, args.dataset, policy)
    out = {}
    for n in names:
        rows = base if n == truth else run_one(setup, args.model, args.dataset, policy, plan_cost_model=n, **kw)
        s = summarize(rows, args.model, args.dataset, policy)
        common = min(s.steps, base_s.steps)
        t_model, t_truth = time_to_reach(rows, common), time_to_reach(base, common)
        out[n] = {"regret": t_model / t_truth if t_truth else None, "steps": s.steps, "truth_steps": base_s.steps,
                  "time_s": s.total_time_s, "truth_time_s": base_s.total_time_s, "common_steps": common,
                  "max_len": s.max_seq_len_trained, "oom_at_seq_len": s.oom_at_seq_len}
    return out
