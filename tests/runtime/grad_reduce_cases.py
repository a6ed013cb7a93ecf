"""Distributed cases of bf16 gradients summed over ranks in fp32 (runtime/comm/grad_reduce.py `GRAD_REDUCE_DTYPE`;
runtime_cases.py adds them to the per-world harness, at p = 4):
- every path's reduction of crafted bf16 per-rank gradients equals their fp32 sum rounded once to bf16, where no
  order of bf16 additions gives that value (so a bf16 reduction, in whatever order gloo or a chain adds, fails);
- every strategy's attention and MLP sub-layer in bf16 against the fp32 reference of the same bf16 inputs, within
  bf16 tolerance (its ZeRO-3 reduce-scatter, METP point-to-point partials and replicated all-reduce in fp32).
The bytes these reductions send in bf16 are checked against the cost model in test_comm_replay.py (sub-layers)
and test_grouped_fake.py (grouped steps' states)."""

from __future__ import annotations

import torch

from paradyse_lab.core.model_spec import ModelSpec
from paradyse_lab.runtime.comm import collectives as comm
from paradyse_lab.runtime.comm import grad_reduce
from paradyse_lab.runtime.comm import p2p as comm_p2p

SUMMANDS = ((0.029541015625, 0.000690460205078125, 0.01080322265625, 0.034423828125),
            (0.000823974609375, -1.2109375, -1.0234375, -1.6640625),
            (-0.024169921875, -0.00194549560546875, -0.41015625, 0.345703125),
            (-0.43359375, 0.7265625, 0.01104736328125, 0.12451171875),
            (0.000621795654296875, -0.392578125, 0.296875, 0.0084228515625))
"""Per element (row), the bf16 gradient of ranks 0..3 (every value exact in bf16): four summands whose fp32 sum is
exact and, rounded to bf16, differs from every result of adding them in bf16 in any order and grouping
(`bf16_sums`; found by a random search over bf16 quadruples)."""


def bf16_sums(values: list[torch.Tensor]) -> set[float]:
    """Every result of summing the bf16 scalars `values` pairwise in bf16, over all orders and groupings."""
    if len(values) == 1:
        return {float(values[0])}
    out: set[float] = set()
    for i in range(len(values)):
        for j in range(len(values)):
            if i != j:
                rest = [v for k, v in enumerate(values) if k not in (i, j)]
                out |= bf16_sums(rest + [values[i] + values[j]])  # one bf16 addition, rounded
    return out


def _summands() -> tuple[torch.Tensor, torch.Tensor]:
    """(per-rank bf16 gradients [5, 4], their fp32 sum rounded once to bf16 [5]), checked to have the bite above."""
    vals = torch.tensor(SUMMANDS, dtype=torch.float64).bfloat16()  # [5 elements, 4 ranks]
    assert torch.equal(vals.double(), torch.tensor(SUMMANDS, dtype=torch.float64)), "every summand exact in bf16"
    exact = vals.double().sum(dim=1)  # [5]
    assert torch.equal(vals.float().sum(dim=1).double(), exact), "the fp32 sums must be exact"
    want = exact.float().bfloat16()  # [5] rounded once
    for row, w in zip(vals, want):
        assert float(w) not in bf16_sums(list(row)), (row, w)
    return vals, want


def fp32_sum_case(rank: int, p: int, group) -> None:
    """Each reduction of bf16 gradients (replicated all-reduce, bucketed; ZeRO-3 reduce-scatter, bucketed; METP's
    chain of fp32 partials) gives the fp32 sum of the ranks' gradients rounded once to bf16."""
    from paradyse_lab.runtime.model.sublayer import Ctx, Weights
    from paradyse_lab.runtime.strategies import metp
    from paradyse_lab.runtime.strategies.zero3 import scatter_grad

    assert p == 4, "four summands per element"
    vals, want = _summands()
    mine = vals[:, rank].contiguous()  # [5] this rank's gradient
    got = grad_reduce.all_reduce_grads([mine], group)[0]  # norms / output biases, embedding, grouped replicated
    assert got.dtype == torch.bfloat16 and torch.equal(got, want), (got, want)
    a, b = grad_reduce.all_reduce_grads([mine[:2], mine[2:]], group, bucket=2)  # 3 buckets across the two tensors
    assert torch.equal(torch.cat([a, b]), want), (a, b, want)

    ctx = Ctx(group=group, p=p, rank=rank, kind="mlp", heads=4, causal=True, seq_len=4, eps=1e-5)
    rows = mine.repeat(p, 1)  # [p, 5]: one row per rank's shard, each this rank's gradient
    sw1, sb1 = (scatter_grad(g, ctx, torch.bfloat16) for g in (rows, mine[:1].repeat(p)))  # ZeRO-3: [p*n] -> [n]
    assert sw1.dtype == torch.bfloat16 and sw1.shape == (1, 5) and torch.equal(sw1[0], want), (sw1, want)
    assert torch.equal(sb1, want[:1])
    shard = grad_reduce.reduce_scatter_grads(rows.reshape(-1), group, bucket=2 * p)  # [p*5] -> [5]: 3 buckets of 2
    assert torch.equal(shard, want), (shard, want)  # (the grouped steps' states take this path too)

    w = Weights(*(torch.zeros(n, dtype=torch.bfloat16) for n in (1, 1, 1, 1, 1, 1)))
    dtype = metp._partial_dtype(w, ctx)  # what METP packs its gradient partials in
    assert dtype == torch.float32
    total, send = comm_p2p.chain_reduce(mine.to(dtype), 0, group, tag=22)  # attention: onto the owner of group 0
    if send is not None:
        send.wait()
    if rank == 0:
        assert torch.equal(total.bfloat16(), want), (total, want)
    comm.all_reduce(torch.zeros(1), group)  # [1] every chain message received before the next case


