"""Each rank's heartbeat in its process group's store, so that a rank whose collective timed out can name the
peers that stopped answering however the ranks were started: a torchrun rank has no other view of its peers.

A daemon thread adds 1 to the rank's counter in the store every `BEAT_S` seconds while the process runs (a
rank waiting inside a collective still beats; a stopped, hung or dead process does not). A rank whose collective
timed out reads every peer's counter twice, `WATCH_S` apart, and names the peers whose counter did not move.
Counters, not timestamps: the ranks' clocks need not agree.

A peer on this machine is told at once instead: each rank also puts its process's identity in the store (boot,
pid namespace, pid and start time), the beat thread reads those of the peers on its node, and a rank whose
collective timed out reads their state in /proc: when every peer is a process of this machine that is stopped
(SIGSTOP) or gone, no watch is needed (the watch's seconds, and a read of a store whose stopped host would never
answer, saved)."""

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
_PROC_PREFIX = "paradyse/process/"
STOPPED_STATES = frozenset("Tt")
"""/proc states of a stopped process: by a signal (SIGSTOP, SIGTSTP), by a tracer (a debugger)."""
_ENDED_STATES = STOPPED_STATES | frozenset("ZX")
"""/proc states of a process that will not answer: stopped, zombie, dead."""


def _key(rank: int) -> str:
    return f"{_PREFIX}{rank}"


def _proc_key(rank: int) -> str:
    return f"{_PROC_PREFIX}{rank}"


def stat_fields(pid: int | str) -> list[str] | None:
    """/proc/PID/stat's fields after the command name (state first), or None when there is no such process (or no
    /proc: not Linux). A stat this process may not read (/proc mounted with `hidepid`) raises PermissionError."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return None


def _machine() -> str | None:
    """This kernel's boot and this process's pid namespace: two processes with equal values see each other's pids
    in /proc (None where that cannot be told: not Linux)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        return f"{boot}/{os.readlink('/proc/self/ns/pid')}"
    except OSError:
        return None


def process_identity() -> str | None:
    """'MACHINE PID STARTTIME' of this process (`_machine`; the start time in clock ticks after boot, so that a
    reused pid is not taken for it), or None where it cannot be told."""
    machine = _machine()
    try:
        fields = stat_fields("self")
    except OSError:
        return None
    if machine is None or fields is None:
        return None
    return f"{machine} {os.getpid()} {fields[19]}"


def ended_process(identity: str, machine: str | None) -> bool:
    """Whether the process of `identity` (`process_identity`) runs on `machine` and is stopped or gone: True only
    on that evidence (a process of another machine, a running one, or one whose stat this process may not read:
    False)."""
    where, pid, started = identity.rsplit(" ", 2)
    if machine is None or where != machine:
        return False
    try:
        fields = stat_fields(pid)
    except OSError:
        return False
    return fields is None or fields[19] != started or fields[0] in _ENDED_STATES


def node_peers(rank: int, world: int, env=os.environ) -> list[int]:
    """The other ranks on this rank's node: torchrun's (and the local launcher's) LOCAL_RANK and LOCAL_WORLD_SIZE,
    ranks of a node being consecutive; none when they are not set."""
    try:
        local, local_world = int(env["LOCAL_RANK"]), int(env["LOCAL_WORLD_SIZE"])
    except (KeyError, ValueError):
        return []
    first = rank - local
    return [r for r in range(max(first, 0), min(first + local_world, world)) if r != rank]


class Heartbeat:
    """This rank's beat in `store` (started at once, stopped by `stop`) and its view of the peers' beats; `node`:
    the peers that run on this rank's machine (default: by LOCAL_RANK and LOCAL_WORLD_SIZE, `node_peers`), whose
    state /proc tells."""

    def __init__(self, store, rank: int, world: int, beat_s: float = BEAT_S, node: list[int] | None = None):
        self._store, self._rank, self._world, self._beat_s = store, rank, world, beat_s
        self._stopped = threading.Event()
        self._machine = _machine()
        identity = process_identity()
        self._node = {r: None for r in (node_peers(rank, world) if node is None else node)} if identity else {}
        if identity:
            store.set(_proc_key(rank), identity)
        store.add(_key(rank), 1)  # a first beat before any collective
        self._thread = threading.Thread(target=self._beat, name="paradyse-heartbeat", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        self._read_node_identities()  # at once: a peer stopped before this thread's first beat is still told
        while not self._stopped.wait(self._beat_s):
            try:
                self._store.add(_key(self._rank), 1)
            except Exception:  # noqa: BLE001 (the store is gone: the group was left, or its host ended)
                return
            self._read_node_identities()

    def _read_node_identities(self) -> None:
        """The identities of the node's peers that put theirs in the store already (`check` does not block); a read
        that fails leaves those peers to the watch and the beats go on."""
        try:
            for r in [r for r, known in self._node.items() if known is None]:
                if self._store.check([_proc_key(r)]):
                    self._node[r] = self._store.get(_proc_key(r)).decode()
        except Exception:  # noqa: BLE001 (the store is gone or slow: the next beat tries again)
            return

    def ended_peers(self) -> list[int]:
        """The peers that are processes of this machine, stopped (SIGSTOP) or gone, as /proc tells now."""
        return [r for r, identity in sorted(self._node.items())
                if identity is not None and ended_process(identity, self._machine)]

    def stop(self) -> None:
        """Stop beating (before the group, and with it the store, is left)."""
        self._stopped.set()

    def silent_peers(self, watch_s: float = WATCH_S) -> list[int] | None:
        """The peers whose counter did not move in `watch_s` seconds, or None when the store did not answer (its
        host is stopped or gone: a blocked read would wait the store's whole timeout): the first read not within
        `STORE_ANSWER_S`, or the second not within that after the watch. When every peer is a process of this
        machine that is stopped or gone (`ended_peers`), those at once, without the watch."""
        peers = [r for r in range(self._world) if r != self._rank]
        ended = self.ended_peers()
        if peers and ended == peers:
            return ended
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
