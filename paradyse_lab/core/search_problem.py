"""`SearchProblem`: what a solver sees, arrays over decisions l and strategy options o (docs/design.md section 4).

A plan picks one option per decision (a block, or one sub-layer at sub-layer granularity). For a plan pi:

    time(pi) = fixed_time_s + sum_l time_s[l, pi_l] + sum_{(a, b) in edges} switch_s[pi_a, pi_b]
    peak(pi) = fixed_bytes + sum_l kept_bytes[l, pi_l] + max(fixed_transient_bytes, max_l transient_bytes[l, pi_l])

and pi is feasible when peak(pi) <= budget_bytes. Memory is integer bytes and checked exactly.

JSON form (`paradyse-lab solvers solve --problem FILE.json`; `to_json` writes it):

    {"layers": L, "options": [str] * O,
     "time_s": [[float] * O] * L, "kept_bytes": [[int] * O] * L, "transient_bytes": [[int] * O] * L,
     "switch_s": [[float] * O] * O, "fixed_bytes": int, "budget_bytes": int}

`switch_s` is optional (zeros). Extensions, all optional: `fixed_transient_bytes` (default 0: the working
memory of the embedding / loss, a floor under the max-transient term), `fixed_time_s` (default 0: time of
the parts no decision covers, added to every plan), `edges` (default the chain [[0, 1], [1, 2], ...]: the
pairs of decisions where a switch is charged), `labels` (default L0, L1, ...). An optional field is left out
for its default, never given as null.

The constructor checks every value once, whatever built it (`from_dict` only checks the document's field
names and its `layers` count): errors name the field and the allowed values. A cost model is lowered into a
problem by `paradyse_lab.costmodel.lowering.problem_from_cost_model`.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from dataclasses import InitVar, dataclass, field
from pathlib import Path

import numpy as np

from paradyse_lab.core.problem_checks import INT64_MAX, finite_seconds, is_int, matrix, nonneg_int
from paradyse_lab.errors import UserInputError, require_positive_int
from paradyse_lab.files import input_files
from paradyse_lab.files.atomic_write import write_text_atomic

JSON_FIELDS = ("layers", "options", "time_s", "kept_bytes", "transient_bytes", "switch_s", "fixed_bytes",
               "budget_bytes", "fixed_transient_bytes", "fixed_time_s", "edges", "labels")
REQUIRED_FIELDS = ("layers", "options", "time_s", "kept_bytes", "transient_bytes", "fixed_bytes", "budget_bytes")
OPTIONAL_FIELDS = ("switch_s", "fixed_transient_bytes", "fixed_time_s", "edges", "labels")
"""May be left out (module docstring gives the defaults), never given as null."""


@dataclass(frozen=True, eq=False)
class SearchProblem:
    """One strategy search: L decisions x O options, the switch costs and the memory budget."""

    options: tuple[str, ...]
    """Option names (`NAME` or `NAME+recompute` when built from the catalog)."""
    time_s: np.ndarray
    """[L, O] float64: forward + backward seconds of decision l under option o."""
    kept_bytes: np.ndarray
    """[L, O] int64: activation bytes kept for the backward pass."""
    transient_bytes: np.ndarray
    """[L, O] int64: bytes alive only while decision l runs."""
    switch_s: np.ndarray
    """[O, O] float64: seconds charged on an edge (a, b) whose decisions pick o then o'; zero diagonal."""
    fixed_bytes: int
    """Bytes every plan holds: model states of all layers, embedding / head states and activations."""
    budget_bytes: int
    """Device memory a plan's peak must not exceed."""
    fixed_transient_bytes: int = 0
    """Working memory outside the decisions (loss backward): a floor under the max-transient term."""
    fixed_time_s: float = 0.0
    """Seconds outside the decisions (embedding, head), added to every plan's time."""
    edges: tuple[tuple[int, int], ...] | None = None
    """Pairs of decisions where a switch is charged; None means the chain (0, 1), (1, 2), ..."""
    labels: tuple[str, ...] = ()
    """One label per decision (`L3`, `L3.attn`); default L0, L1, ..."""
    dropped: dict = field(default_factory=dict)
    """Options left out because their shapes do not split: name -> reason."""
    host_bytes: np.ndarray | None = field(default=None, compare=False)
    """[L, O] int64 or None: activation bytes each choice moves to host memory (`+offload`). Information for the
    memory breakdown, not a constraint: a problem offers offload only where it keeps every plan within the host
    memory (`host_limited`)."""
    layers: InitVar[int | None] = None
    """L when the caller states it (the JSON form's `layers`): time_s must then have L rows."""

    def __post_init__(self, layers: int | None = None):
        set_ = object.__setattr__
        if not isinstance(self.options, (list, tuple)) or not all(isinstance(o, str) for o in self.options):
            raise UserInputError("options must be a list of strings")
        set_(self, "options", tuple(self.options))
        set_(self, "_option_indices", {name: i for i, name in enumerate(self.options)})
        O = len(self.options)
        if O == 0 or len(set(self.options)) != O:
            raise UserInputError(f"options must be a non-empty list of distinct names, got {list(self.options)}")
        set_(self, "time_s", matrix("time_s", self.time_s, "number", layers, O))
        L = self.time_s.shape[0]
        if L == 0:
            raise UserInputError("layers must be a positive integer, got 0")
        set_(self, "kept_bytes", matrix("kept_bytes", self.kept_bytes, "int", L, O))
        set_(self, "transient_bytes", matrix("transient_bytes", self.transient_bytes, "int", L, O))
        sw = np.zeros((O, O)) if self.switch_s is None else self.switch_s
        set_(self, "switch_s", matrix("switch_s", sw, "number", O, O))
        if np.diag(self.switch_s).any():
            raise UserInputError("switch_s must have a zero diagonal (keeping an option costs no switch)")
        for name in ("fixed_bytes", "budget_bytes", "fixed_transient_bytes"):
            set_(self, name, nonneg_int(name, getattr(self, name)))
        set_(self, "fixed_time_s", finite_seconds("fixed_time_s", self.fixed_time_s))
        chain = tuple((i, i + 1) for i in range(L - 1))
        if self.edges is not None and not (isinstance(self.edges, (list, tuple)) and all(
                isinstance(e, (list, tuple)) and len(e) == 2 and all(is_int(x) for x in e) for e in self.edges)):
            raise UserInputError("edges must be a list of [int, int] pairs")
        edges = chain if self.edges is None else tuple((int(a), int(b)) for a, b in self.edges)
        for a, b in edges:
            if not (0 <= a < L and 0 <= b < L) or a == b:
                raise UserInputError(f"edges: ({a}, {b}) must join two different decisions in 0..{L - 1}")
        set_(self, "edges", edges)
        ends = np.array(edges, dtype=np.int64).reshape(-1, 2).T  # [E, 2] -> [2, E]
        ends.setflags(write=False)
        set_(self, "_edge_ends", ends)
        if not isinstance(self.labels, (list, tuple)) or not all(isinstance(x, str) for x in self.labels):
            raise UserInputError("labels must be a list of strings")
        labels = tuple(self.labels) or tuple(f"L{i}" for i in range(L))
        if len(labels) != L:
            raise UserInputError(f"labels must hold {L} names, got {len(labels)}")
        set_(self, "labels", labels)
        self._check_totals()
        for arr in (self.time_s, self.kept_bytes, self.transient_bytes, self.switch_s):
            arr.setflags(write=False)

    def _check_totals(self) -> None:
        """The largest peak and time any plan can reach must stay exact int64 bytes and finite seconds."""
        worst_peak = (self.fixed_bytes + sum(int(x) for x in self.kept_bytes.max(axis=1))
                      + max(self.fixed_transient_bytes, int(self.transient_bytes.max())))
        if max(worst_peak, self.budget_bytes) > INT64_MAX:
            raise UserInputError(f"fixed_bytes + kept_bytes + transient_bytes can reach {worst_peak:.3e} bytes, past "
                                 f"2**63 - 1 (byte counts must sum below {INT64_MAX})")
        with np.errstate(over="ignore"):
            worst_time = (self.fixed_time_s + float(self.time_s.max(axis=1).sum())
                          + len(self.edges) * float(self.switch_s.max()))
        if not math.isfinite(worst_time):
            raise UserInputError("time_s, switch_s and fixed_time_s sum to infinity; give seconds with finite sums")

    # ----- shape and plan evaluation -----------------------------------------------------------------
    @property
    def num_decisions(self) -> int:
        """L: length of a plan."""
        return self.time_s.shape[0]

    @property
    def num_options(self) -> int:
        """O."""
        return len(self.options)

    @property
    def edge_ends(self) -> np.ndarray:
        """[2, E] read-only int64: the first and second decision of each edge."""
        return self._edge_ends

    @property
    def is_chain(self) -> bool:
        """Whether switches are charged exactly between consecutive decisions (what the DP needs)."""
        return self.edges == tuple((i, i + 1) for i in range(self.num_decisions - 1))

    @property
    def effective_transient(self) -> np.ndarray:
        """[L, O] max(transient_bytes, fixed_transient_bytes): what a decision adds to the max term."""
        return np.maximum(self.transient_bytes, self.fixed_transient_bytes)

    def option_index(self, name: str) -> int:
        """Index of an option name, or an error listing the names."""
        try:
            return self._option_indices[name]
        except (KeyError, TypeError):
            raise UserInputError(f"unknown option {name!r}; valid: {', '.join(self.options)}") from None

    def indices(self, plan: Sequence) -> np.ndarray:
        """A plan (option names or indices) as an int array of length L."""
        if len(plan) != self.num_decisions:
            raise UserInputError(f"a plan needs {self.num_decisions} entries, got {len(plan)}")
        if isinstance(plan, np.ndarray) and plan.dtype.kind in "iu":  # the solvers' own plans: no per-entry loop
            idx = plan.astype(np.int64)
        else:
            idx = np.array([self.option_index(p) if isinstance(p, str) else int(p) for p in plan], dtype=np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= self.num_options):
            raise UserInputError(f"plan indices must lie in 0..{self.num_options - 1}")
        return idx

    def names(self, plan: Sequence[int]) -> list[str]:
        """A plan of indices as option names."""
        return [self.options[int(i)] for i in plan]

    def time_of(self, plan: Sequence) -> float:
        """Predicted seconds of a plan, switch costs between the decisions of each edge included."""
        idx = self.indices(plan)
        t = self.fixed_time_s + float(self.time_s[np.arange(idx.size), idx].sum())
        if self.edges:
            a, b = self.edge_ends
            t += float(self.switch_s[idx[a], idx[b]].sum())
        return t

    def peak_bytes(self, plan: Sequence) -> int:
        """fixed + sum of kept + max(fixed transient, max of transient), exact integers."""
        idx = self.indices(plan)
        rows = np.arange(idx.size)
        kept = int(self.kept_bytes[rows, idx].sum())  # int64: exact below 9.2e18 bytes
        transient = max(self.fixed_transient_bytes, int(self.transient_bytes[rows, idx].max()))
        return self.fixed_bytes + kept + transient

    def is_feasible(self, plan: Sequence) -> bool:
        """Peak within the budget."""
        return self.peak_bytes(plan) <= self.budget_bytes

    def uniform_costs(self) -> tuple[np.ndarray, np.ndarray]:
        """[O] time and [O] exact peak of each option used on every decision (switch diagonal is zero): what
        the heuristic ranks options by and what a restart policy picks the next lighter strategy from."""
        times = self.fixed_time_s + self.time_s.sum(axis=0)
        peaks = (self.fixed_bytes + self.kept_bytes.sum(axis=0)
                 + np.maximum(self.transient_bytes.max(axis=0), self.fixed_transient_bytes))
        return times, peaks

    # ----- JSON --------------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        """The JSON form (module docstring)."""
        out = {
            "layers": self.num_decisions, "options": list(self.options), "time_s": self.time_s.tolist(),
            "kept_bytes": self.kept_bytes.tolist(), "transient_bytes": self.transient_bytes.tolist(),
            "switch_s": self.switch_s.tolist(), "fixed_bytes": self.fixed_bytes, "budget_bytes": self.budget_bytes,
            "fixed_transient_bytes": self.fixed_transient_bytes, "fixed_time_s": self.fixed_time_s,
            "labels": list(self.labels),
        }
        if not self.is_chain:
            out["edges"] = [list(e) for e in self.edges]
        return out

    def to_json(self, path: str | Path | None = None) -> str:
        """The JSON text; also written to `path` when given."""
        text = json.dumps(self.to_dict())
        if path is not None:
            write_text_atomic(path, text + "\n")
        return text

    @classmethod
    def from_dict(cls, data, source: str = "problem") -> SearchProblem:
        """Read the JSON form; errors name the field (and `source`). The document's field names and `layers`
        are checked here, every value by the constructor."""
        try:
            if not isinstance(data, dict):
                raise UserInputError("the top level must be a JSON object")
            unknown = sorted(set(data) - set(JSON_FIELDS))
            if unknown:
                raise UserInputError(f"unknown field {unknown[0]!r}; valid: {', '.join(JSON_FIELDS)}")
            missing = [f for f in REQUIRED_FIELDS if f not in data]
            if missing:
                raise UserInputError(f"missing field {missing[0]!r} (required: {', '.join(REQUIRED_FIELDS)})")
            null = [f for f in OPTIONAL_FIELDS if f in data and data[f] is None]
            if null:
                raise UserInputError(f"{null[0]} is null; leave the field out for its default or give a value "
                                     f"(optional fields: {', '.join(OPTIONAL_FIELDS)})")
            return cls(
                options=data["options"], time_s=data["time_s"], kept_bytes=data["kept_bytes"],
                transient_bytes=data["transient_bytes"], switch_s=data.get("switch_s"),
                fixed_bytes=data["fixed_bytes"], budget_bytes=data["budget_bytes"],
                fixed_transient_bytes=data.get("fixed_transient_bytes", 0),
                fixed_time_s=data.get("fixed_time_s", 0.0), edges=data.get("edges"), labels=data.get("labels", []),
                layers=require_positive_int("layers", data["layers"]),
            )
        except UserInputError as err:
            raise UserInputError(f"{source}: {err}") from None

    @classmethod
    def from_json(cls, path: str | Path) -> SearchProblem:
        """Read a problem file."""
        path = Path(path)
        try:
            data = json.loads(input_files.read_text(path, f"problem file {str(path)!r}"))
        except UserInputError:
            raise
        except FileNotFoundError:
            raise UserInputError(f"problem file {str(path)!r} not found") from None
        except (OSError, UnicodeDecodeError) as err:
            raise UserInputError(f"cannot read problem file {str(path)!r}: {err}") from None
        except json.JSONDecodeError as err:
            raise UserInputError(f"{path.name}: not valid JSON: {err}") from None
        except RecursionError:
            raise UserInputError(f"{path.name}: JSON nested too deeply (a problem is an object of arrays)") from None
        except ValueError:  # json's int() beyond sys.get_int_max_str_digits()
            raise UserInputError(f"{path.name}: not valid JSON Python can read (an integer of more than "
                                 f"{sys.get_int_max_str_digits():,} digits)") from None
        return cls.from_dict(data, source=path.name)

    def __repr__(self) -> str:
        return (f"SearchProblem({self.num_decisions} decisions x {self.num_options} options, "
                f"budget {self.budget_bytes} B, fixed {self.fixed_bytes} B)")
