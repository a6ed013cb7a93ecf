"""The unified layout (docs/paper.md section 3, the paper's Table 2): what every rank holds, for every strategy.

Library module (no command).

Activations: `[b, s/p, h]` per rank at every sub-layer boundary. **Chunk order: zig-zag, always.** The
sequence is cut into 2p equal chunks; rank r holds chunks r and 2p-1-r, in that order (for p = 1 this is
the identity). Zig-zag balances causal ring attention (every rank gets one early and one late chunk:
ring-flash-attention's `zigzag_ring_flash_attn`, and Megatron-LM context parallelism's load balancing) and
it is the same order for every strategy, so a switch between layers moves no bytes. The layout unit is
therefore 2p tokens (1 when p = 1): a sequence length not divisible by it is **an error** (no silent
padding); callers that want padding pad to `layout_unit(p)` themselves. Strategies that gather the whole
sequence (megatron_ts, ulysses_z) reorder it to natural order locally (`natural_order`) before attention.
A pack of documents (runtime/packed.py, given by its `cu_seqlens`) is cut per document instead: each
(padded) document into 2p chunks, rank r holding chunks r and 2p-1-r of every one, documents in order.
Callers never compute the order themselves: they use `shard_sequence` / `gather_sequence`.

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
ulysses_z are feasible then: the rule is in paradyse_lab/strategies.py) a K/V head is split over p / kv_heads
ranks by rows, which only a gather of all shards reassembles; this needs kv % p == 0 (`kv_heads * d`
divisible by p), the same storage rule as h % p. ZeRO-3 strategies gather the flat `cat(w1, b1, w2)` of all
ranks, whose rank-major order is the full matrix with its output features grouped by rank, each rank's
group ordered by section (`pack_shard` / `unpack_gathered`; `split_sections` reads the sections back).
"""

from __future__ import annotations

from functools import lru_cache

import torch

from paradyse_lab.errors import UserInputError
from paradyse_lab.strategies import layout_unit
from runtime import comm, comm_autograd

SHARDED = ("w1", "b1", "w2")
"""Parameters of a sub-layer stored as 1/p shards."""
REPLICATED = ("ln_w", "ln_b", "b2")
"""Parameters of a sub-layer replicated on every rank."""
PARAM_NAMES = ("ln_w", "ln_b", "w1", "b1", "w2", "b2")
"""Parameters of every sub-layer, in the order the strategies take them."""


def check_length(seq_len: int, p: int) -> None:
    """Raise `UserInputError` when `seq_len` does not split into the zig-zag layout."""
    unit = layout_unit(p)
    if seq_len <= 0 or seq_len % unit:
        raise UserInputError(
            f"sequence length {seq_len} must be a positive multiple of {unit} (2p zig-zag chunks for p = {p}); "
            f"pad it to a multiple of {unit}")


def layout_documents(cu_seqlens, p: int) -> tuple[int, ...]:
    """The lengths of the documents the zig-zag layout cuts separately, from a pack's offsets
    (runtime/packed.py): walking its segments in order, a layout document closes at the first segment end
    at which its length is a multiple of the layout unit (2p). A pack of `packed.pack_sequence` (each
    document followed by its own padding segment to the unit) gives one layout document per real document.
    None (one sequence) -> None."""
    if cu_seqlens is None:
        return None
    return _layout_documents(tuple(int(x) for x in torch.as_tensor(cu_seqlens).tolist()), p)


@lru_cache(maxsize=256)
def _layout_documents(cu: tuple[int, ...], p: int) -> tuple[int, ...]:
    unit = layout_unit(p)
    out, start = [], 0
    for end in cu[1:]:
        if (end - start) % unit == 0:
            out.append(end - start)
            start = end
    if start != cu[-1]:
        raise UserInputError(f"pack of {cu[-1]} tokens does not split into the zig-zag layout (unit {unit})")
    return tuple(out)


def local_positions(seq_len: int, p: int, r: int, cu_seqlens=None) -> torch.Tensor:
    """Global positions of rank r's s/p tokens, in local order: [s/p] (a cached tensor: do not modify it).
    A pack (`cu_seqlens`) is laid out per document: each layout document (`layout_documents`) is cut into
    2p chunks and rank r holds chunks r and 2p-1-r of every document, documents in pack order (Megatron-LM's
    THD layout for context parallelism, ring-flash-attention's varlen zig-zag); the local order is increasing
    in position."""
    check_length(seq_len, p)
    return _local_positions(layout_documents(cu_seqlens, p) or (seq_len,), p, r)


