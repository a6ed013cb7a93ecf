"""Under `--nproc`, a rank's `OSError` is one line (exit 2), as in one process, and a closed stdout (`| head -1`)
never turns a finished run into a failure: every time, one line at most on stderr and exit 0."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import rank_output_cases

ROOT = Path(__file__).resolve().parents[2]


def test_an_os_error_in_one_rank_is_one_line_naming_it(tmp_path, capfd):
    from paradyse_lab.errors import UserInputError
    from paradyse_lab.runtime.launch.local import launch

    with pytest.raises(UserInputError) as caught:
        launch(rank_output_cases.os_error_rank, 2, (str(tmp_path),))
    assert str(caught.value) == (f"rank 1: cannot use '{tmp_path}/missing/tokens.jsonl': No such file or directory")
    err = capfd.readouterr().err
    assert "Traceback" not in err, err


@pytest.fixture(scope="module")
def closed_stdout_run(tmp_path_factory) -> subprocess.CompletedProcess:
    """A run of `train --nproc 2` whose stdout's reader closed it before the run printed anything. Its read end is
    closed before the process starts, so every write to stdout fails the same way on every run: one run says what
    any run does."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        env.pop(name, None)
    read, write = os.pipe()
    os.close(read)  # the reader has gone before the first line
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "paradyse_lab", "train", "--nproc", "2", "--model", "gpt2-tiny", "--dataset",
             "uniform:16:16", "--max-len", "16", "--policy", "static:megatron_ts", "--steps", "2", "--no-progress"],
            cwd=tmp_path_factory.mktemp("closed-stdout"), env=env, stdout=write, stderr=subprocess.PIPE, text=True)
    finally:
        os.close(write)
    try:
        _, err = proc.communicate(timeout=240)
        return subprocess.CompletedProcess(proc.args, proc.returncode, None, err)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_a_closed_stdout_leaves_a_finished_run_at_exit_0(closed_stdout_run):
    """stdout's reader closes it before the run prints anything (what `| head -1` does once it has its line): the
    ranks finish, the run exits 0, and stderr holds no traceback (before, rank 0's summary raised BrokenPipeError:
    'rank 0 failed with the error above', exit 1)."""
    done = closed_stdout_run
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "error" not in done.stderr, done.stderr
