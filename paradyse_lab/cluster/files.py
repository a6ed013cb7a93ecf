"""Cluster files and names: what a cluster name means (`--cluster`, a cluster file's `base = NAME`: a preset, a
cluster file bundled in paradyse_lab/data/clusters/, or the path of a TOML file), the same cluster at another GPU
count (`--gpus`), and reading a cluster TOML file (a bundled cluster, `paradyse-lab calibrate`'s measured
`cluster.toml`) into a `ClusterSpec`: its keys, their units and the checks that name a wrong key or value in one
line (`load_cluster_toml`).
"""

from __future__ import annotations

import math

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib
from dataclasses import fields, replace
from pathlib import Path

from paradyse_lab.cluster.presets import PRESETS
from paradyse_lab.cluster.spec import (
    CALIBRATION_PARAMETERS,
    COLLECTIVES,
    GB,
    GIB,
    MAX_GPUS,
    ClusterSpec,
    StrategyCalibration,
)
from paradyse_lab.core.strategies import CATALOG
from paradyse_lab.errors import UserInputError, require_positive_int, unknown_name
from paradyse_lab.files import input_files
from paradyse_lab.files.typed_json import WrittenNumber

_TOML_SCALARS = {
    "name": str, "gpus": int, "gpu_name": str, "memory_gib": float, "peak_tflops": float,
    "hbm_gbps": float, "alpha_base_us": float, "alpha_step_us": float, "source": str,
    "launch_us": float, "runtime_launch_us": float, "collective_sync_us": float, "epilogue_ms": float,
    "comm_overlap": float, "counted_model": str, "state_gbps": float,
    "reserve_gib": float, "reserve_fraction": float, "host_link_gbps": float, "host_memory_gib": float,
    "nodes": int, "gpus_per_node": int, "inter_node_bandwidth_gbps": float, "inter_node_latency_us": float,
}
_TOML_CURVES = ("busbw_size_curve", "gemm_efficiency", "attention_efficiency",
                "attention_efficiency_causal")
TOML_KEYS = (tuple(_TOML_SCALARS) + ("busbw_gbps", "alpha_us") + _TOML_CURVES
             + ("base", "calibration", "provenance", "step_counts"))


