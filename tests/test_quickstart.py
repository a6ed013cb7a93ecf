"""The README's quickstart runs as written, at tiny size: a micro model folder (config.json and a BPE
tokenizer.json trained here), small text datasets, and its numbers scaled down token by token."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

from paradyse_lab.cli import main

sys.path.insert(0, str(Path(__file__).parent))
from text_corpus import build_tokenizer, documents  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TINY = {"32K": "64", "32768": "64", "1000": "2", "100": "1", "70": "1", "3e-4": "1e-2", "4": "2", "8": "2"}
"""The quickstart's sizes, scaled down (token by token: a step of 64 tokens, 2 steps, 2 GPUs for the planner)."""


def quickstart_commands() -> list[list[str]]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("```bash", text.index("<!-- quickstart -->"))
    body = text[text.index("\n", start) + 1:text.index("```", start + 3)]
    lines = body.replace("\\\n", " ").splitlines()
    return [shlex.split(line) for line in lines if line.strip() and not line.startswith(("#", "pip "))]


def test_quickstart_runs_as_written(tmp_path, monkeypatch, capsys):
    model = tmp_path / "model"
    build_tokenizer(model)
    (model / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_embd": 16, "n_head": 2, "n_layer": 2,
                                                   "n_positions": 64, "vocab_size": 256}))
    for name, count, seed in (("data.jsonl", 12, 1), ("eval.jsonl", 2, 2)):
        (tmp_path / name).write_text("".join(json.dumps({"text": t}) + "\n" for t in documents(count, seed)))
    places = {"MODEL_DIR": str(model), "DATA_DIR": str(tmp_path / "data.jsonl"),
              "EVAL_DIR": str(tmp_path / "eval.jsonl")}
    monkeypatch.chdir(tmp_path)
    commands = quickstart_commands()
    assert [c[:2] for c in commands] == [["paradyse-lab", "cost"], ["paradyse-lab", "plan"], ["paradyse-lab", "train"]]
    for command in commands:
        argv = [places.get(t, TINY.get(t, t)) for t in command[1:]]
        assert main(argv) == 0, argv
    out = capsys.readouterr().out
    assert "run summary: 2 steps" in out and (tmp_path / "train.csv").is_file() and (tmp_path / "ckpt").is_dir()
