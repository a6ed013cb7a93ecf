"""Profiles: measured (or analytic) whole-model costs per (model shape, p, strategy, length), as CSV.

One row is one training step (forward + backward) of the whole model run on the node, one sequence batch,
one strategy option on every layer, seen from one rank. Columns (all required, in this order when written;
extra columns are ignored on reading):

| column | type | meaning |
|---|---|---|
| model | str | preset name or config path the shapes come from (`paradyse-lab catalog models`) |
| h, heads, kv_heads, layers | int > 0 | hidden size, attention heads, KV heads (GQA), layers run |
| p | int > 0 | GPUs the sequence is sharded over |
| strategy | str | catalog name (`paradyse-lab catalog strategies`) |
| recompute | bool | activation recomputation of every layer (true/false/1/0) |
| seq_len, batch | int > 0 | tokens per sequence, sequences per step |
| time_s | float > 0 | wall time of the step, seconds |
| peak_bytes | int > 0 | peak allocated bytes on the rank, every model state resident (definition below) |
| kept_bytes | int >= 0 | activation bytes alive between forward and backward |
| device | str | the cluster preset (`a100-80gb-x8`) or GPU description the row was taken on |
| source | str | `SOURCES`: how the row was obtained (below) |
| software | str | `name=version` pairs joined by `;` |
| timestamp | str | ISO 8601 time the row was taken |

Optional column: `causal` (bool, or empty for the model preset's mask): whether the attention of the
measured step was causal (the paper profile's are not: the authors measured non-causal attention). The
analytic model is evaluated with the row's mask when comparing with or calibrating on the row.

peak_bytes means what the analytic model's peak means: model states
(weights, gradients and optimizer states: `formulas.model_state_bytes_per_param`, 16 bytes per parameter in
fp32 and in bf16 mixed precision, sharded 1/p) + the kept activations of every layer + the largest transient
working set (+ embedding and head where the model has them). Measured rows hold every model state resident
while they measure (`resident_model_states`: gradients allocated and
accumulated into, Adam's states as one untouched buffer) and read `torch.cuda.max_memory_allocated` from a reset
taken when nothing of an earlier step is alive; on CPU, where there is no allocator counter, they write model
states + kept bytes, a lower bound (their extra column `peak_method` says `lower-bound-cpu`).

Sources: `measured-distributed` (timed on all p ranks), `measured-rank-local` (one rank emulating its share
of the collectives), `paper` (times from the ParaDySe authors' measured A100 fits, memory from the analytic
model), `analytic` (generated from the analytic model with noise,
not measured).

A profile of one strategy stops at its first OOM (a profiler records nothing past it), so the longest
profiled length of a (configuration, strategy) group is where the profile's range ends.

Bundled profiles live in paradyse_lab/data/profiles/, named `SOURCE_DEVICE.csv`: until GPU measurements
exist, `analytic_a100-80gb-x8.csv` (synthetic, `source=analytic`) serves CI and demos; a measured file for
the same device (`measured_DEVICE.csv`) takes its place as soon as it is there (`default_profile`).
"""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import numpy as np
import pandas as pd

from paradyse_lab.core.strategies import CATALOG
from paradyse_lab.errors import UserInputError
from paradyse_lab.files import input_files
from paradyse_lab.files.atomic_write import atomic_open

COLUMNS = ("model", "h", "heads", "kv_heads", "layers", "p", "strategy", "recompute", "seq_len", "batch",
           "time_s", "peak_bytes", "kept_bytes", "device", "source", "software", "timestamp")
"""The schema, in file order (module docstring)."""
INT_COLUMNS = ("h", "heads", "kv_heads", "layers", "p", "seq_len", "batch", "peak_bytes", "kept_bytes")
OPTIONAL_COLUMNS = ("causal",)
"""Kept when present (module docstring); every other extra column is ignored."""
CONFIG_COLUMNS = ("model", "h", "heads", "kv_heads", "layers", "p")
"""What identifies a model configuration on a node."""
GROUP_COLUMNS = CONFIG_COLUMNS + ("strategy", "recompute", "batch")
"""One profiled curve over seq_len."""
SOURCES = ("measured-distributed", "measured-rank-local", "paper", "analytic")
DATA_DIR = Path(__file__).parents[1] / "data" / "profiles"
PAPER_PROFILE = DATA_DIR / "paper_a100-80gb-x8.csv"
"""The bundled paper profile (`paradyse-lab costmodel paper-profile`)."""
_BOOLS = {"true": True, "false": False, "1": True, "0": False}


