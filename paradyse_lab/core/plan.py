"""`Plan`: the one type a plan has from the policy that chooses it to the layers that run it.

A solver answers in the names of its `SearchProblem` (`Solution.plan`, a JSON-ready tuple of strings); the
policy that asked turns that answer into a `Plan` once, and the `Plan` travels
unchanged: in the policy's `StepPlan`, broadcast from rank 0 to every rank
(`decide_plan_on_rank0`), to `paradyse_lab.runtime.model.parallel_gpt.ParallelGPT.forward`, which runs sub-layer k of
layer l with
`plan.layer_options(L)[l][k]`. A plan carries its granularity, so nothing downstream guesses it from the plan's
length.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from paradyse_lab.core.layer_graph import GRANULARITIES
from paradyse_lab.core.strategies import CATALOG, OPTION_FLAGS, StrategyOption
from paradyse_lab.errors import UserInputError, unknown_name


@dataclass(frozen=True)
class Plan:
    """One strategy option per decision of a `LayerGraph`: per block, or per sub-layer (attention, then MLP of
    block 0, then of block 1, ...)."""

    options: tuple[StrategyOption, ...]
    """The option of every decision, in the layer graph's order."""
    granularity: str = "block"
    """`block` (one decision per layer, the paper's) or `sublayer` (attention and MLP apart)."""

    def __post_init__(self):
        if self.granularity not in GRANULARITIES:
            raise unknown_name("granularity", self.granularity, GRANULARITIES)
        if not isinstance(self.options, tuple) or not all(isinstance(o, StrategyOption) for o in self.options):
            raise TypeError(f"a Plan holds a tuple of StrategyOption, got {self.options!r}")
        if not self.options or (self.granularity == "sublayer" and len(self.options) % 2):
            raise UserInputError(f"a {self.granularity} plan needs one option per decision "
                                 f"(sub-layers come in pairs), got {len(self.options)}")

    @classmethod
    def from_names(cls, names: Sequence[str], granularity: str = "block") -> Plan:
        """A plan from option names (`NAME` or `NAME+recompute`, a solver's answer) at `granularity`."""
        if isinstance(names, str) or not isinstance(names, Sequence):
            raise UserInputError(f"a plan is a list of strategy names, got {names!r}")
        return cls(tuple(StrategyOption.parse(str(n)) for n in names), granularity)

    @classmethod
    def for_layers(cls, names: Sequence[str], layers: int) -> Plan:
        """A hand-written plan of a model of `layers` layers: `layers` names (block) or `2 * layers` names
        (sub-layer); any other count is a `UserInputError`."""
        count = 0 if isinstance(names, str) or not isinstance(names, Sequence) else len(names)
        if count not in (layers, 2 * layers):
            raise UserInputError(f"plan has {count} entries but the model has {layers} layers "
                                 f"(give {layers} names, one per layer, or {2 * layers}, one per sub-layer)")
        return cls.from_names(names, "block" if count == layers else "sublayer")

    @cached_property
    def names(self) -> tuple[str, ...]:
        """The options' names, in order (what a `SearchProblem` and the simulator's rows read; computed once)."""
        return tuple(o.name for o in self.options)

    def layer_options(self, layers: int) -> list[tuple[StrategyOption, StrategyOption]]:
        """The (attention, MLP) options of each of `layers` layers; a `UserInputError` when the plan is of
        another depth."""
        per_layer = 1 if self.granularity == "block" else 2
        if len(self.options) != per_layer * layers:
            raise UserInputError(f"{self.granularity} plan has {len(self.options)} entries but the model has "
                                 f"{layers} layers ({per_layer * layers} expected)")
        if per_layer == 1:
            return [(o, o) for o in self.options]
        return list(zip(self.options[0::2], self.options[1::2]))

    def __len__(self) -> int:
        return len(self.options)

    def short_text(self) -> str:
        """The plan as the `train` log and validate-run print it (`TS,TS,ME+r`): `short_text` of its names."""
        return short_text(self.names)


def short_text(names: Sequence[str]) -> str:
    """Plan names in short: each strategy's catalog abbreviation, `+r` when recomputed, `+t` with the tiled MLP,
    `+o` with offload (`TS,TS,ME+r,UZ+r+t+o`); a name without an abbreviation as it is."""
    def short(name: str) -> str:
        base, *flags = name.split("+")
        entry = CATALOG.get(base)
        if not (entry and entry.abbreviation):
            return name
        return entry.abbreviation + "".join(f"+{flag[0]}" for flag in flags if flag in OPTION_FLAGS)

    return ",".join(short(n) for n in names)
