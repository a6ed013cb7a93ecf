"""SearchProblem: the peak and time formulas, the JSON form and its errors, building from the cost model."""

import json

import numpy as np
import pytest

from paradyse_lab.cluster.files import get_cluster
from paradyse_lab.core.layer_graph import LayerGraph
from paradyse_lab.core.model_spec import get_model
from paradyse_lab.core.search_problem import SearchProblem
from paradyse_lab.core.strategies import StrategyOption
from paradyse_lab.core.strategies import options as make_options
from paradyse_lab.costmodel import AnalyticCostModel, uniform_plan_cost
from paradyse_lab.costmodel.lowering import problem_from_cost_model
from paradyse_lab.errors import UserInputError

A100 = get_cluster("a100-80gb-x8")


def small(**kw) -> SearchProblem:
    d = dict(
        options=("a", "b"), time_s=[[1.0, 2.0], [3.0, 5.0], [1.5, 1.0]],
        kept_bytes=[[10, 4], [8, 3], [6, 6]], transient_bytes=[[5, 1], [2, 9], [0, 0]],
        switch_s=[[0.0, 0.25], [0.5, 0.0]], fixed_bytes=100, budget_bytes=130, fixed_transient_bytes=3,
        fixed_time_s=0.125,
    )
    d.update(kw)
    return SearchProblem(**d)


def test_peak_and_time_formulas():
    p = small()
    # plan a, b, a: kept 10 + 3 + 6, transients 5, 9, 0 and the fixed 3: max 9
    assert p.peak_bytes(["a", "b", "a"]) == 100 + 19 + 9
    assert p.peak_bytes([1, 1, 1]) == 100 + 13 + 9
    assert p.peak_bytes(["b", "a", "b"]) == 100 + 4 + 8 + 6 + 3  # the fixed transient is the floor
    # times plus switch a->b (0.25) and b->a (0.5), plus the fixed time
    assert p.time_of(["a", "b", "a"]) == pytest.approx(0.125 + 1 + 5 + 1.5 + 0.25 + 0.5)
    assert p.time_of(["a", "a", "a"]) == pytest.approx(0.125 + 5.5)
    assert p.peak_bytes(["a", "a", "a"]) == 100 + 24 + 5
    assert p.is_feasible(["a", "b", "a"])  # 128 <= 130
    tight = small(budget_bytes=128)
    assert tight.is_feasible(["a", "b", "a"])  # peak == budget fits
    assert not tight.is_feasible(["a", "a", "a"])  # 129 > 128


def test_bad_plans_and_arrays():
    p = small()
    with pytest.raises(UserInputError, match="valid: a, b"):
        p.time_of(["a", "c", "a"])
    with pytest.raises(UserInputError, match="needs 3 entries"):
        p.peak_bytes(["a"])
    with pytest.raises(UserInputError, match="kept_bytes must be a list of 3 rows of 2 integers"):
        small(kept_bytes=[[1, 2]])
    with pytest.raises(UserInputError, match="time_s must hold finite values >= 0"):
        small(time_s=[[1.0, -2.0], [3.0, 5.0], [1.5, 1.0]])
    with pytest.raises(UserInputError, match="zero diagonal"):
        small(switch_s=[[1.0, 0.0], [0.0, 0.0]])
    with pytest.raises(UserInputError, match="distinct"):
        small(options=("a", "a"))
    with pytest.raises(UserInputError, match="edges"):
        small(edges=((0, 0),))


def test_the_constructor_is_the_one_value_check():
    """`from_dict` checks only the document (field names, `layers`); the constructor checks every value, so a
    problem built in Python is held to the JSON form's rules (a fractional byte count is not truncated)."""
    with pytest.raises(UserInputError, match=r"kept_bytes\[1\]\[0\] is 2.5"):
        small(kept_bytes=[[1, 2], [2.5, 3], [4, 5]])
    with pytest.raises(UserInputError, match="options must be a list of strings"):
        small(options="ab")
    with pytest.raises(UserInputError, match="labels must be a list of strings"):
        small(labels=(1, 2, 3))
    d = small().to_dict()
    with pytest.raises(UserInputError, match="time_s must be a list of 4 rows"):
        SearchProblem.from_dict({**d, "layers": 4})


def test_json_round_trip(tmp_path):
    p = small(edges=((0, 2), (1, 2)))
    path = tmp_path / "p.json"
    p.to_json(path)
    q = SearchProblem.from_json(path)
    assert q.edges == ((0, 2), (1, 2)) and not q.is_chain
    for name in ("time_s", "kept_bytes", "transient_bytes", "switch_s"):
        assert np.array_equal(getattr(p, name), getattr(q, name))
    assert (q.fixed_bytes, q.budget_bytes, q.fixed_transient_bytes, q.fixed_time_s) == (100, 130, 3, 0.125)
    assert q.peak_bytes([0, 1, 0]) == p.peak_bytes([0, 1, 0])


