"""Printing results: aligned text tables for people, JSON for scripts."""

from __future__ import annotations

import json
import sys

from paradyse_lab.cluster.files import cluster_with_gpus, get_cluster
from paradyse_lab.cluster.presets import DEFAULT_CLUSTER
from paradyse_lab.costmodel.names import COST_MODEL_NAMES
from paradyse_lab.errors import UserInputError, require_number, unknown_name
from paradyse_lab.options import integer, number
from paradyse_lab.units import GIB, gib_to_bytes
from paradyse_lab.workload.lengths import SAMPLINGS

FORMATS = ("table", "json")


def add_format_argument(parser) -> None:
    """Add `--format table|json` to a sub-command."""
    parser.add_argument("--format", choices=FORMATS, default="table",
                        help="table for people (default), json for scripts")


def add_packing_arguments(parser) -> None:
    """Add `--pack-tokens N` and `--pack-order sorted|shuffled`."""
    parser.add_argument("--pack-tokens", type=integer, default=None, metavar="N",
                        help="pack the documents into steps of at most N tokens (greedy first-fit; attention stays "
                        "inside each document; a document longer than N is a step alone); default: one sequence "
                        "per step")
    parser.add_argument("--pack-order", default="sorted",
                        help="with --pack-tokens: sorted (default; first-fit decreasing, the tightest, steps "
                        "ordered short to long as the paper trains) or shuffled (first-fit in a seeded random "
                        "order, as a streaming data loader sees the documents)")


def add_sampling_argument(parser) -> None:
    """Add `--sampling stratified|multinomial`: how the paper datasets' band counts are chosen
    (`SAMPLINGS`)."""
    parser.add_argument("--sampling", default=SAMPLINGS[0],
                        help="github_code / grch38: stratified (default; each Table 3 band holds its share of the "
                        "sequences, rounded by largest remainder) or multinomial (each sequence's band drawn at "
                        "random by its share)")


def add_reserve_argument(parser) -> None:
    """Add `--reserve-gib` (also spelled `--reserve-gb`, always GiB): memory kept back from each GPU for the CUDA
    context, NCCL buffers and the allocator."""
    parser.add_argument("--reserve-gib", "--reserve-gb", dest="reserve_gb", type=number, default=None,
                        help="memory kept back from each GPU for the CUDA context, NCCL buffers and the allocator, "
                        "in GiB (default: the cluster's reserve_gib)")


BUDGET_GB_DEPRECATED = ("--budget-gb is deprecated: it is read in GB (10^9 bytes) while every output is in GiB "
                        "(2^30 bytes); give --budget-gib")
"""The warning `--budget-gb` prints: the flag still works, converted from GB, so old scripts plan as before."""


def add_budget_arguments(parser) -> None:
    """Add `--budget-gib` (memory a plan must fit per GPU, GiB like every output) and its deprecated GB form."""
    parser.add_argument("--budget-gib", help="memory budget per GPU in GiB (2^30 bytes; default: the GPU's memory)")
    parser.add_argument("--budget-gb", help="deprecated: the budget in GB (10^9 bytes); use --budget-gib")


def budget_bytes(args) -> int | None:
    """The plan's budget in bytes from `--budget-gib` (or the deprecated `--budget-gb`, converted from GB with a
    warning on stderr); None when neither is given. One-line `UserInputError` for a bad number or both flags."""
    gib, gb = getattr(args, "budget_gib", None), getattr(args, "budget_gb", None)
    if gib is not None and gb is not None:
        raise UserInputError("give --budget-gib or the deprecated --budget-gb, not both")
    if gib is None and gb is None:
        return None
    flag, text, unit = ("--budget-gib", gib, GIB) if gib is not None else ("--budget-gb", gb, 10**9)
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value <= 1e9:
        raise UserInputError(f"{flag} must be a positive number up to 1e9, got {text!r}")
    if gb is not None:
        print(f"warning: {BUDGET_GB_DEPRECATED}", file=sys.stderr)
    return int(value * unit)


def reserve_bytes(args, default: int | None = None) -> int | None:
    """`--reserve-gib` in bytes (`default` when not given: None means the cluster's reserve), or a one-line
    error when it is negative, not a number or beyond 1e9 GiB (shown as typed)."""
    if args.reserve_gb is None:
        return default
    return gib_to_bytes(require_number("--reserve-gib", args.reserve_gb, 0.0, 1e9))


def cost_model_help(what: str = "cost model the policy plans with") -> str:
    """The names a `--cost-model` option accepts: the registry's (`COST_MODEL_NAMES`, so models added there
    show up everywhere) or a .joblib file."""
    return f"{what}: {'|'.join(COST_MODEL_NAMES)}|FILE.joblib"


def check_cost_model_name(name: str, option: str = "--cost-model") -> None:
    """`UserInputError` unless `name` is in COST_MODEL_NAMES or a .joblib path (checked before ranks start)."""
    if name not in COST_MODEL_NAMES and not name.endswith(".joblib"):
        raise unknown_name(option, name, list(COST_MODEL_NAMES) + ["<file.joblib>"])


def format_bytes(n: float) -> str:
    """Binary units: 1.5 GiB, 312 MiB."""
    for unit, size in (("GiB", GIB), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"


def format_seconds(s: float) -> str:
    """ms below a second, else s."""
    return f"{s * 1e3:.3f} ms" if s < 1 else f"{s:.3f} s"


def print_table(headers: list[str], rows: list[list], out=None) -> None:
    """Print rows under headers, columns padded to their widest cell."""
    out = out or sys.stdout
    cells = [[str(c) for c in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for i, row in enumerate(cells):
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip(), file=out)
        if i == 0:
            print("  ".join("-" * w for w in widths), file=out)


def print_json(obj) -> None:
    """Indented JSON on stdout."""
    print(json.dumps(obj, indent=2))


def add_cluster_arguments(parser) -> None:
    """Add `--cluster NAME|FILE` and `--gpus N` (the cluster at another GPU count, no TOML file needed)."""
    parser.add_argument("--cluster", default=DEFAULT_CLUSTER, help=f"preset or .toml file (default {DEFAULT_CLUSTER})")
    parser.add_argument("--gpus", type=integer, default=None, metavar="N",
                        help="plan for N GPUs of the cluster's kind (default: the cluster's own count)")


def cluster_of(args):
    """The `ClusterSpec` of `--cluster` at `--gpus` (`cluster_with_gpus`)."""
    return cluster_with_gpus(get_cluster(args.cluster), getattr(args, "gpus", None))
