"""The paper profile: the authors' measured times as profile rows (`source=paper`), memory from our model.

For each measured shape (`paper_measurements`: bert, llama, gpt, paper-7b) and strategy, one row per length
of a geometric grid (multiples of 512 from 512, `ratio` apart) up to the first length whose analytic peak
exceeds the device memory less `reserve_bytes` (where that strategy runs out of memory), or `max_len`:

- time_s = the measured per-layer fit x the layers run on the node (the presets have no embedding or head);
- peak_bytes, kept_bytes = the analytic model's (modelled, not measured: the fits carry no memory);
- software = where the times come from and that the memory is modelled, in `name=value` pairs;
- causal = false: the authors measured non-causal attention (the analytic model is compared with and
  calibrated on these rows with a non-causal mask; memory does not depend on the mask).

The bundled file was written by

    paradyse-lab costmodel paper-profile --out paradyse_lab/data/profiles/paper_a100-80gb-x8.csv

and a test recomputes rows of it from the coefficients.
"""

from __future__ import annotations

import pandas as pd

from paradyse_lab.cluster.files import get_cluster
from paradyse_lab.core.model_spec import get_model
from paradyse_lab.core.strategies import StrategyOption
from paradyse_lab.costmodel.paper import PaperCostModel
from paradyse_lab.costmodel.paper_measurements import MEASURED_SHAPES, PAPER_DEVICE, PROVENANCE
from paradyse_lab.costmodel.profiles import COLUMNS
from paradyse_lab.costmodel.synthetic import length_grid
from paradyse_lab.costmodel.uniform_plan import uniform_plan_cost

DEFAULT_RATIO = 1.05
DEFAULT_MAX_LEN = 1 << 20
PAPER_TIMESTAMP = "2025-11-17T00:00:00+00:00"
"""The rows carry the date of the paper's arXiv version (2511.13198), not of their generation."""


def provenance_text() -> str:
    """The `software` column of every row: the fits' source and the memory's."""
    return (f"time=measured fits {PROVENANCE['repository']}/{PROVENANCE['path']}@{PROVENANCE['commit']};"
            "memory=paradyse-lab analytic model (modelled)")


def paper_profile(ratio: float = DEFAULT_RATIO, max_len: int = DEFAULT_MAX_LEN,
                  reserve_bytes: int = 2**30) -> pd.DataFrame:
    """Rows (profiles.COLUMNS) of every measured shape and strategy (module docstring)."""
    cluster = get_cluster(PAPER_DEVICE)
    budget = cluster.memory_bytes - reserve_bytes
    rows = []
    for shape in MEASURED_SHAPES:
        model = get_model(shape.preset)
        cm = PaperCostModel(model, cluster)
        for strategy in shape.fits:
            opt = StrategyOption(strategy)
            for s in length_grid(max_len, ratio):
                if not cm.feasible(opt, s):
                    continue
                u = uniform_plan_cost(cm, opt, s)
                if u.peak_bytes > budget:
                    break  # the strategy runs out of memory from here on
                kept = model.layers * u.kept_bytes_per_layer + cm.fixed(s).kept_bytes
                rows.append({
                    "model": shape.preset, "h": model.hidden, "heads": model.heads, "kv_heads": model.kv_heads,
                    "layers": model.layers, "p": cm.p, "strategy": strategy, "recompute": False, "seq_len": s,
                    "batch": 1, "time_s": u.total_time_s, "peak_bytes": u.peak_bytes, "kept_bytes": kept,
                    "device": cluster.name, "source": "paper", "software": provenance_text(),
                    "timestamp": PAPER_TIMESTAMP, "causal": False,
                })
    return pd.DataFrame(rows, columns=list(COLUMNS) + ["causal"])
