"""`paradyse-lab validate-run`: train each policy for real, simulate the same runs, compare step by step.

    paradyse-lab calibrate --out DIR          # first: DIR/cluster.toml and DIR/profile.csv of this machine
    paradyse-lab validate-run --out DIR       # then: the four static policies, dynamic:heuristic, dynamic:dp
    paradyse-lab validate-run --out DIR --cost-model analytic   # the analytic model on the measured cluster

Each policy trains a fresh model for `--steps` steps (on `--nproc` ranks: gloo on CPU, NCCL
on GPUs) over the same workload lengths (`--dataset`; default `--steps` lengths from max-len/16 to max-len,
geometric), planning with `--cost-model` on `--cluster`; every step's time is logged. The simulator then
replays each policy over the executed lengths with the same cost model, cluster and budget.
The defaults come from DIR: the model, world size and max-len
of its calibration, `--cluster DIR/cluster.toml` and `--profiles DIR/profile.csv` (learned cost models are
fitted on it), and `--cost-model calibrated` when DIR holds both (the analytic model with per-strategy
parameters fitted on DIR's profile; else `analytic`). The first `--skip-steps` steps of every run (start-up)
are left out of every number. `--repeats R` (default 3) runs every policy R times (round by round, so a slow
period of a shared machine hits every policy); a step's measured time is the median of its R runs, the
`runs min-max` column the smallest and largest of the R runs' totals, and `spread` (sum over steps of
max - min, over the total) how much the runs disagreed step by step.

Writes DIR/validate_run.csv (per step: measured and predicted seconds and cumulative sums, the executed and
the simulated plan), DIR/validate_run_summary.csv (per policy: totals, error of the predicted total,
per-step MAPE, ranks, the runs' min and max totals, spread) and DIR/figures/validate_run.png,
and prints the table:
per policy the error of the predicted total and the per-step MAPE, whether the measured and simulated
rankings agree (over all pairs, and over the pairs whose repeated runs' min-max totals do not overlap: only
those does the measurement order), and each dynamic policy's speed-up over the best static policy, measured
and simulated.
`--format json` prints {"policies": {NAME: {"measured_total_s", "measured_min_total_s", "measured_max_total_s",
"predicted_total_s", "step_mape", "spread", ...}},
"cost_model", "cluster", "ranking" (with "where_separated": {"pairs", "separated", "reversed", "agree"}),
"speedup_over_best_static"}.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from paradyse_lab.app.measure.calibrate_options import length_grid
from paradyse_lab.cli import collective_timeout, descriptions
from paradyse_lab.cli.output import add_format_argument, check_cost_model_name, cost_model_help, print_table
from paradyse_lab.cluster.files import MAX_GPUS_FLAG, get_cluster
from paradyse_lab.core.model_spec import get_model
from paradyse_lab.errors import MAX_REPEATS, UserInputError, require_positive_int
from paradyse_lab.files.atomic_write import read_json_object, write_text_atomic
from paradyse_lab.options import integer
from paradyse_lab.runtime.launch.ranks import default_nproc, launch, torchrun_rank
from paradyse_lab.workload.lengths import MAX_SIZE, get_workload

DEFAULT_STEPS = 10
DEFAULT_REPEATS = 3


def register(sub) -> None:
    p = sub.add_parser("validate-run", help="train each policy for real and compare with its simulation",
                       description=descriptions.VALIDATE_RUN, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="folder (a `paradyse-lab calibrate` output gives the defaults)")
    p.add_argument("--nproc", type=integer, default=0, help="ranks (default: the calibration's, else the machine's)")
    p.add_argument("--model", default="", help="GPT-2-shaped preset or config.json (default: the calibration's)")
    p.add_argument("--dataset", default="", help="workload (default: --steps lengths from max-len/16 to max-len, "
                   "geometric, written to DIR/validate_lengths.txt)")
    p.add_argument("--steps", type=integer, default=DEFAULT_STEPS, help=f"steps per policy (default {DEFAULT_STEPS})")
    p.add_argument("--max-len", type=integer, default=0, help="cap on the length (default: the calibration's)")
    p.add_argument("--cluster", default="", help="preset or .toml (default DIR/cluster.toml)")
    p.add_argument("--cost-model", default="", help=cost_model_help("cost model that plans and predicts")
                   + " (default calibrated when DIR holds cluster.toml and profile.csv, else analytic)")
    p.add_argument("--profiles", default="", help="profile CSV for learned cost models (default DIR/profile.csv)")
    p.add_argument("--policies", default="", help="comma-separated policies (default the four static:NAME, "
                   "dynamic:heuristic, dynamic:dp)")
    p.add_argument("--repeats", type=integer, default=DEFAULT_REPEATS, help="runs of every policy, interleaved; per "
                   f"step the median, and their spread (default {DEFAULT_REPEATS})")
    p.add_argument("--skip-steps", type=integer, default=1, help="start-up steps left out of every number (default 1)")
    p.add_argument("--seed", type=integer, default=0, help="weights, workload and token seed (default 0)")
    add_format_argument(p)
    collective_timeout.add_argument(p)
    p.set_defaults(func=run)


def _options(args):
    # lazy: pandas: slow to load, only this path needs it
    from paradyse_lab.app.validate_run import POLICIES, ValidateOptions

    out = output_folder(args.out)
    cal = {}
    if (out / "calibrate.json").is_file():
        cal = read_json_object(out / "calibrate.json").get("settings", {})
    nproc = args.nproc or cal.get("nproc") or _default_nproc()
    require_positive_int("--nproc", nproc, MAX_GPUS_FLAG)
    torchrun_rank(args.nproc or None)  # --nproc under torchrun, or torchrun's variables malformed
    collective_timeout.seconds(args)
    model = args.model or cal.get("model") or "gpt2-tiny"
    spec = get_model(model)
    max_len = args.max_len or cal.get("max_len") or spec.max_positions
    require_positive_int("--max-len", max_len, spec.max_positions)
    steps = require_positive_int("--steps", args.steps, MAX_SIZE)
    dataset = args.dataset or default_lengths_file(out, max_len, steps, nproc)
    if not 0 <= args.skip_steps < steps:
        raise UserInputError(f"--skip-steps must be in [0, --steps), got {args.skip_steps}")
    get_workload(dataset, size=steps, seed=args.seed)
    cluster = args.cluster or (str(out / "cluster.toml") if (out / "cluster.toml").is_file() else "")
    if cluster:
        get_cluster(cluster)
    profiles = args.profiles or (str(out / "profile.csv") if (out / "profile.csv").is_file() else "")
    cost_model = args.cost_model or default_cost_model(out)
    check_cost_model_name(cost_model)
    if cost_model != "analytic" and not cost_model.endswith(".joblib"):
        from paradyse_lab.costmodel.factory import build_cost_model, resolve_cost_model

        planned_on = get_cluster(cluster or "a100-80gb-x8")
        cost_model = resolve_cost_model(cost_model, planned_on)  # auto: what the report names
        build_cost_model(cost_model, spec, planned_on, nproc, profiles or None)
    policies = tuple(x.strip() for x in args.policies.split(",") if x.strip()) or POLICIES
    for pol in policies:
        kind, _, arg = pol.partition(":")
        if kind not in ("static", "dynamic") or not arg:
            raise UserInputError(f"--policies: {pol!r} is not static:NAME or dynamic:SOLVER")
    return ValidateOptions(out=str(out), nproc=nproc, model=model, dataset=dataset, steps=steps, max_len=max_len,
                           cluster=cluster, cost_model=cost_model, profiles=profiles, policies=policies,
                           seed=args.seed, repeats=require_positive_int("--repeats", args.repeats, MAX_REPEATS))


def default_cost_model(out: Path) -> str:
    """`replay` for a measured folder with kernel tables beside its cluster.toml (what `calibrate --out DIR`
    writes), `calibrated` for one with a profile.csv instead, else `auto` (replay where the cluster has bundled
    tables, else analytic)."""
    if (out / "cluster.toml").is_file() and (out / "kernels" / "gemm.csv").is_file():
        return "replay"
    return "calibrated" if (out / "cluster.toml").is_file() and (out / "profile.csv").is_file() else "auto"


def output_folder(path: str) -> Path:
    """`--out` as a folder that exists (made if needed), or a one-line error naming it."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise UserInputError(f"--out {path!r} is a file, not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserInputError(f"--out {path!r} cannot be made: {err.strerror}") from None
    return out


