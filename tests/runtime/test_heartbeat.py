"""A rank's view of its peers' heartbeats (`Heartbeat.silent_peers`) over a store in this process: the peers whose
counter did not move are named, and a store that does not answer is told at once, without waiting the watch too.
A peer that is a stopped or ended process of this machine is named at once, from /proc, without the watch. The same
over a real store of stopped ranks: test_rank_hangs.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta

import pytest
import torch.distributed as dist

from paradyse_lab.runtime.launch import heartbeat
from paradyse_lab.runtime.launch.heartbeat import Heartbeat
from paradyse_lab.runtime.launch.ranks import _silent_peer_line


class CountingStore:
    """A store's `add` (a counter per key) in this process; `answers` cleared: every `add` blocks, as a request to
    a store whose host is stopped does."""

    def __init__(self):
        self.counts: dict[str, int] = {}
        self.lock = threading.Lock()
        self.answers = threading.Event()
        self.answers.set()

        self.values: dict[str, bytes] = {}

    def add(self, key: str, amount: int) -> int:
        self.answers.wait()
        with self.lock:
            self.counts[key] = self.counts.get(key, 0) + amount
            return self.counts[key]

    def set(self, key: str, value: str) -> None:
        self.answers.wait()
        self.values[key] = value.encode()

    def check(self, keys: list[str]) -> bool:
        self.answers.wait()
        return all(k in self.values for k in keys)

    def get(self, key: str) -> bytes:
        self.answers.wait()
        return self.values[key]


def test_the_peers_whose_counter_did_not_move_are_named():
    """Rank 0 of 3 watches: rank 1 beats, rank 2 does not."""
    store = CountingStore()
    beats = [Heartbeat(store, r, 3, beat_s=0.02) for r in (0, 1)]
    store.add("paradyse/heartbeat/2", 1)  # rank 2 beat once, then stopped
    try:
        assert beats[0].silent_peers(watch_s=0.3) == [2]
    finally:
        for beat in beats:
            beat.stop()


def test_a_store_that_does_not_answer_is_told_without_waiting_the_watch(monkeypatch):
    """The store's host is stopped: the first read of the counters never returns, and the answer (None: the store
    is silent) comes once `STORE_ANSWER_S` passed, not the watch's seconds later (before, it waited the watch and
    the grace: 4 + 5 s under the defaults)."""
    monkeypatch.setattr(heartbeat, "STORE_ANSWER_S", 0.2)
    store = CountingStore()
    beat = Heartbeat(store, 1, 2, beat_s=0.02)
    store.answers.clear()
    try:
        started = time.monotonic()
        assert beat.silent_peers(watch_s=30.0) is None
        assert time.monotonic() - started < 15.0
    finally:
        beat.stop()
        store.answers.set()


def _identity(pid: int) -> str:
    """`heartbeat.process_identity` of process `pid` (this machine's)."""
    with open(f"/proc/{pid}/stat") as f:
        started = f.read().rsplit(")", 1)[1].split()[19]
    return f"{heartbeat._machine()} {pid} {started}"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_stopped_or_ended_peer_of_this_machine_is_named_at_once_and_a_running_one_is_watched():
    """Rank 1 of 2 is a process of this machine (its identity in the store, as its heartbeat puts it): stopped
    (SIGSTOP) or ended, rank 0 names it at once, however long the watch; running, it is not taken as ended, and the
    watch tells (here: its counter does not move). Before, every answer took the watch's seconds."""
    peer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    store = CountingStore()
    beat = None
    try:
        store.set("paradyse/process/1", _identity(peer.pid))
        store.add("paradyse/heartbeat/1", 1)
        beat = Heartbeat(store, 0, 2, beat_s=0.02, node=[1])
        deadline = time.monotonic() + 30
        while beat._node.get(1) is None and time.monotonic() < deadline:  # read by the beat thread
            time.sleep(0.02)
        assert beat.ended_peers() == []  # running
        started = time.monotonic()
        assert beat.silent_peers(watch_s=0.3) == [1] and time.monotonic() - started >= 0.3  # watched
        os.kill(peer.pid, signal.SIGSTOP)
        while heartbeat.stat_fields(peer.pid)[0] != "T" and time.monotonic() < deadline:  # the signal delivered
            time.sleep(0.01)
        started = time.monotonic()
        assert beat.silent_peers(watch_s=30.0) == [1] and time.monotonic() - started < 15.0
        peer.kill()
        peer.wait()
        assert beat.ended_peers() == [1]
    finally:
        if beat is not None:
            beat.stop()
        peer.kill()
        peer.wait()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_what_an_identity_tells_of_its_process(monkeypatch):
    """This process's own identity is the one the tests build (`_identity`) and reads as running; another machine's,
    a reused pid (another start time), a zombie (killed, not yet reaped) and a stat this process may not read
    (/proc's `hidepid`): running for another machine and an unreadable stat, ended for the other two."""
    machine, mine = heartbeat._machine(), heartbeat.process_identity()
    assert mine == _identity(os.getpid())
    assert not heartbeat.ended_process(mine, machine)
    where, pid, started = mine.rsplit(" ", 2)
    assert not heartbeat.ended_process(f"another-boot/pid:[1] {pid} {started}", machine)
    assert heartbeat.ended_process(f"{where} {pid} {int(started) + 1}", machine)
    peer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        zombie = _identity(peer.pid)
        peer.kill()
        deadline = time.monotonic() + 30
        while heartbeat.stat_fields(peer.pid)[0] != "Z" and time.monotonic() < deadline:  # killed, not reaped
            time.sleep(0.01)
        assert heartbeat.ended_process(zombie, machine)
    finally:
        peer.kill()
        peer.wait()

    def hidden(pid):
        raise PermissionError(f"/proc/{pid}/stat")

    monkeypatch.setattr(heartbeat, "stat_fields", hidden)
    assert not heartbeat.ended_process(mine, machine)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_node_peers_identity_is_read_before_the_first_beat():
    """The beat thread reads the node peers' identities as it starts, not one beat later: a peer stopped within the
    first beat (rank 0, which serves the store, then never answers again) is still told from /proc."""
    store = CountingStore()
    store.set("paradyse/process/1", heartbeat.process_identity())
    beat = Heartbeat(store, 0, 2, beat_s=60.0, node=[1])
    try:
        deadline = time.monotonic() + 10
        while beat._node.get(1) is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert beat._node[1] == heartbeat.process_identity()
    finally:
        beat.stop()


def test_a_ranks_node_peers_are_its_consecutive_local_ranks():
    assert heartbeat.node_peers(5, 8, {"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4"}) == [4, 6, 7]
    assert heartbeat.node_peers(0, 2, {"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"}) == [1]
    assert heartbeat.node_peers(1, 2, {}) == []  # not told: none taken for local


def test_over_a_real_store_a_peer_whose_counter_stops_is_named_and_the_lines_read_so(monkeypatch):
    """The watch over torch's TCPStore (this process serving it, each rank a client of its own): rank 1 stops
    beating and rank 0 names it; the line of a silent peer, and of a store that did not answer (None: rank 0 named
    as the store's host under torchrun's `env://`). These paths' end-to-end runs (test_rank_hangs.py) go through
    /proc instead: there the stopped rank is a process of the same machine."""
    server = dist.TCPStore("127.0.0.1", 0, None, True, timeout=timedelta(seconds=30))
    clients = [dist.TCPStore("127.0.0.1", server.port, None, False, timeout=timedelta(seconds=30)) for _ in (0, 1)]
    beats = [Heartbeat(c, r, 2, beat_s=0.02, node=[]) for r, c in enumerate(clients)]
    try:
        beats[1].stop()
        time.sleep(0.1)  # its thread's last beat landed
        assert beats[0].silent_peers(watch_s=0.3) == [1]
    finally:
        beats[0].stop()

    class Watched:
        def __init__(self, silent):
            self.silent = silent

        def silent_peers(self):
            return self.silent

    line = _silent_peer_line(0, 4, Watched([1]), local=False)
    assert line == ("rank 0 waited more than 4 s (--collective-timeout) for rank 1, whose heartbeat stopped "
                    "(stopped, hung, or dead)"), line
    monkeypatch.delenv("TORCHELASTIC_USE_AGENT_STORE", raising=False)
    line = _silent_peer_line(1, 4, Watched(None), local=False)
    assert line == ("rank 1 waited more than 4 s (--collective-timeout) for rank 0, which serves the ranks' store and "
                    "did not answer it either (stopped, hung, or dead)"), line
