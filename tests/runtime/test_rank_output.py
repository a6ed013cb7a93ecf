"""Under `--nproc`, a rank's `OSError` is one line (exit 2), as in one process, and a closed stdout (`| head -1`)
never turns a finished run into a failure: every time, one line at most on stderr and exit 0."""

from __future__ import annotations

import os
import sys

import pytest
import rank_output_cases

pytestmark = pytest.mark.xdist_group("gloo-worlds")
"""Run on the pytest worker of the distributed tests' worlds (tests/conftest.py's `WORLDS_GROUP`), after them: the
launches here fork their ranks from that worker's fork server, which has imported torch and the runtime for the
worlds."""
TRAIN = ["--model", "gpt2-tiny", "--dataset", "uniform:16:16", "--max-len", "16", "--policy", "static:megatron_ts"]


def test_an_os_error_in_one_rank_is_one_line_naming_it(tmp_path, capfd):
    from paradyse_lab.errors import UserInputError
    from paradyse_lab.runtime.launch.local import launch

    with pytest.raises(UserInputError) as caught:
        launch(rank_output_cases.os_error_rank, 2, (str(tmp_path),))
    assert str(caught.value) == (f"rank 1: cannot use '{tmp_path}/missing/tokens.jsonl': No such file or directory")
    err = capfd.readouterr().err
    assert "Traceback" not in err, err


def test_a_closed_stdout_leaves_a_finished_run_at_exit_0(tmp_path, capfd, monkeypatch):
    """stdout's reader closes it before the run prints anything (what `| head -1` does once it has its line): the
    ranks finish, the run exits 0, stderr holds no traceback, and the launcher's stdout flushes at exit without
    an error (before, rank 0's summary raised BrokenPipeError: 'rank 0 failed with the error above', exit 1). The
    launcher is the CLI's `main` in this process, its file descriptor 1 a pipe whose read end was closed before the
    run started, so every write to stdout fails the same way on every run; its ranks fork from this process's fork
    server (on the distributed worlds' worker, the worlds' one, which imported torch and the runtime already:
    ~7 CPU s less than a `python -m paradyse_lab` process and a fork server of its own)."""
    from paradyse_lab.cli import main

    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    read, write = os.pipe()
    os.close(read)  # the reader has gone before the first line
    saved = os.dup(1)
    os.dup2(write, 1)
    os.close(write)
    try:
        stdout = open(1, "w", closefd=False)  # the launcher's stdout: the closed pipe, as a process's would be
        monkeypatch.setattr(sys, "stdout", stdout)
        code = main(["train", "--nproc", "2", *TRAIN, "--steps", "2", "--no-progress"])
        stdout.flush()  # what the interpreter's exit does: an error here would be 'Exception ignored', exit 120
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    err = capfd.readouterr().err
    assert code == 0, err
    assert "Traceback" not in err and "error" not in err, err