def test_json_minimal_form_defaults():
    d = {"layers": 2, "options": ["x", "y"], "time_s": [[1, 2], [3, 4]], "kept_bytes": [[1, 2], [3, 4]],
         "transient_bytes": [[0, 0], [0, 0]], "fixed_bytes": 0, "budget_bytes": 10}
    p = SearchProblem.from_dict(d)
    assert p.is_chain and not p.switch_s.any() and p.fixed_transient_bytes == 0
    assert p.labels == ("L0", "L1")


@pytest.mark.parametrize("change, message", [
    ({"time_s": None}, "missing field 'time_s'"),
    ({"extra": 1}, "unknown field 'extra'"),
    ({"kept_bytes": [[1, 2.5], [3, 4]]}, r"kept_bytes\[0\]\[1\] is 2.5"),
    ({"kept_bytes": [[1, 2], [3]]}, "kept_bytes must be a list of 2 rows of 2 integers"),
    ({"time_s": [[1, "a"], [3, 4]]}, r"time_s\[0\]\[1\]"),
    ({"switch_s": [[0, 1]]}, "switch_s must be a list of 2 rows"),
    ({"budget_bytes": -1}, "budget_bytes must be an integer from 0"),
    ({"layers": 0}, "layers must be a positive integer"),
    ({"options": "xy"}, "options must be a list of strings"),
    ({"edges": [[0]]}, "edges must be a list of"),
])
def test_json_errors_name_the_field(tmp_path, change, message):
    d = {"layers": 2, "options": ["x", "y"], "time_s": [[1, 2], [3, 4]], "kept_bytes": [[1, 2], [3, 4]],
         "transient_bytes": [[0, 0], [0, 0]], "fixed_bytes": 0, "budget_bytes": 10}
    for k, v in change.items():
        if v is None:
            del d[k]
        else:
            d[k] = v
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(d))
    with pytest.raises(UserInputError, match=message) as err:
        SearchProblem.from_json(path)
    assert str(err.value).startswith("bad.json: ")


@pytest.mark.parametrize("change, message", [
    ({"switch_s": None}, "switch_s is null"),
    ({"edges": None}, "edges is null"),
    ({"labels": None}, "labels is null"),
    ({"fixed_transient_bytes": None}, "fixed_transient_bytes is null"),
    ({"fixed_time_s": None}, "fixed_time_s is null"),
    ({"time_s": [[1, 2], [3]]}, r"time_s must be a list of 2 rows of 2 numbers \(row 1 has 1\)"),
    ({"options": "ab", "time_s": [[1, 2]]}, "options must be a list of strings"),
    ({"time_s": [[10**400, 2], [3, 4]]}, r"time_s\[0\]\[0\] is an integer of 401 digits, past float64"),
    ({"switch_s": [[0, 10**400], [0, 0]]}, r"switch_s\[0\]\[1\] is an integer of 401 digits"),
    ({"fixed_time_s": 10**400}, "fixed_time_s must be a finite number >= 0, got an integer of 401 digits"),
])
def test_from_dict_names_the_field(change, message):
    """Null optional fields are refused (not read as their default), row counts are stated from `layers`,
    options are checked first, and integers past float64 where seconds go are errors, not OverflowError."""
    d = {"layers": 2, "options": ["x", "y"], "time_s": [[1, 2], [3, 4]], "kept_bytes": [[1, 2], [3, 4]],
         "transient_bytes": [[0, 0], [0, 0]], "fixed_bytes": 0, "budget_bytes": 10}
    with pytest.raises(UserInputError, match=message):
        SearchProblem.from_dict(json.loads(json.dumps({**d, **change})))


def test_json_file_errors(tmp_path):
    with pytest.raises(UserInputError, match="not found"):
        SearchProblem.from_json(tmp_path / "missing.json")
    (tmp_path / "x.json").write_text("{not json")
    with pytest.raises(UserInputError, match="not valid JSON"):
        SearchProblem.from_json(tmp_path / "x.json")


