"""The public API (`import paradyse_lab`, paradyse_lab/app/api.py, docs/api.md) on one process; its two-rank
example is tests/runtime/weights_cases.py's `api-example`."""

from __future__ import annotations

from importlib.metadata import version

import pytest
import torch

import paradyse_lab as pl
from paradyse_lab.errors import UserInputError


def test_version_and_names():
    assert pl.__version__ == version("paradyse-lab")
    assert all(callable(getattr(pl, name)) for name in pl.API)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        pl.nope  # noqa: B018


def test_plan_step_predicts_time_and_memory_parts():
    plan = pl.plan_step("gpt2-tiny", p=2, seq_len=1024, solver="dp", recompute=True)
    assert type(plan) is pl.StepAnswer and type(plan).__name__ == "StepAnswer"
    with pytest.deprecated_call(match="renamed paradyse_lab.StepAnswer"):
        assert pl.Plan is pl.PlanReport  # its earlier name, for scripts written against it
    assert len(plan.strategies) == 4 and plan.feasible and plan.predicted_time_s > 0
    parts = plan.memory
    assert parts["peak"] == parts["fixed"] + parts["kept_activations"] + parts["transient"] <= parts["budget"]
    tight = pl.plan_step("gpt2-tiny", p=2, seq_len=1024, solver="dp", recompute=True,
                         budget_gib=(parts["peak"] - 1) / 2**30)  # the unconstrained plan no longer fits
    assert tight.memory["peak"] < parts["peak"] and tight.predicted_time_s >= plan.predicted_time_s
    sub = pl.plan_step("gpt2-tiny", p=2, documents=[300, 200, 101], granularity="sublayer", solver="static:metp")
    assert sub.strategies == ("metp",) * 8 and sub.seq_len == 604 and sub.documents == (300, 200, 101)
    with pytest.raises(UserInputError, match="exactly one of seq_len"):
        pl.plan_step("gpt2-tiny", p=2, seq_len=64, documents=[32, 32])


class CappedCostModel:
    """The analytic model whose `budget_bytes` caps a plan's memory at `cap` (what a learned model of the paper's
    kind does with its OOM threshold, paradyse_lab/costmodel/learned_model.py)."""

    def __init__(self, inner, cap: int):
        self.inner, self.cap = inner, cap

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def budget_bytes(self, budget: int) -> int:
        return min(int(budget), self.cap)


def test_plan_step_applies_the_cost_models_budget_cap(monkeypatch):
    """plan_step plans under the budget the cost model allows (`CostModel.budget_bytes`), as `train`, `simulate`
    and `experiment` do (simulator/planner.py): it used the whole budget, so a plan could need more memory than a
    learned model's OOM threshold."""
    from paradyse_lab.cluster.files import get_cluster
    from paradyse_lab.core.model_spec import get_model
    from paradyse_lab.simulator import planner as planner_module
    from paradyse_lab.simulator.planner import build_planner

    free = pl.plan_step("gpt2-tiny", p=2, seq_len=1024, solver="dp", recompute=True)
    cap = free.memory["peak"] - 1  # the unconstrained plan no longer fits under the cap
    real = planner_module.build_cost_model  # the name every planner builds its cost model with
    monkeypatch.setattr(planner_module, "build_cost_model",
                        lambda _name, *rest: CappedCostModel(real("analytic", *rest), cap))
    capped = pl.plan_step("gpt2-tiny", p=2, seq_len=1024, solver="dp", recompute=True, cost_model="hybrid")
    assert capped.memory["budget"] == cap and capped.feasible and capped.memory["peak"] <= cap < free.memory["peak"]
    planner = build_planner("dynamic:dp", get_model("gpt2-tiny"), get_cluster("a100-80gb-x8"), p=2,
                            cost_model="hybrid", recompute=True)
    assert planner.policy.budget_bytes == capped.memory["budget"]  # the one rule of every planner


def test_train_save_load_in_one_process(tmp_path):
    """Without a process group: two steps, a checkpoint, and a fresh model and optimizer that load it continue
    exactly as the original does."""
    plan = pl.plan_step("gpt2-tiny", p=1, seq_len=32, solver="static:megatron_ts")
    tokens = torch.randint(0, 512, (2, 32), generator=torch.Generator().manual_seed(0))
    runs = []
    for seed in (0, 5):
        model = pl.build_model("gpt2-tiny", seed=seed)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        if seed == 0:
            losses = [pl.train_step(model, plan, tokens, opt) for _ in range(2)]
            assert pl.save(tmp_path / "ck", 2, model, opt).name == "step-000002"
        else:
            assert pl.load(tmp_path / "ck", model, opt) == 2
        runs.append(pl.train_step(model, plan, tokens, opt))
    assert losses[1] < losses[0] and runs[0] == runs[1]


def test_save_refuses_an_optimizer_state_it_cannot_keep(tmp_path):
    model = pl.build_model("gpt2-tiny")
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    pl.train_step(model, ["megatron_ts"] * 4, torch.randint(0, 512, (1, 16)), opt)
    with pytest.raises(UserInputError, match="this optimizer keeps momentum_buffer"):
        pl.save(tmp_path / "ck", 1, model, opt)
    assert not (tmp_path / "ck").exists()  # refused before anything is written


def test_vocab_parallel_model_trains_as_the_replicated_one():
    """`build_model(vocab_parallel=True)`: the same loss and gradients as the replicated model (one process: one
    shard of all the rows); multi-rank exactness is tests/runtime/runtime_cases.py's vocab-parallel-* cases."""
    sharded, replicated = (pl.build_model("llama-tiny", vocab_parallel=v) for v in (True, False))
    tokens = torch.randint(0, sharded.cfg.vocab_size, (1, 32), generator=torch.Generator().manual_seed(0))
    plan = ["metp"] * sharded.cfg.layers
    assert float(pl.forward_backward(sharded, plan, tokens)) == pytest.approx(
        float(pl.forward_backward(replicated, plan, tokens)), rel=1e-6)
    for (name, a), b in zip(sharded.named_parameters(), replicated.parameters()):
        if a.numel():
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-6, msg=name)