BF16_REL_TOL = 2e-2
"""Relative error (Frobenius) of a bf16 sub-layer's output and gradients against the fp32 reference of the same
bf16 inputs: bf16 carries 8 significant bits (relative rounding 2^-9 per operation)."""


def _rel_close(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    err = float((got.float() - want).norm() / want.norm().clamp_min(1e-30))
    assert err <= BF16_REL_TOL, f"{what}: relative error {err:.3g} > {BF16_REL_TOL}"


def bf16_sublayers_case(rank: int, p: int, group) -> None:
    """Every strategy's attention and MLP in bf16 against the fp32 single-device reference of the same bf16 inputs:
    output, input gradient and every parameter gradient (bf16, its reduction over the ranks in fp32)."""
    from paradyse_lab.runtime.model.layout import shard_sequence
    from paradyse_lab.runtime.model.parallel_gpt import STRATEGY_MODULES
    from paradyse_lab.runtime.model.reference import init_state_dict, reference_sublayer
    from paradyse_lab.runtime.model.sublayer import make_ctx, run_sublayer
    from paradyse_lab.runtime.model.weight_shards import PARAM_NAMES, shard_sublayer

    cfg, s = ModelSpec(vocab_size=128, max_positions=16, hidden=32, heads=4, layers=2, causal=True, name="runtime"), 16
    gen = torch.Generator().manual_seed(5)
    state = {n: (v + 0.05 * torch.randn(v.shape, generator=gen)).bfloat16().float()  # bf16-exact, noisy norms
             for n, v in init_state_dict(cfg, 0).items()}
    x, dy = (torch.randn(1, s, cfg.hidden, generator=gen).bfloat16().float() for _ in range(2))  # [1, s, h]
    for kind in ("attention", "mlp"):
        prefix = "layers.1." + ("attn." if kind == "attention" else "mlp.")
        full = {n.rpartition(".")[2]: v for n, v in state.items() if n.startswith(prefix)}
        xr, pr = x.clone().requires_grad_(), {n: v.clone().requires_grad_() for n, v in full.items()}
        reference_sublayer(xr, pr, kind, cfg).backward(dy)
        ref = shard_sublayer({n: pr[n].grad for n in PARAM_NAMES}, kind, rank, p)
        want_y = shard_sequence(reference_sublayer(x, full, kind, cfg), 1, group)
        for name, module in STRATEGY_MODULES.items():
            shards = shard_sublayer(full, kind, rank, p)
            params = [shards[n].bfloat16().requires_grad_() for n in PARAM_NAMES]
            xl = shard_sequence(x, 1, group).bfloat16().requires_grad_()
            y = run_sublayer(module.ATTENTION if kind == "attention" else module.MLP, make_ctx(cfg, group, kind, s),
                             False, xl, params)
            y.backward(shard_sequence(dy, 1, group).bfloat16())
            _rel_close(y.detach(), want_y, f"{name} {kind} output")
            _rel_close(xl.grad, shard_sequence(xr.grad, 1, group), f"{name} {kind} input gradient")
            for n, q in zip(PARAM_NAMES, params):
                assert q.grad.dtype == torch.bfloat16, (name, kind, n, q.grad.dtype)
                _rel_close(q.grad, ref[n], f"{name} {kind} gradient of {n}")


CASES = {"grad-reduce-fp32-sums": fp32_sum_case, "bf16-sublayers-vs-reference": bf16_sublayers_case}
ONLY_AT = {"grad-reduce-fp32-sums": (4,),  # four summands per element (the bite needs three or more ranks)
           "bf16-sublayers-vs-reference": (4,)}  # the fp32 paths are the same at every p; fp32 cases: every p
