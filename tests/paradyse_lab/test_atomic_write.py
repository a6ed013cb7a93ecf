"""paradyse_lab.files.atomic_write: a target is replaced whole or not at all, with a plain file's mode (a replaced
file's own); a link is written through; a device node, FIFO or socket is refused before any write."""

import os
import stat
import tempfile

import pytest

from paradyse_lab.errors import UserInputError
from paradyse_lab.files.atomic_write import atomic_open, check_output_file, write_text_atomic


def test_writes_the_text_with_the_mode_open_would_give(tmp_path):
    target = tmp_path / "sub" / "out.csv"
    write_text_atomic(target, "a,b\n1,2\n")
    assert target.read_text() == "a,b\n1,2\n"
    (tmp_path / "plain").write_text("x")
    assert os.stat(target).st_mode & 0o777 == os.stat(tmp_path / "plain").st_mode & 0o777
    assert sorted(p.name for p in target.parent.iterdir()) == ["out.csv"]


def test_an_error_leaves_the_old_file_and_no_temporary_file(tmp_path):
    target = tmp_path / "out.csv"
    target.write_text("old\n")
    with pytest.raises(RuntimeError, match="half way"):
        with atomic_open(target) as fh:
            fh.write("new, partial")
            raise RuntimeError("half way")
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.csv"]


def test_a_fifo_is_refused_and_left_a_fifo(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(UserInputError, match="is a FIFO; it must name a regular file"):
        write_text_atomic(fifo, "x\n")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]


def test_a_device_node_is_refused_before_anything_is_written(monkeypatch):
    """/dev/null is only looked at: making a temporary file or renaming fails the test, so even a root
    run of a broken check cannot replace it."""
    def no_write(*args, **kwargs):
        raise AssertionError("tried to write next to a device node")

    monkeypatch.setattr(tempfile, "mkstemp", no_write)
    monkeypatch.setattr(os, "replace", no_write)
    with pytest.raises(UserInputError, match="'/dev/null' is a character device"):
        check_output_file("/dev/null")
    with pytest.raises(UserInputError, match="character device"):
        write_text_atomic("/dev/null", "x\n")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_a_symbolic_link_is_written_through_to_its_target(tmp_path):
    real = tmp_path / "data" / "real.csv"
    real.parent.mkdir()
    real.write_text("old\n")
    link = tmp_path / "link.csv"
    link.symlink_to(real)
    write_text_atomic(link, "new\n")
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_text() == "new\n"
    assert sorted(p.name for p in real.parent.iterdir()) == ["real.csv"]


def test_a_replaced_file_keeps_its_mode(tmp_path):
    target = tmp_path / "secret.csv"
    target.write_text("old\n")
    os.chmod(target, 0o600)
    write_text_atomic(target, "new\n")
    assert target.read_text() == "new\n" and stat.S_IMODE(os.stat(target).st_mode) == 0o600


def test_lengths_refuses_a_fifo_out_with_one_line(tmp_path, capsys):
    from paradyse_lab.cli import main

    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.txt").write_text("hello world\n")
    fifo = tmp_path / "out.txt"
    os.mkfifo(fifo)
    assert main(["data", "lengths", str(tmp_path / "docs"), "--out", str(fifo)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--out" in err and "FIFO" in err
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


@pytest.mark.parametrize("argv", [
    ["simulate", "--model", "gpt", "--dataset", "uniform", "--size", "2", "--policy", "static:metp"],
    ["costmodel", "synth-profile", "--models", "bert", "--ratio", "2"], ["costmodel", "fit", "--kind", "polynomial"],
    ["costmodel", "paper-profile"], ["costmodel", "fit-calibration"], ["solvers", "bench"],
    ["costmodel", "profile", "--model", "gpt2-tiny", "--seqs", "512", "--strategies", "metp"],
], ids=lambda argv: " ".join(argv[:2]))
def test_every_file_out_is_checked_before_the_command_runs(tmp_path, capsys, argv):
    """The one line names --out (the command's own check, before its work), and the FIFO stays."""
    from paradyse_lab.cli import main

    fifo = tmp_path / "out.csv"
    os.mkfifo(fifo)
    assert main([*argv, "--out", str(fifo)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and f"--out '{fifo}' is a FIFO" in err
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_socket_is_refused(tmp_path):
    import socket

    path = tmp_path / "s.sock"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
        with pytest.raises(UserInputError, match="is a socket"):
            write_text_atomic(path, "x\n")
        assert stat.S_ISSOCK(os.lstat(path).st_mode)
