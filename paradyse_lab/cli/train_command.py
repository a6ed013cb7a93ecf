"""The `paradyse-lab train` command: its options, checked before any rank starts, and the launch of the ranks.

    paradyse-lab train --nproc 2 --model gpt2-tiny --dataset uniform:512:1024 --policy dynamic:dp --steps 50
    torchrun --standalone --nproc-per-node 4 -m paradyse_lab train --model gpt2-tiny --dataset uniform:512:1024

What a run does: the options' module docstring; the planner it trains with: the training application.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys

from paradyse_lab.app.train_options import TrainOptions
from paradyse_lab.app.training import preflight, refuse_non_analytic_groups, train, with_folder_weights
from paradyse_lab.cli import collective_timeout, descriptions
from paradyse_lab.cli import main as cli_main
from paradyse_lab.cli.output import BUDGET_GB_DEPRECATED, check_cost_model_name, cost_model_help
from paradyse_lab.cluster.files import MAX_GPUS_FLAG
from paradyse_lab.errors import UserInputError, require_number, require_positive_int
from paradyse_lab.options import add_dataclass_arguments, from_namespace, integer, number
from paradyse_lab.runtime.launch.allocator_env import use_expandable_segments
from paradyse_lab.runtime.launch.cpu_threads import set_rank_threads
from paradyse_lab.runtime.launch.local import launch
from paradyse_lab.runtime.launch.ranks import rendezvous_store, run_rank, torchrun_rank
from paradyse_lab.runtime.training.run_inputs import check_log_file, check_options
from paradyse_lab.simulator.grouped_steps import check_group_policy
from paradyse_lab.simulator.policy_spec import PolicySpec


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `paradyse-lab train`: one per field of TrainOptions, and
    --nproc (how to launch, not part of the run)."""
    add_dataclass_arguments(parser, TrainOptions, help_suffix={"cost_model": cost_model_help("").lstrip(": ")})
    parser.add_argument("--nproc", "--gpus", dest="nproc", type=integer, default=None,
                        help="spawn this many local processes (single-command launcher; not under torchrun); the "
                        "policy plans for this many GPUs of --cluster's kind (default: on CUDA, one per local GPU; "
                        "else 1)")
    collective_timeout.add_argument(parser)
    parser.add_argument("--budget-gb", dest="budget_gb_deprecated", type=number, default=None,
                        help="deprecated: the budget in GB (10^9 bytes); use --budget-gib")


def options_from_args(args: argparse.Namespace):
    """`TrainOptions` from parsed arguments (validated)."""
    PolicySpec.parse(args.policy, args.recompute, args.granularity)  # one-line errors before any process starts
    check_cost_model_name(args.cost_model)
    if args.nproc is not None:  # before any arithmetic on it (a launcher of 10**30 processes)
        require_positive_int("--nproc", args.nproc, MAX_GPUS_FLAG)
    torchrun_rank(args.nproc)  # torchrun's variables with --nproc, or malformed ones: refused before any rank starts

    collective_timeout.seconds(args)
    opts = with_folder_weights(from_namespace(TrainOptions, args, **_deprecated_budget(args)))
    check_options(opts)
    if opts.group_size and args.nproc and args.nproc % opts.group_size:
        raise UserInputError(f"--group-size must divide --nproc ({args.nproc}) into groups, got {opts.group_size}")
    if opts.groups:
        check_group_policy(opts.groups, opts.policy)
        refuse_non_analytic_groups(opts)
        if args.nproc and args.nproc & (args.nproc - 1):
            raise UserInputError(f"--groups: groups are power-of-two blocks of ranks, so --nproc must be a power of "
                                 f"two, got {args.nproc}")
    check_log_file(opts)
    return opts