def load_cluster_toml(path: str | Path, _bases: tuple = ()) -> ClusterSpec:
    """Read a user cluster from TOML.

    Keys (units in the name): name, gpus, gpu_name, memory_gib, peak_tflops, hbm_gbps, alpha_base_us,
    alpha_step_us, source, a `[busbw_gbps]` table with one entry per collective kind, an optional
    `[alpha_us]` table of per-kind latencies (what `paradyse-lab calibrate` measures), and the curves as
    arrays of [x, fraction] pairs. `base = "PRESET"` (or another TOML file) starts from it and overrides only
    what is given. Every number must be finite; gpus a whole number. `[calibration.STRATEGY]` tables hold a
    `StrategyCalibration` each (`CALIBRATION_PARAMETERS`), as `paradyse-lab costmodel fit-calibration` writes them.
    A `[provenance]` table (host, device, software, date, command of a measured file) is for readers and
    ignored. `reserve_gib` and `reserve_fraction`: the memory kept out of every plan's budget
    (`ClusterSpec.plan_budget_bytes`). `host_link_gbps` (what a pinned copy over one GPU's PCIe link reaches,
    per direction) and `host_memory_gib` (the node's host memory): what activation offload is priced with.
    What `calibrate` also measures for the analytic model's step terms:
    `launch_us`, `state_gbps`, `comm_overlap`, `counted_model` and a `[step_counts]` table of KEY =
    [launches, bytes_fixed, bytes_per_token] (`ClusterSpec.step_counts`).
    """
    path = Path(path)
    if path.resolve() in _bases:
        raise UserInputError(f"cluster file {str(path)!r}: its base chain comes back to itself")
    data = _read_toml(path)
    for key in data:
        if key not in TOML_KEYS:
            raise unknown_name(f"key in {path.name}", key, TOML_KEYS)
    base = None
    if "base" in data:
        if not isinstance(data["base"], str):
            raise UserInputError(f"{path.name}: base must name a preset or a .toml file, got {data['base']!r}")

        base_file = cluster_file(data["base"])
        base = (load_cluster_toml(base_file, _bases + (path.resolve(),)) if base_file is not None
                else get_cluster(data["base"]))
    kw = {f.name: getattr(base, f.name) for f in fields(ClusterSpec)} if base else {}
    kw["name"] = path.stem
    if base is not None:
        kw["base"] = base.device
    scale = {"memory_gib": ("memory_bytes", 2**30), "peak_tflops": ("peak_flops", 1e12),
             "hbm_gbps": ("hbm_bytes_per_s", GB), "alpha_base_us": ("alpha_base_s", 1e-6),
             "alpha_step_us": ("alpha_step_s", 1e-6), "launch_us": ("launch_s", 1e-6),
             "runtime_launch_us": ("runtime_launch_s", 1e-6), "collective_sync_us": ("collective_sync_s", 1e-6),
             "epilogue_ms": ("epilogue_s", 1e-3),
             "state_gbps": ("state_bytes_per_s", GB), "reserve_gib": ("reserve_bytes", GIB),
             "host_link_gbps": ("host_link_bytes_per_s", GB), "host_memory_gib": ("host_memory_bytes", GIB),
             "inter_node_bandwidth_gbps": ("inter_node_bytes_per_s", GB),
             "inter_node_latency_us": ("inter_node_alpha_s", 1e-6)}
    for key, kind in _TOML_SCALARS.items():
        if key not in data:
            continue
        value = data[key]
        if kind is str and not isinstance(value, str):
            raise UserInputError(f"{path.name}: {key} must be a string, got {value!r}")
        if kind is not str and (isinstance(value, bool) or not isinstance(value, (int, float))
                                or not math.isfinite(value)):
            raise UserInputError(f"{path.name}: {key} must be a finite number, got {_toml_text(value)}")
        if kind is int and value != int(value):
            raise UserInputError(f"{path.name}: {key} must be a whole number, got {value!r}")
        if kind is int and value > MAX_GPUS:  # gpus, nodes, gpus_per_node: before nodes x gpus_per_node
            raise UserInputError(f"{path.name}: {key} must be a whole number up to {MAX_GPUS:,}, got {value!r}")
        if key in scale:
            kw[scale[key][0]] = _scaled_toml_value(path.name, key, value, *scale[key])
        else:
            kw[key] = kind(value)
    _resolve_nodes(data, kw, base, path.name)
    _collective_tables(data, kw, path.name)
    for key in _TOML_CURVES:
        if key in data:
            try:
                kw[key] = tuple((_toml_number(x), _toml_number(y)) for x, y in data[key])
            except (TypeError, ValueError):
                raise UserInputError(f"{path.name}: {key} must be an array of [x, fraction] pairs") from None
    if "calibration" in data:
        kw["calibration"] = _calibration(data["calibration"], path.name)
    if "step_counts" in data:
        if not isinstance(data["step_counts"], dict):
            raise UserInputError(f"{path.name}: step_counts must be a table of KEY = [launches, bytes_fixed, "
                                 "bytes_per_token]")
        kw["step_counts"] = {str(k): tuple(v) if isinstance(v, list) else v for k, v in data["step_counts"].items()}
    needed = {"gpus", "gpu_name", "memory_bytes", "peak_flops", "hbm_bytes_per_s", "busbw_bytes_per_s",
              *_TOML_CURVES}
    absent = sorted(n for n in needed if n not in kw)
    if absent:
        raise UserInputError(
            f"{path.name} lacks {', '.join(absent)} (give them, or start from a preset with base = NAME)"
        )
    if (path.parent / "kernels" / "gemm.csv").is_file():  # measured kernel tables beside the file
        kw["kernels"] = str(path.parent / "kernels")
    return ClusterSpec(**kw)


