"""What every row of one `paradyse-lab costmodel profile` call measures with (paradyse_lab/app/measure/profiler.py,
whose module docstring says what a row holds): the model on its torch device, its strategy options, its resident model
states (`resident_model_states`, profile_memory.py), the cost model that prices a rank-local row's communication,
and the device's name as the rows record it (`device_name`). Every input error is raised here, before any timing.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from typing import TYPE_CHECKING

from paradyse_lab.app.measure.profile_memory import resident_model_states
from paradyse_lab.software_versions import software_versions, versions_text

if TYPE_CHECKING:
    from paradyse_lab.app.measure.profiler import ProfileOptions


def device_name(device) -> str:
    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_name(device).replace(",", " ")
    return (f"cpu {platform.machine()} {platform.processor()}".strip()).replace(",", " ") or "cpu"


@dataclass
class Profiling:
    """What every row of one `profile` call measures with: the model on its device, its strategy options and
    the cost model that prices a rank-local row's communication."""

    opts: ProfileOptions
    cfg: object
    model: object
    options: list
    group: object
    p: int
    rank: int
    device: object
    distributed: bool
    analytic: object
    params: list
    state_bytes: int
    optimizer_states: object
    """The optimizer states' buffer (`resident_model_states`), held while profiling."""
    barrier: object
    software: str
    dev_name: str


def _profile_device(opts: ProfileOptions, distributed: bool):
    """The torch device `opts` asks for (`--device auto`: CUDA when there is one) and its dtype's name."""
    import torch

    from paradyse_lab.errors import UserInputError

    use_cuda = opts.device == "cuda" or (opts.device == "auto" and torch.cuda.is_available())
    if use_cuda and not torch.cuda.is_available():
        raise UserInputError("--device cuda but CUDA is not available")
    if use_cuda:
        device = torch.device("cuda", torch.cuda.current_device()) if not distributed else \
            torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    else:
        device = torch.device("cpu")
    return device, opts.dtype if opts.dtype != "auto" else ("bf16" if device.type == "cuda" else "fp32")


def set_up_profiling(opts: ProfileOptions, group) -> Profiling:
    """The model, options and states of a `profile` call, every input error raised before any timing."""
    import torch

    from paradyse_lab.cluster_lookup import get_cluster
    from paradyse_lab.cluster_presets import DEFAULT_CLUSTER
    from paradyse_lab.costmodel.analytic import AnalyticCostModel
    from paradyse_lab.errors import UserInputError
    from paradyse_lab.model_spec import get_model
    from paradyse_lab.strategies import StrategyOption
    from runtime import comm
    from runtime.fake_group import FakeGroup
    from runtime.layout import check_length
    from runtime.model import ParallelGPT
    from runtime.reference import GPTConfig

    spec = get_model(opts.model)
    if opts.layers:
        spec = spec.with_layers(opts.layers)
    cfg = GPTConfig.from_model_spec(spec)
    distributed = opts.mode == "distributed"
    if distributed:
        if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
            raise UserInputError("--mode distributed runs under torchrun (torch.distributed is not initialised)")
        p, rank = comm.size(group), comm.rank(group)
    else:
        p, rank = opts.p, opts.rank
        group = FakeGroup(p, rank)
    device, dtype_name = _profile_device(opts, distributed)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype_name]
    options = [StrategyOption.parse(s) for s in opts.strategies]
    model = ParallelGPT(cfg, group, seed=opts.seed).to(device=device, dtype=dtype)
    for s in opts.seqs:  # every input error before any timing
        check_length(s, p)
        for opt in options:
            model.check(s, [str(opt)] * cfg.layers)
    cost_spec = cfg.model_spec(dtype_name if dtype_name != "fp16" else "bf16")
    params = list(model.parameters())
    optimizer_states, state_bytes = resident_model_states(params, cost_spec, device)
    barrier = (lambda: torch.distributed.barrier(group=group)) if distributed else None
    return Profiling(opts, cfg, model, options, group, p, rank, device, distributed,
                      AnalyticCostModel(cost_spec, get_cluster(opts.cluster or DEFAULT_CLUSTER), p), params,
                      state_bytes, optimizer_states, barrier, versions_text(software_versions(device=device)),
                      device_name(device))
