"""Every rank's collectives and point-to-point calls of full training steps, replayed through the NCCL-like
one-stream-per-rank matcher of runtime/comm/replay.py (no processes: each rank is played through a fake
process group), and the matcher's own bite: planted ring bugs are caught.

Run: `python -m pytest -q tests/runtime/test_comm_replay.py`. Forward and backward of a 4-layer GPT-2
(h 64, 8 heads, s = 32) at p = 2, 4, 8 under every strategy, mixed plans that switch at every layer, with
and without recomputation; bytes each rank counts in bf16 and fp32 against the analytic schedule.
"""

from __future__ import annotations

import pytest
import torch

from paradyse_lab.core.model_spec import ModelSpec
from paradyse_lab.core.strategies import StrategyOption
from paradyse_lab.costmodel.schedules import schedule
from paradyse_lab.runtime.attention import ring as ring_attention
from paradyse_lab.runtime.comm import collectives as comm
from paradyse_lab.runtime.comm import p2p as comm_p2p
from paradyse_lab.runtime.comm import record as comm_record
from paradyse_lab.runtime.comm.replay import ReplayError, record_ranks, replay
from paradyse_lab.runtime.model.layout import shard_sequence
from paradyse_lab.runtime.model.parallel_gpt import STRATEGY_MODULES, ParallelGPT
from paradyse_lab.runtime.model.reference import init_state_dict
from paradyse_lab.runtime.model.sublayer import make_ctx, run_sublayer
from paradyse_lab.runtime.model.weight_shards import PARAM_NAMES, shard_sublayer

S = 32
CFG = ModelSpec(vocab_size=128, max_positions=64, hidden=64, heads=8, layers=4, causal=True, name="runtime")
STATE = init_state_dict(CFG, 0)
PLANS = {
    "all-strategies-mixed": ["megatron_ts", "megatron_cz", "ulysses_z", "metp"],
    "mixed-recompute": ["metp+recompute", "ulysses_z+recompute", "megatron_cz+recompute", "megatron_ts+recompute"],
    "mixed-both": ["megatron_cz", "metp+recompute", "megatron_ts", "ulysses_z+recompute"],
    "per-sublayer": ["megatron_cz", "metp", "ulysses_z+recompute", "megatron_ts", "metp+recompute", "megatron_cz",
                     "megatron_ts+recompute", "ulysses_z"],
}
"""Every strategy, switching at every layer (and at every sub-layer: 2L names), with and without recomputation
(uniform plans: p = 4 below)."""


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny kernels: one thread (several make every op wait on the others on a shared 2-core machine)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _step(plan, causal: bool = True):
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, CFG.vocab_size, (1, S), generator=gen)
    labels = torch.randint(0, CFG.vocab_size, (1, S), generator=gen)
    cfg = CFG if causal else ModelSpec(**{**CFG.__dict__, "causal": False})

    def run(group):
        model = ParallelGPT(cfg, group, state_dict=STATE)
        _, loss = model(shard_sequence(ids, 1, group), plan, shard_sequence(labels, 1, group))
        loss.backward()

    return run


EIGHT = ("mixed-recompute", "per-sublayer")
"""The plans replayed at p = 8: together they hold all eight options (four strategies, with and without
recomputation) and switch at every layer and sub-layer; the other plans' switches are replayed at p = 2 and 4."""


@pytest.mark.parametrize("p, plan", [pytest.param(p, plan, id=f"{plan}-{p}") for plan in PLANS for p in (2, 4, 8)
                                     if p < 8 or plan in EIGHT])
def test_training_step_replays_without_deadlock_or_mismatch(p, plan):
    traces = record_ranks(_step(PLANS[plan]), p)
    assert all(traces)
    assert replay(traces) >= max(len(t) for t in traces)  # every call of every rank completed


@pytest.mark.parametrize("strategy", list(STRATEGY_MODULES))
def test_uniform_plans_replay(strategy):
    replay(record_ranks(_step([strategy, strategy + "+recompute"] * 2), 4))


def test_bidirectional_mixed_plan_replays():
    replay(record_ranks(_step(PLANS["mixed-both"], causal=False), 4))


def test_matcher_catches_a_send_and_receive_posted_separately(monkeypatch):
    """Each rank posts its ring send, then its receive, as two calls: on NCCL every rank waits in its send
    for a receive nobody has posted (the reason comm_p2p.exchange batches them)."""
    real = comm_p2p.exchange

    def split(send, dst, src, recv_like=None, group=None, tag=0):
        if send is None or src is None:
            return real(send, dst, src, recv_like, group, tag)
        real(send, dst, None, group=group, tag=tag)
        return real(None, None, src, recv_like if recv_like is not None else send, group, tag)

    monkeypatch.setattr(comm_p2p, "exchange", split)
    with pytest.raises(ReplayError, match="deadlock"):
        replay(record_ranks(_step(["megatron_cz"] * 4), 4))


