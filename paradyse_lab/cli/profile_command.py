"""The `paradyse-lab costmodel profile` command: its options, checked, and the run of the profiler.

    paradyse-lab costmodel profile --model gpt2-tiny --seqs 512,1024 --strategies megatron_ts,metp+recompute \\
        --mode rank-local --p 8 --out profile.csv
    torchrun --standalone --nproc-per-node 8 -m paradyse_lab costmodel profile --model gpt2-tiny --seqs 512,1024 \\
        --strategies megatron_ts,metp --mode distributed --out profile.csv

What a row holds and how it is measured: the profiler's module docstring.
"""

from __future__ import annotations

import argparse
import os

from paradyse_lab.app.measure.profiler import ProfileOptions, profile, profile_distributed, write_rows_atomic
from paradyse_lab.cli import descriptions
from paradyse_lab.cluster.files import MAX_GPUS_FLAG
from paradyse_lab.core.strategies import StrategyOption
from paradyse_lab.errors import MAX_REPEATS, UserInputError, require_positive_int, require_seed
from paradyse_lab.options import add_dataclass_arguments, from_namespace
from paradyse_lab.workload.packing import MAX_TOKEN_BUDGET


def run(args) -> int:
    """The `profile` command (imports torch here, not at registration)."""
    import torch  # lazy: torch takes seconds to load; only this path runs it

    opts = parse_options(args)
    if opts.mode == "distributed":
        import torch.distributed as dist

        from paradyse_lab.runtime.launch.ranks import join_process_group, torchrun_rank

        if torchrun_rank() is None:  # also refuses malformed RANK, WORLD_SIZE, LOCAL_RANK, MASTER_* with one line
            raise UserInputError("--mode distributed runs under torchrun (RANK is not set)")
        cuda = opts.device == "cuda" or (opts.device == "auto" and torch.cuda.is_available())
        if cuda:
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
        join_process_group("nccl" if cuda else "gloo")
        try:
            df = profile_distributed(opts, args.out)
        finally:
            dist.destroy_process_group()
    else:
        df = profile(opts)
        write_rows_atomic(df, args.out)
    if "RANK" not in os.environ or os.environ.get("RANK") == "0":
        print(f"wrote {len(df)} rows to {args.out}")
    return 0


def parse_options(args):
    """`paradyse_lab.app.measure.profiler.ProfileOptions` from checked arguments: `UserInputError` on bad input."""
    def ints(text: str, what: str) -> tuple[int, ...]:
        try:
            vals = tuple(int(v) for v in str(text).split(",") if v.strip())
        except ValueError:
            raise UserInputError(f"{what} must be comma-separated integers, got {text!r}") from None
        if not vals or any(v <= 0 for v in vals):
            raise UserInputError(f"{what} must be positive integers, got {text!r}")
        for v in vals:  # before any arithmetic on them (a length of 2**53 + 1 tokens)
            require_positive_int(what, v, MAX_TOKEN_BUDGET)
        return vals

    seqs = ints(args.seqs, "--seqs")
    strategies = tuple(s.strip() for s in str(args.strategies).split(",") if s.strip())
    if not strategies:
        raise UserInputError("--strategies is empty")
    from paradyse_lab.runtime.model.parallel_gpt import STRATEGY_MODULES  # noqa: F401 - torch is imported below anyway

    for name in strategies:
        opt = StrategyOption.parse(name)
        if opt.strategy not in STRATEGY_MODULES:
            raise UserInputError(f"strategy {opt.strategy!r} has no runtime implementation; "
                                 f"valid: {', '.join(STRATEGY_MODULES)}")
        if opt.tiled or opt.offload:  # a profile row records the strategy and recomputation only
            raise UserInputError(f"--strategies: {name!r}: a profile row is NAME or NAME+recompute (+tiled and "
                                 "+offload are not profile columns)")
    bounds = (("--warmup", args.warmup, 0, MAX_REPEATS), ("--repeats", args.repeats, 1, MAX_REPEATS),
              ("--batch", args.batch, 1, 2**20), ("--layers", args.layers, 0, 2**16),
              ("--p", args.p, 0, MAX_GPUS_FLAG), ("--rank", args.rank, 0, MAX_GPUS_FLAG))
    for name, value, low, high in bounds:
        if not low <= value <= high:  # before a model of 10**21 layers is built or a step repeated forever
            raise UserInputError(f"{name} must be an integer in [{low}, {high:,}], got {value}")
    require_seed("--seed", args.seed)
    if args.mode == "rank-local" and args.p < 1:
        raise UserInputError("--mode rank-local needs --p (the world size to emulate)")
    if args.mode == "rank-local" and args.rank >= args.p:
        raise UserInputError(f"--rank must be below --p ({args.p}), got {args.rank}")

    return from_namespace(ProfileOptions, args, seqs=seqs, strategies=strategies)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `paradyse-lab costmodel profile`: one per field of the profiler's `ProfileOptions`, and
    --out."""
    add_dataclass_arguments(parser, ProfileOptions)
    parser.add_argument("--out", required=True, help="profile CSV to write (atomically)")


def register(subparsers) -> None:
    """Add the `profile` sub-command (imports no torch until it runs)."""
    parser = subparsers.add_parser("profile", help="measure strategies' step time and memory per length",
                                   description=descriptions.PROFILE,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    parser.set_defaults(func=run, out_file=True)


