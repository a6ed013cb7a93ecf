"""Distributed cases of grouped steps (runtime/training/grouped.py; runtime_cases.py adds them to the per-world harness,
at p = 4 only: the world must split into groups of several sizes). A global batch of four sequences of
different lengths trained as 2x2 (two groups of two), 4x1 (four groups of one; three sequences, one group idle),
1x4 (one group of four) and mixed (2, 1, 1; and 1, 1, 2 for the LLaMA shape), one step after another on the
same world model: the loss and every gradient equal the single-device reference's over the whole global batch
(GPT-2 shaped, and LLaMA shaped: RMSNorm, SwiGLU, rotary, grouped-query attention, no biases), the state
collectives send the bytes of paradyse_lab/costmodel/grouped_states.py and every sub-layer those of the analytic
schedule at its group's size, and a group's shards take the bytes the cost model keeps."""

from __future__ import annotations

import torch
from runtime_cases import TOL, B, grad_of, llama_config, predicted_bytes, random_state
from torch.testing import assert_close

from paradyse_lab.core.fixed_groups import fixed_size_groups
from paradyse_lab.core.model_spec import PRESETS, ModelSpec
from paradyse_lab.core.plan import Plan
from paradyse_lab.core.step_groups import GroupedStep, StepGroup
from paradyse_lab.costmodel.formulas import embedding_params
from paradyse_lab.costmodel.grouped_states import grouped_state_kept_bytes, grouped_state_sent_bytes
from paradyse_lab.errors import UserInputError
from paradyse_lab.runtime import ParallelGPT, shard_sequence
from paradyse_lab.runtime.comm.record import count_bytes
from paradyse_lab.runtime.model.reference import ReferenceGPT
from paradyse_lab.runtime.model.weight_shards import shard_state_dict
from paradyse_lab.runtime.training.grouped import (
    STATES_TAG,
    StepMeshes,
    check_grouped_step,
    gather_group_shards,
    grouped_step,
    step_gather,
)

LAYERS = 2
LENGTHS = (24, 8, 16, 8)
"""The global batch's sequence lengths (multiples of 2g for every group size g up to 4)."""
PLANS = (("megatron_ts", "metp"), ("ulysses_z+tiled", "megatron_cz+offload"),
         ("ulysses_z+recompute", "metp+recompute"), ("megatron_cz", "megatron_ts+recompute"))
"""One plan per item (one option per layer): every strategy, with and without recomputation, a tiled MLP and
offloaded activations."""


def _cfg() -> ModelSpec:
    """gpt2-tiny's 12 heads (whole heads in every rank's 1/4 block) at half its width and a quarter of its vocabulary:
    the groups are the subject, not the size."""
    spec = PRESETS["gpt2-tiny"]
    return ModelSpec(vocab_size=spec.vocab_size // 4, max_positions=64, hidden=spec.hidden // 2, heads=spec.heads,
                     layers=LAYERS, causal=True, name="runtime")


def _meshes() -> StepMeshes:
    return StepMeshes.shared("cpu")  # once per process (and shared with `train`): a collective of every rank


def _batch(cfg: ModelSpec, lengths=LENGTHS) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(21)
    out = []
    for i, s in enumerate(lengths):
        ids = torch.randint(0, cfg.vocab_size, (B, s), generator=gen)
        labels = torch.randint(0, cfg.vocab_size, (B, s), generator=gen)
        labels[i % B, : 3 + i] = -100  # items differ in their count of targets
        out.append((ids, labels))
    return out


def _reference_grads(cfg: ModelSpec, sd: dict, batch, rank: int, group=None) -> tuple[torch.Tensor, dict]:
    """The single-device model's mean loss over every target of the batch and its gradients: computed by rank 0
    and sent to the others (every rank would compute the same numbers)."""
    from paradyse_lab.runtime.comm import collectives as comm

    return comm.broadcast_object(_reference_run(cfg, sd, batch) if rank == 0 else None, 0, group)


def _reference_run(cfg: ModelSpec, sd: dict, batch) -> tuple[torch.Tensor, dict]:
    ref = ReferenceGPT(cfg)
    ref.load_state_dict(sd)
    total = sum(int((labels != -100).sum()) for _, labels in batch)
    loss = sum(ref(ids, labels)[1] * int((labels != -100).sum()) for ids, labels in batch) / total
    loss.backward()
    return loss.detach(), {n: grad_of(q) for n, q in ref.named_parameters()}