_POSITIVE_TOML = ("memory_gib", "peak_tflops", "hbm_gbps")
"""Cluster TOML keys whose value must be > 0 (the others scaled by `_scaled_toml_value` may be 0)."""


def _scaled_toml_value(name: str, key: str, value, target: str, factor: float):
    """A cluster TOML number `value` of `key` in the unit of its `ClusterSpec` field `target` (`value` x `factor`;
    whole bytes for a memory). Checked here and shown as written, never as the bytes or seconds it would become:
    negative, beyond float range once scaled, or (the keys of `_POSITIVE_TOML`) not above 0 once scaled: -0.0,
    or 1e-300 GiB, which is 0 bytes."""
    if value < 0:
        raise UserInputError(f"{name}: {key} must be a finite number >= 0, got {value!r}")
    scaled = value * factor
    if not math.isfinite(scaled):
        raise UserInputError(f"{name}: {key} must be a finite number in range, got {value!r}")
    if target in ("memory_bytes", "reserve_bytes", "host_memory_bytes"):
        scaled = int(scaled)
    if key in _POSITIVE_TOML and not scaled > 0:
        least = " (at least one byte)" if target == "memory_bytes" and value > 0 else ""
        raise UserInputError(f"{name}: {key} must be a finite number > 0{least}, got {value!r}")
    return scaled


def _toml_text(value) -> str:
    """A TOML value as written: a date or time in its TOML form (1979-05-27), anything else as its repr."""
    return value.isoformat() if hasattr(value, "isoformat") else repr(value)


