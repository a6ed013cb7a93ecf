"""No hang: a rank that stops answering ends an `--nproc` run within `--collective-timeout` (every rank gone, one
line naming it, exit 1), and ranks of a torchrun-style environment that cannot meet (no peers, a busy
MASTER_PORT, a MASTER_ADDR that does not resolve) end with one line within it. Each torchrun-style rank and each
environment that cannot meet is a process of its own, forked from one interpreter that imported the train
command once; the `--nproc` run is the CLI's `main` in the pytest process meanwhile (its ranks fork from this
process's fork server: on the distributed worlds' worker, the worlds' one, which imported torch and the runtime
already, instead of a fork server of the run's own, ~4 CPU s); all in one module fixture. Every forked process
has a time limit of its own, the test a limit on its wait and pytest-timeout's on the module's tests, so a hang
fails the test instead of the suite."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from multiprocessing import forkserver
from pathlib import Path

import pytest
from forked_runs import Forked, alive, children

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ["-m", "paradyse_lab", "train", "--model", "gpt2-tiny", "--dataset", "uniform:16:16", "--max-len", "16",
         "--policy", "static:megatron_ts", "--no-progress"]
WAIT_S = 240
"""The test's own limit on a subprocess: far above what a bounded end takes on a loaded machine."""
pytestmark = [pytest.mark.xdist_group("gloo-worlds"), pytest.mark.timeout(2 * WAIT_S)]
"""Run on the pytest worker of the distributed tests' worlds (tests/conftest.py's `WORLDS_GROUP`), after them, so
that the `--nproc` run's ranks fork from that worker's fork server."""
STOPPED_TIMEOUT_S = 4
"""The stopped-rank runs' --collective-timeout: what the test waits once a rank is stopped (the watched rank's
collective; the stopped rank is then told from /proc at once), idle, so short; every collective of the steps
before the stop completes within it, the ranks stepping together (gpt2-tiny's steps take milliseconds)."""


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    return {**env, "PYTHONPATH": str(ROOT), **extra}


