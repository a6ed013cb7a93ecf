"""Learned regressors of whole-model cost, scikit-learn estimators (`fit`, `predict`, `get_params`).

The paper's hybrid (docs/paper.md section 4): a random forest (50 trees, depth 10, seed 42) inside the profiled
range of lengths, and beyond the longest profiled length a numpy polynomial in s of degree 1 to 3 chosen by
AIC, one polynomial per (configuration, strategy) group. Variants: forest only, polynomial only, and
(beyond the paper) `ResidualRegressor`: a base prediction (the analytic model) times a learned correction.

Feature matrix (`profile_features`): `FEATURES` columns, the strategy one-hot plus the model shape
(h, heads, kv_heads, layers), p, batch, recompute, and the sequence length s in the last column. The paper
normalises (h, n, L) and s; trees split on thresholds, so a monotone rescaling changes nothing and the raw
values are used. `ResidualRegressor` takes the base prediction as an extra last column (`with_base`).

Persistence: `save` / `load` (joblib). joblib files are pickles: load only files you trust.
"""

from __future__ import annotations

from pathlib import Path

import joblib
import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, RegressorMixin, clone
from sklearn.ensemble import RandomForestRegressor
from sklearn.utils.validation import check_is_fitted

try:
    from sklearn.utils.validation import validate_data
except ImportError:  # scikit-learn < 1.6
    def validate_data(estimator, X="no_validation", y="no_validation", **kw):
        return estimator._validate_data(X, y, **kw)

from paradyse_lab.core.strategies import CATALOG
from paradyse_lab.costmodel.names import LEARNED_KINDS
from paradyse_lab.errors import UserInputError
from paradyse_lab.files import input_files
from paradyse_lab.files.atomic_write import atomic_open

SHAPE_FEATURES = ("h", "heads", "kv_heads", "layers", "p", "batch", "recompute")
FEATURES = SHAPE_FEATURES + tuple(f"is_{s}" for s in CATALOG) + ("seq_len",)
"""Columns of the feature matrix; the sequence length is last."""
PAPER_FOREST = {"n_estimators": 50, "max_depth": 10, "random_state": 42}
"""docs/paper.md section 4."""


def profile_features(df: pd.DataFrame) -> np.ndarray:
    """[n, len(FEATURES)] float64 features of profile rows (or any frame with those columns). Each column is
    taken out of the frame once, as numpy, and compared there: a cost model predicts a few rows at a time, one
    length after another, and pandas' per-column conversions and comparisons cost more than the prediction."""
    strategy = df["strategy"].to_numpy()
    cols = [np.asarray(df[c].to_numpy(), dtype=float) for c in SHAPE_FEATURES]
    cols += [(strategy == s).astype(float) for s in CATALOG]
    cols.append(np.asarray(df["seq_len"].to_numpy(), dtype=float))
    return np.column_stack(cols)


def forest_predict(forest: RandomForestRegressor, X) -> np.ndarray:
    """`forest.predict(X)` to the bit for a fitted single-output forest: the trees' predictions summed in the
    forest's order, then divided by their number, as scikit-learn's `ForestRegressor.predict` does with one job
    (sklearn/ensemble/_forest.py, `_accumulate_prediction`; a tree's `predict` is `tree_.predict(X)[:, 0]`),
    without its per-tree job dispatch and input checks: ~7 ms a call of 50 trees on a few rows, ~0.5 ms here.
    The cost models call it once per length. Any other forest (several outputs, several jobs) and any input with a
    missing value (which some forests' trees route, others refuse) goes to `forest.predict`."""
    check_is_fitted(forest)
    if forest.n_outputs_ != 1 or forest.n_jobs not in (None, 1) or not np.isfinite(np.asarray(X, dtype=float)).all():
        return forest.predict(X)
    X = validate_data(forest, X, dtype=np.float32, reset=False)  # the forest's own check: shape, column count
    out = np.zeros(X.shape[0], dtype=np.float64)
    for tree in forest.estimators_:
        out += tree.tree_.predict(X)[:, 0]
    out /= len(forest.estimators_)
    return out


def predict(estimator, X) -> np.ndarray:
    """`estimator.predict(X)`, a random forest's through `forest_predict`."""
    if isinstance(estimator, RandomForestRegressor):
        return forest_predict(estimator, X)
    return estimator.predict(X)


def with_base(X: np.ndarray, base: np.ndarray) -> np.ndarray:
    """Features with the base model's prediction appended as the last column (`ResidualRegressor`)."""
    return np.column_stack([X, np.asarray(base, dtype=float)])


def _group_keys(X: np.ndarray, seq_col: int) -> list[tuple]:
    """One hashable key per row: every column except the sequence length."""
    rest = np.delete(X, seq_col % X.shape[1], axis=1)
    return [tuple(row) for row in rest.tolist()]


