"""torch.distributed runtime with the unified layout (docs/design.md section 6).

Usage, one process per rank (gloo on CPU, NCCL on GPU):

    import torch.distributed as dist
    from paradyse_lab.runtime import ParallelGPT, shard_sequence, gather_sequence
    dist.init_process_group("gloo")
    model = ParallelGPT.from_hf_state_dict(hf_config_dict, hf_state_dict)   # GPT-2 or LLaMA, or ParallelGPT(cfg)
    ids = shard_sequence(full_ids, dim=1)                 # [b, s] -> [b, s/p], zig-zag chunks
    logits, loss = model(ids, ["megatron_ts", "metp+recompute", ...], labels=shard_sequence(targets, dim=1))
    loss.backward()                                       # every weight gradient on its owning shard
    full_logits = gather_sequence(logits, dim=1)          # [b, s/p, V] -> [b, s, V]

Modules: comm (the group's queries, collectives), comm_p2p (point-to-point exchanges), comm_record (bytes sent and
calls traced), grad_reduce (gradients summed in fp32), comm_autograd (collectives with their adjoints), layout
(zig-zag chunks), weight_shards (each rank's shards of the weights and state dicts), flat_shards (a shard as one
buffer, and the rank-major order of their gather), attention (kernels with log-sum-exp), varlen (the same over the
documents of a pack, with cumulative offsets), flash_kernels (attention's fused CUDA kernels), gathered_attention
(attention over a sequence gathered rank-major), ring_attention, sublayer (the autograd node of one sub-layer),
one file per strategy (megatron_ts, megatron_cz, ulysses_z, metp; zero3 holds the shared ZeRO-3 parts), model
(ParallelGPT), reference (the single-device model, GPTConfig), hf_convert (Hugging Face GPT-2, LLaMA,
Mistral and Qwen2 configs and state dicts), hf_weights and hf_export (Hugging Face folders in, by per-rank
safetensors slices, and out), rope (rotary embeddings), packed (several documents in one sequence:
`pack_sequence(lengths, p)` and its `cu_seqlens`, which `model(ids, plan, labels, cu_seqlens=...)`,
`shard_sequence(x, 1, group, cu)` and `gather_sequence` take: a pack is laid out per document); grouped (a global
batch over groups of ranks of a 2-D device mesh, states in one world layout: docs/grouped_steps.md); train,
train_inputs, launch, launcher, checkpoint, dcp_checkpoint and dcp_entries (training; checkpoints that resume at
any world size); comm_replay and fake_group (collectives checked without a process group). A library only: the commands,
their options and the measurement applications (profile, calibrate, the GPU session) are the application's
(paradyse_lab/cli/, paradyse_lab/app/; tests/test_import_layers.py).
"""

import importlib

_EXPORTS = {"ParallelGPT": "paradyse_lab.runtime.model.parallel_gpt",
            "GPTConfig": "paradyse_lab.runtime.model.reference", "ReferenceGPT": "paradyse_lab.runtime.model.reference",
            "shard_sequence": "paradyse_lab.runtime.model.layout",
            "gather_sequence": "paradyse_lab.runtime.model.layout",
            "layout_unit": "paradyse_lab.runtime.model.layout"}
"""Imported on first use (PEP 562), so importing a light module of the package (the training schedules' names,
read when the CLI registers `train`) does not load torch."""
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'runtime' has no attribute {name!r}")
