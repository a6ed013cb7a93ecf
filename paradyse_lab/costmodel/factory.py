"""Every cost model by name: `build_cost_model(name, model, cluster, p, profiles)`.

Names (`COST_MODEL_NAMES`, what `--cost-model`, `--plan-cost-model` and `--truth-cost-model` accept, or a
`.joblib` file written by `FittedProfiles.save`): `analytic`, `paper` (the authors' measured
A100 times), `calibrated` (the analytic model calibrated on a profile), `replay`
(the runtime's traced operations priced on the machine's kernel tables), `auto` (replay where
the cluster has kernel tables, else analytic: `resolve_cost_model`) and the learned kinds `LEARNED_KINDS`
(scikit-learn regressors fitted on a profile).

Example: `paradyse-lab cost --model gpt --seq 4K --cost-model calibrated`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from paradyse_lab.cluster.presets import PRESETS as CLUSTER_PRESETS
from paradyse_lab.cluster.spec import ClusterSpec
from paradyse_lab.core.model_spec import ModelSpec
from paradyse_lab.costmodel.analytic import AnalyticCostModel
from paradyse_lab.costmodel.names import COST_MODEL_NAMES, LEARNED_KINDS
from paradyse_lab.costmodel.paper import PaperCostModel
from paradyse_lab.costmodel.paper_measurements import PAPER_DEVICE
from paradyse_lab.costmodel.replay.model import ReplayCostModel, trace_source_installed
from paradyse_lab.costmodel.replay.tables import is_derived, replay_inputs, tables_folder
from paradyse_lab.errors import UserInputError, unknown_name

if TYPE_CHECKING:  # pandas (a second of start-up) only where a profile is read: never for `analytic` or `paper`
    import pandas as pd

__all__ = ["COST_MODEL_NAMES", "LEARNED_KINDS", "build_cost_model", "calibrate_on_file", "calibration_profile",
           "check_profile_device", "cost_model_label", "needs_profile", "priced_by", "resolve_cost_model"]


def resolve_cost_model(name: str, cluster: ClusterSpec) -> str:
    """The cost model `name` stands for on `cluster`: `auto` is `replay` where the cluster has measured kernel
    tables and host costs (and the runtime's tracer is installed), else `analytic`; any other name itself."""
    if name != "auto":
        return name
    return "analytic" if _no_auto_replay(cluster) else "replay"


def _no_auto_replay(cluster: ClusterSpec) -> str | None:
    """Why `auto` does not price `cluster` with the replay model, or None when it does. Tables derived from
    specifications (the bundled A100 ones) price only when asked for by name."""
    if not trace_source_installed():
        return "the runtime's tracer is not installed"
    folder = tables_folder(cluster)
    if folder is not None and is_derived(folder):
        return (f"the {folder.name} kernel tables are spec-derived, not measured; --cost-model replay prices "
                "with them")
    found = replay_inputs(cluster)
    return found if isinstance(found, str) else None


def needs_profile(name: str, cluster: ClusterSpec) -> bool:
    """Whether `build_cost_model(name, ...)` fits something on a profile."""
    return name in LEARNED_KINDS or (name == "calibrated" and not cluster.calibration)


def calibration_profile(device: str) -> Path:
    """What `calibrated` fits on by default: a bundled measured profile of the device, else, on the paper's
    node, the authors' measurements; never the synthetic profile (the analytic model fitted to itself)."""
    from paradyse_lab.costmodel.profiles import PAPER_PROFILE, default_profile  # pandas: ~0.3 s, only to fit

    path = default_profile(device)
    if path.name.startswith("measured"):
        return path
    if device == PAPER_DEVICE:
        return PAPER_PROFILE
    raise UserInputError(f"no measured profile of {device!r} to calibrate on (the bundled one is synthetic, the "
                         "analytic model itself); pass --profiles FILE")


def check_profile_device(df: pd.DataFrame, cluster: ClusterSpec, path) -> None:
    """Refuse to fit `cluster` on rows taken on another preset device."""
    devices = set(df["device"]) & set(CLUSTER_PRESETS)
    if devices and devices != {cluster.device}:
        raise UserInputError(f"{Path(path).name}: rows taken on {', '.join(sorted(devices))}, not on "
                             f"{cluster.device}; fit it with --cluster {sorted(devices)[0]}")


def calibrate_on_file(path: Path, cluster: ClusterSpec) -> ClusterSpec:
    """`cluster` calibrated on the profile at `path` (cached per file, modification time and cluster)."""
    from paradyse_lab.costmodel.calibration import calibrated_cluster, fit_calibration  # pandas, scipy: to fit
    from paradyse_lab.costmodel.learned_fit import cached_fit_on_file  # pandas: ~0.3 s, only to fit
    from paradyse_lab.costmodel.profiles import profile_sources  # pandas: ~0.3 s, only to fit

    def fit(df: pd.DataFrame) -> ClusterSpec:
        check_profile_device(df, cluster, path)
        return calibrated_cluster(cluster, fit_calibration(df, cluster),
                                  source=f"calibrated on {path.name} (source={profile_sources(df)})")

    return cached_fit_on_file(path, "calibrated", cluster, fit)


def build_cost_model(name: str, model: ModelSpec, cluster: ClusterSpec, p: int | None = None,
                     profiles: str | Path | None = None):
    """A cost model by name (`COST_MODEL_NAMES`) or from a .joblib file (`FittedProfiles.save`):

    - `auto`: `replay` where the cluster has kernel tables, else `analytic` (`resolve_cost_model`);
    - `analytic`: the analytic model of `cluster` (calibrated if the cluster file carries a calibration);
    - `replay`: the runtime's traced operations priced on the cluster's kernel tables;
    - `paper`: the authors' measured A100 times, memory analytic;
    - `calibrated`: the analytic model with the cluster's calibration, or, when the cluster has none, one
      fitted on `profiles` (default: the device's bundled profile);
    - the learned kinds, fitted on `profiles` (default: the device's bundled profile).

    learned_fit and learned_model (scikit-learn, scipy, joblib) are imported only when a learned model is asked
    for.
    """
    asked, name = name, resolve_cost_model(name, cluster)
    if name == "analytic":
        cm = AnalyticCostModel(model, cluster, p)
        if asked == "auto":  # labelled with why the replay model does not price this cluster
            cm.label = f"{cm.label} (auto: {_no_auto_replay(cluster)})"
        return cm
    if name == "replay":
        found = replay_inputs(cluster)
        if isinstance(found, str):
            raise UserInputError(f"cost model 'replay' on {cluster.name}: {found}; use --cost-model analytic, or "
                                 "measure tables with `calibrate --out DIR` and pass --cluster DIR/cluster.toml")
        return ReplayCostModel(model, cluster, p, *found)
    if name == "paper":
        return PaperCostModel(model, cluster, p)
    if name == "calibrated":
        if not cluster.calibration:
            cluster = calibrate_on_file(Path(profiles) if profiles else calibration_profile(cluster.device), cluster)
        return AnalyticCostModel(model, cluster, p)
    if name in LEARNED_KINDS or name.endswith(".joblib"):
        return _learned_cost_model(name, model, cluster, p, profiles)
    raise unknown_name("cost model", name, list(COST_MODEL_NAMES) + ["<file.joblib>"])


def _learned_cost_model(name: str, model: ModelSpec, cluster: ClusterSpec, p: int | None,
                        profiles: str | Path | None):
    """A learned kind fitted on `profiles`, or the fitted model saved in the .joblib file `name`."""
    from paradyse_lab.costmodel import regressors  # scikit-learn, joblib: ~1 s, only for a learned model
    from paradyse_lab.costmodel.learned_fit import FittedProfiles, fit_profile_file  # pandas: a learned model
    from paradyse_lab.costmodel.learned_model import LearnedCostModel  # pandas: only for a learned model
    from paradyse_lab.costmodel.profiles import default_profile  # pandas: ~0.3 s, only for a learned model

    if name in LEARNED_KINDS:
        path = Path(profiles) if profiles else default_profile(cluster.device)
        return LearnedCostModel(fit_profile_file(name, path, cluster), model, cluster, p)
    if not Path(name).exists():
        raise UserInputError(f"cost model file {name!r} not found")
    fitted = regressors.load(name)
    if not isinstance(fitted, FittedProfiles):
        raise UserInputError(f"{name}: not a fitted cost model (FittedProfiles)")
    return LearnedCostModel(fitted, model, cluster, p)


def priced_by(cm) -> dict[str, str]:
    """Which model priced each kind of number `cm` answers: the layers' time, memory, and the embedding and head
    (the replay and paper models price the layers' time only; the rest is the analytic model's)."""
    name = getattr(cm, "name", type(cm).__name__)
    if name in ("replay", "paper"):
        return {"layer_time": name, "memory": "analytic", "embedding_and_head": "analytic"}
    return dict.fromkeys(("layer_time", "memory", "embedding_and_head"), name)


def cost_model_label(cm) -> str:
    """How results name a cost model: `analytic`, `replay (bundled h100-80gb-x8 tables; ...)`, or
    `hybrid (profile source=analytic)`."""
    return getattr(cm, "label", getattr(cm, "name", type(cm).__name__))
