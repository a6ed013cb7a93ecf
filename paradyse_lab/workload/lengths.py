"""Workloads: the sequence lengths a training run sees, in order.

- `github_code`, `grch38`: sampled from ParaDySe Table 3 (docs/paper.md section 6; `PAPER_DATASETS`), in
  one of two ways (`SAMPLINGS`, `--sampling`):
  - `stratified` (default): each band holds its share of the N sequences, the counts rounded by largest
    remainder (so every band's count is within one sequence of N x its share, and the sample's band shares
    match Table 3's to rounding); the dataset's maximum is pinned (one sequence of exactly that length, in
    the top band, which is given at least one sequence);
  - `multinomial`: each sequence's band is drawn by its share (seeded), the maximum pinned as one more slot;
    at N = 200 its top bands hold 2-3x their share as often as not.
  Either way a length is drawn log-uniformly inside its band, rounded down to a multiple of 512 (the
  paper's lengths are) and kept inside the band, capped at the dataset's maximum; sorted ascending (the
  paper trains short to long). GRCh38's row sums to 99.1% as printed and is renormalised.
- `uniform:LO:HI`: lengths uniform in [LO, HI], never outside it. LO and HI are whole numbers of tokens,
  1 <= LO <= HI (else the spec is refused with this rule). When both are multiples of 512 (the paper's
  granule, e.g. the default 512:65536) the lengths are the multiples of 512 in the range, each equally
  likely; otherwise they are whole numbers of tokens, each of LO..HI equally likely (`uniform:1000:1500`
  gives 1000 to 1500, `uniform:8:16` gives 8 to 16), so a range is never rounded to a granule outside it.
- `lognormal:MEDIAN:SIGMA`: lengths drawn log-normally around MEDIAN. When MEDIAN is a multiple of 512 they are
  rounded down to multiples of 512 (at least 512); otherwise to whole numbers of tokens (at least 1), so
  `lognormal:100:0.1` stays around 100 tokens.
- `file:PATH`: the lengths of a length file (one per line of a .txt file, a CSV /
  parquet column, or JSONL token-id lists); a .txt line of several lengths is one packed step, and a packed
  file's steps are kept in its order.

Packing (`get_workload(..., pack_tokens=N)`, `--pack-tokens N` on the command line): the documents are
packed into steps of at most N tokens by greedy first-fit (`sorted`, the default,
is first-fit decreasing with the steps shortest first, as the paper trains; `shuffled` is first-fit in a
seeded random order, what a streaming loader sees), so a step is a list of document lengths.

Length files: the lengths of a `file:PATH` workload, each read exactly.

- `.txt`: one length per line; a line of several lengths separated by spaces is one packed step of that many
  documents (`paradyse-lab data lengths DIR --pack-tokens N` writes such files), its steps kept in the file's order;
- `.csv` / `.parquet`: a column (`file:PATH#COLUMN`, else the first column named seq_len, length, len, n_tokens
  or tokens);
- `.jsonl`: lines of token-id lists (or objects with `input_ids`), whose lengths are taken.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path

import numpy as np

from paradyse_lab.errors import UserInputError, require_positive_int, require_seed, unknown_name
from paradyse_lab.files import input_files, typed_json
from paradyse_lab.workload.packing import PACK_ORDERS, pack_documents

K = 1024
BAND_EDGES = (0, 4 * K, 8 * K, 16 * K, 32 * K, 64 * K, 128 * K)
"""Lower edges of Table 3's bands: <4K, 4-8K, 8-16K, 16-32K, 32-64K, 64-128K, >=128K."""
BAND_NAMES = ("<4K", "4-8K", "8-16K", "16-32K", "32-64K", "64-128K", ">=128K")
GRANULE = 512
"""The paper's lengths are multiples of 512."""
PAPER_DATASETS = {
    "github_code": ((65.7, 14.5, 9.8, 5.1, 2.7, 1.1, 1.1), 309 * K),
    "grch38": ((3.5, 26.4, 28.7, 21.2, 11.9, 5.5, 1.9), 624 * K),
}
"""Table 3 of the paper: percent per band and the maximum length."""
SAMPLINGS = ("stratified", "multinomial")
"""How a paper dataset's band counts are chosen (module docstring); the first is the default."""
DEFAULT_SIZE = 400
MAX_SIZE = 10_000_000
"""Most sequences a sampled workload may hold (80 MB of lengths)."""
MAX_LENGTH = 2**40
"""Longest sequence a workload parameter may ask for."""


