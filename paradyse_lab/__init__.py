"""paradyse-lab: choose, simulate and run per-layer parallel strategies for transformer training.

The public Python API (docs/api.md) is paradyse_lab/app/api.py, re-exported here on first use (PEP 562), so
that importing the vocabulary modules (`paradyse_lab.model_spec`, ...) loads neither torch nor the solvers:

    import paradyse_lab as pl
    plan = pl.plan_step("llama-tiny", p=2, seq_len=64)
    model = pl.build_model("llama-tiny")
"""

from __future__ import annotations

import importlib

API = ("PlanReport", "plan_step", "memory_breakdown", "build_model", "forward_backward", "train_step", "save", "load",
       "export_hf")
"""Names of paradyse_lab.app.api served as `paradyse_lab.NAME`."""
__all__ = ["__version__", *API]


def _installed_version() -> str:
    """The installed distribution's version, read on first use of `__version__`: importing importlib.metadata
    (~0.1 CPU s) is left to the processes that ask, not paid by every command and spawned rank that imports the
    package."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("paradyse-lab")
    except PackageNotFoundError:  # a source tree that was never installed
        return "0+unknown"


def __getattr__(name: str):
    if name == "__version__":
        globals()["__version__"] = value = _installed_version()
        return value
    if name in API:
        return getattr(importlib.import_module("paradyse_lab.app.api"), name)
    if name == "Plan":  # the API's earlier name of PlanReport (paradyse_lab.plan.Plan is the runtime's plan)
        import warnings

        warnings.warn("paradyse_lab.Plan is renamed paradyse_lab.PlanReport (what plan_step returns)",
                      DeprecationWarning, stacklevel=2)
        return importlib.import_module("paradyse_lab.app.api").PlanReport
    raise AttributeError(f"module 'paradyse_lab' has no attribute {name!r}")
