"""`lengths` counts what `train` trains: on a text dataset (a .jsonl file, a save_to_disk folder) one document
per row, read and tokenized by train's own reader and tokenizer, never the file or its metadata as documents."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from paradyse_lab.app.train_options import TrainOptions
from paradyse_lab.cli import main
from paradyse_lab.runtime.training.run_inputs import TokenDocuments

sys.path.insert(0, str(Path(__file__).parents[2]))
from text_corpus import build_tokenizer, documents  # noqa: E402


def _trained_lengths(dataset: str, tokenizer: Path) -> list[int]:
    opts = TrainOptions(model="gpt2-tiny", dataset=dataset, tokenizer=str(tokenizer))
    return [len(d) for d in TokenDocuments.from_options(opts, dataset).docs]


def _lengths(capsys, source, out: Path, tokenizer) -> list[int]:
    assert main(["data", "lengths", str(source), "--out", str(out), "--tokenizer", str(tokenizer)]) == 0
    capsys.readouterr()
    return [int(line) for line in out.read_text().split()]


@pytest.fixture
def corpus(tmp_path):
    tok = build_tokenizer(tmp_path / "tok")
    texts = documents(9, seed=3)
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    return tok, texts, data


def test_a_jsonl_file_and_its_folder_count_each_row(tmp_path, capsys, corpus):
    tok, texts, data = corpus
    want = _trained_lengths(str(data / "train.jsonl"), tok)
    assert len(want) == len(texts) == 9
    assert _lengths(capsys, data / "train.jsonl", tmp_path / "a.txt", tok) == want
    assert _lengths(capsys, data, tmp_path / "b.txt", tok) == want
    words = _lengths(capsys, data, tmp_path / "c.txt", "whitespace")
    assert words == [len(t.split()) for t in texts]  # the text column's words, not the JSON's


@pytest.mark.skipif(importlib.util.find_spec("datasets") is None, reason="needs datasets")
def test_a_save_to_disk_folder_counts_its_rows_not_its_files(tmp_path, capsys, corpus):
    import datasets

    tok, texts, _ = corpus
    folder = tmp_path / "saved"
    datasets.Dataset.from_dict({"text": texts}).save_to_disk(str(folder))
    assert _lengths(capsys, folder, tmp_path / "d.txt", tok) == _trained_lengths(str(folder), tok)
