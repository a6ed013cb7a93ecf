"""The options of `simulate`, `experiment` and `reproduce`: one tree of dataclasses, a docstring under each field
(they become the flags and their help).

`SimulationOptions` (what every simulated run shares: cost models, cluster, workload size, memory, policy
flags) is composed into `SimulateOptions` and `ExperimentOptions`; `PackingOptions` into `SimulateOptions`.
`SimulationOptions.setup(packing)` checks the values and gives the simulator's `Setup`.
Memory options are in GiB.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from paradyse_lab.cluster.files import cluster_with_gpus, get_cluster
from paradyse_lab.cluster.presets import DEFAULT_CLUSTER
from paradyse_lab.core.layer_graph import GRANULARITIES
from paradyse_lab.errors import UserInputError, require_number, require_positive_int, unknown_name
from paradyse_lab.simulator.grouped_steps import check_group_policy
from paradyse_lab.units import gib_to_bytes
from paradyse_lab.workload.lengths import SAMPLINGS
from paradyse_lab.workload.packing import MAX_TOKEN_BUDGET, PACK_ORDERS

EXPERIMENTS = ("fig2", "table5", "packing", "groups")
FORMATS = ("table", "json")


@dataclass(frozen=True)
class SimulationOptions:
    """What every simulated run of `simulate` and `experiment` shares (`Setup`)."""

    truth_cost_model: str = ""
    """Cost model that charges every step (and plans unless --plan-cost-model says otherwise): auto (replay
    where the cluster has measured kernel tables, else analytic), analytic, replay, paper (the ParaDySe
    authors' measured A100 times), calibrated, or a learned kind / .joblib file (default: auto for simulate;
    analytic for experiment, which reproduces the paper)."""
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
    """Charge the caching allocator's reservation of every strategy used so far (the memory price of
    switching); static runs pay nothing more."""

    def setup(self, packing: PackingOptions | None = None, cost_model: str = "analytic"):
        """The simulator's `Setup` of these options (and `packing`), every value checked (one-line errors);
        `cost_model`: the command's default truth model when --truth-cost-model is not given."""
        # lazy: pandas: slow to load, only this path needs it
        from paradyse_lab.simulator.experiments import EXPERIMENT_SIZE, Setup

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
                     gamma=self.gamma, profiles=self.profiles, truth=self.truth_cost_model or cost_model,
                     switch_memory=self.switch_memory, recompute=self.recompute, granularity=self.granularity,
                     **(packing.setup_fields() if packing is not None else {}))


@dataclass(frozen=True)
class PackingOptions:
    """Documents packed into steps."""

    pack_tokens: int | None = field(default=None, metadata={"type": int, "metavar": "N"})
    """Pack the documents into steps of at most N tokens (greedy first-fit; attention stays inside each
    document; a document longer than N is a step alone); default: one sequence per step."""
    pack_order: str = "sorted"
    """With --pack-tokens: sorted (first-fit decreasing, the tightest, steps ordered short to long as the paper
    trains) or shuffled (first-fit in a seeded random order, as a streaming data loader sees the documents)."""

    def setup_fields(self) -> dict:
        """`pack_tokens` / `pack_order` as `Setup` fields, checked (none when not packing)."""
        if self.pack_tokens is None:
            return {}
        if self.pack_order not in PACK_ORDERS:
            raise UserInputError(f"--pack-order must be one of {', '.join(PACK_ORDERS)}, got {self.pack_order!r}")
        return {"pack_tokens": require_positive_int("--pack-tokens", self.pack_tokens, MAX_TOKEN_BUDGET),
                "pack_order": self.pack_order}


MAX_GLOBAL_BATCH = 2**20
"""Most sequences (or tokens: `MAX_GLOBAL_BATCH_TOKENS`) in one global batch."""
MAX_GLOBAL_BATCH_TOKENS = 2**40