def default_profile(device: str) -> Path:
    """The bundled profile of a device: a measured one when present, else the analytic (synthetic) one."""
    for prefix in ("measured-distributed", "measured-rank-local", "measured", "analytic"):
        path = DATA_DIR / f"{prefix}_{device}.csv"
        if path.exists():
            return path
    have = sorted(p.name for p in DATA_DIR.glob("*.csv")) if DATA_DIR.exists() else []
    raise UserInputError(f"no bundled profile for device {device!r} (bundled: {', '.join(have) or 'none'}); "
                         "pass --profiles FILE")


_VALIDATED: dict = {}
"""(file name, SHA-256 of its bytes) -> the validated rows of a profile read in this process: a run reads the same
profile for every learned model, source label and step (`read_profiles`), and validating it is most of the read."""
_VALIDATED_KEPT = 8


def read_profiles(path: str | Path) -> pd.DataFrame:
    """Read and validate a profile CSV; every error names the file and, where it applies, column and line. The
    same bytes under the same name are validated once per process (`_VALIDATED`; a copy is returned)."""
    path = Path(path)
    try:
        data = input_files.read_bytes(path, f"profile file {str(path)!r}", input_files.MAX_DATA_BYTES)
    except FileNotFoundError:
        raise UserInputError(f"profile file {str(path)!r} not found") from None
    except OSError as err:
        raise UserInputError(f"cannot read profile file {str(path)!r}: {err}") from None
    key = (path.name, hashlib.sha256(data).digest())
    if key not in _VALIDATED:
        try:
            df = pd.read_csv(io.BytesIO(data), dtype=str, keep_default_na=False)
        except pd.errors.EmptyDataError:
            raise UserInputError(f"{path.name}: the file is empty (expected a header: {', '.join(COLUMNS)})") from None
        except (UnicodeDecodeError, pd.errors.ParserError) as err:
            raise UserInputError(f"cannot read profile file {str(path)!r}: {err}") from None
        if len(_VALIDATED) >= _VALIDATED_KEPT:
            del _VALIDATED[next(iter(_VALIDATED))]
        _VALIDATED[key] = validate_profiles(df, path.name)
    return _VALIDATED[key].copy()


