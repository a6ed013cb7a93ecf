"""Run many `paradyse-lab` command lines one after another in ONE process, each as `python -m paradyse_lab` runs
it (the CLI's `main`, its exit code, everything written to the process's stderr), so that a test file whose
cases each need a guard against a hang starts one interpreter instead of one per case:
`python cli_runs.py RUNS.json OUT.json`.

RUNS.json is a list of {"id", "argv", "cwd"} (and optionally "env": variables set for that run alone, a null value
unsetting one); OUT.json, rewritten after every run (what a killed process leaves
is the runs it finished), maps each id to {"code", "stderr", "seconds"}. A run gets `limit_s` seconds (SIGALRM
interrupts a blocking `open` or `read`): past it, its code is "hung". File descriptors 1 and 2 go to a file of
the run's own while it runs, so output written below Python (C++ warnings) is caught as a subprocess's would be.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import time

from paradyse_lab.files.atomic_write import write_text_atomic


class Hung(BaseException):
    """The run's time limit passed (raised from SIGALRM; not an Exception, so that the CLI cannot report it)."""


def _alarm(signum, frame):
    raise Hung


def run_one(argv: list[str], cwd: str, limit_s: float, env: dict[str, str | None] | None = None) -> dict:
    """One command line in `cwd`, with `env`'s variables set (None: unset) for it alone: {"code": exit code or
    "hung", "stderr": text, "seconds": wall}."""
    from paradyse_lab.cli import main

    saved_env = {name: os.environ.get(name) for name in env or {}}
    _set_env(env or {})
    try:
        return _run_main(main, argv, cwd, limit_s)
    finally:
        _set_env(saved_env)


def _set_env(values: dict[str, str | None]) -> None:
    for name, value in values.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def _run_main(main, argv: list[str], cwd: str, limit_s: float) -> dict:
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        saved = os.dup(1), os.dup(2)
        sys.stdout.flush(), sys.stderr.flush()
        os.dup2(out.fileno(), 1), os.dup2(err.fileno(), 2)
        before, began = os.getcwd(), time.perf_counter()
        os.chdir(cwd)
        signal.setitimer(signal.ITIMER_REAL, limit_s)
        try:
            code = main(argv)
        except SystemExit as done:  # argparse exits itself
            code = done.code
        except Hung:
            code = "hung"
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            os.chdir(before)
            sys.stdout.flush(), sys.stderr.flush()
            os.dup2(saved[0], 1), os.dup2(saved[1], 2)
            os.close(saved[0]), os.close(saved[1])
        err.seek(0)
        return {"code": code, "stderr": err.read().decode(errors="replace"),
                "seconds": round(time.perf_counter() - began, 2)}


def main(runs_path: str, out_path: str, limit_s: float) -> None:
    signal.signal(signal.SIGALRM, _alarm)
    with open(runs_path) as f:
        runs = json.load(f)
    results: dict[str, dict] = {}
    for run in runs:
        results[run["id"]] = run_one(run["argv"], run["cwd"], limit_s, run.get("env"))
        write_text_atomic(out_path, json.dumps(results))  # the test reads the cases that ended, never half of one


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]) if len(sys.argv) > 3 else 60.0)