@dataclass(frozen=True)
class GroupOptions:
    """A step trains a global batch over groups of GPUs sized per step."""

    global_batch: int | None = field(default=None, metadata={"type": int, "metavar": "N"})
    """Train the (shuffled) sequences N per step, each step split over groups of GPUs (--groups); default: one
    sequence per step on all GPUs, as the paper trains."""
    global_batch_tokens: int | None = field(default=None, metadata={"type": int, "metavar": "T"})
    """Like --global-batch, but steps of at most T tokens (a longer sequence is a step alone)."""
    groups: str = ""
    """With a global batch: sized (groups sized per step, per-layer plans; --policy dynamic:SOLVER), sized-exact
    (the same, exact: at most 10 sequences per step on at most 16 GPUs), paradyse (one group of all GPUs,
    per-layer plans), smallest-fit (one strategy on the smallest group that fits each sequence, one split per
    step; --policy static:megatron_cz), static (one group, --policy static:NAME), rounds (ours: a step as rounds
    of splits run one after another, per-layer plans), rounds-exact (the same, exact: at most 6 sequences per
    step on at most 8 GPUs) or megatron (Megatron-Core's dynamic context-parallel scheduler, rounds, its per-rank
    length chosen on the next seed's batches; --policy static:megatron_cz); default: sized for a dynamic policy,
    static for a static one."""
    runnable_groups: bool = False
    """Deprecated, no effect: the runtime runs every group size (blocks that are not whole heads are gathered
    from the whole world), so every size is runnable."""

    @property
    def active(self) -> bool:
        return self.global_batch is not None or self.global_batch_tokens is not None

    def group_policy(self, policy: str) -> str:
        """--groups checked against --policy and the batch flags (one-line errors)."""
        if not self.active:
            if self.groups or self.runnable_groups:
                raise UserInputError("--groups and --runnable-groups need --global-batch N or --global-batch-tokens T")
            return ""
        if self.global_batch is not None and self.global_batch_tokens is not None:
            raise UserInputError("give --global-batch (sequences) or --global-batch-tokens, not both")
        if self.global_batch is not None:
            require_positive_int("--global-batch", self.global_batch, MAX_GLOBAL_BATCH)
        else:
            require_positive_int("--global-batch-tokens", self.global_batch_tokens, MAX_GLOBAL_BATCH_TOKENS)
        groups = self.groups or ("sized" if policy.startswith("dynamic:") else "static")
        check_group_policy(groups, policy)
        return groups


@dataclass(frozen=True)
class SimulateOptions:
    """`paradyse-lab simulate`: one run."""

    model: str
    """Model preset or Hugging Face config.json."""
    dataset: str
    """github_code, grch38, uniform[:LO:HI], lognormal[:MEDIAN:SIGMA] or file:PATH."""
    policy: str
    """static:NAME[+recompute], restart:NAME or dynamic:SOLVER[+recompute][+tiled][+offload][+2d][+sublayer]."""
    smoothing: bool = True
    """The paper's 5% smoothing (--no-smoothing: off)."""
    exclude: str = ""
    """Comma-separated strategies a dynamic policy may not use."""
    out: str = ""
    """Write the per-step rows to this CSV."""
    plan_cost_model: str = ""
    """Cost model a dynamic policy plans with: auto, analytic, replay, paper, calibrated, hybrid, forest,
    polynomial, residual (fitted ones on --profiles) or a .joblib file (default: the truth's)."""
    packing: PackingOptions = field(default_factory=PackingOptions)
    grouping: GroupOptions = field(default_factory=GroupOptions)
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
    """fig2: skip our series beyond the paper (dp + recompute, dp + recompute + sub-layer, the same with the
    tiled MLP and offload, and the static strategies with recomputation)."""
    two_d: bool = False
    """fig2: also our techniques series with the two-dimensional strategies offered (Ulysses x ring at every head
    degree that divides the heads and p), as the series "+ 2-D strategies" of fig2_beyond.csv."""
    fine_lengths: bool = False
    """table5: also each variant's longest length when every multiple of the layout unit (2p tokens) is tried
    in a fresh process, not only the sampled lengths (column "max len, fine grid")."""
    paper_lengths: bool = False
    """table5: train the sample with the paper's Table 5 lengths added (112,128, 270,336, 300,032 and 329,728
    tokens), writing DIR/table5_paper_lengths.csv beside the sample's table5.csv."""
    global_batch: int = 32
    """groups: sequences per step (the panels' workloads are --size sequences, default 128 for groups)."""
    run: SimulationOptions = field(default_factory=SimulationOptions)
    format: str = field(default="table", metadata={"choices": FORMATS})
    """table for people, json for scripts."""


@dataclass(frozen=True)
class ReproduceOptions:
    """`paradyse-lab reproduce`: every experiment, figure and REPORT.md."""

    quick: bool = False
    """Smaller workloads and benchmark (20 sequences per dataset, seed 0 only, no groups step)."""
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
