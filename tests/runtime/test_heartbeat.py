"""A rank's view of its peers' heartbeats (`Heartbeat.silent_peers`) over a store in this process: the peers whose
counter did not move are named, and a store that does not answer is told at once, without waiting the watch too.
The same over a real store of stopped ranks: test_rank_hangs.py."""

from __future__ import annotations

import threading
import time

from paradyse_lab.runtime.launch import heartbeat
from paradyse_lab.runtime.launch.heartbeat import Heartbeat


class CountingStore:
    """A store's `add` (a counter per key) in this process; `answers` cleared: every `add` blocks, as a request to
    a store whose host is stopped does."""

    def __init__(self):
        self.counts: dict[str, int] = {}
        self.lock = threading.Lock()
        self.answers = threading.Event()
        self.answers.set()

    def add(self, key: str, amount: int) -> int:
        self.answers.wait()
        with self.lock:
            self.counts[key] = self.counts.get(key, 0) + amount
            return self.counts[key]


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
