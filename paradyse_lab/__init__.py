"""paradyse-lab: choose, simulate and run per-layer parallel strategies for transformer training.

The public Python API (docs/api.md) is the application's `api` module, re-exported here on first use (PEP 562), so
that importing the vocabulary modules (`paradyse_lab.core.model_spec`, ...) loads neither torch nor the solvers:

    import paradyse_lab as pl
    plan = pl.plan_step("llama-tiny", p=2, seq_len=64)
    model = pl.build_model("llama-tiny")

The runtime, the solvers, the simulator and the figures are subpackages (`paradyse_lab.runtime`, ...) whose
folders sit beside this one at the checkout's root. An installed copy finds them by itself: a wheel holds them
inside paradyse_lab/, and setuptools' editable finder maps each subpackage named in pyproject.toml's
`package-dir` to its folder. A source checkout used without installing it (pytest and `python -m paradyse_lab`
from the root, the root on sys.path) finds them through `_CheckoutSubpackages` below.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

API = ("PlanReport", "plan_step", "memory_breakdown", "build_model", "forward_backward", "train_step", "save", "load",
       "export_hf")
"""Names of paradyse_lab.app.api served as `paradyse_lab.NAME`."""
__all__ = ["__version__", *API]


SUBPACKAGES = ("runtime", "solvers", "simulator", "figures")
"""The subpackages whose folders sit at the checkout's root, beside this package's own folder."""


class _CheckoutSubpackages:
    """A meta path finder for a source checkout: `paradyse_lab.runtime` is the folder `runtime/` beside
    `paradyse_lab/` (the layout pyproject.toml's `package-dir` installs as one package). It answers only for those
    four names; their submodules are found through the subpackage's `__path__` as usual."""

    def __init__(self, root: Path):
        self.root = root

    def find_spec(self, fullname: str, path=None, target=None):
        parent, _, name = fullname.rpartition(".")
        if parent != __name__ or name not in SUBPACKAGES:
            return None
        init = self.root / name / "__init__.py"
        return importlib.util.spec_from_file_location(fullname, init, submodule_search_locations=[str(init.parent)])


def _serve_checkout() -> None:
    """Put the finder first on sys.meta_path when this package is a source checkout's (a pyproject.toml beside
    it, its subpackages not inside it), so that the checkout's folders win over any other installed copy."""
    here = Path(__file__).resolve().parent
    root = here.parent
    if (root / "pyproject.toml").is_file() and not (here / "runtime").is_dir() and (root / "runtime").is_dir():
        if not any(isinstance(f, _CheckoutSubpackages) and f.root == root for f in sys.meta_path):
            sys.meta_path.insert(0, _CheckoutSubpackages(root))


_serve_checkout()


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
    if name == "Plan":  # the API's earlier name of PlanReport (paradyse_lab.core.plan.Plan is the runtime's plan)
        import warnings

        warnings.warn("paradyse_lab.Plan is renamed paradyse_lab.PlanReport (what plan_step returns)",
                      DeprecationWarning, stacklevel=2)
        return importlib.import_module("paradyse_lab.app.api").PlanReport
    raise AttributeError(f"module 'paradyse_lab' has no attribute {name!r}")
