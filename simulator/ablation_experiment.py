"""Table 5 of the paper in simulation: GPT on GRCh38 with the paper's heuristic, the full system beside each
ablation (without one strategy, without the random forest, without smoothing).

`paradyse-lab experiment table5` runs it and writes results/runs/table5/*.csv (one per run) and
results/table5.csv. Paper numbers: docs/paper.md section 7.
"""

from __future__ import annotations

from dataclasses import asdict
from functools import partial

import pandas as pd
from tqdm import tqdm

from paradyse_lab.core.strategies import USABLE, layout_unit
from paradyse_lab.costmodel.profiles import profile_sources, read_profiles
from paradyse_lab.simulator import shared
from paradyse_lab.simulator.engine import TIMING_COLUMNS
from paradyse_lab.simulator.experiments import PAPER_POLICY, Setup, run_one, run_planner
from paradyse_lab.simulator.results import DEFAULT_RESULTS_DIR, load_or_run, run_path, write_csv_atomic
from paradyse_lab.simulator.run_metrics import summarize, time_to_reach
from paradyse_lab.simulator.run_reach import longest_fitting

PAPER_TABLE5 = {
    "full": (329728, 3117.76, 3117.76, None),
    "without megatron_ts": (300032, 3173.80, 2799.45, 0.1180),
    "without megatron_cz": (300032, 2795.91, 2799.45, -0.0013),
    "without ulysses_z": (300032, 2813.13, 2799.45, 0.0049),
    "without metp": (112128, 1741.99, 1724.13, 0.0103),
    "without random forest": (270336, 2657.04, 2622.89, 0.0129),
    "without smoothing": (300032, 2800.49, 2799.45, 0.0004),
}
"""Table 5 (docs/paper.md section 7): max length (tokens), time (s), full system time at that length (s), saving."""

PAPER_LENGTHS = tuple(sorted({v[0] for v in PAPER_TABLE5.values()}))
"""The longest lengths of the paper's Table 5 rows, each added once to the sample by `table5(paper_lengths=True)`."""


def table5(setup: Setup, root=DEFAULT_RESULTS_DIR, force: bool = False, progress: bool = True,
           fine_lengths: bool = False, paper_lengths: bool = False) -> pd.DataFrame:
    """GPT on GRCh38 with the paper's heuristic: the full system and each ablation (docs/paper.md section 7).

    With `fine_lengths`, each variant's `max_len_fine_grid` is the longest length its planner fits when every
    multiple of the layout unit is tried (`longest_fitting`), beside `max_len`, the longest sampled
    length its run trained. With `paper_lengths`, the runs train the sample with the paper's Table 5 lengths
    (`PAPER_LENGTHS`) added, under runs/table5-paper-lengths/ and table5_paper_lengths.csv: a sampled run can
    only report lengths it was given."""
    extra = {"extra_lengths": PAPER_LENGTHS} if paper_lengths else {}
    folder = "table5-paper-lengths" if paper_lengths else "table5"
    variants = {"full": {}}
    variants.update({f"without {s}": {"exclude": (s,)} for s in USABLE})
    variants["without smoothing"] = {"smoothing": False}
    # "without random forest": plan with the polynomial only, against the full system planning with the
    # paper's hybrid (random forest + polynomial); both learned from the profile, both charged by the truth.
    variants["full (hybrid cost model)"] = {"plan_cost_model": "hybrid"}
    variants["without random forest"] = {"plan_cost_model": "polynomial"}
    against = {"without random forest": "full (hybrid cost model)"}
    runs = {}
    with shared.sharing():
        for name, kw in tqdm(variants.items(), desc="table5 runs", unit="run", disable=not progress):
            path = run_path(root, folder, "grch38", "gpt", name.replace(" ", "-"))
            run_kw = {**kw, **extra}
            runs[name], _ = load_or_run(path, lambda kw=run_kw: run_one(setup, "gpt", "grch38", PAPER_POLICY, **kw),
                                        force, settings={**asdict(setup),
                                                         "run": ["grch38", "gpt", PAPER_POLICY, run_kw]},
                                        timing_columns=TIMING_COLUMNS)
    rows = []
    for name in variants:
        paper = PAPER_TABLE5[name if name in PAPER_TABLE5 else "full"]  # the paper's full system used the hybrid
        plan_cm = variants[name].get("plan_cost_model", setup.truth)
        row = {"variant": name, "paper_max_len": paper[0], "paper_time_s": paper[1],
               "paper_time_full_s": paper[2], "paper_saving": paper[3], "plan_cost_model": plan_cm,
               "profile_source": _profile_source(setup) if plan_cm != setup.truth else "",
               "truth_cost_model": setup.truth, "switch_memory": setup.switch_memory,
               "recompute": setup.recompute, "granularity": setup.granularity,
               "lengths": "sample + paper's Table 5 lengths" if paper_lengths else "sample"}
        full = runs[against.get(name, "full")]
        rr = runs[name]
        s = summarize(rr, "gpt", "grch38", name)
        steps = s.steps
        t_full = time_to_reach(full, steps)
        saving = None
        if not name.startswith("full") and t_full is not None and s.total_time_s:
            saving = (s.total_time_s - t_full) / s.total_time_s
        rows.append({**row, "status": "ok", "max_len": s.max_seq_len_trained, "time_s": s.total_time_s,
                     "time_full_s": t_full, "saving": saving, "oom_at_seq_len": s.oom_at_seq_len})
        if fine_lengths:
            rows[-1]["max_len_fine_grid"] = _fine_grid(setup, root, folder, name, variants[name],
                                                       s.max_seq_len_trained, force)
    table = pd.DataFrame(rows)
    write_csv_atomic(table, root / ("table5_paper_lengths.csv" if paper_lengths else "table5.csv"))
    return table


def _fine_grid(setup: Setup, root, folder: str, name: str, variant: dict, start: int, force: bool) -> int:
    """The longest length the variant's planner fits on the layout unit's grid, searched from `start` (its run's
    longest trained length: `longest_fitting`). Kept as a one-row CSV under runs/FOLDER-fine-grid/ and reused as
    a finished run is: searched again when forced, or made with other settings (the setup, the variant, `start`)
    or by other code."""
    make = partial(run_planner, setup, "gpt", PAPER_POLICY, **variant)

    def search() -> pd.DataFrame:
        with shared.sharing():
            return pd.DataFrame([{"max_len_fine_grid": longest_fitting(make, layout_unit(setup.cluster_spec().gpus),
                                                                       start=start)}])

    path = run_path(root, f"{folder}-fine-grid", "grch38", "gpt", name.replace(" ", "-"))
    found, _ = load_or_run(path, search, force, settings={**asdict(setup), "run": ["grch38", "gpt", PAPER_POLICY,
                                                                                  variant], "fine_grid_from": start})
    return int(found["max_len_fine_grid"].iloc[0])


def _profile_source(setup: Setup) -> str:
    """`source` label of the profile the learned cost models are fitted on (`analytic` for the synthetic)."""
    return profile_sources(read_profiles(setup.profile_path()))