@pytest.mark.parametrize("model_name, seq", [("gpt", 65536), ("bert", 262144), ("llama3-8b", 8192)])
def test_block_problem_matches_the_uniform_cost_summary(model_name, seq):
    model = get_model(model_name)
    cm = AnalyticCostModel(model, A100)
    p = problem_from_cost_model(LayerGraph(model), cm, seq, recompute=True)
    assert p.num_decisions == model.layers and p.budget_bytes == A100.plan_budget_bytes
    assert p.options == tuple(o.name for o in make_options(recompute=True))
    for name in p.options:
        u = uniform_plan_cost(cm, StrategyOption.parse(name), seq)
        plan = [name] * model.layers
        assert p.peak_bytes(plan) == u.peak_bytes
        assert p.time_of(plan) == pytest.approx(u.total_time_s, rel=1e-12)
    # block = attention + mlp (time, kept), max (transient)
    o = StrategyOption("megatron_ts")
    a, m = cm.sublayer("attention", o, seq), cm.sublayer("mlp", o, seq)
    j = p.option_index("megatron_ts")
    assert p.time_s[0, j] == pytest.approx(a.time_s + m.time_s)
    assert p.kept_bytes[0, j] == a.kept_bytes + m.kept_bytes
    assert p.transient_bytes[0, j] == max(a.transient_bytes, m.transient_bytes)


def test_sublayer_granularity_splits_each_block():
    model = get_model("gpt")
    cm = AnalyticCostModel(model, A100)
    block = problem_from_cost_model(LayerGraph(model, "block"), cm, 65536)
    sub = problem_from_cost_model(LayerGraph(model, "sublayer"), cm, 65536)
    assert sub.num_decisions == 2 * block.num_decisions and sub.is_chain
    assert sub.labels[:2] == ("L0.attn", "L0.mlp")
    assert sub.fixed_bytes == block.fixed_bytes
    for name in block.options:
        assert sub.time_of([name] * 16) == pytest.approx(block.time_of([name] * 8))
        assert sub.peak_bytes([name] * 16) == block.peak_bytes([name] * 8)
    mixed = ["megatron_cz", "metp"] * 8  # attention with one strategy, the MLP with another
    assert sub.peak_bytes(mixed) < block.peak_bytes(["megatron_cz"] * 8)


def test_unsplittable_options_are_dropped_with_the_reason():
    model = get_model("gpt")  # causal: ring strategies need s % 16 == 0 on 8 GPUs
    p = problem_from_cost_model(LayerGraph(model), AnalyticCostModel(model, A100), 8 * 1001)
    assert set(p.dropped) == {"megatron_cz", "metp"}
    assert "divisible by 16" in p.dropped["metp"]
    assert p.options == ("megatron_ts", "ulysses_z")
    with pytest.raises(UserInputError, match="no strategy option can run seq_len 1001"):
        problem_from_cost_model(LayerGraph(model), AnalyticCostModel(model, A100), 1001)


def test_budget_switch_costs_and_embedding():
    model = get_model("llama3-8b")
    cm = AnalyticCostModel(model, A100)
    p = problem_from_cost_model(LayerGraph(model), cm, 8192, budget_bytes=12345,
                                      switch_cost=lambda a, b: 0.5)
    assert p.budget_bytes == 12345
    assert p.switch_s[0, 1] == 0.5 and p.switch_s[1, 1] == 0.0
    fx = cm.fixed(8192)
    assert p.fixed_transient_bytes == fx.transient_bytes > 0 and p.fixed_time_s == fx.time_s
    default = problem_from_cost_model(LayerGraph(model), cm, 8192)
    assert not default.switch_s.any()  # every catalog strategy reads the unified layout


def test_a_strategy_with_another_layout_pays_a_switch(monkeypatch):
    from dataclasses import replace

    from paradyse_lab.core.strategies import CATALOG
    from paradyse_lab.costmodel import CollectiveCall

    model = get_model("gpt")
    cm = AnalyticCostModel(model, A100)
    monkeypatch.setitem(CATALOG, "metp", replace(CATALOG["metp"], layout="head-sharded"))
    p = problem_from_cost_model(LayerGraph(model), cm, 65536)
    i, j, k = p.option_index("metp"), p.option_index("megatron_ts"), p.option_index("ulysses_z")
    act = 65536 // 8 * model.hidden * 2  # [b, s/p, h] in bf16
    expected = 2 * cm.collective_s(CollectiveCall("all_to_all", act, 8))
    assert p.switch_s[i, j] == p.switch_s[j, i] == pytest.approx(expected) and expected > 0
    assert p.switch_s[j, k] == 0.0
    plan = ["metp"] * 4 + ["megatron_ts"] * 4
    assert p.time_of(plan) == pytest.approx(4 * p.time_s[0, i] + 4 * p.time_s[0, j] + expected)
