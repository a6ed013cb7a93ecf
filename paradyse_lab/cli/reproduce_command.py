"""`paradyse-lab reproduce [--quick] [--out DIR] [--force]`: every experiment, figure and REPORT.md.

Example: `paradyse-lab reproduce --quick --out results` (CI, under 3 minutes on 2 cores) writes
results/*.csv, results/figures/*.png|pdf and results/REPORT.md.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from paradyse_lab.cli.simulate_options import ReproduceOptions
from paradyse_lab.cluster.files import get_cluster
from paradyse_lab.options import add_dataclass_arguments, from_namespace


def register(sub) -> None:
    p = sub.add_parser(
        "reproduce", help="run every experiment, draw every figure, write REPORT.md",
        description="Figure 2's six panels, Table 5, the headline numbers (and their spread over 5 workload seeds), "
        "solver quality and solve-time "
        "scaling, the cost-model accuracy ablation, the layer-wise plan map and the memory breakdown: CSVs, "
        "figures (PNG and PDF) and REPORT.md (the paper's numbers beside ours). Finished "
        "steps and runs are reused unless --force; a run with other settings redoes every step.")
    add_dataclass_arguments(p, ReproduceOptions)
    p.set_defaults(func=run)


def run(args) -> int:
    from paradyse_lab.app.reproduce import reproduce  # lazy: pandas: slow to load, only this path needs it

    opts = from_namespace(ReproduceOptions, args)
    get_cluster(opts.cluster)
    started = time.perf_counter()
    timings = reproduce(Path(opts.out), quick=opts.quick, force=opts.force, progress=True, cluster=opts.cluster,
                        log=lambda msg: print(msg, file=sys.stderr), execute=opts.execute, sampling=opts.sampling)
    for name, secs in timings.items():
        print(f"{name:10s} {'reused' if not secs else f'{secs:.1f} s'}")
    print(f"\nwrote {opts.out}/REPORT.md, {opts.out}/*.csv and {opts.out}/figures/ in "
          f"{time.perf_counter() - started:.1f} s")
    return 0
