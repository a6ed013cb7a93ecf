"""Each rank's heartbeat in its process group's store, so that a rank whose collective timed out can name the
peers that stopped answering however the ranks were started: a torchrun rank has no other view of its peers.

A daemon thread adds 1 to the rank's counter in the store every `BEAT_S` seconds while the process runs (a
rank waiting inside a collective still beats; a stopped, hung or dead process does not). A rank whose collective
timed out reads every peer's counter twice, `WATCH_S` apart, and names the peers whose counter did not move.
Counters, not timestamps: the ranks' clocks need not agree."""

from __future__ import annotations

import os
import threading
import time

BEAT_S = 1.0
"""Seconds between two beats of a rank."""
WATCH_S = 4.0
"""How long a rank whose collective timed out watches its peers' counters: four beats, so that a live rank on a
loaded machine (its beat thread late by a few seconds) still moves its counter at least once."""
STORE_ANSWER_S = 5.0
"""How long a rank whose collective timed out waits for the store to answer its first read of the peers' counters
(milliseconds when its host runs, a few seconds on a loaded machine): past it, the store's host is taken as stopped
or gone at once, rather than after the whole watch as well."""
_PREFIX = "paradyse/heartbeat/"


def _key(rank: int) -> str:
    return f"{_PREFIX}{rank}"


class Heartbeat:
    """This rank's beat in `store` (started at once, stopped by `stop`) and its view of the peers' beats."""

    def __init__(self, store, rank: int, world: int, beat_s: float = BEAT_S):
        self._store, self._rank, self._world, self._beat_s = store, rank, world, beat_s
        self._stopped = threading.Event()
        store.add(_key(rank), 1)  # a first beat before any collective
        self._thread = threading.Thread(target=self._beat, name="paradyse-heartbeat", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stopped.wait(self._beat_s):
            try:
                self._store.add(_key(self._rank), 1)
            except Exception:  # noqa: BLE001 (the store is gone: the group was left, or its host ended)
                return

    def stop(self) -> None:
        """Stop beating (before the group, and with it the store, is left)."""
        self._stopped.set()

    def silent_peers(self, watch_s: float = WATCH_S) -> list[int] | None:
        """The peers whose counter did not move in `watch_s` seconds, or None when the store did not answer (its
        host is stopped or gone: a blocked read would wait the store's whole timeout): the first read not within
        `STORE_ANSWER_S`, or the second not within that after the watch."""
        peers = [r for r in range(self._world) if r != self._rank]
        found: list[list[int]] = []
        first_read = threading.Event()

        def watch() -> None:
            try:
                before = [self._store.add(_key(r), 0) for r in peers]  # adding 0 reads without blocking
                first_read.set()
                time.sleep(watch_s)
                after = [self._store.add(_key(r), 0) for r in peers]
            except Exception:  # noqa: BLE001 (the store is gone)
                first_read.set()
                return
            found.append([r for r, b, a in zip(peers, before, after) if a == b])

        reader = threading.Thread(target=watch, name="paradyse-heartbeat-watch", daemon=True)
        reader.start()
        if not first_read.wait(STORE_ANSWER_S):
            return None
        reader.join(watch_s + STORE_ANSWER_S)
        return found[0] if found else None


def store_host_rank() -> int | None:
    """The rank whose process serves the store under torchrun's environment (rank 0, with `env://`), or None
    when another process serves it (torchrun's own agent, a local launcher)."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true":
        return None
    return 0
