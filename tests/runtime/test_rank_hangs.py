"""No hang: a rank that stops answering ends an `--nproc` run within `--collective-timeout` (every rank gone, one
line naming it, exit 1), and ranks of a torchrun-style environment that cannot meet (no peers, a busy
MASTER_PORT, a MASTER_ADDR that does not resolve) end with one line within it. Each run (the `--nproc` run's
launcher, which forks its ranks from a fork server of its own, each torchrun-style rank, each environment that
cannot meet) is a process of its own, forked from one interpreter that imported the train command once,
all started at once in one module fixture. Every process has a time limit of its own and the
test a limit on its wait, so a hang fails the test instead of the suite."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from forked_runs import Forked, alive, children

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ["-m", "paradyse_lab", "train", "--model", "gpt2-tiny", "--dataset", "uniform:16:16", "--max-len", "16",
         "--policy", "static:megatron_ts", "--no-progress"]
WAIT_S = 240
"""The test's own limit on a subprocess: far above what a bounded end takes on a loaded machine."""
STOPPED_TIMEOUT_S = 2
"""The stopped-rank runs' --collective-timeout: what the test waits once a rank is stopped (the watched rank's
collective, then its heartbeat watch), idle, so short; every collective of the steps before the stop completes
within it, the ranks stepping together (gpt2-tiny's steps take milliseconds)."""


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    return {**env, "PYTHONPATH": str(ROOT), **extra}


def _lines(text: str) -> list[str]:
    """stderr's lines beyond the planner's statement (a run's first line, before any rank meets)."""
    return [line for line in text.splitlines() if line.strip() and not line.startswith("planning each step")]


