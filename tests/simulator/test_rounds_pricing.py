"""A step of rounds priced as the runtime runs it: every round's gather, one reduction at the step's width (the
bytes `grouped_states.rounds_state_sent_bytes` counts, which the runtime's tests match), and the gradient
buffers held across the rounds in every round's memory."""

import math

import pytest

from paradyse_lab.cluster.presets import PRESETS
from paradyse_lab.core.model_spec import get_model
from paradyse_lab.costmodel import formulas as F
from paradyse_lab.costmodel.grouped_states import (
    LOSS_BYTES,
    grouped_state_sent_bytes,
    replicated_total,
    rounds_held_bytes,
    rounds_state_sent_bytes,
)
from paradyse_lab.simulator.group_problem import GroupChoice
from paradyse_lab.simulator.group_rounds import rounds_choice
from paradyse_lab.simulator.grouped_steps import RING_POLICY, GroupPricer
from paradyse_lab.simulator.round_steps import choose_rounds

LENGTHS = [3000, 3000] + [500] * 8
"""Megatron's rules at 1,024 tokens per rank run these as two rounds: the two long ones on groups of 4, then the
short ones on one GPU each (`group_megatron.schedule`)."""
ROUNDS = ((4, 4), (1,) * 8)


def _pricer(budget: int | None = None) -> GroupPricer:
    cluster = PRESETS["a100-80gb-x8"]
    return GroupPricer(get_model("bert"), cluster, RING_POLICY,
                       cluster.plan_budget_bytes if budget is None else budget)


def _priced_sent_bytes(pricer: GroupPricer, rounds) -> float:
    """`rounds_state_sent_bytes` turned back into its calls (each sent byte count over its ring's (n-1)/n) and
    priced with the cluster's collective model: one gather per round at its own width, one reduce-scatter and
    the replicated gradients' and loss's all-reduces at the widest round's."""
    m, c, world = pricer.model, pricer.cluster, pricer.cluster.gpus
    sent = rounds_state_sent_bytes(m, world, rounds)
    widths = [world // min(sizes) for sizes in rounds]
    gathers = [grouped_state_sent_bytes(m, world, sizes).get("all_gather", 0) for sizes in rounds]
    assert sum(gathers) == sent["all_gather"]
    d = max(widths)
    replicated = F.grad_all_reduces(replicated_total(m), d)
    assert sum(call.sent_bytes for call in replicated) + 2 * LOSS_BYTES * (d - 1) // d == sent["all_reduce"]
    per_node = min(d, c.node_gpus)
    total = sum(F.collective_call_s(c, "all_gather", b * w // (w - 1), w, min(w, c.node_gpus))
                for b, w in zip(gathers, widths) if w > 1)
    total += F.collective_call_s(c, "reduce_scatter", sent["reduce_scatter"] * d // (d - 1), d, per_node)
    total += sum(call.count * F.collective_call_s(c, "all_reduce", call.buffer_bytes, d, per_node)
                 for call in replicated)
    return total + F.collective_call_s(c, "all_reduce", LOSS_BYTES, d, per_node)


def test_the_planned_rounds_pay_every_rounds_gather_and_one_reduction():
    pricer = _pricer()
    step = choose_rounds("megatron", LENGTHS, pricer, per_rank=1024)
    assert tuple(r.sizes for r in step.rounds) == ROUNDS and math.isfinite(step.makespan_s)
    expected = _priced_sent_bytes(pricer, ROUNDS)
    assert step.sync_s == pytest.approx(expected, rel=1e-12)
    # more than the widest round alone: the groups of 4 gather over 2 ranks first
    assert step.sync_s > pricer.sync_s((1,) * 8) - F.collective_call_s(pricer.cluster, "all_reduce", LOSS_BYTES, 8)


def test_one_round_is_priced_as_a_one_split_step():
    pricer = _pricer()
    for sizes in ((4, 4), (2, 2, 2, 2), (1,) * 8, (4, 2, 1, 1)):
        assert pricer.sync_s(sizes) == pytest.approx(_priced_sent_bytes(pricer, (sizes,)), rel=1e-12)
    assert pricer.sync_s((8,)) == 0.0


def _least_budget(fits) -> int:
    """The least budget (bytes) at which `fits(pricer)` holds."""
    low, high = 0, PRESETS["a100-80gb-x8"].plan_budget_bytes
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if fits(_pricer(mid)) else (mid, high)
    return high


def test_the_gradient_buffers_held_across_rounds_can_make_a_step_of_rounds_not_fit():
    """At the least budget where each round's split fits as a one-split step, the [d, F] and [R] buffers held
    from the first round's end to the reduction do not fit beside the second round's gather; with their bytes
    more, they do."""
    alone = max(_least_budget(lambda p, s=sizes: p.state_phase_fits(s)) for sizes in ROUNDS)
    tight = _pricer(alone)
    assert all(math.isfinite(tight.sync_s(sizes)) for sizes in ROUNDS)
    two = [GroupChoice((4, 4), ((0,), (1,)), 1.0, 0.0), GroupChoice((1,) * 8, tuple((i,) for i in range(2, 10)),
                                                                    0.5, 0.0)]
    assert rounds_choice(two, tight.step_sync).step_s == math.inf
    assert rounds_choice(two[:1], tight.step_sync).step_s < math.inf  # one round holds nothing across rounds
    held = rounds_held_bytes(tight.model, 8, ROUNDS)
    assert held > 0 and math.isfinite(rounds_choice(two, _pricer(alone + held).step_sync).step_s)


def test_the_rounds_after_the_first_compute_beside_the_held_buffers():
    """A sequence that just fits one GPU fits it in a first round, not in a second, where the step's gradient
    buffers (1.1 GiB of BERT's on 8 GPUs) are held beside its activations; the runtime's plans for a second
    round are made beside them too."""
    pricer = _pricer()
    lengths = [99_840, 512]
    held = pricer.rounds_held(((8,), (1,) * 8))
    assert held == rounds_held_bytes(pricer.model, 8, ((8,), (1,) * 8)) > 0
    assert math.isfinite(pricer.item(1, 99_840)[0]) and pricer.item(1, 99_840, held)[0] == math.inf
    costs = pricer.times(lengths, pricer.group_sizes())
    whole = GroupChoice((8,), ((1,),), float(costs.times[8][1]), 0.0)
    alone = GroupChoice((1,) * 8, ((0,),) + ((),) * 7, float(costs.times[1][0]), 0.0)
    assert math.isfinite(rounds_choice([alone, whole], pricer.step_sync, costs).step_s)
    assert rounds_choice([whole, alone], pricer.step_sync, costs).step_s == math.inf
    assert rounds_choice([whole, alone], pricer.step_sync).step_s < math.inf  # without the table: not re-priced
