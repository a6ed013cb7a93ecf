"""The unified layout (docs/paper.md section 3, the paper's Table 2) of the weights: what every rank stores of
each sub-layer, for every strategy, and whole state dicts cut into (and joined from) rank shards. The sequence's
half of the table is `layout`'s; the flat buffers that ZeRO-3 gathers are `flat_shards`'s.

Library module (no command).

Weights of layer l, one 1/p shard per rank, the same storage for every strategy. Each sub-layer (attention
and MLP alike) is `y = x + core(norm(x) @ w1^T + b1) @ w2 + b2` with
- `ln_w`, `ln_b` [h], `b2` [h]: replicated (their gradients are all-reduced); `ln_b` is empty ([0]) under
  RMSNorm and `b1`, `b2` are empty in a model without biases (LLaMA), so every strategy takes the same six;
- `w1` [n1/p, h] and `b1` [n1/p]: rows of the first matrix, cut per row section (`row_sections`): each
  section gives its row block r, and the blocks are stored one after the other. Attention: sections q [h],
  k [kv], v [kv] (kv = kv_heads * d, GQA), so rank r stores q rows r*h/p.. (its head group of h/p query
  heads) then k rows r*kv/p.. then v rows r*kv/p..; MLP: n1 = f (this rank's f-columns), or SwiGLU's
  gate [f] and up [f] (its f/p columns of each);
- `w2` [n2/p, h]: rows of the second matrix stored (in, out) (attention: n2 = h, the rows of this rank's
  heads; MLP: n2 = f).
With `kv_heads % p == 0` rank r's K/V rows are whole heads, exactly the K/V heads its query head group reads
(query head i reads K/V head i // (heads / kv_heads)), so the tensor-parallel strategies (megatron_ts, metp)
read a shard as "my heads / my columns". With `kv_heads < p` (only the ZeRO-3 strategies megatron_cz and
ulysses_z, and the two-dimensional ones, are feasible then: the rule is the strategy catalog's) a K/V head is
split over p / kv_heads ranks by rows, which only a gather of those shards reassembles (megatron_cp gathers the
p / a shards of its tensor block); this needs kv % p == 0 (`kv_heads * d`
divisible by p), the same storage rule as h % p.
"""

from __future__ import annotations

import torch

from paradyse_lab.runtime.comm import collectives as comm
from paradyse_lab.runtime.model.reference import init_tensors
from paradyse_lab.runtime.model.vocab_parallel import shard_vocab_rows, unshard_vocab_rows

SHARDED = ("w1", "b1", "w2")
"""Parameters of a sub-layer stored as 1/p shards."""
REPLICATED = ("ln_w", "ln_b", "b2")
"""Parameters of a sub-layer replicated on every rank."""
PARAM_NAMES = ("ln_w", "ln_b", "w1", "b1", "w2", "b2")
"""Parameters of every sub-layer, in the order the strategies take them."""


