"""Grouped steps at a world of 8 without a process group: every rank played in this process through
`paradyse_lab.runtime.comm.fake_group.FakeGroup` meshes (shapes exact, nothing sent, every byte counted), for one group
of 8, 2x4,
4x2, 8x1 and the mixed (4, 2, 1, 1) and (1, 1, 2, 4), and a model with 2 K/V heads (contiguous shards gathered
from the whole world) at 4x2 and (4, 2, 1, 1): each rank's state collectives send the bytes of
paradyse_lab/costmodel/grouped_states.py, every sub-layer those of the analytic schedule at its group's size, and
a rank's group shards take the cost model's kept bytes. (The values are checked against the single-device
reference by the gloo cases at a world of 4, tests/runtime/grouped_cases.py.)"""

from __future__ import annotations

from functools import partial

import pytest
import torch

from paradyse_lab.core.model_spec import ModelSpec
from paradyse_lab.core.plan import Plan
from paradyse_lab.core.step_groups import GroupedStep, StepGroup
from paradyse_lab.costmodel.grouped_states import grouped_state_kept_bytes, grouped_state_sent_bytes
from paradyse_lab.costmodel.schedules import schedule
from paradyse_lab.runtime import ParallelGPT, shard_sequence
from paradyse_lab.runtime.comm.fake_group import FakeGroup
from paradyse_lab.runtime.comm.record import count_bytes
from paradyse_lab.runtime.training.grouped import STATES_TAG, StepMeshes, gather_group_shards, grouped_step, step_gather

WORLD, B, S = 8, 1, 32
CFG = ModelSpec(vocab_size=128, max_positions=64, hidden=64, heads=8, layers=2, causal=True, name="runtime")
"""8 heads of 8: every rank's 1/8 block of every matrix is one whole head."""
PLAN = Plan.for_layers(["megatron_ts", "ulysses_z+recompute"], 2)
GQA = ModelSpec(vocab_size=128, max_positions=64, hidden=64, heads=8, kv_heads=2, layers=2, causal=True, name="runtime")
"""2 K/V heads: a rank's 1/8 block is a quarter of one, so groups between 1 and 8 gather contiguous shards from
the whole world."""
GQA_PLAN = Plan.for_layers(["megatron_cz", "megatron_cz+recompute"], 2)


class FakeMeshes(StepMeshes):
    """The meshes of rank `rank` of a `world`-rank world, as fake groups (no process group, nothing sent)."""

    def __init__(self, world: int, rank: int):
        self.world, self.rank, self.meshes = world, rank, {}
        self.sizes = tuple(g for g in (2**i for i in range(world.bit_length())) if world % g == 0)

    def group(self, size: int, dim: str):
        if size not in self.sizes:
            raise AssertionError(f"no mesh for groups of {size}")
        if dim == "dp":
            return FakeGroup(self.world // size, self.rank // size)
        return FakeGroup(size, self.rank % size)


def _step(sizes: tuple[int, ...], plan: Plan) -> GroupedStep:
    """One item per group (sizes in rank order), each under `plan`."""
    groups, start = [], 0
    for i, size in enumerate(sizes):
        groups.append(StepGroup(start, size, (i,), (plan,)))
        start += size
    return GroupedStep(WORLD, len(sizes), tuple(groups))


def _schedule_bytes(cfg: ModelSpec, plan: Plan, size: int, dtype: str = "fp32") -> dict[str, dict[str, int]]:
    """Per sub-layer tag, the bytes the analytic schedule predicts for one item at a group of `size` ranks."""
    out = {}
    for index, (attn, mlp) in enumerate(plan.layer_options(cfg.layers)):
        for kind, opt in (("attention", attn), ("mlp", mlp)):
            calls = schedule(cfg.with_dtype(dtype), kind, opt, S, B, size).collectives
            want: dict[str, int] = {}
            for call in calls:
                want[call.op] = want.get(call.op, 0) + call.sent_bytes
            out[f"layers.{index}.{kind}"] = {k: v for k, v in want.items() if v}
    return out


@pytest.fixture
def one_thread():
    """One intra-op thread (eight ranks played one after another; many threads on a shared machine crawl)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


CASES = [(CFG, PLAN, sizes, "fp32") for sizes in ((8,), (4, 4), (2, 2, 2, 2), (1,) * 8, (4, 2, 1, 1), (1, 1, 2, 4))] + [
    (GQA, GQA_PLAN, sizes, "fp32") for sizes in ((2, 2, 2, 2), (4, 2, 1, 1))] + [
    (CFG, PLAN, (4, 2, 1, 1), "bf16"), (GQA, GQA_PLAN, (2, 2, 2, 2), "bf16")]
"""The bf16 rows: the states' gradients reduce-scattered and all-reduced in fp32 (twice the bytes of a bf16 sum)."""


@pytest.mark.parametrize("cfg, plan, sizes, dtype", CASES,
                         ids=[("gqa-" if c is GQA else "") + "-".join(map(str, s)) + ("-bf16" if d == "bf16" else "")
                              for c, _, s, d in CASES])
def test_every_rank_sends_and_keeps_the_cost_models_bytes(cfg, plan, sizes, dtype, one_thread):
    step = _step(sizes, plan)
    spec = cfg.with_dtype(dtype)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, cfg.vocab_size, (B, S), generator=gen)
    for rank in range(WORLD):
        meshes = FakeMeshes(WORLD, rank)
        model = ParallelGPT(cfg, FakeGroup(WORLD, rank), seed=1)
        model.to({"fp32": torch.float32, "bf16": torch.bfloat16}[dtype])
        size = step.group_of(rank).size
        with count_bytes() as counter:
            loss = grouped_step(model, step, meshes, lambda i, sp: (shard_sequence(ids, 1, sp),) * 2 + (None,),
                                [S] * len(sizes))
        assert torch.isfinite(torch.tensor(loss))
        assert counter.total(STATES_TAG) == grouped_state_sent_bytes(spec, WORLD, sizes), (rank, counter.total())
        for tag, want in _schedule_bytes(cfg, plan, size, dtype).items():
            assert counter.total(tag) == want, (rank, tag, counter.total(tag))
        assert all(q.grad is not None and q.grad.shape == q.shape for q in model.parameters())
        g_min, contiguous = step_gather(cfg, sizes, WORLD)
        shards = gather_group_shards(model, size, g_min, meshes.group(g_min, "dp"), contiguous)
        world = {q.untyped_storage().data_ptr() for q in model.parameters()}
        kept = sum(t.numel() * t.element_size() for t in shards.values() if t.untyped_storage().data_ptr() not in world)
        assert kept == grouped_state_kept_bytes(spec, WORLD, size, sizes)["group_weights"], (rank, kept)


