"""Problem generators for the solver benchmark and the tests: random and model-derived `SearchProblem`s.

Random: O options on a time/memory trade-off (option j about 1 + 0.6 j/(O-1) times slower and keeping
1 - 0.85 j/(O-1) times the bytes of option 0, each scaled by U(0.5, 1.5) / U(0.7, 1.3)), transient bytes
U(0.3, 3) GB per option, every cell of time, kept and transient multiplied by U(0.9, 1.1) per decision;
with `switch`, switch costs U(0, 0.02) s (a layer takes ~1 s). Model-derived: a preset with L layers
(`ModelSpec.with_layers`) under the analytic cost model on the default cluster. Both get a budget a
fraction U(0.2, 0.8) of the way from the least possible peak to the peak of the per-decision fastest plan,
so the memory constraint binds and a plan fits.
"""

from __future__ import annotations

import numpy as np

from paradyse_lab.cluster.files import get_cluster
from paradyse_lab.cluster.presets import DEFAULT_CLUSTER
from paradyse_lab.core.layer_graph import LayerGraph
from paradyse_lab.core.model_spec import get_model
from paradyse_lab.core.search_problem import SearchProblem
from paradyse_lab.costmodel import AnalyticCostModel
from paradyse_lab.costmodel.lowering import problem_from_cost_model
from paradyse_lab.solvers.base import min_peak_plan


def with_tight_budget(problem: SearchProblem, rng: np.random.Generator) -> SearchProblem:
    """The same problem with a budget between its least peak and the fastest plan's peak."""
    _, least = min_peak_plan(problem)
    fastest = problem.peak_bytes(np.argmin(problem.time_s, axis=1))
    budget = least + int(rng.uniform(0.2, 0.8) * max(fastest - least, 0))
    d = problem.to_dict()
    d["budget_bytes"] = budget
    return SearchProblem.from_dict(d)


def random_problem(rng: np.random.Generator, layers: int, options: int, switch: bool = False,
                   noise: float = 0.1) -> SearchProblem:
    """A random trade-off problem (module docstring)."""
    j = np.arange(options) / max(options - 1, 1)
    t0 = (1 + 0.6 * j * rng.uniform(0.5, 1.5, options))
    k0 = (1 - 0.85 * j) * 1e9 * rng.uniform(0.7, 1.3, options)
    r0 = rng.uniform(0.3, 3, options) * 1e9

    def cells(base):
        return base[None, :] * rng.uniform(1 - noise, 1 + noise, (layers, options))

    sw = rng.uniform(0, 0.02, (options, options)) if switch else np.zeros((options, options))
    np.fill_diagonal(sw, 0.0)
    problem = SearchProblem(
        options=tuple(f"o{i}" for i in range(options)), time_s=cells(t0),
        kept_bytes=cells(k0).astype(np.int64), transient_bytes=cells(r0).astype(np.int64), switch_s=sw,
        fixed_bytes=10**10, budget_bytes=0,
    )
    return with_tight_budget(problem, rng)


def model_problem(rng: np.random.Generator, model: str, layers: int, seq_len: int, recompute: bool,
                  granularity: str = "block") -> SearchProblem:
    """A preset model with `layers` layers at `seq_len` under the analytic model, with a tight budget."""
    spec = get_model(model).with_layers(layers)
    cm = AnalyticCostModel(spec, get_cluster(DEFAULT_CLUSTER))
    problem = problem_from_cost_model(LayerGraph(spec, granularity), cm, seq_len, recompute=recompute,
                                            budget_bytes=2**62)
    return with_tight_budget(problem, rng)
