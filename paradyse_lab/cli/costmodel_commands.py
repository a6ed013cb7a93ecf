"""`costmodel synth-profile`, `costmodel paper-profile`, `costmodel fit`, `costmodel fit-calibration`: profiles and
cost models from them (`costmodel ablate` compares the cost models on a profile).

Examples:
    paradyse-lab costmodel synth-profile --out paradyse_lab/data/profiles/analytic_a100-80gb-x8.csv
    paradyse-lab costmodel paper-profile --out paradyse_lab/data/profiles/paper_a100-80gb-x8.csv
    paradyse-lab costmodel fit --kind hybrid --out hybrid.joblib   # then --plan-cost-model hybrid.joblib
    paradyse-lab costmodel fit-calibration --profiles paradyse_lab/data/profiles/paper_a100-80gb-x8.csv \
        --out paradyse_lab/data/clusters/a100-80gb-x8-paper.toml    # then --cluster a100-80gb-x8-paper
"""

from __future__ import annotations

from pathlib import Path

from paradyse_lab.cli.output import add_format_argument, add_reserve_argument, print_json, print_table, reserve_bytes
from paradyse_lab.cluster.files import MAX_GPUS_FLAG, get_cluster
from paradyse_lab.cluster.presets import DEFAULT_CLUSTER
from paradyse_lab.cluster.spec import CALIBRATION_PARAMETERS
from paradyse_lab.costmodel.factory import calibration_profile, check_profile_device
from paradyse_lab.costmodel.names import LEARNED_KINDS
from paradyse_lab.errors import UserInputError, require_positive_int, require_seed, unknown_name
from paradyse_lab.files.atomic_write import write_text_atomic
from paradyse_lab.options import integer, number


def register(sub) -> None:
    p = sub.add_parser(
        "synth-profile", help="write a synthetic profile: the analytic model with seeded noise (source=analytic)",
        description="Stand-in for GPU measurements: whole-model time and memory of each model and strategy over "
        "a geometric grid of lengths (up to each strategy's OOM), from the analytic model, times lognormal "
        "noise. Rows say source=analytic.")
    p.add_argument("--out", required=True, help="CSV to write")
    p.add_argument("--cluster", default=DEFAULT_CLUSTER, help=f"preset or .toml (default {DEFAULT_CLUSTER})")
    p.add_argument("--models", default="bert,llama,gpt,llama3-8b", help="comma-separated models")
    p.add_argument("--gpus", "--p", dest="p", type=integer, default=None, metavar="N",
                   help="GPUs (default: the cluster's)")
    p.add_argument("--seed", type=integer, default=0, help="noise seed (default 0)")
    p.add_argument("--time-noise", type=number, default=0.02, help="sigma of log time noise (default 0.02)")
    p.add_argument("--mem-noise", type=number, default=0.005, help="sigma of log memory noise (default 0.005)")
    p.add_argument("--ratio", type=number, default=1.02,
                   help="ratio between consecutive lengths, each rounded to a multiple of 512 (default 1.02)")
    p.add_argument("--max-len", type=integer, default=1 << 20, help="longest length profiled (default 1048576)")
    add_reserve_argument(p)
    p.add_argument("--recompute", action="store_true", help="also profile each strategy with recomputation")
    p.add_argument("--timestamp", default=None, help="timestamp written in every row (default now, UTC)")
    p.set_defaults(func=run_synth, out_file=True)

    p = sub.add_parser(
        "fit-costmodel", help="fit a learned cost model on a profile and save it (joblib)",
        description="Fit one learned cost model (hybrid, forest, polynomial or residual) on a profile and "
        "save it; --plan-cost-model / --truth-cost-model accept the .joblib file. joblib files are pickles: "
        "load only files you trust.")
    p.add_argument("--kind", required=True, help="hybrid, forest, polynomial or residual")
    p.add_argument("--profiles", default="", help="profile CSV (default: the cluster's bundled profile)")
    p.add_argument("--cluster", default=DEFAULT_CLUSTER, help=f"preset or .toml (default {DEFAULT_CLUSTER})")
    p.add_argument("--out", required=True, help=".joblib file to write")
    p.set_defaults(func=run_fit, out_file=True)

    p = sub.add_parser(
        "paper-profile", help="write the paper profile: the authors' measured A100 times (source=paper)",
        description="Profile rows of the four shapes the ParaDySe authors measured (bert, llama, gpt, paper-7b "
        "on 8x A100-80GB), each strategy over a geometric grid of lengths up to where it runs out of memory: "
        "time from the authors' quadratic fits, memory from the analytic model (modelled). Rows say "
        "source=paper and name the fits' repository, file and commit.")
    p.add_argument("--out", required=True, help="CSV to write")
    p.add_argument("--ratio", type=number, default=1.05,
                   help="ratio between consecutive lengths, each rounded to a multiple of 512 (default 1.05)")
    p.add_argument("--max-len", type=integer, default=1 << 20, help="longest length (default 1048576)")
    add_reserve_argument(p)
    p.set_defaults(func=run_paper_profile, out_file=True)

    p = sub.add_parser(
        "fit-calibration", help="calibrate the analytic model on a profile's times; write a cluster file",
        description="Fit four physical parameters per strategy (compute scale, communication scale, fixed "
        "seconds per layer, fixed seconds per layer and unit of width) by non-negative least squares on "
        "relative error, and write a cluster TOML that every "
        "command takes with --cluster: the base cluster plus [calibration.STRATEGY] tables.")
    p.add_argument("--profiles", default="", help="profile CSV (default: the cluster's bundled measured profile; "
                   "on the paper's node, the authors' measurements)")
    p.add_argument("--cluster", default=DEFAULT_CLUSTER, help=f"base cluster preset (default {DEFAULT_CLUSTER})")
    p.add_argument("--out", required=True, help=".toml file to write")
    add_format_argument(p)
    p.set_defaults(func=run_fit_calibration, out_file=True)