def _toml_number(value) -> float:
    """A TOML number as a float; a string or a boolean ("0.5", true) is a `TypeError`, not read as one."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"not a number: {value!r}")
    return float(value)


def _resolve_nodes(data: dict, kw: dict, base: ClusterSpec | None, name: str) -> None:
    """`nodes`, `gpus_per_node` and `gpus` of a cluster file into `kw` (`gpus`, `gpus_per_node`).

    `nodes` x `gpus_per_node` GPUs (gpus_per_node from the base when not given); `gpus` alone, at most the base's
    node, is one node of that many GPUs. `gpus` beyond the base's node without node keys is refused: which of
    its GPUs share NVLink is not said, and planning them as one NVLink node would be wrong. A file without a
    base and without node keys is one node of `gpus` GPUs (its busbw are that node's links)."""
    nodes = kw.pop("nodes", None)
    if nodes is not None and nodes < 1:
        raise UserInputError(f"{name}: nodes must be a whole number >= 1, got {nodes!r}")
    if "gpus_per_node" in data and kw["gpus_per_node"] < 1:
        raise UserInputError(f"{name}: gpus_per_node must be a whole number >= 1, got {kw['gpus_per_node']!r}")
    per_node = kw.get("gpus_per_node") or (base.node_gpus if base is not None else kw.get("gpus"))
    if nodes is not None:
        if per_node is None:
            raise UserInputError(f"{name}: nodes needs gpus_per_node (or a base preset)")
        if "gpus" in data and data["gpus"] != nodes * per_node:
            raise UserInputError(f"{name}: gpus = {data['gpus']} but nodes x gpus_per_node = {nodes} x {per_node} "
                                 f"= {nodes * per_node}; give one or make them agree")
        kw["gpus"], kw["gpus_per_node"] = nodes * per_node, per_node
    elif "gpus" in data and "gpus_per_node" not in data:
        if base is not None and data["gpus"] > base.node_gpus:
            raise UserInputError(
                f"{name}: gpus = {data['gpus']} is more than one node of {base.device} ({base.node_gpus} GPUs "
                f"joined by NVLink); say how they are split: nodes = {-(-data['gpus'] // base.node_gpus)} "
                f"(and gpus_per_node, inter_node_bandwidth_gbps, inter_node_latency_us if not the base's)")
        kw["gpus_per_node"] = 0  # one node of `gpus`


def _read_toml(path: Path) -> dict:
    """The TOML table of the cluster file `path` (a one-line `UserInputError` when it cannot be read)."""
    try:
        # a byte-order mark (an editor's) is no part of the TOML
        text = input_files.read_text(path, f"cluster file {str(path)!r}", "utf-8-sig")
        return tomllib.loads(text, parse_float=WrittenNumber)  # errors show the text
    except FileNotFoundError:
        raise UserInputError(f"cluster file {str(path)!r} does not exist") from None
    except IsADirectoryError:
        raise UserInputError(f"cluster file {str(path)!r} is a folder") from None
    except UnicodeDecodeError:
        raise UserInputError(f"cluster file {str(path)!r} is not UTF-8 text") from None
    except OSError as err:
        raise UserInputError(f"cluster file {str(path)!r} cannot be read: {err.strerror}") from None
    except tomllib.TOMLDecodeError as err:
        raise UserInputError(f"cluster file {str(path)!r} is not valid TOML: {err}") from None


def _collective_tables(data: dict, kw: dict, name: str) -> None:
    """`[busbw_gbps]` and `[alpha_us]` of a cluster file into `kw` (`busbw_bytes_per_s`, `alpha_by_op_s`)."""
    if "busbw_gbps" in data:
        if not isinstance(data["busbw_gbps"], dict):
            raise UserInputError(f"{name}: busbw_gbps must be a table of collective = GB/s")
        bw = dict(kw.get("busbw_bytes_per_s", {}))
        for c, v in data["busbw_gbps"].items():
            if c not in COLLECTIVES:
                raise unknown_name(f"collective in {name} busbw_gbps", c, COLLECTIVES)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < math.inf:
                raise UserInputError(f"{name}: busbw_gbps.{c} must be a finite number > 0, got {v!r}")
            bw[c] = float(v) * GB
        kw["busbw_bytes_per_s"] = bw
    if "alpha_us" in data:
        if not isinstance(data["alpha_us"], dict):
            raise UserInputError(f"{name}: alpha_us must be a table of collective = microseconds")
        alphas = {}
        for c, v in data["alpha_us"].items():
            if c not in COLLECTIVES:
                raise unknown_name(f"collective in {name} alpha_us", c, COLLECTIVES)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise UserInputError(f"{name}: alpha_us.{c} must be a number, got {v!r}")
            alphas[c] = float(v) * 1e-6
        kw["alpha_by_op_s"] = alphas


def _calibration(table, where: str) -> dict:
    """`[calibration.STRATEGY]` tables -> {strategy: StrategyCalibration}."""
    if not isinstance(table, dict):
        raise UserInputError(f"{where}: calibration must be a table of [calibration.STRATEGY] tables")
    out = {}
    for strategy, params in table.items():
        if strategy not in CATALOG:
            raise unknown_name(f"strategy in {where} calibration", strategy, CATALOG)
        if not isinstance(params, dict):
            raise UserInputError(f"{where}: calibration.{strategy} must be a table of "
                                 f"{', '.join(CALIBRATION_PARAMETERS)}")
        for key in params:
            if key not in CALIBRATION_PARAMETERS:
                raise unknown_name(f"key in {where} calibration.{strategy}", key, CALIBRATION_PARAMETERS)
        out[strategy] = StrategyCalibration(**params)
    return out


def named_base(path: Path) -> str | None:
    """The preset or file the cluster file `path` starts from (`base = NAME`); None without one, or where the
    file cannot be read as TOML (`load_cluster_toml` says why)."""
    try:
        base = tomllib.loads(input_files.read_text(path, f"cluster file {str(path)!r}")).get("base")
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, UserInputError):
        return None
    return base if isinstance(base, str) else None