def _launcher_ranks(launcher: int) -> list[int]:
    """The ranks of a `train --nproc` launcher: the children of its fork server (the launcher's child that runs
    multiprocessing's forkserver), in the order they were forked."""
    servers = []
    for pid in children(launcher):
        try:
            if b"multiprocessing.forkserver" in Path(f"/proc/{pid}/cmdline").read_bytes():
                servers.append(pid)
        except OSError:
            continue
    return sorted(rank for server in servers for rank in children(server))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Stopped:
    """One run whose rank is stopped (SIGSTOP) once the run has logged a few steps: `train --nproc 2` (a launcher
    and its two ranks) or two torchrun-style ranks, each a forked run; the process whose end the test reads (the
    launcher, or the rank not stopped), and what that end was."""

    def __init__(self, tmp_path: Path, torchrun: bool, stopped: int, forked: Forked):
        self.tmp_path, self.torchrun, self.stopped, self.forked = tmp_path, torchrun, stopped, forked
        self.log = tmp_path / "log.csv"
        self.name = tmp_path.name
        self.ids = [f"{self.name}-rank{r}" for r in (0, 1)] if torchrun else [self.name]
        self.watched = self.ids[1 - stopped] if torchrun else self.name
        self.ranks: list[int] = []
        self.returncode, self.err, self.took, self.failure = None, "", None, None

    def add(self) -> None:
        """The run's processes, as forked runs."""
        args = [*TRAIN[2:], "--steps", "100000", "--log-file", str(self.log), "--collective-timeout",
                str(STOPPED_TIMEOUT_S)]
        if not self.torchrun:
            self.forked.add(self.name, [*args, "--nproc", "2"], self.tmp_path, _env())
            return
        port = _free_port()
        for rank, run_id in enumerate(self.ids):
            env = _env(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2",
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
            self.forked.add(run_id, args, self.tmp_path, env)

    def ready(self) -> bool:
        """Whether the run has logged three lines (its header and two steps); an error once a process of it ended."""
        if any(run_id in self.forked.ends() for run_id in self.ids) or self.forked.proc.poll() is not None:
            raise AssertionError((self.forked.ends(), [self.forked.stderr(run_id) for run_id in self.ids]))
        return self.log.is_file() and len(self.log.read_text().splitlines()) >= 3

    def stop(self) -> None:
        """Stop the rank (SIGSTOP)."""
        pids = self.forked.pids()["pids"]
        if self.torchrun:
            self.ranks = [pids[run_id] for run_id in self.ids]
        else:
            self.ranks = _launcher_ranks(pids[self.name])
            assert len(self.ranks) == 2, self.ranks
        os.kill(self.ranks[self.stopped], signal.SIGSTOP)  # a launcher's ranks are forked in order: rank 1 later
        self.stopped_at = time.monotonic()

    def end(self) -> None:
        """The watched process's end (the forked runs', once it ended)."""
        end = self.forked.ends().get(self.watched)
        if end is None:
            self.failure = f"{self.watched} did not end"
            return
        self.returncode, self.err = end["code"], self.forked.stderr(self.watched)
        self.took = end["ended"] - self.stopped_at


CANNOT_MEET = ("unresolvable", "busy-port", "no-peers")


@pytest.fixture(scope="module")
def hang_runs(tmp_path_factory) -> tuple[dict[str, Stopped], dict]:
    """Every run of this module, forked at once from one interpreter (forked_runs.py): the three stopped-rank runs
    (each rank stopped once its run logged three steps) and the three environments that cannot meet (RANK 0 of
    WORLD_SIZE 2 with a 3 s timeout, a MASTER_PORT that a socket of this process listens on, a MASTER_ADDR that does
    not resolve); a run's failure is kept for its own test. ({name: stopped run}, {case: (its end, its seconds,
    failure)})."""
    forked = Forked(tmp_path_factory.mktemp("forked"), _env(), WAIT_S)
    runs = {"nproc": Stopped(tmp_path_factory.mktemp("nproc"), False, 1, forked),
            "torchrun-1": Stopped(tmp_path_factory.mktemp("torchrun-1"), True, 1, forked),
            "torchrun-0": Stopped(tmp_path_factory.mktemp("torchrun-0"), True, 0, forked)}
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
        pending, deadline = list(runs.values()), time.monotonic() + WAIT_S
        while pending and time.monotonic() < deadline:  # each rank stopped as soon as its run logged its steps
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
        awaited = [*CANNOT_MEET, *(run.watched for run in runs.values() if run.failure is None)]
        while time.monotonic() < deadline and forked.proc.poll() is None and \
                not all(run_id in forked.ends() for run_id in awaited):
            time.sleep(0.2)
        for run in runs.values():
            if run.failure is None:
                run.end()
        forked.close()  # the stopped torchrun ranks are killed now, and the forked runs' process ends
        yield runs, _cannot_meet(forked)
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
def stopped_runs(hang_runs) -> dict[str, Stopped]:
    return hang_runs[0]


@pytest.fixture(scope="module")
def cannot_meet(hang_runs) -> dict[str, tuple[subprocess.CompletedProcess | None, float, str | None]]:
    return hang_runs[1]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_stopped_rank_ends_the_run_within_the_collective_timeout_naming_it(stopped_runs):
    """Rank 1 is stopped (SIGSTOP) mid-run: rank 0's next collective waits 2 s (`STOPPED_TIMEOUT_S`), then every
    rank is gone, and the launcher says in one line that rank 1 is stopped; exit 1. Before the collective timeout
    existed, rank 0 waited torch's 30 minutes."""
    run = stopped_runs["nproc"]
    assert run.failure is None, run.failure
    err = run.err
    assert run.returncode == 1, (run.returncode, err)
    assert len(_lines(err)) == 1, err
    assert "rank 1 is stopped" in err and "--collective-timeout" in err, err
    assert run.took < 60, run.took  # 2 s of timeout, 4 of heartbeat watch, a few of reports and teardown
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
    collective waits 2 s, and it ends with one line naming the stopped rank, exit 1 (rank 1 by its heartbeat;
    rank 0 as the store's host, the store then silent too). Before the ranks' heartbeats, it said only that 'a
    peer rank' did not answer."""
    run, other = stopped_runs[f"torchrun-{stopped}"], 1 - stopped
    assert run.failure is None, run.failure
    err = run.err
    assert run.returncode == 1, (run.returncode, err)
    assert len(_lines(err)) == 1, err
    waited = f"rank {other} waited more than {STOPPED_TIMEOUT_S} s (--collective-timeout) for rank {stopped},"
    assert waited in err, err
    assert run.took < 60, run.took  # 2 s of timeout, 4 s (at most 9) of watching the peers' heartbeats, teardown
