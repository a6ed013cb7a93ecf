"""One sub-layer under every strategy and option against the single-device reference: outputs, input and
parameter gradients, the bytes sent against the schedule's, and with `+tiled` or `+offload` the bytes kept for the
backward and moved to host memory.
"""

from __future__ import annotations

import contextlib

import torch
from reference_checks import (
    STRATEGIES,
    TILE,
    TOL,
    B,
    S,
    config,
    predicted_bytes,
    sublayer_reference,
)
from torch.testing import assert_close

from paradyse_lab.app.measure.profile_memory import KeptRecorder
from paradyse_lab.core.strategies import StrategyOption
from paradyse_lab.costmodel.schedules import schedule
from paradyse_lab.runtime import shard_sequence
from paradyse_lab.runtime.comm.record import count_bytes
from paradyse_lab.runtime.model.parallel_gpt import run_option
from paradyse_lab.runtime.model.sublayer import Ctx
from paradyse_lab.runtime.model.weight_shards import PARAM_NAMES, shard_sublayer
from paradyse_lab.runtime.strategies.offload import Offloader


def sublayer_case(strategy: str, kind: str, causal: bool, recompute: bool, tiled: bool = False,
                  offload: bool = False):
    """One sub-layer under the option against the reference (output, input and parameter gradients), its bytes
    sent against the schedule's; with `+tiled` (5 positions per chunk: uneven chunks at every p) or `+offload`
    also what it keeps on the device (the kept-bytes recorder) and moves to host memory, byte for byte."""
    option = StrategyOption(strategy, recompute, tiled, offload)

    def case(rank: int, p: int, group) -> None:
        cfg = config(causal)
        full, x, dy, yr, dx, grads = sublayer_reference(causal, kind, 1, S, 3)
        x = x.clone()  # the case's own input (shared: the reference's)

        params = [v.clone().requires_grad_() for v in (shard_sublayer(full, kind, rank, p)[n] for n in PARAM_NAMES)]
        before = [v.detach().clone() for v in params]
        xl = shard_sequence(x, 1, group).requires_grad_()
        ctx = Ctx(group=group, p=p, rank=rank, kind=kind, heads=cfg.heads, causal=causal, seq_len=S,
                  eps=cfg.norm_eps, tag="case")
        offloader = Offloader(xl.device)
        with count_bytes() as counter:
            with KeptRecorder(exclude=params) as kept:
                with offloader.sublayer("case", params) if offload else contextlib.nullcontext():
                    y = run_option(option, ctx, xl, params, TILE)
            for now, then in zip(params, before):
                assert torch.equal(now.detach(), then), "a parameter changed during the forward pass"
            y.backward(shard_sequence(dy, 1, group))
        assert_close(y, shard_sequence(yr, 1, group), **TOL)
        assert_close(xl.grad, shard_sequence(dx, 1, group), **TOL)
        ref = shard_sublayer(grads, kind, rank, p)
        for name, prm in zip(PARAM_NAMES, params):
            assert_close(prm.grad, ref[name], **TOL, msg=lambda m, name=name: f"grad of {name}: {m}")
        assert counter.total() == predicted_bytes(cfg, kind, option.name, p), (counter.total(),
                                                                             predicted_bytes(cfg, kind, option.name, p))
        if tiled or offload:
            want = schedule(cfg.with_dtype("fp32"), kind, option, S, B, p, mlp_tile=TILE)
            assert kept.nbytes == want.kept_bytes, (kept.nbytes, want.kept_bytes, list(kept.kept.values()))
            assert offloader.stats.to_host.get("case", 0) == offloader.stats.to_device.get("case", 0) == want.host_bytes
    return case


CASES = {}
ONLY_AT: dict[str, tuple[int, ...]] = {}

ONE_SUBLAYER_AT = (2,)
"""World sizes of the plain one-sub-layer cases: p = 2, the cheapest world that communicates. At p = 1, 2 and 3
every strategy, with and without recomputation, causal and bidirectional, on attention and MLP sub-layers, runs
against the reference (outputs, every parameter's gradient: a wrong input gradient shows in the layers below) and
the schedules' bytes sub-layer by sub-layer in the whole-model cases (model-mixed-switching-*: one name per
sub-layer when causal, one per layer when bidirectional, the latter at p = 1 and 3, where p = 2 has these
cases); at p = 4 every strategy causal, one strategy throughout (model-*-causal) and switching to and from the 2-D
strategies (usp-/tpcp-model-switching-causal), the bidirectional mask in usp-/tpcp-model-per-layer-bidir and
llama-kv1-ts-metp-mlps-bidir (recomputation wraps every p alike).
The `-tiled-offload` and
`-offload` ones stay at every p: they alone count the bytes kept for the backward, a count in p."""

for _strategy in STRATEGIES:
    for _kind in ("attention", "mlp"):
        for _causal in (True, False) if _kind == "attention" else (True,):  # an MLP has no mask: one case
            for _recompute in (False, True):
                _name = f"sublayer-{_strategy}-{_kind}-{'causal' if _causal else 'bidir'}" + (
                    "-recompute" if _recompute else "")
                CASES[_name] = sublayer_case(_strategy, _kind, _causal, _recompute)
                ONLY_AT[_name] = ONE_SUBLAYER_AT
    # the tiled MLP offloading its input, and the whole kept set of an attention (views, lse, shared storages)
    CASES[f"sublayer-{_strategy}-mlp-tiled-offload"] = sublayer_case(_strategy, "mlp", True, False, True, True)
    CASES[f"sublayer-{_strategy}-attention-offload"] = sublayer_case(_strategy, "attention", True, False, offload=True)
