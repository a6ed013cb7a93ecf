"""`--init-from` takes a Hugging Face folder only when its tensors are exactly what its config.json says: a
config of fewer layers, a smaller vocabulary, fewer positions, a narrower MLP or fewer K/V heads than the
tensors (which were read in part, the model cut without a word, and export-hf then wrote the cut model), and
damaged or lying safetensors files and shard indexes, are one-line errors, at one rank and under --nproc 2."""

from __future__ import annotations

import json
import shutil
import struct

import pytest
from hf_folders import build, save

from paradyse_lab.cli import main
from paradyse_lab.errors import UserInputError
from paradyse_lab.runtime.model.parallel_gpt import ParallelGPT


@pytest.fixture(autouse=True, scope="module")
def needs_transformers():
    pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """{(kind, sharded): folder} of a small random GPT-2 and LLaMA (GQA: 4 heads, 2 K/V heads)."""
    root = tmp_path_factory.mktemp("claims")
    return {(kind, sharded): save(build(kind), root / f"{kind}-{sharded}", sharded)
            for kind in ("gpt2", "llama") for sharded in (False, True)}


def _copy(saved, tmp_path, kind: str, sharded: bool = False, **config_changes):
    folder = tmp_path / "model"
    shutil.copytree(saved[(kind, sharded)], folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(config_changes)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


LYING_CONFIGS = [
    ("gpt2", {"n_layer": 1}, "no place for"),
    ("llama", {"num_hidden_layers": 1}, "no place for"),
    ("gpt2", {"vocab_size": 32}, "'wte.weight' has shape [64, 32]; the model of config.json needs exactly 32 rows"),
    ("llama", {"vocab_size": 32}, "'embed_tokens.weight' has shape [64, 32]"),
    ("gpt2", {"n_positions": 32}, "'wpe.weight' has shape [64, 32]"),
    ("llama", {"intermediate_size": 24}, "needs exactly 24"),
    ("gpt2", {"n_inner": 64}, "'h.0.mlp.c_fc.weight' has shape [32, 128]"),
    ("llama", {"num_key_value_heads": 1}, "'layers.0.self_attn.k_proj.weight' has shape [16, 32]"),
]


@pytest.mark.parametrize("sharded", [False, True])
@pytest.mark.parametrize("kind, change, shown", LYING_CONFIGS,
                         ids=[f"{k}-{next(iter(c))}" for k, c, _ in LYING_CONFIGS])
def test_a_config_smaller_than_its_tensors_is_refused(saved, tmp_path, kind, change, shown, sharded):
    """Each was loaded by reading the first rows of the longer tensors (or leaving the last layer unread)."""
    folder = _copy(saved, tmp_path, kind, sharded, **change)
    with pytest.raises(UserInputError, match="config.json and the weights disagree") as err:
        ParallelGPT.from_hf_folder(folder)
    assert shown in str(err.value)


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and ": error: " in err[0], err
    return err[0]


@pytest.mark.parametrize("nproc", ["1", "2"])
def test_train_and_export_never_see_a_cut_model(saved, tmp_path, capsys, nproc):
    """`train --init-from` of a 1-layer config over 2-layer tensors: one line, exit 2, no checkpoint (it trained
    the cut model and export-hf wrote it)."""
    folder = _copy(saved, tmp_path, "llama", num_hidden_layers=1)
    assert main(["train", "--init-from", str(folder), "--dataset", "uniform:8:16", "--steps", "1", "--no-progress",
                 "--checkpoint-dir", str(tmp_path / "ck"), "--nproc", nproc]) == 2
    assert "no place for" in _one_line(capsys)
    assert not (tmp_path / "ck").exists() or not any((tmp_path / "ck").glob("step-*"))


def _single(saved, tmp_path, data: bytes):
    folder = _copy(saved, tmp_path, "gpt2")
    (folder / "model.safetensors").write_bytes(data)
    return folder


DAMAGED = {
    "truncated": lambda b: b[: len(b) - 100],
    "empty": lambda b: b"",
    "huge header": lambda b: struct.pack("<Q", 2**62) + b"{}",
    "garbage header": lambda b: struct.pack("<Q", 12) + b"not json at all",
    "header only": lambda b: b[: 8 + struct.unpack("<Q", b[:8])[0]],
}


@pytest.mark.parametrize("damage", list(DAMAGED))
def test_a_damaged_safetensors_file_is_one_line(saved, tmp_path, capsys, damage):
    data = (saved[("gpt2", False)] / "model.safetensors").read_bytes()
    folder = _single(saved, tmp_path, DAMAGED[damage](data))
    with pytest.raises(UserInputError, match="is not a readable safetensors file"):
        ParallelGPT.from_hf_folder(folder)
    assert main(["train", "--init-from", str(folder), "--dataset", "uniform:8:16", "--steps", "1",
                 "--no-progress"]) == 2
    assert "model.safetensors is not a readable safetensors file" in _one_line(capsys)


LYING_INDEXES = {
    "not json": ("{weight_map", "not valid JSON"),
    "weight_map a list": ('{"weight_map": ["a", "b"]}', "weight_map must be a JSON object"),
    "weight_map empty": ('{"weight_map": {}}', "weight_map must be a JSON object"),
    "file a number": ('{"weight_map": {"wte.weight": 3}}', "must be a file name, got 3"),
    "file leaves the folder": ('{"weight_map": {"wte.weight": "../../etc/passwd"}}', "leaves the folder"),
    "absolute file": ('{"weight_map": {"wte.weight": "/etc/passwd"}}', "leaves the folder"),
    "file missing": ('{"weight_map": {"wte.weight": "nowhere.safetensors"}}', "is not a file"),
}


@pytest.mark.parametrize("case", list(LYING_INDEXES))
def test_a_damaged_or_lying_shard_index_is_one_line(saved, tmp_path, case):
    folder = _copy(saved, tmp_path, "gpt2", sharded=True)
    text, shown = LYING_INDEXES[case]
    (folder / "model.safetensors.index.json").write_text(text)
    with pytest.raises(UserInputError, match=shown):
        ParallelGPT.from_hf_folder(folder)


def test_an_index_placing_a_tensor_in_the_wrong_shard_is_one_line(saved, tmp_path):
    folder = _copy(saved, tmp_path, "gpt2", sharded=True)
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    files = sorted(set(index["weight_map"].values()))
    name = next(n for n, f in index["weight_map"].items() if f == files[0])
    index["weight_map"][name] = files[1]
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(UserInputError, match="holds no tensor"):
        ParallelGPT.from_hf_folder(folder)
