"""Cost models and search problems shared by the runs of one experiment.

Every run of Figure 2, Table 5 or the packing experiment builds its truth and planning cost models and the
search problem of each length it meets; the runs of one experiment meet the same lengths with the same
models (thirteen policies per panel on one workload), so inside `sharing()` a cost model is built once per
(name, model, cluster, profile) and a problem once per (cost model, granularity, step, batch, budget,
options; a head-and-loss option's wrapper counts as its inner model with that option), and every run reuses
them. Outside `sharing()` nothing is kept: a lone `simulate` builds its own,
and a cost model changed between two experiments is never served stale. A shared problem is never
modified (runs only read it), so sharing changes no number of any run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from paradyse_lab.costmodel.head_loss import HeadLossCostModel
from paradyse_lab.costmodel.packed import step_problem

_stores: list[dict] = []


def new_store() -> dict:
    """An empty store of shared cost models and problems (`sharing`)."""
    return {"models": {}, "problems": {}}


@contextmanager
def sharing(store: dict | None = None) -> Iterator[None]:
    """Share cost models and problems between the runs inside this block (nested blocks share the outer one's).
    `store`: a `new_store()` kept by the caller, so that the runs of several blocks, one after another, share
    what the earlier blocks built (a block without one starts empty)."""
    if _stores:
        yield
        return
    _stores.append(new_store() if store is None else store)
    try:
        yield
    finally:
        _stores.pop()


def _file_stamp(value) -> tuple:
    """(size, mtime) of a file a cost model is read from (a cluster TOML, a profile, a .joblib), else ()."""
    try:
        if isinstance(value, str) and value and Path(value).is_file():
            stat = Path(value).stat()
            return (stat.st_size, stat.st_mtime_ns)
    except OSError:  # not a name a file can have (a spec's text)
        pass
    return ()


def cost_model(build: Callable, name: str, model_name: str, cluster: str, profiles: str | None):
    """`build()`, or inside `sharing()` the model built before for the same names and unchanged files."""
    if not _stores:
        return build()
    key = (name, model_name, cluster, profiles, _file_stamp(name), _file_stamp(cluster), _file_stamp(profiles))
    models = _stores[-1]["models"]
    if key not in models:
        models[key] = build()
    return models[key]


def _source(model) -> tuple:
    """(the cost model whose numbers a problem holds, the head option): a `HeadLossCostModel` is its inner model
    with a head option, the same problem whichever run's wrapper asks (each policy and charger wraps its own)."""
    if isinstance(model, HeadLossCostModel):
        return model.inner, model.head
    return model, ""


def problem(graph, model, step, batch: int, budget_bytes: int | None, options):
    """`step_problem(...)`, or inside `sharing()` the problem built before for the same arguments."""
    if not _stores:
        return step_problem(graph, model, step, batch, budget_bytes, options)
    source, head = _source(model)
    key = (id(source), head, graph.granularity, graph.num_decisions, step, batch, budget_bytes,
           tuple(o.name for o in options))
    problems = _stores[-1]["problems"]
    hit = problems.get(key)
    if hit is None or hit[0] is not source:  # the entry holds its cost model: an id is never reused while kept
        hit = (source, step_problem(graph, model, step, batch, budget_bytes, options))
        problems[key] = hit
    return hit[1]
