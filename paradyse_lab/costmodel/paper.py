"""The `paper` cost model: the authors' measured A100 times (`paper_measurements`), memory from our model.

What it charges, per rank and training step, for a model whose layer shape the authors measured
(`MEASURED_SHAPES`: bert, llama, gpt and paper-7b, p = 8 on an A100-SXM4-80GB node, batch 1):

- time of one layer under strategy X = X's measured fit at the length, the same for every layer;
- split between attention and MLP (needed only by sub-layer plans) in the ratio of the analytic model's
  attention and MLP times of X at that length, so a block's time is exactly the fit;
- `X+recompute`: the authors never measured recomputation. We charge the fit times the analytic model's
  ratio time(X+recompute) / time(X) at that length: recomputation replays the forward pass, and the replay
  pays the same overheads (kernel launches, collective calls) per unit of work as the measured step, so
  the measured time is scaled rather than offset. This part is modelled, not measured; so are `+tiled` and
  `+offload` (docs/tiled_mlp_and_offload.md), charged the same way: the fit times time(option) / time(X);
- memory (kept, transient, model states), collectives and the embedding/head: the analytic model's,
  unchanged (the fits carry no memory).

Any other shape, p, GPU, or batch is refused with a `UserInputError` naming the four covered shapes.
The fits are of non-causal attention (the authors' runs): the time ratios above (attention / MLP split,
recompute) are taken from the analytic model with a non-causal mask too, whatever the preset's flag.
Command: `paradyse-lab cost --model bert --seq 4K --cost-model paper`.
"""

from __future__ import annotations

import dataclasses

from paradyse_lab.cluster.spec import ClusterSpec
from paradyse_lab.core.model_spec import PRESETS, ModelSpec
from paradyse_lab.core.strategies import StrategyOption, get_strategy
from paradyse_lab.costmodel.analytic import AnalyticCostModel
from paradyse_lab.costmodel.paper_measurements import covered_shapes_text, covers_node, shape_for
from paradyse_lab.costmodel.types import FixedCost, SubLayerCost
from paradyse_lab.errors import UserInputError
from paradyse_lab.workload.zigzag_balance import zigzag_imbalance


def _architecture(model: ModelSpec) -> ModelSpec:
    """The model up to its name, provenance note and attention mask (what the fits are insensitive to)."""
    return dataclasses.replace(model, name="", source="", causal=False)


class PaperCostModel:
    """Measured per-layer times of the authors' node; the analytic model for everything else."""

    name = "paper"
    label = "paper (authors' measured A100 times; memory: analytic model)"

    def __init__(self, model: ModelSpec, cluster: ClusterSpec, p: int | None = None):
        shape = shape_for(model.hidden, model.heads, model.layers)
        if shape is None or _architecture(model) != _architecture(PRESETS[shape.preset]):
            raise UserInputError(f"the paper cost model has no measurements for model {model.name!r} "
                                 f"(h {model.hidden}, {model.heads} heads, {model.layers} layers); "
                                 f"covered: {covered_shapes_text()}")
        self.analytic = AnalyticCostModel(model, cluster, p)
        if not covers_node(cluster.gpu_name, self.analytic.p):
            raise UserInputError(f"the paper cost model has no measurements for {self.analytic.p}x "
                                 f"{cluster.gpu_name} (cluster {cluster.name!r}); covered: {covered_shapes_text()}")
        self.model, self.cluster, self.p = model, cluster, self.analytic.p
        self.shape = shape
        self._timing = AnalyticCostModel(dataclasses.replace(model, causal=False), cluster, p)
        """The analytic model under the measured conditions (non-causal), for time ratios only."""
        self._sublayers: dict = {}
        """The sub-layer costs asked before, by `sublayer`'s arguments: a step's search problems for each head
        option (and each budget) ask the same sub-layers at the same length."""

    def budget_bytes(self, budget: int) -> int:
        """The memory a plan may use: all of `budget` (`CostModel` protocol)."""
        return int(budget)

    def check(self, option: StrategyOption, seq_len: int, batch: int = 1) -> None:
        """Raise `UserInputError` when the option cannot run these shapes or the fits do not cover them."""
        self.analytic.check(option, seq_len, batch)
        if batch != 1:
            raise UserInputError(f"the paper cost model's fits are of batch 1, got batch {batch}; "
                                 f"covered: {covered_shapes_text()}")
        if option.strategy not in self.shape.fits:
            raise UserInputError(f"the paper cost model has no fit for strategy {option.strategy!r}; "
                                 f"measured: {', '.join(self.shape.fits)}")

    def feasible(self, option: StrategyOption, seq_len: int) -> bool:
        return option.strategy in self.shape.fits and self.analytic.feasible(option, seq_len)

    def layer_time_s(self, option: StrategyOption, seq_len: int, segments: tuple[int, ...] | None = None) -> float:
        """Seconds of one layer (attention + MLP) under `option` (module docstring); with `segments`, of a
        packed step: the fit's s^2 term over the documents' squared lengths (`TimeFit.per_layer_time_s`), for a
        ring strategy times the busiest rank's share under the whole-pack zig-zag (non-causal, as measured)."""
        imbalance = 1.0
        if segments is not None and len(segments) > 1 and get_strategy(option.strategy).ring_attention:
            imbalance = zigzag_imbalance(tuple(segments), self.p, False)
        measured = self.shape.fits[option.strategy].per_layer_time_s(seq_len, segments, imbalance)
        plain = StrategyOption(option.strategy)
        if option == plain:
            return measured
        # recomputation, the tiled MLP and offload were not measured: the analytic model's ratio to the plain one
        ratio = self._analytic_layer_s(option, seq_len, segments) / self._analytic_layer_s(plain, seq_len, segments)
        return measured * ratio

    def _analytic_layer_s(self, option: StrategyOption, seq_len: int, segments=None) -> float:
        return sum(self._timing.sublayer(kind, option, seq_len, 1, segments).time_s for kind in ("attention", "mlp"))

    def sublayer(self, kind: str, option: StrategyOption, seq_len: int, batch: int = 1,
                 segments: tuple[int, ...] | None = None) -> SubLayerCost:
        """The analytic sub-layer cost with its time replaced by its share of the measured layer time
        (`segments`: the documents of a packed step)."""
        key = (kind, option, seq_len, batch, segments)
        if key in self._sublayers:
            return self._sublayers[key]
        self.check(option, seq_len, batch)
        base = self.analytic.sublayer(kind, option, seq_len, batch, segments)
        share = (self._timing.sublayer(kind, option, seq_len, batch, segments).time_s
                 / self._analytic_layer_s(option, seq_len, segments))
        time_s = self.layer_time_s(option, seq_len, segments) * share
        scale = time_s / base.time_s
        cost = dataclasses.replace(base, time_s=time_s, compute_s=base.compute_s * scale,
                                   exposed_comm_s=base.exposed_comm_s * scale)
        self._sublayers[key] = cost
        return cost

    def collective_s(self, call) -> float:
        """Seconds of a collective (the analytic alpha-beta model; used only for layout switches)."""
        return self.analytic.collective_s(call)

    def fixed(self, seq_len: int, batch: int = 1) -> FixedCost:
        """Embedding and head: the analytic model's (the measured presets have none)."""
        return self.analytic.fixed(seq_len, batch)
