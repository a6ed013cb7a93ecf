"""What a cluster name (`--cluster`, a cluster file's `base = NAME`) means: a preset (paradyse_lab/cluster_presets.py),
a cluster file bundled in paradyse_lab/data/clusters/, or the path of a TOML file (paradyse_lab/cluster_toml.py);
and the same cluster at another GPU count (`--gpus`).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from paradyse_lab.cluster_presets import PRESETS
from paradyse_lab.cluster_spec import ClusterSpec
from paradyse_lab.cluster_toml import load_cluster_toml, named_base
from paradyse_lab.errors import UserInputError, require_positive_int, unknown_name

CLUSTERS_DIR = Path(__file__).parent / "data" / "clusters"
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
    on the cluster is keyed on all of them (paradyse_lab/result_key.py). Stops at a preset, at a file that
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
