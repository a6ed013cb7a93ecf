"""The training loop on the world's ranks (`train` in-process): losses that fall, resumes that repeat the
unbroken run, the plan decided on rank 0, packed steps, the vocabulary-parallel loop; and the files the ranks share
(a temporary folder, micro model configs, checkpoints set aside and compared).
"""

from __future__ import annotations

import torch
from reference_checks import (
    S,
)
from torch.testing import assert_close


def _shared_tmpdir(rank: int, p: int, group) -> str:
    import tempfile

    import torch.distributed as dist

    box = [tempfile.mkdtemp(prefix="paradyse-ckpt-") if rank == 0 else None]
    if p > 1:
        dist.broadcast_object_list(box, src=0, group=group)
    return box[0]


def _shared_config(root: str, name: str, fields: dict, rank: int, p: int, group) -> str:
    """root/NAME (a Hugging Face config.json of `fields`), written by rank 0 and seen by every rank."""
    import json
    import os

    config = os.path.join(root, name)
    if rank == 0:
        with open(config, "w") as f:
            json.dump(fields, f)
    if p > 1:
        torch.distributed.barrier(group=group)
    return config


def _micro_gpt2_config(root: str, rank: int, p: int, group, vocab_size: int, positions: int = 64) -> str:
    """A tiny GPT-2 config.json under `root` (2 layers, h 24: 12 heads of width 2), for the training cases whose
    subject is not the model's size."""
    return _shared_config(root, "micro-gpt2.json", {"model_type": "gpt2", "n_embd": 24, "n_head": 12, "n_layer": 2,
                                                    "n_positions": positions, "vocab_size": vocab_size}, rank, p, group)


def _micro_llama_config(root: str, rank: int, p: int, group) -> str:
    """A micro LLaMA config.json under `root`: h 48, 8 heads of width 6 on 2 K/V heads, SwiGLU of 96, 2 layers,
    128 tokens, an untied head."""
    return _shared_config(root, "micro-llama.json", {
        "model_type": "llama", "hidden_size": 48, "num_attention_heads": 8, "num_key_value_heads": 2,
        "intermediate_size": 96, "num_hidden_layers": 2, "vocab_size": 128, "max_position_embeddings": 64,
        "tie_word_embeddings": False, "rms_norm_eps": 1e-5}, rank, p, group)


def _set_aside(ckpt: str, step: int, root: str, rank: int, p: int, group) -> str:
    """Move the checkpoint of `step` out of the folder `ckpt` into `root` (rank 0, between barriers), so that a
    resumed run takes the newest one left; returns where it went."""
    import os

    name = f"step-{step:06d}"
    if p > 1:
        torch.distributed.barrier(group=group)
    if rank == 0:
        os.rename(os.path.join(ckpt, name), os.path.join(root, name))
    if p > 1:
        torch.distributed.barrier(group=group)
    return os.path.join(root, name)


def _assert_same_checkpoints(a: str, b: str, rank: int) -> set[str]:
    """On rank 0 (the files every rank wrote, read whole by one): the checkpoints at `a` and `b` hold the same
    entries, bit for bit; returns their names (none on the other ranks)."""
    from paradyse_lab.runtime.checkpoints.dcp import read_entries

    if rank != 0:
        return set()
    same = _same_files(a, b)
    if same is not None:
        return same
    want, _ = read_entries(a)
    got, _ = read_entries(b)
    assert want.keys() == got.keys(), sorted(set(want) ^ set(got))
    for key, value in want.items():
        assert torch.equal(value, got[key]), key
    return set(want)


def _same_files(a: str, b: str) -> set[str] | None:
    """The tensor names of checkpoints `a` and `b` when their data files (DCP's `*.distcp`) are the same byte for
    byte and their `.metadata` puts the same entries at the same places in them: then every entry reads the same,
    bit for bit, and reading both whole (~0.2 CPU s a checkpoint, DCP's per-tensor unpickling) is not needed.
    None otherwise (the entries are read and compared then): a run that repeats another writes the same bytes."""
    import filecmp
    from pathlib import Path

    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    names = sorted(f.name for f in Path(a).glob("*.distcp"))
    if not names or names != sorted(f.name for f in Path(b).glob("*.distcp")):
        return None
    if not all(filecmp.cmp(Path(a) / n, Path(b) / n, shallow=False) for n in names):
        return None
    want, got = FileSystemReader(a).read_metadata(), FileSystemReader(b).read_metadata()
    if want.state_dict_metadata != got.state_dict_metadata or want.storage_data != got.storage_data:
        return None
    return {k for k, md in want.state_dict_metadata.items() if isinstance(md, TensorStorageMetadata)}


