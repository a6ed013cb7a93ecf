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

Folders, one concept each: comm (the group's queries, collectives, point-to-point exchanges, their adjoints, bytes
sent and calls traced), strategies (one module per strategy of the catalog, and their shared parts), attention
(kernels with log-sum-exp, packed documents, gathered and ring attention), model (ParallelGPT, the single-device
reference, the zig-zag layout, weight shards, packed sequences), training (the loop and its parts), checkpoints
(any world size), hf (Hugging Face configs, state dicts and folders), launch (torchrun, spawned or alone). A library
only: the commands, their options and the measurement applications belong to the application.
"""

import importlib

_EXPORTS = {"ParallelGPT": "paradyse_lab.runtime.model.parallel_gpt",
            "ReferenceGPT": "paradyse_lab.runtime.model.reference",
            "shard_sequence": "paradyse_lab.runtime.model.layout",
            "gather_sequence": "paradyse_lab.runtime.model.layout",
            "layout_unit": "paradyse_lab.runtime.model.layout"}
"""Imported on first use (PEP 562), so importing a light module of the package (the training schedules' names,
read when the CLI registers `train`) does not load torch."""
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'paradyse_lab.runtime' has no attribute {name!r}")
