"""`train --init-from` then `paradyse-lab export-hf` on one process: the first loss is transformers', and a
checkpoint becomes a folder transformers loads with the runtime's logits (the config of the --init-from folder,
or one built from a preset's shapes), sharded above --max-shard-size; bad input is one line and exit 2, with
nothing written. The multi-rank checkpoint (written at p = 2) is weights_cases.py's."""

from __future__ import annotations

import importlib.util
import json
import shutil

import pytest
import torch
from hf_folders import build, hf_loss, save
from torch.testing import assert_close

from paradyse_lab.app.train_options import TrainOptions
from paradyse_lab.app.training import train
from paradyse_lab.cli import main
from paradyse_lab.runtime.model.reference import ReferenceGPT
from paradyse_lab.runtime.training.step_inputs import markov_tokens

pytestmark = pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="needs transformers")
"""transformers itself (~2.5 CPU s to import) is imported by the tests, not while the file is collected: every
pytest-xdist worker collects every test file."""
IDS = torch.randint(0, 64, (2, 20), generator=torch.Generator().manual_seed(2))



def _train(tmp_path, **kw) -> tuple[str, list[dict], TrainOptions]:
    ck = str(tmp_path / "ck")
    opts = TrainOptions(dataset="uniform:16:16", steps=2, max_len=16, policy="static:megatron_ts", progress=False,
                        checkpoint_dir=ck, **kw)
    return ck, train(opts), opts


def _runtime_logits(ck: str, ids: torch.Tensor) -> torch.Tensor:
    # here: torch.distributed.checkpoint (~1 CPU s to import) is not imported while the file is collected
    from paradyse_lab.runtime.checkpoints.dcp import config_of, read_full

    full, meta = read_full(f"{ck}/step-000002")
    ref = ReferenceGPT(config_of(meta))
    ref.load_state_dict(full)
    with torch.no_grad():
        return ref(ids)


@pytest.fixture(scope="module")
def gpt2_run(tmp_path_factory):
    """A random GPT2LMHeadModel saved in shards, and 2 steps of `train --init-from` it (no --model), checkpointed:
    (the transformers model, its folder, the checkpoint folder, the training log, the options)."""
    root = tmp_path_factory.mktemp("gpt2-run")
    model = build("gpt2")
    folder = save(model, root / "gpt2", sharded=True)
    return (model, folder, *_train(root, model="", init_from=str(folder)))


def test_gpt2_first_step_is_transformers_and_exports_back(gpt2_run, tmp_path, capsys):
    """The first step's loss is transformers' on the step's tokens (1e-4); the checkpoint exports (sharded above
    50 KB, the folder's own config.json) to a folder `from_pretrained` loads with the runtime's logits (1e-5)."""
    import transformers

    model, folder, ck, log, opts = gpt2_run
    assert abs(log[0]["loss"] - hf_loss(model, markov_tokens(opts.seed, 0, 1, 16, 64))) < 1e-4
    assert main(["export-hf", "--checkpoint", ck, "--out", str(tmp_path / "out"), "--max-shard-size", "50KB"]) == 0
    assert "written by 1 ranks" in capsys.readouterr().out
    index = json.loads((tmp_path / "out" / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1  # sharded above 50 KB
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "out").eval()
    assert type(reloaded).__name__ == "GPT2LMHeadModel"
    with torch.no_grad():
        assert_close(reloaded(input_ids=IDS).logits, _runtime_logits(ck, IDS), rtol=1e-5, atol=1e-5)
    original = json.loads((folder / "config.json").read_text())
    exported = json.loads((tmp_path / "out" / "config.json").read_text())
    assert {k: v for k, v in exported.items() if k not in ("dtype", "torch_dtype")} == {
        k: v for k, v in original.items() if k not in ("dtype", "torch_dtype")}


def test_preset_llama_gets_a_config_of_its_shapes(tmp_path):
    import transformers

    ck, _, _ = _train(tmp_path, model="llama-tiny")
    assert main(["export-hf", "--checkpoint", f"{ck}/step-000002", "--out", str(tmp_path / "out")]) == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["config.json", "model.safetensors"]
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "out").eval()
    assert type(reloaded).__name__ == "LlamaForCausalLM" and reloaded.config.num_key_value_heads == 2
    ids = torch.randint(0, 512, (1, 24), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert_close(reloaded(input_ids=ids).logits, _runtime_logits(ck, ids), rtol=1e-5, atol=1e-5)


def test_bad_input_is_one_line_exit_2_and_writes_nothing(gpt2_run, tmp_path, capsys):
    ck = str(tmp_path / "ck")
    shutil.copytree(gpt2_run[2], ck)
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "x").write_text("keep")
    cases = {"--out": ["--checkpoint", ck, "--out", str(taken)],
             "is neither a checkpoint": ["--checkpoint", str(tmp_path / "nothing"), "--out", str(tmp_path / "o1")],
             "--max-shard-size": ["--checkpoint", ck, "--out", str(tmp_path / "o2"), "--max-shard-size", "lots"]}
    data = next((tmp_path / "ck" / "step-000002").glob("*.distcp"))
    for expected, argv in cases.items():
        assert main(["export-hf", *argv]) == 2
        err = capsys.readouterr().err
        assert expected in err and len(err.strip().splitlines()) == 1, err
    data.write_bytes(data.read_bytes()[:100])  # truncated
    assert main(["export-hf", "--checkpoint", ck, "--out", str(tmp_path / "o3")]) == 2
    assert "does not match its checksum" in capsys.readouterr().err
    assert (taken / "x").read_text() == "keep"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck", "taken"]  # no output, no temporary folder
