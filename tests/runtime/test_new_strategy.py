"""A strategy is added in three places, nothing else: its catalog entry, its cost schedule and its runtime module.

The fixture adds `dummy_ts` (megatron_ts's schedule and kernels under a new name) that way: a runtime module
written as a file into the strategies package's path, a schedule function in `SCHEDULES`, a catalog entry naming
both. The cost model then prices it (as megatron_ts), refuses its `+tiled` option (no tiled-MLP cost given), and
the model runs it on one rank, equal to the single-device reference.
Run: `python -m pytest -q tests/runtime/test_new_strategy.py`.
"""

from __future__ import annotations

import sys
from dataclasses import replace

import pytest
import torch
from torch.testing import assert_close

import paradyse_lab.runtime.strategies as strategies_package
from paradyse_lab.cluster.files import get_cluster
from paradyse_lab.core.model_spec import ModelSpec, get_model
from paradyse_lab.core.strategies import CATALOG, StrategyOption
from paradyse_lab.costmodel.analytic import AnalyticCostModel
from paradyse_lab.costmodel.strategy_work import SCHEDULES
from paradyse_lab.runtime import ParallelGPT, ReferenceGPT
from paradyse_lab.runtime.model.parallel_gpt import STRATEGY_MODULES
from paradyse_lab.runtime.model.reference import init_state_dict

NAME = "dummy_ts"
MODULE = f"paradyse_lab.runtime.strategies.{NAME}"
RUNTIME_MODULE = '''"""A strategy added by a test: megatron_ts's sub-layers under another name."""

from paradyse_lab.runtime.model.sublayer import Impl, TiledImpl
from paradyse_lab.runtime.strategies import megatron_ts

ATTENTION = Impl("dummy_ts", megatron_ts.forward, megatron_ts.backward)
MLP = Impl("dummy_ts", megatron_ts.forward, megatron_ts.backward)
TILED_MLP = TiledImpl("dummy_ts", megatron_ts.tiled_mlp_forward, megatron_ts.tiled_mlp_backward)
'''


@pytest.fixture
def dummy_strategy(tmp_path, monkeypatch):
    (tmp_path / f"{NAME}.py").write_text(RUNTIME_MODULE)  # 1. the runtime module
    monkeypatch.setattr(strategies_package, "__path__", [*strategies_package.__path__, str(tmp_path)])
    ts_schedule = SCHEDULES["megatron_ts"]
    monkeypatch.setitem(SCHEDULES, NAME, lambda s: ts_schedule(s))  # 2. the cost schedule
    monkeypatch.setitem(CATALOG, NAME, replace(CATALOG["megatron_ts"], name=NAME, paper_name="DummyTS",  # 3. catalog
                                               abbreviation="DT", color="#000000", schedule=NAME,
                                               runtime_module=MODULE))
    yield NAME
    sys.modules.pop(MODULE, None)


def test_the_cost_model_prices_a_strategy_added_in_three_places(dummy_strategy):
    cost = AnalyticCostModel(get_model("gpt2"), get_cluster("a100-80gb-x8"), p=4)
    for kind in ("attention", "mlp"):
        assert cost.sublayer(kind, StrategyOption(dummy_strategy), 4096) == cost.sublayer(
            kind, StrategyOption("megatron_ts"), 4096)
    with pytest.raises(ValueError, match="tiled MLP has no cost for the 'dummy_ts' schedule"):
        cost.sublayer("mlp", StrategyOption(dummy_strategy, tiled=True), 4096)


def test_the_runtime_runs_a_strategy_added_in_three_places(dummy_strategy):
    assert dummy_strategy in STRATEGY_MODULES and STRATEGY_MODULES[dummy_strategy].__name__ == MODULE
    cfg = ModelSpec(vocab_size=64, max_positions=16, hidden=24, heads=4, layers=2, name="runtime")
    sd = init_state_dict(cfg, 0)
    ref = ReferenceGPT(cfg)
    ref.load_state_dict(sd)
    ids = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(0))
    assert_close(ParallelGPT(cfg, state_dict=sd)(ids, [dummy_strategy, f"{dummy_strategy}+recompute"]), ref(ids))


def test_without_its_catalog_entry_the_runtime_does_not_know_it():
    assert NAME not in STRATEGY_MODULES
    with pytest.raises(Exception, match="dummy_ts"):
        ParallelGPT(ModelSpec(vocab_size=64, max_positions=16, hidden=24, heads=4, layers=1, name="runtime"))(
            torch.zeros(1, 4, dtype=torch.long), [NAME])