def test_matcher_catches_a_planted_ring_order_bug(monkeypatch):
    """Rank 1 posts its K/V block exchange only when it waits for it, after the dK/dV accumulator exchange
    of the same backward step: equal-sized messages, so NCCL would pair them and deliver a gradient
    accumulator as a K/V block."""
    real = comm_p2p.ring_exchange

    class Late:
        def __init__(self, args):
            self.args = args

        def wait(self):
            return real(*self.args).wait()

    def late_kv_on_rank1(send, group=None, tag=0):
        if comm.rank(group) == 1 and tag == ring_attention._TAG_KV:
            return Late((send, group, tag))
        return real(send, group, tag)

    monkeypatch.setattr(ring_attention.comm_p2p, "ring_exchange", late_kv_on_rank1)
    traces = record_ranks(_step(["megatron_cz"] * 4), 4)
    monkeypatch.setattr(ring_attention.comm_p2p, "ring_exchange", real)
    with pytest.raises(ReplayError, match="mismatch"):
        replay(traces)


def test_matcher_catches_a_rank_that_turns_the_ring_the_other_way(monkeypatch):
    real = comm_p2p.exchange

    def reversed_on_rank2(send, dst, src, recv_like=None, group=None, tag=0):
        if comm.rank(group) == 2 and send is not None and src is not None:
            dst, src = src, dst
        return real(send, dst, src, recv_like, group, tag)

    monkeypatch.setattr(comm_p2p, "exchange", reversed_on_rank2)
    with pytest.raises(ReplayError):
        replay(record_ranks(_step(["metp"] * 4), 4))


# --- bytes sent in bf16 and fp32 against the analytic schedule -----------------------------------------------

def _sublayer_bytes(strategy: str, kind: str, recompute: bool, p: int, dtype, cfg=CFG, state=STATE) -> dict[str, int]:
    """Bytes rank 0 of p sends for one sub-layer (forward + backward), played through a fake group."""
    from paradyse_lab.runtime.comm.fake_group import FakeGroup

    prefix = "layers.1." + ("attn." if kind == "attention" else "mlp.")
    full = {n.rpartition(".")[2]: v for n, v in state.items() if n.startswith(prefix)}
    params = [v.to(dtype).requires_grad_() for v in (shard_sublayer(full, kind, 0, p)[n] for n in PARAM_NAMES)]
    x = torch.randn(1, S // p, cfg.hidden, dtype=dtype, requires_grad=True)
    ctx = make_ctx(cfg, FakeGroup(p, 0), kind, S)
    module = STRATEGY_MODULES[strategy]
    with comm_record.count_bytes() as counter:
        y = run_sublayer(module.ATTENTION if kind == "attention" else module.MLP, ctx, recompute, x, params)
        y.backward(torch.ones_like(y))
    return counter.total()


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("p", [2, 8])
def test_bytes_sent_equal_the_schedule_in_both_dtypes(p, dtype, cfg=CFG, state=STATE):
    from paradyse_lab.core.strategies import get_strategy

    torch_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    spec = cfg.with_dtype(dtype)
    for strategy in STRATEGY_MODULES:
        if get_strategy(strategy).violation(spec, p, S):
            continue
        for kind in ("attention", "mlp"):
            for recompute in (False, True):
                want: dict[str, int] = {}
                for call in schedule(spec, kind, StrategyOption(strategy, recompute), S, 1, p).collectives:
                    want[call.op] = want.get(call.op, 0) + call.sent_bytes
                got = _sublayer_bytes(strategy, kind, recompute, p, torch_dtype, cfg, state)
                assert got == {k: v for k, v in want.items() if v}, (strategy, kind, recompute, got, want)


LLAMA = ModelSpec(vocab_size=128, max_positions=0, hidden=64, heads=8, layers=2, ffn_hidden=128, kv_heads=2,
                  norm="rmsnorm", ffn_kind="swiglu", bias=False, rope_theta=10000.0, tied=False, name="runtime")
"""LLaMA-shaped with 2 K/V heads: every strategy at p = 2; at p = 8 the ring, and Ulysses replicating each
K/V head 4 times (the GQA rule in paradyse_lab/core/strategies.py)."""


@pytest.mark.parametrize("p, plan", [
    (2, ["megatron_ts", "metp+recompute", "ulysses_z", "megatron_cz+recompute"]),
    (8, ["ulysses_z", "megatron_cz+recompute", "megatron_cz", "ulysses_z+recompute"]),
])
def test_llama_gqa_step_replays(p, plan):
    gen = torch.Generator().manual_seed(1)
    ids, labels = (torch.randint(0, LLAMA.vocab_size, (1, S), generator=gen) for _ in range(2))
    state = init_state_dict(LLAMA, 0)

    def run(group):
        model = ParallelGPT(LLAMA, group, state_dict=state)
        _, loss = model(shard_sequence(ids, 1, group), plan, shard_sequence(labels, 1, group))
        loss.backward()

    traces = record_ranks(run, p)
    assert replay(traces) >= max(len(t) for t in traces)


@pytest.mark.parametrize("p", [2, 8])
def test_llama_gqa_bytes_sent_equal_the_schedule_in_bf16(p):
    """GQA in bf16: the ring's K/V (bf16) and dK/dV (fp32) of 2 K/V heads, Ulysses' replicated K/V heads at
    p = 8, SwiGLU's gate | up shards, no biases."""
    test_bytes_sent_equal_the_schedule_in_both_dtypes(p, "bf16", LLAMA, init_state_dict(LLAMA, 0))
