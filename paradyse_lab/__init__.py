"""paradyse-lab: choose, simulate and run per-layer parallel strategies for transformer training.

The public Python API (docs/api.md) is paradyse_lab/app/api.py, re-exported here on first use (PEP 562), so
that importing the vocabulary modules (`paradyse_lab.model_spec`, ...) loads neither torch nor the solvers:

    import paradyse_lab as pl
    plan = pl.plan_step("llama-tiny", p=2, seq_len=64)
    model = pl.build_model("llama-tiny")
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("paradyse-lab")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"

API = ("PlanReport", "plan_step", "memory_breakdown", "build_model", "forward_backward", "train_step", "save", "load",
       "export_hf")
"""Names of paradyse_lab.app.api served as `paradyse_lab.NAME`."""
__all__ = ["__version__", *API]


def __getattr__(name: str):
    if name in API:
        return getattr(importlib.import_module("paradyse_lab.app.api"), name)
    if name == "Plan":  # the API's earlier name of PlanReport (paradyse_lab.plan.Plan is the runtime's plan)
        import warnings

        warnings.warn("paradyse_lab.Plan is renamed paradyse_lab.PlanReport (what plan_step returns)",
                      DeprecationWarning, stacklevel=2)
        return importlib.import_module("paradyse_lab.app.api").PlanReport
    raise AttributeError(f"module 'paradyse_lab' has no attribute {name!r}")
