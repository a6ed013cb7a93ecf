"""The profile stage of `paradyse-lab calibrate`: one training step of the whole model per strategy option and
length (`measured-distributed`), lengths ascending, as many points as the budget allows.
"""

from __future__ import annotations

from paradyse_lab.app.measure.calibrate_options import Budget, CalibrateOptions, profile_options
from paradyse_lab.app.measure.profiler import ProfileOptions, profile
from paradyse_lab.runtime.launch.ranks import agree


def measure_profile(opts: CalibrateOptions, lengths, budget: Budget, group, bar, done, write) -> list[str]:
    """Profile every (length, option) not in `done`, lengths ascending; at each length the options whose
    predicted time (from the option's previous length, growing as s^1.5) still fits run in one call, then
    `write(rows)`. Returns the skipped points as 'option@length: reason'."""
    import pandas as pd  # lazy: pandas: slow to load, only this path needs it

    rows = list(done.values())
    known: dict = {}
    for r in rows:
        known.setdefault(option_name(r), {})[int(r["seq_len"])] = float(r["time_s"])
    skipped, stopped = [], set()
    steps = opts.warmup + opts.repeats + 1
    for s in lengths:
        have = {(option_name(r), int(r["seq_len"])) for r in rows}
        todo, planned = [], 0.0
        for name in profile_options(opts.recompute):
            if (name, s) in have:
                continue
            curve = known.get(name, {})
            shorter = [x for x in curve if x < s]
            predicted = steps * curve[max(shorter)] * (s / max(shorter)) ** 1.5 if shorter else 0.0
            if name not in stopped and budget.fits("profile", planned + predicted):
                todo.append(name)
                planned += predicted
            else:
                stopped.add(name)
                skipped.append(f"{name}@{s}: time budget")
        todo = agree(todo, group)  # rank 0's clock decides for every rank
        if todo:  # one model for every option at this length; the file is rewritten after each length
            po = ProfileOptions(model=opts.model, seqs=(s,), strategies=tuple(todo), mode="distributed",
                                warmup=opts.warmup, repeats=opts.repeats, seed=opts.seed)
            for row in profile(po, group, progress=False).to_dict("records"):
                rows.append(row)
                known.setdefault(option_name(row), {})[s] = float(row["time_s"])
            write(pd.DataFrame(rows))
        if bar is not None:
            bar.update(len(profile_options(opts.recompute)))
    return skipped


def option_name(row) -> str:
    """The strategy option of a profile row: NAME or NAME+recompute."""
    rec = str(row["recompute"]).lower() in ("true", "1")
    return row["strategy"] + ("+recompute" if rec else "")
