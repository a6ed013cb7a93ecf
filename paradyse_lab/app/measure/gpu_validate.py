"""Validate the analytic cost model against a GPU session's measurements: prediction / measurement of compute
time and of peak memory per model, strategy and length, with pass/fail at 10% (time) and 5% (memory).

Command (DIR is the folder `python -m paradyse_lab.app.measure.gpu_session --out DIR` wrote; writes DIR/validation.csv
and DIR/validation.md, the table for the README, and prints a summary and the measured efficiency points):

    python -m paradyse_lab.app.measure.gpu_validate DIR [--cluster PRESET] [--out OUTDIR] [--combine PROFILE.csv]

- measured compute time: the profile's `compute_s` (rank-local: the rank's kernels, no communication; the
  whole step for measured-distributed rows, which have no compute_s); predicted: the analytic model's
  compute (`SubLayerCost.compute_s`: GEMMs and attention at the cluster's efficiencies, element-wise traffic
  at HBM bandwidth) x layers, with the embedding/head time added for models that have one.
- peak memory: the profile's peak_bytes against `uniform_plan_cost(...).peak_bytes` (model states incl.
  Adam, all layers' kept activations, the largest transient). CPU rows are a lower bound (peak_method).
- each prediction twice: with the cluster preset's efficiencies, and with efficiencies measured in
  DIR/gemm.csv and DIR/attention.csv (`calibrated_cluster`): per smallest GEMM dimension, all GEMMs' FLOPs
  over their time; per (causal, length), the attention kernel the runtime uses (flash-attn, else sdpa; sdpa-cpu
  on CPU).
  Those points are printed in the form of the cluster presets' efficiency tuples.
- the cluster: --cluster, else env.json's `cluster_preset`, else the profile's `cluster` column, else the
  default preset. The model dtype is the profile's `dtype` column (bf16 on GPU, fp32 on CPU).
`--combine FILE` also writes every profile of DIR, all columns, into one CSV (the file to commit under
paradyse_lab/data/profiles/ and to pass to `paradyse-lab costmodel ablate --profiles`).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from paradyse_lab.cluster.files import get_cluster
from paradyse_lab.cluster.presets import DEFAULT_CLUSTER
from paradyse_lab.core.strategies import StrategyOption
from paradyse_lab.costmodel.analytic import AnalyticCostModel
from paradyse_lab.costmodel.uniform_plan import uniform_plan_cost
from paradyse_lab.errors import UserInputError

TIME_TOL, MEM_TOL = 0.10, 0.05
DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "bf16": "bf16", "fp16": "fp16", "fp32": "fp32"}
TABLE_COLUMNS = ("model", "strategy", "recompute", "seq_len", "measured_compute_s", "predicted_compute_s", "time_ratio",
                 "predicted_compute_s_measured_eff", "time_ratio_measured_eff", "time_pass", "time_pass_measured_eff",
                 "measured_peak_gib", "predicted_peak_gib", "mem_ratio", "mem_pass", "peak_method")


def load_profiles(folder: Path):
    """Every profile CSV of `folder` (header holding profiles.COLUMNS), validated, all columns kept."""
    import pandas as pd  # lazy: pandas: slow to load, only this path needs it

    # lazy: pandas: slow to load, only this path needs it
    from paradyse_lab.costmodel.profiles import COLUMNS, validate_profiles

    frames = []
    for path in sorted(folder.glob("*.csv")):
        head = path.open().readline().strip().split(",")
        if all(c in head for c in COLUMNS):
            raw = pd.read_csv(path, dtype=str, keep_default_na=False)
            validate_profiles(raw, path.name)
            frames.append(raw)
    if not frames:
        from paradyse_lab.errors import UserInputError

        raise UserInputError(f"{folder}: no profile CSV (a CSV with the columns of paradyse_lab/costmodel/profiles.py)")
    return pd.concat(frames, ignore_index=True)


def calibrated_cluster(base, folder: Path):
    """(`base` with the efficiencies measured in folder/gemm.csv and attention.csv, {curve: points}); curves
    without measurements keep the preset's."""
    import pandas as pd  # lazy: pandas: slow to load, only this path needs it

    points: dict = {}
    gemm, att = folder / "gemm.csv", folder / "attention.csv"
    if gemm.exists():
        g = pd.read_csv(gemm)
        g["min_dim"] = g[["m", "n", "k"]].min(axis=1)
        g["flops"] = 2.0 * g["m"] * g["n"] * g["k"]
        agg = g.groupby("min_dim").agg(flops=("flops", "sum"), sec=("median_s", "sum"))
        points["gemm_efficiency"] = _curve(agg, base.peak_flops)
    if att.exists():
        a = pd.read_csv(att)
        kernel = next(k for k in ("flash-attn", "sdpa", "sdpa-cpu", "math") if k in set(a["kernel"]))
        a = a[a["kernel"] == kernel].assign(sec=lambda d: d["fwd_s"] + d["bwd_s"])
        a["flops"] = a["tflops"] * 1e12 * a["sec"]
        for causal, name in ((False, "attention_efficiency"), (True, "attention_efficiency_causal")):
            part = a[a["causal"].astype(str).str.lower() == str(causal).lower()]
            if len(part):
                points[name] = _curve(part.groupby("seq_len").agg(flops=("flops", "sum"), sec=("sec", "sum")),
                                      base.peak_flops)
    return replace(base, name=base.name + "+measured-eff", **points), points


