"""Analytic models of one (model, cluster, p) share their computed costs (`shared_costs`): a model built after
another reads the costs the first computed, and they are the costs a model with nothing shared computes."""

from dataclasses import replace

from paradyse_lab.cluster.presets import PRESETS as CLUSTERS
from paradyse_lab.core.model_spec import PRESETS
from paradyse_lab.core.strategies import USABLE, StrategyOption
from paradyse_lab.costmodel import AnalyticCostModel, analytic_store, uniform_plan_cost

A100 = CLUSTERS["a100-80gb-x8"]
OPTIONS = [StrategyOption(s, recompute) for s in USABLE for recompute in (False, True)]
LENGTHS = (4096, 65536)


def _costs(cm: AnalyticCostModel) -> list:
    return [(cm.sublayer(kind, o, n), uniform_plan_cost(cm, o, n).total_time_s, cm.fixed(n))
            for o in OPTIONS for n in LENGTHS for kind in ("attention", "mlp") if cm.feasible(o, n)]


def test_equal_configurations_share_costs_that_are_the_unshared_ones(monkeypatch):
    monkeypatch.setattr(analytic_store, "_STORE", [])
    gpt = PRESETS["gpt"]
    first = AnalyticCostModel(gpt, A100)
    shared = _costs(first)
    again = AnalyticCostModel(replace(gpt), replace(A100))  # equal specs, other objects: the same costs, kept
    assert again._cache is first._cache and again._calls is first._calls
    cached = _costs(again)
    monkeypatch.setattr(analytic_store, "_STORE", [])  # nothing shared: each cost computed anew
    alone = AnalyticCostModel(gpt, A100)
    assert alone._cache is not first._cache and not alone._cache
    assert _costs(alone) == shared == cached and len(shared) > 20


def test_other_configurations_keep_costs_apart_and_the_store_is_bounded(monkeypatch):
    monkeypatch.setattr(analytic_store, "_STORE", [])
    gpt = PRESETS["gpt"]
    base = AnalyticCostModel(gpt, A100)
    others = [AnalyticCostModel(gpt, A100, p=4), AnalyticCostModel(replace(gpt, causal=not gpt.causal), A100),
              AnalyticCostModel(gpt, replace(A100, hbm_bytes_per_s=A100.hbm_bytes_per_s / 2))]
    assert all(o._cache is not base._cache for o in others)
    option = StrategyOption("megatron_ts")
    slow = others[-1].sublayer("attention", option, 65536)
    assert slow.time_s > base.sublayer("attention", option, 65536).time_s
    for i in range(analytic_store.STORE_CLUSTERS + 1):  # the most recently asked clusters alone are kept
        AnalyticCostModel(gpt, replace(A100, hbm_bytes_per_s=A100.hbm_bytes_per_s * (3 + i)))
    assert len(analytic_store._STORE) == analytic_store.STORE_CLUSTERS
    assert AnalyticCostModel(gpt, A100)._cache is not base._cache


def test_the_paper_models_kept_sublayer_costs_are_the_ones_it_computes(monkeypatch):
    """`PaperCostModel.sublayer` keeps each cost it computed (a step's problems for each head option ask the same
    ones): asked again, and asked of a new paper model with no analytic costs shared, the same costs."""
    from paradyse_lab.costmodel.paper import PaperCostModel

    monkeypatch.setattr(analytic_store, "_STORE", [])
    paper = PaperCostModel(PRESETS["llama"], A100)
    asked = [(kind, o, n) for o in OPTIONS for n in LENGTHS for kind in ("attention", "mlp") if paper.feasible(o, n)]
    first = [paper.sublayer(*a) for a in asked]
    assert len(paper._sublayers) == len(asked) > 10
    again = [paper.sublayer(*a) for a in asked]
    assert all(x is y for x, y in zip(first, again))
    monkeypatch.setattr(analytic_store, "_STORE", [])
    fresh = PaperCostModel(PRESETS["llama"], A100)
    assert [fresh.sublayer(*a) for a in asked] == first
