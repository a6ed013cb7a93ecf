"""What a `paradyse-lab reproduce` run depends on: its `Settings` (quick or full, cluster, sampling, the sizes of
every step), as recorded in DIR/reproduce_settings.json, and the cost-model profile its steps fit on.

A change of settings reruns every step (`reproduce` keys each step's stamp on
`json_settings`)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from paradyse_lab.cluster.files import get_cluster
from paradyse_lab.costmodel.paper_measurements import covers_node
from paradyse_lab.errors import UserInputError, unknown_name
from paradyse_lab.results.result_key import is_fresh, result_key, stamp_path, write_stamp
from paradyse_lab.workload.lengths import SAMPLINGS

SETTINGS_FILE = "reproduce_settings.json"
QUICK_SIZE = 20
"""Sequences per sampled dataset in a `--quick` run (a full run: 200): the stratified sample keeps every length
band with a sequence in it, the longest (the dataset's maximum, pinned) included."""
FIGURE_FORMATS = ("png", "pdf")
QUICK_FIGURE_FORMATS = ("png",)
"""A `--quick` run saves each figure as PNG alone: the PDF is a second drawing of every artist (about a quarter
of the figures step's time) of a figure that only shows the run worked."""


@dataclass(frozen=True)
class Settings:
    """What a reproduction run depends on (a change reruns every step)."""

    quick: bool
    size: int
    """Sequences per sampled dataset in Figure 2 and Table 5."""
    bench_sizes: tuple[int, ...]
    bench_options: tuple[int, ...]
    bench_kinds: tuple[str, ...]
    bench_instances: int
    costmodels: tuple[str, ...]
    map_lengths: int
    """Lengths in the plan map and memory breakdown grids."""
    packing_panels: tuple[tuple[str, str], ...]
    """(dataset, model) panels of the packing experiment."""
    seeds: tuple[int, ...] = (0,)
    """Workload seeds of the headline metrics' spread (seed 0: the runs of every other step)."""
    cluster: str = "a100-80gb-x8"
    sampling: str = "stratified"
    """How the paper datasets are sampled (`SAMPLINGS`)."""

    def setup(self, **kw):
        """The simulator's `Setup` of this run's experiments (cluster, size, sampling), with `kw` on top."""
        from paradyse_lab.simulator.experiments import Setup  # lazy: pandas: slow to load, only this path needs it

        return Setup(cluster=self.cluster, size=self.size, sampling=self.sampling, **kw)

    @property
    def paper_truth(self) -> bool:
        """Whether the authors' measurements cover this cluster (the paper-truth steps run)."""
        c = get_cluster(self.cluster)
        return covers_node(c.gpu_name, c.gpus)

    @property
    def figure_formats(self) -> tuple[str, ...]:
        """The files each figure is saved as: PNG and PDF, a quick run PNG alone (`QUICK_FIGURE_FORMATS`)."""
        return QUICK_FIGURE_FORMATS if self.quick else FIGURE_FORMATS

    def truths(self) -> tuple[str, ...]:
        return ("analytic", "paper") if self.paper_truth else ("analytic",)

    @classmethod
    def make(cls, quick: bool, cluster: str = "a100-80gb-x8", sampling: str = "stratified") -> Settings:
        # lazy: pandas: slow to load, only this path needs it
        from paradyse_lab.simulator.experiments import DATASETS, MODELS

        if sampling not in SAMPLINGS:
            raise unknown_name("--sampling", sampling, SAMPLINGS)
        if quick:
            return cls(quick=True, size=QUICK_SIZE, bench_sizes=(8, 24, 96), bench_options=(4,),
                       bench_kinds=("random", "model"), bench_instances=1,
                       costmodels=("analytic", "hybrid", "polynomial"), map_lengths=24,
                       packing_panels=(("github_code", "gpt"),), seeds=(0,), cluster=cluster,
                       sampling=sampling)
        return cls(quick=False, size=200, bench_sizes=(8, 24, 48, 96, 192), bench_options=(4, 8),
                   bench_kinds=("random", "random+switch", "model", "model-sublayer"), bench_instances=2,
                   costmodels=("analytic", "hybrid", "forest", "polynomial", "residual"), map_lengths=64,
                   packing_panels=tuple((d, m) for d in DATASETS for m in MODELS), seeds=(0, 1, 2, 3, 4),
                   cluster=cluster, sampling=sampling)


def json_settings(s: Settings) -> dict:
    """`s` as its JSON reads back (tuples as lists): what DIR/reproduce_settings.json records and the stamps key on."""
    return json.loads(json.dumps(asdict(s)))


def profile_for(out: Path, s: Settings) -> Path:
    """The cluster's bundled profile, else a synthetic one (`source=analytic`, as `paradyse-lab costmodel synth-profile`
    writes it) written under DIR/profiles/ for the learned cost models, reused while its stamp is fresh."""
    # lazy: pandas: slow to load, only this path needs it
    from paradyse_lab.costmodel.profiles import default_profile, read_profiles, write_profiles

    cluster = get_cluster(s.cluster)
    try:
        return default_profile(cluster.device)
    except UserInputError:
        pass
    # lazy: pandas: slow to load, only this path needs it
    from paradyse_lab.costmodel.synthetic import DEFAULT_MODELS, synthesize_profiles

    path = out / "profiles" / f"analytic_{cluster.name}.csv"
    settings = {"cluster": repr(cluster), "synthetic": "defaults, seed 0"}
    key, stamp = result_key(settings), stamp_path(path.parent, path.name)
    if is_fresh(stamp, key):
        read_profiles(path)  # a file made before: validated as every reader of it will read it
        return path
    df = synthesize_profiles(cluster, list(DEFAULT_MODELS), None, timestamp="2026-01-01T00:00:00+00:00")
    if df.empty:
        raise UserInputError(f"cluster {s.cluster!r}: no strategy fits the shortest profiled length")
    write_profiles(df, path)  # validates the rows as read_profiles reads them back (`profiles`)
    write_stamp(stamp, key, settings, [path])
    return path
