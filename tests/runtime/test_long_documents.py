"""No token dropped silently: a document longer than the length cap is split into chunks by default (packed or
not), trained whole; `--long-documents cut` cuts it; the run says which and how many."""

import csv
import json

import pytest
from micro_gpt import one_thread, write_micro  # noqa: F401 - one_thread: an autouse fixture

from paradyse_lab.cli import main
from paradyse_lab.workload.long_documents import handle, split


@pytest.fixture
def files(tmp_path):
    tokens = tmp_path / "tokens.jsonl"
    tokens.write_text("".join(json.dumps([(3 * j) % 90 + 1 for j in range(n)]) + "\n" for n in (10, 40, 50)))
    return write_micro(tmp_path), tokens


def test_split_keeps_every_token_in_order():
    doc = list(range(70))
    assert split(doc, 32) == [doc[:32], doc[32:64], doc[64:]] and split(70, 32) == [32, 32, 6]
    out, did = handle([list(range(10)), doc], 32, "chunk")
    assert sum(out, []) == list(range(10)) + doc and (did.long, did.chunks, did.cut_tokens) == (1, 3, 38)
    out, did = handle([10, 70], 32, "cut")
    assert out == [10, 70] and did.chunks == 0 and did.cut_tokens == 38


def _train(model, tokens, log, *extra):
    return main(["train", "--model", str(model), "--dataset", f"file:{tokens}", "--policy", "static:megatron_ts",
                 "--max-len", "32", "--no-progress", "--log-file", str(log), *extra])


def test_long_documents_are_chunked_by_default(tmp_path, files, capsys):
    log = tmp_path / "log.csv"
    assert _train(*files, log, "--steps", "5") == 0
    out, err = capsys.readouterr()
    rows = list(csv.DictReader(log.open()))
    assert [int(r["tokens"]) for r in rows] == [10, 32, 8, 32, 18]  # 10 | 40 = 32 + 8 | 50 = 32 + 18
    assert all(int(r["cut_tokens"]) == 0 for r in rows) and "tokens cut" not in out and "untrained" not in err
    assert "data: 2 of 3 documents are longer than 32 tokens: split into 4 chunks of at most 32" in out


def test_packed_long_documents_are_chunked(tmp_path, files, capsys):
    log = tmp_path / "log.csv"
    assert _train(*files, log, "--steps", "2", "--pack-tokens", "64") == 0
    out, _ = capsys.readouterr()
    rows = list(csv.DictReader(log.open()))
    assert sum(int(r["tokens"]) for r in rows) == 100 and all(int(r["cut_tokens"]) == 0 for r in rows)
    assert "split into 4 chunks" in out


def test_cut_is_the_option_named_in_help(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out, _ = capsys.readouterr()
    assert "--long-documents {chunk,cut}" in out
