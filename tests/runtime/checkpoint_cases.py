"""Sharded checkpoints under the training loop: a resume bit-identical to the unbroken run, a damaged shard
that makes every rank fall back together, a full disk, a checkpoint folder that cannot be locked.
"""

from __future__ import annotations

import torch
from reference_checks import (
    MODEL_LAYERS,
    S,
    config,
)
from torch.testing import assert_close
from train_cases import (
    CountedPolicy,
    _assert_same_checkpoints,
    _micro_llama_config,
    _set_aside,
    _shared_tmpdir,
)

from paradyse_lab.errors import UserInputError
from paradyse_lab.runtime import ParallelGPT


def checkpoint_resume_case(rank: int, p: int, group) -> None:
    """Resuming from the sharded checkpoint of step 1 ends bit-identical to the unbroken run that wrote it (a micro
    LLaMA, `_micro_llama_config`, whose untied head and its AdamW moments are in the checkpoint beside the layers';
    its step-2 checkpoint set aside, so that step 1's is the newest: step 2's update
    takes AdamW's restored moments). The resumed run replays the policy's decision of step 1 on rank 0 only (the
    one rank that decides): the other ranks ask their policy nothing, neither replaying nor training. With two
    ranks, one damaged shard then makes both fall back to step 1 together (`_falls_back_together`)."""
    import os
    from unittest import mock

    import torch.distributed as dist

    from paradyse_lab.app.train_options import TrainOptions
    from paradyse_lab.app.training import train
    from paradyse_lab.runtime.checkpoints import folder as checkpoint
    from paradyse_lab.simulator import planner

    root = _shared_tmpdir(rank, p, group)
    common = {"model": _micro_llama_config(root, rank, p, group), "dataset": "uniform:512:1024", "max_len": S,
              "progress": False, "checkpoint_every": 1}
    ckpt = os.path.join(root, "a")
    straight = train(TrainOptions(steps=2, checkpoint_dir=ckpt, **common), group)
    step2 = _set_aside(ckpt, 2, root, rank, p, group)  # resuming takes step 1, the newest left
    real, built = planner.build_policy, []

    def counted(*args, **kwargs):
        built.append(CountedPolicy(real(*args, **kwargs)))
        return built[-1]

    with mock.patch.object(planner, "build_policy", counted):
        resumed = train(TrainOptions(steps=2, checkpoint_dir=ckpt, resume=True, **common), group)
    assert [policy.calls for policy in built] == [1 + 1 if rank == 0 else 0]  # step 1 replayed, step 2 trained
    assert [r["step"] for r in resumed] == [2]
    assert [r["loss"] for r in resumed] == [r["loss"] for r in straight[1:]]
    names = _assert_same_checkpoints(step2, checkpoint.latest(ckpt), rank)  # weights and AdamW's moments
    assert rank != 0 or ("model.head" in names and any(k.startswith("optim.exp_avg_sq.") for k in names))
    if p > 1:
        _falls_back_together(ckpt, step2, straight, common, rank, p, group)
        dist.barrier(group=group)
    if rank == 0:
        import shutil

        shutil.rmtree(root)