class CountedPolicy:
    """The policy `inner`, counting the decisions asked of it."""

    def __init__(self, inner):
        self.inner, self.calls = inner, 0

    def decide(self, step, batch):
        self.calls += 1
        return self.inner.decide(step, batch)


def train_vocab_parallel_case(rank: int, p: int, group) -> None:
    """`train` with the embedding and head stored by vocabulary rows (a micro GPT-2 of 97 tied rows, which p does
    not divide) gives the losses and gradient norms of the replicated run (AdamW on the rows, clipping by the
    global norm, the sharded table's gradients counted once) and evaluation losses. The storage follows the head
    rank 0's planner takes at the run's longest step (`vocab_storage`; the policy here is told 'vocab',
    tests/simulator/test_head_options.py has the planner take it), and the policy then plans every step with it
    alone. The rows' checkpoint (weights and AdamW's moments) read back by rows and whole, exactly:
    gpt2-dcp-reshard-vocab-4-to-2-and-replicated-2; the loop's resume: checkpoint-resume-bit-identical."""
    from paradyse_lab.app.train_options import TrainOptions
    from paradyse_lab.app.training import plan_policy
    from paradyse_lab.runtime.training.loop import train

    root = _shared_tmpdir(rank, p, group)
    config = _micro_gpt2_config(root, rank, p, group, 97)
    told = []

    def policy_for(opts, vocab: bool):
        def build(spec, world):
            policy = plan_policy(opts, spec, world, quiet=True)
            if vocab:  # rank 0's answer is the one every rank follows
                policy.storage_head = lambda seq_len, batch: "vocab" if rank == 0 else "whole"
            told.append(policy)
            return policy
        return build

    common = {"model": config, "dataset": "uniform:48:48", "max_len": S, "progress": False, "lr": 3e-3,
              "clip_grad": 0.5, "policy": "dynamic:heuristic", "eval_dataset": "uniform:48:48",
              "eval_every": 3, "eval_batches": 1, "steps": 3}
    replicated = TrainOptions(**common)
    replicated = train(replicated, group, policy_for=policy_for(replicated, False))
    opts = TrainOptions(**common)
    sharded = train(opts, group, policy_for=policy_for(opts, True))
    assert tuple(told[-1]._head_models) == ("vocab",) and tuple(told[0]._head_models) == ("whole", "tiled")
    assert [r["step"] for r in sharded] == [1, 2, 3]
    assert_close(torch.tensor([r["loss"] for r in sharded]), torch.tensor([r["loss"] for r in replicated]),
                 rtol=0, atol=1e-5)
    assert_close(torch.tensor([r["grad_norm"] for r in sharded]), torch.tensor([r["grad_norm"] for r in replicated]),
                 rtol=1e-5, atol=1e-6)
    assert abs(sharded[-1]["eval_loss"] - replicated[-1]["eval_loss"]) < 1e-5  # evaluation in the loss's tiles
    if p > 1:
        torch.distributed.barrier(group=group)
    if rank == 0:
        import shutil

        shutil.rmtree(root)


def plan_decided_on_rank0_case(rank: int, p: int, group) -> None:
    """A solver that picks a different plan on every rank still gives every rank rank 0's plan, and only
    rank 0 runs it: directly, and inside `train` (whose policy is replaced by such a solver)."""
    from unittest import mock

    import torch.distributed as dist

    from paradyse_lab.app.train_options import TrainOptions
    from paradyse_lab.app.training import train
    from paradyse_lab.core.plan import Plan
    from paradyse_lab.runtime.training.plan_handoff import decide_plan_on_rank0
    from paradyse_lab.simulator.policies import StepDecision

    calls: list[int] = []

    def disagreeing_solver(*_args):
        calls.append(rank)
        plan = ("megatron_ts", "metp", "ulysses_z", "megatron_cz")[rank % 4:] + ("metp",) * (rank % 4)
        return StepDecision(plan=Plan.from_names(plan), predicted_time_s=float(rank), feasible=True, solve_s=0.0)

    def everyone(value):
        out = [None] * p
        if p > 1:
            dist.all_gather_object(out, value, group=group)
        return out if p > 1 else [value]

    got = decide_plan_on_rank0(disagreeing_solver, group)
    assert everyone(got.plan.names) == [("megatron_ts", "metp", "ulysses_z", "megatron_cz")] * p
    assert got.predicted_time_s == 0.0 and calls == ([0] if rank == 0 else [])

    calls.clear()
    policy = mock.Mock(decide=disagreeing_solver)
    with mock.patch("paradyse_lab.simulator.planner.build_policy", return_value=policy):
        log = train(TrainOptions(model="gpt2-tiny", dataset="uniform:512:1024", steps=2, max_len=S, progress=False),
                    group)
    assert everyone([r["plan"] for r in log]) == [["TS,ME,UZ,CZ"] * 2] * p
    assert calls == ([0, 0] if rank == 0 else [])


