"""A rank's trained tensors and their AdamW moments as torch.distributed.checkpoint (DCP) entries, and back.

Library module (no command; the DCP checkpoints save and load these entries). What is saved: every
trained tensor (the fp32 master weights on GPU, the weights on CPU) and AdamW's two moments of each, as global
tensors. A sub-layer's sharded matrices (w1, b1, w2) are not one contiguous block per
rank:
rank r holds row block r of each row section (q | k | v, gate | up). So each section is its own DCP tensor,
saved as a `DTensor` sharded by rows (`Shard(0)`) over the ranks; replicated tensors (embeddings, norms, head)
are plain tensors, which DCP writes once. Loading builds the same global tensors sharded for the new world size
and DCP reads each rank's rows from whichever files hold them: the resharding. At p = 1 the tensors are plain
(full), and no process group is needed.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Shard

from paradyse_lab.errors import UserInputError
from paradyse_lab.runtime.comm import collectives as comm
from paradyse_lab.runtime.model.vocab_parallel import vocab_range
from paradyse_lab.runtime.model.weight_shards import SHARDED, VOCAB_ROWS, row_sections

MOMENTS = ("exp_avg", "exp_avg_sq")
"""AdamW's per-parameter state tensors."""


def sections_of(key: str, cfg) -> tuple[int, ...] | None:
    """The global row sections of runtime tensor `key` when it is sharded (w1, b1 of a sub-layer: q | k | v or
    gate | up; w2: one), None when it is replicated."""
    prefix, _, name = key.rpartition(".")
    if not prefix.startswith("layers.") or name not in SHARDED:
        return None
    kind = "attention" if prefix.endswith(".attn") else "mlp"
    n1, n2 = cfg.sublayer_shapes(kind)
    return row_sections(kind, n1, n2) if name in ("w1", "b1") else (n2,)


def device_mesh_of(group):
    """The `DeviceMesh` of `group` (the world when None): CUDA under NCCL, else CPU."""
    return DeviceMesh.from_group(group or dist.group.WORLD, "cuda" if comm.is_nccl(group) else "cpu")


def _global(local: torch.Tensor, rows: int, mesh) -> torch.Tensor:
    """`local` [rows/p, ...] (this rank's row block) as a DTensor of the global [rows, ...] (no communication);
    as it is when there is no mesh (p = 1: the block is the whole)."""
    if mesh is None:
        return local
    shape = torch.Size((rows, *local.shape[1:]))
    stride = torch.empty(shape, device="meta").stride()
    return DTensor.from_local(local, mesh, [Shard(0)], run_check=False, shape=shape, stride=stride)


def _vocab_rows(name: str, value: torch.Tensor, cfg) -> bool:
    """Whether `value` is this rank's padded vocabulary rows of the embedding or head:
    fewer rows than the vocabulary. Saved as the global [V, h] tensor, so a checkpoint does not depend on it."""
    return name in VOCAB_ROWS and value.shape[0] != cfg.vocab_size


def _vocab_entry(value: torch.Tensor, cfg, p: int, mesh) -> torch.Tensor:
    """This rank's real vocabulary rows [stop - start, h] (padding dropped) as a DTensor of the global [V, h],
    sharded by rows as torch.chunk cuts V (the ranks' ceil(V/p) rows, the last ones shorter or empty)."""
    start, stop = vocab_range(cfg.vocab_size, p, comm.rank(mesh.get_group()) if mesh is not None else 0)
    return _global(value[:stop - start], cfg.vocab_size, mesh)


def _entries(name: str, value: torch.Tensor, cfg, p: int, mesh) -> dict[str, torch.Tensor]:
    """DCP entries of one of this rank's tensors: one per row section (its block of each), the global table for
    vocabulary rows, or the tensor itself when replicated; nothing for a [0]-sized tensor (an absent bias)."""
    sections = sections_of(name, cfg)
    if value.numel() == 0:
        return {}
    if _vocab_rows(name, value, cfg):
        return {name: _vocab_entry(value, cfg, p, mesh)}
    if sections is None:
        return {name: value}
    blocks = value.split([n // p for n in sections])  # [n1/p, ...] -> one [n/p, ...] per section
    return {f"{name}.{i}": _global(b, n, mesh) for i, (b, n) in enumerate(zip(blocks, sections))}


def local_tensor(entries: dict[str, torch.Tensor], name: str, like: torch.Tensor, cfg) -> torch.Tensor:
    """Inverse of `_entries`: this rank's tensor from its (loaded) entries."""
    sections = sections_of(name, cfg)
    if like.numel() == 0:
        return like
    if _vocab_rows(name, like, cfg):  # the real rows, padded back to the shard's [R, h]
        real = entries[name].to_local() if hasattr(entries[name], "to_local") else entries[name]
        return torch.cat([real, real.new_zeros((like.shape[0] - real.shape[0], *real.shape[1:]))])
    if sections is None:
        return entries[name]
    parts = [entries[f"{name}.{i}"] for i in range(len(sections))]
    return torch.cat([x.to_local() if hasattr(x, "to_local") else x for x in parts])  # [n/p, ...] each -> [n1/p, ...]


def dcp_state(trained: dict[str, torch.Tensor], opt, cfg, p: int, mesh) -> dict[str, torch.Tensor]:
    """The DCP state dict of the trained tensors and their AdamW moments (those that have any)."""
    out: dict[str, torch.Tensor] = {}
    steps = set()
    for name, param in trained.items():
        out.update({f"model.{k}": v for k, v in _entries(name, param.detach(), cfg, p, mesh).items()})
        state = opt.state.get(param, {})
        if param.numel() and state:
            if set(state) != {"step", *MOMENTS}:
                raise UserInputError(f"a checkpoint holds Adam's or AdamW's state ({', '.join(MOMENTS)}, step); this "
                                     f"optimizer keeps {', '.join(sorted(state))}")
            steps.add(float(state["step"]))
            for moment in MOMENTS:
                out.update({f"optim.{moment}.{k}": v for k, v in _entries(name, state[moment], cfg, p, mesh).items()})
    if len(steps) > 1:
        raise RuntimeError(f"AdamW's parameters are at different steps {sorted(steps)}; cannot checkpoint")
    if steps:
        out["optim.step"] = torch.tensor(steps.pop())
    return out


def strip(entries: dict, prefix: str) -> dict:
    """The entries whose name starts with `prefix`, by the rest of their name."""
    return {k[len(prefix):]: v for k, v in entries.items() if k.startswith(prefix)}


def state_template(trained: dict[str, torch.Tensor], saved: set[str], cfg, p: int, mesh) -> dict:
    """Zero tensors of this rank's shapes for every entry the checkpoint holds (moments only where saved)."""
    out = {}
    for name, param in trained.items():
        zeros = torch.zeros_like(param, dtype=torch.float32)
        out.update({f"model.{k}": v for k, v in _entries(name, zeros, cfg, p, mesh).items()})
        for moment in MOMENTS:
            entries = _entries(name, torch.zeros_like(zeros), cfg, p, mesh)
            out.update({f"optim.{moment}.{k}": v for k, v in entries.items() if f"optim.{moment}.{k}" in saved})
    if "optim.step" in saved:
        out["optim.step"] = torch.tensor(0.0)
    return out