def default_lengths_file(out: Path, max_len: int, steps: int, nproc: int) -> str:
    """`file:DIR/validate_lengths.txt`: `steps` lengths from max-len/16 to max-len, geometric, multiples of 2p
    (the calibration's grid: the sampled workloads are multiples of 512, too coarse for a CPU run)."""
    path = out / "validate_lengths.txt"
    write_text_atomic(path, "".join(f"{s}\n" for s in length_grid(max_len, steps, 2 * nproc)))
    return f"file:{path}"


def _default_nproc() -> int:
    return default_nproc()


def run(args) -> int:
    from paradyse_lab.app.validate_run import execute_policies  # lazy: pandas: slow to load, only this path needs it

    opts = _options(args)
    Path(opts.out).mkdir(parents=True, exist_ok=True)
    launch(execute_policies, opts.nproc, opts, sys.stderr.isatty(), timeout_s=collective_timeout.seconds(args))
    result = finish(opts, args.skip_steps)
    if args.format == "json":
        print(json.dumps(result, indent=2))
    else:
        print_result(result)
    return 0


def finish(opts, skip_steps: int, formats: tuple[str, ...] | None = None) -> dict:
    """After the runs: pair every step with its replay, write the CSVs and the figure (in `formats`; None: the
    figures' own, PNG and PDF), return the result."""
    import pandas as pd  # lazy: pandas: slow to load, only this path needs it

    from paradyse_lab.app.validate_run import pair, run_totals  # lazy: pandas: slow to load, only this path needs it

    # lazy: pandas: slow to load, only this path needs it
    from paradyse_lab.simulator.replay import agreement_where_separated, compare
    from paradyse_lab.simulator.results import write_csv_atomic  # lazy: pandas: slow to load, only this path needs it

    steps = pair(opts.out, skip_steps)
    out = Path(opts.out)
    write_csv_atomic(steps, out / "validate_run.csv")
    statics = [p for p in opts.policies if p.startswith("static:")]
    result = compare(steps, statics, [p for p in opts.policies if p not in statics])
    totals = run_totals(opts.out, skip_steps)  # the repeated runs' totals
    for name, (low, high) in totals.items():
        if name in result["policies"]:
            result["policies"][name].update(measured_min_total_s=low, measured_max_total_s=high)
    result["ranking"]["where_separated"] = agreement_where_separated(result, totals)
    result.update(cost_model=opts.cost_model, cluster=opts.cluster or "a100-80gb-x8 (default preset)",
                  nproc=opts.nproc, model=opts.model, dataset=opts.dataset, steps=opts.steps, skip_steps=skip_steps,
                  repeats=opts.repeats,
                  out=str(out))
    summary = pd.DataFrame([{"policy": k, **v} for k, v in result["policies"].items()])
    write_csv_atomic(summary, out / "validate_run_summary.csv")
    _figure(out, formats)
    return result