def train_packed_loss_falls_case(rank: int, p: int, group) -> None:
    """`train --pack-tokens 96` (gloo, p = 2; a micro GPT-2, `_micro_gpt2_config`, dynamic:dp, AdamW): every step
    is a pack of several of the length file's documents, every document padded to 2p (a pack: at most 96 tokens
    plus 2p - 1 per document), and the loss falls over 3 passes over the 3 packs (the last pass's mean 0.74 below
    the first's here)."""
    import os

    import torch.distributed as dist

    from paradyse_lab.app.train_options import TrainOptions
    from paradyse_lab.app.training import train

    root = _shared_tmpdir(rank, p, group)
    lengths = os.path.join(root, "lengths.txt")
    if rank == 0:
        with open(lengths, "w") as f:
            f.write("\n".join(map(str, (5, 9, 17, 30, 48, 12, 3, 1, 26, 40, 7, 21, 33, 2, 14))))
    dist.barrier(group=group)
    log = train(TrainOptions(model=_micro_gpt2_config(root, rank, p, group, 96), dataset=f"file:{lengths}", steps=9,
                             lr=1e-2, max_len=S, pack_tokens=96, progress=False), group)
    assert all(r["seq_len"] % (2 * p) == 0 and r["seq_len"] <= 96 + (2 * p - 1) * r["docs"] for r in log)
    assert [r["docs"] for r in log[:6]] == [6, 5, 4] * 2  # 3 packs of all 15 documents (first-fit decreasing)
    assert {r["attention_kernel"] for r in log} == {"sdpa_cpu_varlen"}  # the fused CPU kernel per document, no mask
    first, last = (sum(r["loss"] for r in rows) / len(rows) for rows in (log[:3], log[-3:]))  # the same 3 packs
    assert last < first - 0.5, (first, last)
    dist.barrier(group=group)
    if rank == 0:
        import shutil

        shutil.rmtree(root)


def llama_train_case(rank: int, p: int, group) -> None:
    """`train --model CONFIG.json` of a micro LLaMA (`_micro_llama_config`: RMSNorm, SwiGLU, RoPE, 8 heads on 2 K/V
    heads, untied head) under ulysses_z: the loss falls over 10 steps (the last 4 steps' mean 0.5 below the first
    4's here). The llama-tiny preset trains in api-example (examples/plan_and_train.py).
    p = 2 only (ONLY_AT): learning is the loop's; every strategy's gradients at p = 1..4 are the llama-model
    and llama-hf cases'. Resuming this micro LLaMA (its untied head and AdamW moments in the checkpoint):
    bit-identically at the same world size in checkpoint-resume-bit-identical, and on 1 and on 4 ranks from 2
    ranks' checkpoint in weights-init-reshard-export."""
    import torch.distributed as dist

    from paradyse_lab.app.train_options import TrainOptions
    from paradyse_lab.app.training import train

    root = _shared_tmpdir(rank, p, group)
    common = {"model": _micro_llama_config(root, rank, p, group), "dataset": "uniform:512:1024", "max_len": S,
              "progress": False, "lr": 1e-2, "policy": "static:ulysses_z"}
    straight = train(TrainOptions(steps=10, **common), group)
    first, last = (sum(r["loss"] for r in rows) / len(rows) for rows in (straight[:4], straight[-4:]))
    assert last < first - 0.3, (first, last)
    dist.barrier(group=group)
    if rank == 0:
        import shutil

        shutil.rmtree(root)


CASES = {}
ONLY_AT: dict[str, tuple[int, ...]] = {}

CASES["llama-train-loss-falls"] = llama_train_case
ONLY_AT["llama-train-loss-falls"] = (2,)
CASES["plan-decided-on-rank0"] = plan_decided_on_rank0_case
ONLY_AT["plan-decided-on-rank0"] = (2,)  # two ranks that disagree are the whole mechanism (rank 0 broadcasts)
CASES["train-packed-loss-falls"] = train_packed_loss_falls_case
ONLY_AT["train-packed-loss-falls"] = (2,)  # the packed loop at one world size; packed gradients: packed-* cases
CASES["train-vocab-parallel"] = train_vocab_parallel_case
ONLY_AT["train-vocab-parallel"] = (2,)  # the loop over sharded rows; the rows' gradients at every p: vocab-parallel-*
