"""The state-dict gather packs each dtype's shards into one buffer: every tensor comes back whole, in its dtype, at
its name, whatever the mix of dtypes, layouts and sizes (one rank here; the gloo worlds gather real shards)."""

from __future__ import annotations

import torch

from paradyse_lab.runtime.model.weight_shards import _gather_all


def test_mixed_dtypes_strided_and_empty_tensors_come_back_each_at_its_name():
    gen = torch.Generator().manual_seed(0)
    shards = {"a": torch.randn(3, 4, generator=gen),
              "steps": torch.arange(5, dtype=torch.int64),
              "b": torch.randn(4, 3, generator=gen).t(),  # not contiguous
              "half": torch.randn(2, 2, generator=gen).to(torch.bfloat16),
              "empty": torch.empty(0, 3),
              "c": torch.randn(7, generator=gen)}
    out = _gather_all(shards, None)
    assert set(out) == set(shards)  # every name, none added (callers read them by name)
    for name, shard in shards.items():
        assert out[name].dtype == shard.dtype and out[name].shape == (1, *shard.shape), name
        torch.testing.assert_close(out[name][0], shard, rtol=0, atol=0)