def print_result(result: dict) -> None:
    """The table of `validate-run`."""
    print(f"{result['model']} on {result['nproc']} ranks, {result['dataset']}, {result['steps']} steps per policy "
          f"(first {result['skip_steps']} left out), {result['repeats']} run(s) each, per step the median; cost "
          f"model {result['cost_model']}, cluster {result['cluster']}")
    rows = [[n, f"{m['measured_total_s']:.3f}", f"{m['measured_min_total_s']:.3f}-{m['measured_max_total_s']:.3f}",
             f"{m['spread']:.1%}"]
            + (["OOM in simulation", "-", "-", "-", "-"] if m.get("simulated_oom") else
               [f"{m['predicted_total_s']:.3f}", f"{m['total_error']:+.1%}", f"{m['step_mape']:.1%}",
                m["measured_rank"], m["predicted_rank"]])
            + ["yes" if m["plans_match"] else "no"] for n, m in result["policies"].items()]
    print_table(["policy", "measured s", "runs min-max s", "spread", "predicted s", "total error", "step MAPE",
                 "rank meas", "rank pred", "same plans"], rows)
    r = result["ranking"]
    swapped = "; ".join(f"{a} / {b}" for a, b in r["reversed_pairs"])
    print(f"rankings agree: {'yes' if r['agree'] else 'no, reversed: ' + swapped} (Kendall tau {r['kendall_tau']})")
    sep = r["where_separated"]
    flipped = "; ".join(f"{a} / {b}" for a, b in sep["reversed"])
    print(f"on the {sep['separated']} of {sep['pairs']} pairs the runs separate (min-max totals apart): "
          f"{'agree' if sep['agree'] else 'reversed: ' + flipped}")
    for d, sp in result["speedup_over_best_static"].items():
        print(f"{d}: speed-up over the best static policy measured {sp['measured']:.3f}x "
              f"({sp['best_static_measured']}), simulated {sp['simulated']:.3f}x ({sp['best_static_simulated']})")
    out = Path(result["out"])
    print(f"wrote {out / 'validate_run.csv'}, {out / 'validate_run_summary.csv'}, {out / 'figures'}/validate_run.png")


def _figure(out: Path, formats: tuple[str, ...] | None) -> None:
    from paradyse_lab.figures import validate_run  # lazy: matplotlib: slow to load, only the figures need it

    # lazy: matplotlib: slow to load, only the figures need it
    from paradyse_lab.figures._common import FORMATS, MissingCSV

    formats = FORMATS if formats is None else formats
    try:
        path = validate_run.render(out, out / "figures", formats=formats)
    except MissingCSV as err:
        raise UserInputError(f"figures/validate_run.py: {err}") from None
    print(f"wrote {path}.{' and .'.join(formats)}", file=sys.stderr)  # stdout carries the table or the JSON only
