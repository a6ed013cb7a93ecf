"""A checkpoint resumes only into the model and data that wrote it, compared by content: the architecture, not
the --model string; a file dataset's bytes, not its path. One line and exit 2 otherwise, at 1 rank and under
--nproc 2, before any step. That rank 0 alone hashes the data, and every rank gets its digest and its error, is a
case of the distributed tests (resume_identity_cases.py, `-k rank0-hashes`)."""

from __future__ import annotations

import json

import pytest

from paradyse_lab.cli import main

MICRO = {"model_type": "gpt2", "n_embd": 16, "n_head": 2, "n_layer": 2, "n_positions": 64, "vocab_size": 32}
"""A GPT-2 config small enough that a CPU step takes milliseconds."""


def _config(path, **changes) -> str:
    path.write_text(json.dumps({**MICRO, **changes}))
    return str(path)


def _train(tmp_path, model: str, dataset: str, steps: int, *more: str) -> int:
    return main(["train", "--model", model, "--dataset", dataset, "--steps", str(steps), "--max-len", "16",
                 "--checkpoint-dir", str(tmp_path / "ck"), "--checkpoint-every", "1", "--no-progress",
                 "--policy", "static:megatron_ts", *more])


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and ": error: " in err[0], err
    return err[0]


@pytest.fixture
def tokens(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text("[1, 2, 3, 4]\n[5, 6, 7]\n[8, 9, 10, 11, 12]\n")
    return path


@pytest.mark.parametrize("change, shown", [({"n_layer": 4}, "its layers is 4, this run's"),
                                           ({"layer_norm_epsilon": 1e-3}, "its eps is 0.001"),
                                           ({"n_inner": 32}, "its ffn_hidden is 32"),
                                           ({"n_positions": 32}, "its max_positions is 32")])
def test_a_checkpoint_of_another_architecture_is_refused(tmp_path, capsys, tokens, change, shown):
    """A 4-layer checkpoint resumed into a 2-layer config.json at the same path (and another epsilon, MLP width
    or positions) is one line naming the field: it exited 0, the --model string being the same."""
    model = _config(tmp_path / "model.json", **change)
    assert _train(tmp_path, model, f"file:{tokens}", 1) == 0
    _config(tmp_path / "model.json")
    capsys.readouterr()
    assert _train(tmp_path, model, f"file:{tokens}", 2, "--resume") == 2
    assert "was written by another model" in (line := _one_line(capsys)) and shown in line, line


def test_the_same_architecture_under_another_name_resumes(tmp_path, capsys, tokens):
    """The same shapes from a copy of the config.json elsewhere, and the token file named `./d.jsonl` instead of
    its absolute path: the same model and data, resumed (both were refused, the strings differing)."""
    assert _train(tmp_path, _config(tmp_path / "a.json"), f"file:{tokens}", 1) == 0
    copy = _config(tmp_path / "elsewhere.json")
    dotted = f"file:{tokens.parent}/./{tokens.name}"
    assert _train(tmp_path, copy, dotted, 2, "--resume") == 0, capsys.readouterr().err[-2000:]
    assert (tmp_path / "ck" / "step-000002").is_dir()


def test_a_replaced_token_file_is_refused(tmp_path, capsys, tokens):
    """Other tokens written at the path the checkpoint was trained on: one line, not a resume onto other data."""
    model = _config(tmp_path / "m.json")
    assert _train(tmp_path, model, f"file:{tokens}", 1) == 0
    tokens.write_text("[3, 2, 1]\n[9, 9, 9, 9]\n")
    capsys.readouterr()
    assert _train(tmp_path, model, f"file:{tokens}", 2, "--resume") == 2
    line = _one_line(capsys)
    assert "was trained on other data" in line and "d.jsonl" in line, line


def test_another_architecture_under_nproc_2_is_one_line_before_any_rank_starts(tmp_path, capsys, monkeypatch,
                                                                                tokens):
    """The same refusal when the resuming run has two ranks: one line, exit 2, from the launcher before it starts
    a rank (it read the checkpoint's meta.json; the ranks used to refuse it once the fork server had imported
    torch and each had joined the group: seconds later). A rank's refusal reaching the launcher as one line is
    test_train_safety.py's `test_an_error_in_every_rank_prints_one_line_once`."""
    from paradyse_lab.cli import train_command

    model = _config(tmp_path / "model.json", n_layer=4)
    assert _train(tmp_path, model, f"file:{tokens}", 1) == 0
    _config(tmp_path / "model.json")
    capsys.readouterr()
    started = []
    monkeypatch.setattr(train_command, "launch", lambda *args: started.append(args))
    assert _train(tmp_path, model, f"file:{tokens}", 2, "--resume", "--nproc", "2") == 2
    assert "its layers is 4" in _one_line(capsys)
    assert not started


def test_a_checkpoint_of_another_layout_under_nproc_2_is_refused_before_any_rank_starts(tmp_path, capsys,
                                                                                         monkeypatch):
    """A checkpoint of layout 2 (a later version's) resumed by two ranks: the launcher's one line naming both
    layouts, exit 2, no rank started; a damaged newer checkpoint is skipped as the resume skips it."""
    from paradyse_lab.cli import train_command

    ck = tmp_path / "ck"
    (ck / "step-000001").mkdir(parents=True)
    (ck / "step-000001" / "meta.json").write_text('{"format": "torch.distributed.checkpoint", "layout": 2, '
                                                  '"step": 1}')
    (ck / "step-000002").mkdir()
    (ck / "step-000002" / "meta.json").write_text("{not json")
    started = []
    monkeypatch.setattr(train_command, "launch", lambda *args: started.append(args))
    assert _train(tmp_path, "gpt2-tiny", "uniform:8:16", 2, "--resume", "--nproc", "2") == 2
    line = _one_line(capsys)
    assert f"checkpoint {ck / 'step-000001'} is of checkpoint layout 2;" in line and "reads layout 1" in line, line
    assert not started


@pytest.fixture
def hf_folder(tmp_path):
    """A small GPT-2 Hugging Face folder (config.json and model.safetensors), and its tokens (ids below 64)."""
    from tests.runtime.hf_folders import build, save

    folder = save(build("gpt2", seed=0), tmp_path / "hf", sharded=False)
    tokens = tmp_path / "t.jsonl"
    tokens.write_text("[1, 2, 3, 4]\n[5, 6, 7]\n[8, 9, 10, 11, 12]\n")
    return folder, tokens


def _train_from(tmp_path, folder: str, tokens, steps: int, *more: str) -> int:
    return main(["train", "--init-from", folder, "--dataset", f"file:{tokens}", "--steps", str(steps), "--max-len",
                 "16", "--checkpoint-dir", str(tmp_path / "ck"), "--checkpoint-every", "1", "--no-progress",
                 "--policy", "static:megatron_ts", *more])


def test_the_init_from_folder_under_another_spelling_resumes(tmp_path, capsys, hf_folder, monkeypatch):
    """`--init-from ./hf` resumes the checkpoint started from `--init-from hf`: one folder, compared by its
    weights' content (it was refused, the path strings differing)."""
    folder, tokens = hf_folder
    monkeypatch.chdir(tmp_path)
    assert _train_from(tmp_path, "hf", tokens, 1) == 0
    assert _train_from(tmp_path, f"./{folder.name}", tokens, 2, "--resume") == 0, capsys.readouterr().err[-2000:]
    assert (tmp_path / "ck" / "step-000002").is_dir()


def test_other_weights_in_the_init_from_folder_are_refused(tmp_path, capsys, hf_folder):
    """The folder replaced by other weights of the same shapes (another seed): one line, not a resume of a
    checkpoint that other weights started."""
    from tests.runtime.hf_folders import build

    folder, tokens = hf_folder
    assert _train_from(tmp_path, str(folder), tokens, 1) == 0
    build("gpt2", seed=1).save_pretrained(folder)
    capsys.readouterr()
    assert _train_from(tmp_path, str(folder), tokens, 2, "--resume") == 2
    line = _one_line(capsys)
    assert "was started from other weights" in line and "--init-from" in line, line
