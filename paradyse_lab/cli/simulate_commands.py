"""`paradyse-lab simulate` (one run) and `paradyse-lab experiment fig2|table5` (the paper's experiments).

Examples: `paradyse-lab simulate --model gpt --dataset grch38 --policy dynamic:heuristic --format json`;
`paradyse-lab experiment fig2` writes results/fig2_summary.csv, results/fig2_headline.csv and one CSV per
run under results/runs/fig2/ (finished runs are reused unless --force); `paradyse-lab experiment packing`
writes results/packing.csv and results/figures/packing.png.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

from paradyse_lab.cli.output import (
    add_cluster_arguments,
    add_format_argument,
    add_packing_arguments,
    add_reserve_argument,
    add_sampling_argument,
    cost_model_help,
    print_json,
    print_table,
    reserve_bytes,
)
from paradyse_lab.cluster_spec import cluster_with_gpus, get_cluster
from paradyse_lab.errors import UserInputError, require_positive_int

EXPERIMENTS = ("fig2", "table5", "packing")


def _add_common(p) -> None:
    p.add_argument("--truth-cost-model", default="analytic",
                   help="cost model that charges every step (and plans unless --plan-cost-model says otherwise): "
                   "analytic (default), paper (the ParaDySe authors' measured A100 times), calibrated, or a "
                   "learned kind / .joblib file")
    add_cluster_arguments(p)
    p.add_argument("--size", type=int, default=None, help="sequences sampled from the dataset (default 200)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    add_sampling_argument(p)
    add_reserve_argument(p)
    p.add_argument("--gamma", type=float, default=0.05, help="smoothing tolerance of dynamic policies (0.05)")
    p.add_argument("--profiles", default="",
                   help="profile CSV the learned and calibrated cost models are fitted on (default: the bundled "
                   "paper profile under --truth-cost-model paper, else the cluster's bundled one, synthetic "
                   "source=analytic until measured profiles exist)")
    p.add_argument("--recompute", action="store_true",
                   help="dynamic policies also offer every strategy with activation recomputation; static ones "
                   "recompute every layer (same as the policy suffix +recompute)")
    p.add_argument("--granularity", default="block",
                   help="block (default, the paper: one decision per layer) or sublayer (attention and MLP decided "
                   "separately; same as the dynamic policy suffix +sublayer)")
    p.add_argument("--switch-memory", action="store_true",
                   help="charge the caching allocator's reservation of every strategy used so far (the memory "
                   "price of switching, simulator/engine.py Charger); static runs pay nothing more")


def register(sub) -> None:
    p = sub.add_parser(
        "simulate", help="simulate one training run over a workload",
        description="Simulate training over a workload's lengths (sorted ascending, as the paper trains) "
        "with one policy, charged by --truth-cost-model (analytic by default; paper: the authors' measured A100 "
        "times) and planned with --plan-cost-model (default: the truth). Policies: static:NAME (stops at its first "
        "OOM), restart:NAME (pays 31 s and continues with a lighter strategy), dynamic:SOLVER "
        "(heuristic, dp, ilp, ...; with the paper's cache and smoothing).")
    p.add_argument("--model", required=True)
    p.add_argument("--dataset", required=True,
                   help="github_code, grch38, uniform[:LO:HI], lognormal[:MEDIAN:SIGMA] or file:PATH")
    p.add_argument("--policy", required=True,
                   help="static:NAME[+recompute], restart:NAME or dynamic:SOLVER[+recompute][+sublayer]")
    p.add_argument("--no-smoothing", action="store_true", help="turn the 5%% smoothing off")
    p.add_argument("--exclude", default="", help="comma-separated strategies a dynamic policy may not use")
    p.add_argument("--out", help="write the per-step rows to this CSV")
    p.add_argument("--plan-cost-model", default=None,
                   help="cost model a dynamic policy plans with: analytic, paper, calibrated, hybrid, forest, "
                   "polynomial, residual (fitted ones on --profiles) or a .joblib file (default: the truth's)")
    p.add_argument("--cost-model", dest="truth_cost_model", default=argparse.SUPPRESS,
                   help=cost_model_help("same as --truth-cost-model: the model that charges and plans"))
    add_packing_arguments(p)
    _add_common(p)
    add_format_argument(p)
    p.set_defaults(func=run_simulate, out_file=True)

    p = sub.add_parser(
        "experiment", help="run the paper's Figure 2 or Table 5 in simulation",
        description="fig2: six panels (GitHubCode, GRCh38) x (BERT, LLaMA, GPT) with the four static "
        "strategies, the paper's heuristic and our exact dp / ilp policies, and beyond the paper dp with "
        "recomputation (per block and per sub-layer) against the static strategies with recomputation; prints "
        "the headline metrics beside the paper's. table5: the ablations of GPT on GRCh38 beside the paper's Table 5. "
        "packing (beyond the paper): Figure 2's panels with the documents packed into steps of 32K and 128K "
        "tokens beside one sequence per step, static strategies against the heuristic and dp: time per token "
        "and longest document trained (DIR/packing.csv and DIR/figures/packing.png).")
    p.add_argument("name", choices=EXPERIMENTS)
    p.add_argument("--out", default="results", help="results folder (default results/)")
    p.add_argument("--force", action="store_true", help="rerun finished runs instead of reusing their CSVs")
    p.add_argument("--no-exact", action="store_true",
                   help="fig2: skip the paper-comparison dp and ilp policies (our dp + recompute series still run)")
    p.add_argument("--paper-policies-only", action="store_true",
                   help="fig2: skip our series beyond the paper (dp + recompute, dp + recompute + sub-layer, and "
                   "the static strategies with recomputation)")
    _add_common(p)
    add_format_argument(p)
    p.set_defaults(func=run_experiment)


def _setup(args):
    from paradyse_lab.errors import unknown_name
    from paradyse_lab.layer_graph import GRANULARITIES
    from paradyse_lab.workloads import SAMPLINGS
    from simulator.experiments import EXPERIMENT_SIZE, Setup

    cluster_with_gpus(get_cluster(args.cluster), args.gpus)  # a bad name or count: refused before any run
    if args.granularity not in GRANULARITIES:
        raise unknown_name("--granularity", args.granularity, GRANULARITIES)
    if args.sampling not in SAMPLINGS:
        raise unknown_name("--sampling", args.sampling, SAMPLINGS)
    size = require_positive_int("--size", args.size if args.size is not None else EXPERIMENT_SIZE)
    if not 0 <= args.gamma < 1:
        raise UserInputError(f"--gamma must be in [0, 1), got {args.gamma}")
    return Setup(cluster=args.cluster, gpus=args.gpus, size=size, seed=args.seed, sampling=args.sampling,
                 reserve_bytes=reserve_bytes(args),
                 gamma=args.gamma, profiles=args.profiles, truth=args.truth_cost_model,
                 switch_memory=args.switch_memory, recompute=args.recompute, granularity=args.granularity,
                 **_packing(args))


def _packing(args) -> dict:
    """`--pack-tokens` / `--pack-order` as `Setup` fields (checked before any run starts)."""
    from paradyse_lab.packing import MAX_TOKEN_BUDGET, PACK_ORDERS

    if getattr(args, "pack_tokens", None) is None:
        return {}
    if args.pack_order not in PACK_ORDERS:
        raise UserInputError(f"--pack-order must be one of {', '.join(PACK_ORDERS)}, got {args.pack_order!r}")
    return {"pack_tokens": require_positive_int("--pack-tokens", args.pack_tokens, MAX_TOKEN_BUDGET),
            "pack_order": args.pack_order}


def run_simulate(args) -> int:
    from simulator.experiments import run_one
    from simulator.results import write_csv_atomic
    from simulator.run_metrics import summarize

    setup = _setup(args)
    exclude = tuple(x.strip() for x in args.exclude.split(",") if x.strip())
    if exclude and not args.policy.startswith("dynamic:"):
        raise UserInputError("--exclude applies to dynamic:SOLVER policies only")
    rows = run_one(setup, args.model, args.dataset, args.policy, smoothing=not args.no_smoothing,
                   exclude=exclude, progress=sys.stderr.isatty(), plan_cost_model=args.plan_cost_model)
    if args.out:
        write_csv_atomic(rows, args.out)
    from simulator.policies import PolicySpec

    name = PolicySpec.parse(args.policy, args.recompute, args.granularity).name
    s = summarize(rows, args.model, args.dataset, name)
    if args.format == "json":
        print_json(s.to_dict())
    else:
        plan_cm = args.plan_cost_model or args.truth_cost_model
        labels = [["plan cost model", plan_cm], ["truth cost model", args.truth_cost_model]]
        if {plan_cm, args.truth_cost_model} - {"analytic", "paper"}:
            from paradyse_lab.profiles import profile_sources, read_profiles

            labels.append(["profile source", profile_sources(read_profiles(setup.profile_path()))])
        if args.switch_memory:
            labels.append(["memory model", "with switching reservations"])
        print_table(["field", "value"], [[k, v] for k, v in s.to_dict().items()] + labels)
    return 0


def _pct(x) -> str:
    return "-" if x is None or x != x else f"{x:+.2%}"


def run_experiment(args) -> int:
    from simulator import experiments

    setup = _setup(args)
    root = Path(args.out)
    started = time.perf_counter()
    if args.name == "fig2":
        summaries, headlines = experiments.fig2(setup, root, force=args.force, exact=not args.no_exact,
                                                progress=sys.stderr.isatty(), beyond=not args.paper_policies_only)
        elapsed = time.perf_counter() - started
        if args.format == "json":
            print_json({"summaries": summaries.to_dict(orient="records"),
                        "headlines": headlines.to_dict(orient="records"), "wall_s": elapsed})
            return 0
        rows = [[r.dataset, r.model, r.policy, r.steps, f"{r.total_time_s:.1f}", r.max_seq_len_trained,
                 r.oom_at_seq_len if r.oom_at_seq_len == r.oom_at_seq_len else "-", r.switches]
                for r in summaries.itertuples()]
        print_table(["dataset", "model", "policy", "steps", "time s", "max len", "OOM at", "switches"], rows)
        print()
        rows = [[h.dataset, h.model, h.policy, _pct(h.max_time_reduction), h.against or "-",
                 _pct(h.paper_time_reduction), _pct(h.length_extension), _pct(h.max_length_extension),
                 _pct(h.paper_length_extension)]
                for h in headlines.itertuples()]
        print_table(["dataset", "model", "policy", "time saved (up to)", "vs", "paper", "length vs best",
                     "length (up to)", "paper"], rows)
        print(f"\n{len(summaries)} runs in {elapsed:.1f} s; CSVs under {root}/")
        return 0
    if args.name == "packing":
        return _run_packing(setup, root, args)
    table = experiments.table5(setup, root, force=args.force, progress=sys.stderr.isatty())
    if args.format == "json":
        print_json({"table5": table.to_dict(orient="records")})
        return 0
    rows = [[t.variant + (f" [plan: {t.plan_cost_model}, profile source={t.profile_source}]" if t.profile_source
                          else ""), t.max_len if t.status == "ok" else t.status, t.paper_max_len,
             "-" if t.time_s != t.time_s or t.time_s is None else f"{t.time_s:.1f}", t.paper_time_s,
             _pct(t.saving), _pct(t.paper_saving)] for t in table.itertuples()]
    print_table(["variant", "max len", "paper", "time s", "paper", "saving", "paper"], rows)
    return 0


def _run_packing(setup, root: Path, args) -> int:
    from paradyse_lab.app.reproduce import PAPER_FIGURE_NOTE, draw_figure
    from simulator import experiments

    table = experiments.packing(setup, root, force=args.force, progress=sys.stderr.isatty())
    notes = {"analytic": None, "paper": PAPER_FIGURE_NOTE}  # None: the figure's own analytic-model note
    note = notes.get(setup.truth, f"simulated: charged by the {setup.truth} cost model, {setup.cluster}")
    with contextlib.redirect_stdout(sys.stderr if args.format == "json" else sys.stdout):  # stdout: JSON only
        draw_figure("packing", root, root / "figures", "packing", note)
    if args.format == "json":
        print_json({"packing": table.to_dict(orient="records")})
        return 0
    rows = [[t.dataset, t.model, t.pack_tokens or "1 seq/step", t.policy, t.steps,
             f"{t.documents_trained}/{t.documents}", "-" if t.time_per_token_us != t.time_per_token_us
             else f"{t.time_per_token_us:.2f}", t.max_doc_trained, t.strategy_mix] for t in table.itertuples()]
    print_table(["dataset", "model", "tokens/step", "policy", "steps", "documents", "us/token", "longest doc",
                 "strategies (share of layers x tokens)"], rows)
    print(f"\nwrote {root / 'packing.csv'} and {root / 'figures' / 'packing.png'}")
    return 0