@dataclass(frozen=True)
class Workload:
    """An ordered sequence of training-step lengths, or of packed steps of documents."""

    name: str
    """The spec it was made from."""
    lengths: tuple[int, ...]
    """Tokens per step in training order; of a packed workload, every document's length, step by step."""
    packs: tuple[tuple[int, ...], ...] | None = None
    """Packed steps: the document lengths of each step, in training order; None: one sequence per step."""
    pack_tokens: int | None = None
    """Token budget the documents were packed to (None when the steps came packed from a file)."""

    def __post_init__(self):
        if not self.lengths:
            raise UserInputError(f"workload {self.name!r} has no sequences")

    @property
    def steps(self) -> tuple[tuple[int, ...], ...]:
        """The documents of every step (one each when not packed)."""
        return self.packs if self.packs is not None else tuple((n,) for n in self.lengths)

    def band_fractions(self) -> list[float]:
        """Fraction of sequences (documents, when packed) in each of Table 3's bands."""
        idx = np.searchsorted(BAND_EDGES, np.asarray(self.lengths), side="right") - 1
        return list(np.bincount(idx, minlength=len(BAND_EDGES)) / len(self.lengths))


def pack_workload(workload: Workload, pack_tokens: int, order: str = "sorted", seed: int = 0) -> Workload:
    """`workload`'s documents packed into steps of at most `pack_tokens` tokens (module docstring)."""
    packs = tuple(pack_documents(workload.lengths, pack_tokens, order, seed))
    return Workload(f"{workload.name} packed {pack_tokens} {order}", tuple(n for step in packs for n in step),
                    packs, pack_tokens)