def _falls_back_together(ckpt: str, step2: str, straight: list[dict], common: dict, rank: int, p: int,
                         group) -> None:
    """One rank's damaged shard of the newest checkpoint (step 2, in `ckpt`) makes every rank fall back to the
    previous one (step 1) together (the ranks agree on which checkpoint verifies): the run trains step 2 again,
    bit-identical to the unbroken run (`straight`, its step-2 checkpoint set aside at `step2`), so step 1's
    checkpoint was left intact."""
    import os

    import torch.distributed as dist

    from paradyse_lab.app.train_options import TrainOptions
    from paradyse_lab.app.training import train
    from paradyse_lab.runtime.checkpoints import folder as checkpoint

    dist.barrier(group=group)  # rank 0 has read the checkpoints it compared
    if rank == p - 1:  # only the last rank's shard of the newest checkpoint is damaged
        shard = os.path.join(checkpoint.latest(ckpt), f"__{rank}_0.distcp")  # torch.distributed.checkpoint's
        data = bytearray(open(shard, "rb").read())
        data[len(data) // 2] ^= 0xFF
        open(shard, "wb").write(bytes(data))
    dist.barrier(group=group)
    again = train(TrainOptions(steps=2, checkpoint_dir=ckpt, resume=True, **common), group)
    assert [r["step"] for r in again] == [2], [r["step"] for r in again]
    assert [r["loss"] for r in again] == [r["loss"] for r in straight[1:]]
    _assert_same_checkpoints(step2, checkpoint.latest(ckpt), rank)


def checkpoint_disk_full_case(rank: int, p: int, group) -> None:
    """The disk filling up while one rank writes its part of a checkpoint (ENOSPC from a write inside
    torch.distributed.checkpoint) stops every rank with one line naming that rank and the error, removes the
    partial `.tmp-step-*` folder, and leaves the previous checkpoint intact and named by `latest`."""
    import errno
    import os
    from unittest import mock

    import torch.distributed as dist
    import torch.distributed.checkpoint.filesystem as dcp_files

    from paradyse_lab.errors import RunStopped
    from paradyse_lab.runtime.checkpoints import dcp as dcp_checkpoint
    from paradyse_lab.runtime.checkpoints import folder as checkpoint

    root = _shared_tmpdir(rank, p, group)
    cfg = config(layers=MODEL_LAYERS)  # the checkpoint's files are the subject, not the depth
    model = ParallelGPT(cfg, group, seed=1)
    trained, opt = dict(model.named_parameters()), torch.optim.AdamW(model.parameters())
    meta = {"model": "m", "seed": 0}
    dcp_checkpoint.save(root, 1, trained, opt, cfg, meta, dcp_checkpoint.model_record(cfg), group)
    real_write = dcp_files._write_item

    def full_disk(transforms, stream, data, *args, **kwargs):
        stream.write(b"partial")  # part of the data reaches the disk, then the disk is full
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), getattr(stream, "name", None))

    with torch.no_grad():
        for q in model.parameters():
            q.add_(1.0)
    with mock.patch.object(dcp_files, "_write_item", full_disk if rank == p - 1 else real_write):
        try:
            dcp_checkpoint.save(root, 2, trained, opt, cfg, meta, dcp_checkpoint.model_record(cfg), group)
        except RunStopped as err:
            message = str(err)
        else:
            raise AssertionError("a full disk did not stop the checkpoint")
    assert "\n" not in message and f"rank {p - 1}" in message and "No space left on device" in message, message
    assert sorted(os.listdir(root)) == ["latest", "step-000001"], os.listdir(root)
    weights, _ = dcp_checkpoint.read_full(checkpoint.latest(root))  # verified, readable: step 1's weights
    for key, value in model.full_state_dict().items():
        assert_close(weights[key] + 1.0, value, rtol=0, atol=1e-6, msg=key)
    if p > 1:
        dist.barrier(group=group)
    if rank == 0:
        import shutil

        shutil.rmtree(root)


def checkpoint_lock_refused_case(rank: int, p: int, group) -> None:
    """A run whose --checkpoint-dir rank 0 cannot lock stops on every rank with the same one-line
    `UserInputError`, within seconds: a folder whose lock another run holds (the holder named), and one whose
    lock file cannot be opened (a folder in its place). Rank 0 raised alone there and left the other ranks
    waiting for its answer until the process group's timeout."""
    import fcntl
    import os
    import shutil
    import time

    import torch.distributed as dist

    from paradyse_lab.app.train_options import TrainOptions
    from paradyse_lab.app.training import train

    root = _shared_tmpdir(rank, p, group)
    held, broken = os.path.join(root, "held"), os.path.join(root, "broken")
    if rank == 0:
        os.makedirs(os.path.join(broken, ".lock"))  # a folder where the lock file goes
        os.makedirs(held)
        holder = os.open(os.path.join(held, ".lock"), os.O_RDWR | os.O_CREAT)  # held as another run holds it
        fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)  # flock: this descriptor's, not the process's
        os.pwrite(holder, b"pid 4242 on elsewhere\n", 0)
    dist.barrier(group=group)
    for folder, reason in ((broken, "cannot be locked for this run: Is a directory"),
                           (held, "is in use by another run (pid 4242 on elsewhere)")):
        started = time.monotonic()
        try:
            train(TrainOptions(model="gpt2-tiny", dataset="uniform:8:16", steps=1, max_len=16, progress=False,
                               checkpoint_dir=folder), group)
        except UserInputError as err:
            message = str(err)
        else:
            raise AssertionError(f"a run on {folder} was not refused")
        assert reason in message and "\n" not in message and f"--checkpoint-dir {folder!r}" in message, message
        assert time.monotonic() - started < 30, time.monotonic() - started
    dist.barrier(group=group)
    if rank == 0:
        os.close(holder)
        shutil.rmtree(root)


CASES = {}
ONLY_AT: dict[str, tuple[int, ...]] = {}

CASES["checkpoint-resume-bit-identical"] = checkpoint_resume_case
CASES["checkpoint-disk-full"] = checkpoint_disk_full_case
CASES["checkpoint-lock-refused"] = checkpoint_lock_refused_case
ONLY_AT["checkpoint-lock-refused"] = (2,)  # rank 0 locks, the others wait for its answer
for _name in ("checkpoint-resume-bit-identical", "checkpoint-disk-full"):
    # one rank, and two ranks whose shards differ (a rank loading another's shard fails there); more ranks
    # repeat the same per-rank files at the price of every rank's first `train` (optimizer and solver imports)
    ONLY_AT[_name] = (1, 2)
ONLY_AT["checkpoint-resume-bit-identical"] = (2,)  # each of two ranks resumes its own shard bit-identically; p = 1
# runs the same DCP calls on one shard (a group of one, no shard of another rank to tell apart); one rank resuming a
# two-rank checkpoint: weights-init-reshard-export
