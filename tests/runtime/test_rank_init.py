"""Initialisation without full replicas: `ParallelGPT` is built on the meta device and each rank materialises only
its shards (runtime/model/weight_shards.py `init_rank_state_dict`), with the same values as sharding the full
initialisation;
the full tensors of at most one sub-layer are alive at a time."""

import gc
import weakref
from unittest import mock

import torch

from paradyse_lab.core.model_spec import ModelSpec
from paradyse_lab.runtime.model import reference, weight_shards
from paradyse_lab.runtime.model.parallel_gpt import ParallelGPT
from paradyse_lab.runtime.model.reference import init_state_dict

CFG = ModelSpec(vocab_size=64, max_positions=32, hidden=24, heads=6, layers=3, kv_heads=3, norm="rmsnorm",
                ffn_kind="swiglu", bias=False, rope_theta=1e4, tied=False, name="runtime")


def test_each_rank_builds_its_shards_with_the_full_initialisations_values():
    full = init_state_dict(CFG, 5)
    for p in (1, 2, 3):
        for r in range(p):
            got, want = weight_shards.init_rank_state_dict(CFG, 5, r, p), weight_shards.shard_state_dict(full, r, p)
            assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)
    model = ParallelGPT(CFG, seed=5)
    assert all(q.device.type == "cpu" and q.dtype == torch.float32 and q.requires_grad for q in model.parameters())
    assert all(torch.equal(v, full[k]) for k, v in model.state_dict().items())


def test_at_most_one_sublayer_is_held_whole():
    alive: list[tuple[weakref.ref, int]] = []
    most = [0]
    real = reference.init_tensors

    def watched(cfg, seed):
        for key, value in real(cfg, seed):
            gc.collect(0)  # the youngest generation: tensors die by reference count, cycles are rare and young
            prefix, _, name = key.rpartition(".")
            if prefix.startswith("layers."):
                alive.append((weakref.ref(value), value.numel() * value.element_size()))
            most[0] = max(most[0], sum(n for ref, n in alive if ref() is not None))
            yield key, value

    with mock.patch.object(weight_shards, "init_tensors", watched):  # the name weight_shards imported
        weight_shards.init_rank_state_dict(CFG, 5, 1, 3)
    largest = max(sum(v.numel() * 4 for k, v in init_state_dict(CFG, 5).items() if k.startswith(f"layers.0.{s}."))
                  for s in ("attn", "mlp"))
    assert 0 < most[0] <= largest
