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

from paradyse_lab.cli.output import cost_model_help, print_json, print_table
from paradyse_lab.cli.simulate_options import (
    EXPERIMENTS,  # noqa: F401 - the experiments' names, as before
    MAX_GLOBAL_BATCH,
    ExperimentOptions,
    SimulateOptions,
)
from paradyse_lab.core.strategies import layout_unit
from paradyse_lab.costmodel.factory import resolve_cost_model
from paradyse_lab.errors import require_positive_int
from paradyse_lab.options import add_dataclass_arguments, from_namespace
from paradyse_lab.simulator.policy_spec import PolicySpec


def register(sub) -> None:
    p = sub.add_parser(
        "simulate", help="simulate one training run over a workload",
        description="Simulate training over a workload's lengths (sorted ascending, as the paper trains) "
        "with one policy, charged by --truth-cost-model (default auto: the replay model where the cluster has "
        "kernel tables, bundled or beside its cluster file, else the analytic model; paper: the authors' measured "
        "A100 times) and planned with --plan-cost-model (default: the truth). Policies: static:NAME (stops at its "
        "first OOM), restart:NAME (pays 31 s and continues with a lighter strategy), dynamic:SOLVER "
        "(heuristic, dp, ilp, ...; with the paper's cache and smoothing).")
    add_dataclass_arguments(p, SimulateOptions)
    p.add_argument("--cost-model", dest="truth_cost_model", default=argparse.SUPPRESS,
                   help=cost_model_help("same as --truth-cost-model: the model that charges and plans"))
    p.set_defaults(func=run_simulate, out_file=True)

    p = sub.add_parser(
        "experiment", help="run the paper's Figure 2 or Table 5 in simulation",
        description="fig2: six panels (GitHubCode, GRCh38) x (BERT, LLaMA, GPT) with the four static "
        "strategies, the paper's heuristic and our exact dp / ilp policies, and beyond the paper dp with "
        "recomputation (per block and per sub-layer, and per sub-layer with the tiled MLP and activation offload "
        "offered too) against the static strategies with recomputation; prints "
        "the headline metrics beside the paper's. table5: the ablations of GPT on GRCh38 beside the paper's Table 5. "
        "packing (beyond the paper): Figure 2's panels with the documents packed into steps of 32K and 128K "
        "tokens beside one sequence per step, static strategies against the heuristic and dp: time per token "
        "and longest document trained (DIR/packing.csv and DIR/figures/packing.png). groups (beyond the paper): "
        "global batches of --global-batch sequences over groups of GPUs sized per step, against ParaDySe (one "
        "group of all GPUs), Megatron-Core's dynamic context-parallel scheduler, one split with ring attention on "
        "the smallest group that fits each sequence and the best static strategy, on 1, 4 and 16 nodes; ours "
        "runs a step as rounds of group splits (DIR/groups.csv and DIR/figures/groups.png).")
    add_dataclass_arguments(p, ExperimentOptions)
    p.set_defaults(func=run_experiment)


def run_simulate(args) -> int:
    from paradyse_lab.simulator.experiments import run_one  # lazy: pandas: slow to load, only this path needs it
    from paradyse_lab.simulator.results import write_csv_atomic  # lazy: pandas: slow to load, only this path needs it
    from paradyse_lab.simulator.run_metrics import summarize  # lazy: pandas: slow to load, only this path needs it

    opts = from_namespace(SimulateOptions, args)
    groups = opts.grouping.group_policy(opts.policy)
    if groups:
        from paradyse_lab.cli.grouped_command import run_grouped

        return run_grouped(opts, groups)
    setup = opts.run.setup(opts.packing, cost_model="auto")
    rows = run_one(setup, opts.model, opts.dataset, opts.policy, smoothing=opts.smoothing,
                   exclude=opts.excluded(), progress=sys.stderr.isatty(), plan_cost_model=opts.plan_cost_model or None)
    if opts.out:
        write_csv_atomic(rows, opts.out)
    name = PolicySpec.parse(opts.policy, opts.run.recompute, opts.run.granularity).name
    s = summarize(rows, opts.model, opts.dataset, name)
    if opts.format == "json":
        print_json(s.to_dict())
        return 0
    cluster = setup.cluster_spec()
    truth = resolve_cost_model(setup.truth, cluster)
    plan_cm = resolve_cost_model(opts.plan_cost_model or setup.truth, cluster)
    labels = [["plan cost model", plan_cm], ["truth cost model", truth]]
    if {plan_cm, truth} - {"analytic", "paper", "replay"}:  # the models fitted on a profile
        from paradyse_lab.costmodel.profiles import profile_sources, read_profiles

        labels.append(["profile source", profile_sources(read_profiles(setup.profile_path()))])
    if opts.run.switch_memory:
        labels.append(["memory model", "with switching reservations"])
    print_table(["field", "value"], [[k, v] for k, v in s.to_dict().items()] + labels)
    return 0


