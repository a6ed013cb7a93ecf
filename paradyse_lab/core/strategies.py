"""The strategy catalog: the parallel strategies of ParaDySe (docs/paper.md section 2) and their rules.

Every usable strategy shards the sequence over the p GPUs of the node and reads the unified layout
(docs/paper.md section 3), so a plan may switch strategy at any layer boundary without moving bytes.
Activation recomputation of a layer is an orthogonal option, and so are the long-context techniques: a
`StrategyOption` is a strategy plus up to four flags, written `NAME[+recompute][+tiled][+headchunk][+offload]`:
`+recompute` keeps only each sub-layer's input, `+tiled` runs the MLP over chunks of the sequence with
recomputation (ALST's TiledMLP), `+headchunk` runs the attention over chunks of heads so that one chunk's
head-sharded q, k, v and output are live at a time (UPipe's idea; only where the catalog entry has
`head_chunks`), `+offload` moves what each sub-layer keeps to host memory until its backward
(docs/tiled_mlp_and_offload.md and docs/head_chunked_attention.md say what each keeps, moves and costs).

The catalog entry is the one home of a strategy: its name, label, abbreviation, colour, layout, the key of
its cost-model schedule (`SCHEDULES`) and the name of its runtime module
(`STRATEGY_MODULES` imports it; this layer never imports the runtime). Adding a strategy
is one entry here, one schedule function and one runtime module. See them with `paradyse-lab catalog strategies`.

Grouped-query attention (kv_heads K/V heads shared by heads / kv_heads query heads each), one rule for the
catalog, the cost model and the runtime:
- megatron_cz (ring attention): any kv_heads dividing heads; the ring passes only the K/V heads, so its
  K/V traffic (and dK/dV) scales by kv_heads / heads.
- ulysses_z: heads % p == 0 and (kv_heads % p == 0 or p % kv_heads == 0). When kv_heads < p each K/V head
  is replicated p / kv_heads times before the all-to-all (as DeepSpeed-Ulysses does), so the K/V
  all-to-all carries max(kv_heads, p) heads' worth of bytes; the replicas' gradients are summed after the
  all-to-all back.
- megatron_ts and metp (tensor-parallel head split of the weights): kv_heads % p == 0 (Megatron-LM's rule
  that query groups divide by the tensor-parallel size).
- ulysses_ring:a (Ulysses x ring, two-dimensional): the replicate rule with the head degree a in place of p:
  heads % a == 0 and (kv_heads % a == 0 or a % kv_heads == 0); a must divide p. Where that rule fails, its head
  groups split the heads unevenly (`head_split` at a) when a < p (at a = p that is ulysses_uneven), heads >= a,
  and every member's query heads read whole groups of K/V heads evenly (always without GQA).
- ulysses_uneven (Ulysses with an uneven head split): any kv_heads dividing heads and heads >= p; each rank
  gets ceil or floor of heads / p query heads and the K/V heads they read (`head_split`). It is offered only
  where ulysses_z's rules fail: where they hold it would split exactly as ulysses_z, the same strategy twice.
- megatron_cp:a (tensor x context parallel, two-dimensional): the split rule with the tensor degree a in place of
  p: heads % a == 0 and kv_heads % a == 0; a must divide p (no uneven split: Megatron's head split is even).
Every strategy also needs kv_heads * head_dim % p == 0: the K and V rows are stored as 1/p shards.
These rules bind attention sub-layers only: a plan that gives each sub-layer its own
strategy may run megatron_ts or metp on the MLPs whatever kv_heads is (`Strategy.violation(..., kind)`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache, cached_property

from paradyse_lab.core.head_split import head_split
from paradyse_lab.core.model_spec import ModelSpec
from paradyse_lab.errors import UserInputError, unknown_name

RECOMPUTE_SUFFIX = "+recompute"
TILED_SUFFIX = "+tiled"
OFFLOAD_SUFFIX = "+offload"
HEADCHUNK_SUFFIX = "+headchunk"
OPTION_FLAGS = ("recompute", "tiled", "headchunk", "offload")
"""The flags of a `StrategyOption`, in the order its name writes them (`NAME+recompute+tiled+headchunk+offload`)."""
UNIFIED_LAYOUT = "unified"
"""The layout every catalog strategy reads and writes between layers: [b, s/p, h] per rank in zig-zag chunk
order."""


def layout_unit(p: int) -> int:
    """Tokens a sequence length must be a multiple of in the unified layout on p ranks: 2p, 1 when p = 1.

    The sequence is cut into 2p zig-zag chunks and rank r holds chunks r and 2p-1-r. At p = 1 the one rank
    holds both chunks in natural order, which is the whole sequence whatever its length, and there is no ring
    to balance, so any length runs (the runtime's `check_length` accepts it and its ring attention is one local
    causal block). The runtime checks lengths against this unit and the simulator pads each step to it.
    """
    return 1 if p == 1 else 2 * p


def pad_to_unit(tokens: int, unit: int) -> int:
    """`tokens` rounded up to a multiple of `unit` (a step's length after its padding)."""
    return -(-int(tokens) // unit) * unit


def step_length(tokens: int, unit: int, cap: int | None = None) -> int:
    """The length of a step of `tokens` tokens, one rule for `simulate` and `train`: padded up to the layout
    unit (`pad_to_unit`); with `cap` (the model's positions or --max-len), at most `cap` rounded down to the
    unit (the tokens beyond are cut), never less than one unit. The padding carries no loss."""
    longest = pad_to_unit(tokens, unit)
    return longest if cap is None else min(longest, max(unit, cap // unit * unit))


@dataclass(frozen=True)
class Strategy:
    """One parallel strategy of the catalog."""

    name: str
    """Catalog name used everywhere (plans, CLI, CSV)."""
    paper_name: str
    """The name ParaDySe uses; the label of figures and REPORT.md."""
    attention: str
    """How attention is parallelised."""
    mlp: str
    """How the MLP and the linear weights are parallelised."""
    splits_heads: bool
    """Whether attention splits heads (and KV heads) over the p ranks."""
    ring_attention: bool
    """Whether K/V blocks travel around a ring (causal rings use the zig-zag chunk order: s % 2p == 0)."""
    kv_heads_rule: str = "any"
    """Grouped-query attention's K/V heads (`KV_HEADS_RULES`): 'split' (kv_heads % p == 0), 'replicate'
    (kv_heads % p == 0 or p % kv_heads == 0) or 'any'."""
    usable: bool = True
    """False for strategies the toolkit lists but never plans with."""
    unusable_reason: str = ""
    """Why a strategy is not usable."""
    abbreviation: str = ""
    """Two letters for compact plans (the `train` log: `TS,TS,ME+r`)."""
    color: str = ""
    """Matplotlib colour of the strategy in figures."""
    layout: str = UNIFIED_LAYOUT
    """Tensor layout it reads and writes between layers; a switch between two layouts pays a re-layout."""
    schedule: str = ""
    """Key of its per-rank work in `paradyse_lab.costmodel.strategy_work.SCHEDULES`."""
    runtime_module: str = ""
    """Module implementing it in the runtime (its `ATTENTION` and `MLP`), resolved by `ParallelGPT`."""
    head_chunks: str = ""
    """'yes' when its attention can run one chunk of heads at a time (`+headchunk`; the runtime module then has
    `HEAD_CHUNKED_ATTENTION`); otherwise why not, the sentence a refused `+headchunk` option names."""
    head_degree: int = 0
    """Two-dimensional strategies: the ranks a of each head-parallel (all-to-all) group of the p = a x b split,
    the other b = p / a ranks forming the ring; 0 for the one-dimensional strategies."""
    uneven_groups: bool = False
    """Two-dimensional strategies whose head groups may split the heads unevenly where the head degree a does not
    divide them (Ulysses x ring); Megatron's tensor-parallel split (megatron_cp) is even only."""
    uneven_heads: bool = False
    """Whether its attention splits the heads unevenly (`head_split`: ceil or floor of heads / p per rank), so
    that p need not divide the heads; such an entry is offered beside the two-dimensional ones (`TWO_D`)."""

    def __post_init__(self):
        missing = [f for f in ("abbreviation", "color", "schedule", "runtime_module") if not getattr(self, f)]
        if self.usable and missing:
            raise ValueError(f"usable strategy {self.name!r} needs {', '.join(missing)} in its catalog entry")
        if self.runtime_module and not self.runtime_module.startswith("paradyse_lab.runtime."):
            raise ValueError(f"strategy {self.name!r}: runtime_module {self.runtime_module!r} is not a module of "
                             "runtime/ (the only layer that may import torch)")

    def check(self, model: ModelSpec, p: int, seq_len: int, kind: str | None = None) -> None:
        """Raise `UserInputError` naming the violated constraint if `model` at `seq_len` cannot run on p GPUs
        (`kind`: one sub-layer, 'attention' or 'mlp'; None: the whole layer)."""
        problem = self.violation(model, p, seq_len, kind)
        if problem:
            raise UserInputError(f"{self.name}: {problem}")

    def violation(self, model: ModelSpec, p: int, seq_len: int, kind: str | None = None) -> str | None:
        """The first violated feasibility rule, as a sentence, or None when the shapes split. `kind`
        'attention' or 'mlp' asks about one sub-layer (a plan may give each its own strategy): the head and
        K/V-head rules bind attention only (an MLP has no heads), the MLP's width rule the MLP only; None
        asks about the whole layer."""
        if not self.usable:
            return f"not usable: {self.unusable_reason}"
        if self.head_degree and p % self.head_degree:
            valid = ", ".join(str(a) for a in HEAD_DEGREES if p % a == 0) or "none"
            return (f"p ({p}) must be divisible by the head degree a ({self.head_degree}) of the a x b split "
                    f"(catalog head degrees that divide it: {valid})")
        if self.schedule == "megatron_cp" and p % self.head_degree == 0 and exchange_shift(p, self.head_degree) is None:
            valid = ", ".join(str(a) for a in HEAD_DEGREES if p % a == 0 and exchange_shift(p, a) is not None)
            return (f"megatron_cp at p ({p}) = {self.head_degree} x {p // self.head_degree}: no cyclic weight exchange "
                    f"leaves every rank another's shard (degrees that split p = {p}: {valid or 'none'})")
        unit = layout_unit(p) if (self.ring_attention and model.causal) else p
        if seq_len % unit:
            why = " (zig-zag ring order for causal attention)" if unit == 2 * p else ""
            return f"sequence length {seq_len} must be divisible by {unit}{why}"
        if kind != "mlp":
            problem = self._attention_violation(model, p)
            if problem:
                return problem
        if kind != "attention" and model.ffn_hidden % p:
            return f"ffn_hidden ({model.ffn_hidden}) must be divisible by p ({p}) for the 1/p weight shard"
        if model.hidden % p:
            return f"hidden ({model.hidden}) must be divisible by p ({p}) for the 1/p weight shard"
        return None

    def _attention_violation(self, model: ModelSpec, p: int) -> str | None:
        """The heads and grouped-query rules of the module docstring (a two-dimensional strategy's with its head
        degree a in place of p)."""
        if self.uneven_heads:
            return _uneven_violation(model, p)
        even = self._even_heads_violation(model, p)
        if even and self.uneven_groups:  # Ulysses x ring may split the heads unevenly inside its head groups
            uneven = _uneven_group_violation(model, p, self.head_degree)
            if uneven:
                return f"{even}; split unevenly, {uneven}"
        elif even:
            return even
        if model.kv_hidden % p:
            return (f"kv_heads * head_dim ({model.kv_hidden}) must be divisible by p ({p}) for the 1/p weight "
                    "shard of K and V")
        return None


    def _even_heads_violation(self, model: ModelSpec, p: int) -> str | None:
        """The even head split's rules: the heads divisible by p (a two-dimensional strategy's: by its head degree
        a), under 'replicate' the K/V heads divisible by it or dividing it, under 'split' divisible by it."""
        n, what = (self.head_degree, "the head degree a") if self.head_degree else (p, "p")
        if self.splits_heads and model.heads % n:
            return f"heads ({model.heads}) must be divisible by {what} ({n})"
        kv = model.kv_heads
        if self.kv_heads_rule == "replicate" and kv % n and n % kv:
            return (f"kv_heads ({kv}) must be divisible by {what} ({n}) or divide it (each K/V head is then "
                    f"replicated {'a' if self.head_degree else 'p'} / kv_heads times before the all-to-all)")
        if self.kv_heads_rule == "split" and kv % n:
            return (f"kv_heads ({kv}) must be divisible by {what} ({n}): the tensor-parallel head split gives every "
                    "rank whole K/V heads (Megatron-LM's rule that query groups divide by the tensor-parallel size)")
        return None


def _uneven_group_violation(model: ModelSpec, p: int, a: int) -> str | None:
    """Why the head groups of a two-dimensional strategy cannot split the heads unevenly (`head_split` at a), or
    None: a below p (at a = p it is ulysses_uneven), a query head per member at least, and every member's query
    heads reading their K/V heads evenly (its ring attention runs them as one call)."""
    if a >= p:
        return f"a ({a}) must be below p ({p}): at a = p that is ulysses_uneven"
    if model.heads < a:
        return f"heads ({model.heads}) must be at least a ({a})"
    member = head_split(model.heads, model.kv_heads, a).uneven_kernel_rank()
    if member is not None:
        return (f"member {member}'s query heads would read their K/V heads unevenly (its ring attention runs one "
                "call over whole K/V groups)")
    return None


def _uneven_violation(model: ModelSpec, p: int) -> str | None:
    """The uneven-heads rules of the module docstring: one query head per rank at least, the K/V rows in 1/p
    shards, and ulysses_z's rules failing (where they hold, ulysses_z is the same split)."""
    if model.heads < p:
        return f"heads ({model.heads}) must be at least p ({p}): every rank holds one query head at least"
    if model.kv_hidden % p:
        return (f"kv_heads * head_dim ({model.kv_hidden}) must be divisible by p ({p}) for the 1/p weight "
                "shard of K and V")
    if CATALOG["ulysses_z"]._attention_violation(model, p) is None:
        return (f"heads ({model.heads}) and kv_heads ({model.kv_heads}) split evenly over p ({p}): that is "
                "ulysses_z, the same split (ulysses_uneven is offered where ulysses_z's rules fail)")
    return None


HEAD_DEGREES = (1, 2, 4, 8)
"""Head degrees a of the catalog's Ulysses x ring entries (`ulysses_ring:a`), each usable where a divides p:
every factorisation of an 8-GPU node (1 x 8, 2 x 4, 4 x 2, 8 x 1) and of the groups below it. The ends are the
1-D strategies' communication (a = 1 megatron_cz's ring, a = p ulysses_z's all-to-all) with ulysses_z's kept
set (the attention output in both layouts)."""
ULYSSES_RING_COLORS = {1: "#bcbd22", 2: "#9467bd", 4: "#8c564b", 8: "#e377c2"}
MEGATRON_CP_COLORS = {1: "#17becf", 2: "#7f7f7f", 4: "#aec7e8", 8: "#98df8a"}


def _ulysses_ring(a: int) -> Strategy:
    """The Ulysses x ring entry of head degree a (USP, Fang and Zhao, arXiv 2405.07719): all-to-all over heads
    inside groups of a consecutive ranks, zig-zag ring attention over the p / a groups, ZeRO-3 weights over p."""
    return Strategy(
        f"ulysses_ring:{a}", f"Ulysses{a}xRing",
        attention=f"all-to-all over heads in groups of {a} ranks, zig-zag ring attention over p/{a} groups",
        mlp="ZeRO-3: full weights all-gathered from 1/p shards, gradients reduce-scattered",
        splits_heads=True, ring_attention=True, kv_heads_rule="replicate",
        abbreviation=f"U{a}", color=ULYSSES_RING_COLORS[a], schedule="ulysses_ring",
        runtime_module="paradyse_lab.runtime.strategies.ulysses_ring", head_degree=a, uneven_groups=True,
    )


@cache
def exchange_shift(p: int, a: int) -> int | None:
    """megatron_cp's weight exchange on p = a x b ranks: the smallest shift c (rank i*b + j of the layer group
    holds p-block (i mod a) * b + (j + c) mod b, each rank sending its own shard once) under which no rank keeps
    its own shard when 1 < a < p; 0 when nothing is exchanged (a = 1 or a = p); None when no shift works (e.g.
    p = 6, a = 2), where megatron_cp cannot run. Every power-of-two split has one."""
    b = p // a
    if a in (1, p):
        return 0
    for c in range(b):
        if all(j * a + i != i * b + (j + c) % b for i in range(a) for j in range(b)):
            return c
    return None


def _megatron_cp(a: int) -> Strategy:
    """The tensor x context parallel entry of tensor degree a (Megatron-LM's TP x CP): Megatron tensor parallelism
    with sequence parallelism inside groups of a consecutive ranks, zig-zag ring attention over the p / a groups;
    the weights' a-blocks fetched from the 1/p shards (a shard exchange, an all-gather over the ring group)."""
    return Strategy(
        f"megatron_cp:{a}", f"Megatron{a}xCP",
        attention=f"tensor parallel over heads in groups of {a} ranks (all-gather, reduce-scatter), zig-zag ring "
        f"attention over p/{a} groups",
        mlp=f"column/row-split weights in groups of {a} ranks, the 1/{a} blocks fetched from the 1/p shards",
        splits_heads=True, ring_attention=True, kv_heads_rule="split",
        abbreviation=f"C{a}", color=MEGATRON_CP_COLORS[a], schedule="megatron_cp",
        runtime_module="paradyse_lab.runtime.strategies.megatron_cp", head_degree=a,
        head_chunks="its gathered input and output partial [a*t, h] are shared by every head, so chunks of heads "
        "would leave its largest buffers whole (not offered)",
    )


CATALOG: dict[str, Strategy] = {
    s.name: s
    for s in (
        Strategy(
            "megatron_ts", "MegatronTS",
            attention="all-gather sequence, heads split over ranks, reduce-scatter out",
            mlp="column/row-split weights, all-gather + reduce-scatter of activations",
            splits_heads=True, ring_attention=False, kv_heads_rule="split",
            abbreviation="TS", color="#1f77b4", schedule="megatron_ts",
            runtime_module="paradyse_lab.runtime.strategies.megatron_ts",
            head_chunks="its gathered input and output partial [s, h] are shared by every head, so chunks of heads "
            "would leave its largest buffers whole (not offered)",
        ),
        Strategy(
            "megatron_cz", "MegatronCZ",
            attention="ring attention: K/V blocks around a ring, log-sum-exp merge",
            mlp="ZeRO-3: full weights all-gathered from 1/p shards, gradients reduce-scattered",
            splits_heads=False, ring_attention=True,
            abbreviation="CZ", color="#ff7f0e", schedule="megatron_cz",
            runtime_module="paradyse_lab.runtime.strategies.megatron_cz",
            head_chunks="ring attention never gathers the sequence: it holds one K/V block of s/p tokens at a time",
        ),
        Strategy(
            "ulysses_z", "UlyssesZ",
            attention="all-to-all sequence-sharded -> head-sharded, local attention, all-to-all back",
            mlp="ZeRO-3: full weights all-gathered from 1/p shards, gradients reduce-scattered",
            splits_heads=True, ring_attention=False, kv_heads_rule="replicate",
            abbreviation="UZ", color="#2ca02c", schedule="ulysses_z",
            runtime_module="paradyse_lab.runtime.strategies.ulysses_z", head_chunks="yes",
        ),
        Strategy(
            "metp", "METP",
            attention="weight shards passed around a ring; per head group, ring attention inside",
            mlp="weight shards passed around a ring (point-to-point, double-buffered)",
            splits_heads=True, ring_attention=True, kv_heads_rule="split",
            abbreviation="ME", color="#d62728", schedule="metp",
            runtime_module="paradyse_lab.runtime.strategies.metp",
            head_chunks="its attention is a ring per head group: it holds one K/V block of s/p tokens at a time",
        ),
        Strategy(
            "colossal_z", "ColossalZ",
            attention="Colossal-AI ring self-attention",
            mlp="ZeRO-3",
            splits_heads=False, ring_attention=True, usable=False,
            unusable_reason="its ring self-attention cannot use FlashAttention, so activation memory "
            "is quadratic in s; the paper excludes it from its experiments",
        ),
    )
}
USABLE = tuple(name for name, s in CATALOG.items() if s.usable)
"""The strategies plans are made of, in the paper's order (one-dimensional: each spans all p ranks)."""
CATALOG.update({s.name: s for s in map(_ulysses_ring, HEAD_DEGREES)})
CATALOG.update({s.name: s for s in map(_megatron_cp, HEAD_DEGREES)})
CATALOG["ulysses_uneven"] = Strategy(
    "ulysses_uneven", "UlyssesUneven",
    attention="all-to-all sequence-sharded -> head-sharded with ceil or floor of heads/p heads per rank "
    "(K/V heads copied to every rank that reads them), local attention, all-to-all back",
    mlp="ZeRO-3: full weights all-gathered from 1/p shards, gradients reduce-scattered",
    splits_heads=True, ring_attention=False, uneven_heads=True,
    abbreviation="UU", color="#ffbb78", schedule="ulysses_uneven",
    runtime_module="paradyse_lab.runtime.strategies.ulysses_uneven",
    head_chunks="its ranks hold unequal head counts, which the head-chunked attention does not split (not offered)",
)
TWO_D = tuple(name for name, s in CATALOG.items() if s.head_degree or s.uneven_heads)
"""The strategies beyond the paper's four offered on request (`--two-d`, `+2d`) beside `USABLE` where the question
does not name its options (`cost`, `plan`): the two-dimensional ones (p = a x b) and Ulysses with uneven heads,
both there so that a head count p does not divide still leaves more than the ring; the paper's reproduction keeps
to `USABLE`."""


@dataclass(frozen=True)
class StrategyOption:
    """A strategy, optionally with activation recomputation, the tiled MLP and activation offload."""

    strategy: str
    """Catalog name."""
    recompute: bool = False
    """Keep only the sub-layer input and recompute the rest in the backward pass."""
    tiled: bool = False
    """Run the MLP sub-layer over chunks of the sequence, keeping only its input and recomputing each chunk in
    the backward (ALST's TiledMLP, Bekman et al., arXiv 2506.13996): its [tokens, ffn]
    intermediates exist one chunk at a time. An attention sub-layer ignores it."""
    offload: bool = False
    """Copy what each sub-layer keeps for the backward to host memory during the forward and bring it back for
    the backward."""
    headchunk: bool = False
    """Run the attention sub-layer over chunks of heads, one query head per rank at a time, so that only one
    chunk's head-sharded q, k, v and output are live (UPipe's head-wise chunking, arXiv 2602.21196). Only for
    strategies whose catalog entry has `head_chunks` 'yes'; an MLP ignores it."""

    def __post_init__(self):
        if self.strategy not in CATALOG:
            raise unknown_name("strategy", self.strategy, CATALOG)
        why = CATALOG[self.strategy].head_chunks
        if self.headchunk and why != "yes":
            offered = ", ".join(n for n, s in CATALOG.items() if s.head_chunks == "yes")
            raise UserInputError(f"strategy {self.strategy}+headchunk: {why}; +headchunk is offered by {offered}")

    @cached_property
    def name(self) -> str:
        """`NAME` followed by the suffixes of its flags: `NAME+recompute`, `NAME+recompute+tiled+offload`, ...
        (computed once per option: the simulator reads it for every decision of every step)."""
        return self.strategy + "".join(f"+{flag}" for flag in OPTION_FLAGS if getattr(self, flag))

    @classmethod
    def parse(cls, text: str) -> StrategyOption:
        """Read `NAME[+recompute][+tiled][+headchunk][+offload]` (the flags in that order, each once)."""
        return _parse_option(text)

    def runs(self, kinds) -> bool:
        """Whether the option is a decision of its own over sub-layers of `kinds` ('attention', 'mlp'): `+tiled`
        acts on an MLP only, `+headchunk` on an attention only, and on an MLP alone `+recompute+tiled` is `+tiled`
        (the tiled MLP recomputes anyway), so at sub-layer granularity a flag that changes nothing is not offered
        twice."""
        if (self.tiled and "mlp" not in kinds) or (self.headchunk and "attention" not in kinds):
            return False
        return not (self.tiled and self.recompute and "attention" not in kinds)

    def __str__(self) -> str:
        return self.name


@cache
def _parse_option(text: str) -> StrategyOption:
    """`StrategyOption.parse`, each text read once (an option is immutable; an error is never cached)."""
    base, *flags = text.split("+")
    valid = list(CATALOG) + ["NAME" + "".join(f"[+{f}]" for f in OPTION_FLAGS)]
    if base not in CATALOG or flags != [f for f in OPTION_FLAGS if f in flags]:
        raise unknown_name("strategy", text, valid)
    return StrategyOption(base, **{flag: True for flag in flags})


def get_strategy(name: str) -> Strategy:
    """Catalog entry by name, or an error listing the names."""
    if name not in CATALOG:
        raise unknown_name("strategy", name, CATALOG)
    return CATALOG[name]


def options(strategies=USABLE, recompute: bool = False, tiled: bool = False,
            offload: bool = False, headchunk: bool = False) -> tuple[StrategyOption, ...]:
    """The options of a search: each strategy; with `recompute` also each one recomputed; with `tiled` each one
    with the tiled MLP (and recomputed with it, with `recompute`); with `headchunk` each of those of a strategy
    that offers it again with head-chunked attention; with `offload` every one of those again with activation
    offload."""
    kept = [False, True] if recompute else [False]
    flags = [(r, False) for r in kept] + ([(r, True) for r in kept] if tiled else [])
    out = [StrategyOption(s, recompute=r, tiled=t) for r, t in flags for s in strategies]
    if headchunk:
        out += [replace(o, headchunk=True) for o in out if CATALOG[o.strategy].head_chunks == "yes"]
    if offload:
        out += [replace(o, offload=True) for o in out]
    return tuple(out)
