"""A sub-layer run alone over a pack (a measured or traced one) rotates its queries and keys by the positions
within each document, as a model step over the same pack does, not by positions across the pack."""

from __future__ import annotations

import torch

from paradyse_lab.core.model_spec import ModelSpec
from paradyse_lab.runtime.model.sublayer import make_ctx

CFG = ModelSpec(vocab_size=64, max_positions=32, hidden=32, heads=4, layers=1, causal=True, name="runtime",
                rope_theta=10000.0, ffn_kind="swiglu", norm="rmsnorm", ffn_hidden=64, bias=False)


def test_a_packs_positions_restart_at_every_document():
    cu = torch.tensor([0, 4, 10], dtype=torch.int32)
    ctx = make_ctx(CFG, None, "attention", 10, cu_seqlens=cu)
    assert ctx.positions.tolist() == [0, 1, 2, 3, 0, 1, 2, 3, 4, 5]
    assert ctx.all_positions.tolist() == [0, 1, 2, 3, 0, 1, 2, 3, 4, 5]
    plain = make_ctx(CFG, None, "attention", 10)
    assert plain.positions.tolist() == list(range(10))
