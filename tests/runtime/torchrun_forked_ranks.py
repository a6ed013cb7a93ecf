"""torchrun's agent (`python -m torch.distributed.run ARGV`: its options, rendezvous and rank environment) whose
ranks are forked from the agent's process instead of started as `python -m MODULE ...` processes: each rank runs
the CLI's `main` on the module's arguments, so that a test whose agent was forked from an interpreter that
imported the ranks' modules once (forked_runs.py's preload) pays those imports once, not once per rank (~4 CPU
s each). Only for `-m paradyse_lab ...`; torchrun itself forks a function entrypoint's ranks the same way
(`--start-method fork`, LaunchConfig.start_method)."""

from __future__ import annotations

import sys

from torch.distributed.launcher.api import elastic_launch
from torch.distributed.run import config_from_args, parse_args


def _rank(*argv: str) -> int:
    """One rank: `paradyse-lab ARGV` in this forked process, in the environment the agent gave it."""
    from paradyse_lab.cli import main

    code = main(list(argv))
    if code:
        raise SystemExit(code)  # a failed rank, as the agent sees a process that exited with it
    return code


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    if args.master_port is None:  # as torchrun's `run` sets it (the static rendezvous's only)
        args.master_port = 29500
    config, _, cmd_args = config_from_args(args)
    at = cmd_args.index("-m")
    if cmd_args[at + 1] != "paradyse_lab":
        raise SystemExit(f"torchrun_forked_ranks runs -m paradyse_lab ranks only, got {cmd_args[at + 1]}")
    config.start_method = "fork"
    elastic_launch(config=config, entrypoint=_rank)(*cmd_args[at + 2:])


if __name__ == "__main__":
    main(sys.argv[1:])
