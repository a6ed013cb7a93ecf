"""`--collective-timeout SECONDS` of the commands that start ranks (train, calibrate, validate-run): how long a
rank waits for its peers, to meet and in each collective, before the run stops with one line naming the rank
that did not answer (the default and why, `COLLECTIVE_TIMEOUT_S`)."""

from __future__ import annotations

import argparse

from paradyse_lab.options import number
from paradyse_lab.runtime.launch.ranks import COLLECTIVE_TIMEOUT_S, check_collective_timeout


def add_argument(parser: argparse.ArgumentParser) -> None:
    """Add `--collective-timeout` (seconds, default `COLLECTIVE_TIMEOUT_S`) to a command that starts ranks."""
    parser.add_argument("--collective-timeout", dest="collective_timeout", type=number, default=COLLECTIVE_TIMEOUT_S,
                        metavar="SECONDS",
                        help="seconds a rank waits for its peers (to meet, and in each collective) before the run "
                        "stops naming the rank that did not answer (default %(default)g; torch's own is 1800)")


def seconds(args: argparse.Namespace) -> float:
    """The checked `--collective-timeout` of parsed `args` (a `UserInputError` naming the allowed values)."""
    return check_collective_timeout(float(args.collective_timeout))