def _curve(agg, peak_flops: float) -> tuple:
    """((x, fraction of peak), ...) ascending, fractions clamped to (0, 1]."""
    agg = agg.sort_index()
    return tuple((int(x), min(1.0, max(1e-9, float(r.flops / r.sec / peak_flops)))) for x, r in agg.iterrows())


def _pick_cluster(folder: Path, df, name: str | None):
    if not name and (folder / "env.json").exists():
        name = json.loads((folder / "env.json").read_text()).get("cluster_preset")
    if not name and "cluster" in df.columns and df["cluster"].nunique() == 1:
        name = df["cluster"].iloc[0]
    return get_cluster(name or DEFAULT_CLUSTER)


def validate(folder, cluster: str | None = None, write: bool = True, out: Path | None = None):
    """The validation table (TABLE_COLUMNS) of `folder`'s profiles; written as validation.csv / .md into
    `out` (default `folder`) when `write`."""
    import pandas as pd  # lazy: pandas: slow to load, only this path needs it

    from paradyse_lab.costmodel.learned_fit import model_of_row  # lazy: pandas: slow to load, only this path needs it

    folder = Path(folder)
    df = load_profiles(folder)
    base = _pick_cluster(folder, df, cluster)
    calibrated, _ = calibrated_cluster(base, folder)
    models: dict = {}
    rows = []
    for r in df.to_dict(orient="records"):
        spec = model_of_row(r["model"], int(r["h"]), int(r["heads"]), int(r["kv_heads"]), int(r["layers"]))
        spec = replace(spec, dtype=DTYPES.get(r.get("dtype", ""), spec.dtype))
        opt, s, b, p = StrategyOption(r["strategy"], r["recompute"].lower() in ("true", "1")), int(r["seq_len"]), \
            int(r["batch"]), int(r["p"])
        pred = {}
        for label, cl in (("", base), ("_measured_eff", calibrated)):
            key = (spec, cl.name, p)
            cm = models.setdefault(key, AnalyticCostModel(spec, cl, p))
            comp = spec.layers * sum(cm.sublayer(k, opt, s, b).compute_s for k in ("attention", "mlp"))
            pred[label] = comp + (cm.fixed(s, b).time_s if spec.embedding_and_head else 0.0)
            pred["peak"] = uniform_plan_cost(cm, opt, s, b).peak_bytes
        meas = float(r.get("compute_s") or r["time_s"])
        peak = int(r["peak_bytes"])
        t_ratio, t_cal, m_ratio = pred[""] / meas, pred["_measured_eff"] / meas, pred["peak"] / peak
        rows.append({"model": r["model"], "strategy": r["strategy"], "recompute": opt.recompute, "seq_len": s,
                     "measured_compute_s": meas, "predicted_compute_s": pred[""], "time_ratio": t_ratio,
                     "predicted_compute_s_measured_eff": pred["_measured_eff"], "time_ratio_measured_eff": t_cal,
                     "time_pass": abs(t_ratio - 1) <= TIME_TOL, "time_pass_measured_eff": abs(t_cal - 1) <= TIME_TOL,
                     "measured_peak_gib": peak / 2**30, "predicted_peak_gib": pred["peak"] / 2**30,
                     "mem_ratio": m_ratio, "mem_pass": abs(m_ratio - 1) <= MEM_TOL,
                     "peak_method": r.get("peak_method", "")})
    table = pd.DataFrame(rows, columns=list(TABLE_COLUMNS))
    if write:
        dest = Path(out or folder)
        dest.mkdir(parents=True, exist_ok=True)
        table.to_csv(dest / "validation.csv", index=False, float_format="%.6g")
        (dest / "validation.md").write_text(markdown(table, base.name, folder))
    return table


