"""`rope.cached_rope_tables`: the tables of one positions tensor are computed once and reused only while that
tensor is alive and unchanged, and equal `rope_tables`'.

Run: `python -m pytest -q tests/runtime/test_rope_cache.py`."""

from __future__ import annotations

import gc

import torch

from paradyse_lab.runtime.model import rope


def test_tables_are_reused_for_the_same_unchanged_positions_only():
    pos = torch.arange(6)
    first = rope.cached_rope_tables(pos, 8, 10000.0, torch.float32)
    assert rope.cached_rope_tables(pos, 8, 10000.0, torch.float32) is first
    assert rope.cached_rope_tables(pos, 8, 10000.0, torch.float64) is not first  # other arguments: computed
    want = rope.rope_tables(pos, 8, 10000.0, torch.float32)
    assert all(torch.equal(a, b) for a, b in zip(first, want))
    pos.add_(3)  # changed in place: its version moves on, the tables are recomputed
    moved = rope.cached_rope_tables(pos, 8, 10000.0, torch.float32)
    assert all(torch.equal(a, b) for a, b in zip(moved, rope.rope_tables(pos, 8, 10000.0, torch.float32)))
    other = torch.arange(6) * 2  # another tensor: its own tables
    assert not torch.equal(rope.cached_rope_tables(other, 8, 10000.0, torch.float32)[0], moved[0])


def test_an_entry_goes_with_its_positions():
    pos = torch.arange(5)
    rope.cached_rope_tables(pos, 4, 10000.0, torch.float32)
    key = id(pos)
    assert key in rope._TABLES
    del pos
    gc.collect()
    assert key not in rope._TABLES
