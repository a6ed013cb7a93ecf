"""What one `paradyse-lab calibrate` run is: its options, the stages' shares of the time budget and the grids
it measures over (the lengths, the strategy options). The stages themselves: `calibrate_collectives`,
`calibrate_kernels`, `calibrate_profile`; their order and the files they write: `calibrate`.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

from paradyse_lab.runtime.launch.ranks import default_nproc

STAGE_SHARES = {"collectives": 0.10, "kernels": 0.20, "replay": 0.15, "profile": 0.55}
"""Fraction of --budget-s each stage may use (a stage's leftover goes to the next)."""


@dataclass(frozen=True)
class CalibrateOptions:
    """One calibration."""

    out: str
    nproc: int
    model: str
    max_len: int
    budget_s: float
    lengths: int = 9
    """Profile lengths (geometric from max_len/16 to max_len)."""
    repeats: int = 3
    """Timed repeats per point (median)."""
    warmup: int = 0
    """Untimed steps per profile point besides the forward that records kept bytes (which warms up too)."""
    recompute: bool = True
    """Also profile every strategy with recomputation."""
    seed: int = 0
    nodes: int = 1
    """Nodes the ranks are on (torchrun's WORLD_SIZE / LOCAL_WORLD_SIZE; 1 without torchrun)."""

    def settings(self) -> dict:
        """What must match for a rerun to reuse DIR's files."""
        return {k: v for k, v in asdict(self).items() if k not in ("out", "budget_s")}


def machine_defaults() -> dict:
    """Defaults that suit this machine: GPUs -> all of them, gpt2 up to 1024 tokens, 9 minutes; CPU ->
    2 processes, gpt2-cpu up to 1024 tokens, 6 minutes (docs/results.md, "Simulation against execution")."""
    import torch  # lazy: torch takes seconds to load; only this path runs it

    if torch.cuda.is_available():
        return {"nproc": default_nproc(), "model": "gpt2", "max_len": 1024, "budget_s": 540.0}
    return {"nproc": default_nproc(), "model": "gpt2-cpu", "max_len": 1024, "budget_s": 360.0}


def length_grid(max_len: int, count: int, unit: int) -> list[int]:
    """`count` lengths from max_len/16 to max_len, geometric, rounded to multiples of `unit`, distinct (9 of
    them put 7 at or below max_len/2: `costmodel ablate` holds lengths out below half a curve's longest)."""
    lo = max(unit, max_len / 16)
    out = []
    for i in range(count):
        x = lo * (max_len / lo) ** (i / max(count - 1, 1))
        v = max(unit, int(round(x / unit)) * unit)
        if v not in out and v <= max_len:
            out.append(v)
    return out


def profile_options(recompute: bool) -> list[str]:
    """Strategy options the profile measures: every runtime strategy, with and without recomputation."""
    # lazy: safetensors: only checkpoint paths need it
    from paradyse_lab.runtime.model.parallel_gpt import STRATEGY_MODULES

    names = list(STRATEGY_MODULES)
    return names + ([f"{n}+recompute" for n in names] if recompute else [])


class Budget:
    """Deadlines of the stages, on rank 0's clock (decisions are broadcast)."""

    def __init__(self, total_s: float):
        self.start, self.total = time.perf_counter(), total_s

    def deadline(self, stage: str) -> float:
        names = list(STAGE_SHARES)
        share = sum(STAGE_SHARES[k] for k in names[:names.index(stage) + 1])  # stages run in this order
        return self.start + self.total * share

    def fits(self, stage: str, predicted_s: float) -> bool:
        return time.perf_counter() + predicted_s <= self.deadline(stage)
