"""The optimizer step's working memory on the CPU, measured by torch's own profiler (allocator events) on the
runtime's own optimizer (runtime/training/state.py `TrainState`), against the cost model's count
(paradyse_lab/costmodel/formulas.py `optimizer_temporary_bytes`), which the plans' peak now includes.

Run: `python -m pytest -q tests/runtime/test_optimizer_memory.py`.
"""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import torch
from profiler_peak import peak_above_start

from paradyse_lab.cluster.files import get_cluster
from paradyse_lab.core.layer_graph import LayerGraph
from paradyse_lab.core.model_spec import get_model
from paradyse_lab.costmodel import formulas as F
from paradyse_lab.costmodel.analytic import AnalyticCostModel
from paradyse_lab.costmodel.lowering import problem_from_cost_model
from paradyse_lab.runtime.model.reference import GPTConfig
from paradyse_lab.runtime.training.state import TrainState


def test_the_cpu_optimizer_steps_temporaries_are_counted(tmp_path):
    spec = replace(get_model("gpt2-tiny"), dtype="fp32")  # what a CPU run trains
    opts = SimpleNamespace(seed=0, init_from="", lr=1e-3, weight_decay=0.1)
    state = TrainState.create(opts, GPTConfig.from_model_spec(spec), None, torch.device("cpu"), {}, 1)

    def step():
        for q in state.model.parameters():
            q.grad = torch.ones_like(q)
        state.apply_optimizer()

    step()  # the first step makes AdamW's moments: model states, counted apart
    for q in state.model.parameters():
        q.grad = torch.ones_like(q)
    measured = peak_above_start(state.apply_optimizer, tmp_path)
    largest = max(q.numel() * q.element_size() for q in state.model.parameters())
    assert measured > 2 * largest  # two of the largest tensor's size at once (its square root and quotient), and more
    predicted = F.optimizer_temporary_bytes(spec, on_cpu=True)
    assert measured - 64 <= predicted <= 1.05 * measured, (measured, predicted)  # 64: the step counters' scalars
    assert F.optimizer_temporary_bytes(spec, on_cpu=False) == 0  # CUDA: fused AdamW, no temporaries


def test_a_cpu_plans_peak_holds_them_where_the_optimizer_step_is_the_peak():
    spec = replace(get_model("gpt2-tiny"), dtype="fp32")
    cpu = replace(get_cluster("a100-80gb-x8"), gpus=1, gpu_name="CPU, 8 GiB host memory over 1 rank")
    gpu = replace(cpu, gpu_name="A100")
    graph = LayerGraph(spec, "block")
    on = problem_from_cost_model(graph, AnalyticCostModel(spec, cpu), 64)
    off = problem_from_cost_model(graph, AnalyticCostModel(spec, gpu), 64)
    assert on.fixed_transient_bytes == F.optimizer_temporary_bytes(spec, True) > off.fixed_transient_bytes
