"""Hugging Face folders in (`train --init-from`, runtime/hf/weights.py) on one process: every rank's slices
equal the layout's shard of the full conversion, the model gives transformers' logits, and bad folders are
one-line errors. The first training step's loss against transformers': test_export_hf.py (GPT-2, one process)
and weights_cases.py (LLaMA, two ranks)."""

from __future__ import annotations

import json

import pytest
import torch
from hf_folders import build, save
from torch.testing import assert_close

from paradyse_lab.core.model_spec import spec_from_hf
from paradyse_lab.errors import UserInputError
from paradyse_lab.runtime.hf.convert import hf_to_state_dict
from paradyse_lab.runtime.hf.weights import model_source, read_rank_state_dict
from paradyse_lab.runtime.model.parallel_gpt import ParallelGPT
from paradyse_lab.runtime.model.reference import GPTParams
from paradyse_lab.runtime.model.weight_shards import shard_state_dict


@pytest.fixture(autouse=True, scope="module")
def needs_transformers():
    """Skip without transformers; imported here, not at collection: a pytest worker that runs none of these
    tests does not pay its import (about 1.5 CPU s)."""
    pytest.importorskip("transformers")


@pytest.fixture(scope="module", params=["llama", "gpt2"])
def folders(request, tmp_path_factory):
    """(kind, the transformers model, its folder as one file, its folder in shards)."""
    model = build(request.param)
    root = tmp_path_factory.mktemp(request.param)
    return request.param, model, save(model, root / "single", False), save(model, root / "sharded", True)


@pytest.mark.parametrize("p, vocab_parallel", [(1, False), (2, False), (4, False), (4, True)])
def test_each_rank_reads_its_own_slices(folders, p, vocab_parallel):
    """Rank r's tensors read by slices equal shard r of the whole state dict converted at once; with the
    vocabulary-parallel layout each rank reads only its vocabulary rows of the embedding and head."""
    _, model, single, sharded = folders
    cfg = spec_from_hf(model.config)
    full = hf_to_state_dict(model.state_dict(), cfg)
    like = GPTParams(cfg, p, vocab_parallel).state_dict()
    for rank in range(p):
        want = shard_state_dict(full, rank, p, vocab_parallel)
        for folder in (single, sharded):
            got = read_rank_state_dict(folder, cfg, rank, p, like, vocab_parallel)
            assert got.keys() == want.keys()
            for key, value in want.items():
                assert torch.equal(got[key], value), (folder.name, rank, key)


def test_model_from_folder_matches_logits(folders):
    """`ParallelGPT.from_hf_folder` (the API's entry) gives transformers' logits."""
    _, model, single, _ = folders
    ids = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(1))
    ours = ParallelGPT.from_hf_folder(single)(ids, ["megatron_ts"] * 2)
    with torch.no_grad():
        assert_close(ours, model(input_ids=ids).logits, rtol=1e-5, atol=1e-5)


def test_bad_folders_are_one_line_errors(folders, tmp_path):
    _, _, single, _ = folders
    with pytest.raises(UserInputError, match="not a folder"):
        model_source("", str(tmp_path / "missing"))
    with pytest.raises(UserInputError, match="has no config.json"):
        model_source("", str(tmp_path))
    (tmp_path / "config.json").write_text((single / "config.json").read_text())
    with pytest.raises(UserInputError, match="holds no model.safetensors"):
        ParallelGPT.from_hf_folder(tmp_path)
    with pytest.raises(UserInputError, match="is not the model of --init-from"):
        model_source("gpt2-tiny", str(single))
    with pytest.raises(UserInputError, match="--model is required"):
        model_source("", "")
    config = json.loads((single / "config.json").read_text())
    config["vocab_size"] = 128  # the tensors stay vocab 64
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "model.safetensors").write_bytes((single / "model.safetensors").read_bytes())
    with pytest.raises(UserInputError, match="shape"):
        ParallelGPT.from_hf_folder(tmp_path)


@pytest.mark.parametrize("argv, expected", [
    (["--init-from", "{tmp}/missing"], "--init-from '{tmp}/missing' is not a folder"),
    ([], "--model is required"),
    (["--init-from", "{tmp}", "--nproc", "2"], "has no config.json"),  # refused before any rank starts
])
def test_train_command_refuses_in_one_line(tmp_path, capsys, argv, expected):
    from paradyse_lab.cli import main

    argv = [a.format(tmp=tmp_path) for a in argv]
    assert main(["train", "--dataset", "uniform:8:8", "--steps", "1", "--no-progress", *argv]) == 2
    err = capsys.readouterr().err
    assert expected.format(tmp=tmp_path) in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("kind", ["llama-biases-tied", "mistral", "qwen2"])
def test_other_llama_family_folders(kind, tmp_path):
    """Biases on every linear layer with a tied head, Mistral, and Qwen2's q/k/v-only biases: each rank's slices
    are its shard of the full conversion (p = 4), and the model gives transformers' logits."""
    model = build(kind)
    folder = save(model, tmp_path, sharded=True)
    cfg = spec_from_hf(model.config)
    full = hf_to_state_dict(model.state_dict(), cfg)
    like = GPTParams(cfg, 4).state_dict()
    for rank in range(4):
        got, want = read_rank_state_dict(folder, cfg, rank, 4, like), shard_state_dict(full, rank, 4)
        assert all(torch.equal(got[k], v) for k, v in want.items()) and got.keys() == want.keys()
    ids = torch.randint(0, 64, (1, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert_close(ParallelGPT.from_hf_folder(folder)(ids, ["metp"] * 2), model(input_ids=ids).logits,
                     rtol=1e-5, atol=1e-5)


def test_vocabulary_rows_of_a_table_p_does_not_divide(tmp_path):
    """A tied LLaMA of 62 vocabulary rows over 4 ranks (16 rows each, the last rank's 14 and 2 of padding): each
    rank reads only its rows of the embedding, padded with zeros, and the rest as the replicated layout does."""
    import transformers

    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=62, hidden_size=32, num_attention_heads=4, num_key_value_heads=2, intermediate_size=48,
        num_hidden_layers=1, max_position_embeddings=64, tie_word_embeddings=True)).float()
    folder = save(model, tmp_path, sharded=True)
    cfg = spec_from_hf(model.config)
    full = hf_to_state_dict(model.state_dict(), cfg)
    like = GPTParams(cfg, 4, vocab_parallel=True).state_dict()
    for rank in range(4):
        got, want = read_rank_state_dict(folder, cfg, rank, 4, like, True), shard_state_dict(full, rank, 4, True)
        assert got.keys() == want.keys() and all(torch.equal(got[k], v) for k, v in want.items()), rank
    assert got["wte"].shape == (16, 32) and torch.equal(got["wte"][14:], torch.zeros(2, 32))
