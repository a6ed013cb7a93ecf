"""The `paradyse-lab calibrate` command: options, the launch of the ranks and the printed summary.

What it measures and writes is the application's `calibrate(opts, group)` (on every rank); this
module is the command line around it: `paradyse-lab calibrate --out DIR` (under torchrun: `torchrun --standalone
--nproc-per-node 8 -m paradyse_lab calibrate --out DIR`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

from paradyse_lab.app.measure.calibrate import SETTINGS_FILE, calibrate
from paradyse_lab.app.measure.calibrate_options import CalibrateOptions, length_grid, machine_defaults
from paradyse_lab.cli import collective_timeout, descriptions
from paradyse_lab.cli.validate_run_command import output_folder
from paradyse_lab.cluster.files import MAX_GPUS_FLAG, load_cluster_toml
from paradyse_lab.core.model_spec import get_model
from paradyse_lab.core.strategies import USABLE, get_strategy, layout_unit
from paradyse_lab.errors import MAX_REPEATS, UserInputError, require_positive_int
from paradyse_lab.files.atomic_write import read_json_object
from paradyse_lab.options import integer, number
from paradyse_lab.runtime.launch.ranks import launch, torchrun_rank

MAX_LENGTHS = 1024
"""Most profile lengths (`--lengths`) a calibration measures."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="folder for cluster.toml, profile.csv and the raw CSVs")
    parser.add_argument("--nproc", type=integer, default=0, help="ranks (default: the GPUs, else 2 CPU processes)")
    parser.add_argument("--model", default="", help="GPT-2-shaped preset or config.json (default: gpt2-cpu on "
                        "CPU, gpt2 on GPUs)")
    parser.add_argument("--max-len", type=integer, default=0, help="longest profiled length (default 1024)")
    parser.add_argument("--budget-s", type=number, default=0.0,
                        help="time budget in seconds (default 360 CPU, 540 GPU)")
    parser.add_argument("--lengths", type=integer, default=9, help="profile lengths, max-len/16 .. max-len (default 9)")
    parser.add_argument("--repeats", type=integer, default=3, help="timed repeats per point, median (default 3; "
                        "collectives at least 5)")
    parser.add_argument("--warmup", type=integer, default=0, help="untimed profile steps per point besides the "
                        "kept-bytes forward (default 0)")
    parser.add_argument("--no-recompute", action="store_true", help="profile without the +recompute options")
    parser.add_argument("--force", action="store_true", help="start over instead of resuming DIR")
    parser.add_argument("--format", choices=("table", "json"), default="table", help="output format")
    collective_timeout.add_argument(parser)


def options_from_args(args):
    """Validated `paradyse_lab.app.measure.calibrate_options.CalibrateOptions` (`UserInputError` names the
    field); machine defaults where a flag is absent."""
    # lazy: torch takes seconds to load; only this path runs it
    from paradyse_lab.runtime.comm.nodes import node_of_this_rank

    d = machine_defaults()
    launched = torchrun_rank(args.nproc or None)  # refuses --nproc under torchrun, or its variables malformed
    collective_timeout.seconds(args)
    nproc = launched[1] if launched else args.nproc or d["nproc"]  # under torchrun: its WORLD_SIZE
    require_positive_int("--nproc", nproc, MAX_GPUS_FLAG)
    per_node = node_of_this_rank()[1] if launched else 0
    nodes = nproc // per_node if per_node and nproc % per_node == 0 else 1
    model = args.model or d["model"]
    spec = get_model(model)
    if not spec.embedding_and_head or spec.ffn_kind != "gelu" or spec.kv_heads != spec.heads:
        raise UserInputError(f"--model {model!r}: the runtime runs GPT-2-shaped models with an embedding and head")
    max_len = args.max_len or min(d["max_len"], spec.max_positions)
    require_positive_int("--max-len", max_len)
    if max_len > spec.max_positions:
        raise UserInputError(f"--max-len {max_len} is beyond the model's {spec.max_positions} positions")
    budget = args.budget_s or d["budget_s"]
    if not (math.isfinite(budget) and budget > 0):
        raise UserInputError(f"--budget-s must be a positive number of seconds, got {args.budget_s}")
    require_positive_int("--lengths", args.lengths, MAX_LENGTHS)
    require_positive_int("--repeats", args.repeats, MAX_REPEATS)
    if not 0 <= args.warmup <= MAX_REPEATS:
        raise UserInputError(f"--warmup must be an integer in [0, {MAX_REPEATS:,}], got {args.warmup}")
    unit = layout_unit(nproc)
    if max_len < unit:
        raise UserInputError(f"--max-len {max_len} is below the layout unit 2p = {unit}")
    for s in length_grid(max_len, args.lengths, unit):
        for name in USABLE:
            why = get_strategy(name).violation(spec, nproc, s)
            if why:
                raise UserInputError(f"--model {model!r} at --nproc {nproc}, length {s}: {why}")

    return CalibrateOptions(out=args.out, nproc=nproc, model=model, max_len=max_len, budget_s=float(budget),
                            lengths=args.lengths, repeats=args.repeats, warmup=args.warmup,
                            recompute=not args.no_recompute, nodes=nodes)