@lru_cache(maxsize=256)
def _local_positions(documents: tuple[int, ...], p: int, r: int) -> torch.Tensor:
    if p == 1:
        return torch.arange(sum(documents))
    parts, start = [], 0
    for n in documents:
        c = n // (2 * p)
        parts += [torch.arange(start + r * c, start + (r + 1) * c),
                  torch.arange(start + (2 * p - 1 - r) * c, start + (2 * p - r) * c)]
        start += n
    return torch.cat(parts)


def gathered_positions(seq_len: int, p: int, cu_seqlens=None) -> torch.Tensor:
    """Global position of each token of the rank-major concatenation of all ranks' local tokens: [s]."""
    return torch.cat([local_positions(seq_len, p, r, cu_seqlens) for r in range(p)])


def natural_order(seq_len: int, p: int, cu_seqlens=None, device=None) -> torch.Tensor:
    """Index `i` with `gathered[..., i, :]` in natural order (argsort of `gathered_positions`): [s], on
    `device` (cached per layout and device: built and copied once, not per sub-layer call)."""
    check_length(seq_len, p)
    return _natural_order(layout_documents(cu_seqlens, p) or (seq_len,), p, str(device or "cpu"))


@lru_cache(maxsize=64)
def _natural_order(documents: tuple[int, ...], p: int, device: str) -> torch.Tensor:
    positions = torch.cat([_local_positions(documents, p, r) for r in range(p)])
    return torch.argsort(positions).to(device)


def shard_sequence(x: torch.Tensor, dim: int = 1, group=None, cu_seqlens=None) -> torch.Tensor:
    """This rank's zig-zag chunks of the full sequence `x` along `dim` (a pack's: per document, given its
    `cu_seqlens`): [.., s, ..] -> [.., s/p, ..]."""
    p, r = comm.size(group), comm.rank(group)
    idx = local_positions(x.shape[dim], p, r, cu_seqlens).to(x.device)
    return x.index_select(dim, idx)


def gather_sequence(x_local: torch.Tensor, dim: int = 1, group=None, cu_seqlens=None) -> torch.Tensor:
    """The full sequence in natural order from every rank's local part (autograd-aware):
    [.., s/p, ..] -> [.., s, ..]."""
    p = comm.size(group)
    if p == 1:
        return x_local
    moved = x_local.movedim(dim, 0)  # [.., t, ..] -> [t, ..]
    full = comm_autograd.all_gather_autograd(moved, group)  # [t, ..] -> [p*t, ..] (rank-major)
    full = full.index_select(0, natural_order(full.shape[0], p, cu_seqlens, full.device))  # natural order
    return full.movedim(0, dim)  # [s, ..] -> [.., s, ..]


