"""`paradyse-lab reproduce [--quick] [--out DIR] [--force]`: every experiment, figure and REPORT.md.

Example: `paradyse-lab reproduce --quick --out results` (CI, under 3 minutes on 2 cores) writes
results/*.csv, results/figures/*.png|pdf and results/REPORT.md; see paradyse_lab/app/reproduce.py for the steps.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from paradyse_lab.cli.output import add_sampling_argument
from paradyse_lab.cluster_spec import DEFAULT_CLUSTER, get_cluster


def register(sub) -> None:
    p = sub.add_parser(
        "reproduce", help="run every experiment, draw every figure, write REPORT.md",
        description="Figure 2's six panels, Table 5, the headline numbers (and their spread over 5 workload seeds), "
        "solver quality and solve-time "
        "scaling, the cost-model accuracy ablation, the layer-wise plan map and the memory breakdown: CSVs, "
        "figures (PNG and PDF, from figures/*.py) and REPORT.md (the paper's numbers beside ours). Finished "
        "steps and runs are reused unless --force; a run with other settings redoes every step.")
    p.add_argument("--quick", action="store_true",
                   help="smaller workloads and benchmark (60 sequences per dataset, seed 0 only; CI: under 3 minutes)")
    p.add_argument("--out", default="results", help="results folder (default results/)")
    p.add_argument("--force", action="store_true", help="rerun every step instead of reusing finished CSVs")
    p.add_argument("--cluster", default=DEFAULT_CLUSTER, help=f"node preset or .toml (default {DEFAULT_CLUSTER})")
    add_sampling_argument(p)
    p.add_argument("--execute", action="store_true", help="also measure this machine and train each policy for "
                   "real (paradyse-lab calibrate + validate-run into OUT/execute/; ~10 minutes on 2 CPU cores)")
    p.set_defaults(func=run)


def run(args) -> int:
    from paradyse_lab.app.reproduce import reproduce

    get_cluster(args.cluster)
    started = time.perf_counter()
    timings = reproduce(Path(args.out), quick=args.quick, force=args.force, progress=True, cluster=args.cluster,
                        log=lambda msg: print(msg, file=sys.stderr), execute=args.execute,
                        sampling=args.sampling)
    for name, secs in timings.items():
        print(f"{name:10s} {'reused' if not secs else f'{secs:.1f} s'}")
    print(f"\nwrote {args.out}/REPORT.md, {args.out}/*.csv and {args.out}/figures/ in "
          f"{time.perf_counter() - started:.1f} s")
    return 0
