"""The computed costs the analytic models of one (model, cluster, GPU count) share, so that every analytic model
built for the same configuration in a process (a run's planner and charger, the paper model's memory and timing
models, a profile's row models, each reproduce step's own) prices each sub-layer, length and collective once.

An analytic model's costs are a pure function of its model, cluster and GPU count (`ModelSpec` and `ClusterSpec`
are frozen), so a model built later reads the costs an earlier one computed unchanged. The costs of the
`STORE_CLUSTERS` most recently asked clusters are kept (equal clusters share, compared with `==`: a cluster
spec holds dicts and is not hashable)."""

from __future__ import annotations

from paradyse_lab.cluster.spec import ClusterSpec
from paradyse_lab.core.model_spec import ModelSpec

STORE_CLUSTERS = 4
"""How many clusters' costs are kept (the most recently asked first)."""
_STORE: list[tuple[ClusterSpec, dict]] = []


def shared_costs(model: ModelSpec, cluster: ClusterSpec, p: int) -> tuple[dict, dict]:
    """(sub-layer costs by (kind, option, length, batch, segments), collective seconds by call) of the analytic
    model of `model` on `cluster` at `p` GPUs: the dicts every analytic model of an equal configuration fills."""
    found = next((i for i, (known, _) in enumerate(_STORE) if known is cluster or known == cluster), None)
    if found is None:
        _STORE.insert(0, (cluster, {}))
        del _STORE[STORE_CLUSTERS:]
    else:
        _STORE.insert(0, _STORE.pop(found))
    by_model = _STORE[0][1]
    key = (model, p)
    if key not in by_model:
        by_model[key] = ({}, {})
    return by_model[key]
