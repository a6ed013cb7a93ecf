"""`paradyse-lab catalog models | clusters | strategies`: the presets and the strategy catalog as tables or JSON."""

from __future__ import annotations

from dataclasses import asdict

from paradyse_lab.cli.output import add_format_argument, format_bytes, print_json, print_table
from paradyse_lab.cluster.files import bundled_clusters, get_cluster
from paradyse_lab.cluster.presets import DEFAULT_CLUSTER
from paradyse_lab.cluster.presets import PRESETS as CLUSTERS
from paradyse_lab.core.model_spec import PRESETS as MODELS
from paradyse_lab.core.strategies import CATALOG

KV_RULE_TEXT = {"split": "kv_heads % p", "replicate": "kv_heads % p or p % kv_heads (K/V heads replicated)",
                "any": "any kv_heads"}
"""The grouped-query attention rule of each `Strategy.kv_heads_rule`, as the table shows it."""


def register(sub) -> None:
    """Add the three catalog commands."""
    p = sub.add_parser("models", help="list model presets",
                       description="Model presets (also: --model path/to/config.json of GPT-2 or LLaMA).")
    add_format_argument(p)
    p.set_defaults(func=run_models)
    p = sub.add_parser("clusters", help="list cluster presets",
                       description="Cluster presets (also: --cluster path/to/cluster.toml).")
    add_format_argument(p)
    p.set_defaults(func=run_clusters)
    p = sub.add_parser("strategies", help="list the strategy catalog",
                       description="Parallel strategies, their rules, and which are usable.")
    add_format_argument(p)
    p.set_defaults(func=run_strategies)


def run_models(args) -> int:
    if args.format == "json":
        print_json({name: asdict(m) for name, m in MODELS.items()})
        return 0
    rows = [[m.name, m.hidden, m.heads, m.kv_heads, m.layers, f"{m.ffn_hidden} {m.ffn_kind}",
             m.vocab_size if m.embedding_and_head else "-", "causal" if m.causal else "bidir", m.source]
            for m in MODELS.values()]
    print_table(["model", "hidden", "heads", "kv", "layers", "ffn", "vocab", "attention", "source"], rows)
    return 0


def run_clusters(args) -> int:
    clusters = {**CLUSTERS, **{name: get_cluster(name) for name in bundled_clusters()}}
    if args.format == "json":
        print_json({name: asdict(c) for name, c in clusters.items()})
        return 0
    rows = []
    for c in clusters.values():
        bw = c.busbw_bytes_per_s
        nodes = f"{c.nodes}x{c.node_gpus}" if c.nodes > 1 else f"{c.gpus}x"
        link = f"{c.inter_node_bytes_per_s / 1e9:.4g}" if c.inter_node_bytes_per_s else "-"
        rows.append([c.name + (" (default)" if c.name == DEFAULT_CLUSTER else ""), f"{nodes} {c.gpu_name}",
                     format_bytes(c.memory_bytes), f"{c.peak_flops / 1e12:.0f}",
                     f"{bw['all_gather'] / 1e9:.0f}", f"{bw['all_to_all'] / 1e9:.0f}",
                     f"{bw['p2p'] / 1e9:.0f}", link, "calibrated" if c.calibration else "analytic"])
    print_table(["cluster", "GPUs", "memory/GPU", "bf16 TFLOPS", "AG/RS GB/s", "a2a GB/s", "p2p GB/s",
                 "inter-node GB/s per GPU", "times"], rows)
    return 0


def run_strategies(args) -> int:
    if args.format == "json":
        print_json({name: asdict(s) for name, s in CATALOG.items()})
        return 0
    rows = []
    for s in CATALOG.values():
        rules = ["s % p" + (" (2p causal)" if s.ring_attention else "")]
        n = str(s.head_degree) if s.head_degree else "p"  # a two-dimensional strategy's head degree binds the heads
        if s.head_degree:
            rules.append(f"p % {n}")
        if s.uneven_heads:  # ceil or floor of heads / p per rank, where ulysses_z's rules fail
            rules.append("heads >= p, not ulysses_z's split")
        elif s.splits_heads:
            rules.append(f"heads % {n}" + (" (or uneven, a < p)" if s.head_degree else ""))
        rules.append(KV_RULE_TEXT[s.kv_heads_rule].replace("% p", f"% {n}").replace("p %", f"{n} %"))
        rows.append([s.name, s.paper_name, "yes" if s.usable else "no: " + s.unusable_reason.split(",")[0],
                     "; ".join(rules), s.attention])
    print_table(["strategy", "paper", "usable", "needs", "attention"], rows)
    print("\nEvery usable strategy also runs as NAME+recompute (activation recomputation of the layer).")
    print("NAME+tiled runs its MLPs over chunks of the sequence (the tiled MLP), NAME+offload keeps what a layer keeps "
          "in host memory; the flags combine (NAME+recompute+tiled+offload; docs/tiled_mlp_and_offload.md).")
    return 0
