"""Distributed cases of real weights in and out (runtime_cases.py adds them to the per-world harness):
a Hugging Face folder trained from with --init-from on two ranks, checkpointed there, resumed on one rank and
on four (resharded by torch.distributed.checkpoint), and exported back to a folder transformers loads."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import torch
import torch.distributed as dist
from torch.testing import assert_close

from paradyse_lab.core.model_spec import spec_from_hf

RESUME_TOL = 1e-5
"""Loss of a resharded resume against the unbroken run: the same fp32 sums, reduced in another order."""


def _shared_dir(rank: int) -> str:
    import tempfile

    box = [tempfile.mkdtemp(prefix="paradyse-weights-") if rank == 0 else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def _copy_first_checkpoint(src: str, dst: str) -> None:
    """`dst`: a checkpoint folder holding only `src`'s step-000002 (what a run stopped at step 2 leaves)."""
    os.makedirs(dst)
    shutil.copytree(os.path.join(src, "step-000002"), os.path.join(dst, "step-000002"))
    with open(os.path.join(dst, "latest"), "w") as f:
        f.write("step-000002")


def init_reshard_export_case(rank: int, p: int, group) -> None:
    """p = 4 world, three runs in sub-groups: (a) ranks 0-1 train 4 steps from a random LlamaForCausalLM folder
    saved in shards (--init-from, the folder's config), checkpointing every 2 steps: the first loss is
    transformers' (1e-4); (b) rank 0 alone and (c) all four ranks resume from (a)'s step-2 checkpoint: steps 3
    and 4 give (a)'s losses (1e-5); (d) export-hf of (a)'s step-4 checkpoint (written by 2 ranks) loads in
    transformers with the runtime's logits (1e-5)."""
    from hf_folders import build, hf_loss, save

    from paradyse_lab.app.train_options import TrainOptions
    from paradyse_lab.app.training import train
    from paradyse_lab.runtime.checkpoints.dcp import read_full
    from paradyse_lab.runtime.hf.export import export_hf
    from paradyse_lab.runtime.model.reference import ReferenceGPT
    from paradyse_lab.runtime.training.step_inputs import markov_tokens

    root = _shared_dir(rank)
    folder = os.path.join(root, "llama")
    hf = build("llama") if rank == 0 else None  # transformers is imported on rank 0 alone (~5 s a rank)
    if rank == 0:
        save(hf, Path(folder), sharded=True)
    pair, alone = dist.new_group([0, 1]), dist.new_group([0])
    dist.barrier()
    common = {"model": "", "init_from": folder, "dataset": "uniform:48:48", "max_len": 48, "progress": False,
              "policy": "static:megatron_cz", "checkpoint_every": 2, "lr": 1e-2}
    straight = None
    if rank < 2:
        opts = TrainOptions(steps=4, checkpoint_dir=os.path.join(root, "a"), **common)
        straight = [r["loss"] for r in train(opts, pair)]
    if rank == 0:
        assert abs(straight[0] - hf_loss(hf, markov_tokens(opts.seed, 0, 1, 48, 64))) < 1e-4
    box = [straight]
    dist.broadcast_object_list(box, src=0)
    if rank == 1:  # run (a)'s other rank logged the same losses as rank 0, whose first one is transformers'
        assert straight == box[0], (straight, box[0])
    straight = box[0]
    if rank == 0:
        for name in ("b", "c"):
            _copy_first_checkpoint(os.path.join(root, "a"), os.path.join(root, name))
        alone_log = train(TrainOptions(steps=4, resume=True, checkpoint_dir=os.path.join(root, "b"), **common), alone)
        assert [r["step"] for r in alone_log] == [3, 4]
        assert_close(torch.tensor([r["loss"] for r in alone_log]), torch.tensor(straight[2:]), rtol=0,
                     atol=RESUME_TOL)
    dist.barrier()
    four = train(TrainOptions(steps=4, resume=True, checkpoint_dir=os.path.join(root, "c"), **common))
    assert [r["step"] for r in four] == [3, 4]
    assert_close(torch.tensor([r["loss"] for r in four]), torch.tensor(straight[2:]), rtol=0, atol=RESUME_TOL)
    if rank == 0:
        done = export_hf(os.path.join(root, "a"), os.path.join(root, "exported"), max_shard_bytes=30_000)
        assert done["world_size"] == 2 and done["step"] == 4 and "model.safetensors.index.json" in done["files"]
        import transformers

        reloaded = transformers.AutoModelForCausalLM.from_pretrained(os.path.join(root, "exported")).eval()
        full, _ = read_full(os.path.join(root, "a", "step-000004"))
        ref = ReferenceGPT(spec_from_hf(hf.config))
        ref.load_state_dict(full)
        ids = torch.randint(0, 64, (2, 24), generator=torch.Generator().manual_seed(4))
        with torch.no_grad():
            assert_close(reloaded(input_ids=ids).logits, ref(ids), rtol=1e-5, atol=1e-5)
    dist.barrier()
    if rank == 0:
        shutil.rmtree(root)