REDUCE_CASES = [((8,), "fp32"), ((2, 2, 2, 2), "fp32"), ((4, 2, 1, 1), "fp32"), ((2, 2, 2, 2), "bf16"),
                ((4, 2, 1, 1), "bf16")]
"""The bf16 rows: the reduce-scatter's and the all-reduce's fp32 buckets beside the phase's buffers."""


@pytest.mark.parametrize("sizes, dtype", REDUCE_CASES, ids=["-".join(map(str, s)) + "-" + d for s, d in REDUCE_CASES])
def test_the_reduce_phase_allocates_the_cost_models_bytes(sizes, dtype, tmp_path, one_thread):
    # after the backward: the [d, F] buffer and the reduce-scatter's [F] output, then one [R] buffer; the world's
    # gradients are views of the two outputs (no copies), measured by torch's profiler (CPU allocator events, the
    # peak above the phase's start)
    from profiler_peak import peak_above_start

    from paradyse_lab.costmodel.grouped_states import reduce_phase_bytes
    from paradyse_lab.runtime.training.grouped import group_view, reduce_step_grads

    step, spec = _step(sizes, PLAN), CFG.with_dtype(dtype)
    ids = torch.randint(0, CFG.vocab_size, (B, S), generator=torch.Generator().manual_seed(0))
    want = reduce_phase_bytes(spec, WORLD, sizes)
    for rank in (0, WORLD - 1):  # the first rank of a group contributes the replicated gradients, the last not
        meshes, model = FakeMeshes(WORLD, rank), ParallelGPT(CFG, FakeGroup(WORLD, rank), seed=1)
        model.to({"fp32": torch.float32, "bf16": torch.bfloat16}[dtype])
        group = step.group_of(rank)
        g_min, contiguous = step_gather(CFG, sizes, WORLD)
        dp, sp = meshes.group(g_min, "dp"), meshes.group(group.size, "sp")
        view = group_view(model, group.size, g_min, dp, sp, contiguous)
        view(shard_sequence(ids, 1, sp), PLAN, shard_sequence(ids, 1, sp))[1].backward()
        contributes = rank - group.start < g_min
        args = (model, view, group.size, g_min, dp, contiguous, contributes)
        peak = peak_above_start(partial(reduce_step_grads, *args), tmp_path)
        assert peak == want["world_grads"] + want["transient"], (rank, peak, want)
        assert all(q.grad is not None and q.grad.shape == q.shape for q in model.parameters())
