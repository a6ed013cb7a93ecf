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
    assert main(["lengths", str(root), "--out", str(out), "--tokenizer", "whitespace"]) == 0
    assert sorted(int(n) for n in out.read_text().split()) == [2, 3]
    assert "wrote 2 lengths" in capsys.readouterr().out


def test_lengths_follows_a_linked_folder_once(tmp_path):
    """A link back to an ancestor (a loop) is walked once, not forever."""
    root = tmp_path / "texts"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "a.txt").write_text("x y\n")
    (root / "sub" / "loop").symlink_to(root)
    out = tmp_path / "lengths.txt"
    assert main(["lengths", str(root), "--out", str(out), "--tokenizer", "whitespace"]) == 0
    assert out.read_text().split() == ["2"]


def test_text_dataset_folder_skips_hidden_files(tmp_path):
    """A dataset folder's hidden `.x.jsonl` (an editor's or a sync tool's copy) is not read."""
    from paradyse_lab.text_data import read_texts

    (tmp_path / "a.jsonl").write_text('{"text": "kept"}\n')
    (tmp_path / ".a.jsonl").write_text('{"text": "hidden copy"}\n')
    assert read_texts(str(tmp_path)) == ["kept"]
