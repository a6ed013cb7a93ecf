"""A finished rank ends in one order: its work, a barrier, the process group destroyed, then its process ends
with no thread of ours left (runtime/launch.py `leave_process_group`, runtime/launcher.py `end_process`).

Two gloo ranks through the launcher (tests/runtime/launcher_cases.py `teardown_rank`); the repeated launch of a
real run is tests/runtime/repeat_train_launch.py."""

from __future__ import annotations

import json
import socket

import launcher_cases


def test_a_finished_rank_waits_for_its_peers_then_destroys_its_group_and_leaves_no_thread(tmp_path, monkeypatch):
    from runtime.launcher import launch

    monkeypatch.setenv("PARADYSE_TEST_PIDS", str(tmp_path))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    launch(launcher_cases.teardown_rank, 2, (port,))
    for rank in (0, 1):
        state = json.loads((tmp_path / f"teardown-{rank}.json").read_text())
        assert state["events"] == ["work done", "barrier", "destroy"], (rank, state)
        assert not state["initialized"], rank
        assert state["threads"] == [], (rank, state["threads"])  # no tqdm monitor, no non-daemon thread
        assert not state["tqdm_process_lock"], rank  # no named semaphore left behind by os._exit