def _steps(world: int) -> dict[str, GroupedStep]:
    def plan(i: int, size: int) -> Plan:
        return Plan.for_layers(list(PLANS[i]), LAYERS)

    mixed = GroupedStep(world, 4, (StepGroup(0, 2, (0, 3), (plan(0, 2), plan(3, 2))),
                                   StepGroup(2, 1, (1,), (plan(1, 1),)), StepGroup(3, 1, (2,), (plan(2, 1),))))
    mixed_last = GroupedStep(world, 4, (StepGroup(0, 1, (0,), (plan(0, 1),)),
                                        StepGroup(1, 1, (1, 2), (plan(1, 1), plan(2, 1))),
                                        StepGroup(2, 2, (3,), (plan(3, 2),))))
    idle = GroupedStep(world, 3, tuple(StepGroup(r, 1, (r,) if r < 3 else (), (plan(r, 1),) if r < 3 else ())
                                       for r in range(4)))
    return {"2x2": fixed_size_groups(world, 4, 2, plan), "4x1-one-idle": idle,
            "1x4": fixed_size_groups(world, 4, 4, plan), "mixed-2-1-1": mixed, "mixed-1-1-2": mixed_last}


def _expected_sublayer_bytes(cfg: ModelSpec, group: StepGroup, lengths=LENGTHS) -> dict[str, dict[str, int]]:
    """Per sub-layer tag, the bytes the analytic schedule predicts for this rank's group's items (of `lengths`)."""
    out: dict[str, dict[str, int]] = {}
    for item, plan in zip(group.items, group.plans):
        for index, (attn, mlp) in enumerate(plan.layer_options(cfg.layers)):
            for kind, opt in (("attention", attn), ("mlp", mlp)):
                slot = out.setdefault(f"layers.{index}.{kind}", {})
                for op, n in predicted_bytes(cfg, kind, str(opt), group.size, lengths[item]).items():
                    slot[op] = slot.get(op, 0) + n
    return out


def _check_step(name: str, step: GroupedStep, model, cfg, batch, want, rank: int, lengths=LENGTHS) -> None:
    loss_ref, grads_ref = want[step.batch]
    batch = batch[:step.batch]
    targets = [int((labels != -100).sum()) for _, labels in batch]

    def load(i: int, sp):
        return shard_sequence(batch[i][0], 1, sp), shard_sequence(batch[i][1], 1, sp), None

    model.zero_grad(set_to_none=True)
    tiles = (8, 0, 4, 8) if name.startswith("mixed") else ()  # the mixed step: three items with the tiled loss
    with count_bytes() as counter:
        loss = grouped_step(model, step, _meshes(), load, targets, tiles)
    assert_close(torch.tensor(loss), loss_ref, **TOL, msg=lambda m: f"{name}: loss: {m}")
    ref = shard_state_dict(grads_ref, rank, 4)
    for n, q in model.named_parameters():
        assert_close(grad_of(q), ref[n], **TOL, msg=lambda m, n=n: f"{name}: grad {n}: {m}")
    spec = cfg.with_dtype("fp32")
    assert counter.total(STATES_TAG) == grouped_state_sent_bytes(spec, 4, step.sizes), (name, counter.total("states"))
    assert counter.total("") == {}, (name, counter.total(""))  # every byte is a state's, a sub-layer's or the loss's
    group = step.group_of(rank)
    for tag, want_bytes in _expected_sublayer_bytes(cfg, group, lengths).items():
        assert counter.total(tag) == {k: v for k, v in want_bytes.items() if v}, (name, tag, counter.total(tag))
    emb = 2 * embedding_params(spec) * 4 * (group.size - 1) // group.size * len(group.items)
    assert counter.total("embedding") == ({"all_reduce": emb} if emb else {}), (name, counter.total("embedding"))


