"""No hang: a rank that stops answering ends an `--nproc` run within `--collective-timeout` (every rank gone, one
line naming it, exit 1), and ranks of a torchrun-style environment that cannot meet (no peers, a busy
MASTER_PORT, a MASTER_ADDR that does not resolve) end with one line within it. Each case runs in a subprocess (the
stopped runs one each, the environments that cannot meet one after another in one) with a timeout of a few seconds
and a limit on the test's own wait, so a hang fails the test instead of the suite."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ["-m", "paradyse_lab", "train", "--model", "gpt2-tiny", "--dataset", "uniform:16:16", "--max-len", "16",
         "--policy", "static:megatron_ts", "--no-progress"]
WAIT_S = 240
"""The test's own limit on a subprocess: far above what a bounded end takes on a loaded machine."""


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    return {**env, "PYTHONPATH": str(ROOT), **extra}


def _lines(text: str) -> list[str]:
    """stderr's lines beyond the planner's statement (a run's first line, before any rank meets)."""
    return [line for line in text.splitlines() if line.strip() and not line.startswith("planning each step")]


def _children(pid: int) -> list[int]:
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


def _is_rank(pid: int) -> bool:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"spawn_main" in cmd


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


class Stopped:
    """One run whose rank is stopped (SIGSTOP) once the run has logged a few steps: its processes, the one whose
    end the test reads, and what that end was. `start`, `stop` and `end` are separate so that the next run's
    start-up overlaps this one's wait for its collective timeout (`stopped_runs`)."""

    def __init__(self, tmp_path: Path, torchrun: bool, stopped: int):
        self.tmp_path, self.torchrun, self.stopped = tmp_path, torchrun, stopped
        self.log = tmp_path / "log.csv"
        self.procs: list[subprocess.Popen] = []
        self.ranks: list[int] = []
        self.returncode, self.err, self.took, self.failure = None, "", None, None

    def start(self) -> None:
        args = [sys.executable, *TRAIN, "--steps", "100000", "--log-file", str(self.log), "--collective-timeout", "5"]
        if not self.torchrun:
            self.procs.append(subprocess.Popen([*args, "--nproc", "2"], cwd=self.tmp_path, env=_env(),
                                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
            return
        port = _free_port()
        for rank in (0, 1):
            env = _env(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2",
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
            self.procs.append(subprocess.Popen(args, cwd=self.tmp_path, env=env, stdout=subprocess.DEVNULL,
                                               stderr=subprocess.PIPE, text=True))

    def stop(self) -> None:
        """Wait for three lines of the run's log, then stop the rank."""
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline and (not self.log.is_file() or len(self.log.read_text().splitlines()) < 3):
            if not all(p.poll() is None for p in self.procs):
                raise AssertionError([p.communicate() for p in self.procs])
            time.sleep(0.2)
        if self.torchrun:
            os.kill(self.procs[self.stopped].pid, signal.SIGSTOP)
        else:
            self.ranks = sorted(p for p in _children(self.procs[0].pid) if _is_rank(p))
            assert len(self.ranks) == 2, self.ranks
            os.kill(self.ranks[1], signal.SIGSTOP)  # ranks start in order: the later pid is rank 1
        self.stopped_at = time.monotonic()
        self._reader = threading.Thread(target=self._read_end, daemon=True)
        self._reader.start()

    def _read_end(self) -> None:
        """Read the watched process (the launcher, or the rank not stopped) to its end, and when that came: in a
        thread, so that the time is its own while the next run starts."""
        watched = self.procs[1 - self.stopped if self.torchrun else 0]
        try:
            _, self.err = watched.communicate(timeout=WAIT_S)
        except subprocess.TimeoutExpired as hung:
            self.failure = repr(hung)
            return
        self.took = time.monotonic() - self.stopped_at
        self.returncode = watched.returncode

    def end(self) -> None:
        """Wait for the watched process's end (`_read_end`)."""
        self._reader.join(WAIT_S + 5)

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.communicate()


@pytest.fixture(scope="module")
def stopped_runs(tmp_path_factory) -> dict[str, Stopped]:
    """The three stopped-rank runs, each started once the one before has its rank stopped, so that a run's
    start-up (the interpreters' imports) overlaps the wait of the one before (its collective timeout, the
    heartbeat watch); a run's failure is kept for its own test."""
    runs = {"nproc": Stopped(tmp_path_factory.mktemp("nproc"), False, 1),
            "torchrun-1": Stopped(tmp_path_factory.mktemp("torchrun-1"), True, 1),
            "torchrun-0": Stopped(tmp_path_factory.mktemp("torchrun-0"), True, 0)}
    try:
        for run in runs.values():
            try:
                run.start()
                run.stop()
            except Exception as err:  # noqa: BLE001 - failed in its own test
                run.failure = repr(err)
        for run in runs.values():
            if run.failure is None:
                try:
                    run.end()
                except Exception as err:  # noqa: BLE001 - failed in its own test
                    run.failure = repr(err)
        yield runs
    finally:
        for run in runs.values():
            run.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_stopped_rank_ends_the_run_within_the_collective_timeout_naming_it(stopped_runs):
    """Rank 1 is stopped (SIGSTOP) mid-run: rank 0's next collective waits 5 s, then every rank is gone, and
    the launcher says in one line that rank 1 is stopped; exit 1. Before the collective timeout existed, rank 0
    waited torch's 30 minutes."""
    run = stopped_runs["nproc"]
    assert run.failure is None, run.failure
    err = run.err
    assert run.returncode == 1, (run.returncode, err)
    assert len(_lines(err)) == 1, err
    assert "rank 1 is stopped" in err and "--collective-timeout" in err, err
    assert run.took < 60, run.took  # 5 s of timeout, a few of reports and teardown
    assert not [p for p in run.ranks if _alive(p)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


CANNOT_MEET = ("unresolvable", "busy-port", "no-peers")
CLI_RUNS = ROOT / "tests" / "paradyse_lab" / "cli" / "cli_runs.py"
"""Runs command lines one after another in one process (each through the CLI's `main`)."""


@pytest.fixture(scope="module")
def cannot_meet(tmp_path_factory) -> dict[str, tuple[subprocess.CompletedProcess | None, float, str | None]]:
    """The three environments that cannot meet, one after another in ONE process (cli_runs.py: each through the
    CLI's `main` with its own environment variables, its stderr caught at the file descriptor), the one that waits
    (no peers) last, so that the process's own end after it is bounded too: {case: (its end, its seconds,
    failure)}."""
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    where = tmp_path_factory.mktemp("cannot-meet")
    runs = []
    for case in CANNOT_MEET:
        port = {"no-peers": _free_port(), "busy-port": busy.getsockname()[1], "unresolvable": _free_port()}[case]
        addr = "no-such-host.invalid" if case == "unresolvable" else "127.0.0.1"
        env = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": addr, "MASTER_PORT": str(port)}
        runs.append({"id": case, "argv": [*TRAIN[2:], "--steps", "2", "--collective-timeout", "3"],
                     "cwd": str(tmp_path_factory.mktemp(case)), "env": env})
    (where / "runs.json").write_text(json.dumps(runs))
    failure = None
    try:
        subprocess.run([sys.executable, str(CLI_RUNS), str(where / "runs.json"), str(where / "out.json"),
                        str(WAIT_S)], timeout=WAIT_S, cwd=where, env=_env(), stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired as hung:
        failure = repr(hung)  # a case, or the process's end after them, did not end
    finally:
        busy.close()
    out = where / "out.json"
    ends = json.loads(out.read_text()) if out.is_file() else {}
    return {case: (subprocess.CompletedProcess(TRAIN, ends[case]["code"], "", ends[case]["stderr"]),
                   ends[case]["seconds"], failure) if case in ends else (None, WAIT_S, failure or "not run")
            for case in CANNOT_MEET}


@pytest.mark.parametrize("case", CANNOT_MEET)
def test_a_torchrun_environment_that_cannot_meet_ends_with_one_line(cannot_meet, case):
    """RANK 0 of WORLD_SIZE 2 with no rank 1 (waits 3 s for it), a MASTER_PORT another process listens on, a
    MASTER_ADDR that does not resolve: one line, no DistNetworkError traceback, within a bounded time."""
    done, took, failure = cannot_meet[case]
    assert failure is None, failure
    assert len(_lines(done.stderr)) == 1, done.stderr
    assert "Traceback" not in done.stderr and "DistNetworkError" not in done.stderr, done.stderr
    if case == "unresolvable":
        assert done.returncode == 2 and "MASTER_ADDR" in done.stderr, done.stderr
    else:
        assert done.returncode == 1 and "did not meet" in done.stderr, done.stderr
        assert ("address already in use" if case == "busy-port" else "1/2 clients joined") in done.stderr, done.stderr
    assert took < 120


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SIGSTOP")
@pytest.mark.parametrize("stopped", [1, 0])
def test_a_stopped_torchrun_rank_is_named_by_its_peer(stopped_runs, stopped):
    """Two ranks started as torchrun starts them (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; rank 0 serves the
    store, as `env://` does); one is stopped (SIGSTOP) once both have trained a few steps: the other's next
    collective waits 5 s, and it ends with one line naming the stopped rank, exit 1 (rank 1 by its heartbeat;
    rank 0 as the store's host, the store then silent too). Before the ranks' heartbeats, it said only that 'a
    peer rank' did not answer."""
    run, other = stopped_runs[f"torchrun-{stopped}"], 1 - stopped
    assert run.failure is None, run.failure
    err = run.err
    assert run.returncode == 1, (run.returncode, err)
    assert len(_lines(err)) == 1, err
    assert f"rank {other} waited more than 5 s (--collective-timeout) for rank {stopped}," in err, err
    assert run.took < 60, run.took  # 5 s of timeout, 4 s (at most 9) of watching the peers' heartbeats, teardown