def _round_granule(x: np.ndarray, cap: int) -> np.ndarray:
    return np.clip((x // GRANULE).astype(np.int64) * GRANULE, GRANULE, cap)


def _on_granule(*values: float) -> bool:
    """Whether every value is a multiple of GRANULE: a synthetic spec then draws lengths on the granule."""
    return all(v % GRANULE == 0 for v in values)


def _uniform_lengths(spec: str, rng: np.random.Generator, size: int) -> np.ndarray:
    """`uniform:LO:HI` (module docstring): multiples of 512 when LO and HI are, else whole tokens, inside
    [LO, HI] always."""
    lo, hi = _parse_params(spec, 2, (512, 64 * K))
    if not (lo.is_integer() and hi.is_integer() and 1 <= lo <= hi):
        raise UserInputError(f"workload {spec!r}: LO and HI must be whole numbers of tokens with 1 <= LO <= HI")
    if _on_granule(lo, hi):  # each multiple of 512 in [LO, HI] equally likely (floor of U[LO, HI + 512))
        return _round_granule(rng.uniform(lo, hi + GRANULE, size=size), int(hi))
    return rng.integers(int(lo), int(hi), size=size, endpoint=True)


def _lognormal_lengths(spec: str, rng: np.random.Generator, size: int) -> np.ndarray:
    """`lognormal:MEDIAN:SIGMA` (module docstring): on the granule when MEDIAN is, else whole tokens."""
    median, sigma = _parse_params(spec, 2, (4 * K, 1.0))
    if median <= 0 or not 0 < sigma <= 10:
        raise UserInputError(f"workload {spec!r}: need MEDIAN > 0 and 0 < SIGMA <= 10")
    draws = np.minimum(rng.lognormal(math.log(median), sigma, size=size), MAX_LENGTH)
    if _on_granule(median):
        return _round_granule(draws, MAX_LENGTH)
    return np.clip(np.rint(draws), 1, MAX_LENGTH).astype(np.int64)


def largest_remainder(shares, total: int) -> list[int]:
    """Integer counts summing to `total`, proportional to `shares`, by largest remainder (Hamilton's method):
    each count is the floor of its quota, and the seats left go to the largest fractional parts (ties to the
    earlier band), so every count is within one of its quota."""
    shares = np.asarray(shares, dtype=float)
    quotas = total * shares / shares.sum()
    counts = np.floor(quotas).astype(np.int64)
    left = total - int(counts.sum())
    order = np.argsort(-np.round(quotas - counts, 9), kind="stable")  # rounded: ties by band, not float noise
    counts[order[:left]] += 1
    return [int(c) for c in counts]


def paper_band_counts(name: str, size: int, sampling: str, rng: np.random.Generator) -> list[int]:
    """Sequences per Table 3 band of a `size`-sequence sample of `name`, the pinned maximum included (it is
    one of the top band's)."""
    percents = PAPER_DATASETS[name][0]
    if sampling == "multinomial":
        counts = list(rng.multinomial(size - 1, np.asarray(percents) / sum(percents)))  # one slot: the maximum
    else:
        counts = largest_remainder(percents, size)
        if counts[-1] > 0:
            return counts
        counts = largest_remainder(percents, size - 1)  # too few sequences for the top band: the maximum alone
    counts[-1] += 1
    return [int(c) for c in counts]


def sample_paper_dataset(name: str, size: int = DEFAULT_SIZE, seed: int = 0,
                         sampling: str = SAMPLINGS[0]) -> Workload:
    """Lengths sampled from Table 3's band fractions for `github_code` or `grch38` (see module doc)."""
    size = require_positive_int("size", size, MAX_SIZE)
    if sampling not in SAMPLINGS:
        raise unknown_name("--sampling", sampling, SAMPLINGS)
    max_len = PAPER_DATASETS[name][1]
    rng = np.random.default_rng(seed)
    counts = paper_band_counts(name, size, sampling, rng)
    counts[-1] -= 1
    out = [max_len]
    highs = BAND_EDGES[1:] + (max_len + 1,)
    for band, n in enumerate(counts):
        lo, hi = max(BAND_EDGES[band], GRANULE), highs[band]
        draws = np.exp(rng.uniform(math.log(lo), math.log(hi), size=n))
        rounded = _round_granule(draws, max_len)
        out.extend(int(v) for v in np.maximum(rounded, lo))  # stay inside the band after rounding down
    return Workload(name, tuple(sorted(out)))


def _parse_params(spec: str, count: int, defaults: tuple[float, ...]) -> tuple[float, ...]:
    parts = spec.split(":")[1:]
    if len(parts) not in (0, count):
        raise UserInputError(f"workload {spec!r}: expected {count} parameters separated by ':'")
    if not all(x.isascii() and "_" not in x for x in parts):  # float() reads '\u0665\u0661\u0662' as 512, '1_000'
        raise UserInputError(f"workload {spec!r}: parameters must be numbers in ASCII digits (e.g. uniform:512:4096)")
    try:
        values = tuple(float(x) for x in (parts or defaults))
    except ValueError:
        raise UserInputError(f"workload {spec!r}: parameters must be numbers") from None
    if not all(math.isfinite(v) and 0 < v <= MAX_LENGTH for v in values):
        raise UserInputError(f"workload {spec!r}: parameters must be finite numbers in (0, {MAX_LENGTH}]")
    return values


WORKLOAD_KINDS = ("github_code", "grch38", "uniform[:LO:HI]", "lognormal[:MEDIAN:SIGMA]", "file:PATH")


def get_workload(spec: str, size: int = DEFAULT_SIZE, seed: int = 0, sort: bool = True,
                 pack_tokens: int | None = None, pack_order: str = "sorted",
                 sampling: str = SAMPLINGS[0]) -> Workload:
    """A workload from its spec (see the module docstring); sampled ones are seeded and sorted ascending.

    `sampling`: how a paper dataset's band counts are chosen (`SAMPLINGS`).
    `pack_tokens`: pack the documents into steps of at most that many tokens, in `pack_order` (`sorted` or
    `shuffled`, seeded by `seed`)."""
    require_seed("--seed", seed)
    if pack_order not in PACK_ORDERS:
        raise UserInputError(f"--pack-order must be one of {', '.join(PACK_ORDERS)}, got {pack_order!r}")
    if sampling not in SAMPLINGS:
        raise unknown_name("--sampling", sampling, SAMPLINGS)
    workload = _documents(spec, size, seed, sort, sampling)
    return workload if pack_tokens is None else pack_workload(workload, pack_tokens, pack_order, seed)


def _documents(spec: str, size: int, seed: int, sort: bool, sampling: str) -> Workload:
    if spec in PAPER_DATASETS:
        return sample_paper_dataset(spec, size, seed, sampling)
    if spec.startswith("file:"):

        steps = read_length_steps(spec[5:])
        lengths = [n for step in steps for n in step]
        if any(len(step) > 1 for step in steps):  # a packed file: its steps, in its order
            return Workload(spec, tuple(lengths), tuple(steps))
        return Workload(spec, tuple(sorted(lengths) if sort else lengths))
    size = require_positive_int("size", size, MAX_SIZE)
    rng = np.random.default_rng(seed)
    kind = spec.split(":")[0]
    if kind == "uniform":
        lengths = _uniform_lengths(spec, rng, size)
    elif kind == "lognormal":
        lengths = _lognormal_lengths(spec, rng, size)
    else:
        raise UserInputError(f"unknown workload {spec!r}; valid: {', '.join(WORKLOAD_KINDS)}")
    values = [int(v) for v in lengths]
    return Workload(spec, tuple(sorted(values) if sort else values))


LENGTH_COLUMNS = ("seq_len", "length", "len", "n_tokens", "tokens")


def read_length_steps(path: str | Path) -> list[tuple[int, ...]]:
    """The steps of a length file: one document each, or several on a .txt line of a packed file."""
    text_path, _, column = str(path).partition("#")
    p = Path(text_path)
    if not p.exists():
        raise UserInputError(f"length file {text_path!r} does not exist")
    input_files.regular_file(p, f"length file {text_path!r}", input_files.MAX_DATA_BYTES)
    suffix = p.suffix.lower()
    if suffix in (".csv", ".parquet"):
        import pandas as pd  # pandas: ~0.3 s to import, only when a CSV or Parquet file is read

        try:
            df = pd.read_csv(p) if suffix == ".csv" else pd.read_parquet(p)
        except Exception as err:  # noqa: BLE001 (pandas raises many kinds)
            raise UserInputError(f"cannot read {p.name}: {err}") from None
        col = column or next((c for c in LENGTH_COLUMNS if c in df.columns), None)
        if col is None or col not in df.columns:
            raise UserInputError(f"{p.name}: no length column; name one with #COLUMN or use one of "
                                 f"{', '.join(LENGTH_COLUMNS)} (columns: {', '.join(map(str, df.columns))})")
        values = list(df[col])
        where = [f"{p.name} row {i + 2}" for i in range(len(values))]
    else:
        try:
            # a byte-order mark is no part of line 1
            lines = input_files.read_text(p, f"length file {text_path!r}", "utf-8-sig",
                                          input_files.MAX_DATA_BYTES).splitlines()
        except UnicodeDecodeError as err:
            raise UserInputError(f"length file {p.name} is not UTF-8 text (byte {err.start})") from None
        values, where = [], []
        for i, line in enumerate(lines, 1):
            if not line.strip():
                continue
            if suffix == ".jsonl":
                obj = typed_json.loads_checked(line, f"{p.name} line {i}")
                ids = obj.get("input_ids") if isinstance(obj, dict) else obj
                if not isinstance(ids, list):
                    raise UserInputError(f"{p.name} line {i}: expected a token-id list or {{'input_ids': [...]}}")
                bad = next((t for t in ids if isinstance(t, bool) or not isinstance(t, int) or t < 0), None)
                if bad is not None or (ids and max(ids) >= 2**63):
                    shown = line.strip() if bad is None else typed_json.written(bad)
                    raise UserInputError(f"{p.name} line {i}: token ids must be integers from 0 to 2**63 - 1, "
                                         f"got {shown[:80]}")
                values.append(len(ids))
            else:
                values.append(line.split())
            where.append(f"{p.name} line {i}")
    steps = []
    for value, place in zip(values, where):
        steps.append(tuple(_positive_length(v, place) for v in (value if isinstance(value, list) else [value])))
    if not steps:
        raise UserInputError(f"length file {p.name} holds no lengths")
    return steps


def _positive_length(value, place: str) -> int:
    """A length in [1, MAX_LENGTH] read exactly: a decimal integer (`512`, `1e3` and `512.0` are accepted only
    where they are whole numbers, compared without going through float, so `9007199254740993` stays itself),
    checked before any arithmetic; the error shows the value as written. Written in ASCII digits: Decimal's other
    syntax (`1_000`, digits of other scripts such as `٥١٢`) is refused, as `--documents` refuses it."""
    text = value if isinstance(value, str) else repr(value)
    plain = text.isascii() and "_" not in text
    try:
        number = Decimal(text.strip()) if plain and not isinstance(value, bool) else Decimal("NaN")
    except InvalidOperation:
        number = Decimal("NaN")
    if not number.is_finite() or number != number.to_integral_value() or not 0 < number <= MAX_LENGTH:
        raise UserInputError(f"{place}: length must be a positive integer (at most 2**40), got {text}")
    return int(number)

