"""Rotary position embeddings (Su et al., "RoFormer", 2021) in the Hugging Face LLaMA convention.

Library module (no command). `LlamaRotaryEmbedding` / `apply_rotary_pos_emb` of transformers' modeling_llama:
inv_freq_i = theta^(-2i/d) for i < d/2, angles = position * inv_freq repeated twice ([t, d]), and
rope(x) = x * cos + rotate_half(x) * sin with rotate_half(x) = cat(-x2, x1) over the two halves of each
head's d features; optionally with Llama 3.1's 'llama3' frequency scaling (`llama3_scaled`). Every token is
rotated by its TRUE position in the sequence: under the zig-zag layout a rank's local tokens are not
contiguous (layout.local_positions), and the strategies that gather the sequence rotate in gathered order
(layout.gathered_positions); `Ctx.positions` / `Ctx.all_positions` carry them.
The backward of a rotation is the rotation by the opposite angle: dx = dy * cos - rotate_half(dy * sin).
"""

from __future__ import annotations

import math
import weakref

import torch


def llama3_scaled(inv_freq: torch.Tensor, llama3: tuple[float, float, float, int]) -> torch.Tensor:
    """Llama 3.1's frequency scaling (rope_type 'llama3': factor, low_freq_factor, high_freq_factor,
    original_max_position_embeddings; Meta's Llama 3.1 release, transformers' rope utilities): wavelengths
    shorter than original / high_freq_factor stay, longer than original / low_freq_factor are divided by
    `factor`, and the band between is interpolated linearly in original / wavelength."""
    factor, low, high, original = llama3
    wavelen = 2 * math.pi / inv_freq  # [d/2]
    smooth = (original / wavelen - low) / (high - low)
    between = (1 - smooth) * inv_freq / factor + smooth * inv_freq
    out = torch.where(wavelen > original / low, inv_freq / factor, inv_freq)
    return torch.where((wavelen >= original / high) & (wavelen <= original / low), between, out)


