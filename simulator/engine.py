"""The training-run simulation: per step, plan, charge the ground-truth cost model, check memory, record.

One row per step (schema in `ROW_COLUMNS`, written to results/*.csv). A static
policy stops at its first OOM (the paper's Figure 2); `restart:NAME` pays its restart cost and continues
with the next lighter strategy; a dynamic policy that finds no plan that fits records the OOM and stops.
Lengths are padded up to the layout unit (a multiple of 2p, which every strategy splits) before planning.
A packed workload (`--pack-tokens N`) trains one pack of documents per step, each document padded to the layout unit
and planned and charged as a `PackedStep`: its row's `seq_len` is its
longest document, `documents` and `tokens` what it trains.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
from tqdm import tqdm

from paradyse_lab.core.layer_graph import LayerGraph
from paradyse_lab.core.policy_contract import HeadPolicy
from paradyse_lab.core.search_problem import SearchProblem
from paradyse_lab.core.strategies import TWO_D, USABLE, layout_unit, step_length
from paradyse_lab.core.strategies import options as make_options
from paradyse_lab.costmodel.head_loss import head_cost_models
from paradyse_lab.costmodel.packed import PackedStep
from paradyse_lab.simulator.shared import problem as shared_problem
from paradyse_lab.workload.lengths import Workload

if TYPE_CHECKING:  # pandas (a second of start-up) only where a simulation returns its rows: not for `train`
    import pandas as pd  # pandas: ~0.3 s to import, only once a run's rows become a table

ROW_COLUMNS = ("step", "seq_len", "padded_len", "documents", "tokens", "policy", "plan_counts", "plan",
               "predicted_time_s", "charged_time_s", "cumulative_time_s", "peak_bytes", "budget_bytes", "oom",
               "switched", "layer_switches", "solve_ms", "cached", "kept_previous", "restarted")
"""One simulated step. seq_len: the sequence's length, or a packed step's longest document; padded_len: the
tokens every layer sees (padding included); documents, tokens: documents and real tokens the step trains;
plan_counts: `name:count` pairs joined by ';'; plan: option names joined by ' ';
charged_time_s: the truth model's time of the plan (0 for a step that OOMed); cumulative_time_s includes
restart costs; switched: the plan differs from the previous trained step's; layer_switches: boundaries
where consecutive decisions differ; solve_ms: wall time of planning (the only non-deterministic column: a
run's CSV keeps it apart, `TIMING_COLUMNS`)."""
TIMING_COLUMNS = ("solve_ms",)
"""Measured wall time: written to the run's timings file, not its CSV."""


class Charger:
    """Prices a plan with the ground-truth cost model (cached per length).

    With `switch_memory`, the memory model also charges what switching strategies costs the caching
    allocator (the paper names the cost, "frequent strategy switching incurs non-negligible memory
    overhead", but does not model it): PyTorch's caching allocator keeps freed blocks reserved for reuse,
    and the working buffers of different strategies have different shapes (gathered weights, K/V ring
    buffers, all-to-all buffers, shard double buffers), so one strategy's cached blocks rarely serve
    another's requests. We charge every strategy used so far in the run its largest transient working set
    as reserved: the step's transient term becomes the sum over those strategies of their reservations
    (each the largest transient it needed in any trained step, this one included) instead of the largest
    transient of this step's plan. A plan of one strategy, as every static run, pays nothing more; X and
    X+recompute count as one strategy (the same kernels and buffer shapes). This is an upper bound: before
    it reports an OOM, the allocator frees the cached blocks no tensor uses and retries, so only blocks
    that fragmentation keeps split would really stay reserved.
    """

    def __init__(self, graph: LayerGraph, cost_model, budget_bytes: int, recompute: bool = False,
                 switch_memory: bool = False, tiled: bool = False, offload: bool = False, two_d: bool = False):
        self.graph, self.cost_model, self.budget_bytes = graph, cost_model, int(budget_bytes)
        strategies = USABLE + (TWO_D if two_d else ())  # `two_d`: with the two-dimensional strategies
        self.options = make_options(strategies, recompute=recompute, tiled=tiled, offload=offload)
        self.switch_memory = switch_memory
        self.reserved: dict[str, int] = {}
        """Strategy -> transient bytes the allocator keeps reserved for it (with `switch_memory`)."""
        self._problems: dict = {}
        self._head_models = head_cost_models(cost_model)

    def problem(self, seq_len: int | PackedStep, batch: int, head: str = "whole") -> SearchProblem:
        """The truth problem at this length or packed step (all options), with the head option `head`."""
        key = (seq_len, batch, head)
        if key not in self._problems:
            self._problems[key] = shared_problem(self.graph, self._head_models[head], seq_len, batch,
                                                 self.budget_bytes, self.options)
        return self._problems[key]

    def charge(self, plan, seq_len: int, batch: int, head: str = "whole") -> tuple[float, int]:
        """(time, peak bytes) of `plan` with the head option `head` under the truth model (with the allocator's
        reservations when `switch_memory`; `commit` records a trained step's)."""
        p = self.problem(seq_len, batch, head)
        idx = p.indices(list(plan))
        peak = p.peak_bytes(idx)
        if self.switch_memory:
            rows = np.arange(idx.size)
            plain_transient = max(p.fixed_transient_bytes, int(p.transient_bytes[rows, idx].max()))
            reserved = self._reservations(p, idx)
            peak += max(p.fixed_transient_bytes, sum(reserved.values())) - plain_transient
        return p.time_of(idx), peak

    def commit(self, plan, seq_len: int, batch: int) -> None:
        """Record the reservations of a trained step (no-op without `switch_memory`)."""
        if self.switch_memory:
            p = self.problem(seq_len, batch)
            self.reserved = self._reservations(p, p.indices(list(plan)))

    def _reservations(self, p: SearchProblem, idx: np.ndarray) -> dict[str, int]:
        """Per strategy: the largest transient it has needed so far, this plan included."""
        out = dict(self.reserved)
        transient = p.transient_bytes[np.arange(idx.size), idx]
        for option, nbytes in zip(p.names(idx), transient):
            strategy = option.split("+")[0]
            out[strategy] = max(out.get(strategy, 0), int(nbytes))
        return out

    def lighter_strategy(self, current: str, seq_len: int, batch: int) -> str | None:
        """For a restart: the fastest uniform strategy that fits, among those lighter than `current`."""
        p = self.problem(seq_len, batch)
        times, peaks = p.uniform_costs()
        uniform = {s: (times[p.option_index(s)], peaks[p.option_index(s)]) for s in USABLE if s in p.options}
        limit = uniform.get(current, (0, math.inf))[1]
        fits = [s for s, (_, peak) in uniform.items() if peak < limit and peak <= p.budget_bytes]
        return min(fits, key=lambda s: uniform[s][0]) if fits else None


def _steps(workload: Workload, unit: int):
    """Per step: (seq_len, what policies plan: the padded length or a `PackedStep`, documents, tokens)."""
    if workload.packs is None:
        for seq_len in workload.lengths:
            yield seq_len, step_length(seq_len, unit), 1, seq_len
    else:
        for documents in workload.packs:
            pack = PackedStep(documents, unit)
            yield pack.longest, pack, len(documents), pack.tokens


def fix_storage_head(policy, steps, batch: int, p: int) -> str:
    """The run's storage of the embedding and head, fixed before its first step as `train` fixes it
    (`vocab_storage`): 'vocab' (by vocabulary rows) when the policy takes the
    vocabulary-parallel head at the run's longest step, then every step plans with 'vocab' alone; else
    'replicated', every step with the whole head or the tiled loss. One GPU and a policy without head options:
    replicated. `steps`: what the policy plans (lengths or `PackedStep`s)."""
    if not isinstance(policy, HeadPolicy):
        return "replicated"
    longest = max((s.padded_len if isinstance(s, PackedStep) else s) for s in steps)
    vocab = p > 1 and policy.storage_head(longest, batch) == "vocab"
    policy.restrict_heads(("vocab",) if vocab else ("whole", "tiled"))
    return "vocab" if vocab else "replicated"


def simulate(workload: Workload, policy, charger: Charger, batch: int = 1,
             progress: bool = False) -> pd.DataFrame:
    """Run `policy` over `workload`, charged by `charger`; returns the step rows. The head's storage is fixed
    for the run first (`fix_storage_head`)."""
    unit = layout_unit(charger.cost_model.p)
    fix_storage_head(policy, [padded for _, padded, _, _ in _steps(workload, unit)], batch, charger.cost_model.p)
    rows = []
    cumulative = 0.0
    previous_plan = None
    restart = getattr(policy, "restart", False)
    steps = tqdm(list(_steps(workload, unit)), desc=policy.name, unit="step", disable=not progress, leave=False)
    for step, (seq_len, padded, documents, tokens) in enumerate(steps):
        restarted = False
        while True:
            decision = policy.decide(padded, batch)
            time_s, peak = charger.charge(decision.plan.names, padded, batch, getattr(decision, "head", "whole"))
            oom = peak > charger.budget_bytes or not decision.feasible
            if oom and restart:
                nxt = charger.lighter_strategy(policy.strategy, padded, batch)
                if nxt is not None:
                    cumulative += policy.restart_s
                    policy.strategy = nxt
                    restarted = True
                    charger.reserved = {}  # a restarted process starts with an empty allocator cache
                    continue
            break
        names = decision.plan.names
        counts: dict[str, int] = {}
        for name in names:
            counts[name] = counts.get(name, 0) + 1
        charged = 0.0 if oom else time_s
        cumulative += charged
        rows.append({
            "step": step, "seq_len": seq_len, "documents": documents, "tokens": tokens, "policy": policy.name,
            "padded_len": padded.padded_len if isinstance(padded, PackedStep) else padded,
            "plan_counts": ";".join(f"{k}:{v}" for k, v in counts.items()), "plan": " ".join(names),
            "predicted_time_s": decision.predicted_time_s, "charged_time_s": charged,
            "cumulative_time_s": cumulative, "peak_bytes": peak, "budget_bytes": charger.budget_bytes,
            "oom": oom, "switched": previous_plan is not None and names != previous_plan,
            "layer_switches": sum(a != b for a, b in zip(names, names[1:])),
            "solve_ms": decision.solve_s * 1e3, "cached": decision.cached,
            "kept_previous": decision.kept_previous, "restarted": restarted,
        })
        if oom:
            break
        charger.commit(names, padded, batch)
        previous_plan = names
    import pandas as pd  # pandas: ~0.3 s to import, only once a run's rows become a table

    return pd.DataFrame(rows, columns=list(ROW_COLUMNS))