def grouped_steps_case(make_cfg, names: tuple[str, ...]):
    """The steps `names` of `_steps`, one after another on one world model of config `make_cfg()`."""
    def case(rank: int, p: int, group) -> None:
        cfg = make_cfg()
        sd = random_state(cfg)
        batch = _batch(cfg)
        steps = {name: step for name, step in _steps(p).items() if name in names}
        want = {n: _reference_grads(cfg, sd, batch[:n], rank, group)  # by the global batch sizes of these steps
                for n in sorted({step.batch for step in steps.values()})}
        model = ParallelGPT(cfg, group, state_dict=sd)
        before = {n: q.detach().clone() for n, q in model.named_parameters()}
        for name, step in steps.items():  # sizes change from step to step: the world shards never move
            _check_step(name, step, model, cfg, batch, want, rank)
        for n, q in model.named_parameters():
            assert torch.equal(q.detach(), before[n]), f"{n} changed"
    return case


def group_shard_bytes_case(rank: int, p: int, group) -> None:
    """A group's gathered shards take the cost model's kept bytes, at every size and mixed."""
    cfg = _cfg()
    model = ParallelGPT(cfg, group, seed=3)
    spec = cfg.with_dtype("fp32")
    for sizes in ((1, 1, 1, 1), (2, 2), (4,), (2, 1, 1)):
        g_min = min(sizes)
        size = sizes[0] if rank < sizes[0] else sizes[1 + (rank - sizes[0]) // sizes[1]]
        shards = gather_group_shards(model, size, g_min, _meshes().group(g_min, "dp"))
        world = {q.untyped_storage().data_ptr() for q in model.parameters()}
        got = sum(t.numel() * t.element_size() for t in shards.values()  # new storage only (not the world's)
                  if t.untyped_storage().data_ptr() not in world)
        assert got == grouped_state_kept_bytes(spec, 4, size, sizes)["group_weights"], (sizes, got)


def grouped_refusals_case(rank: int, p: int, group) -> None:
    """Group sizes the world cannot split into are refused; a model whose 1/4 blocks are not whole heads (2 K/V
    heads) gathers a step with groups of two over the whole world, contiguous (`step_gather`)."""
    plan = Plan.for_layers(["megatron_cz"] * LAYERS, LAYERS)
    gqa = llama_config(2)
    step = fixed_size_groups(4, 2, 2, lambda i, g: plan)
    check_grouped_step(gqa, step, _meshes())
    assert step_gather(gqa, step.sizes, 4) == (1, True) and step_gather(_cfg(), step.sizes, 4) == (2, False)
    assert step_gather(gqa, (4,), 4) == (4, False) and step_gather(gqa, (1, 1, 1, 1), 4) == (1, False)
    for world, size in ((4, 3), (4, 8)):
        try:
            fixed_size_groups(world, 2, size, lambda i, g: plan)
            raise AssertionError(f"group size {size} accepted")
        except UserInputError as err:
            assert "--group-size" in str(err)
    try:
        check_grouped_step(_cfg(), fixed_size_groups(2, 2, 1, lambda i, g: plan), _meshes())
        raise AssertionError("a step of 2 ranks accepted in a world of 4")
    except UserInputError as err:
        assert "the world has 4" in str(err), err


def _train_sizes(common: dict, sizes, group) -> dict[int, list[dict]]:
    """`train` with `common` options at every --group-size in `sizes`: size -> log."""
    from paradyse_lab.app.train_options import TrainOptions
    from paradyse_lab.app.training import train

    logs = {}
    for size in sizes:
        logs[size] = train(TrainOptions(group_size=size, **common), group)
        assert all(row["plan"].startswith(f"groups {'/'.join([str(size)] * (4 // size))}: ") for row in logs[size])
    return logs


def _same_runs(logs: dict[int, list[dict]], what: str) -> None:
    first = min(logs)
    for size, log in logs.items():
        for key in ("loss", "grad_norm"):
            assert_close([r[key] for r in log], [r[key] for r in logs[first]], rtol=1e-4, atol=1e-5,
                         msg=lambda m, key=key, size=size: f"{what} --group-size {size}: {key}: {m}")


GLOBAL_BATCH_LENGTHS = (16, 20, 24, 28, 32, 40, 44, 48)
"""The length file of `train_global_batch_case` (ascending: 4 sequences a step; packed into 64 tokens: 4 packs)."""


def train_global_batch_case(rank: int, p: int, group) -> None:
    """`train --global-batch 4` gives the same losses, gradient norms and held-out losses whatever --group-size
    (4 groups of one, 2 of two: each step's sequences planned and trained at the group's size; one group of four
    against the planner's rounds: train-groups-rounds, round_cases.py; groups of one against the planner's sizes:
    train-groups-sized, planned_groups_cases.py), with
    sequences and with packs of documents (a group planner's groups, 2/1/1 among them, through the same
    `groups_for` of runtime/training/loop.py: train-groups-sized); a run
    checkpointed with groups of two resumes with groups of one (the states are in one world layout: nothing to
    re-shard) and ends where the unbroken run of groups of one does (loss, gradient norm, held-out loss). The five
    runs make the step meshes at most once in this process (`StepMeshes.shared`: a mesh is a collective opening
    connections)."""
    from unittest import mock

    made, real_init = [], StepMeshes.__init__

    def counted_init(self, *args, **kwargs):
        made.append(1)
        real_init(self, *args, **kwargs)

    with mock.patch.object(StepMeshes, "__init__", counted_init):
        _train_global_batch(rank, p, group)
    assert len(made) <= 1, len(made)  # none when an earlier case of this world made them


def _train_global_batch(rank: int, p: int, group) -> None:
    import os

    import torch.distributed as dist
    from runtime_cases import _micro_gpt2_config, _shared_tmpdir

    root = _shared_tmpdir(rank, p, group)  # a micro GPT-2 (2 layers, h 24, 12 heads): the group sizes are the subject
    lengths = os.path.join(root, "lengths.txt")  # 2 steps of 4 sequences; packed: 4 packs of 2 (first-fit in 64)
    if rank == 0:
        with open(lengths, "w") as f:
            f.write("\n".join(map(str, GLOBAL_BATCH_LENGTHS)) + "\n")
    common = {"model": _micro_gpt2_config(root, rank, p, group, 96, positions=128), "dataset": f"file:{lengths}",
              "steps": 2, "lr": 3e-3, "max_len": 48,
              "global_batch": 4, "progress": False}
    evaluated = {**common, "eval_dataset": "uniform:16:48", "eval_every": 2, "eval_batches": 1}
    ckpt = os.path.join(root, "c")  # the run of groups of two ends with a checkpoint: resumed below
    ones = _train_sizes({**evaluated, "steps": 3}, (1,), group)[1]  # a step beyond: where the resumed run ends
    logs = {1: ones[:2], **_train_sizes({**evaluated, "checkpoint_dir": ckpt}, (2,), group)}
    assert all(row["docs"] == 4 for row in logs[1])
    _same_runs(logs, "sequences")
    for log in logs.values():  # evaluated at the world size, with the world-size policy's plan
        assert_close(log[-1]["eval_loss"], logs[1][-1]["eval_loss"], rtol=1e-4, atol=1e-5)
    # two steps each below (the same length file as the runs above): the second step's loss checks the update
    # each grouping applied after the first
    packed = _train_sizes({**common, "pack_tokens": 64}, (1, 2), group)
    assert all(row["docs"] > 4 for row in packed[1])  # each pack holds several documents
    _same_runs(packed, "packs")
    resumed = _train_sizes({**evaluated, "steps": 3, "checkpoint_dir": ckpt, "resume": True}, (1,), group)[1]
    assert [r["step"] for r in resumed] == [3]
    _same_runs({1: ones[2:], 2: resumed}, "resumed at another group size")
    assert_close(resumed[-1]["eval_loss"], ones[-1]["eval_loss"], rtol=1e-4, atol=1e-5)
    if p > 1:
        dist.barrier(group=group)
    if rank == 0:
        import shutil

        shutil.rmtree(root)


CASES = {"grouped-steps-2x2-4x1-1x4-mixed": grouped_steps_case(_cfg, ("2x2", "4x1-one-idle", "1x4", "mixed-2-1-1")),
         "grouped-llama-gqa-2x2-mixed-1-1-2": grouped_steps_case(lambda: llama_config(4), ("2x2", "mixed-1-1-2")),
         "grouped-llama-kv2-contiguous-2x2-mixed": grouped_steps_case(lambda: llama_config(2), ("2x2", "mixed-2-1-1")),
         "grouped-shard-kept-bytes": group_shard_bytes_case,
         "grouped-refusals": grouped_refusals_case, "train-global-batch-group-sizes": train_global_batch_case}
ONLY_AT = {name: (4,) for name in CASES}
