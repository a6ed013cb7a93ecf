"""Lowering a cost model into a `SearchProblem`: what a solver sees of one (model, length, batch, cluster).

`problem_from_cost_model(graph, cost_model, seq_len)` asks the cost model for each option's attention and MLP
sub-layer and sums them over the decisions of the `LayerGraph`: at block granularity a block's time and kept
bytes are its attention's plus its MLP's, its transient the larger of the two, but for an option that recomputes
and offloads: that block is a checkpointed layer, which offloads only the layer's input (ALST's
checkpoint). Options whose shapes do not
split (the cost model raises `UserInputError`, e.g. s % 2p for a causal ring) are dropped from the problem
and listed in `dropped` with the reason, so solvers never see an unusable option. At sub-layer granularity an
option may run some decisions and not others (megatron_ts runs an MLP whatever kv_heads is, but not an
attention whose K/V heads do not split): it stays, is listed in `dropped` too (no uniform plan of it runs),
and each decision it cannot run charges it more than the budget in kept bytes (so no feasible plan picks it)
and a time above every other option's. The same holds where an option's flags change nothing (`+tiled` on an
attention decision: `StrategyOption.runs`) and, for `+offload`, where a plan could overfill the host memory
(`host_limited`). A switch between two strategies is charged `layout_switch_s` at
every boundary where their catalog layouts differ.

Example: `paradyse-lab plan --model gpt --seq 64K --solver dp` plans on the problem this module builds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from paradyse_lab.core.layer_graph import LayerGraph
from paradyse_lab.core.search_problem import SearchProblem
from paradyse_lab.core.strategies import CATALOG, StrategyOption
from paradyse_lab.core.strategies import options as default_options
from paradyse_lab.costmodel import formulas as F
from paradyse_lab.costmodel.layer_checkpoint import checkpointed_layer, checkpoints_layer
from paradyse_lab.costmodel.types import CollectiveCall
from paradyse_lab.errors import UserInputError, require_positive_int


def layout_switch_s(cost_model, a: StrategyOption, b: StrategyOption, seq_len: int, batch: int = 1) -> float:
    """Seconds to move the activation from a's layout to b's at one boundary, forward and backward.

    Zero when both read the same layout (`Strategy.layout`: every catalog strategy reads the unified one);
    otherwise one all-to-all of the [b, s/p, h] activation each way.
    """
    if CATALOG[a.strategy].layout == CATALOG[b.strategy].layout:
        return 0.0
    m = cost_model.model
    act = batch * seq_len // cost_model.p * m.hidden * m.dtype_bytes  # [b, s/p, h] bytes
    return 2 * cost_model.collective_s(CollectiveCall("all_to_all", act, cost_model.p))


def problem_from_cost_model(graph: LayerGraph, cost_model, seq_len: int, batch: int = 1,
                            budget_bytes: int | None = None, options: Sequence[StrategyOption] | None = None,
                            recompute: bool = False,
                            switch_cost: Callable[[StrategyOption, StrategyOption], float] | None = None,
                            ) -> SearchProblem:
    """The problem of `graph` at (seq_len, batch) under `cost_model`.

    options: default every usable strategy (and, with `recompute`, each recomputed too).
    budget_bytes: default the cluster's device memory less its reserve (`ClusterSpec.plan_budget_bytes`).
    switch_cost(a, b): seconds per boundary; default `layout_switch_s` (zero between catalog strategies, which
    share the unified layout).
    Model states go to `fixed_bytes`; should an option hold more states than the leanest one, the
    excess is charged to its kept bytes, so the peak stays exact.
    """
    require_positive_int("seq_len", seq_len)
    require_positive_int("batch", batch)
    if cost_model.model != graph.model:
        raise ValueError("cost_model and graph describe different models")
    opts = list(options) if options is not None else list(default_options(recompute=recompute))
    if budget_bytes is None:
        budget_bytes = cost_model.cluster.plan_budget_bytes
    costs, why = {}, {}  # (kind, option name) -> SubLayerCost, or the reason it cannot run
    for o in opts:
        for kind in ("attention", "mlp"):
            try:
                costs[kind, o.name] = cost_model.sublayer(kind, o, seq_len, batch)
            except UserInputError as err:
                why[kind, o.name] = str(err)
    nodes = [graph.graph.nodes[n] for n in graph.sublayer_nodes()]
    L = graph.num_decisions
    members: list[list[str]] = [[] for _ in range(L)]  # the sub-layer kinds of each decision, in execution order
    for node in nodes:
        members[node["decision"]].append(node["kind"])
    shapes = {tuple(m) for m in members}  # one per granularity's kind of decision: the blocks alike, or attn / mlp

    def runs(o, kinds) -> bool:
        return o.runs(set(kinds)) and all((kind, o.name) in costs for kind in set(kinds))

    usable = [o for o in opts if any(runs(o, m) for m in shapes)]
    dropped = {o.name: "; ".join(why[k, o.name] for k in ("attention", "mlp") if (k, o.name) in why)
               for o in opts if any((k, o.name) in why for k in ("attention", "mlp"))}
    if not usable:
        reasons = "; ".join(f"{n}: {r}" for n, r in dropped.items())
        raise UserInputError(f"no strategy option can run seq_len {seq_len}: {reasons}")
    layers = {o.name: checkpointed_layer(cost_model, o, seq_len, batch) for o in usable
              if any(checkpoints_layer(o, m) and runs(o, m) for m in shapes)}
    rows = {m: _decision_row(m, usable, costs, runs, layers) for m in shapes}
    time_s = np.stack([rows[tuple(m)].time_s for m in members])  # [L, O]
    kept = np.stack([rows[tuple(m)].kept_bytes for m in members])
    transient = np.stack([rows[tuple(m)].transient_bytes for m in members])
    host = np.stack([rows[tuple(m)].host_bytes for m in members])
    fixed_states = 0
    for m in members:  # decision by decision, sub-layer by sub-layer
        for lean in rows[tuple(m)].lean_states:
            fixed_states += lean
    too_big = host_limited(host, cost_model.cluster.host_budget_bytes)
    for d in range(L):  # an option that runs some decisions but not this one (a head rule on attention)
        cannot = [j for j, ok in enumerate(rows[tuple(members[d])].runs) if not ok or too_big[d, j]]
        if cannot:
            time_s[d, cannot] = 2 * time_s[d].max() + 1.0  # slower than any option that runs it
            kept[d, cannot] = budget_bytes + 1  # and no plan that picks it fits the budget
    fx = cost_model.fixed(seq_len, batch)
    if switch_cost is None:
        def switch_cost(a, b):
            return layout_switch_s(cost_model, a, b, seq_len, batch)
    switch = np.array([[0.0 if a == b else switch_cost(a, b) for b in usable] for a in usable])
    return SearchProblem(
        options=tuple(o.name for o in usable), time_s=time_s, kept_bytes=kept, transient_bytes=transient,
        switch_s=switch, fixed_bytes=fixed_states + fx.model_state_bytes + fx.kept_bytes,
        budget_bytes=int(budget_bytes),
        fixed_transient_bytes=max(fx.transient_bytes,  # the loss backward's, or the optimizer step's
                                  F.optimizer_temporary_bytes(cost_model.model, cost_model.cluster.on_cpu)),
        fixed_time_s=fx.time_s + fx.optimizer_s,  # the optimizer step ends every training step
        edges=tuple(graph.decision_edges()), labels=tuple(d.label for d in graph.decisions), dropped=dropped,
        host_bytes=host if host.any() else None,
    )


@dataclass(frozen=True)
class DecisionRow:
    """What one decision over some sub-layer kinds costs under each usable option: [O] arrays."""

    time_s: np.ndarray
    kept_bytes: np.ndarray
    """With the states an option holds beyond the leanest option's."""
    transient_bytes: np.ndarray
    host_bytes: np.ndarray
    lean_states: tuple[int, ...]
    """Per sub-layer: the leanest option's model states (every plan holds them: the problem's fixed bytes)."""
    runs: tuple[bool, ...]
    """Per option: whether it runs this decision."""


