"""`SearchProblem`: what a solver sees, arrays over decisions l and strategy options o (DESIGN.md section 4).

A plan picks one option per decision (a block, or one sub-layer at sub-layer granularity). For a plan pi:

    time(pi) = fixed_time_s + sum_l time_s[l, pi_l] + sum_{(a, b) in edges} switch_s[pi_a, pi_b]
    peak(pi) = fixed_bytes + sum_l kept_bytes[l, pi_l] + max(fixed_transient_bytes, max_l transient_bytes[l, pi_l])

and pi is feasible when peak(pi) <= budget_bytes. Memory is integer bytes and checked exactly.

JSON form (`paradyse-lab solve --problem FILE.json`; `to_json` writes it):

    {"layers": L, "options": [str] * O,
     "time_s": [[float] * O] * L, "kept_bytes": [[int] * O] * L, "transient_bytes": [[int] * O] * L,
     "switch_s": [[float] * O] * O, "fixed_bytes": int, "budget_bytes": int}

`switch_s` is optional (zeros). Extensions, all optional: `fixed_transient_bytes` (default 0: the working
memory of the embedding / loss, a floor under the max-transient term), `fixed_time_s` (default 0: time of
the parts no decision covers, added to every plan), `edges` (default the chain [[0, 1], [1, 2], ...]: the
pairs of decisions where a switch is charged), `labels` (default L0, L1, ...).

`from_cost_model` builds a problem from a `LayerGraph` and a cost model: at block granularity a block's
time and kept bytes are its attention's plus its MLP's, its transient the larger of the two. Options whose
shapes do not split (the cost model raises `UserInputError`, e.g. s % 2p for a causal ring) are dropped
from the problem and listed in `dropped` with the reason, so solvers never see an unusable option.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from paradyse_lab.errors import UserInputError, require_positive_int
from paradyse_lab.layer_graph import LayerGraph
from paradyse_lab.strategies import CATALOG, StrategyOption
from paradyse_lab.strategies import options as default_options

JSON_FIELDS = ("layers", "options", "time_s", "kept_bytes", "transient_bytes", "switch_s", "fixed_bytes",
               "budget_bytes", "fixed_transient_bytes", "fixed_time_s", "edges", "labels")
INT64_MAX = 2**63 - 1
"""Byte counts are exact int64."""
REQUIRED_FIELDS = ("layers", "options", "time_s", "kept_bytes", "transient_bytes", "fixed_bytes", "budget_bytes")

def layout_switch_s(cost_model, a: StrategyOption, b: StrategyOption, seq_len: int, batch: int = 1) -> float:
    """Seconds to move the activation from a's layout to b's at one boundary, forward and backward.

    Zero when both read the same layout (`Strategy.layout`: every catalog strategy reads the unified one);
    otherwise one all-to-all of the [b, s/p, h] activation each way.
    """
    if CATALOG[a.strategy].layout == CATALOG[b.strategy].layout:
        return 0.0
    from paradyse_lab.costmodel import CollectiveCall

    m = cost_model.model
    act = batch * seq_len // cost_model.p * m.hidden * m.dtype_bytes  # [b, s/p, h] bytes
    return 2 * cost_model.collective_s(CollectiveCall("all_to_all", act, cost_model.p))


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

    def __post_init__(self):
        set_ = object.__setattr__
        set_(self, "options", tuple(str(o) for o in self.options))
        O = len(self.options)
        if O == 0 or len(set(self.options)) != O:
            raise UserInputError(f"options must be a non-empty list of distinct names, got {list(self.options)}")
        set_(self, "time_s", _array("time_s", self.time_s, np.float64, None, O))
        L = self.time_s.shape[0]
        if L == 0:
            raise UserInputError("layers must be a positive integer, got 0")
        set_(self, "kept_bytes", _array("kept_bytes", self.kept_bytes, np.int64, L, O))
        set_(self, "transient_bytes", _array("transient_bytes", self.transient_bytes, np.int64, L, O))
        sw = np.zeros((O, O)) if self.switch_s is None else self.switch_s
        set_(self, "switch_s", _array("switch_s", sw, np.float64, O, O))
        if np.diag(self.switch_s).any():
            raise UserInputError("switch_s must have a zero diagonal (keeping an option costs no switch)")
        for name in ("fixed_bytes", "budget_bytes", "fixed_transient_bytes"):
            set_(self, name, _nonneg_int(name, getattr(self, name)))
        ft = self.fixed_time_s
        if isinstance(ft, bool) or not isinstance(ft, (int, float)) or not math.isfinite(ft) or ft < 0:
            raise UserInputError(f"fixed_time_s must be a finite number >= 0, got {ft!r}")
        set_(self, "fixed_time_s", float(ft))
        chain = tuple((i, i + 1) for i in range(L - 1))
        edges = chain if self.edges is None else tuple((int(a), int(b)) for a, b in self.edges)
        for a, b in edges:
            if not (0 <= a < L and 0 <= b < L) or a == b:
                raise UserInputError(f"edges: ({a}, {b}) must join two different decisions in 0..{L - 1}")
        set_(self, "edges", edges)
        ends = np.array(edges, dtype=np.int64).reshape(-1, 2).T  # [2, E]
        ends.setflags(write=False)
        set_(self, "_edge_ends", ends)
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
            return self.options.index(name)
        except ValueError:
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
            from paradyse_lab.atomic_write import write_text_atomic

            write_text_atomic(path, text + "\n")
        return text

    @classmethod
    def from_dict(cls, data, source: str = "problem") -> SearchProblem:
        """Read the JSON form; errors name the field (and `source`)."""
        try:
            if not isinstance(data, dict):
                raise UserInputError("the top level must be a JSON object")
            unknown = sorted(set(data) - set(JSON_FIELDS))
            if unknown:
                raise UserInputError(f"unknown field {unknown[0]!r}; valid: {', '.join(JSON_FIELDS)}")
            missing = [f for f in REQUIRED_FIELDS if f not in data]
            if missing:
                raise UserInputError(f"missing field {missing[0]!r} (required: {', '.join(REQUIRED_FIELDS)})")
            L = require_positive_int("layers", data["layers"])
            opts = data["options"]
            if not isinstance(opts, list) or not all(isinstance(o, str) for o in opts):
                raise UserInputError("options must be a list of strings")
            O = len(opts)
            arrays = {}
            for name, rows, kind in (("time_s", L, "number"), ("kept_bytes", L, "int"),
                                     ("transient_bytes", L, "int"), ("switch_s", O, "number")):
                if name in data:
                    arrays[name] = _rows(name, data[name], rows, O, kind)
            edges = data.get("edges")
            if edges is not None and not (isinstance(edges, list)
                                          and all(isinstance(e, list) and len(e) == 2
                                                  and all(_is_int(x) for x in e) for e in edges)):
                raise UserInputError("edges must be a list of [int, int] pairs")
            labels = data.get("labels", [])
            if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
                raise UserInputError("labels must be a list of strings")
            return cls(
                options=tuple(opts), time_s=arrays["time_s"], kept_bytes=arrays["kept_bytes"],
                transient_bytes=arrays["transient_bytes"], switch_s=arrays.get("switch_s"),
                fixed_bytes=data["fixed_bytes"], budget_bytes=data["budget_bytes"],
                fixed_transient_bytes=data.get("fixed_transient_bytes", 0),
                fixed_time_s=data.get("fixed_time_s", 0.0),
                edges=None if edges is None else tuple(tuple(e) for e in edges), labels=tuple(labels),
            )
        except UserInputError as err:
            raise UserInputError(f"{source}: {err}") from None

    @classmethod
    def from_json(cls, path: str | Path) -> SearchProblem:
        """Read a problem file."""
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise UserInputError(f"problem file {str(path)!r} not found") from None
        except (OSError, UnicodeDecodeError) as err:
            raise UserInputError(f"cannot read problem file {str(path)!r}: {err}") from None
        except json.JSONDecodeError as err:
            raise UserInputError(f"{path.name}: not valid JSON: {err}") from None
        except RecursionError:
            raise UserInputError(f"{path.name}: JSON nested too deeply (a problem is an object of arrays)") from None
        return cls.from_dict(data, source=path.name)

    # ----- from a model ------------------------------------------------------------------------------
    @classmethod
    def from_cost_model(cls, graph: LayerGraph, cost_model, seq_len: int, batch: int = 1,
                        budget_bytes: int | None = None, options: Sequence[StrategyOption] | None = None,
                        recompute: bool = False,
                        switch_cost: Callable[[StrategyOption, StrategyOption], float] | None = None,
                        ) -> SearchProblem:
        """The problem of `graph` at (seq_len, batch) under `cost_model`.

        options: default every usable strategy (and, with `recompute`, each recomputed too).
        budget_bytes: default the cluster's device memory. switch_cost(a, b): seconds per boundary;
        default `layout_switch_s` (zero between catalog strategies, which share the unified layout).
        Model states go to `fixed_bytes`; should an option hold more states than the leanest one, the
        excess is charged to its kept bytes, so the peak stays exact.
        """
        require_positive_int("seq_len", seq_len)
        require_positive_int("batch", batch)
        if cost_model.model != graph.model:
            raise ValueError("cost_model and graph describe different models")
        opts = list(options) if options is not None else list(default_options(recompute=recompute))
        if budget_bytes is None:
            budget_bytes = cost_model.cluster.memory_bytes
        kinds = {}  # (kind, option name) -> SubLayerCost
        dropped, usable = {}, []
        for o in opts:
            try:
                for kind in ("attention", "mlp"):
                    kinds[kind, o.name] = cost_model.sublayer(kind, o, seq_len, batch)
                usable.append(o)
            except UserInputError as err:
                dropped[o.name] = str(err)
        if not usable:
            reasons = "; ".join(f"{n}: {r}" for n, r in dropped.items())
            raise UserInputError(f"no strategy option can run seq_len {seq_len}: {reasons}")
        nodes = [graph.graph.nodes[n] for n in graph.sublayer_nodes()]
        L, O = graph.num_decisions, len(usable)
        time_s, kept, transient = np.zeros((L, O)), np.zeros((L, O), np.int64), np.zeros((L, O), np.int64)
        fixed_states = 0
        for node in nodes:
            d, kind = node["decision"], node["kind"]
            costs = [kinds[kind, o.name] for o in usable]
            lean = min(c.model_state_bytes for c in costs)
            fixed_states += lean
            for j, c in enumerate(costs):
                time_s[d, j] += c.time_s
                kept[d, j] += c.kept_bytes + c.model_state_bytes - lean
                transient[d, j] = max(transient[d, j], c.transient_bytes)
        fx = cost_model.fixed(seq_len, batch)
        if switch_cost is None:
            def switch_cost(a, b):
                return layout_switch_s(cost_model, a, b, seq_len, batch)
        switch = np.array([[0.0 if a == b else switch_cost(a, b) for b in usable] for a in usable])
        return cls(
            options=tuple(o.name for o in usable), time_s=time_s, kept_bytes=kept, transient_bytes=transient,
            switch_s=switch, fixed_bytes=fixed_states + fx.model_state_bytes + fx.kept_bytes,
            budget_bytes=int(budget_bytes), fixed_transient_bytes=fx.transient_bytes, fixed_time_s=fx.time_s,
            edges=tuple(graph.decision_edges()), labels=tuple(d.label for d in graph.decisions), dropped=dropped,
        )

    def __repr__(self) -> str:
        return (f"SearchProblem({self.num_decisions} decisions x {self.num_options} options, "
                f"budget {self.budget_bytes} B, fixed {self.fixed_bytes} B)")


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _nonneg_int(field_name: str, value) -> int:
    if isinstance(value, (np.integer,)):
        value = int(value)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not _is_int(value) or value < 0 or value > INT64_MAX:
        raise UserInputError(f"{field_name} must be an integer from 0 to 2**63 - 1, got {value!r}")
    return value


def _rows(name: str, value, rows: int, cols: int, kind: str) -> np.ndarray:
    """A JSON list of `rows` lists of `cols` numbers (ints when kind is 'int'), checked cell by cell."""
    what = f"{name} must be a list of {rows} rows of {cols} {'integers' if kind == 'int' else 'numbers'}"
    if not isinstance(value, list) or len(value) != rows:
        raise UserInputError(f"{what} (got {len(value) if isinstance(value, list) else type(value).__name__} rows)")
    for i, row in enumerate(value):
        if not isinstance(row, list) or len(row) != cols:
            raise UserInputError(f"{what} (row {i} has {len(row) if isinstance(row, list) else 'no list'})")
        for j, x in enumerate(row):
            ok = _is_int(x) or (isinstance(x, float) and (kind != "int" or x.is_integer()))
            if kind == "int" and ok and not -INT64_MAX <= x <= INT64_MAX:
                raise UserInputError(f"{name}[{i}][{j}] is {x!r}, past 2**63 - 1 bytes")
            if not ok:
                raise UserInputError(f"{what} ({name}[{i}][{j}] is {x!r})")
    return np.array(value, dtype=np.int64 if kind == "int" else np.float64).reshape(rows, cols)


def _array(name: str, value, dtype, rows: int | None, cols: int) -> np.ndarray:
    """`value` as a read-only copy of shape [rows, cols], finite and >= 0."""
    arr = np.array(value, dtype=dtype, copy=True)
    if arr.ndim != 2 or arr.shape[1] != cols or (rows is not None and arr.shape[0] != rows):
        want = f"[{rows if rows is not None else 'L'}, {cols}]"
        raise UserInputError(f"{name} must have shape {want}, got {list(arr.shape)}")
    if not np.all(np.isfinite(arr)) or (arr < 0).any():
        raise UserInputError(f"{name} must hold finite values >= 0")
    return arr
