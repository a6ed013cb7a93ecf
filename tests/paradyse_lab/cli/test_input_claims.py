"""Inputs are what they claim to be: a folder of documents holds no version-control internals among them, a
config.json's typed fields have their JSON types, a token file's ids lie inside the model's vocabulary."""

from __future__ import annotations

from paradyse_lab.cli import main


def test_lengths_skips_hidden_and_version_control_folders(tmp_path, capsys):
    """`lengths DIR` on a repository: its `.git` (and `.hg`, `.svn`, `CVS`, dotted files) are not documents
    (they were counted, one length per object file)."""
    root = tmp_path / "repo"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "a.txt").write_text("one two three\n")
    (root / "b.txt").write_text("four five\n")
    for hidden in (".git/HEAD", ".git/refs/heads/main", ".hg/store/data", ".svn/entries", "CVS/Entries",
                   "docs/.gitignore", "_darcs/format"):
        (root / hidden).parent.mkdir(parents=True, exist_ok=True)
        (root / hidden).write_text("ref: refs/heads/main and more text\n")
    out = tmp_path / "lengths.txt"
    assert main(["data", "lengths", str(root), "--out", str(out), "--tokenizer", "whitespace"]) == 0
    assert sorted(int(n) for n in out.read_text().split()) == [2, 3]
    assert "wrote 2 lengths" in capsys.readouterr().out


def test_lengths_follows_a_linked_folder_once(tmp_path):
    """A link back to an ancestor (a loop) is walked once, not forever."""
    root = tmp_path / "texts"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "a.txt").write_text("x y\n")
    (root / "sub" / "loop").symlink_to(root)
    out = tmp_path / "lengths.txt"
    assert main(["data", "lengths", str(root), "--out", str(out), "--tokenizer", "whitespace"]) == 0
    assert out.read_text().split() == ["2"]


def test_text_dataset_folder_skips_hidden_files(tmp_path):
    """A dataset folder's hidden `.x.jsonl` (an editor's or a sync tool's copy) is not read."""
    from paradyse_lab.workload.text_data import read_texts

    (tmp_path / "a.jsonl").write_text('{"text": "kept"}\n')
    (tmp_path / ".a.jsonl").write_text('{"text": "hidden copy"}\n')
    assert read_texts(str(tmp_path)) == ["kept"]


def _damage_arrow(folder, cut):
    arrow = next(folder.glob("*.arrow"))
    data = arrow.read_bytes()
    arrow.write_bytes(data[: cut(len(data))])


def _edit_state(folder, change):
    import json

    state = json.loads((folder / "state.json").read_text())
    change(state)
    (folder / "state.json").write_text(json.dumps(state))


SAVED_DAMAGE = {
    "arrow truncated": (lambda f: _damage_arrow(f, lambda n: n // 2), "is not a readable save_to_disk folder"),
    "arrow empty": (lambda f: _damage_arrow(f, lambda n: 0), "is not a readable save_to_disk folder"),
    "arrow missing": (lambda f: next(f.glob("*.arrow")).unlink(), "is not a readable save_to_disk folder"),
    "dataset_info not json": (lambda f: (f / "dataset_info.json").write_text("{garb"),
                              "is not a readable save_to_disk folder"),
    "state a list": (lambda f: (f / "state.json").write_text("[1, 2]"), "state.json is damaged"),
    "state files a number": (lambda f: _edit_state(f, lambda s: s.update(_data_files=5)), "state.json is damaged"),
    "state file leaves the folder": (lambda f: _edit_state(f, lambda s: s.update(
        _data_files=[{"filename": "../../etc/passwd"}])), "leaves the folder"),
}


def test_damaged_save_to_disk_folders_are_one_line(tmp_path, capsys):
    """A `datasets` folder damaged in each way ends in one line naming it, exit 2 (they ended in pyarrow's,
    json's or a TypeError's traceback)."""
    import shutil

    import pytest

    datasets = pytest.importorskip("datasets")
    from tokenizers import Tokenizer, models, pre_tokenizers

    tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0, "the": 1, "cat": 2}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    good = tmp_path / "good"
    datasets.Dataset.from_dict({"text": ["the cat", "the the cat"]}).save_to_disk(str(good))
    capsys.readouterr()
    for case, (damage, shown) in SAVED_DAMAGE.items():
        folder = tmp_path / case.replace(" ", "-")
        shutil.copytree(good, folder)
        damage(folder)
        code = main(["train", "--model", "gpt2-tiny", "--tokenizer", str(tmp_path), "--dataset", str(folder),
                     "--steps", "1", "--no-progress"])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and shown in err[0], (case, err)