def _deprecated_budget(args: argparse.Namespace) -> dict:
    """{'budget_gib': ...} from the deprecated `--budget-gb` (GB converted to GiB, with a warning), else {}."""
    gb = getattr(args, "budget_gb_deprecated", None)
    if gb is None:
        return {}
    if args.budget_gib:
        raise UserInputError("give --budget-gib or the deprecated --budget-gb, not both")

    require_number("--budget-gb", gb, 0.0, 1e9)
    print(f"warning: {BUDGET_GB_DEPRECATED}", file=sys.stderr)
    return {"budget_gib": gb * 1e9 / 2**30}


def default_nproc() -> int | None:
    """--nproc when it is not given: the local GPU count on a CUDA machine with more than one GPU (one process
    per GPU: the planner's p is the world size), said on stderr; None (one process) otherwise."""
    import torch  # lazy: torch takes seconds to load; only this path runs it

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count < 2:
        return None
    print(f"--nproc not given: one process per local GPU, {count} (--nproc 1 for one)", file=sys.stderr)
    return count


RANK_PRELOAD = ("torch", "torch.distributed", "torch._dynamo", "networkx", "paradyse_lab.runtime.training.loop",
                "paradyse_lab.cli.train_command")
"""What the fork server of `train --nproc N` imports once for its N ranks: torch
(~2.3 CPU s), torch._dynamo (~1.6: the first `torch.optim` param group imports it), the planner's graph library and
the training runtime, paid once instead of once per rank."""


def _init_and_train(rank: int, world: int, opts, port: int | None, timeout_s: float) -> None:
    """One rank: join the process group (torchrun's environment, or the launcher's), train, leave. What its
    imports left (torch, the planner, the runtime: a rank's whole life) is frozen first (`gc.freeze`), so that
    the garbage collector's full passes while the rank trains, the first optimizer's import of torch._dynamo
    among them (~0.4 CPU s less), no longer walk it; frozen objects are still freed by reference counting."""
    import torch  # noqa: F401 - a rank's torch (the fork server's, or its own first import), before the freeze

    gc.freeze()
    run_rank(rank, world, train, (opts,), port, timeout_s)


def run(args: argparse.Namespace) -> int:
    """Entry of `paradyse-lab train` (under torchrun: `torchrun ... -m paradyse_lab train`). On CUDA the allocator
    gets expandable segments unless the user configured it; the ranks run in
    the launcher's environment, so they take it too."""
    opts = options_from_args(args)
    timeout_s = collective_timeout.seconds(args)
    use_expandable_segments(os.environ)
    under_torchrun = torchrun_rank(args.nproc)
    if under_torchrun is None and args.nproc is None:
        args.nproc = default_nproc()
    if under_torchrun is not None:  # the process then ends in paradyse_lab/cli `main`, without C++ teardown
        _init_and_train(*under_torchrun, opts, None, timeout_s)
    elif args.nproc is not None and args.nproc > 1:
        preflight(opts, args.nproc)
        store = rendezvous_store()  # held until every rank is done: no other run can take its port
        launch(_init_and_train, args.nproc, (opts, store.port, timeout_s), RANK_PRELOAD)
    else:
        _one_process_threads()
        train(opts)
    return 0


def _one_process_threads() -> None:
    """A one-process CPU run computes with the cores the machine has free (the run's
    first lines say how many); a CUDA run, or OMP_NUM_THREADS set, is left as it is."""
    import torch  # lazy: torch takes seconds to load; only this path runs it

    if not torch.cuda.is_available():
        set_rank_threads(1)


def register(subparsers) -> None:
    """Add the `train` sub-command to the paradyse-lab CLI (imports no torch until it runs)."""
    parser = subparsers.add_parser("train", help="train with per-layer strategy switching (torch.distributed)",
                                   description=descriptions.TRAIN,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    descriptions.rewrite_flag_help(parser, descriptions.TRAIN_FLAGS)
    parser.set_defaults(func=run)


def main(argv: list[str] | None = None) -> int:
    """`paradyse-lab train ARGV` (tests and scripts): the exit code, errors as one line on stderr."""
    return cli_main(["train", *(sys.argv[1:] if argv is None else argv)])
