"""Distributed cases of the optimizer step (runtime_cases.py adds them to the per-world harness): a run with a
warmup + cosine schedule, global-norm clipping, gradient accumulation and held-out evaluation on a token file
gives the single-device reference's losses, learning rates, gradient norms and evaluation losses."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
from torch.testing import assert_close

STEPS, BATCH, ACCUMULATE, MAX_LEN, LR, CLIP = 4, 2, 2, 48, 3e-3, 0.5
LR_FACTORS = (0.5, 1.0, 0.75, 0.25)
"""Warmup 1 step (1/2 of --lr), then a cosine over the 3 steps left: 1, (1 + cos(pi/3))/2, (1 + cos(2pi/3))/2."""
TOL = {"rtol": 1e-4, "atol": 1e-5}
"""fp32 over four AdamW steps: the parallel sums run in another order than the reference's."""


def _documents(seed: int, count: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(5, 60, (count,), generator=gen).tolist()  # some longer than MAX_LEN: cut to it
    return [torch.randint(0, 512, (n,), generator=gen).tolist() for n in lengths]


def _token_files(rank: int) -> tuple[str, str, str]:
    box = [tempfile.mkdtemp(prefix="paradyse-optim-") if rank == 0 else None]
    dist.broadcast_object_list(box, src=0)
    files = [os.path.join(box[0], name) for name in ("train.jsonl", "eval.jsonl")]
    if rank == 0:
        for path, (seed, count) in zip(files, ((1, 16), (2, 4))):
            with open(path, "w") as f:
                f.write("\n".join(json.dumps(d) for d in _documents(seed, count)))
    dist.barrier()
    return box[0], *files


def _reference_run(model: str, train_file: str, eval_file: str) -> list[dict]:
    """The same run of `model` on one device: ReferenceGPT, each micro-step's documents at their own length."""
    from dataclasses import replace

    from paradyse_lab.core.model_spec import get_model
    from paradyse_lab.runtime.model.reference import ReferenceGPT, init_state_dict
    from paradyse_lab.runtime.training.run_inputs import TokenDocuments

    cfg = replace(get_model(model), dtype="fp32")
    ref = ReferenceGPT(cfg)
    ref.load_state_dict(init_state_dict(cfg, 0))
    opt = torch.optim.AdamW(ref.parameters(), lr=LR, weight_decay=0.0)
    train, held_out = (TokenDocuments.from_dataset(f"file:{f}") for f in (train_file, eval_file))

    def loss_of(docs, m, batch):
        s = docs.row_length(m, batch, 1, MAX_LEN)
        ids, labels = docs.row_batch(m, batch, s, cfg.vocab_size)
        return ref(ids, labels)[1], docs.row_targets(m, batch, s)

    rows = []
    for step in range(STEPS):
        for group in opt.param_groups:
            group["lr"] = LR * LR_FACTORS[step]
        parts = [loss_of(train, m, BATCH) for m in range(step * ACCUMULATE, (step + 1) * ACCUMULATE)]
        whole = sum(n for _, n in parts)
        sum(loss * n / whole for loss, n in parts).backward()
        norm = torch.nn.utils.clip_grad_norm_(ref.parameters(), CLIP)
        opt.step()
        opt.zero_grad()
        row = {"loss": sum(float(loss.detach()) * n / whole for loss, n in parts), "lr": LR * LR_FACTORS[step],
               "grad_norm": float(norm)}
        if (step + 1) % 2 == 0:
            with torch.no_grad():
                evals = [loss_of(held_out, m, BATCH) for m in range(2)]
            row["eval_loss"] = sum(float(loss) * n for loss, n in evals) / sum(n for _, n in evals)
        rows.append(row)
    return rows


class TiledFrom:
    """The policy `inner` whose plans run the tiled loss on steps of at least `length` tokens (the head decision a
    planner makes when the whole logits do not fit, simulator/policies.py), the whole head below."""

    def __init__(self, inner, length: int):
        self.inner, self.length = inner, length

    def decide(self, step, batch):
        from dataclasses import replace

        return replace(self.inner.decide(step, batch), head="tiled" if step >= self.length else "whole")

    def fresh_copy(self):
        return TiledFrom(self.inner.fresh_copy(), self.length)


def _train_counting_tiled_losses(opts, group) -> tuple[list[dict], list[bool]]:
    """`train(opts)` whose policy runs the tiled loss on steps of MAX_LEN tokens (`TiledFrom`); the log, and per
    call of the tiled loss whether it ran with gradients (a training micro-step) or without (an evaluation)."""
    from unittest import mock

    import torch

    from paradyse_lab.app.training import train
    from paradyse_lab.runtime.model import tiled_loss
    from paradyse_lab.simulator import planner

    real_policy, real_loss, calls = planner.build_policy, tiled_loss.tiled_head_loss, []

    def counted(*args, **kwargs):
        calls.append(torch.is_grad_enabled())
        return real_loss(*args, **kwargs)

    from paradyse_lab.runtime.model import parallel_gpt as model

    with (mock.patch.object(planner, "build_policy", lambda *a, **k: TiledFrom(real_policy(*a, **k), MAX_LEN)),
          mock.patch.object(tiled_loss, "tiled_head_loss", counted),
          mock.patch.object(model, "tiled_head_loss", counted)):  # the name runtime/model/parallel_gpt.py imported
        return train(opts, group), calls


def schedule_clip_accumulate_eval_case(rank: int, p: int, group) -> None:
    """train (dynamic:dp, p ranks; a micro GPT-2 of 512 tokens, runtime_cases.py `_micro_gpt2_config`) with
    --lr-schedule cosine --warmup-steps 1 --clip-grad 0.5 --accumulate 2
    --eval-every 2 on a token file: every step's loss, lr, global gradient norm (each parameter once over the
    ranks) and evaluation loss equal the single-device reference's; the clipping binds (norm > 0.5). The policy
    puts the steps of MAX_LEN tokens on the tiled loss (`TiledFrom`): 4 of the 8 training micro-steps and both
    held-out steps, which each evaluation runs with the tiled loss too (it ran the whole head whatever the plan)."""
    from runtime_cases import _micro_gpt2_config

    from paradyse_lab.app.train_options import TrainOptions
    from paradyse_lab.runtime.comm import collectives as comm

    root, train_file, eval_file = _token_files(rank)
    model = _micro_gpt2_config(root, rank, p, group, 512)  # the documents' token ids are below 512
    log, tiled = _train_counting_tiled_losses(
        TrainOptions(model=model, dataset=f"file:{train_file}", steps=STEPS, batch=BATCH, lr=LR,
                     max_len=MAX_LEN, lr_schedule="cosine", warmup_steps=1, clip_grad=CLIP, accumulate=ACCUMULATE,
                     eval_dataset=f"file:{eval_file}", eval_every=2, eval_batches=2, progress=False,
                     long_documents="cut"), group)  # the reference run cuts its documents at MAX_LEN too
    assert tiled.count(True) == 4 and tiled.count(False) == 2 * 2, tiled  # 2 evaluations of 2 held-out steps
    assert [r["eval_steps"] for r in log if "eval_loss" in r] == [2, 2]
    want = comm.broadcast_object(_reference_run(model, train_file, eval_file) if rank == 0 else None, 0, group)
    # rank 0's reference run, sent to the others (each would compute the same)
    for row, ref in zip(log, want, strict=True):
        assert_close(row["lr"], ref["lr"], rtol=1e-12, atol=0.0)
        assert_close(row["loss"], ref["loss"], **TOL)
        assert_close(row["grad_norm"], ref["grad_norm"], **TOL)
        assert ref["grad_norm"] > CLIP
        assert ("eval_loss" in row) == ("eval_loss" in ref)
        if "eval_loss" in ref:
            assert_close(row["eval_loss"], ref["eval_loss"], **TOL)
    assert [r["docs"] for r in log] == [BATCH * ACCUMULATE] * STEPS
    dist.barrier()
    if rank == 0:
        shutil.rmtree(root)


def text_dataset_loss_falls_case(rank: int, p: int, group) -> None:
    """A researcher's run at p ranks: a folder of text (jsonl) and a held-out jsonl of text, tokenized with a
    BPE tokenizer trained here; warmup + cosine, clipping, 2 micro-steps per optimizer step and evaluation every
    2 of the 4 steps (a micro GPT-2 of 512 tokens, runtime_cases.py `_micro_gpt2_config`; the default dynamic:dp
    policy, AdamW: the unpacked loop's learning check). The training loss and the evaluation loss fall (here the
    last 2 steps' mean 0.64 below the first 2's, the evaluation loss 5.76 -> 4.85); every step's tokens are
    counted."""
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
    from runtime_cases import _micro_gpt2_config
    from text_corpus import build_tokenizer, documents

    from paradyse_lab.app.train_options import TrainOptions
    from paradyse_lab.app.training import train

    box = [tempfile.mkdtemp(prefix="paradyse-text-") if rank == 0 else None]
    dist.broadcast_object_list(box, src=0)
    root = box[0]
    if rank == 0:
        build_tokenizer(Path(root) / "tok")
        os.mkdir(os.path.join(root, "train"))  # a folder of text files (a save_to_disk folder reads to the same
        # texts in test_text_data.py, in-process: here it cost each rank the `datasets` import, ~0.5 CPU s)
        with open(os.path.join(root, "train", "docs.jsonl"), "w") as f:
            f.write("".join(json.dumps({"text": t}) + "\n" for t in documents(32, seed=1)))
        with open(os.path.join(root, "eval.jsonl"), "w") as f:
            f.write("".join(json.dumps({"text": t}) + "\n" for t in documents(4, seed=2)))
    dist.barrier()
    log = train(TrainOptions(model=_micro_gpt2_config(root, rank, p, group, 512), dataset=os.path.join(root, "train"),
                             tokenizer=os.path.join(root, "tok"), steps=4, batch=2, accumulate=2, lr=2e-2,
                             lr_schedule="cosine", warmup_steps=2,
                             clip_grad=1.0, max_len=32, eval_dataset=f"file:{root}/eval.jsonl", eval_every=2,
                             eval_batches=2, data_order="shuffled", progress=False), group)
    first, last = (sum(r["loss"] for r in rows) / len(rows) for rows in (log[:2], log[-2:]))
    assert last < first - 0.5, (first, last)
    evals = [r["eval_loss"] for r in log if "eval_loss" in r]
    assert len(evals) == 2 and evals[1] < evals[0], evals
    assert all(r["tokens"] > 0 and r["docs"] == 4 for r in log)
    dist.barrier()
    if rank == 0:
        shutil.rmtree(root)


CASES = {"train-schedule-clip-accumulate-eval": schedule_clip_accumulate_eval_case,
         "train-text-dataset-loss-falls": text_dataset_loss_falls_case}
ONLY_AT = {"train-schedule-clip-accumulate-eval": (2,), "train-text-dataset-loss-falls": (2,)}
"""p = 2: the gradient norm over shards and replicas; every strategy's gradients at p = 1..4: the model-* cases."""
