"""Cost models learned from profiles: the fit, and the adapter behind the `CostModel` protocol.

`fit_profiles(kind, profiles)` fits one regressor per target (whole-model time_s and peak_bytes) on every
row of a profile (regressors.py); `LearnedCostModel` answers `sublayer` / `fixed` from them:

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

`paradyse_lab.costmodel.factory.build_cost_model(name, ...)` makes any of them, or the analytic model, by
name or from a `.joblib` file written by `FittedProfiles.save`. A learned model answers only for the
configurations (model shape, p, batch) and strategy options its profile holds; other options raise
`UserInputError`, which `paradyse_lab.costmodel.lowering.problem_from_cost_model` turns into a dropped option.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from paradyse_lab.cluster_presets import PRESETS as CLUSTER_PRESETS
from paradyse_lab.cluster_spec import ClusterSpec
from paradyse_lab.costmodel.analytic import AnalyticCostModel
from paradyse_lab.costmodel.names import LEARNED_KINDS
from paradyse_lab.costmodel.types import CollectiveCall, FixedCost, SubLayerCost
from paradyse_lab.costmodel.uniform_plan import uniform_plan_cost
from paradyse_lab.errors import UserInputError, unknown_name
from paradyse_lab.model_spec import ModelSpec, get_model
from paradyse_lab.profiles import profile_sources, read_profiles
from paradyse_lab.strategies import StrategyOption

TARGETS = ("time_s", "peak_bytes")


def config_key(model: ModelSpec, p: int) -> tuple[int, ...]:
    """(h, heads, kv_heads, layers, p): what identifies a configuration in a profile."""
    return (model.hidden, model.heads, model.kv_heads, model.layers, p)


def model_of_row(name: str, h: int, heads: int, kv_heads: int, layers: int, causal: bool | None = None) -> ModelSpec:
    """The `ModelSpec` of a profile row: its `model` preset or config, with the row's layer count (and the
    row's attention mask when the profile has a `causal` column)."""
    spec = get_model(name)
    if causal is not None and bool(causal) != spec.causal:
        spec = dataclasses.replace(spec, causal=bool(causal))
    if (spec.hidden, spec.heads, spec.kv_heads) != (h, heads, kv_heads):
        raise UserInputError(f"profile row of model {name!r}: h/heads/kv_heads {h}/{heads}/{kv_heads} differ from "
                             f"the model's {spec.hidden}/{spec.heads}/{spec.kv_heads}")
    return spec if spec.layers == layers else spec.with_layers(layers)


def same_architecture(model: ModelSpec, name: str) -> bool:
    """Whether the profile's model `name` is `model` up to its name and layer count (ffn, causal, head, ...)."""
    try:
        other = get_model(name)
    except UserInputError:
        return False
    return dataclasses.replace(other, name="", layers=1) == dataclasses.replace(model, name="", layers=1)


def row_cost_models(df: pd.DataFrame, cluster: ClusterSpec):
    """(row, analytic model of the row's configuration on `cluster`) per profile row; a row is a named tuple
    of the columns that identify what it ran (`causal` None when the profile has no such column)."""
    cols = ["model", "h", "heads", "kv_heads", "layers", "p", "strategy", "recompute", "seq_len", "batch"]
    frame = df[cols].copy()
    frame["causal"] = df["causal"] if "causal" in df.columns else None
    models: dict = {}
    for r in frame.itertuples(index=False):
        key = (r.model, r.h, r.heads, r.kv_heads, r.layers, r.causal, r.p)
        if key not in models:
            models[key] = AnalyticCostModel(model_of_row(*key[:6]), cluster, int(r.p))
        yield r, models[key]


def analytic_whole(df: pd.DataFrame, cluster: ClusterSpec) -> tuple[np.ndarray, np.ndarray]:
    """Analytic whole-model (time_s, peak_bytes) of each profile row, on `cluster` at the row's p."""
    t, m = np.empty(len(df)), np.empty(len(df))
    for i, (r, cm) in enumerate(row_cost_models(df, cluster)):
        u = uniform_plan_cost(cm, StrategyOption(r.strategy, bool(r.recompute)), int(r.seq_len), int(r.batch))
        t[i], m[i] = u.total_time_s, u.peak_bytes
    return t, m


