"""A checkpoint of another layout version (its meta.json's `layout`, or architecture fields this version does
not know) is one line naming the versions, at resume and at export-hf: never a TypeError, never read into the
wrong places."""

from __future__ import annotations

import json

import pytest

from paradyse_lab.cli import main

TRAIN = ["train", "--model", "gpt2-tiny", "--dataset", "uniform:8:16", "--max-len", "16", "--no-progress",
         "--policy", "static:megatron_ts", "--checkpoint-every", "1"]


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """A one-step checkpoint folder of gpt2-tiny."""
    root = tmp_path_factory.mktemp("layout") / "ck"
    assert main([*TRAIN, "--steps", "1", "--checkpoint-dir", str(root)]) == 0
    return root


def _edited(written, tmp_path, edit):
    import shutil

    ck = tmp_path / "ck"
    shutil.copytree(written, ck)
    meta_file = ck / "step-000001" / "meta.json"
    meta = json.loads(meta_file.read_text())
    edit(meta)
    meta_file.write_text(json.dumps(meta))
    return ck


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and ": error: " in err[0], err
    return err[0]


def test_checkpoints_record_their_layout(written):
    assert json.loads((written / "step-000001" / "meta.json").read_text())["layout"] == 1


@pytest.mark.parametrize("command", ["resume", "export-hf"])
def test_a_checkpoint_of_another_layout_is_one_line_naming_both(written, tmp_path, capsys, command):
    """meta.json says layout 2: refused naming 2 and this version's 1 (a resume went on, exit 0)."""
    ck = _edited(written, tmp_path, lambda meta: meta.update(layout=2))
    capsys.readouterr()
    argv = ([*TRAIN, "--steps", "2", "--checkpoint-dir", str(ck), "--resume"] if command == "resume"
            else ["export-hf", "--checkpoint", str(ck), "--out", str(tmp_path / "hf")])
    assert main(argv) == 2
    assert "layout 2; this version of paradyse-lab reads layout 1" in _one_line(capsys)
    assert not (tmp_path / "hf").exists() and not (ck / "step-000002").exists()


@pytest.mark.parametrize("command", ["resume", "export-hf"])
@pytest.mark.parametrize("edit, shown", [(lambda a: a.update(sliding_window=4), "sliding_window"),
                                         (lambda a: a.pop("layers"), "layers")])
def test_architecture_fields_of_another_version_are_one_line(written, tmp_path, capsys, command, edit, shown):
    """An architecture with a field this version does not know, or without one it needs: export-hf ended in
    ModelSpec's TypeError traceback, and a resume went on."""
    ck = _edited(written, tmp_path, lambda meta: edit(meta["architecture"]))
    capsys.readouterr()
    argv = ([*TRAIN, "--steps", "2", "--checkpoint-dir", str(ck), "--resume"] if command == "resume"
            else ["export-hf", "--checkpoint", str(ck), "--out", str(tmp_path / "hf")])
    assert main(argv) == 2
    assert shown in _one_line(capsys)
    assert not (tmp_path / "hf").exists() and not (ck / "step-000002").exists()
