"""Special files given as inputs: a FIFO (which blocks `open` until a writer comes) and `/dev/zero` (endless
bytes) named as config.json, dataset, model folder files, profile, problem, cost model or cluster TOML (or its
base) each end in one line and exit 2 within seconds, under `train --nproc 2` too, nothing read whole into
memory. Each case runs in this process through the CLI's `main`, as `python -m paradyse_lab` runs it, its
stderr caught at the file-descriptor level (`capfd`: C++ warnings too), with a time limit of its own
(pytest-timeout's SIGALRM, which interrupts a blocking `open` or `read` and which the CLI cannot catch), so
that a hang fails the case instead of hanging the suite. (They ran in one subprocess of their own, which paid
the interpreter's and the CLI's imports again: the process boundary is not what they claim.)"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from paradyse_lab.cli import main

G2 = {"model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": 2, "vocab_size": 100, "n_positions": 64}
TIMEOUT_S = 60
"""A case's limit: far above the second or two a refusal takes (the first `train` case's imports), far below a
hang."""
SPECIALS = ("fifo", "zero")

CASES = {
    # id: (argv with {x} the special file, its file name)
    "model-config": (["cost", "--model", "{x}", "--seq", "64"], "config.json"),
    "length-file": (["data", "workload", "file:{x}"], "lengths.txt"),
    "token-file": (["train", "--model", "gpt2-tiny", "--dataset", "file:{x}", "--steps", "1", "--no-progress"],
                   "tokens.jsonl"),
    "problem": (["solvers", "solve", "--solver", "dp", "--problem", "{x}"], "problem.json"),
    "profile": (["costmodel", "ablate", "--profiles", "{x}", "--no-regret"], "profile.csv"),
    "cost-model": (["simulate", "--model", "gpt", "--dataset", "grch38", "--policy", "dynamic:dp",
                    "--plan-cost-model", "{x}"], "model.joblib"),
    "cluster-toml": (["cost", "--model", "gpt", "--seq", "4096", "--cluster", "{x}"], "cluster.toml"),
    "cluster-toml-base": (["cost", "--model", "gpt", "--seq", "4096", "--cluster", "{d}/child.toml"], "base.toml"),
    "init-from-config": (["train", "--init-from", "{d}", "--dataset", "uniform:8:16", "--steps", "1",
                          "--no-progress"], "config.json"),
    "init-from-safetensors": (["train", "--init-from", "{d}", "--dataset", "uniform:8:16", "--steps", "1",
                               "--no-progress"], "model.safetensors"),
    "init-from-index": (["train", "--init-from", "{d}", "--dataset", "uniform:8:16", "--steps", "1",
                         "--no-progress"], "model.safetensors.index.json"),
    "text-dataset": (["train", "--model", "gpt2-tiny", "--tokenizer", "{d}/tok", "--dataset", "{x}", "--steps", "1",
                      "--no-progress"], "texts.jsonl"),
    # under the local launcher: refused before any rank starts, not a rank blocked on the FIFO
    "token-file-nproc-2": (["train", "--model", "gpt2-tiny", "--dataset", "file:{x}", "--steps", "1", "--no-progress",
                            "--nproc", "2"], "tokens.jsonl"),
    "init-from-config-nproc-2": (["train", "--init-from", "{d}", "--dataset", "uniform:8:16", "--steps", "1",
                                  "--no-progress", "--nproc", "2"], "config.json"),
}


def _folder(tmp_path: Path, case: str, special: str) -> tuple[Path, Path]:
    """A folder for `case` holding the special file (`special`: fifo or zero) under its input's name."""
    argv, name = CASES[case]
    folder = tmp_path / case
    folder.mkdir()
    target = folder / name
    if special == "fifo":
        os.mkfifo(target)
    else:
        target.symlink_to("/dev/zero")
    if case.startswith("init-from") and name != "config.json":
        (folder / "config.json").write_text(json.dumps(G2))
    if case == "cluster-toml-base":
        (folder / "child.toml").write_text(f'base = "{target}"\ngpus = 8\n')
    if case == "text-dataset":
        from tokenizers import Tokenizer, models, pre_tokenizers

        tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0, "the": 1}, unk_token="[UNK]"))
        tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
        (folder / "tok").mkdir()
        tokenizer.save(str(folder / "tok" / "tokenizer.json"))
    return folder, target


@pytest.mark.timeout(TIMEOUT_S)
@pytest.mark.parametrize("special", SPECIALS)
@pytest.mark.parametrize("case", list(CASES))
def test_a_special_file_as_input_is_one_line_within_seconds(tmp_path, monkeypatch, capfd, case, special):
    folder, target = _folder(tmp_path, case, special)
    argv = [a.replace("{x}", str(target)).replace("{d}", str(folder)) for a in CASES[case][0]]
    monkeypatch.chdir(tmp_path)
    try:
        code = main(argv)
    except SystemExit as done:  # argparse exits itself
        code = done.code
    lines = capfd.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and ": error: " in lines[0], (code, lines[-20:])
    assert "regular file" in lines[0] or "not a file" in lines[0], lines[0]