def row_sections(kind: str, n1: int, n2: int) -> tuple[int, ...]:
    """The row sections of a sub-layer's w1 [n1, h] given n2 (rows of w2): attention q | k | v
    (n2 = h, then (n1 - h) / 2 each: GQA's K/V width); SwiGLU MLP gate | up (n1 = 2 n2); GELU MLP one."""
    if kind == "attention":
        return (n2, (n1 - n2) // 2, (n1 - n2) // 2)
    return (n2, n2) if n1 == 2 * n2 else (n1,)


def _rows_of_rank(x: torch.Tensor, sections: tuple[int, ...], r: int, p: int) -> torch.Tensor:
    """Rows block r of p of each section of x, concatenated: [n1, ..] -> [n1/p, ..] (empty stays empty)."""
    if x.numel() == 0:
        return x.clone()
    parts = x.split(list(sections))
    return torch.cat([part[r * (len(part) // p):(r + 1) * (len(part) // p)] for part in parts]).clone()


def _rows_of_all(shards: list[torch.Tensor], sections: tuple[int, ...]) -> torch.Tensor:
    """Inverse of `_rows_of_rank` over every rank's shard (rank order): p x [n1/p, ..] -> [n1, ..]."""
    if shards[0].numel() == 0:
        return shards[0]
    p = len(shards)
    per_rank = [s.split([n // p for n in sections]) for s in shards]  # p x sections x [n/p, ..]
    return torch.cat([torch.cat([per_rank[r][j] for r in range(p)]) for j in range(len(sections))])


def row_block(x: torch.Tensor, sections: tuple[int, ...], r: int, parts: int) -> torch.Tensor:
    """Row block r of `parts` of each section of x, concatenated (a copy): [n, ..] -> [n/parts, ..]."""
    return _rows_of_rank(x, sections, r, parts)


def join_row_blocks(blocks: list[torch.Tensor], sections: tuple[int, ...]) -> torch.Tensor:
    """Inverse of `row_block` over all `len(blocks)` blocks: each section's blocks one after another
    (`sections` are those of the joined tensor): len(blocks) x [n/parts, ..] -> [n, ..]."""
    return _rows_of_all(blocks, sections)


def shard_sublayer(full: dict[str, torch.Tensor], kind: str, r: int, p: int) -> dict[str, torch.Tensor]:
    """Rank r's shard of one sub-layer given its full parameters (w1 [n1, h], b1 [n1], w2 [n2, h]).

    Each row section of w1 / b1 (`row_sections`: q | k | v, or gate | up) gives its row block r."""
    out = {n: full[n].clone() for n in REPLICATED}
    sections = row_sections(kind, full["w1"].shape[0], full["w2"].shape[0])
    out["w1"] = _rows_of_rank(full["w1"], sections, r, p)
    out["b1"] = _rows_of_rank(full["b1"], sections, r, p)
    n2 = full["w2"].shape[0] // p
    out["w2"] = full["w2"][r * n2:(r + 1) * n2].clone()
    return out


def unshard_sublayer(shards: list[dict[str, torch.Tensor]], kind: str) -> dict[str, torch.Tensor]:
    """Inverse of `shard_sublayer`: full parameters from every rank's shard (rank order)."""
    full = {n: shards[0][n] for n in REPLICATED}
    p = len(shards)
    sections = row_sections(kind, p * shards[0]["w1"].shape[0], p * shards[0]["w2"].shape[0])
    full["w1"] = _rows_of_all([s["w1"] for s in shards], sections)
    full["b1"] = _rows_of_all([s["b1"] for s in shards], sections)
    full["w2"] = torch.cat([s["w2"] for s in shards])
    return full


VOCAB_ROWS = ("wte", "head")
"""The token embedding and the untied head: [V, h], sharded by vocabulary rows under the vocabulary-parallel
embedding and head, replicated otherwise."""


def _outside_layers(key: str, value: torch.Tensor, r: int, p: int, vocab_parallel: bool) -> torch.Tensor:
    """Rank r's copy of a tensor outside the layers: its padded vocabulary rows (`VOCAB_ROWS` when
    `vocab_parallel`), else the whole tensor."""
    if vocab_parallel and key in VOCAB_ROWS:
        return shard_vocab_rows(value, r, p)
    return value.clone()


def shard_state_dict(full_sd: dict[str, torch.Tensor], r: int, p: int, vocab_parallel: bool = False
                     ) -> dict[str, torch.Tensor]:
    """Rank r's state dict from a full (reference-model) state dict: keys `layers.L.attn.NAME`,
    `layers.L.mlp.NAME` are sharded, every other key (embeddings, final norm) is replicated, except the
    embedding and head's vocabulary rows when `vocab_parallel` (`VOCAB_ROWS`)."""
    out: dict[str, torch.Tensor] = {}
    groups: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in full_sd.items():
        prefix, _, name = key.rpartition(".")
        if prefix.startswith("layers.") and name in PARAM_NAMES:
            groups.setdefault(prefix, {})[name] = value
        else:
            out[key] = _outside_layers(key, value, r, p, vocab_parallel)
    for prefix, params in groups.items():
        kind = "attention" if prefix.endswith(".attn") else "mlp"
        for name, value in shard_sublayer(params, kind, r, p).items():
            out[f"{prefix}.{name}"] = value
    return out


def init_rank_state_dict(cfg, seed: int, r: int, p: int, vocab_parallel: bool = False) -> dict[str, torch.Tensor]:
    """Rank r's state dict of the initialisation `reference.init_state_dict(cfg, seed)` (the same values as
    `shard_state_dict` of it), built one sub-layer at a time: the rank holds its shards, the replicated
    tensors and at most one sub-layer's full tensors (or the full embedding, before keeping its rows), never
    the whole model."""
    out: dict[str, torch.Tensor] = {}
    pending: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in init_tensors(cfg, seed):
        prefix, _, name = key.rpartition(".")
        if not (prefix.startswith("layers.") and name in PARAM_NAMES):
            out[key] = _outside_layers(key, value, r, p, vocab_parallel) if key in VOCAB_ROWS else value
            continue
        pending.setdefault(prefix, {})[name] = value
        if len(pending[prefix]) == len(PARAM_NAMES):  # the sub-layer is complete: keep its shard only
            kind = "attention" if prefix.endswith(".attn") else "mlp"
            out.update({f"{prefix}.{n}": v for n, v in shard_sublayer(pending.pop(prefix), kind, r, p).items()})
    return out


def _gather_all(shards: dict[str, torch.Tensor], group) -> dict[str, torch.Tensor]:
    """Every rank's copy of each of `shards` (the same names and shapes on every rank), stacked: {name: [p, ..]},
    in one all-gather per dtype (the shards flattened into one buffer) instead of one per tensor: a collective
    costs the same fixed time whatever its size at these sizes."""
    p = comm.size(group)
    out: dict[str, torch.Tensor] = {}
    by_dtype: dict[torch.dtype, list[str]] = {}
    for key, value in shards.items():
        by_dtype.setdefault(value.dtype, []).append(key)
    for keys in by_dtype.values():
        flat = torch.cat([shards[k].detach().reshape(-1) for k in keys])  # [N]: this rank's shards, one after another
        gathered = comm.all_gather(flat.unsqueeze(0), group)  # [1, N] -> [p, N]
        for key, part in zip(keys, gathered.split([shards[k].numel() for k in keys], dim=1)):
            out[key] = part.reshape(p, *shards[key].shape)  # [p, n] -> [p, ..]
    return out


def gather_state_dict(local_sd: dict[str, torch.Tensor], group=None, vocab: int = 0) -> dict[str, torch.Tensor]:
    """The full state dict from every rank's shard (a collective: every rank calls it, every rank gets
    the full dict); `vocab` > 0: the embedding and head are vocabulary rows (`VOCAB_ROWS`) of a V = `vocab`
    table."""
    p = comm.size(group)
    out: dict[str, torch.Tensor] = {}
    groups: dict[str, list[dict[str, torch.Tensor]]] = {}
    every = _gather_all({key: value for key, value in local_sd.items()
                         if (vocab and key in VOCAB_ROWS) or (key.rpartition(".")[0].startswith("layers.")
                                                             and key.rpartition(".")[2] in SHARDED)}, group)
    for key, value in local_sd.items():
        prefix, _, name = key.rpartition(".")
        if vocab and key in VOCAB_ROWS:
            out[key] = unshard_vocab_rows(every[key], vocab).clone()  # [p, R, h] -> [V, h]
        elif prefix.startswith("layers.") and name in SHARDED:
            gathered = every[key]  # [p, ..]: every rank's shard
            groups.setdefault(prefix, [{} for _ in range(p)])
            for r in range(p):
                groups[prefix][r][name] = gathered[r]
        else:
            out[key] = value.detach().clone()
    for prefix, shards in groups.items():
        for r in range(p):
            for name in REPLICATED:
                shards[r][name] = out[f"{prefix}.{name}"]
        kind = "attention" if prefix.endswith(".attn") else "mlp"
        for name, value in unshard_sublayer(shards, kind).items():
            out[f"{prefix}.{name}"] = value
    return out
