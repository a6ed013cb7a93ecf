"""Activation offload's mechanics on one process (runtime/strategies/offload.py): a storage saved twice moves once,
views of
it come back as the same views, nothing saved stays in the device's hands between forward and backward, and the
offloader lets go of both copies once the backward has them. Exactness under every strategy at p = 1..4 and the
bytes against the cost model: tests/runtime/runtime_cases.py (`*offload*`)."""

import torch
from torch.testing import assert_close

from paradyse_lab.app.measure.profile_memory import KeptRecorder
from paradyse_lab.runtime.strategies.offload import Offloader


class _SavesTwice(torch.autograd.Function):
    """y = x * w, saving x twice (itself and a view of it) and w (a parameter: not offloaded)."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, x[:, 1:], w)
        return x * w

    @staticmethod
    def backward(ctx, dy):
        x, tail, w = ctx.saved_tensors
        assert torch.equal(tail, x[:, 1:]) and tail.shape == (x.shape[0], x.shape[1] - 1)
        return dy * w, (dy * x).sum(0)


def test_a_storage_moves_once_views_come_back_and_the_parameter_stays():
    x = torch.randn(3, 4, requires_grad=True)
    w = torch.randn(4, requires_grad=True)
    offloader = Offloader(torch.device("cpu"))
    with KeptRecorder(exclude=(w,)) as kept:
        with offloader.sublayer("a", [w]):
            h = torch.tanh(x)  # tanh saves its output h; _SavesTwice saves h and a view of it: one storage
            y = _SavesTwice.apply(h, w)
    assert kept.nbytes == 0  # the offload hooks take over: nothing saved on the device
    assert offloader.stats.to_host == {"a": h.nbytes}  # three saves of one storage: moved once
    y.sum().backward()
    xr, wr = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    (torch.tanh(xr) * wr).sum().backward()
    assert_close(x.grad, xr.grad)
    assert_close(w.grad, wr.grad)
    assert offloader.stats.to_device == offloader.stats.to_host
    assert offloader._held == {"a": []}  # both copies let go once unpacked


def test_the_backward_prefetches_the_previous_offloaded_sublayer():
    x = torch.randn(2, 3, requires_grad=True)
    offloader = Offloader(torch.device("cpu"))
    y = x
    for tag in ("l0", "l1", "l2"):
        with offloader.sublayer(tag, []):
            y = torch.sin(y)
    y.sum().backward()
    back = [(tag, during) for direction, tag, during in offloader.stats.copies if direction == "to_device"]
    assert back == [("l2", "l2"), ("l1", "l2"), ("l0", "l1")]
    assert_close(x.grad, torch.cos(x) * torch.cos(torch.sin(x)) * torch.cos(torch.sin(torch.sin(x))))


def test_no_prefetch_across_a_sublayer_that_is_not_offloaded_or_of_a_larger_set():
    """A prefetched set stays on the device until its sub-layer's backward: only the sub-layer just before (in
    execution order) and no larger than the one whose backward runs is brought back early (the one extra set the
    cost model counts); the others come back when first needed."""
    x = torch.randn(2, 3, requires_grad=True)
    offloader = Offloader(torch.device("cpu"))
    y = x
    for tag in ("layers.0.attention", "layers.0.mlp"):
        with offloader.sublayer(tag, []):
            y = torch.sin(y)
    y = torch.sin(y)  # layers.1.attention: not offloaded
    with offloader.sublayer("layers.1.mlp", []):
        y = torch.sin(torch.cat([y, y], dim=1))  # keeps a larger input than layers.0.mlp's
    y.sum().backward()
    back = [(tag, during) for direction, tag, during in offloader.stats.copies if direction == "to_device"]
    assert back == [("layers.1.mlp", "layers.1.mlp"), ("layers.0.mlp", "layers.0.mlp"),
                    ("layers.0.attention", "layers.0.mlp")]
