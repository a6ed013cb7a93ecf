"""Steps as rounds under every group policy: the one-split policies as one round, `rounds` / `rounds-exact`
(ours: rounds of splits, per-layer plans) and `megatron` (Megatron-Core's dynamic context-parallel scheduler,
one strategy), with Megatron's per-rank length chosen on held-out batches (`held_out_per_rank`).
"""

from __future__ import annotations

import math

from paradyse_lab.core.step_groups import ROUND_GROUP_POLICIES
from paradyse_lab.core.step_rounds import StepRounds
from paradyse_lab.errors import UserInputError
from paradyse_lab.simulator.group_megatron import choose_per_rank, gpus_needed, megatron_rounds
from paradyse_lab.simulator.group_problem import GroupChoice, reassess
from paradyse_lab.simulator.group_rounds import (
    MAX_EXACT_ROUND_ITEMS,
    RoundsChoice,
    plan_rounds,
    plan_rounds_exact,
    rounds_choice,
)
from paradyse_lab.simulator.grouped_steps import GroupPricer, choose, grouped_step

ROUND_POLICIES = ROUND_GROUP_POLICIES
"""The group policies whose steps have several rounds (the runtime runs them;
`train` takes ours, not `megatron`)."""


def choose_rounds(group_policy: str, lengths, pricer: GroupPricer, ring: GroupPricer | None = None,
                  per_rank: int | None = None) -> RoundsChoice:
    """The rounds of one step under `group_policy`: a one-split policy's choice as one round; `megatron`:
    Megatron's schedule at `per_rank` tokens per rank priced by `pricer` (static:megatron_cz); `rounds`: ours,
    never worse than the one-split `sized` choice nor than Megatron's schedule (when `ring` and `per_rank` are
    given) re-priced with per-layer plans; `rounds-exact`: the exact rounds planner (small batches)."""
    if group_policy not in ROUND_POLICIES:
        return rounds_choice([choose(group_policy, lengths, pricer, ring)], pricer.sync_s)
    if group_policy == "megatron":
        if per_rank is None:
            raise UserInputError("--groups megatron needs Megatron's per-rank length (max_seqlen_per_dp_cp_rank)")
        return megatron_rounds(pricer.times(lengths, pricer.group_sizes()), lengths, per_rank, pricer.sync_s)
    costs = pricer.times(lengths, pricer.group_sizes())
    if group_policy == "rounds-exact":
        if len(lengths) > MAX_EXACT_ROUND_ITEMS:
            raise UserInputError(f"--groups rounds-exact takes at most {MAX_EXACT_ROUND_ITEMS} sequences per step, "
                                 f"got {len(lengths)}")
        return plan_rounds_exact(costs, pricer.sync_s)
    extra = []
    if ring is not None and per_rank is not None:
        baseline = megatron_rounds(ring.times(lengths, pricer.group_sizes()), lengths, per_rank, ring.sync_s)
        if math.isfinite(baseline.step_s):
            extra.append(rounds_choice([reassess(r, costs, pricer.sync_s) for r in baseline.rounds], pricer.sync_s))
    one_split = choose("sized", lengths, pricer, ring)
    return plan_rounds(costs, pricer.sync_s, extra, one_split)


def grouped_rounds(choice: RoundsChoice, items, pricer: GroupPricer) -> StepRounds:
    """The `StepRounds` the runtime runs: each round a `GroupedStep` on that round's items (in the order of the
    step's items), each item with its plan at its group's size (its checks hold for every round)."""
    out, mapped = [], []
    for r in choice.rounds:
        mine = sorted(i for a in r.assignment for i in a)
        local = {i: k for k, i in enumerate(mine)}
        here = GroupChoice(r.sizes, tuple(tuple(local[i] for i in a) for a in r.assignment), r.makespan_s, r.sync_s)
        out.append(grouped_step(here, [items[i] for i in mine], pricer))
        mapped.append(tuple(mine))
    return StepRounds(pricer.cluster.gpus, len(items), tuple(out), tuple(mapped))


def held_out_per_rank(ring: GroupPricer, batches) -> int:
    """Megatron's per-rank length chosen on held-out global batches (`group_megatron.choose_per_rank`, priced by
    `ring`): where no length fits every sequence, the one that fits the most (the others do not fit)."""
    sizes = ring.group_sizes()
    return choose_per_rank([(ring.times(b, sizes), b) for b in batches if b], ring.sync_s)


def megatron_fits(ring: GroupPricer, length: int, per_rank: int | None) -> bool:
    """Whether Megatron's scheduler trains a sequence: it fits the group its per-rank length gives it (some group
    when `per_rank` is None: some per-rank length could)."""
    if per_rank is None:
        return any(math.isfinite(ring.item(g, length)[0]) for g in ring.group_sizes())
    need = gpus_needed(length, per_rank)
    return need <= ring.cluster.gpus and math.isfinite(ring.item(need, length)[0])
