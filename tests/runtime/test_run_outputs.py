"""Nothing lost: a resumed run rewrites only its own --log-file (told by content: its row of the checkpoint's
step, as the checkpoint recorded it), and a checkpoint's publication never removes a folder the run did not
write."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import sys
import time
from pathlib import Path

import pytest
import torch

from paradyse_lab.app.train_options import TrainOptions
from paradyse_lab.app.training import train
from paradyse_lab.cli import main
from paradyse_lab.errors import RunStopped, UserInputError
from paradyse_lab.runtime.hf import export

ROOT = Path(__file__).resolve().parents[2]
MICRO_GPT2 = {"model_type": "gpt2", "n_embd": 16, "n_head": 2, "n_layer": 2, "n_positions": 512, "vocab_size": 96}
"""A GPT-2 config small enough that a CPU step takes milliseconds."""


@pytest.fixture
def base(tmp_path):
    path = tmp_path / "micro-gpt2.json"
    path.write_text(json.dumps(MICRO_GPT2))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield dict(model=str(path), dataset="uniform:8:16", policy="static:megatron_ts", max_len=16, progress=False,
               checkpoint_every=2)
    torch.set_num_threads(threads)


def test_a_resumed_run_refuses_another_runs_log_and_leaves_it_whole(tmp_path, base):
    """Two runs of the same settings (A: 6 steps, B: 4); B resumed with A's log as its --log-file is refused with
    one line and A's log keeps its 6 rows (before, B's resume from step 4 deleted A's rows 5 and 6). B's own log
    resumes as before, and so does a resume with no checkpoint given a log holding rows: refused, untouched."""
    log_a, log_b = tmp_path / "a.csv", tmp_path / "b.csv"
    train(TrainOptions(**base, steps=6, checkpoint_dir=str(tmp_path / "ck-a"), log_file=str(log_a)))
    train(TrainOptions(**base, steps=4, checkpoint_dir=str(tmp_path / "ck-b"), log_file=str(log_b)))
    before = log_a.read_text()
    with pytest.raises(UserInputError, match="is not the log of the run checkpointed at step 4"):
        train(TrainOptions(**base, steps=8, resume=True, checkpoint_dir=str(tmp_path / "ck-b"), log_file=str(log_a)))
    assert log_a.read_text() == before and len(before.splitlines()) == 7
    with pytest.raises(UserInputError, match="holds the rows of another run"):
        train(TrainOptions(**base, steps=8, resume=True, checkpoint_dir=str(tmp_path / "ck-new"),
                           log_file=str(log_a)))
    assert log_a.read_text() == before
    rows = train(TrainOptions(**base, steps=6, resume=True, checkpoint_dir=str(tmp_path / "ck-b"),
                              log_file=str(log_b)))
    assert [r["step"] for r in rows] == [5, 6]
    assert [line.split(",")[0] for line in log_b.read_text().splitlines()[1:]] == ["1", "2", "3", "4", "5", "6"]
    fresh = tmp_path / "fresh.csv"  # a header alone: no row to lose
    fresh.write_text(log_b.read_text().splitlines()[0] + "\n")
    train(TrainOptions(**base, steps=8, resume=True, checkpoint_dir=str(tmp_path / "ck-b"), log_file=str(fresh)))
    assert [line.split(",")[0] for line in fresh.read_text().splitlines()[1:]] == ["7", "8"]


def test_a_publication_never_removes_a_folder_the_run_did_not_write(tmp_path, base):
    """ck/step-000004 holding an exported model (no meta.json of a checkpoint): a run resumed from step 2 stops
    with one line at its step-4 checkpoint and the folder keeps its files (before, it was deleted and replaced).
    A checkpoint of the run whose meta.json was lost (DCP's files only) is still replaced by the resumed run."""
    ck = tmp_path / "ck"
    train(TrainOptions(**base, steps=4, checkpoint_dir=str(ck)))
    dcp_files = sorted(p.name for p in (ck / "step-000004").iterdir())
    shutil.rmtree(ck / "step-000004")
    (ck / "latest").write_text("step-000002")
    foreign = ck / "step-000004"
    foreign.mkdir()
    (foreign / "config.json").write_text("{}")
    (foreign / "model.safetensors").write_bytes(b"weights")
    with pytest.raises(RunStopped, match="step-000004 exists and is not a checkpoint"):
        train(TrainOptions(**base, steps=4, resume=True, checkpoint_dir=str(ck)))
    assert sorted(p.name for p in foreign.iterdir()) == ["config.json", "model.safetensors"]
    assert (ck / "latest").read_text().strip() == "step-000002"
    shutil.rmtree(foreign)
    train(TrainOptions(**base, steps=4, resume=True, checkpoint_dir=str(ck)))
    (ck / "step-000004" / "meta.json").unlink()  # damaged: DCP's files only
    (ck / "latest").write_text("step-000002")
    train(TrainOptions(**base, steps=4, resume=True, checkpoint_dir=str(ck)))
    assert sorted(p.name for p in (ck / "step-000004").iterdir()) == dcp_files


@pytest.mark.parametrize("where", ["step-folder", "inside-checkpoint", "checkpoint-dir"])
def test_export_hf_refuses_an_out_inside_a_checkpoint_folder(tmp_path, base, capsys, where):
    """--out as a new step-* folder of the checkpoint folder (which the next resumed run would publish over), a
    folder inside the checkpoint read, or the checkpoint folder's own subfolder: one line, exit 2, nothing
    written."""
    from paradyse_lab.cli import main

    ck = tmp_path / "ck"
    train(TrainOptions(**base, steps=2, checkpoint_dir=str(ck)))
    before = sorted(str(p.relative_to(ck)) for p in ck.rglob("*"))
    out = {"step-folder": ck / "step-000004", "inside-checkpoint": ck / "step-000002" / "hf",
           "checkpoint-dir": ck / "exports" / "hf"}[where]
    source = ck if where == "checkpoint-dir" else ck / "step-000002"  # step-folder: ck is not the input
    capsys.readouterr()
    assert main(["export-hf", "--checkpoint", str(source), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--out" in err and "inside" in err, err
    assert sorted(str(p.relative_to(ck)) for p in ck.rglob("*")) == before


MICRO_LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 32,
               "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2, "intermediate_size": 64,
               "vocab_size": 96, "max_position_embeddings": 1024, "rms_norm_eps": 1e-5, "bos_token_id": 1,
               "eos_token_id": 2, "rope_theta": 10000.0}
"""A Hugging Face LLaMA config.json with fields export-hf cannot rebuild from shapes (its positions, BOS, EOS)."""


def _llama_checkpoint(tmp_path, base) -> Path:
    """2 steps of `train --model FOLDER/config.json`, FOLDER holding tokenizer files too; the checkpoint folder."""
    folder = tmp_path / "src"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(MICRO_LLAMA))
    (folder / "tokenizer_config.json").write_text('{"model_max_length": 1024}')
    (folder / "special_tokens_map.json").write_text('{"bos_token": "<s>"}')
    ck = tmp_path / "ck"
    train(TrainOptions(**{**base, "model": str(folder / "config.json")}, steps=2, checkpoint_dir=str(ck)))
    return ck


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_export_hf_carries_the_source_config_and_tokenizer_with_the_umasks_modes(tmp_path, base, umask):
    """A model given as a Hugging Face config.json exports with that config's fields (max_position_embeddings
    1024, not 131072; BOS and EOS ids kept), the source folder's tokenizer files, and every file's mode as the
    umask makes it (before: model.safetensors 0600 whatever the umask)."""
    from paradyse_lab.runtime.hf.export import export_hf

    ck = _llama_checkpoint(tmp_path, base)
    old = os.umask(umask)
    try:
        done = export_hf(ck, tmp_path / "out")
    finally:
        os.umask(old)
    out = tmp_path / "out"
    config = json.loads((out / "config.json").read_text())
    assert {k: config[k] for k in ("max_position_embeddings", "bos_token_id", "eos_token_id")} == {
        "max_position_embeddings": 1024, "bos_token_id": 1, "eos_token_id": 2}
    assert sorted(done["files"]) == sorted(p.name for p in out.iterdir()) == [
        "config.json", "model.safetensors", "special_tokens_map.json", "tokenizer_config.json"]
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()} == dict.fromkeys(
        done["files"], 0o666 & ~umask)


