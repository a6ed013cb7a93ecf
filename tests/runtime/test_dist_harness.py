"""The distributed harness itself (dist_harness.py): the ranks run only the cases asked for, and each case's
outcome and own time come back, and the ranks' CPU seconds.

Run: `python -m pytest -q tests/runtime/test_dist_harness.py` (one spawned rank, about 3 s).
"""

from __future__ import annotations

import socket
import threading
from types import SimpleNamespace

import dist_harness
from dist_harness import START, run_world


def test_only_the_named_cases_run_and_each_reports_its_outcome_and_time(tmp_path, monkeypatch):
    trace = tmp_path / "not-selected-ran"
    monkeypatch.setenv("HARNESS_TRACE", str(trace))  # spawned ranks inherit the environment
    world = run_world(1, "harness_cases", ["passes", "fails", "preloaded", "pinned"], timeout_s=120)
    assert world.errors["passes"] is None
    assert world.errors["preloaded"] is None, world.errors["preloaded"]  # the forkserver imported the preload list
    assert world.errors["pinned"] is None, world.errors["pinned"]  # the rank's threads on one CPU
    assert "rank 0" in world.errors["fails"] and "failed on purpose on rank 0" in world.errors["fails"]
    assert set(world.errors) == {"passes", "fails", "preloaded", "pinned"} and not trace.exists()
    assert set(world.seconds) == {START, "passes", "fails", "preloaded", "pinned"}
    assert 0.3 <= world.seconds["passes"] < world.wall_s and world.seconds["fails"] < 0.3
    assert 0.0 < world.cpu_s < 60.0  # the rank's CPU seconds, for the summary table
    assert set(world.cpu) == set(world.seconds) and sum(world.cpu.values()) <= world.cpu_s + 1e-6


def test_a_world_gets_only_the_cases_this_session_selected():
    """What `-k` or node ids leave of test_distributed's items decides what the spawned ranks run."""
    import test_distributed as td

    def item(p, case, name="test_case"):
        return SimpleNamespace(originalname=name, module=td, callspec=SimpleNamespace(params={"p": p, "case": case}))

    session = SimpleNamespace(items=[item(2, "bad-input"), item(2, "hf-gpt2-logits"), item(3, "bad-input"),
                                     item(2, "model-metp-causal", name="test_elsewhere")])
    assert td.selected_cases(session, 2) == ("hf-gpt2-logits", "bad-input")  # in case order
    assert td.selected_cases(session, 3) == ("bad-input",)
    assert td.selected_cases(session, 4) == ()


def test_two_worlds_started_at_once_never_join_each_others_ranks(monkeypatch):
    """Two pytest workers may start a world each at the same moment. Where the operating system hands both the same
    port to meet at (forced here: every port the harness could ask for is one port), each world must still meet
    only its own ranks, so both finish with every case passed instead of hanging in each other's rendezvous."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        one_port = s.getsockname()[1]
    monkeypatch.setattr(dist_harness, "free_port", lambda: one_port)
    worlds: dict[str, object] = {}

    def start(name: str) -> None:
        worlds[name] = run_world(2, "harness_cases", ["passes", "preloaded"], timeout_s=60)

    threads = [threading.Thread(target=start, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert set(worlds) == {"a", "b"}
    for name, world in worlds.items():
        assert world.errors == {"passes": None, "preloaded": None}, (name, world.errors)


def test_ranks_share_the_cpus_the_other_workers_leave():
    """Alone, a world's ranks spread over every CPU; under `-n 2` on 2 CPUs all share the second (the first is
    the other worker's); on 16 CPUs under `-n 2` they spread over the last 15; more workers than CPUs leave them
    the last CPU."""
    assert dist_harness.rank_cpus([0, 1], 1) == [0, 1]
    assert dist_harness.rank_cpus([0, 1], 2) == [1]
    assert dist_harness.rank_cpus(list(range(16)), 2) == list(range(1, 16))
    assert dist_harness.rank_cpus([0, 1], 4) == [1]
