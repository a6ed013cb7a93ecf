"""The `paradyse-lab train` command: its options, checked before any rank starts, and the launch of the ranks.

    paradyse-lab train --nproc 2 --model gpt2-tiny --dataset uniform:512:1024 --policy dynamic:dp --steps 50
    torchrun --standalone --nproc-per-node 4 -m paradyse_lab train --model gpt2-tiny --dataset uniform:512:1024

What a run does: runtime/train.py's module docstring (the command's --help); the planner it trains with:
paradyse_lab/app/training.py.
"""

from __future__ import annotations

import argparse
import os

from paradyse_lab.errors import UserInputError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `paradyse-lab train` (runtime.train.TrainOptions)."""
    from paradyse_lab.cli.output import cost_model_help
    from runtime.train import TrainOptions

    d = TrainOptions(model="", dataset="")
    parser.add_argument("--model", required=True, help="preset (e.g. gpt2-tiny) or GPT-2 config.json")
    parser.add_argument("--dataset", required=True, help="workload: github_code, grch38, uniform:LO:HI, "
                        "lognormal:MEDIAN:SIGMA, file:PATH (file:*.jsonl of token-id lists gives real tokens)")
    parser.add_argument("--policy", default=d.policy,
                        help="static:NAME[+recompute] or dynamic:SOLVER[+recompute][+sublayer] (default %(default)s)")
    parser.add_argument("--steps", type=int, default=d.steps, help="optimizer steps (default %(default)s)")
    parser.add_argument("--batch", type=int, default=d.batch, help="sequences per step (default %(default)s)")
    parser.add_argument("--lr", type=float, default=d.lr, help="AdamW learning rate (default %(default)s)")
    parser.add_argument("--weight-decay", type=float, default=d.weight_decay, help="AdamW weight decay")
    parser.add_argument("--seed", type=int, default=d.seed, help="weights, workload and token seed")
    parser.add_argument("--max-len", type=int, default=d.max_len, help="cap on sequence length (0: positions)")
    parser.add_argument("--cluster", default=d.cluster, help="cluster preset or .toml (e.g. paradyse-lab "
                        "calibrate's DIR/cluster.toml) the policy plans for")
    parser.add_argument("--cost-model", default=d.cost_model, help=f"{cost_model_help()} (default %(default)s)")
    parser.add_argument("--profiles", default=d.profiles, help="profile CSV the learned and calibrated cost models "
                        "are fitted on")
    parser.add_argument("--budget-gb", type=float, default=d.budget_gb, help="plan memory budget (0: GPU memory)")
    parser.add_argument("--recompute", action="store_true", help="let the policy choose recomputation")
    parser.add_argument("--granularity", default=d.granularity,
                        help="block (one decision per layer) or sublayer (attention and MLP apart)")
    parser.add_argument("--checkpoint-dir", default=d.checkpoint_dir, help="write sharded checkpoints here")
    parser.add_argument("--checkpoint-every", type=int, default=d.checkpoint_every, help="period in steps")
    parser.add_argument("--resume", action="store_true", help="continue from the latest checkpoint")
    parser.add_argument("--log-file", default=d.log_file, help="CSV of per-step loss, time, memory and plan")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--nproc", type=int, default=None,
                        help="spawn this many local processes (single-command launcher; not under torchrun)")


def options_from_args(args: argparse.Namespace):
    """`runtime.train.TrainOptions` from parsed arguments (validated)."""
    from paradyse_lab.cli.output import check_cost_model_name
    from runtime.train import TrainOptions
    from runtime.train_inputs import check_options
    from simulator.policies import check_policy_names

    check_policy_names(args.policy, args.recompute, args.granularity)  # one-line errors before any process starts
    check_cost_model_name(args.cost_model)
    if args.nproc is not None and args.nproc < 1:
        raise UserInputError(f"--nproc must be a positive integer, got {args.nproc}")
    opts = TrainOptions(model=args.model, dataset=args.dataset, policy=args.policy, steps=args.steps,
                        batch=args.batch, lr=args.lr, weight_decay=args.weight_decay, seed=args.seed,
                        max_len=args.max_len, cluster=args.cluster, cost_model=args.cost_model,
                        profiles=args.profiles, budget_gb=args.budget_gb, recompute=args.recompute,
                        granularity=args.granularity, checkpoint_dir=args.checkpoint_dir,
                        checkpoint_every=args.checkpoint_every, resume=args.resume, log_file=args.log_file,
                        progress=not args.no_progress)
    check_options(opts)
    return opts


def _init_and_train(rank: int, world: int, opts, port: int | None) -> None:
    """One rank: join the process group (torchrun's environment, or the launcher's), train, leave."""
    from paradyse_lab.app.training import train
    from runtime.launch import run_rank

    run_rank(rank, world, train, (opts,), port)


def run(args: argparse.Namespace) -> int:
    """Entry of `paradyse-lab train` (under torchrun: `torchrun ... -m paradyse_lab train`)."""
    opts = options_from_args(args)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # under torchrun
        _init_and_train(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), opts, None)
    elif args.nproc is not None and args.nproc > 1:
        import socket

        from paradyse_lab.app.training import preflight
        from runtime.launcher import launch

        preflight(opts, args.nproc)
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        launch(_init_and_train, args.nproc, (opts, port))
    else:
        from paradyse_lab.app.training import train

        train(opts)
    return 0


def register(subparsers) -> None:
    """Add the `train` sub-command to the paradyse-lab CLI (imports no torch until it runs)."""
    import runtime.train

    parser = subparsers.add_parser("train", help="train with per-layer strategy switching (torch.distributed)",
                                   description=runtime.train.__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    parser.set_defaults(func=run)


def main(argv: list[str] | None = None) -> int:
    """`paradyse-lab train ARGV` (tests and scripts): the exit code, errors as one line on stderr."""
    import sys

    from paradyse_lab.cli import main as cli_main

    return cli_main(["train", *(sys.argv[1:] if argv is None else argv)])