def _stopped_export(argv: list[str], err_file: Path) -> int:
    """The pid of a process forked from this one that runs `paradyse-lab ARGV` (the CLI's `main`, its stderr
    `err_file`, its stdout /dev/null) and stops itself (SIGSTOP) once export-hf's temporary folder exists, before
    it writes the first file into it; it ends with main's exit code. Forked from this process, which imported torch
    and the CLI already, instead of a new interpreter that imports them again (~3 CPU s)."""
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        torch.set_num_threads(1)  # the child's first parallel region must not wait on the parent's OpenMP threads
        null, err = os.open(os.devnull, os.O_WRONLY), os.open(err_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(null, 1), os.dup2(err, 2)
        os.close(null), os.close(err)
        sys.stdout, sys.stderr = open(1, "w", closefd=False), open(2, "w", buffering=1, closefd=False)
        write = export.write_safetensors

        def stopped_first(*args, **kwargs):  # the temporary folder is made: wait here (stopped) for the signal
            os.kill(os.getpid(), signal.SIGSTOP)
            return write(*args, **kwargs)

        export.write_safetensors = stopped_first
        code = main(argv)
    except SystemExit as done:  # argparse exits itself
        code = done.code if isinstance(done.code, int) else 1
    except BaseException:  # noqa: BLE001 - a bug's traceback goes to the stderr file
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush(), sys.stderr.flush()
        os._exit(code)  # never back into pytest


def test_export_hf_stopped_by_sigterm_leaves_no_temporary_folder(tmp_path, base):
    """SIGTERM while export-hf writes its temporary folder (the process stopped itself once the folder exists,
    then signalled): one line, exit 1, and neither the folder nor --out is left (before, `.out.tmp-*` stayed).
    The process stops itself at that point instead of the test polling the folder in a loop for the milliseconds
    it exists (a core busy for the export's whole run, and retries on a loaded machine)."""
    ck = _llama_checkpoint(tmp_path, base)
    exports = tmp_path / "exports"
    exports.mkdir()
    err_file = tmp_path / "stderr"
    pid = _stopped_export(["export-hf", "--checkpoint", str(ck), "--out", str(exports / "out"), "--max-shard-size",
                           "1KB"], err_file)
    code = None
    try:
        deadline, status = time.monotonic() + 120, 0
        while time.monotonic() < deadline:
            got, status = os.waitpid(pid, os.WNOHANG | os.WUNTRACED)
            if got:
                break
            time.sleep(0.05)
        assert got and os.WIFSTOPPED(status), (status, err_file.read_text() if got else "still running")
        assert [p.name.startswith(".out.tmp-") for p in exports.iterdir()] == [True]
        os.kill(pid, signal.SIGTERM)
        os.kill(pid, signal.SIGCONT)
        while time.monotonic() < deadline and code is None:
            got, status = os.waitpid(pid, os.WNOHANG)
            code = os.waitstatus_to_exitcode(status) if got else None
            time.sleep(0.05)
    finally:
        if code is None:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    err = err_file.read_text()
    assert code == 1 and "SIGTERM" in err and len(err.strip().splitlines()) == 1, (code, err)
    assert list(exports.iterdir()) == []
