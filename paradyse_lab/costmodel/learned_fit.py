"""Learned cost models' fit on profiles, and the profile rows it reads.

`fit_profiles(kind, profiles)` fits one regressor per target (whole-model time_s and peak_bytes) on every
row of a profile (`regressors`; the residual kind also reads the analytic model's whole-model prediction of
each row, `analytic_whole`) into `FittedProfiles`, with the configurations, strategy options and peaks the
profile holds; `learned_model.LearnedCostModel` answers `sublayer` / `fixed` from it. `fit_each` fits several
kinds, taking the forest and the polynomial from a hybrid fit (`HYBRID_PARTS`); `fit_profile_file` caches a
fit on a file in this process.

`paradyse_lab.costmodel.factory.build_cost_model(name, ...)` makes any of them, or the analytic model, by
name or from a `.joblib` file written by `FittedProfiles.save`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from paradyse_lab.cluster.presets import PRESETS as CLUSTER_PRESETS
from paradyse_lab.cluster.spec import ClusterSpec
from paradyse_lab.core.model_spec import ModelSpec, get_model
from paradyse_lab.core.strategies import StrategyOption
from paradyse_lab.costmodel.analytic import AnalyticCostModel
from paradyse_lab.costmodel.names import LEARNED_KINDS
from paradyse_lab.costmodel.profiles import profile_sources, read_profiles
from paradyse_lab.costmodel.uniform_plan import uniform_plan_cost
from paradyse_lab.errors import UserInputError, unknown_name

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
    of the columns that identify what it ran (`causal` None when the profile has no such column). The models of
    an equal configuration share their computed costs (the analytic models' store), so an ablation's fits,
    predictions and leave-one-shape-out over the same rows price each (shape, option, length) once."""
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
        from paradyse_lab.costmodel import regressors  # scikit-learn: ~1 s to import, only for a learned model

        X = regressors.profile_features(df)
        if self.kind != "residual":
            return X
        if base is None:
            base = analytic_whole(df, self.cluster)[TARGETS.index(target)]
        return regressors.with_base(X, base)

    def predict_rows(self, df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        """Predicted whole-model (time_s, peak_bytes) of profile-like rows."""
        bases = analytic_whole(df, self.cluster) if self.kind == "residual" else (None, None)
        return tuple(self.predict(t, self.features(df, t, b)) for t, b in zip(TARGETS, bases))

    def predict(self, target: str, X: np.ndarray) -> np.ndarray:
        """The estimator of `target` on the feature matrix X (`features`); a bare random forest (the forest
        kind) through `regressors.forest_predict`, as the other kinds call their forests."""
        from paradyse_lab.costmodel import regressors  # scikit-learn: ~1 s to import, only for a learned model

        return regressors.predict(self.estimators[target], X)

    def save(self, path: str | Path) -> Path:
        """joblib file loadable by `build_cost_model(PATH, ...)`."""
        from paradyse_lab.costmodel import regressors  # scikit-learn: ~1 s to import, only for a learned model

        return regressors.save(self, path)


def fit_profiles(kind: str, profiles: pd.DataFrame, cluster: ClusterSpec | None = None, source_name: str = "",
                 **params) -> FittedProfiles:
    """Fit `kind` (time and peak memory) on validated profile rows (`profiles.read_profiles`)."""
    from paradyse_lab.costmodel import regressors  # scikit-learn: ~1 s to import, only for a learned model

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
