"""Run `paradyse-lab` command lines at the same time, each in a process of its own forked from ONE interpreter that
imported the train command's ranks' modules once (torch, torch._dynamo, the runtime: ~4 CPU s a process), so that
a test that needs several processes, each started as a user or torchrun starts one (its own environment
variables, working directory, stdout and stderr), pays those imports once: `python forked_runs.py RUNS.json DIR`.

RUNS.json is a list of {"id", "argv", "cwd", "env"} ("env": the run's whole environment). Each run's process calls
the CLI's `main` and ends with its exit code (a process that joined a process group ends inside `main`, as
`python -m paradyse_lab` does), its stdout going to /dev/null and its stderr to DIR/ID.err. DIR/pids.json
({"pids": {id: pid}, "started": when the first was forked}) is written once every run started; DIR/ends.json
({id: {"code", "ended"}}, the times in `time.monotonic()` seconds, the clock every process of the machine shares;
a negative code: the signal that ended it) is rewritten as each run ends. A run still going `limit_s` seconds
after it started is killed (SIGKILL: code -9), so that this process always ends.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import sys
import time


def _write(path: str, data: dict) -> None:
    with open(path + ".tmp", "w") as f:
        json.dump(data, f)
    os.replace(path + ".tmp", path)


def _child(run: dict, out_dir: str) -> None:
    """The forked process of one run: its environment, directory and output, then the CLI's `main`."""
    from paradyse_lab.cli import main

    code = 1
    try:
        os.environ.clear()
        os.environ.update(run["env"])
        os.chdir(run["cwd"])
        err = os.open(os.path.join(out_dir, f"{run['id']}.err"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(err, 2)
        code = main(run["argv"])
    except SystemExit as done:  # argparse exits itself
        code = done.code if isinstance(done.code, int) else 1
    except BaseException:  # noqa: BLE001 - a bug's traceback goes to the run's stderr file
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)


def main(runs_file: str, out_dir: str, limit_s: float = 240.0) -> int:
    from paradyse_lab.cli.train_command import RANK_PRELOAD

    for name in RANK_PRELOAD:
        importlib.import_module(name)
    with open(runs_file) as f:
        runs = json.load(f)
    sys.stdout.flush(), sys.stderr.flush()
    pids, started = {}, time.monotonic()
    for run in runs:
        pid = os.fork()
        if pid == 0:
            _child(run, out_dir)
        pids[pid] = run["id"]
    _write(os.path.join(out_dir, "pids.json"),
           {"pids": {run_id: pid for pid, run_id in pids.items()}, "started": started})
    ends: dict[str, dict] = {}
    while len(ends) < len(pids):
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            if time.monotonic() - started > limit_s:
                for p, run_id in pids.items():
                    if run_id not in ends:
                        os.kill(p, signal.SIGKILL)
            time.sleep(0.05)
            continue
        ends[pids[pid]] = {"code": os.waitstatus_to_exitcode(status), "ended": time.monotonic()}
        _write(os.path.join(out_dir, "ends.json"), ends)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], *(float(a) for a in sys.argv[3:])))
