"""`paradyse-lab solvers bench`: solve times and gaps to the optimum of every solver; writes a CSV.

Example: `paradyse-lab solvers bench` (table, results/solver_bench.csv) or `... --format json`.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

from tqdm import tqdm

from paradyse_lab.cli.cost_command import parse_int
from paradyse_lab.cli.output import add_format_argument, print_json, print_table
from paradyse_lab.errors import MAX_SEED, UserInputError
from paradyse_lab.files.atomic_write import atomic_open
from paradyse_lab.solvers import bench
from paradyse_lab.solvers.registry import get_solver

DEFAULT_OUT = "results/solver_bench.csv"


def register(sub) -> None:
    p = sub.add_parser(
        "bench-solvers", help="benchmark the solvers (time, gap to the optimum)",
        description="For L in --sizes and O in --options, over random and model-derived problems, each "
        "solver's median solve time and its gap to the exact optimum (the DP's). Writes a CSV.",
    )
    p.add_argument("--sizes", default="8,24,96,192", help="numbers of decisions L (default 8,24,96,192)")
    p.add_argument("--options", default="4,8", help="numbers of options O (default 4,8)")
    p.add_argument("--kinds", default="random,random+switch,model,model-sublayer,groups",
                   help="problem kinds (default random,random+switch,model,model-sublayer,groups; groups: the "
                   "group planners of a global batch, exact against greedy on 4-8 sequences over 8 GPUs (steps as "
                   "rounds of splits: 4-6) and the time to plan 64 sequences on 16 nodes)")
    p.add_argument("--solvers", default="heuristic,greedy,dp,ilp,brute_force", help="solvers to run")
    p.add_argument("--instances", default="2", help="problems per (kind, L, O) (default 2)")
    p.add_argument("--repeats", default="3", help="timed runs per problem of the fast solvers (default 3)")
    p.add_argument("--ilp-time-limit", default="2",
                   help="CP-SAT deterministic seconds per ILP solve, on one worker: the same answers on a busy machine "
                        "(default 2)")
    p.add_argument("--seed", default="0", help="random seed (default 0)")
    p.add_argument("--out", default=DEFAULT_OUT, help=f"CSV to write (default {DEFAULT_OUT})")
    add_format_argument(p)
    p.set_defaults(func=run, out_file=True)


def _ints(field: str, text: str) -> list[int]:
    values = [parse_int(field, t) for t in text.split(",") if t.strip()]
    if not values:
        raise UserInputError(f"{field} needs at least one value")
    return values


def write_csv(rows: list[dict], path: str | Path, columns) -> None:
    """Write rows atomically (`paradyse_lab.files.atomic_write`)."""
    with atomic_open(path) as f:
        writer = csv.DictWriter(f, fieldnames=list(columns))
        writer.writeheader()
        writer.writerows(rows)


def run(args) -> int:
    sizes, options = _ints("--sizes", args.sizes), _ints("--options", args.options)
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    groups = "groups" in kinds
    kinds = [k for k in kinds if k != "groups"]
    for k in kinds:
        if k not in bench.KINDS:
            raise UserInputError(f"unknown kind {k!r}; valid: {', '.join(bench.KINDS + ('groups',))}")
    solvers = [s.strip() for s in args.solvers.split(",") if s.strip()]
    for s in solvers:
        get_solver(s)  # unknown names fail before any work
    instances, repeats = parse_int("--instances", args.instances), parse_int("--repeats", args.repeats)
    try:
        limit = float(args.ilp_time_limit)
    except ValueError:
        limit = -1.0
    if not 0 < limit < float("inf"):
        raise UserInputError(f"--ilp-time-limit must be a positive number of seconds, got {args.ilp_time_limit!r}")
    text = args.seed.strip()
    if not (text.isdigit() and text.isascii()) or len(text) > 19 or int(text) > MAX_SEED:  # '²' int() refuses
        raise UserInputError(f"--seed must be an integer from 0 to 2**63 - 1, got {args.seed!r}")
    seed = int(text)
    total = len(kinds) * len(sizes) * len(options) * instances * len(solvers)
    with tqdm(total=total, desc="bench-solvers", unit="solve", file=sys.stderr) as bar:
        rows = bench.run(sizes, options, kinds, instances, repeats, solvers, limit, seed, progress=bar.update)
    if groups:
        from paradyse_lab.simulator.group_bench import run as bench_groups

        rows += bench_groups(instances, seed)
    write_csv(rows, args.out, bench.CSV_COLUMNS)
    if args.format == "json":
        print_json({"csv": str(args.out), "rows": rows})
        return 0
    print_table(list(bench.CSV_COLUMNS), [["-" if r[c] is None else r[c] for c in bench.CSV_COLUMNS] for r in rows])
    print(f"\nwrote {args.out}; gaps are to the DP's exact optimum; times per solve")
    return 0