def api_example_case(rank: int, p: int, group) -> None:
    """examples/plan_and_train.py (the public API, docs/api.md) on these ranks: it plans a step, trains it (the
    loss falls on its repeated tokens) and saves; the checkpoint loads into models of other seeds alike."""
    import importlib.util

    import paradyse_lab as pl

    path = Path(__file__).resolve().parents[2] / "examples" / "plan_and_train.py"
    spec = importlib.util.spec_from_file_location("plan_and_train", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    root = _shared_dir(rank)
    losses = example.main(os.path.join(root, "ck"), steps=3)  # step 3's loss 0.70 below step 1's here
    assert losses[-1] < losses[0] - 0.5, losses
    models = [pl.build_model("llama-tiny", seed=seed) for seed in (1, 2)]
    fresh = [q.detach().clone() for q in models[0].parameters()]
    assert [pl.load(os.path.join(root, "ck"), m) for m in models] == [3, 3]
    for a, b, before in zip(models[0].parameters(), models[1].parameters(), fresh):
        assert torch.equal(a, b) and (a.numel() == 0 or not torch.equal(a, before))
    dist.barrier()
    if rank == 0:
        shutil.rmtree(root)


def gpt2_reshard_case(rank: int, p: int, group, vocab: tuple[bool, ...] = (False, False)) -> None:
    """gpt2-tiny's tensors (2 of its layers: q | k | v sections of one matrix, biases, learned positions, tied head)
    and AdamW's moments, saved by 4 ranks, read back whole on one process and resharded into 2 ranks: each rank's
    shard of the full tensors, exactly (no training: one optimizer step on fixed gradients). `vocab`: whether the 4
    writing ranks, then the 2 reading ranks of each read in turn (one checkpoint, read once per layout), store the
    embedding by vocabulary rows (runtime/model/vocab_parallel.py; then with 510 rows, which 4 does not divide: the
    checkpoint holds the global table, whatever the layout that wrote it)."""
    import dataclasses

    from paradyse_lab.core.model_spec import PRESETS
    from paradyse_lab.runtime.checkpoints import dcp as dcp_checkpoint
    from paradyse_lab.runtime.model.parallel_gpt import ParallelGPT
    from paradyse_lab.runtime.model.reference import init_state_dict
    from paradyse_lab.runtime.model.weight_shards import shard_state_dict

    cfg = dataclasses.replace(PRESETS["gpt2-tiny"], layers=2)  # the layout, not the depth
    cfg = dataclasses.replace(cfg, vocab_size=510) if any(vocab) else cfg
    full = init_state_dict(cfg, 3)
    gen = torch.Generator().manual_seed(4)
    grads = {k: torch.randn(v.shape, generator=gen) for k, v in full.items()}
    model = ParallelGPT(cfg, state_dict=full, vocab_parallel=vocab[0])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    local_grads = shard_state_dict(grads, rank, p, vocab[0])
    for name, q in model.named_parameters():
        q.grad = local_grads[name]
    opt.step()
    root = _shared_dir(rank)
    dcp_checkpoint.save(root, 1, dict(model.named_parameters()), opt, cfg, {}, dcp_checkpoint.model_record(cfg))
    stepped = model.full_state_dict()
    if rank == 0:
        weights, _ = dcp_checkpoint.read_full(os.path.join(root, "step-000001"))
        assert weights.keys() == stepped.keys() and all(torch.equal(weights[k], v) for k, v in stepped.items())
    pair = dist.new_group([0, 1])
    for read_by_rows in vocab[1:] if rank < 2 else ():
        half = ParallelGPT(cfg, pair, seed=9, vocab_parallel=read_by_rows)
        half_opt = torch.optim.AdamW(half.parameters(), lr=1e-3)
        dcp_checkpoint.load(os.path.join(root, "step-000001"), dict(half.named_parameters()), half_opt, cfg, {}, pair)
        want, moment = (shard_state_dict(x, rank, 2, read_by_rows) for x in (stepped, grads))
        for name, q in half.named_parameters():
            assert torch.equal(q.detach(), want[name]), (read_by_rows, name)
            if q.numel():
                assert_close(half_opt.state[q]["exp_avg"], 0.1 * moment[name], rtol=1e-6, atol=1e-7, msg=name)
                assert float(half_opt.state[q]["step"]) == 1.0
    dist.barrier()
    if rank == 0:
        shutil.rmtree(root)


CASES = {"weights-init-reshard-export": init_reshard_export_case, "api-example": api_example_case,
         # GPT-2's tensors written by rows, read by rows and whole (the layer tensors are stored alike whatever the
         # embedding's layout); a checkpoint written with the embedding replicated, resharded: 2 ranks' read by 1
         # and by 4 in weights-init-reshard-export
         "gpt2-dcp-reshard-vocab-4-to-2-and-replicated-2": lambda rank, p, group: gpt2_reshard_case(
             rank, p, group, (True, True, False))}
ONLY_AT = {"weights-init-reshard-export": (4,),  # sub-groups of 2 and 1 inside the 4 ranks: every world size at once
           "api-example": (2,),  # the example's two ranks
           "gpt2-dcp-reshard-vocab-4-to-2-and-replicated-2": (4,)}  # 4 ranks write, a sub-group of 2 reads
