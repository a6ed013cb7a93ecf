"""The model's loss over every rank's targets (`replicated_mean`): the summed loss and the target count in one
all-reduce of their [2] stack, with the value and gradient of the sum then division it replaces (each rank played
through a fake process group; the gloo worlds check the loss and every gradient against the single-device reference)."""

from __future__ import annotations

import pytest
import torch

from paradyse_lab.core.model_spec import ModelSpec
from paradyse_lab.runtime.comm import autograd as comm_autograd
from paradyse_lab.runtime.comm import record as comm_record
from paradyse_lab.runtime.comm.fake_group import FakeGroup
from paradyse_lab.runtime.model.parallel_gpt import ParallelGPT

CFG = ModelSpec(vocab_size=64, max_positions=32, hidden=32, heads=4, layers=1, causal=True, name="runtime")


def test_a_step_sums_its_loss_and_targets_in_one_all_reduce():
    model = ParallelGPT(CFG, FakeGroup(4, 1))
    ids = torch.randint(0, CFG.vocab_size, (2, 8), generator=torch.Generator().manual_seed(0))  # [b, s/p]
    labels = ids.roll(-1, 1)
    labels[0, :3] = -100
    with comm_record.trace_calls() as calls:
        _, loss = model(ids, ["megatron_ts", "megatron_ts"], labels)
    assert [(c.op, c.shape, c.dtype) for c in calls if c.tag == "loss"] == [("all_reduce", (2,), "float32")]
    assert loss.shape == () and torch.isfinite(loss)


@pytest.mark.parametrize("dtype, calls", [(torch.float32, 1), (torch.bfloat16, 2)])
def test_replicated_mean_is_the_sum_over_the_summed_count(dtype, calls):
    group = FakeGroup(2, 0)  # sums nothing: this rank's value and count stand for the sums
    x = torch.tensor(6.5, dtype=dtype, requires_grad=True)
    y = x.detach().clone().requires_grad_()
    count = torch.tensor(4)
    with comm_record.trace_calls() as traced:
        got = comm_autograd.replicated_mean(x, count, group)
    want = comm_autograd.replicated_sum(y, group) / count.to(torch.float32).clamp(min=1)
    assert len(traced) == calls and torch.equal(got, want.to(got.dtype))
    got.backward(torch.tensor(3.0, dtype=got.dtype))
    want.backward(torch.tensor(3.0, dtype=want.dtype))
    assert torch.equal(x.grad, y.grad)
    none = comm_autograd.replicated_mean(torch.tensor(2.0), torch.tensor(0), group)  # no targets: the sum itself
    assert float(none) == 2.0
