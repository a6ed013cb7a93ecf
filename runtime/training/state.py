"""The state one training run updates (library module of the training loop): `TrainState`, the model, the
AdamW optimizer and (bf16 on GPU) the fp32 master weights, with their checkpoints;
`micro_per_step`, the micro-steps of one optimizer step. One optimizer step over it: `TrainLoop`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from paradyse_lab.runtime.comm import collectives as comm
from paradyse_lab.runtime.model.parallel_gpt import ParallelGPT


def micro_per_step(opts) -> int:
    """Micro-steps (one sequence, or one pack, of the dataset each) per optimizer step: --accumulate, or the
    sequences of a --global-batch step."""
    return opts.global_batch or opts.accumulate


@dataclass
class TrainState:
    """The model, the optimizer and (bf16 on GPU) the fp32 master weights of one run, and what a
    checkpoint of it must match (`meta`) and record (`workload_size`)."""

    opts: object
    """The run's settings (the training loop's module docstring lists them)."""
    group: object
    device: object
    model: object
    optimizer: object
    masters: list | None
    """fp32 copies of the bf16 weights the optimizer updates (GPU), or None (fp32 weights on the CPU)."""
    meta: dict
    """What a resumed run must keep (`run_meta`)."""
    workload_size: int
    """Sequences of the run's workload (its first --steps), recorded in each checkpoint so a resumed run trains
    the same lengths."""

    @classmethod
    def create(cls, opts, cfg, group, device, meta: dict, workload_size: int,
               vocab_parallel: bool = False) -> TrainState:
        """A new model (initialised from --seed, or the --init-from folder's weights; `vocab_parallel`: its
        embedding and head sharded by vocabulary rows) and its optimizer."""
        model = ParallelGPT(cfg, group, seed=opts.seed, hf_folder=opts.init_from or None,
                            vocab_parallel=vocab_parallel).to(device)
        masters = None
        if device.type == "cuda":  # bf16 weights, fp32 master weights in the optimizer
            model.to(torch.bfloat16)
            masters = [q.detach().float().clone().requires_grad_() for q in model.parameters()]
        optimizer = torch.optim.AdamW(masters or list(model.parameters()), lr=opts.lr,
                                      weight_decay=opts.weight_decay,
                                      fused=device.type == "cuda" or None)  # CUDA: one kernel, no temporaries
        return cls(opts, group, device, model, optimizer, masters, meta, workload_size)

    @property
    def trained(self) -> dict:
        """The tensors AdamW steps, by parameter name: the fp32 masters on GPU, else the weights."""
        names = (n for n, _ in self.model.named_parameters())
        return dict(zip(names, self.masters or self.model.parameters()))

    def resume(self, found, replay_decision) -> int:
        """The first step to train: 0, or the step of the checkpoint `found` (`checkpoint_to_resume`), loaded at any
        world size (DCP reshards it), and
        `replay_decision(m)` called for every micro-step m before it on rank 0 (the policy's cache and smoothing
        state; --accumulate A: A per step): only rank 0's policy decides (`decide_plan_on_rank0`), so the other ranks
        replay nothing."""
        if found is None:
            return 0
        # lazy: torch.distributed.checkpoint takes ~1 CPU s to import; only a run that resumes or checkpoints needs it
        from paradyse_lab.runtime.checkpoints import dcp as dcp_checkpoint

        start = dcp_checkpoint.load(found, self.trained, self.optimizer, self.model.cfg, self.meta,
                                    self.group)["step"]
        _copy_masters(self.masters, self.model)
        if comm.rank(self.group) == 0:  # the one rank that decides (decide_plan_on_rank0); the others wait for it
            for m in range(start * micro_per_step(self.opts)):  # every micro-step of the steps trained
                replay_decision(m)
        return start

    def save(self, step: int, log_row: list[str] | None = None) -> None:
        """A checkpoint after `step` steps, readable at any world size, with the step's
        --log-file row (`log_row`: how a resumed run tells its own log, `check_log_owner`)."""
        # lazy: torch.distributed.checkpoint takes ~1 CPU s to import; only a run that resumes or checkpoints needs it
        from paradyse_lab.runtime.checkpoints import dcp as dcp_checkpoint

        cfg = self.model.cfg
        record = {**dcp_checkpoint.model_record(cfg, self.opts.init_from, self.opts.model),
                  "workload_size": self.workload_size, "log_row": log_row}
        dcp_checkpoint.save(self.opts.checkpoint_dir, step, self.trained, self.optimizer, cfg, self.meta, record,
                            self.group)

    def master_grads(self) -> None:
        """On GPU, the fp32 masters' gradients from the bf16 weights' (a [0]-sized or unused weight: zeros)."""
        if self.masters is not None:
            for m, q in zip(self.masters, self.model.parameters()):
                m.grad = q.grad.float() if q.grad is not None else torch.zeros_like(m)  # [0]-sized: wpe, lnf_b
                q.grad = None  # each bf16 gradient freed once copied: never both precisions of every gradient

    def apply_optimizer(self) -> None:
        """AdamW on the weights (or the fp32 masters, copied back into the bf16 weights after); gradients zeroed."""
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.model.zero_grad(set_to_none=True)
        _copy_masters(self.masters, self.model)


def _copy_masters(masters, model) -> None:
    """Copy the fp32 master weights into the bf16 model (GPU runs; nothing on CPU, where they are one)."""
    if masters is not None:
        with torch.no_grad():
            for m, q in zip(masters, model.parameters()):
                q.copy_(m)