def rope_tables(positions: torch.Tensor, head_dim: int, theta: float, dtype,
                llama3: tuple[float, float, float, int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin) [t, d] of the positions [t] (computed in fp32, then cast to `dtype`, as HF does); `llama3`
    scales the frequencies (`llama3_scaled`)."""
    exponent = torch.arange(0, head_dim, 2, dtype=torch.int64, device=positions.device).float() / head_dim
    inv_freq = 1.0 / (theta ** exponent)  # [d/2]
    if llama3 is not None:
        inv_freq = llama3_scaled(inv_freq, llama3)
    angles = positions.float()[:, None] * inv_freq[None, :]  # [t, 1] x [1, d/2] -> [t, d/2]
    emb = torch.cat([angles, angles], dim=-1)  # [t, d]
    return emb.cos().to(dtype), emb.sin().to(dtype)


_TABLES: dict[int, tuple] = {}
"""id(positions) -> (weak reference to positions, its version, {key: tables}): `cached_rope_tables`,
`cached_rotation`, `cached_derived`."""


def cached_rope_tables(positions: torch.Tensor, head_dim: int, theta: float, dtype,
                       llama3: tuple[float, float, float, int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """`rope_tables`, computed once per positions tensor (the same object, not modified since) and arguments:
    a model passes one positions tensor to every layer of a step, whose attention rotates q and k in the
    forward and again in the backward, so a step computes its tables once instead of twice per layer. An
    entry goes when its positions tensor is freed."""
    return _cached(positions, (head_dim, theta, dtype, llama3),
                   lambda: rope_tables(positions, head_dim, theta, dtype, llama3))


def cached_rotation(positions: torch.Tensor, head_dim: int, theta: float, dtype,
                    llama3: tuple[float, float, float, int] | None = None,
                    axes: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, signed sin) [t, 1, d] for `rotate` / `rotate_backward`, cached as `cached_rope_tables`: the
    tables with a heads axis (`axes` = 2: [t, 1, 1, d], for heads in rank groups [b, t, p, n, d]), and sin
    with its first half negated (rotate_half(x) sin = roll(x, d/2) sin')."""
    def make():
        cos, sin = rope_tables(positions, head_dim, theta, dtype, llama3)  # [t, d]
        half = head_dim // 2
        signed = torch.cat([-sin[:, :half], sin[:, half:]], dim=-1)  # [t, d]
        shape = (cos.shape[0],) + (1,) * axes + (head_dim,)
        return cos.view(shape), signed.view(shape)  # [t, d] -> [t, 1 (x axes), d]
    return _cached(positions, ("rotation", head_dim, theta, dtype, llama3, axes), make)


def cached_derived(positions: torch.Tensor, key: tuple, make) -> torch.Tensor:
    """make(), a tensor derived from `positions` (a permutation of them, ...), kept as the tables are: once per
    positions tensor and `key`, so that a step derives it once and the tables of the result are cached too."""
    return _cached(positions, ("derived",) + key, make)


def _cached(positions: torch.Tensor, key, make):
    """make(), kept per (positions tensor, version, key) until the positions tensor is freed."""
    entries = _TABLES.get(id(positions))
    if entries is not None and entries[0]() is positions and entries[1] == positions._version:
        if key in entries[2]:
            return entries[2][key]
    else:
        ident = id(positions)
        entries = (weakref.ref(positions, lambda _ref: _TABLES.pop(ident, None)), positions._version, {})
        _TABLES[ident] = entries
    entries[2][key] = make()
    return entries[2][key]


def rotate(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor, head_dim: int) -> torch.Tensor:
    """`apply_rope` with the tables of `cached_rotation` ([t, 1, d]): x cos + roll(x, d/2) sin', the same
    products and sums (so the same values) in fewer operators: x [b, t, n*d] -> [b, t, n*d]."""
    xh = _heads(x, head_dim)  # [b, t, n, d]
    return (xh * cos + xh.roll(head_dim // 2, -1) * signed_sin).flatten(-2)  # [b, t, n, d] -> [b, t, n*d]


def rotate_heads_(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor, backward: bool = False) -> None:
    """`rotate` (`backward`: `rotate_backward`) of x's heads [.., t, g, n, d] written back into x (a view of
    a buffer no one else reads), with `cached_rotation(.., axes=2)`'s tables [t, 1, 1, d]."""
    half = x.shape[-1] // 2
    if backward:
        x.copy_(x * cos + (x * signed_sin).roll(half, -1))
    else:
        x.copy_(x * cos + x.roll(half, -1) * signed_sin)


def rotate_backward(dy: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor, head_dim: int) -> torch.Tensor:
    """dx of `rotate` given dy [b, t, n*d]: dy cos + roll(dy sin', d/2) (= `apply_rope_backward`)."""
    dh = _heads(dy, head_dim)  # [b, t, n, d]
    return (dh * cos + (dh * signed_sin).roll(head_dim // 2, -1)).flatten(-2)  # [b, t, n, d] -> [b, t, n*d]


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """cat(-x2, x1) over the last dimension's halves."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def _heads(x: torch.Tensor, head_dim: int) -> torch.Tensor:
    return x.unflatten(-1, (-1, head_dim))  # [b, t, n*d] -> [b, t, n, d]


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, head_dim: int) -> torch.Tensor:
    """Rotate every head of x [b, t, n*d] by its token's angles (cos, sin [t, d]): [b, t, n*d]."""
    xh = _heads(x, head_dim)  # [b, t, n, d]
    c, s = cos[:, None, :], sin[:, None, :]  # [t, 1, d]
    return (xh * c + rotate_half(xh) * s).flatten(-2)  # [b, t, n, d] -> [b, t, n*d]


def apply_rope_backward(dy: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, head_dim: int) -> torch.Tensor:
    """dx of `apply_rope` given dy [b, t, n*d]: the rotation by minus the angles."""
    dh = _heads(dy, head_dim)  # [b, t, n, d]
    c, s = cos[:, None, :], sin[:, None, :]  # [t, 1, d]
    return (dh * c - rotate_half(dh * s)).flatten(-2)  # [b, t, n, d] -> [b, t, n*d]
