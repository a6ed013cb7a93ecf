"""Run `paradyse-lab` command lines at the same time, each in a process of its own forked from ONE interpreter that
imported the train command's ranks' modules once (torch, torch._dynamo, the runtime: ~4 CPU s a process), so that
a test that needs several processes, each started as a user or torchrun starts one (its own environment
variables, working directory, stdout and stderr), pays those imports once: `python forked_runs.py RUNS.json DIR`.

RUNS.json is {"runs": [{"id", "argv", "cwd", "env"}, ...], "preload": [module, ...]} ("env": the run's whole
environment; "preload": what this process imports before it forks, by default the train command's ranks'
modules). Each run's process calls the CLI's `main` (or, given "module", runs that module as `python -m MODULE
ARGV` does) and ends with its exit code (at once, through `end_process`, as a process that joined a process
group must), its stdout going to /dev/null and its stderr to DIR/ID.err. DIR/pids.json
({"pids": {id: pid}, "started": when the first was forked}) is written once every run started; DIR/ends.json
({id: {"code", "ended"}}, the times in `time.monotonic()` seconds, the clock every process of the machine shares;
a negative code: the signal that ended it) is rewritten as each run ends. A run still going `limit_s` seconds
after it started is killed (SIGKILL: code -9), so that this process always ends. `Forked` is a test's side of it:
where the test's process runs a multiprocessing fork server (the distributed worlds' worker's, which imported
torch and the runtime), this process is forked from that server instead of started as a new interpreter that
imports them again (~4 CPU s).
"""

from __future__ import annotations

import gc
import importlib
import json
import multiprocessing
import os
import runpy
import signal
import subprocess
import sys
import time
from multiprocessing import forkserver
from pathlib import Path

from paradyse_lab.files.atomic_write import write_text_atomic


def _write(path: str, data: dict) -> None:
    write_text_atomic(path, json.dumps(data))  # a test polling the file never reads half of it


def _child(run: dict, out_dir: str) -> None:
    """The forked process of one run: its environment, directory and output, then the CLI's `main`."""
    from paradyse_lab.cli import main
    from paradyse_lab.runtime.launch.local import end_process

    code = 1
    try:
        os.environ.clear()
        os.environ.update(run["env"])
        os.chdir(run["cwd"])
        err = os.open(os.path.join(out_dir, f"{run['id']}.err"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(err, 2)
        os.close(null), os.close(err)
        if run.get("module"):
            sys.argv = [run["module"], *run["argv"]]
            runpy.run_module(run["module"], run_name="__main__", alter_sys=True)
            code = 0
        else:
            code = main(run["argv"])
    except SystemExit as done:  # argparse exits itself
        code = done.code if isinstance(done.code, int) else 1
    except BaseException:  # noqa: BLE001 - a bug's traceback goes to the run's stderr file
        import traceback

        traceback.print_exc()
    finally:
        end_process(code)  # flushed, and no interpreter teardown: never back into the forking loop


def main(runs_file: str, out_dir: str, limit_s: float = 240.0) -> int:
    with open(runs_file) as f:
        spec = json.load(f)
    if "preload" not in spec:
        from paradyse_lab.cli.train_command import RANK_PRELOAD

        spec["preload"] = RANK_PRELOAD
    for name in spec["preload"]:
        importlib.import_module(name)
    runs = spec["runs"]
    sys.stdout.flush(), sys.stderr.flush()
    pids, started = {}, time.monotonic()
    for run in runs:
        pid = os.fork()
        if pid == 0:
            try:
                _child(run, out_dir)
            finally:
                os._exit(1)  # only if `_child` failed before its own end: never back into this loop
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


def _served(runs_file: str, out_dir: str, limit_s: float, env: dict) -> None:
    """`main` in a process forked from a fork server: the environment, directory and standard streams a started
    interpreter would have (stdin and stdout /dev/null), the garbage collector on (a server may pause it)."""
    gc.enable()
    os.environ.clear()
    os.environ.update(env)
    os.chdir(out_dir)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0), os.dup2(null, 1)
    os.close(null)
    main(runs_file, out_dir, limit_s)


class _ServedProcess:
    """A `multiprocessing` process as the part of `subprocess.Popen` that `Forked` uses."""

    def __init__(self, proc):
        self._proc, self.pid = proc, proc.pid

    def poll(self) -> int | None:
        return self._proc.exitcode

    def kill(self) -> None:
        self._proc.kill()

    def wait(self, timeout: float | None = None) -> int:
        self._proc.join(timeout)
        if self._proc.exitcode is None:
            raise subprocess.TimeoutExpired("forked_runs", timeout)
        return self._proc.exitcode


def _server_running() -> bool:
    """Whether this process runs a multiprocessing fork server that is still alive."""
    pid = getattr(getattr(forkserver, "_forkserver", None), "_forkserver_pid", None)
    return pid is not None and alive(pid)


class Forked:
    """A test's side of this script: its runs (`add`), started at once in one process (`start`), their pids, ends
    and stderr, read from the files the process writes."""

    def __init__(self, where, env: dict, limit_s: float, preload: list[str] | None = None):
        self.where, self.env, self.limit_s, self.preload = Path(where), env, limit_s, preload
        self.runs: list[dict] = []
        self.proc = None

    def add(self, run_id: str, argv: list[str], cwd, env: dict, module: str | None = None) -> None:
        self.runs.append({"id": run_id, "argv": argv, "cwd": str(cwd), "env": env, "module": module})

    def start(self) -> None:
        spec = {"runs": self.runs, **({"preload": self.preload} if self.preload is not None else {})}
        (self.where / "runs.json").write_text(json.dumps(spec))
        if _server_running():
            proc = multiprocessing.get_context("forkserver").Process(
                target=_served, args=(str(self.where / "runs.json"), str(self.where), self.limit_s, self.env),
                name="forked-runs")
            proc.start()
            self.proc = _ServedProcess(proc)
            return
        self.proc = subprocess.Popen([sys.executable, __file__, str(self.where / "runs.json"), str(self.where),
                                      str(self.limit_s)], cwd=self.where, env=self.env,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)

    def _json(self, name: str) -> dict:
        path = self.where / name
        return json.loads(path.read_text()) if path.is_file() else {}

    def pids(self) -> dict:
        """{"pids": {id: pid}, "started": monotonic seconds}, once every run started ({} before)."""
        return self._json("pids.json")

    def ends(self) -> dict:
        """{id: {"code", "ended"}} of the runs that ended."""
        return self._json("ends.json")

    def stderr(self, run_id: str) -> str:
        path = self.where / f"{run_id}.err"
        return path.read_text() if path.is_file() else ""

    def wait(self) -> str | None:
        """Wait for the process's end (every run ended, or killed at its limit); a failure, or None."""
        try:
            self.proc.wait(self.limit_s + 30)
        except subprocess.TimeoutExpired as hung:
            return repr(hung)
        return None

    def close(self) -> None:
        """Kill the runs still going (a stopped rank), then wait for the process's end."""
        for pid in self.pids().get("pids", {}).values():
            if alive(pid) and pid in children(self.proc.pid):
                os.kill(pid, signal.SIGKILL)
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie (Linux /proc)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], *(float(a) for a in sys.argv[3:])))
