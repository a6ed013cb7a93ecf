"""A finished rank ends in one order: its work, a barrier, the process group destroyed, then its process ends
with no thread of ours left (runtime/launch/ranks.py `leave_process_group`, runtime/launch/local.py `end_process`).

Two gloo ranks through the launcher (tests/runtime/launcher_cases.py `teardown_rank`); the repeated launch of a
real run is tests/runtime/repeat_train_launch.py."""

from __future__ import annotations

import json
import os

import launcher_cases
import pytest

pytestmark = pytest.mark.xdist_group("gloo-worlds")
"""Run on the pytest worker of the distributed tests' worlds (tests/conftest.py's `WORLDS_GROUP`), after them: the
launches here fork their ranks from that worker's fork server, which has imported torch and the runtime for the
worlds, instead of starting one that imports torch again (~3 CPU s a launch)."""


def test_a_finished_rank_waits_for_its_peers_then_destroys_its_group_and_leaves_no_thread(tmp_path, monkeypatch):
    from paradyse_lab.runtime.launch.local import launch
    from paradyse_lab.runtime.launch.ranks import rendezvous_store

    monkeypatch.setenv("PARADYSE_TEST_PIDS", str(tmp_path))
    store = rendezvous_store()  # the ranks meet at it, as a launcher's do
    launch(launcher_cases.teardown_rank, 2, (store.port,), ("torch", "torch.distributed"))  # imported once
    for rank in (0, 1):
        state = json.loads((tmp_path / f"teardown-{rank}.json").read_text())
        assert state["events"] == ["work done", "barrier", "destroy"], (rank, state)
        assert not state["initialized"], rank
        assert state["threads"] == [], (rank, state["threads"])  # no tqdm monitor, no non-daemon thread
        assert not state["tqdm_process_lock"], rank  # no named semaphore left behind by os._exit


@pytest.mark.parametrize("how", ["returns", "refuse"])
def test_a_rank_ends_with_os_exit_after_flushing_its_output(tmp_path, monkeypatch, capfd, how):
    """A rank's process ends through `os._exit` once its function returned or its error was reported: its
    buffered output is flushed, and no interpreter finalization runs (an `atexit` handler it registered never
    runs; a spawned process that returns runs it, and with it the C++ teardown that aborted finished ranks)."""
    from multiprocessing import forkserver

    from paradyse_lab.errors import UserInputError
    from paradyse_lab.runtime.launch.local import launch

    monkeypatch.setenv("PARADYSE_TEST_PIDS", str(tmp_path))
    running = forkserver._forkserver._forkserver_pid  # a server this process ran before (the distributed harness's)
    if how == "refuse":
        with pytest.raises(UserInputError, match="rank 1 refuses"):
            launch(launcher_cases.unflushed_rank, 2, ("refuse",))
    else:
        launch(launcher_cases.unflushed_rank, 2, ())
    out = capfd.readouterr().out
    assert "[rank 0 unflushed]" in out and "[rank 1 unflushed]" in out, out
    assert forkserver._forkserver._forkserver_pid == running  # the server the launch started, it stopped
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_command_whose_process_joined_a_group_ends_through_end_process(monkeypatch):
    """`paradyse-lab COMMAND` in a process that joined a process group (a torchrun rank; calibrate, validate-run
    or profile --mode distributed at one rank in its own process) ends with its exit code through
    runtime/launch/local.py `end_process`, as a spawned rank does, not through the interpreter's teardown; a process
    that joined none just returns its code. (The command's argv from sys.argv: the console script's call.)"""
    import gc
    import sys

    import paradyse_lab.runtime.launch.local
    import paradyse_lab.runtime.launch.ranks
    from paradyse_lab.cli import main

    ended: list[int] = []
    monkeypatch.setattr(gc, "freeze", lambda: None)  # main() as a process freezes before it returns: not pytest's
    monkeypatch.setattr(paradyse_lab.runtime.launch.ranks, "_joined_group", [])
    monkeypatch.setattr(paradyse_lab.runtime.launch.local, "end_process", ended.append)
    monkeypatch.setattr(sys, "argv", ["paradyse-lab", "catalog", "strategies", "--format", "json"])
    assert main() == 0 and ended == []
    paradyse_lab.runtime.launch.ranks.launch(lambda group=None: None, 1)  # a one-rank gloo group in this process, left
    assert paradyse_lab.runtime.launch.ranks.joined_a_process_group()
    assert main() == 0 and ended == [0]
    monkeypatch.setattr(sys, "argv", ["paradyse-lab", "cost", "--model", "gpt", "--seq", "0"])
    assert main() == 2 and ended == [0, 2]
    assert main(["catalog", "strategies", "--format", "json"]) == 0 and ended == [0, 2]  # argv given: only returns


def test_a_forked_rank_runs_in_its_launchers_environment_and_output_with_the_preload_imported(
        tmp_path, monkeypatch, capfd):
    """`launch` forks its ranks from a fork server that imported the preload once: each rank has the preloaded
    module without importing it, and runs in the launcher's environment variables, directory, stdout and stderr as
    they are at the launch, not as they were when the server started (a variable set since is there, the server's
    own PYTHONPATH and PYTHONSAFEPATH are not; the server started with its output at /dev/null), its collector on.
    A server the launcher did not start is left running."""
    from multiprocessing import forkserver

    from paradyse_lab.runtime.launch.local import _start_rank_server, launch

    server = forkserver.ForkServer()  # this test's own: a server this process already runs (the distributed
    for name in ("ensure_running", "get_inherited_fds", "connect_to_new_process", "set_forkserver_preload"):
        monkeypatch.setattr(forkserver, name, getattr(server, name))  # harness's) is left to it
    monkeypatch.setattr(forkserver, "_forkserver", server)
    saved = [os.dup(1), os.dup(2)]
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1), os.dup2(null, 2)
        assert _start_rank_server(("colorsys",))
    finally:
        os.dup2(saved[0], 1), os.dup2(saved[1], 2)
        for fd in (*saved, null):
            os.close(fd)
    try:
        monkeypatch.setenv("PARADYSE_LAUNCH_MARK", "set by the launcher")
        monkeypatch.delenv("PYTHONSAFEPATH", raising=False)
        monkeypatch.chdir(tmp_path)
        launch(launcher_cases.environment_rank, 2, (str(tmp_path), os.getpid()))
        assert server._forkserver_pid is not None  # not this launch's to stop
    finally:
        server._stop()
    captured = capfd.readouterr()
    for rank in (0, 1):
        state = json.loads((tmp_path / f"env-{rank}.json").read_text())
        assert state["colorsys"] and not state["parent_is_launcher"], state  # forked from the preloaded server
        assert state["environ"] == dict(os.environ), rank
        assert state["gc"] and state["cwd"] == str(tmp_path), state
        assert f"rank {rank} to stdout" in captured.out and f"rank {rank} to stderr" in captured.err, captured
