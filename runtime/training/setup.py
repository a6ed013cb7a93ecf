"""What a training run sets up before its first step (library module of the training loop): this rank's
device, the settings a resumed run must keep and the checkpoint it resumes from, checks run on rank 0 for every
rank, the progress bar, and the warning about a short held-out set.
"""

from __future__ import annotations

import sys
import threading

import torch
from tqdm import tqdm

from paradyse_lab.errors import UserInputError
from paradyse_lab.runtime.checkpoints import folder as checkpoint
from paradyse_lab.runtime.checkpoints.resume_identity import OPTIONAL_SETTINGS, identity
from paradyse_lab.runtime.comm import collectives as comm
from paradyse_lab.runtime.training.step_inputs import chunks_documents


def run_device(group):
    """The GPU of this rank when every rank has one (one process, or NCCL), else the CPU."""
    on_gpu = torch.cuda.is_available() and (comm.size(group) == 1 or comm.is_nccl(group))
    return torch.device("cuda", torch.cuda.current_device()) if on_gpu else torch.device("cpu")


def run_meta(opts, cfg=None, group=None) -> dict:
    """What a resumed run must keep: model, seed, lr, weight decay, dataset, batch, --max-len, packing and
    --init-from, and when given the tokenizer and data order and the optimisation options (a checkpoint of other
    settings is refused; a run without the newer options keeps the older checkpoints' meta); with the model's
    config `cfg`, the model and data by content, compared instead of the
    --model and --dataset strings: hashed on rank 0 of `group` only and sent to the others (`identity_on_rank0`).
    Every rank calls it (one collective when p > 1 and a checkpoint folder is given)."""
    meta = {"model": opts.model, "seed": opts.seed, "lr": opts.lr, "weight_decay": opts.weight_decay,
            "dataset": opts.dataset, "batch": opts.batch, "max_len": opts.max_len, "pack_tokens": opts.pack_tokens,
            "pack_order": opts.pack_order, "init_from": opts.init_from}
    meta.update({key: getattr(opts, key) for key in OPTIONAL_SETTINGS})
    if not chunks_documents(opts):  # --long-documents has no effect: a checkpoint of either setting resumes
        del meta["long_documents"]
    if cfg is not None and opts.checkpoint_dir:  # the data is hashed only where a checkpoint will record it
        meta.update(identity_on_rank0(opts, cfg, group))
    return meta


def identity_on_rank0(opts, cfg, group) -> dict:
    """`identity(opts, cfg)` read and hashed by rank 0 alone and broadcast: every rank hashing the whole dataset
    folder and every `--init-from` weight file would be p concurrent full reads of the same files before the
    first step. Rank 0's `UserInputError` is raised on every rank."""
    found = None
    if comm.rank(group) == 0:
        try:
            found = identity(opts, cfg)
        except UserInputError as err:
            found = str(err)
    found = comm.broadcast_object(found, 0, group)  # the entries, or rank 0's one-line error
    if isinstance(found, str):
        raise UserInputError(found)
    return found


def checkpoint_to_resume(opts, meta: dict, group):
    """The checkpoint this run continues from (--resume), or None; a new run over checkpoints, and a resumed
    one whose --steps is below its checkpoint's step, are refused (`UserInputError`)."""
    if not opts.checkpoint_dir:
        return None
    if not opts.resume:
        checkpoint.refuse_overwrite(opts.checkpoint_dir)
        return None
    # lazy: torch.distributed.checkpoint takes ~1 CPU s to import; only a run that resumes or checkpoints needs it
    from paradyse_lab.runtime.checkpoints import dcp as dcp_checkpoint

    found = dcp_checkpoint.resumable(opts.checkpoint_dir, meta, group, log=print if comm.rank(group) == 0 else None)
    done = checkpoint.read_meta(found)["step"] if found is not None else 0
    if done > opts.steps:
        raise UserInputError(f"--steps {opts.steps} is below the step {done} of the checkpoint {found.name}: "
                             "nothing to train (give --steps above it)")
    return found


def checked_on_rank0(check, group) -> None:
    """Run `check` on rank 0 only and raise its `UserInputError` on every rank (one collective when p > 1)."""
    message = ""
    if comm.rank(group) == 0:
        try:
            check()
        except UserInputError as err:
            message = str(err)
    if comm.size(group) > 1:
        message = comm.broadcast_object(message, 0, group)  # '' when the check passed
    if message:
        raise UserInputError(message)


def progress_bar(opts, start: int, rank: int):
    """A tqdm bar on rank 0 with --progress, else None. It starts no thread and no process-shared lock: no
    monitor thread (`tqdm.monitor_interval = 0`, tqdm's documented switch) alive at the rank's exit, and a thread
    lock instead of tqdm's default multiprocessing one, a named semaphore that a rank ending without
    interpreter finalization (`end_process`) would leave behind ("leaked semaphore")."""
    if not (opts.progress and rank == 0):
        return None
    tqdm.monitor_interval = 0
    tqdm.set_lock(threading.RLock())
    return tqdm(total=opts.steps, initial=start, desc="train", dynamic_ncols=True)


def warn_few_eval_steps(opts, eval_steps: int) -> None:
    """Rank 0's warning when --eval-dataset has fewer different steps than --eval-batches asks
    (`StepInputs.held_out`): each evaluation then averages the ones it has, once
    each."""
    if eval_steps < opts.eval_batches:
        unit = f"packs of --pack-tokens {opts.pack_tokens}" if opts.pack_tokens is not None else "steps"
        print(f"warning: --eval-dataset {opts.eval_dataset} has {eval_steps} different held-out {unit}, fewer than "
              f"--eval-batches {opts.eval_batches}: each evaluation averages those {eval_steps}, once each",
              file=sys.stderr)