def _pct(x) -> str:
    return "-" if x is None or x != x else f"{x:+.2%}"


def run_experiment(args) -> int:
    # lazy: pandas: slow to load, only this path needs it
    from paradyse_lab.simulator import ablation_experiment, experiments

    opts = from_namespace(ExperimentOptions, args)
    require_positive_int("--global-batch", opts.global_batch, MAX_GLOBAL_BATCH)  # checked whichever experiment
    setup = opts.run.setup()
    root = Path(opts.out)
    started = time.perf_counter()
    if opts.name == "fig2":
        summaries, headlines = experiments.fig2(setup, root, force=opts.force, exact=opts.exact,
                                                progress=sys.stderr.isatty(), beyond=not opts.paper_policies_only,
                                                two_d=opts.two_d)
        elapsed = time.perf_counter() - started
        if opts.format == "json":
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
    if opts.name == "packing":
        return _run_packing(setup, root, opts)
    if opts.name == "groups":
        from paradyse_lab.cli.grouped_command import run_groups_experiment

        return run_groups_experiment(opts)
    table = ablation_experiment.table5(setup, root, force=opts.force, progress=sys.stderr.isatty(),
                                       fine_lengths=opts.fine_lengths, paper_lengths=opts.paper_lengths)
    if opts.format == "json":
        print_json({"table5": table.to_dict(orient="records")})
        return 0
    fine = "max_len_fine_grid" in table.columns
    rows = [[t.variant + (f" [plan: {t.plan_cost_model}, profile source={t.profile_source}]" if t.profile_source
                          else ""), t.max_len if t.status == "ok" else t.status]
            + ([t.oom_at_seq_len if t.oom_at_seq_len == t.oom_at_seq_len else "-", t.max_len_fine_grid] if fine
               else [])
            + [t.paper_max_len, "-" if t.time_s != t.time_s or t.time_s is None else f"{t.time_s:.1f}",
               t.paper_time_s, _pct(t.saving), _pct(t.paper_saving)] for t in table.itertuples()]
    lengths = ["max len", "next tried (OOM)", "max len, fine grid"] if fine else ["max len"]
    print_table(["variant", *lengths, "paper", "time s", "paper", "saving", "paper"], rows)
    if opts.paper_lengths:
        print(f"\nlengths trained: the {setup.size} sampled sequences with the paper's Table 5 lengths added "
              f"({', '.join(f'{n:,}' for n in ablation_experiment.PAPER_LENGTHS)}); written to "
              f"{root / 'table5_paper_lengths.csv'}")
    if fine:
        print(f"\nmax len, fine grid: the longest multiple of {layout_unit(setup.cluster_spec().gpus)} tokens each "
              "variant's planner fits in a fresh process (every length tried); max len and the times: the run over "
              "its lengths in ascending order, which stops at its first OOM (next tried).")
    return 0


def _run_packing(setup, root: Path, opts) -> int:
    # lazy: pandas: slow to load, only this path needs it
    from paradyse_lab.app.reproduce_figures import PAPER_FIGURE_NOTE, draw_figure
    from paradyse_lab.simulator import packing_experiment  # lazy: pandas: slow to load, only this path needs it

    table = packing_experiment.packing(setup, root, force=opts.force, progress=sys.stderr.isatty())
    notes = {"analytic": None, "paper": PAPER_FIGURE_NOTE}  # None: the figure's own analytic-model note
    note = notes.get(setup.truth, f"simulated: charged by the {setup.truth} cost model, {setup.cluster}")
    with contextlib.redirect_stdout(sys.stderr if opts.format == "json" else sys.stdout):  # stdout: JSON only
        draw_figure("packing", root, root / "figures", "packing", note)
    if opts.format == "json":
        print_json({"packing": table.to_dict(orient="records")})
        return 0
    rows = [[t.dataset, t.model, t.pack_tokens or "1 seq/step", t.policy, t.steps,
             f"{t.documents_trained}/{t.documents}", "-" if t.time_per_token_us != t.time_per_token_us
             else f"{t.time_per_token_us:.2f}", t.max_doc_trained, t.strategy_mix] for t in table.itertuples()]
    print_table(["dataset", "model", "tokens/step", "policy", "steps", "documents", "us/token", "longest doc",
                 "strategies (share of layers x tokens)"], rows)
    print(f"\nwrote {root / 'packing.csv'} and {root / 'figures' / 'packing.png'}")
    return 0
