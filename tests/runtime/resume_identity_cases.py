"""Who hashes the data of a run that checkpoints: rank 0 alone, its digest and its error every rank's. A case of the
distributed tests' one gloo world per size (runtime_cases.py registers it, at p = 2)."""

from __future__ import annotations

import os
import shutil
from types import SimpleNamespace

import torch.distributed as dist
from train_cases import _shared_tmpdir

from paradyse_lab.core.model_spec import ModelSpec
from paradyse_lab.errors import UserInputError
from paradyse_lab.runtime.checkpoints import resume_identity
from paradyse_lab.runtime.checkpoints.resume_identity import OPTIONAL_SETTINGS
from paradyse_lab.runtime.training import setup


def _opts(dataset: str) -> SimpleNamespace:
    """The settings `run_meta` reads, of a run over `dataset` that writes checkpoints."""
    return SimpleNamespace(model="micro", seed=0, lr=1e-3, weight_decay=0.0, dataset=dataset, batch=1, max_len=16,
                           pack_tokens=0, pack_order="", init_from="", checkpoint_dir="ck", **OPTIONAL_SETTINGS)


def only_rank0_hashes(dataset: str, group=None) -> None:
    """`run_meta` on every rank: rank 0 alone reads the dataset folder's files, every rank gets its digest (the
    one `identity` gives), and an error of rank 0's hashing is raised, as one line, on every rank."""
    rank = dist.get_rank()
    cfg = ModelSpec(vocab_size=32, max_positions=64, hidden=16, heads=2, layers=2, name="runtime")
    read = []
    real = resume_identity.file_digest
    resume_identity.file_digest = lambda path: read.append(path) or real(path)  # counts every file hashed
    try:
        meta = setup.run_meta(_opts(dataset), cfg)
    finally:
        resume_identity.file_digest = real
    assert (len(read) > 0) == (rank == 0), f"rank {rank} hashed {len(read)} files"
    assert meta["dataset_digest"] == resume_identity.dataset_digest(dataset), rank
    assert meta["architecture"] == resume_identity.architecture_of(cfg)

    def refused(opts, cfg):
        assert rank == 0, f"rank {rank} hashed"
        raise UserInputError(f"dataset {opts.dataset} cannot be read")

    real_identity, setup.identity = setup.identity, refused
    try:
        setup.run_meta(_opts(dataset), cfg)
    except UserInputError as err:
        assert str(err) == f"dataset {dataset} cannot be read", (rank, err)
    else:
        raise AssertionError(f"rank {rank}: rank 0's error was not raised")
    finally:
        setup.identity = real_identity


def rank0_hashes_case(rank: int, p: int, group) -> None:
    """A dataset folder of three files (written by rank 0) hashed by rank 0 alone (`only_rank0_hashes`)."""
    root = _shared_tmpdir(rank, p, group)
    folder = os.path.join(root, "data")
    if rank == 0:
        os.mkdir(folder)
        for i in range(3):
            with open(os.path.join(folder, f"part-{i}.jsonl"), "w") as f:
                f.write(f"[{i}, 1, 2, 3]\n")
    dist.barrier(group=group)
    only_rank0_hashes(folder, group)
    dist.barrier(group=group)
    if rank == 0:
        shutil.rmtree(root)


CASES = {"resume-identity-rank0-hashes": rank0_hashes_case}
ONLY_AT = {"resume-identity-rank0-hashes": (2,)}  # one rank reads, the other waits for its digest: two ranks are it
