"""The names of the cost models, kept free of heavy imports (scikit-learn, scipy, joblib) so that building
the command-line parser, which lists them in `--cost-model` help, stays fast.

`build_cost_model` (`factory`) builds each; `make_regressor` (`regressors`) builds each learned kind.
"""

from __future__ import annotations

LEARNED_KINDS = ("hybrid", "forest", "polynomial", "residual")
"""The learned cost models: the paper's hybrid (random forest + AIC polynomial), each half alone, and the
residual correction of the analytic model (`make_regressor` builds each)."""

COST_MODEL_NAMES = ("auto", "analytic", "paper", "calibrated", "replay") + LEARNED_KINDS
"""Names `--cost-model`, `--plan-cost-model` and `--truth-cost-model` accept (or a .joblib path). `auto`: the
replay model where the cluster has kernel tables (bundled, or measured beside its cluster file), else the
analytic model (`factory.resolve_cost_model`)."""
