"""No hang: a rank that stops answering ends an `--nproc` run within `--collective-timeout` (every rank gone, one
line naming it, exit 1), and ranks of a torchrun-style environment that cannot meet (no peers, a busy
MASTER_PORT, a MASTER_ADDR that does not resolve) end with one line within it. Each case is a subprocess with a
timeout of a few seconds and a limit on the test's own wait, so a hang fails the test instead of the suite."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
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


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_stopped_rank_ends_the_run_within_the_collective_timeout_naming_it(tmp_path):
    """Rank 1 is stopped (SIGSTOP) mid-run: rank 0's next collective waits 5 s, then every rank is gone, and
    the launcher says in one line that rank 1 is stopped; exit 1. Before the collective timeout existed, rank 0
    waited torch's 30 minutes."""
    log = tmp_path / "log.csv"
    proc = subprocess.Popen([sys.executable, *TRAIN, "--nproc", "2", "--steps", "100000", "--log-file", str(log),
                             "--collective-timeout", "5"], cwd=tmp_path, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline and (not log.is_file() or len(log.read_text().splitlines()) < 3):
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.2)
        ranks = sorted(p for p in _children(proc.pid) if _is_rank(p))
        assert len(ranks) == 2, ranks
        os.kill(ranks[1], signal.SIGSTOP)  # ranks start in order: the later pid is rank 1
        stopped_at = time.monotonic()
        out, err = proc.communicate(timeout=WAIT_S)
        took = time.monotonic() - stopped_at
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 1, (proc.returncode, err)
    assert len(_lines(err)) == 1, err
    assert "rank 1 is stopped" in err and "--collective-timeout" in err, err
    assert took < 60, took  # 5 s of timeout, a few of reports and teardown
    assert not [p for p in ranks if _alive(p)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("case", ["no-peers", "busy-port", "unresolvable"])
def test_a_torchrun_environment_that_cannot_meet_ends_with_one_line(tmp_path, case):
    """RANK 0 of WORLD_SIZE 2 with no rank 1 (waits 3 s for it), a MASTER_PORT another process listens on, a
    MASTER_ADDR that does not resolve: one line, no DistNetworkError traceback, within a bounded time."""
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    port = {"no-peers": _free_port(), "busy-port": busy.getsockname()[1], "unresolvable": _free_port()}[case]
    addr = "no-such-host.invalid" if case == "unresolvable" else "127.0.0.1"
    env = _env(RANK="0", WORLD_SIZE="2", MASTER_ADDR=addr, MASTER_PORT=str(port))
    start = time.monotonic()
    try:
        done = subprocess.run([sys.executable, *TRAIN, "--steps", "2", "--collective-timeout", "3"], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=WAIT_S)
    finally:
        busy.close()
    assert len(_lines(done.stderr)) == 1, done.stderr
    assert "Traceback" not in done.stderr and "DistNetworkError" not in done.stderr, done.stderr
    if case == "unresolvable":
        assert done.returncode == 2 and "MASTER_ADDR" in done.stderr, done.stderr
    else:
        assert done.returncode == 1 and "did not meet" in done.stderr, done.stderr
        assert ("address already in use" if case == "busy-port" else "1/2 clients joined") in done.stderr, done.stderr
    assert time.monotonic() - start < 120



@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SIGSTOP")
@pytest.mark.parametrize("stopped", [1, 0])
def test_a_stopped_torchrun_rank_is_named_by_its_peer(tmp_path, stopped):
    """Two ranks started as torchrun starts them (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; rank 0 serves the
    store, as `env://` does); one is stopped (SIGSTOP) once both have trained a few steps: the other's next
    collective waits 5 s, and it ends with one line naming the stopped rank, exit 1 (rank 1 by its heartbeat;
    rank 0 as the store's host, the store then silent too). Before the ranks' heartbeats, it said only that 'a
    peer rank' did not answer."""
    other = 1 - stopped
    port = _free_port()
    log = tmp_path / "log.csv"
    procs = []
    try:
        for rank in (0, 1):
            env = _env(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2",
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
            procs.append(subprocess.Popen([sys.executable, *TRAIN, "--steps", "100000", "--log-file", str(log),
                                           "--collective-timeout", "5"], cwd=tmp_path, env=env,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline and (not log.is_file() or len(log.read_text().splitlines()) < 3):
            assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
            time.sleep(0.2)
        os.kill(procs[stopped].pid, signal.SIGSTOP)
        stopped_at = time.monotonic()
        _, err = procs[other].communicate(timeout=WAIT_S)
        took = time.monotonic() - stopped_at
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.communicate()
    assert procs[other].returncode == 1, (procs[other].returncode, err)
    assert len(_lines(err)) == 1, err
    assert f"rank {other} waited more than 5 s (--collective-timeout) for rank {stopped}," in err, err
    assert took < 60, took  # 5 s of timeout, 4 s (at most 9) of watching the peers' heartbeats, teardown
