"""The learned cost model: the adapter behind the `CostModel` protocol that answers `sublayer` / `fixed` from the
regressors of `FittedProfiles` (`learned_fit`: one per target, whole-model time_s and peak_bytes):

- the paper's kinds (`hybrid`, `forest`, `polynomial`): per-layer cost = whole-model cost / L (docs/paper.md
  section 4), split evenly between attention and MLP; the whole-model peak, divided by L, is charged as
  kept bytes of every layer (transient 0, no fixed bytes), so a `SearchProblem` built from it has the
  paper's additive constraint sum_l M_l(X) < OOM. The OOM threshold is per strategy: the largest peak
  seen while profiling that strategy (option) of the configuration (`strategy_thresholds`), so that a
  strategy is planned only up to the memory it was seen to run with. In one additive budget: the plan's
  budget is capped at the configuration's largest threshold C (`oom_threshold_bytes`), and a layer under
  option i is charged its M_i(X) / L times C / OOM_i, its share of the memory option i was seen to hold;
  a uniform plan of i then fits exactly when M_i(X) <= OOM_i, and a mixed plan when
  sum_l M_{pi_l}(X) / (L OOM_{pi_l}) <= 1. The plan's "bytes" are in that scale (equal to real bytes for
  the option that reached C).
- `residual` (beyond the paper): the analytic model's sub-layer and fixed costs, scaled by the learned
  whole-model ratios measured / analytic of time and of peak, so plans keep the analytic structure
  (transient peaks, model states, embedding and head).

A learned model answers only for the configurations (model shape, p, batch) and strategy options its profile
holds; other options raise `UserInputError`, which `paradyse_lab.costmodel.lowering.problem_from_cost_model`
turns into a dropped option.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from paradyse_lab.cluster.spec import ClusterSpec
from paradyse_lab.core.model_spec import ModelSpec
from paradyse_lab.core.strategies import StrategyOption
from paradyse_lab.costmodel.analytic import AnalyticCostModel
from paradyse_lab.costmodel.learned_fit import TARGETS, FittedProfiles, config_key, same_architecture
from paradyse_lab.costmodel.types import CollectiveCall, FixedCost, SubLayerCost
from paradyse_lab.costmodel.uniform_plan import uniform_plan_cost
from paradyse_lab.errors import UserInputError


class LearnedCostModel:
    """A `CostModel` answering from `FittedProfiles` for one model on one cluster (module docstring)."""

    def __init__(self, fitted: FittedProfiles, model: ModelSpec, cluster: ClusterSpec, p: int | None = None):
        self.fitted = fitted
        self.analytic = AnalyticCostModel(model, cluster, p)
        self.model, self.cluster, self.p = model, cluster, self.analytic.p
        self.name = fitted.kind
        self.label = fitted.label
        key = config_key(model, self.p)
        if key not in fitted.oom_threshold_bytes:
            have = ", ".join(f"h={k[0]} heads={k[1]} kv_heads={k[2]} layers={k[3]} p={k[4]}"
                             for k in sorted(fitted.oom_threshold_bytes))
            raise UserInputError(f"the profile {fitted.profile or ''} has no rows for model {model.name} "
                                 f"(h={key[0]} heads={key[1]} kv_heads={key[2]} layers={key[3]}) at p={key[4]}; "
                                 f"it holds: {have}")
        names = fitted.model_names.get(key, [])
        if names and model.name not in names and not any(same_architecture(model, n) for n in names):
            raise UserInputError(f"the profile {fitted.profile or ''} has no rows for model {model.name}: the rows "
                                 f"with its shapes (h={key[0]} heads={key[1]} kv_heads={key[2]} layers={key[3]} "
                                 f"p={key[4]}) are of {', '.join(names)}, a different architecture")
        self.config = key
        self.oom_threshold_bytes = fitted.oom_threshold_bytes[key]
        """The largest peak seen while profiling this configuration (docs/paper.md section 4)."""
        thresholds = getattr(fitted, "strategy_thresholds", {})  # files fitted before per-option thresholds
        self.strategy_thresholds = {k[5:]: v for k, v in thresholds.items() if k[:5] == key}
        """(strategy, recompute) -> the largest peak seen while profiling that option of this configuration."""
        self._whole: dict = {}

    def collective_s(self, call: CollectiveCall) -> float:
        """Seconds of a collective (the analytic alpha-beta model; used only for layout switches)."""
        return self.analytic.collective_s(call)

    def budget_bytes(self, budget: int) -> int:
        """The memory budget a plan made with this model may use: the paper's OOM threshold caps it."""
        if self.fitted.kind == "residual":
            return int(budget)
        return int(min(budget, self.oom_threshold_bytes))

    def memory_scale(self, option: StrategyOption) -> float:
        """C / OOM_i: what one predicted byte of `option` weighs against the capped budget C (module
        docstring; 1.0 for the residual kind, and for files without per-option thresholds)."""
        threshold = self.strategy_thresholds.get((option.strategy, option.recompute))
        if self.fitted.kind == "residual" or not threshold:
            return 1.0
        return self.oom_threshold_bytes / threshold

    def check(self, option: StrategyOption, seq_len: int, batch: int = 1) -> None:
        """Raise `UserInputError` when the option cannot run these shapes or the profile has no rows of it."""
        self.analytic.check(option, seq_len, batch)
        if option.tiled or option.offload:
            raise UserInputError(f"{option.name}: a profile holds no rows of the tiled MLP or offload (a learned "
                                 "model prices profiled options only; the analytic model prices these)")
        group = self.config[:5] + (option.strategy, option.recompute, batch)
        if group not in self.fitted.groups:
            raise UserInputError(f"{option.name}: not profiled for model {self.model.name} at p={self.p}, "
                                 f"batch {batch} (profile source={self.fitted.source})")

    def whole(self, option: StrategyOption, seq_len: int, batch: int = 1) -> tuple[float, float]:
        """Predicted whole-model (time_s, peak_bytes) of `option` on every layer."""
        self.check(option, seq_len, batch)
        key = (option, seq_len, batch)
        if key not in self._whole:
            self._prefetch(seq_len, batch)
        return self._whole[key]

    def _profiled_options(self, seq_len: int, batch: int) -> list[StrategyOption]:
        """Options profiled for this configuration and batch whose shapes split at seq_len."""
        return [StrategyOption(g[5], bool(g[6])) for g in sorted(self.fitted.groups)
                if g[:5] == self.config and g[7] == batch and self.analytic.feasible(StrategyOption(g[5]), seq_len)]

    def _prefetch(self, seq_len: int, batch: int) -> None:
        """Predict every profiled option of this configuration at (seq_len, batch) in one call per target."""
        opts = self._profiled_options(seq_len, batch)
        h, heads, kv, layers, p = self.config
        df = pd.DataFrame({"model": self.model.name, "h": h, "heads": heads, "kv_heads": kv, "layers": layers,
                           "p": p, "strategy": [o.strategy for o in opts], "recompute": [o.recompute for o in opts],
                           "seq_len": seq_len, "batch": batch})
        if self.fitted.kind == "residual":
            base = [uniform_plan_cost(self.analytic, o, seq_len, batch) for o in opts]
            bases = (np.array([u.total_time_s for u in base]), np.array([u.peak_bytes for u in base], float))
        else:
            bases = (None, None)
        preds = [self.fitted.predict(t, self.fitted.features(df, t, b)) for t, b in zip(TARGETS, bases)]
        for o, t, m in zip(opts, *preds):
            # A polynomial may turn negative far beyond its data; time and bytes cannot.
            self._whole[o, seq_len, batch] = (max(float(t), 1e-9), max(float(m), 0.0))

    def _ratios(self, option: StrategyOption, seq_len: int, batch: int) -> tuple[float, float]:
        t, m = self.whole(option, seq_len, batch)
        u = uniform_plan_cost(self.analytic, option, seq_len, batch)
        return t / u.total_time_s, m / u.peak_bytes

    def sublayer(self, kind: str, option: StrategyOption, seq_len: int, batch: int = 1,
                 segments: tuple[int, ...] | None = None) -> SubLayerCost:
        """Cost of one sub-layer: whole / (2L) (paper kinds) or the analytic cost scaled (residual).

        `segments` (the documents of a packed step of seq_len tokens): the paper kinds
        scale the time predicted at seq_len by the analytic model's packed / unpacked whole-model time."""
        if self.fitted.kind == "residual":
            cost = self.analytic.sublayer(kind, option, seq_len, batch, segments)
            rt, rm = self._ratios(option, seq_len, batch)
            return dataclasses.replace(
                cost, time_s=cost.time_s * rt, compute_s=cost.compute_s * rt, exposed_comm_s=cost.exposed_comm_s * rt,
                kept_bytes=int(cost.kept_bytes * rm), transient_bytes=int(cost.transient_bytes * rm),
                model_state_bytes=int(cost.model_state_bytes * rm))
        self.analytic.sublayer(kind, option, seq_len, batch, segments)  # unknown kind, unsplittable shapes
        t, m = self.whole(option, seq_len, batch)
        if segments is not None:  # the analytic whole-model time, packed / unpacked (the head is per token)
            def whole_s(segs):
                layer = sum(self.analytic.sublayer(k, option, seq_len, batch, segs).time_s
                            for k in ("attention", "mlp"))
                return self.model.layers * layer + self.analytic.fixed(seq_len, batch).time_s
            t *= whole_s(segments) / whole_s(None)
        parts = 2 * self.model.layers
        return SubLayerCost(time_s=t / parts, compute_s=t / parts, exposed_comm_s=0.0,
                            kept_bytes=int(m * self.memory_scale(option) // parts), transient_bytes=0,
                            model_state_bytes=0)

    def fixed(self, seq_len: int, batch: int = 1) -> FixedCost:
        """Zero for the paper's kinds (the layers carry the whole model); the analytic one scaled for residual."""
        if self.fitted.kind != "residual":
            return FixedCost(0.0, 0, 0, 0)
        f = self.analytic.fixed(seq_len, batch)
        if not f.time_s and not f.model_state_bytes:
            return f
        # The ratio of a uniform plan's first usable option: the head is the same whatever the layers run.
        opts = self._profiled_options(seq_len, batch)
        if not opts:
            return f
        opt = opts[0]
        rt, rm = self._ratios(opt, seq_len, batch)
        return FixedCost(f.time_s * rt, int(f.model_state_bytes * rm), int(f.kept_bytes * rm),
                         int(f.transient_bytes * rm), f.optimizer_s)  # the profile's steps have no optimizer
