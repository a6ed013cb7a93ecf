"""Policy names: what `static:NAME`, `restart:NAME` and `dynamic:SOLVER` with their suffixes ask of a run, read
once and checked before any work (`PolicySpec.parse`); `build_policy` builds the policy a spec names.

- `static:NAME`: one strategy on every layer (the paper's baselines); `static:NAME+recompute` with
  activation recomputation on every layer.
- `restart:NAME`: static, but after an OOM it restarts with the next lighter strategy.
- `dynamic:SOLVER`: ParaDySe's switching, planned by a solver. `dynamic:SOLVER+recompute` also offers every
  strategy with recomputation, `dynamic:SOLVER+sublayer` decides attention and MLP separately, `+tiled` also
  offers every option with the tiled MLP and `+offload` with activation offload (docs/tiled_mlp_and_offload.md);
  the suffixes combine (`dynamic:dp+recompute+sublayer`, `dynamic:dp+recompute+tiled+offload+sublayer`).
  `+2d` also offers the two-dimensional strategies (`ulysses_ring:a` and `megatron_cp:a`, every degree that
  splits the model) and Ulysses with uneven heads (`ulysses_uneven`, where p does not divide the heads), which
  `static:NAME` may name too.
"""

from __future__ import annotations

from dataclasses import dataclass

from paradyse_lab.core.layer_graph import GRANULARITIES
from paradyse_lab.core.strategies import TWO_D, USABLE
from paradyse_lab.errors import UserInputError, unknown_name
from paradyse_lab.solvers.registry import check_solver_name

POLICY_KINDS = ("static:NAME[+recompute]", "restart:NAME",
                "dynamic:SOLVER[+recompute][+tiled][+offload][+2d][+sublayer]")
RECOMPUTE_SUFFIX, SUBLAYER_SUFFIX, TWO_D_SUFFIX = "+recompute", "+sublayer", "+2d"
TECHNIQUE_SUFFIXES = ("tiled", "offload")
"""A dynamic policy's suffixes that offer the long-context options (`options`)."""


@dataclass(frozen=True)
class PolicySpec:
    """A policy name read into what it asks of the run: the base policy, recomputation, granularity."""

    base: str
    """`static:NAME[+recompute]`, `restart:NAME` or `dynamic:SOLVER` (suffixes of a dynamic one removed)."""
    recompute: bool
    """Whether the plans use (dynamic: may use) activation recomputation."""
    granularity: str
    """`block` or `sublayer`: what one decision covers."""
    tiled: bool = False
    """Whether a dynamic policy also offers every option with the tiled MLP (`+tiled`)."""
    offload: bool = False
    """Whether a dynamic policy also offers every option with activation offload (`+offload`)."""
    two_d: bool = False
    """Whether a dynamic policy also offers the two-dimensional strategies (`+2d`)."""

    @classmethod
    def parse(cls, spec: str, recompute: bool = False, granularity: str = "block") -> PolicySpec:
        """Read `spec` once: its suffixes, to which `recompute` and `granularity` (command-line flags) add, and
        its strategy or solver name, checked (one-line `UserInputError`s, before any work)."""
        parsed = cls._read(spec, recompute, granularity)
        parsed._check_names(spec)
        return parsed

    @classmethod
    def _read(cls, spec: str, recompute: bool, granularity: str) -> PolicySpec:
        """The suffixes of `spec` and the flags, unchecked names."""
        if granularity not in GRANULARITIES:
            raise unknown_name("granularity", granularity, GRANULARITIES)
        kind, _, arg = spec.partition(":")
        if kind == "dynamic":
            words = arg.split("+")
            suffixes = set(words[1:])
            unknown = suffixes - {RECOMPUTE_SUFFIX[1:], SUBLAYER_SUFFIX[1:], TWO_D_SUFFIX[1:], *TECHNIQUE_SUFFIXES}
            if unknown or not words[0]:
                raise UserInputError(f"unknown policy {spec!r}; valid: {', '.join(POLICY_KINDS)}")
            return cls(f"dynamic:{words[0]}", recompute or "recompute" in suffixes,
                       "sublayer" if "sublayer" in suffixes else granularity, "tiled" in suffixes,
                       "offload" in suffixes, "2d" in suffixes)
        if kind == "restart" and (recompute or granularity != "block"):
            raise UserInputError(f"policy {spec!r}: a restart policy runs one plain strategy on every layer; "
                                 "--recompute and --granularity sublayer apply to static:NAME and dynamic:SOLVER")
        if kind == "static" and arg.endswith(RECOMPUTE_SUFFIX):
            return cls(spec, True, granularity)
        if kind == "static" and recompute:
            return cls(spec + RECOMPUTE_SUFFIX, True, granularity)
        return cls(spec, recompute, granularity)

    def _check_names(self, spec: str) -> None:
        """The strategy of a static or restart policy, the solver of a dynamic one (without building it)."""
        kind, arg = self.kind, self.arg
        if kind in ("static", "restart"):
            strategy = arg.removesuffix(RECOMPUTE_SUFFIX)
            names = USABLE if kind == "restart" else USABLE + TWO_D
            if strategy not in names or (kind == "restart" and arg != strategy):
                valid = names if kind == "restart" else list(names) + [f"{s}{RECOMPUTE_SUFFIX}" for s in names]
                raise unknown_name(f"strategy in policy {spec!r}", arg, valid)
        elif kind == "dynamic" and arg:
            check_solver_name(arg)
        else:
            raise UserInputError(f"unknown policy {spec!r}; valid: {', '.join(POLICY_KINDS)}")

    @property
    def kind(self) -> str:
        """`static`, `restart` or `dynamic`."""
        return self.base.partition(":")[0]

    @property
    def arg(self) -> str:
        """What follows the kind: `NAME[+recompute]` or the solver's name."""
        return self.base.partition(":")[2]

    @property
    def name(self) -> str:
        """The canonical name: `static:metp+recompute`, `dynamic:dp+recompute+sublayer`, ..."""
        if not self.base.startswith("dynamic:"):
            return self.base
        return (self.base + (RECOMPUTE_SUFFIX if self.recompute else "")
                + "".join(f"+{t}" for t in TECHNIQUE_SUFFIXES if getattr(self, t))
                + (TWO_D_SUFFIX if self.two_d else "")
                + (SUBLAYER_SUFFIX if self.granularity == "sublayer" else ""))