def markdown(table, cluster: str, folder: Path) -> str:
    """The README table: one line per row, ratios as prediction / measurement."""
    env = folder / "env.json"
    device = json.loads(env.read_text()).get("device", "?") if env.exists() else "?"
    head = (f"Analytic prediction / measurement ({device}, {folder.name}; cluster {cluster}; time pass within "
            f"{TIME_TOL:.0%}, memory within {MEM_TOL:.0%}; `measured eff` uses gemm.csv / attention.csv)\n\n"
            "| model | strategy | s | compute (s) | pred/meas | pred/meas, measured eff | peak (GiB) | pred/meas |\n"
            "|---|---|---|---|---|---|---|---|\n")
    lines = []
    for r in table.itertuples(index=False):
        name = r.strategy + ("+recompute" if r.recompute else "")
        ok = {True: "ok", False: "**off**"}
        lines.append(f"| {r.model} | {name} | {r.seq_len:,} | {r.measured_compute_s:.4g} | {r.time_ratio:.3f} "
                     f"{ok[bool(r.time_pass)]} | {r.time_ratio_measured_eff:.3f} {ok[bool(r.time_pass_measured_eff)]} "
                     f"| {r.measured_peak_gib:.2f} | {r.mem_ratio:.3f} {ok[bool(r.mem_pass)]} |")
    return head + "\n".join(lines) + "\n"


def summarize(table) -> list[str]:
    """One line per (model, option): passes and median ratios."""
    out = []
    for (model, strategy, rec), g in table.groupby(["model", "strategy", "recompute"], sort=False):
        out.append(f"{model} {strategy}{'+recompute' if rec else ''}: {len(g)} lengths; time pred/meas median "
                   f"{g['time_ratio'].median():.3f} ({int(g['time_pass'].sum())} within 10%), with measured eff "
                   f"{g['time_ratio_measured_eff'].median():.3f} ({int(g['time_pass_measured_eff'].sum())}); "
                   f"memory median {g['mem_ratio'].median():.3f} ({int(g['mem_pass'].sum())} within 5%)")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m paradyse_lab.app.measure.gpu_validate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", help="the folder paradyse_lab.app.measure.gpu_session wrote")
    parser.add_argument("--cluster", default=None, help="cluster preset or .toml (default: the device's preset)")
    parser.add_argument("--out", default=None, help="folder for validation.csv / validation.md (default FOLDER)")
    parser.add_argument("--combine", default=None, help="also write all profiles of FOLDER into this CSV")
    args = parser.parse_args(argv)
    folder = Path(args.folder)
    try:
        table = validate(folder, args.cluster, write=True, out=Path(args.out) if args.out else None)
        base = _pick_cluster(folder, load_profiles(folder), args.cluster)
        _, points = calibrated_cluster(base, folder)
        if args.combine:
            combined = load_profiles(folder)
            Path(args.combine).parent.mkdir(parents=True, exist_ok=True)
            combined.to_csv(args.combine, index=False)
    except UserInputError as err:
        print(f"gpu_validate: error: {err}", file=sys.stderr)
        return 2
    print((Path(args.out or folder) / "validation.md").read_text())
    print("\n".join(summarize(table)))
    for name, pts in points.items():
        print(f"{name} measured in {folder} (fractions of {base.name}'s peak {base.peak_flops / 1e12:g} TFLOP/s): "
              f"({', '.join(f'({x}, {y:.4g})' for x, y in pts)},)")
    if args.combine:
        print(f"wrote {len(combined)} profile rows to {args.combine}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