def _decision_row(kinds: tuple[str, ...], usable, costs: dict, runs, layers: dict | None = None) -> DecisionRow:
    """The row of a decision over `kinds` (in execution order): every decision over the same kinds costs the
    same, so a problem sums each kind of row once (sub-layer by sub-layer, as each decision's own sum would).
    `layers`: option name -> its `CheckpointedLayer`, which replaces the sub-layers' time and bytes of a whole layer
    (`checkpoints_layer`)."""
    O = len(usable)
    time_s, kept, transient, host = np.zeros(O), np.zeros(O, np.int64), np.zeros(O, np.int64), np.zeros(O, np.int64)
    ok = tuple(runs(o, kinds) for o in usable)
    leans = []
    for kind in kinds:
        found = {j: costs[kind, o.name] for j, o in enumerate(usable) if ok[j]}
        lean = min(c.model_state_bytes for c in found.values())
        leans.append(lean)
        for j, c in found.items():
            time_s[j] += c.time_s
            kept[j] += c.kept_bytes + c.model_state_bytes - lean
            transient[j] = max(transient[j], c.transient_bytes)
            host[j] += c.host_bytes
    for j, o in enumerate(usable):
        if ok[j] and layers and o.name in layers and checkpoints_layer(o, kinds):
            layer = layers[o.name]
            time_s[j], transient[j], host[j] = layer.time_s, layer.transient_bytes, layer.host_bytes
            kept[j] = layer.kept_bytes + sum(costs[k, o.name].model_state_bytes for k in kinds) - sum(leans)
    return DecisionRow(time_s, kept, transient, host, tuple(leans), ok)


def host_limited(host: np.ndarray, host_budget: int) -> np.ndarray:
    """[L, O] bool: the offload choices a problem leaves out so that every plan fits `host_budget`, without a second
    budget in the solvers. Decision d may move up to cap_d = max(host_budget // L, its smallest offload), on the
    first decisions whose caps fit together (none after): while the host memory is ample every decision gets an
    even share (and may offload a whole kept set that fits it); once each decision's smallest offload (under
    recomputation, its input [t, h]) outgrows the share, as many leading decisions as fit still offload that.
    Offloading the first decisions frees the memory held longest (their activations wait for the whole
    backward)."""
    none = np.iinfo(np.int64).max
    smallest = np.where(host > 0, host, none).min(axis=1) if host.size else np.zeros(0, np.int64)
    cap = np.maximum(host_budget // max(1, host.shape[0]), np.where(smallest == none, 0, smallest))
    cap = np.where(np.cumsum(cap) <= host_budget, cap, 0)
    return host > cap[:, None]