def validate_profiles(df: pd.DataFrame, source: str = "profiles") -> pd.DataFrame:
    """The rows of `df` typed and checked (module docstring); `source` prefixes every error message.

    Line numbers in messages count the header as line 1, as an editor shows the CSV.
    """
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise UserInputError(f"{source}: missing column{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
                             f"(required: {', '.join(COLUMNS)})")
    if df.empty:
        raise UserInputError(f"{source}: no rows")
    out = pd.DataFrame(index=df.index)
    for col in COLUMNS:
        raw = df[col].astype(str).str.strip()
        bad = raw.isin(["", "nan", "NaN", "NA", "None", "null"])
        if bad.any():
            raise UserInputError(f"{source}: line {_line(df, bad)}: column {col} is empty or NaN")
        if col in INT_COLUMNS:
            out[col] = _ints(raw, col, source, df, allow_zero=col == "kept_bytes")
        elif col == "time_s":
            vals = pd.to_numeric(raw, errors="coerce").astype(float)
            finite = pd.Series(np.isfinite(vals.to_numpy()), index=vals.index)
            if not finite.all():
                raise UserInputError(f"{source}: line {_line(df, ~finite)}: time_s must be a finite number, "
                                     f"got {raw[~finite].iloc[0]!r}")
            if (vals <= 0).any():
                raise UserInputError(f"{source}: line {_line(df, vals <= 0)}: time_s must be > 0 (a negative or "
                                     f"zero time), got {raw[vals <= 0].iloc[0]}")
            out[col] = vals.astype(float)
        elif col == "recompute":
            out[col] = _bools(raw, col, source, df)
        else:
            out[col] = raw
    columns = list(COLUMNS)
    for col in OPTIONAL_COLUMNS:
        if col in df.columns:
            raw = df[col].fillna("").astype(str).str.strip()
            blank = raw.isin(["", "nan", "NaN", "None"])  # the model preset's mask
            out[col] = _bools(raw.where(~blank, "false"), col, source, df).astype(object).where(~blank, None)
            columns.append(col)
    bad = ~out["strategy"].isin(list(CATALOG))
    if bad.any():
        raise UserInputError(f"{source}: line {_line(df, bad)}: unknown strategy {out['strategy'][bad].iloc[0]!r}; "
                             f"valid: {', '.join(CATALOG)}")
    bad = ~out["source"].isin(SOURCES)
    if bad.any():
        raise UserInputError(f"{source}: line {_line(df, bad)}: unknown source {out['source'][bad].iloc[0]!r}; "
                             f"valid: {', '.join(SOURCES)}")
    bad = (out["heads"] % out["kv_heads"] != 0) | (out["h"] % out["heads"] != 0)
    if bad.any():
        raise UserInputError(f"{source}: line {_line(df, bad)}: kv_heads must divide heads and heads must divide h")
    bad = out["peak_bytes"] < out["kept_bytes"]
    if bad.any():
        raise UserInputError(f"{source}: line {_line(df, bad)}: peak_bytes is below kept_bytes")
    return out.reset_index(drop=True)[columns]


def write_profiles(df: pd.DataFrame, path: str | Path) -> Path:
    """Validate `df` and write it (atomically) with the schema's column order (floats with 6 significant
    digits)."""
    path = Path(path)
    rows = validate_profiles(df.astype(str) if not df.empty else df, "rows to write")
    words = {True: "true", False: "false"}
    rows = rows.assign(recompute=rows["recompute"].map(words), time_s=rows["time_s"].map(lambda x: f"{x:.6g}"))
    if "causal" in rows.columns:
        rows["causal"] = rows["causal"].map(lambda x: "" if x is None else words[bool(x)])
    with atomic_open(path, newline=None) as handle:
        rows.to_csv(handle, index=False)
    return path


def profile_sources(df: pd.DataFrame) -> str:
    """The sources of a profile joined by '+', for labels (`analytic`, `measured-distributed`, ...)."""
    return "+".join(sorted(set(df["source"])))


def _line(df: pd.DataFrame, mask) -> int:
    """File line of the first row where `mask` holds (header = line 1)."""
    pos = int(pd.Series(mask).to_numpy().nonzero()[0][0])
    return pos + 2


def _bools(raw: pd.Series, col: str, source: str, df: pd.DataFrame) -> pd.Series:
    low = raw.str.lower()
    bad = ~low.isin(list(_BOOLS))
    if bad.any():
        raise UserInputError(f"{source}: line {_line(df, bad)}: {col} must be true or false, got {raw[bad].iloc[0]!r}")
    return low.map(_BOOLS).astype(bool)


def _ints(raw: pd.Series, col: str, source: str, df: pd.DataFrame, allow_zero: bool) -> pd.Series:
    vals = pd.to_numeric(raw, errors="coerce").astype(float)
    arr = vals.to_numpy()
    ok = pd.Series(np.isfinite(arr) & (arr == np.round(arr)), index=vals.index)
    if not ok.all():
        raise UserInputError(f"{source}: line {_line(df, ~ok)}: {col} must be an integer, got {raw[~ok].iloc[0]!r}")
    vals = vals.astype("int64")
    low = vals < 0 if allow_zero else vals <= 0
    if low.any():
        raise UserInputError(f"{source}: line {_line(df, low)}: {col} must be {'>= 0' if allow_zero else '> 0'}, "
                             f"got {vals[low].iloc[0]}")
    return vals
