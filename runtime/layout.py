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
Callers never compute the order themselves: they use `shard_sequence` / `gather_sequence`.

Weights of layer l, one 1/p shard per rank, the same storage for every strategy. Each sub-layer (attention
and MLP alike) is `y = x + core(LN(x) @ w1^T + b1) @ w2 + b2` with
- `ln_w`, `ln_b` [h], `b2` [h]: replicated (their gradients are all-reduced),
- `w1` [n1/p, h] and `b1` [n1/p]: rows of the first matrix (attention: n1 = 3h, the rows of this rank's
  head group, ordered q, k, v; MLP: n1 = f, this rank's f-columns),
- `w2` [n2/p, h]: rows of the second matrix stored (in, out) (attention: n2 = h, the rows of this rank's
  heads; MLP: n2 = f).
Tensor-parallel strategies read a shard as "my heads / my columns"; ZeRO-3 strategies gather the flat
`cat(w1, b1, w2)` of all ranks, whose rank-major order is the full matrix with its output features grouped
by head group (`pack_shard` / `unpack_gathered`).
"""

from __future__ import annotations

import torch

from paradyse_lab.errors import UserInputError
from paradyse_lab.strategies import layout_unit
from runtime import comm

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


def local_positions(seq_len: int, p: int, r: int) -> torch.Tensor:
    """Global positions of rank r's s/p tokens, in local order: [s/p]."""
    check_length(seq_len, p)
    if p == 1:
        return torch.arange(seq_len)
    c = seq_len // (2 * p)
    return torch.cat([torch.arange(r * c, (r + 1) * c), torch.arange((2 * p - 1 - r) * c, (2 * p - r) * c)])


def gathered_positions(seq_len: int, p: int) -> torch.Tensor:
    """Global position of each token of the rank-major concatenation of all ranks' local tokens: [s]."""
    return torch.cat([local_positions(seq_len, p, r) for r in range(p)])


def natural_order(seq_len: int, p: int) -> torch.Tensor:
    """Index `i` with `gathered[..., i, :]` in natural order (argsort of `gathered_positions`): [s]."""
    return torch.argsort(gathered_positions(seq_len, p))


def shard_sequence(x: torch.Tensor, dim: int = 1, group=None) -> torch.Tensor:
    """This rank's zig-zag chunks of the full sequence `x` along `dim`: [.., s, ..] -> [.., s/p, ..]."""
    p, r = comm.size(group), comm.rank(group)
    idx = local_positions(x.shape[dim], p, r).to(x.device)
    return x.index_select(dim, idx)


def gather_sequence(x_local: torch.Tensor, dim: int = 1, group=None) -> torch.Tensor:
    """The full sequence in natural order from every rank's local part (autograd-aware):
    [.., s/p, ..] -> [.., s, ..]."""
    p = comm.size(group)
    if p == 1:
        return x_local
    moved = x_local.movedim(dim, 0)  # [.., t, ..] -> [t, ..]
    full = comm.all_gather_autograd(moved, group)  # [t, ..] -> [p*t, ..] (rank-major)
    full = full.index_select(0, natural_order(full.shape[0], p).to(full.device))  # natural order
    return full.movedim(0, dim)  # [s, ..] -> [.., s, ..]


# --- weight shards -------------------------------------------------------------------------------------

def shard_sublayer(full: dict[str, torch.Tensor], kind: str, r: int, p: int) -> dict[str, torch.Tensor]:
    """Rank r's shard of one sub-layer given its full parameters (w1 [n1, h], b1 [n1], w2 [n2, h]).

    Attention w1/b1 rows are q | k | v of h each; the shard takes the rows of head group r of each."""
    out = {n: full[n].clone() for n in REPLICATED}
    if kind == "attention":
        h = full["w2"].shape[1]
        hp = h // p
        q_k_v = range(3)
        out["w1"] = torch.cat([full["w1"][j * h + r * hp: j * h + (r + 1) * hp] for j in q_k_v]).clone()
        out["b1"] = torch.cat([full["b1"][j * h + r * hp: j * h + (r + 1) * hp] for j in q_k_v]).clone()
    else:
        n1 = full["w1"].shape[0] // p
        out["w1"] = full["w1"][r * n1:(r + 1) * n1].clone()
        out["b1"] = full["b1"][r * n1:(r + 1) * n1].clone()
    n2 = full["w2"].shape[0] // p
    out["w2"] = full["w2"][r * n2:(r + 1) * n2].clone()
    return out


def unshard_sublayer(shards: list[dict[str, torch.Tensor]], kind: str) -> dict[str, torch.Tensor]:
    """Inverse of `shard_sublayer`: full parameters from every rank's shard (rank order)."""
    full = {n: shards[0][n] for n in REPLICATED}
    if kind == "attention":
        p = len(shards)
        w1 = torch.stack([s["w1"] for s in shards]).unflatten(1, (3, -1))  # [p, 3h/p, h] -> [p, 3, h/p, h]
        full["w1"] = w1.transpose(0, 1).reshape(-1, w1.shape[-1])  # [3, p, h/p, h] -> [3h, h]
        b1 = torch.stack([s["b1"] for s in shards]).view(p, 3, -1)  # [p, 3h/p] -> [p, 3, h/p]
        full["b1"] = b1.transpose(0, 1).reshape(-1)  # [3, p, h/p] -> [3h]
    else:
        full["w1"] = torch.cat([s["w1"] for s in shards])
        full["b1"] = torch.cat([s["b1"] for s in shards])
    full["w2"] = torch.cat([s["w2"] for s in shards])
    return full


def shard_state_dict(full_sd: dict[str, torch.Tensor], r: int, p: int) -> dict[str, torch.Tensor]:
    """Rank r's state dict from a full (reference-model) state dict: keys `layers.L.attn.NAME`,
    `layers.L.mlp.NAME` are sharded, every other key (embeddings, final norm) is replicated."""
    out: dict[str, torch.Tensor] = {}
    groups: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in full_sd.items():
        prefix, _, name = key.rpartition(".")
        if prefix.startswith("layers.") and name in PARAM_NAMES:
            groups.setdefault(prefix, {})[name] = value
        else:
            out[key] = value.clone()
    for prefix, params in groups.items():
        kind = "attention" if prefix.endswith(".attn") else "mlp"
        for name, value in shard_sublayer(params, kind, r, p).items():
            out[f"{prefix}.{name}"] = value
    return out


def gather_state_dict(local_sd: dict[str, torch.Tensor], group=None) -> dict[str, torch.Tensor]:
    """The full state dict from every rank's shard (a collective: every rank calls it, every rank gets
    the full dict)."""
    p = comm.size(group)
    out: dict[str, torch.Tensor] = {}
    groups: dict[str, list[dict[str, torch.Tensor]]] = {}
    for key, value in local_sd.items():
        prefix, _, name = key.rpartition(".")
        if prefix.startswith("layers.") and name in SHARDED:
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

def pack_shard(w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    """One flat shard `cat(w1, b1, w2)`: [n1/p, h], [n1/p], [n2/p, h] -> [W/p]."""
    return torch.cat([w1.reshape(-1), b1.reshape(-1), w2.reshape(-1)])  # [n1/p*h + n1/p + n2/p*h] = [W/p]


def unpack_shard(flat: torch.Tensor, n1p: int, h: int):
    """Views (w1 [n1p, h], b1 [n1p], w2 [n2p, h]) of one flat shard [W/p]."""
    a, b = n1p * h, n1p * h + n1p
    return flat[:a].view(n1p, h), flat[a:b], flat[b:].view(-1, h)  # [W/p] -> [n1p, h], [n1p], [n2p, h]


def unpack_gathered(flat: torch.Tensor, p: int, n1p: int, h: int):
    """Full (w1 [p*n1p, h], b1 [p*n1p], w2 [p*n2p, h]) from p rank-major flat shards [p*W/p]; rows are
    grouped by rank (for attention: head group, then q/k/v, then the group's h/p features)."""
    per = flat.view(p, -1)  # [W] -> [p, W/p]
    a, b = n1p * h, n1p * h + n1p
    w1 = per[:, :a].reshape(p * n1p, h)  # [p, n1p*h] -> [p*n1p, h]
    b1 = per[:, a:b].reshape(p * n1p)  # [p, n1p] -> [p*n1p]
    w2 = per[:, b:].reshape(-1, h)  # [p, n2p*h] -> [p*n2p, h]
    return w1, b1, w2


def pack_gathered(w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor, p: int) -> torch.Tensor:
    """Inverse of `unpack_gathered`: [p*n1p, h], [p*n1p], [p*n2p, h] -> rank-major flat [W]."""
    per_rank = [w1.reshape(p, -1), b1.reshape(p, -1), w2.reshape(p, -1)]  # rank-major rows: [p, n1p*h] ...
    return torch.cat(per_rank, dim=1).reshape(-1)  # [p, W/p] -> [W]
