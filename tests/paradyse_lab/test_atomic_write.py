"""paradyse_lab.atomic_write: a target is replaced whole or not at all, with a plain file's mode."""

import os

import pytest

from paradyse_lab.atomic_write import atomic_open, write_text_atomic


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