# --- weight shards -------------------------------------------------------------------------------------

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
embedding and head (runtime/vocab_parallel.py), replicated otherwise."""


def _outside_layers(key: str, value: torch.Tensor, r: int, p: int, vocab_parallel: bool) -> torch.Tensor:
    """Rank r's copy of a tensor outside the layers: its padded vocabulary rows (`VOCAB_ROWS` when
    `vocab_parallel`), else the whole tensor."""
    if vocab_parallel and key in VOCAB_ROWS:
        from runtime.vocab_parallel import shard_vocab_rows

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
    from runtime.reference import init_tensors

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


def gather_state_dict(local_sd: dict[str, torch.Tensor], group=None, vocab: int = 0) -> dict[str, torch.Tensor]:
    """The full state dict from every rank's shard (a collective: every rank calls it, every rank gets
    the full dict); `vocab` > 0: the embedding and head are vocabulary rows (`VOCAB_ROWS`) of a V = `vocab`
    table."""
    p = comm.size(group)
    out: dict[str, torch.Tensor] = {}
    groups: dict[str, list[dict[str, torch.Tensor]]] = {}
    for key, value in local_sd.items():
        prefix, _, name = key.rpartition(".")
        if vocab and key in VOCAB_ROWS:
            from runtime.vocab_parallel import unshard_vocab_rows

            gathered = comm.all_gather(value.detach().contiguous().unsqueeze(0), group)  # [1, R, h] -> [p, R, h]
            out[key] = unshard_vocab_rows(gathered, vocab).clone()  # [p, R, h] -> [V, h]
        elif prefix.startswith("layers.") and name in SHARDED:
            gathered = comm.all_gather(value.detach().contiguous().unsqueeze(0), group)  # [1, ..] -> [p, ..]
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


# --- flat shards (ZeRO-3 gathers and METP's travelling shards) -------------------------------------------

def pack_shard(w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """One flat shard `cat(w1, b1, w2)`: [n1/p, h], [n1/p], [n2/p, h] -> [W/p], in `dtype` (default w1's: no other
    copy is made)."""
    return _cat([w1.reshape(-1), b1.reshape(-1), w2.reshape(-1)], dtype)  # [n1/p*h + n1/p + n2/p*h] = [W/p]


def _cat(pieces: list[torch.Tensor], dtype: torch.dtype | None, dim: int = 0) -> torch.Tensor:
    """`torch.cat(pieces, dim)` written straight into a buffer of `dtype` (default the pieces' own)."""
    if dtype is None or dtype == pieces[0].dtype:
        return torch.cat(pieces, dim=dim)
    shape = list(pieces[0].shape)
    shape[dim] = sum(x.shape[dim] for x in pieces)
    return torch.cat(pieces, dim=dim, out=torch.empty(shape, dtype=dtype, device=pieces[0].device))


def unpack_shard(flat: torch.Tensor, n1p: int, h: int, nb1p: int | None = None):
    """Views (w1 [n1p, h], b1 [nb1p], w2 [n2p, h]) of one flat shard [W/p]; nb1p: n1p, or 0 without biases."""
    nb1p = n1p if nb1p is None else nb1p
    a, b = n1p * h, n1p * h + nb1p
    return flat[:a].view(n1p, h), flat[a:b], flat[b:].view(-1, h)  # [W/p] -> [n1p, h], [n1p], [n2p, h]


def unpack_gathered(flat: torch.Tensor, p: int, n1p: int, h: int, nb1p: int | None = None):
    """Full (w1 [p*n1p, h], b1 [p*nb1p], w2 [p*n2p, h]) from p rank-major flat shards [p*W/p]; rows are
    grouped by rank (for attention: rank group, then q/k/v, then the group's features). `nb1p`: b1's
    length per rank (n1p, or 0 without biases)."""
    nb1p = n1p if nb1p is None else nb1p
    per = flat.view(p, -1)  # [W] -> [p, W/p]
    a, b = n1p * h, n1p * h + nb1p
    w1 = per[:, :a].reshape(p * n1p, h)  # [p, n1p*h] -> [p*n1p, h]
    b1 = per[:, a:b].reshape(p * nb1p)  # [p, nb1p] -> [p*nb1p]
    w2 = per[:, b:].reshape(-1, h)  # [p, n2p*h] -> [p*n2p, h]
    return w1, b1, w2


def pack_gathered(w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor, p: int,
                  dtype: torch.dtype | None = None) -> torch.Tensor:
    """Inverse of `unpack_gathered`: [p*n1p, h], [p*n1p], [p*n2p, h] -> rank-major flat [W], in `dtype` (default
    w1's: no other copy is made)."""
    per_rank = [x.reshape(p, x.numel() // p) for x in (w1, b1, w2)]  # rank-major rows: [p, n1p*h] ...
    return _cat(per_rank, dtype, dim=1).reshape(-1)  # [p, W/p] -> [W]


def split_sections(a: torch.Tensor, sections: tuple[int, ...], groups: int) -> list[torch.Tensor]:
    """The sections of features grouped by `groups` ranks (rank-major, each rank's features ordered by
    section: a gathered ZeRO-3 GEMM output, or one rank's own with groups = 1), each in natural order:
    [.., groups * sum(sections)/groups] -> [.., n] per section."""
    grouped = a.unflatten(-1, (groups, -1))  # [.., n1] -> [.., groups, n1/groups]
    parts = grouped.split([n // groups for n in sections], dim=-1)  # [.., groups, n/groups] each
    return [part.flatten(-2) for part in parts]  # [.., groups, n/groups] -> [.., n]


def join_sections(parts: list[torch.Tensor], groups: int) -> torch.Tensor:
    """Inverse of `split_sections`: [.., n] per section -> [.., groups * sum(n)/groups]."""
    grouped = [part.unflatten(-1, (groups, -1)) for part in parts]  # [.., n] -> [.., groups, n/groups]
    return torch.cat(grouped, dim=-1).flatten(-2)  # [.., groups, n1/groups] -> [.., n1]