CLUSTERS_DIR = Path(__file__).parents[1] / "data" / "clusters"
"""Bundled cluster files (`NAME.toml`), e.g. the paper node calibrated on the authors' measurements."""


def bundled_clusters() -> list[str]:
    """Names of the cluster files shipped in paradyse_lab/data/clusters/."""
    return sorted(p.stem for p in CLUSTERS_DIR.glob("*.toml")) if CLUSTERS_DIR.is_dir() else []


def cluster_file(name_or_path: str) -> Path | None:
    """The TOML file a cluster name (`--cluster`, or a file's `base = ...`) reads: a bundled file by name, or
    a path; None for a preset (or a name that is neither: `get_cluster` refuses it)."""
    if name_or_path in PRESETS:
        return None
    if name_or_path in bundled_clusters():
        return CLUSTERS_DIR / f"{name_or_path}.toml"
    if name_or_path.endswith(".toml") or Path(name_or_path).is_file():
        return Path(name_or_path)
    return None


def base_chain(name_or_path: str) -> list[Path]:
    """Every TOML file the cluster `name_or_path` is read from: its own file, then its `base` file, that file's
    base, ... (empty for a preset). A cluster's numbers depend on every file of the chain, so a result keyed
    on the cluster is keyed on all of them. Stops at a preset, at a file that
    cannot be read as TOML, and where the chain comes back to a file already in it (the loader refuses those)."""
    chain: list[Path] = []
    current = cluster_file(name_or_path)
    while current is not None and current.resolve() not in {c.resolve() for c in chain}:
        chain.append(current)
        base = named_base(current)
        current = cluster_file(base) if base is not None else None
    return chain


def get_cluster(name_or_path: str) -> ClusterSpec:
    """A preset by name, a bundled cluster file by name, or a cluster read from a TOML file."""
    if name_or_path in PRESETS:
        return PRESETS[name_or_path]
    path = cluster_file(name_or_path)
    if path is not None:
        return load_cluster_toml(path)
    raise unknown_name("cluster", name_or_path, list(PRESETS) + bundled_clusters() + ["<path to .toml>"])


MAX_GPUS_FLAG = 4096
"""Largest `--gpus` the commands accept (a cluster TOML's own count is bounded by `MAX_GPUS`)."""


def cluster_with_gpus(cluster: ClusterSpec, gpus: int | None) -> ClusterSpec:
    """`cluster` with `gpus` GPUs (`--gpus N`: another GPU count without writing a TOML file): the same GPU,
    links and calibration, named for its count ('a100-80gb-x8 at 4 GPUs'); its hardware (`device`, whose bundled
    profiles it uses) stays the original's. Up to one node's GPUs: one node of N; beyond: N / gpus_per_node
    nodes joined by the cluster's inter-node link (N must be a whole number of nodes, and the cluster must know
    its inter-node link). Counts `calibrate` measured at the original count (`step_counts`) apply at that
    count only (the analytic model checks `gpus`). None or the cluster's own count: `cluster`."""
    if gpus is None or gpus == cluster.gpus:
        return cluster
    require_positive_int("--gpus", gpus, MAX_GPUS_FLAG)
    per_node = cluster.node_gpus
    if gpus > per_node and (gpus % per_node or not cluster.inter_node_bytes_per_s):
        why = (f"a whole number of its {per_node}-GPU nodes" if gpus % per_node
               else "within one node (it has no inter_node_bandwidth_gbps)")
        raise UserInputError(f"--gpus {gpus}: cluster {cluster.name} takes GPU counts {why}")
    nodes = f", {gpus // per_node} nodes" if gpus > per_node else ""
    return replace(cluster, gpus=gpus, gpus_per_node=per_node if gpus > per_node else 0,
                   name=f"{cluster.name} at {gpus} GPUs{nodes}", base=cluster.device)