def _rank_main(opts, progress: bool, group=None) -> None:
    calibrate(opts, group, progress)


def run(args) -> int:
    """The `calibrate` command."""
    opts = options_from_args(args)
    out = output_folder(opts.out)
    if args.force:
        for name in ("collectives.csv", "inter_node.csv", "gemm.csv", "attention.csv", "cluster.toml", "profile.csv",
                     SETTINGS_FILE):
            (out / name).unlink(missing_ok=True)
    state_path = out / SETTINGS_FILE
    if state_path.is_file():
        old = read_json_object(state_path).get("settings")
        if old != opts.settings():
            raise UserInputError(f"{opts.out} holds a calibration with other settings ({old}); use another --out "
                                 "or --force")
    started = time.perf_counter()
    launch(_rank_main, opts.nproc, opts, sys.stderr.isatty() or os.environ.get("PARADYSE_PROGRESS") == "1",
           timeout_s=collective_timeout.seconds(args))
    if "RANK" in os.environ and os.environ["RANK"] != "0":
        return 0
    state = read_json_object(state_path)
    summary = summarize(out, state) | {"run_wall_s": time.perf_counter() - started}
    summary["poor_fits"] = poor_fits(summary)
    if args.format == "json":
        print(json.dumps(summary, indent=1))
    else:
        print_summary(summary)
    return 0


def summarize(out: Path, state: dict) -> dict:
    """What the command prints: the cluster file's fitted numbers and the profile's extent."""
    import pandas as pd  # lazy: pandas: slow to load, only this path needs it

    cl = load_cluster_toml(out / "cluster.toml")
    prof = pd.read_csv(out / "profile.csv") if (out / "profile.csv").is_file() else pd.DataFrame()
    return {
        "cluster": str(out / "cluster.toml"), "profile": str(out / "profile.csv"), "ranks": cl.gpus,
        "device": cl.gpu_name, "peak_tflops": cl.peak_flops / 1e12, "elementwise_gbps": cl.hbm_bytes_per_s / 1e9,
        "memory_gib": cl.memory_bytes / 2**30,
        "collectives": {op: {"alpha_us": f["alpha_s"] * 1e6, "busbw_gbps": f["busbw_bytes_per_s"] / 1e9,
                             "fit_mape": f["mape"], "sizes": f["points"]} for op, f in state.get("fits", {}).items()},
        "gemm_efficiency": [list(x) for x in cl.gemm_efficiency],
        "attention_efficiency_causal": [list(x) for x in cl.attention_efficiency_causal],
        "profile_rows": len(prof), "profile_lengths": sorted(set(prof["seq_len"])) if len(prof) else [],
        "skipped": state.get("skipped", []), "wall_s": state.get("wall_s"),
    }


POOR_FIT = 0.20
"""Fit error (mean absolute percentage error of a collective's alpha-beta line over its sizes) above which
`calibrate` warns: a line that misses its own measurements by more than a fifth (a busy machine's timings, or a
link the line does not describe) prices the plans' communication no better than a guess."""


def poor_fits(s: dict) -> dict[str, float]:
    """Collective -> fit error of the fits worse than `POOR_FIT`."""
    return {op: f["fit_mape"] for op, f in s["collectives"].items() if f["fit_mape"] > POOR_FIT}


def print_summary(s: dict) -> None:
    print(f"{s['device']}, {s['ranks']} ranks: peak {s['peak_tflops'] * 1e3:.1f} GFLOP/s (fastest kernel), "
          f"element-wise {s['elementwise_gbps']:.1f} GB/s, memory {s['memory_gib']:.1f} GiB per rank")
    for op, f in s["collectives"].items():
        print(f"  {op:<15} alpha {f['alpha_us']:9.1f} us  busbw {f['busbw_gbps']:7.3f} GB/s  "
              f"(fit error {f['fit_mape']:.1%} over {f['sizes']} sizes)")
    gem = ", ".join(f"{int(x)}: {y:.2f}" for x, y in s["gemm_efficiency"])
    print(f"  GEMM efficiency by smallest dim: {gem}")
    att = ", ".join(f"{int(x)}: {y:.2f}" for x, y in s["attention_efficiency_causal"])
    print(f"  causal attention efficiency by length: {att}")
    print(f"profile: {s['profile_rows']} rows, lengths {s['profile_lengths']}; "
          f"{len(s['skipped'])} points skipped for the budget")
    spent = f"measured in {s['wall_s']:.0f} s" if s.get("wall_s") is not None else "measurements reused"
    print(f"wrote {s['cluster']} and {s['profile']} in {s['run_wall_s']:.0f} s of wall time ({spent} in all, "
          "over this and any earlier run into this folder)")
    for op, err in s["poor_fits"].items():
        print(f"warning: the {op} fit is poor: its error is {err:.1%}, above {POOR_FIT:.0%} (a busy machine's "
              "timings?): rerun calibrate --force on an idle machine before planning with this cluster",
              file=sys.stderr)


def register(subparsers) -> None:
    """Add the `calibrate` sub-command (imports no torch until it runs)."""
    parser = subparsers.add_parser("calibrate", help="measure this machine: cluster.toml and a measured profile",
                                   description=descriptions.CALIBRATE,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    parser.set_defaults(func=run)
