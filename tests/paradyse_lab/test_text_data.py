"""Text datasets (save_to_disk folders, parquet, arrow, jsonl) tokenized with a tokenizer built in the test."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))
from text_corpus import build_tokenizer, documents  # noqa: E402

from paradyse_lab.errors import UserInputError  # noqa: E402
from paradyse_lab.workload.text_data import ordered, read_texts, tokenize  # noqa: E402

TEXTS = documents(6)


def _write(kind: str, root: Path) -> str:
    """The dataset of TEXTS written as `kind`; its --dataset."""
    if kind == "jsonl":
        path = root / "docs.jsonl"
        path.write_text("".join(json.dumps({"text": t, "id": i}) + "\n" for i, t in enumerate(TEXTS)))
        return f"file:{path}"
    import datasets

    ds = datasets.Dataset.from_dict({"text": TEXTS, "id": list(range(len(TEXTS)))})
    if kind == "save_to_disk":
        ds.save_to_disk(str(root / "saved"))
        return str(root / "saved")
    if kind == "dict":
        datasets.DatasetDict({"train": ds}).save_to_disk(str(root / "dict"))
        return str(root / "dict")
    if kind == "parquet":
        ds.to_parquet(str(root / "docs.parquet"))
        return str(root / "docs.parquet")
    import pyarrow as pa

    table = pa.table({"text": TEXTS})
    folder = root / "arrows"
    folder.mkdir()
    for i, part in enumerate((table.slice(0, 3), table.slice(3))):  # two shards, read in name order
        with pa.OSFile(str(folder / f"part-{i}.arrow"), "wb") as sink, pa.ipc.new_stream(sink, part.schema) as w:
            w.write_table(part)
    return str(folder)


@pytest.mark.parametrize("kind", ["jsonl", "save_to_disk", "dict", "parquet", "arrow"])
def test_every_source_gives_the_texts_in_file_order(tmp_path, kind):
    assert read_texts(_write(kind, tmp_path)) == TEXTS


def test_tokenized_with_a_bpe_tokenizer_built_here(tmp_path):
    path = build_tokenizer(tmp_path / "tok")
    ids = tokenize(TEXTS, str(path.parent))  # a folder holding tokenizer.json works as the file does
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(path))
    assert ids == [tok.encode(t).ids for t in TEXTS] and all(0 <= i < tok.get_vocab_size() for d in ids for i in d)
    assert tok.decode(ids[0]).replace(" ", "") == TEXTS[0].replace(" ", "")


def test_orders_and_refusals(tmp_path):
    docs = [[1] * n for n in (3, 1, 2)]
    assert ordered(docs, "file", 0) == docs and ordered(docs, "sorted", 0) == [[1], [1, 1], [1, 1, 1]]
    assert sorted(ordered(list(range(20)), "shuffled", 1)) == list(range(20))
    assert ordered(list(range(20)), "shuffled", 1) == ordered(list(range(20)), "shuffled", 1) != list(range(20))
    with pytest.raises(UserInputError, match="--text-column"):
        read_texts(_write("parquet", tmp_path), "body")
    with pytest.raises(UserInputError, match="no tokenizer.json"):
        tokenize(TEXTS, str(tmp_path))
    with pytest.raises(UserInputError, match="no such file or folder"):
        read_texts(str(tmp_path / "missing"))


def test_lengths_counts_the_tokens_train_trains(tmp_path, capsys):
    from paradyse_lab.cli import main

    texts = tmp_path / "texts"
    texts.mkdir()
    for i, t in enumerate(TEXTS[:3]):
        (texts / f"{i}.txt").write_text(t)
    path = build_tokenizer(tmp_path / "tok")
    out = tmp_path / "lengths.txt"
    assert main(["data", "lengths", str(texts), "--tokenizer", str(path), "--out", str(out)]) == 0
    assert [int(n) for n in out.read_text().split()] == [len(d) for d in tokenize(TEXTS[:3], str(path))]
    assert main(["data", "lengths", str(texts), "--tokenizer", "bpe", "--out", str(out)]) == 2
    assert "--tokenizer must be one of bytes, whitespace or a tokenizer.json" in capsys.readouterr().err