def profile_path(args) -> Path:
    """The profile CSV of `--profiles`, else the bundled profile of `--cluster`'s device."""
    from paradyse_lab.costmodel.profiles import default_profile  # lazy: pandas: slow to load, only this path needs it

    return Path(args.profiles) if args.profiles else default_profile(get_cluster(args.cluster).device)


def run_synth(args) -> int:
    from paradyse_lab.costmodel.profiles import write_profiles  # lazy: pandas: slow to load, only this path needs it

    # lazy: pandas: slow to load, only this path needs it
    from paradyse_lab.costmodel.synthetic import synthesize_profiles

    cluster = get_cluster(args.cluster)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    if not models:
        raise UserInputError("--models names no model")
    for name, value in (("--time-noise", args.time_noise), ("--mem-noise", args.mem_noise)):
        if not 0 <= value < 1:
            raise UserInputError(f"{name} must be in [0, 1), got {value}")
    if not 1 < args.ratio < float("inf"):
        raise UserInputError(f"--ratio must be a finite number > 1, got {args.ratio}")
    max_len = require_positive_int("--max-len", args.max_len)
    require_seed("--seed", args.seed)
    if args.p is not None:
        require_positive_int("--gpus", args.p, MAX_GPUS_FLAG)
    df = synthesize_profiles(cluster, models, args.p, seed=args.seed, time_noise=args.time_noise,
                             mem_noise=args.mem_noise, ratio=args.ratio, max_len=max_len,
                             reserve_bytes=reserve_bytes(args, 2**30), recompute=args.recompute,
                             timestamp=args.timestamp)
    if df.empty:
        raise UserInputError("no row: no strategy fits the shortest length on this cluster")
    path = write_profiles(df, args.out)
    curves = df.groupby(["model", "strategy", "recompute"]).size()
    print(f"wrote {path}: {len(df)} rows, {len(curves)} curves, {path.stat().st_size / 1e3:.0f} kB, source=analytic "
          f"(synthetic: analytic model x lognormal noise, seed {args.seed})")
    return 0


def run_fit(args) -> int:
    from paradyse_lab.costmodel.learned_fit import fit_profiles  # lazy: pandas: slow to load, only this path needs it
    from paradyse_lab.costmodel.profiles import read_profiles  # lazy: pandas: slow to load, only this path needs it

    if args.kind not in LEARNED_KINDS:
        raise unknown_name("--kind", args.kind, LEARNED_KINDS)
    path = profile_path(args)
    fitted = fit_profiles(args.kind, read_profiles(path), get_cluster(args.cluster), source_name=str(path))
    out = fitted.save(args.out)
    print(f"wrote {out}: {fitted.label}, fitted on {fitted.n_rows} rows of {path}")
    return 0


def run_paper_profile(args) -> int:
    # lazy: pandas: slow to load, only this path needs it
    from paradyse_lab.costmodel.paper_profile import paper_profile
    from paradyse_lab.costmodel.profiles import write_profiles  # lazy: pandas: slow to load, only this path needs it

    if not 1 < args.ratio < float("inf"):
        raise UserInputError(f"--ratio must be a finite number > 1, got {args.ratio}")
    max_len = require_positive_int("--max-len", args.max_len)
    df = paper_profile(args.ratio, max_len, reserve_bytes(args, 2**30))
    if df.empty:
        raise UserInputError("no row: --max-len is below the shortest length (512)")
    path = write_profiles(df, args.out)
    curves = df.groupby(["model", "strategy"]).size()
    print(f"wrote {path}: {len(df)} rows, {len(curves)} curves, source=paper (times: the authors' measured fits; "
          "memory: analytic model)")
    return 0


def run_fit_calibration(args) -> int:
    # lazy: pandas: slow to load, only this path needs it
    from paradyse_lab.costmodel.calibration import calibration_toml, fit_calibration

    # lazy: pandas: slow to load, only this path needs it
    from paradyse_lab.costmodel.profiles import profile_sources, read_profiles

    base = get_cluster(args.cluster)
    if base.calibration:
        raise UserInputError(f"--cluster {args.cluster} is already calibrated; give its base preset")
    if not args.out.endswith(".toml"):
        raise UserInputError(f"--out must name a .toml file, got {args.out!r}")
    path = Path(args.profiles) if args.profiles else calibration_profile(base.device)
    df = read_profiles(path)
    check_profile_device(df, base, path)
    calibration = fit_calibration(df, base)
    source = f"{base.name} calibrated on {path.name} (source={profile_sources(df)}) by paradyse-lab fit-calibration"
    write_text_atomic(Path(args.out), calibration_toml(base, calibration, base.name, source))
    if args.format == "json":
        print_json({"out": args.out, "base": base.name, "profile": str(path),
                    "calibration": {s: {k: getattr(c, k) for k in CALIBRATION_PARAMETERS}
                                    for s, c in calibration.items()}})
        return 0
    print(f"wrote {args.out}: {source}")
    print_table(["strategy"] + list(CALIBRATION_PARAMETERS),
                [[s] + [f"{getattr(c, k):.4g}" for k in CALIBRATION_PARAMETERS] for s, c in calibration.items()])
    return 0
