"""The options of `simulate`, `experiment` and `reproduce`: one tree of dataclasses, a docstring under each field
(paradyse_lab/options.py turns them into the flags and their help).

`SimulationOptions` (what every simulated run shares: cost models, cluster, workload size, memory, policy
flags) is composed into `SimulateOptions` and `ExperimentOptions`; `PackingOptions` into `SimulateOptions`.
`SimulationOptions.setup(packing)` checks the values and gives the simulator's `Setup`.
Memory options are in GiB (paradyse_lab/units.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from paradyse_lab.cluster_spec import DEFAULT_CLUSTER
from paradyse_lab.errors import UserInputError, require_number, require_positive_int

EXPERIMENTS = ("fig2", "table5", "packing")
FORMATS = ("table", "json")


@dataclass(frozen=True)
class SimulationOptions:
    """What every simulated run of `simulate` and `experiment` shares (simulator/experiments.py `Setup`)."""

    truth_cost_model: str = "analytic"
    """Cost model that charges every step (and plans unless --plan-cost-model says otherwise): analytic, paper
    (the ParaDySe authors' measured A100 times), calibrated, or a learned kind / .joblib file."""
    cluster: str = DEFAULT_CLUSTER
    """Node preset or .toml."""
    gpus: int | None = field(default=None, metadata={"type": int, "metavar": "N"})
    """Simulate N GPUs of the cluster's kind (default: the cluster's own count)."""
    size: int | None = field(default=None, metadata={"type": int})
    """Sequences sampled from the dataset (default 200)."""
    seed: int = 0
    """Sampling seed."""
    sampling: str = "stratified"
    """github_code / grch38: stratified (each Table 3 band holds its share of the sequences, rounded by largest
    remainder) or multinomial (each sequence's band drawn at random by its share)."""
    reserve_gb: float = 1.0
    """Memory kept back from each GPU for the CUDA context and NCCL buffers, in GiB."""
    gamma: float = 0.05
    """Smoothing tolerance of dynamic policies."""
    profiles: str = ""
    """Profile CSV the learned and calibrated cost models are fitted on (default: the bundled paper profile under
    --truth-cost-model paper, else the cluster's bundled one, synthetic source=analytic until measured profiles
    exist)."""
    recompute: bool = False
    """Dynamic policies also offer every strategy with activation recomputation; static ones recompute every
    layer (same as the policy suffix +recompute)."""
    granularity: str = "block"
    """block (the paper: one decision per layer) or sublayer (attention and MLP decided separately; same as the
    dynamic policy suffix +sublayer)."""
    switch_memory: bool = False
    """Charge the caching allocator's reservation of every strategy used so far (the memory price of switching,
    simulator/engine.py Charger); static runs pay nothing more."""

    def setup(self, packing: PackingOptions | None = None):
        """The simulator's `Setup` of these options (and `packing`), every value checked (one-line errors)."""
        from paradyse_lab.cluster_spec import cluster_with_gpus, get_cluster
        from paradyse_lab.errors import unknown_name
        from paradyse_lab.layer_graph import GRANULARITIES
        from paradyse_lab.units import gib_to_bytes
        from paradyse_lab.workloads import SAMPLINGS
        from simulator.experiments import EXPERIMENT_SIZE, Setup

        cluster_with_gpus(get_cluster(self.cluster), self.gpus)  # a bad name or count: refused before any run
        if self.granularity not in GRANULARITIES:
            raise unknown_name("--granularity", self.granularity, GRANULARITIES)
        if self.sampling not in SAMPLINGS:
            raise unknown_name("--sampling", self.sampling, SAMPLINGS)
        size = require_positive_int("--size", self.size if self.size is not None else EXPERIMENT_SIZE)
        if not 0 <= self.gamma < 1:
            raise UserInputError(f"--gamma must be in [0, 1), got {self.gamma}")
        reserve_gib = require_number("--reserve-gb", self.reserve_gb, 0.0, 1e9)  # beyond: no int of bytes
        return Setup(cluster=self.cluster, gpus=self.gpus, size=size, seed=self.seed, sampling=self.sampling,
                     reserve_bytes=gib_to_bytes(reserve_gib),
                     gamma=self.gamma, profiles=self.profiles, truth=self.truth_cost_model,
                     switch_memory=self.switch_memory, recompute=self.recompute, granularity=self.granularity,
                     **(packing.setup_fields() if packing is not None else {}))


@dataclass(frozen=True)
class PackingOptions:
    """Documents packed into steps (paradyse_lab/packing.py)."""

    pack_tokens: int | None = field(default=None, metadata={"type": int, "metavar": "N"})
    """Pack the documents into steps of at most N tokens (greedy first-fit; attention stays inside each
    document; a document longer than N is a step alone); default: one sequence per step."""
    pack_order: str = "sorted"
    """With --pack-tokens: sorted (first-fit decreasing, the tightest, steps ordered short to long as the paper
    trains) or shuffled (first-fit in a seeded random order, as a streaming data loader sees the documents)."""

    def setup_fields(self) -> dict:
        """`pack_tokens` / `pack_order` as `Setup` fields, checked (none when not packing)."""
        from paradyse_lab.packing import MAX_TOKEN_BUDGET, PACK_ORDERS

        if self.pack_tokens is None:
            return {}
        if self.pack_order not in PACK_ORDERS:
            raise UserInputError(f"--pack-order must be one of {', '.join(PACK_ORDERS)}, got {self.pack_order!r}")
        return {"pack_tokens": require_positive_int("--pack-tokens", self.pack_tokens, MAX_TOKEN_BUDGET),
                "pack_order": self.pack_order}


@dataclass(frozen=True)
class SimulateOptions:
    """`paradyse-lab simulate`: one run."""

    model: str
    """Model preset or Hugging Face config.json."""
    dataset: str
    """github_code, grch38, uniform[:LO:HI], lognormal[:MEDIAN:SIGMA] or file:PATH."""
    policy: str
    """static:NAME[+recompute], restart:NAME or dynamic:SOLVER[+recompute][+tiled][+offload][+sublayer]."""
    smoothing: bool = True
    """The paper's 5% smoothing (--no-smoothing: off)."""
    exclude: str = ""
    """Comma-separated strategies a dynamic policy may not use."""
    out: str = ""
    """Write the per-step rows to this CSV."""
    plan_cost_model: str = ""
    """Cost model a dynamic policy plans with: analytic, paper, calibrated, hybrid, forest, polynomial, residual
    (fitted ones on --profiles) or a .joblib file (default: the truth's)."""
    packing: PackingOptions = field(default_factory=PackingOptions)
    run: SimulationOptions = field(default_factory=SimulationOptions)
    format: str = field(default="table", metadata={"choices": FORMATS})
    """table for people, json for scripts."""

    def excluded(self) -> tuple[str, ...]:
        """--exclude as strategy names (a dynamic policy's only)."""
        names = tuple(x.strip() for x in self.exclude.split(",") if x.strip())
        if names and not self.policy.startswith("dynamic:"):
            raise UserInputError("--exclude applies to dynamic:SOLVER policies only")
        return names


@dataclass(frozen=True)
class ExperimentOptions:
    """`paradyse-lab experiment NAME`: the paper's experiments, and packing."""

    name: str = field(metadata={"positional": True, "choices": EXPERIMENTS})
    """Which experiment."""
    out: str = "results"
    """Results folder."""
    force: bool = False
    """Rerun finished runs instead of reusing their CSVs."""
    exact: bool = True
    """fig2: also the paper-comparison dp and ilp policies (--no-exact: skip them; our dp + recompute series
    still run)."""
    paper_policies_only: bool = False
    """fig2: skip our series beyond the paper (dp + recompute, dp + recompute + sub-layer, and the static
    strategies with recomputation)."""
    run: SimulationOptions = field(default_factory=SimulationOptions)
    format: str = field(default="table", metadata={"choices": FORMATS})
    """table for people, json for scripts."""


@dataclass(frozen=True)
class ReproduceOptions:
    """`paradyse-lab reproduce`: every experiment, figure and REPORT.md."""

    quick: bool = False
    """Smaller workloads and benchmark (60 sequences per dataset, seed 0 only; CI: under 3 minutes)."""
    out: str = "results"
    """Results folder."""
    force: bool = False
    """Rerun every step instead of reusing finished CSVs."""
    cluster: str = DEFAULT_CLUSTER
    """Node preset or .toml."""
    sampling: str = "stratified"
    """github_code / grch38: stratified (each Table 3 band holds its share of the sequences) or multinomial (each
    sequence's band drawn at random by its share)."""
    execute: bool = False
    """Also measure this machine and train each policy for real (paradyse-lab calibrate + validate-run into
    OUT/execute/; ~10 minutes on 2 CPU cores)."""
