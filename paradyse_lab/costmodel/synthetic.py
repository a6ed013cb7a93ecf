"""Synthetic profiles: the analytic model plus seeded measurement noise, labelled `source=analytic`.

Until GPU measurements exist, this stands in for a profiler so the learned cost models can be fitted,
tested and ablated. It is not a measurement: every row says `source=analytic`, and results fitted on it say
so too. The bundled file was written by

    paradyse-lab costmodel synth-profile --out paradyse_lab/data/profiles/analytic_a100-80gb-x8.csv \
        --timestamp 2026-01-01T00:00:00+00:00

(defaults below; `--help` lists them). What a row holds:

- lengths: a geometric grid from 512 tokens with ratio `ratio` (default 1.02), each rounded to a multiple
  of 512 (the paper's lengths are; about 250 distinct lengths up to 1M); per (model, strategy option) the profile
  walks the grid upward and stops at the first length whose peak exceeds the device memory less
  `reserve_bytes` (a profiler records nothing past its OOM), or at `max_len`.
- time_s = analytic whole-model time x exp(e_t), e_t ~ N(0, time_noise^2) (default 0.02: run-to-run jitter
  of kernels and NCCL collectives is of the order of 1-3%); E|noise| = 0.8 x time_noise, so a perfect model
  shows a time MAPE of about 1.6% against these rows.
- peak_bytes and kept_bytes = analytic bytes x exp(e_m), one e_m ~ N(0, mem_noise^2) per row (default
  0.005: allocator rounding and fragmentation), rounded to whole bytes; MAPE floor about 0.4%.
- the draws come from `numpy.random.default_rng(seed)` in row order: the same arguments give the same rows.
"""

from __future__ import annotations

import datetime as _dt

import numpy as np
import pandas as pd

from paradyse_lab.cluster.spec import ClusterSpec
from paradyse_lab.core.model_spec import get_model
from paradyse_lab.core.strategies import USABLE
from paradyse_lab.core.strategies import options as make_options
from paradyse_lab.costmodel.analytic import AnalyticCostModel
from paradyse_lab.costmodel.profiles import COLUMNS
from paradyse_lab.costmodel.uniform_plan import uniform_plan_cost
from paradyse_lab.results.software_versions import software_versions, versions_text

DEFAULT_MODELS = ("bert", "llama", "gpt", "llama3-8b")
"""The paper's three models plus a GQA model with embedding and head."""
DEFAULT_RATIO = 1.02
DEFAULT_MAX_LEN = 1 << 20
DEFAULT_TIME_NOISE = 0.02
DEFAULT_MEM_NOISE = 0.005
GRANULE = 512


def length_grid(max_len: int = DEFAULT_MAX_LEN, ratio: float = DEFAULT_RATIO, min_len: int = GRANULE,
                granule: int = GRANULE) -> list[int]:
    """Multiples of `granule` from `min_len` to `max_len`, about `ratio` apart (at least one granule)."""
    if ratio <= 1:
        raise ValueError(f"ratio must be > 1, got {ratio}")
    out, x = [], float(min_len)
    while x <= max_len:
        s = max(granule, int(round(x / granule)) * granule)
        if not out or s > out[-1]:
            out.append(s)
        x *= ratio
    return out


def synthesize_profiles(cluster: ClusterSpec, models=DEFAULT_MODELS, p: int | None = None, *, seed: int = 0,
                        time_noise: float = DEFAULT_TIME_NOISE, mem_noise: float = DEFAULT_MEM_NOISE,
                        ratio: float = DEFAULT_RATIO, max_len: int = DEFAULT_MAX_LEN, reserve_bytes: int = 2**30,
                        recompute: bool = False, batch: int = 1, timestamp: str | None = None) -> pd.DataFrame:
    """Profile rows (profiles.COLUMNS) of `models` on `cluster` from the analytic model with noise."""
    if time_noise < 0 or mem_noise < 0:
        raise ValueError("noise levels must be >= 0")
    rng = np.random.default_rng(seed)
    stamp = timestamp or _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()
    budget = cluster.memory_bytes - reserve_bytes
    software = versions_text(software_versions(("paradyse-lab", "numpy"), python=False, absent="unknown"))
    software += ";analytic-model"
    grid = length_grid(max_len, ratio)
    rows = []
    for name in models:
        model = get_model(name)
        cm = AnalyticCostModel(model, cluster, p)
        for opt in make_options(USABLE, recompute=recompute):
            for s in grid:
                if not cm.feasible(opt, s):
                    continue
                u = uniform_plan_cost(cm, opt, s, batch)
                kept = model.layers * u.kept_bytes_per_layer + cm.fixed(s, batch).kept_bytes
                e_t, e_m = rng.normal(0.0, time_noise), rng.normal(0.0, mem_noise)
                peak = int(round(u.peak_bytes * np.exp(e_m)))
                if peak > budget:
                    break  # the profiler's first OOM: nothing recorded past it
                rows.append({
                    "model": name, "h": model.hidden, "heads": model.heads, "kv_heads": model.kv_heads,
                    "layers": model.layers, "p": cm.p, "strategy": opt.strategy, "recompute": opt.recompute,
                    "seq_len": s, "batch": batch, "time_s": u.total_time_s * float(np.exp(e_t)),
                    "peak_bytes": peak, "kept_bytes": int(round(kept * np.exp(e_m))), "device": cluster.name,
                    "source": "analytic", "software": software, "timestamp": stamp,
                })
    return pd.DataFrame(rows, columns=list(COLUMNS))