def aic(rss: float, n: int, k: int) -> float:
    """Akaike's information criterion of a least-squares fit with k coefficients: n ln(RSS/n) + 2k."""
    return n * np.log(max(rss, 1e-300) / n) + 2 * k


def fit_polynomial_aic(s: np.ndarray, y: np.ndarray, min_degree: int = 1, max_degree: int = 3):
    """(degree, numpy Polynomial) of degree min..max (capped by the distinct points) with the lowest AIC.

    The scale of y is factored out of the RSS floor so an exact fit does not produce log(0).
    """
    n_distinct = len(np.unique(s))
    top = min(max_degree, n_distinct - 1)
    if top < 1:
        return 0, np.polynomial.Polynomial([float(np.mean(y))])
    floor = 1e-24 * float(np.sum(y * y)) + 1e-300
    best = None
    for deg in range(min(min_degree, top), top + 1):
        poly = np.polynomial.Polynomial.fit(s, y, deg)
        rss = float(np.sum((poly(s) - y) ** 2)) + floor
        score = aic(rss, len(s), deg + 1)
        if best is None or score < best[0] - 1e-9:
            best = (score, deg, poly)
    return best[1], best[2]


class PolynomialRegressor(RegressorMixin, BaseEstimator):
    """One polynomial in s per group of rows equal in every other column, degree chosen by AIC."""

    def __init__(self, min_degree: int = 1, max_degree: int = 3, seq_col: int = -1):
        self.min_degree = min_degree
        self.max_degree = max_degree
        self.seq_col = seq_col

    def fit(self, X, y):
        X, y = validate_data(self, X, y, y_numeric=True)
        if not 0 <= self.min_degree <= self.max_degree:
            raise ValueError(f"need 0 <= min_degree <= max_degree, got {self.min_degree}, {self.max_degree}")
        s = X[:, self.seq_col]
        keys = _group_keys(X, self.seq_col)
        rows: dict[tuple, list[int]] = {}
        for i, k in enumerate(keys):
            rows.setdefault(k, []).append(i)
        self.polynomials_, self.degrees_, self.max_seq_ = {}, {}, {}
        for k, idx in rows.items():
            deg, poly = fit_polynomial_aic(s[idx], y[idx], self.min_degree, self.max_degree)
            self.polynomials_[k], self.degrees_[k], self.max_seq_[k] = poly, deg, float(s[idx].max())
        return self

    def predict(self, X):
        check_is_fitted(self, "polynomials_")
        X = validate_data(self, X, reset=False)
        s = X[:, self.seq_col]
        out = np.empty(len(X))
        for i, k in enumerate(_group_keys(X, self.seq_col)):
            poly = self.polynomials_.get(k)
            if poly is None:
                raise ValueError(f"row {i}: no profiled group {k} (a polynomial exists only for profiled groups)")
            out[i] = poly(s[i])
        return out


class HybridRegressor(RegressorMixin, BaseEstimator):
    """The paper's hybrid: random forest for s <= the group's longest profiled length, polynomial beyond.

    A row whose group was never profiled gets the forest inside the longest length profiled for any group
    and raises beyond it (no polynomial to extrapolate with).
    """

    def __init__(self, n_estimators: int = 50, max_depth: int | None = 10, random_state=42, min_degree: int = 1,
                 max_degree: int = 3, seq_col: int = -1, n_jobs: int | None = None):
        self.n_estimators = n_estimators
        self.max_depth = max_depth
        self.random_state = random_state
        self.min_degree = min_degree
        self.max_degree = max_degree
        self.seq_col = seq_col
        self.n_jobs = n_jobs

    def fit(self, X, y):
        X, y = validate_data(self, X, y, y_numeric=True)
        self.forest_ = RandomForestRegressor(n_estimators=self.n_estimators, max_depth=self.max_depth,
                                             random_state=self.random_state, n_jobs=self.n_jobs).fit(X, y)
        self.polynomial_ = PolynomialRegressor(self.min_degree, self.max_degree, self.seq_col).fit(X, y)
        return self

    def inside(self, X) -> np.ndarray:
        """Whether each row lies within its group's profiled range (where the forest answers)."""
        check_is_fitted(self, "forest_")
        X = validate_data(self, X, reset=False)
        limits = self.polynomial_.max_seq_
        longest = max(limits.values())
        s = X[:, self.seq_col]
        return np.array([s[i] <= limits.get(k, longest) for i, k in enumerate(_group_keys(X, self.seq_col))])

    def predict(self, X):
        check_is_fitted(self, "forest_")
        X = validate_data(self, X, reset=False)
        inside = self.inside(X)
        out = np.empty(len(X))
        if inside.any():
            out[inside] = forest_predict(self.forest_, X[inside])
        if (~inside).any():
            out[~inside] = self.polynomial_.predict(X[~inside])
        return out