def profile_cluster(df: pd.DataFrame, cluster: ClusterSpec | None) -> ClusterSpec:
    """The cluster a profile was taken on: its device when that is a preset name, else `cluster`."""
    devices = set(df["device"])
    if len(devices) == 1 and (d := next(iter(devices))) in CLUSTER_PRESETS:
        return CLUSTER_PRESETS[d]
    if cluster is None:
        raise UserInputError(f"profile devices {sorted(devices)} are not cluster presets; pass a cluster")
    return cluster


@dataclass
class FittedProfiles:
    """Regressors of one kind fitted on a profile, with what the cost model needs to answer from them."""

    kind: str
    """One of `LEARNED_KINDS`."""
    estimators: dict
    """Target name (`TARGETS`) -> fitted estimator."""
    groups: set
    """(h, heads, kv_heads, layers, p, strategy, recompute, batch) tuples present in the profile."""
    oom_threshold_bytes: dict
    """(h, heads, kv_heads, layers, p) -> the largest peak seen while profiling that configuration."""
    source: str
    """Profile sources, e.g. `analytic` for the synthetic profile: shown wherever the model is."""
    model_names: dict = field(default_factory=dict)
    """(h, heads, kv_heads, layers, p) -> names in the profile's `model` column for that configuration."""
    cluster: ClusterSpec | None = None
    """Cluster of the analytic base (residual kind)."""
    profile: str = ""
    """The file it was fitted from."""
    n_rows: int = 0
    extra: dict = field(default_factory=dict)
    strategy_thresholds: dict = field(default_factory=dict)
    """(h, heads, kv_heads, layers, p, strategy, recompute) -> the largest peak seen while profiling that
    option of the configuration (its OOM threshold)."""

    @property
    def label(self) -> str:
        """`hybrid (profile source=analytic)`."""
        return f"{self.kind} (profile source={self.source})"

    def features(self, df: pd.DataFrame, target: str, base: np.ndarray | None = None) -> np.ndarray:
        """Feature matrix of rows for one target (the residual kind appends the analytic prediction)."""
        from paradyse_lab.costmodel import regressors

        X = regressors.profile_features(df)
        if self.kind != "residual":
            return X
        if base is None:
            base = analytic_whole(df, self.cluster)[TARGETS.index(target)]
        return regressors.with_base(X, base)

    def predict_rows(self, df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        """Predicted whole-model (time_s, peak_bytes) of profile-like rows."""
        bases = analytic_whole(df, self.cluster) if self.kind == "residual" else (None, None)
        return tuple(self.estimators[t].predict(self.features(df, t, b)) for t, b in zip(TARGETS, bases))

    def save(self, path: str | Path) -> Path:
        """joblib file loadable by `build_cost_model(PATH, ...)`."""
        from paradyse_lab.costmodel import regressors

        return regressors.save(self, path)


def fit_profiles(kind: str, profiles: pd.DataFrame, cluster: ClusterSpec | None = None, source_name: str = "",
                 **params) -> FittedProfiles:
    """Fit `kind` (time and peak memory) on validated profile rows (`profiles.read_profiles`)."""
    from paradyse_lab.costmodel import regressors

    if kind not in LEARNED_KINDS:
        raise unknown_name("learned cost model", kind, LEARNED_KINDS)
    cl = profile_cluster(profiles, cluster) if kind == "residual" else cluster
    groups = {tuple(r) for r in profiles[["h", "heads", "kv_heads", "layers", "p", "strategy", "recompute",
                                          "batch"]].itertuples(index=False)}
    config_cols = ["h", "heads", "kv_heads", "layers", "p"]
    thresholds = profiles.groupby(config_cols)["peak_bytes"].max()
    per_option = profiles.groupby(config_cols + ["strategy", "recompute"])["peak_bytes"].max()
    names = profiles.groupby(["h", "heads", "kv_heads", "layers", "p"])["model"].agg(lambda x: sorted(set(x)))
    fitted = FittedProfiles(kind, {}, groups, {tuple(int(x) for x in k): int(v) for k, v in thresholds.items()},
                            profile_sources(profiles), {tuple(int(x) for x in k): v for k, v in names.items()},
                            cl, source_name, len(profiles),
                            strategy_thresholds={tuple(int(x) for x in k[:5]) + (str(k[5]), bool(k[6])): int(v)
                                                 for k, v in per_option.items()})
    bases = analytic_whole(profiles, cl) if kind == "residual" else (None, None)
    for target, base in zip(TARGETS, bases):
        est = regressors.make_regressor(kind, **params)
        y = profiles[target].to_numpy(dtype=float)
        est.fit(fitted.features(profiles, target, base), y)
        fitted.estimators[target] = est
    return fitted


HYBRID_PARTS = {"forest": "forest_", "polynomial": "polynomial_"}
"""The kinds whose fit a hybrid fit holds as a part (attribute of `HybridRegressor`): with default parameters
it fits `make_regressor("forest")` (PAPER_FOREST, the same seed) and `make_regressor("polynomial")` on the
same rows, so taking them from it gives the estimators a fit of their own would."""


def fit_each(kinds, profiles: pd.DataFrame, cluster: ClusterSpec | None = None) -> dict[str, FittedProfiles]:
    """{kind: `fit_profiles(kind, profiles, cluster)`} for learned kinds, the forest and the polynomial taken
    from the hybrid's fit when it is among them (`HYBRID_PARTS`) instead of fitted again."""
    fits = {"hybrid": fit_profiles("hybrid", profiles, cluster)} if "hybrid" in kinds else {}
    for kind in kinds:
        if kind in fits:
            continue
        if "hybrid" in fits and kind in HYBRID_PARTS:
            fits[kind] = part_of_hybrid(fits["hybrid"], kind)
        else:
            fits[kind] = fit_profiles(kind, profiles, cluster)
    return fits


def part_of_hybrid(hybrid: FittedProfiles, kind: str) -> FittedProfiles:
    """The `kind` fit (a key of `HYBRID_PARTS`) that the hybrid fit `hybrid` holds: what `fit_profiles(kind,
    ...)` on the same rows returns."""
    parts = {target: getattr(est, HYBRID_PARTS[kind]) for target, est in hybrid.estimators.items()}
    return dataclasses.replace(hybrid, kind=kind, estimators=parts, extra=dict(hybrid.extra))


_FIT_CACHE: dict = {}


def cached_fit_on_file(path: str | Path, kind: str, cluster: ClusterSpec | None, fit):
    """`fit(rows)` of the profile at `path`, cached in this process by (file, modification time, kind,
    cluster)."""
    key = _fit_key(path, kind, cluster)
    if key not in _FIT_CACHE:
        _FIT_CACHE[key] = fit(read_profiles(path))
    return _FIT_CACHE[key]


def _fit_key(path: str | Path, kind: str, cluster: ClusterSpec | None) -> tuple:
    """(file, modification time, kind, cluster): what a fit on a profile file is cached by."""
    path = Path(path)
    try:
        stamp = path.stat().st_mtime_ns
    except FileNotFoundError:
        raise UserInputError(f"profile file {str(path)!r} not found") from None
    return str(path.resolve()), stamp, kind, cluster.name if cluster else None


def fit_profile_file(kind: str, path: str | Path, cluster: ClusterSpec | None = None) -> FittedProfiles:
    """`fit_profiles` on a CSV, cached in this process by (file, modification time, kind, cluster); the forest
    or the polynomial of a file whose hybrid fit is cached is taken from it (`part_of_hybrid`)."""
    hybrid = _FIT_CACHE.get(_fit_key(path, "hybrid", cluster)) if kind in HYBRID_PARTS else None
    if hybrid is not None:  # the file is not read again: the part needs no rows
        return _FIT_CACHE.setdefault(_fit_key(path, kind, cluster), part_of_hybrid(hybrid, kind))
    return cached_fit_on_file(path, kind, cluster, lambda df: fit_profiles(kind, df, cluster, source_name=str(path)))


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
        preds = [self.fitted.estimators[t].predict(self.fitted.features(df, t, b)) for t, b in zip(TARGETS, bases)]
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

        `segments` (the documents of a packed step of seq_len tokens, costmodel/packed.py): the paper kinds
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