def _lines(text: str) -> list[str]:
    """stderr's lines beyond the planner's statement (a run's first line, before any rank meets)."""
    return [line for line in text.splitlines() if line.strip() and not line.startswith("planning each step")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stopped_args(log: Path) -> list[str]:
    """A stopped-rank run's command line (after `paradyse_lab`): steps enough to be stopped mid-run."""
    return [*TRAIN[2:], "--steps", "100000", "--log-file", str(log), "--collective-timeout", str(STOPPED_TIMEOUT_S)]


def _logged_steps(log: Path) -> bool:
    """Whether a run's log holds three lines (its header and two steps)."""
    return log.is_file() and len(log.read_text().splitlines()) >= 3


class Stopped:
    """One run of two torchrun-style ranks, each a forked run, one of them stopped (SIGSTOP) once the run has
    logged a few steps; the rank whose end the test reads (the one not stopped), and what that end was."""

    def __init__(self, tmp_path: Path, stopped: int, forked: Forked):
        self.tmp_path, self.stopped, self.forked = tmp_path, stopped, forked
        self.log = tmp_path / "log.csv"
        self.name = tmp_path.name
        self.ids = [f"{self.name}-rank{r}" for r in (0, 1)]
        self.watched = self.ids[1 - stopped]
        self.ranks: list[int] = []
        self.returncode, self.err, self.took, self.failure = None, "", None, None

    def add(self) -> None:
        """The run's processes, as forked runs."""
        args = _stopped_args(self.log)
        port = _free_port()
        for rank, run_id in enumerate(self.ids):
            env = _env(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2",
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
            self.forked.add(run_id, args, self.tmp_path, env)

    def ready(self) -> bool:
        """Whether the run has logged three lines (its header and two steps); an error once a process of it ended."""
        if any(run_id in self.forked.ends() for run_id in self.ids) or self.forked.proc.poll() is not None:
            raise AssertionError((self.forked.ends(), [self.forked.stderr(run_id) for run_id in self.ids]))
        return _logged_steps(self.log)

    def stop(self) -> None:
        """Stop the rank (SIGSTOP)."""
        pids = self.forked.pids()["pids"]
        self.ranks = [pids[run_id] for run_id in self.ids]
        os.kill(self.ranks[self.stopped], signal.SIGSTOP)
        self.stopped_at = time.monotonic()

    def end(self) -> None:
        """The watched process's end (the forked runs', once it ended)."""
        end = self.forked.ends().get(self.watched)
        if end is None:
            self.failure = f"{self.watched} did not end"
            return
        self.returncode, self.err = end["code"], self.forked.stderr(self.watched)
        self.took = end["ended"] - self.stopped_at


class LaunchedHere:
    """`train --nproc 2` run by the CLI's `main` in this process (its stderr, fd 2 and `sys.stderr`, a file of
    its own; its working directory its folder; no torchrun variables), its rank 1 stopped (SIGSTOP) once the run
    has logged a few steps; the launcher's end, read by the test."""

    TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")

    def __init__(self, tmp_path: Path):
        self.tmp_path, self.log = tmp_path, tmp_path / "log.csv"
        self.before: set[int] = set()
        self.ranks: list[int] = []
        self.returncode, self.err, self.took, self.failure, self.stopped_at = None, "", None, None, None

    @staticmethod
    def _server() -> int | None:
        return forkserver._forkserver._forkserver_pid

    def run(self) -> None:
        """The launcher, until it returns its exit code."""
        from paradyse_lab.cli import main

        server = self._server()
        self.before = set(children(server)) if server else set()  # a fork server's ranks of other launches
        environ, cwd, stderr, saved = dict(os.environ), os.getcwd(), sys.stderr, os.dup(2)
        err = os.open(self.tmp_path / "stderr", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(err, 2)
        os.close(err)
        try:
            for name in self.TORCHRUN_VARS:
                os.environ.pop(name, None)
            os.chdir(self.tmp_path)
            sys.stderr = open(2, "w", buffering=1, closefd=False)
            self.returncode = main([*_stopped_args(self.log), "--nproc", "2"])
            ended = time.monotonic()
        finally:
            sys.stderr.flush()
            sys.stderr = stderr
            os.dup2(saved, 2)
            os.close(saved)
            os.chdir(cwd)
            os.environ.clear()
            os.environ.update(environ)
        self.err = (self.tmp_path / "stderr").read_text()
        if self.stopped_at is not None:
            self.took = ended - self.stopped_at

    def ready(self) -> bool:
        """Whether the run has logged three lines (its header and two steps); an error once the launcher ended."""
        if self.returncode is not None:
            raise AssertionError((self.returncode, (self.tmp_path / "stderr").read_text()))
        return _logged_steps(self.log)

    def stop(self) -> None:
        """Stop rank 1 (SIGSTOP): the fork server's children this launch forked, in order (rank 1 later)."""
        self.ranks = sorted(set(children(self._server())) - self.before)
        assert len(self.ranks) == 2, self.ranks
        os.kill(self.ranks[1], signal.SIGSTOP)
        self.stopped_at = time.monotonic()


def _stop_when_ready(runs: list, deadline: float) -> None:
    """Stop each run's rank as soon as the run logged its steps; a run's failure is kept for its own test."""
    pending = list(runs)
    while pending and time.monotonic() < deadline:
        for run in list(pending):
            try:
                if run.ready():
                    run.stop()
                    pending.remove(run)
            except Exception as err:  # noqa: BLE001 - failed in its own test
                run.failure = repr(err)
                pending.remove(run)
        time.sleep(0.1)
    for run in pending:
        run.failure = "the run did not log three lines"


CANNOT_MEET = ("unresolvable", "busy-port", "no-peers")


@pytest.fixture(scope="module")
def hang_runs(tmp_path_factory) -> tuple[dict, dict]:
    """Every run of this module at once: the two torchrun-style stopped-rank runs and the three environments that
    cannot meet (RANK 0 of WORLD_SIZE 2 with a 3 s timeout, a MASTER_PORT that a socket of this process listens on,
    a MASTER_ADDR that does not resolve) forked from one interpreter (forked_runs.py), and meanwhile the `--nproc`
    run in this process, each rank stopped once its run logged three steps (by a thread, while the launcher runs
    here); a run's failure is kept for its own test. ({name: stopped run}, {case: (its end, its seconds,
    failure)})."""
    forked = Forked(tmp_path_factory.mktemp("forked"), _env(), WAIT_S)
    runs = {"torchrun-1": Stopped(tmp_path_factory.mktemp("torchrun-1"), 1, forked),
            "torchrun-0": Stopped(tmp_path_factory.mktemp("torchrun-0"), 0, forked)}
    here = LaunchedHere(tmp_path_factory.mktemp("nproc"))
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    for run in runs.values():
        run.add()
    for case in CANNOT_MEET:
        port = {"no-peers": _free_port(), "busy-port": busy.getsockname()[1], "unresolvable": _free_port()}[case]
        addr = "no-such-host.invalid" if case == "unresolvable" else "127.0.0.1"
        env = _env(RANK="0", WORLD_SIZE="2", MASTER_ADDR=addr, MASTER_PORT=str(port))
        forked.add(case, [*TRAIN[2:], "--steps", "2", "--collective-timeout", "3"], tmp_path_factory.mktemp(case), env)
    try:
        forked.start()
        deadline = time.monotonic() + WAIT_S
        stopper = threading.Thread(target=_stop_when_ready, args=([*runs.values(), here], deadline), daemon=True)
        stopper.start()
        here.run()
        stopper.join(max(0.0, deadline - time.monotonic()))
        awaited = [*CANNOT_MEET, *(run.watched for run in runs.values() if run.failure is None)]
        while time.monotonic() < deadline and forked.proc.poll() is None and \
                not all(run_id in forked.ends() for run_id in awaited):
            time.sleep(0.2)
        for run in runs.values():
            if run.failure is None:
                run.end()
        forked.close()  # the stopped torchrun ranks are killed now, and the forked runs' process ends
        yield {**runs, "nproc": here}, _cannot_meet(forked)
    finally:
        busy.close()
        forked.close()


def _cannot_meet(forked: Forked) -> dict[str, tuple[subprocess.CompletedProcess | None, float, str | None]]:
    """{case: (its end, its seconds from its start, failure)} of the environments that cannot meet."""
    ends, started = forked.ends(), forked.pids().get("started")
    out = {}
    for case in CANNOT_MEET:
        if case not in ends:
            out[case] = (None, WAIT_S, "not ended")
            continue
        done = subprocess.CompletedProcess(TRAIN, ends[case]["code"], "", forked.stderr(case))
        out[case] = (done, ends[case]["ended"] - started, None)
    return out


@pytest.fixture(scope="module")
def stopped_runs(hang_runs) -> dict:
    return hang_runs[0]


@pytest.fixture(scope="module")
def cannot_meet(hang_runs) -> dict[str, tuple[subprocess.CompletedProcess | None, float, str | None]]:
    return hang_runs[1]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_stopped_rank_ends_the_run_within_the_collective_timeout_naming_it(stopped_runs):
    """Rank 1 is stopped (SIGSTOP) mid-run: rank 0's next collective waits `STOPPED_TIMEOUT_S`, then every
    rank is gone, and the launcher says in one line that rank 1 is stopped; exit 1. Before the collective timeout
    existed, rank 0 waited torch's 30 minutes."""
    run = stopped_runs["nproc"]
    assert run.failure is None, run.failure
    err = run.err
    assert run.returncode == 1, (run.returncode, err)
    assert len(_lines(err)) == 1, err
    assert "rank 1 is stopped" in err and "--collective-timeout" in err, err
    assert run.took < 60, run.took  # 4 s of timeout (the peer told stopped from /proc), reports and teardown
    assert not [p for p in run.ranks if alive(p)]


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
    collective waits `STOPPED_TIMEOUT_S`, and it ends with one line naming the stopped rank, exit 1: the ranks
    share a machine, so the peer reads the stopped rank's state in /proc at once (the heartbeat watch, and the
    store whose host is the stopped rank 0, are for peers of other machines: test_heartbeat.py). Before the ranks'
    heartbeats, it said only that 'a peer rank' did not answer."""
    run, other = stopped_runs[f"torchrun-{stopped}"], 1 - stopped
    assert run.failure is None, run.failure
    err = run.err
    assert run.returncode == 1, (run.returncode, err)
    assert len(_lines(err)) == 1, err
    waited = f"rank {other} waited more than {STOPPED_TIMEOUT_S} s (--collective-timeout) for rank {stopped},"
    assert waited in err, err
    if stopped == 0:  # told from /proc: the store's host (rank 0) is not left to the store's silence
        assert "whose heartbeat stopped" in err and "serves the ranks' store" not in err, err
    assert run.took < 60, run.took  # 4 s of timeout, the stopped rank told from /proc at once, teardown
