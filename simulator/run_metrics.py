"""Run summaries and the paper's headline metrics, computed from step rows."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class RunSummary:
    """What `paradyse-lab simulate` prints."""

    model: str
    dataset: str
    policy: str
    steps: int
    """Steps trained (an OOM step is not trained)."""
    total_time_s: float
    """Simulated training time of the trained steps, restarts included (planning time excluded)."""
    max_seq_len_trained: int
    """Longest sequence (of a packed run: document) trained before the run ended."""
    oom_at_seq_len: int | None
    """Length of the step that ran out of memory, or None when the run finished."""
    switches: int
    """Steps whose plan differs from the previous step's."""
    planning_overhead_frac: float
    """Planning wall time / (training time + planning wall time)."""
    tokens_trained: int
    """Real tokens of the trained steps (a packed step's documents, padding excluded)."""

    def to_dict(self) -> dict:
        return asdict(self)


def _trained(rows: pd.DataFrame) -> np.ndarray:
    """Which of the run's steps were trained (not an OOM step), as a boolean array: the summaries below read the
    columns they need through it rather than filtering the whole table (a copy of every column) per question."""
    return ~rows["oom"].to_numpy(dtype=bool)


def summarize(rows: pd.DataFrame, model: str, dataset: str, policy: str) -> RunSummary:
    """Summary of one run's rows."""
    trained = _trained(rows)
    seq_len = rows["seq_len"].to_numpy()
    total = float(rows["cumulative_time_s"].iloc[-1]) if len(rows) else 0.0
    planning = float(rows["solve_ms"].sum()) / 1e3
    tokens = rows["tokens"].to_numpy() if "tokens" in rows else seq_len
    return RunSummary(
        model=model, dataset=dataset, policy=policy, steps=int(trained.sum()), total_time_s=total,
        max_seq_len_trained=int(seq_len[trained].max()) if trained.any() else 0,
        oom_at_seq_len=int(seq_len[~trained][0]) if not trained.all() else None,
        switches=int(rows["switched"].to_numpy()[trained].sum()),
        planning_overhead_frac=planning / (total + planning) if total + planning > 0 else 0.0,
        tokens_trained=int(tokens[trained].sum()),
    )


def time_to_reach(rows: pd.DataFrame, steps: int) -> float | None:
    """Cumulative time after the first `steps` trained steps, None if the run trained fewer."""
    if steps <= 0:
        return 0.0
    cumulative = rows["cumulative_time_s"].to_numpy()[_trained(rows)]
    if len(cumulative) < steps:
        return None
    return float(cumulative[steps - 1])


def time_reduction(dynamic: pd.DataFrame, baseline: pd.DataFrame) -> float | None:
    """The paper's time saving: over the steps both trained, (T_baseline - T_dynamic) / T_baseline."""
    both = min(int(_trained(dynamic).sum()), int(_trained(baseline).sum()))
    t_dyn, t_base = time_to_reach(dynamic, both), time_to_reach(baseline, both)
    if not both or not t_base:
        return None
    return (t_base - t_dyn) / t_base


def length_extension(dynamic: RunSummary, baselines: list[RunSummary], against: str = "best") -> float | None:
    """Trainable-length extension L_dyn / L_base - 1 over the `best` baseline (longest reach) or, the
    paper's "up to" wording, over the `worst` one (shortest reach)."""
    reach = [b.max_seq_len_trained for b in baselines if b.max_seq_len_trained > 0]
    if not reach:
        return None
    base = max(reach) if against == "best" else min(reach)
    return dynamic.max_seq_len_trained / base - 1