class ResidualRegressor(RegressorMixin, BaseEstimator):
    """y = base x exp(g(features)): a base model's prediction (the last column of X) times a learned ratio.

    g is a random forest on log(y / base) over the other columns, with s as log(s) (a forest holds its last
    ratio beyond the data, so the prediction extrapolates like the base model does); bagging averages
    measurement noise (`min_samples_leaf` > 1 smooths more). X must be >= 0 and y > 0 (times, sizes).
    """

    def __init__(self, n_estimators: int = 50, max_depth: int | None = 10, min_samples_leaf: int = 1,
                 random_state=42, seq_col: int = -2, n_jobs: int | None = None):
        self.n_estimators = n_estimators
        self.max_depth = max_depth
        self.min_samples_leaf = min_samples_leaf
        self.random_state = random_state
        self.seq_col = seq_col
        self.n_jobs = n_jobs

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.positive_only = True  # the base prediction is a time or a size
        tags.target_tags.positive_only = True
        # y = base x correction: on generic data, whose last column is no base prediction, the form fits poorly.
        tags.regressor_tags.poor_score = True
        return tags

    def _split(self, X):
        if (X < 0).any():
            raise ValueError("Negative values in data passed to ResidualRegressor (times and sizes are >= 0)")
        base = np.maximum(X[:, -1], 1e-12)
        Z = X[:, :-1].copy()
        col = self.seq_col % X.shape[1]
        if col < Z.shape[1]:
            Z[:, col] = np.log(np.maximum(Z[:, col], 1e-300))
        return Z, base

    def fit(self, X, y):
        X, y = validate_data(self, X, y, y_numeric=True)
        if X.shape[1] < 2:
            raise ValueError(f"ResidualRegressor needs features plus the base prediction as the last column, got "
                             f"n_features = {X.shape[1]}")
        if not np.all(y > 0):
            raise ValueError("ResidualRegressor needs y > 0")
        Z, base = self._split(X)
        self.forest_ = RandomForestRegressor(n_estimators=self.n_estimators, max_depth=self.max_depth,
                                             min_samples_leaf=self.min_samples_leaf,
                                             random_state=self.random_state, n_jobs=self.n_jobs)
        self.forest_.fit(Z, np.log(y / base))
        return self

    def predict(self, X):
        check_is_fitted(self, "forest_")
        X = validate_data(self, X, reset=False)
        Z, base = self._split(X)
        return base * np.exp(forest_predict(self.forest_, Z))


def make_regressor(kind: str, **params):
    """A fresh estimator of `kind`: hybrid (the paper's), forest (forest only), polynomial, residual."""
    if kind == "hybrid":
        return HybridRegressor(**params)
    if kind == "forest":
        return RandomForestRegressor(**{**PAPER_FOREST, **params})
    if kind == "polynomial":
        return PolynomialRegressor(**params)
    if kind == "residual":
        return ResidualRegressor(**params)
    raise ValueError(f"unknown regressor kind {kind!r}; valid: {', '.join(LEARNED_KINDS)}")


def save(obj, path: str | Path) -> Path:
    """Persist a fitted estimator (or any bundle of them) with joblib, atomically."""
    path = Path(path)
    with atomic_open(path, binary=True) as handle:
        joblib.dump(obj, handle)
    return path


def load(path: str | Path):
    """Read what `save` wrote. A pickle: only load files you trust. A file that is not one (empty, truncated,
    garbage), or one whose classes live in modules this install lacks (saved before a rename), is a one-line
    `UserInputError`."""
    path = Path(path)
    if path.is_dir():
        raise UserInputError(f"cost model file {str(path)!r} is a folder")
    if path.exists():
        input_files.regular_file(path, f"cost model file {str(path)!r}", input_files.MAX_DATA_BYTES)
    try:
        return joblib.load(path)
    except FileNotFoundError:
        raise UserInputError(f"cost model file {str(path)!r} not found") from None
    except ModuleNotFoundError as err:  # the pickle names a class by a module path that is gone
        refit = f"refit it with `paradyse-lab costmodel fit --kind KIND --out {path.name}`"
        if (err.name or "").split(".")[0] == "paradyse_lab":
            raise UserInputError(f"cost model file {str(path)!r} was written by an older version of paradyse-lab "
                                 f"(module {err.name} no longer exists); {refit}") from None
        raise UserInputError(f"cost model file {str(path)!r} needs module {err.name}, which is not installed "
                             f"(written with other library versions); {refit}") from None
    except Exception as err:  # noqa: BLE001 (unpickling a damaged file raises anything)
        raise UserInputError(f"cost model file {str(path)!r} is not a joblib file written by `paradyse-lab costmodel "
                             f"fit` (empty, truncated or damaged: {type(err).__name__})") from None


__all__ = ["FEATURES", "HybridRegressor", "PolynomialRegressor", "LEARNED_KINDS", "ResidualRegressor", "clone",
           "fit_polynomial_aic", "load", "make_regressor", "profile_features", "save", "with_base"]
