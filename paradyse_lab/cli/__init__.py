"""`paradyse-lab` command line. Each command lives in its own module with a `register(subparsers)`.

User mistakes (`UserInputError`, argparse's own errors, a file that cannot be read or written) print one
line on stderr and exit with code 2, never a traceback; a run stopped on purpose (`RunStopped`: training
diverged, a rank failed) prints one line and exits with code 1; Ctrl-C prints one line and exits with code
130 (128 + SIGINT). A command whose `--out` is a file (`out_file=True` among its defaults) has it checked
before it starts: not a folder, a device node, a FIFO or a socket.
"""

from __future__ import annotations

import argparse
import functools
import gc
import importlib
import os
import re
import sys
import traceback

from paradyse_lab.errors import RunStopped, UserInputError

NEGATIVE_NUMBER = re.compile(r"-(\d|\.\d|inf|nan)", re.IGNORECASE)
"""What a flag's value that starts with '-' must look like to be read as a negative number: argparse's own
pattern takes `-5` and `-0.5` but not `-1e-3`, `-1e400` or `-inf`, and reports those as a missing value
('expected one argument') instead of checking the number."""


class OneLineParser(argparse.ArgumentParser):
    """argparse with its usage errors on one line (`PROG: error: MESSAGE`, exit 2) instead of usage + error, and
    negative numbers in every float notation taken as values (`NEGATIVE_NUMBER`; no flag looks like one)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = NEGATIVE_NUMBER  # argparse's attribute (Lib/argparse.py)

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _report(prog: str, err: BaseException) -> int:
    """Print `err` as the one line of a failed command; its exit code (2 user input, 1 stopped run)."""
    if isinstance(err, OSError):
        where = f" {str(err.filename)!r}" if err.filename else ""
        message = f"cannot use{where}: {err.strerror or err}"
    elif isinstance(err, UnicodeDecodeError):
        message = f"an input file is not UTF-8 text ({err.reason} at byte {err.start})"
    else:
        message = " ".join(str(err).split())
    print(f"{prog}: error: {message}", file=sys.stderr)
    return 1 if isinstance(err, RunStopped) else 2

COMMAND_MODULES = {
    "catalog_commands": ("models", "clusters", "strategies"), "cost_command": ("cost",),
    "lengths_command": ("lengths", "workload"), "simulate_commands": ("simulate", "experiment"),
    "ablate_command": ("ablate-costmodel",),
    "costmodel_commands": ("synth-profile", "fit-costmodel", "paper-profile", "fit-calibration"),
    "train_command": ("train",), "solver_commands": ("plan", "solve", "compare-solvers"),
    "bench_command": ("bench-solvers",), "reproduce_command": ("reproduce",), "profile_command": ("profile",),
    "calibrate_command": ("calibrate",), "validate_run_command": ("validate-run",),
    "export_hf_command": ("export-hf",),
}
"""Module of paradyse_lab/cli -> the names its `register(subparsers)` adds (where the tree puts each: VERBS, NOUNS)."""

VERBS = ("cost", "plan", "simulate", "experiment", "train", "reproduce", "calibrate", "validate-run", "export-hf")
"""The main commands, `paradyse-lab VERB`, in the order of `paradyse-lab --help`."""

NOUNS = {
    "catalog": ("model, cluster and strategy presets", {"models": "models", "clusters": "clusters",
                                                        "strategies": "strategies"}),
    "data": ("workloads and length files", {"workload": "workload", "lengths": "lengths"}),
    "costmodel": ("cost-model tools: profiles, fits, calibration, accuracy",
                  {"ablate-costmodel": "ablate", "profile": "profile", "synth-profile": "synth-profile",
                   "paper-profile": "paper-profile", "fit-costmodel": "fit", "fit-calibration": "fit-calibration"}),
    "solvers": ("solver tools: solve a problem, compare, benchmark",
                {"solve": "solve", "compare-solvers": "compare", "bench-solvers": "bench"}),
}
"""The other commands, grouped: `paradyse-lab NOUN TOOL`. NOUN -> (its help, {name a module registers -> TOOL})."""

SPELLING = {name: f"{noun} {tool}" for noun, (_, tools) in NOUNS.items() for name, tool in tools.items()}
SPELLING.update({verb: verb for verb in VERBS})
"""Each name a module registers -> how a user types it after `paradyse-lab`."""


class _Placer:
    """Stands in for the subparsers in a module's `register(subparsers)`: puts each command it adds where the
    tree has it (a verb at the top, a tool under its noun) and names it in `args.command` as the user types it."""

    def __init__(self, top, nouns: dict):
        self.top, self.nouns = top, nouns

    def add_parser(self, name: str, **kwargs):
        words = SPELLING[name].split()
        where = self.top if len(words) == 1 else self.nouns[words[0]]
        parser = where.add_parser(words[-1], **kwargs)
        parser.set_defaults(command=SPELLING[name])
        return parser


@functools.cache
def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The top-level parser with every command, each added by its module's `register(subparsers)`; with
    `command` (a name of COMMAND_MODULES), only the module that adds it: the same parser for that command's
    arguments, built in a fraction of the time (all commands' flags take ~60 ms to add). Built once per
    process and command: parsing leaves a parser as it was (its defaults are immutable values and every
    command's options come from a new namespace), so a process that runs many commands (a script or a test
    calling `main`) does not add the same flags again each time (1-4 ms a command)."""
    parser = OneLineParser(
        prog="paradyse-lab",
        description="Choose and evaluate per-layer parallel strategies for transformer training on "
        "sequences of changing length (a reproduction of ParaDySe, AAAI-26, and beyond). "
        "`paradyse-lab COMMAND --help` describes each.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    modules = [m for m, names in COMMAND_MODULES.items() if command is None or command in names]
    added = {name for m in modules for name in COMMAND_MODULES[m]}
    nouns = {}
    for noun, (text, tools) in NOUNS.items():
        if added & set(tools):
            tools_parser = sub.add_parser(noun, help=f"{text} ({', '.join(sorted(tools.values()))})",
                                          description=f"The {text}.")
            nouns[noun] = tools_parser.add_subparsers(dest="tool", metavar="TOOL")
            nouns[noun].required = True
    placer = _Placer(sub, nouns)
    for module in modules:
        importlib.import_module(f"paradyse_lab.cli.{module}").register(placer)
    order = {name: i for i, name in enumerate((*VERBS, *NOUNS))}
    sub._choices_actions.sort(key=lambda action: order[action.dest])  # argparse's list --help prints
    for tools_sub, (_, tools) in ((nouns[n], NOUNS[n]) for n in nouns):
        rank = {tool: i for i, tool in enumerate(sorted(tools.values()))}
        tools_sub._choices_actions.sort(key=lambda action: rank[action.dest])
    return parser


def _escape_what_cannot_be_printed() -> None:
    """Let stdout and stderr write what their encoding cannot hold as backslash escapes: a non-ASCII path or
    name in a result or a message, on a terminal or pipe set to ASCII (LANG=C, PYTHONIOENCODING=ascii), then
    prints as `\\xe9` instead of ending the command in a UnicodeEncodeError after its work is done."""
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")


def _command_of(argv: list[str] | None) -> str | None:
    """The name a module registers for the command `argv` spells (`VERB` or `NOUN TOOL`), else None (--help,
    a noun alone, a typo: the whole parser answers, listing every command)."""
    words = sys.argv[1:] if argv is None else argv
    typed = " ".join(words[:2]) if words and words[0] in NOUNS else (words[0] if words else None)
    return next((name for name, spelling in SPELLING.items() if spelling == typed), None)


def _renamed(argv: list[str] | None) -> str | None:
    """The one-line answer to a command typed by its former name (`ablate-costmodel`: now `costmodel
    ablate`), else None."""
    words = sys.argv[1:] if argv is None else argv
    if words and words[0] in SPELLING and SPELLING[words[0]] != words[0]:
        return f"paradyse-lab: error: '{words[0]}' is now 'paradyse-lab {SPELLING[words[0]]}' (see --help)"
    return None


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script and of `python -m paradyse_lab` (`argv` None: the process's own
    arguments); returns the exit code. Such a process that joined a torch.distributed group (a torchrun rank, or
    a one-rank group in this process, `joined_a_process_group`) ends here with that code
    through `end_process`, as the launcher's ranks do: output flushed, no interpreter or C++
    teardown that could abort it (exit -6) with the group's threads still alive. Any other such process freezes
    what is alive (`gc.freeze`) before it returns its code: the interpreter's exit then skips the garbage
    collector's passes over every object its imports left (torch, torch._dynamo, pandas: ~2 CPU s at the end of a
    one-process `train`, ~0.3 s of `simulate`); frozen objects are still freed by reference counting. With
    `argv` given (tests, scripts) it only returns."""
    if argv is not None:
        return _run_command(argv)
    try:
        code = _run_command(None)
    except Exception:  # a bug's traceback: printed, and the rank still ends without the teardown
        if not _joined_a_process_group():
            raise
        traceback.print_exc()
        code = 1
    if _joined_a_process_group():
        from paradyse_lab.runtime.launch.local import (
            end_process,  # imports torch: only in a process that joined a group
        )

        end_process(code)
    gc.freeze()
    return code


def _joined_a_process_group() -> bool:
    """Whether this process joined a torch.distributed group (never imports the runtime to find out)."""
    launch = sys.modules.get("paradyse_lab.runtime.launch.ranks")
    return launch is not None and launch.joined_a_process_group()


def _drop_stdout() -> None:
    """Point stdout at /dev/null once its reader has gone, so that the flush at exit does not fail again
    (Python would then print 'Exception ignored' and exit 120)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def _run_command(argv: list[str] | None) -> int:
    """Parse `argv` (None: the process's arguments) and run its command; the exit code (module docstring)."""
    _escape_what_cannot_be_printed()
    if (moved := _renamed(argv)) is not None:
        print(moved, file=sys.stderr)
        return 2
    parser = build_parser(_command_of(argv))
    args = parser.parse_args(argv)
    import paradyse_lab.app  # noqa: F401  (installs the runtime's tracer the replay cost model prices from)

    try:
        if getattr(args, "out_file", False) and args.out:  # a file --out: refused before any work if unusable
            from paradyse_lab.files.atomic_write import check_output_file  # only for the commands that write a file

            check_output_file(args.out)
        return int(args.func(args) or 0)
    except KeyboardInterrupt:  # Ctrl-C: files are written whole or not at all (atomic writes)
        print(f"paradyse-lab {args.command}: interrupted (Ctrl-C)", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader left (`| head -1`): the rest of the output goes nowhere, exit 0
        _drop_stdout()
        return 0
    except (UserInputError, RunStopped, OSError, UnicodeDecodeError) as err:
        return _report(f"paradyse-lab {args.command}", err)


if __name__ == "__main__":
    sys.exit(main())
