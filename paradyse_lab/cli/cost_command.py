"""`paradyse-lab cost`: per-strategy time and memory of one sequence length under a cost model.

Examples: `paradyse-lab cost --model gpt --seq 65536` (analytic model, table),
`paradyse-lab cost --model bert --seq 4K --cost-model paper --format json` (the authors' measured times),
`paradyse-lab cost --model llama --seq 64K --kv-heads 8` (the paper's LLaMA layer with grouped-query attention);
`paradyse-lab cost --model gpt --documents 16K,8K,4K,4K` (one packed step of four documents, attention inside
each).
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from paradyse_lab.app.step_question import HEAD_CHOICES, StepQuestion, option_list, uniform_costs
from paradyse_lab.cli.output import (
    add_budget_arguments,
    add_cluster_arguments,
    add_format_argument,
    add_reserve_argument,
    budget_bytes,
    format_bytes,
    format_seconds,
    print_json,
    print_table,
    reserve_bytes,
)
from paradyse_lab.core.layer_graph import GRANULARITIES
from paradyse_lab.core.strategies import StrategyOption
from paradyse_lab.errors import UserInputError

MAX_COUNT = 2**30
"""Largest sequence length or batch the commands accept (1G tokens)."""


def parse_int(field: str, text: str) -> int:
    """A positive integer (at most MAX_COUNT) from the command line, accepting 64K / 1M / 1_000 / 1e3 forms.

    Read exactly (decimal arithmetic, never through float: 2**53 + 1 stays itself), its range checked before
    any use, and refused with the text as typed; digits of other scripts are refused."""
    raw = text.strip().replace("_", "")
    if not raw.isascii():  # Decimal reads other scripts' digits ('٤٠٩٦') as numbers: refused, not guessed
        raise UserInputError(f"{field} must be a positive integer in ASCII digits (e.g. 4096 or 4K), got {text!r}")
    scale = 1
    if raw[-1:].upper() in ("K", "M"):
        scale = 1024 if raw[-1].upper() == "K" else 1024 * 1024
        raw = raw[:-1]
    try:
        value = Decimal(raw) * scale
    except InvalidOperation:
        value = Decimal("NaN")
    if not value.is_finite() or value != value.to_integral_value() or value <= 0:
        raise UserInputError(f"{field} must be a positive integer, got {text!r}")
    if value > MAX_COUNT:
        raise UserInputError(f"{field} must be at most {MAX_COUNT:,}, got {text!r}")
    return int(value)


def parse_options(text: str | None, recompute: bool, tiled: bool = False, offload: bool = False,
                  two_d: bool = False) -> list[StrategyOption]:
    """Comma-separated option names (`NAME[+recompute][+tiled][+offload]`); default: the usable strategies
    (`two_d`: and the two-dimensional ones). Each flag given adds every option so far with it (`--recompute`,
    `--tiled-mlp`, `--offload`)."""
    return option_list(split_names(text), recompute, tiled, offload, two_d=two_d)


def split_names(text: str | None) -> tuple[str, ...] | None:
    """A comma-separated list as names (None when not given)."""
    names = tuple(n.strip() for n in text.split(",") if n.strip()) if text else ()
    return names or None


def add_technique_arguments(p) -> None:
    """`--tiled-mlp` and `--offload`: the long-context options beside `--recompute` (docs/tiled_mlp_and_offload.md)."""
    p.add_argument("--tiled-mlp", action="store_true",
                   help="also offer each option with the tiled MLP (NAME+tiled: the MLP over chunks of about "
                   "hidden positions, keeping only its input and recomputing each chunk in the backward; ALST's "
                   "TiledMLP)")
    p.add_argument("--head-chunks", action="store_true",
                   help="also offer each option of a strategy that can with head-chunked attention (NAME+headchunk: "
                   "the attention one query head per rank at a time, only one chunk's head-sharded q, k, v and "
                   "output live; ulysses_z)")
    p.add_argument("--two-d", action="store_true",
                   help="also offer the two-dimensional strategies: ulysses_ring:a (Ulysses x ring, USP: all-to-all "
                   "over heads in groups of a GPUs, zig-zag ring over the p/a groups) for every head degree a that "
                   "divides the GPUs (the heads split unevenly in the groups where a does not divide them); "
                   "megatron_cp:a (tensor x context parallel: Megatron TP+SP in groups of a GPUs, zig-zag ring "
                   "over the p/a groups) for every degree a that divides the GPUs, the heads and the K/V heads; and "
                   "ulysses_uneven (Ulysses with ceil or floor of heads/p heads per GPU) where p does not divide "
                   "the heads")
    p.add_argument("--offload", action="store_true",
                   help="also offer each option with activation offload (NAME+offload: what a sub-layer keeps "
                   "for the backward waits in host memory, copied over the cluster's host_link_gbps, within its "
                   "host_memory_gib)")


def add_step_arguments(p):
    """`--seq S` (one sequence per step) or `--documents A,B,...` (one packed step); returns the group."""
    step = p.add_mutually_exclusive_group(required=True)
    step.add_argument("--seq", help="sequence length in tokens (e.g. 65536 or 64K)")
    step.add_argument("--documents", help="one packed step: its documents' lengths, comma-separated (e.g. "
                      "16K,8K,4K,4K); attention stays inside each, each document is padded to the layout unit")
    return step


def question_of(args, seq_len: int | None = None):
    """The `StepQuestion` of the shared flags of `cost` and `plan` (`add_question_arguments`), at the step of
    --seq / --documents, or at `seq_len` when given."""
    batch = parse_int("--batch", args.batch)
    docs = None
    if seq_len is None and getattr(args, "documents", None) is not None:
        docs = tuple(parse_int("--documents", x) for x in args.documents.split(",") if x.strip())
        if not docs:
            raise UserInputError("--documents must list at least one length, e.g. 16K,8K,4K")
    elif seq_len is None:
        seq_len = parse_int("--seq", args.seq)
    kv = getattr(args, "kv_heads", None)
    return StepQuestion(
        model=args.model, cluster=args.cluster, gpus=getattr(args, "gpus", None), seq_len=seq_len, documents=docs,
        batch=batch, strategies=split_names(args.strategies), recompute=args.recompute,
        tiled=getattr(args, "tiled_mlp", False), offload=getattr(args, "offload", False),
        headchunk=getattr(args, "head_chunks", False),
        two_d=getattr(args, "two_d", False),
        granularity=getattr(args, "granularity", "block"), head=getattr(args, "head", "auto"),
        budget_bytes=budget_bytes(args), reserve_bytes=reserve_bytes(args),
        cost_model=getattr(args, "cost_model", "auto"), profiles=getattr(args, "profiles", "") or "",
        kv_heads=parse_int("--kv-heads", kv) if kv is not None else None)


def add_question_arguments(p, head: bool = True) -> None:
    """The flags `cost`, `plan` and `solvers compare` share, with one set of defaults:
    model, cluster, GPUs, batch, options, techniques, granularity, head
    (unless `head` is False: solvers compare compares at the whole head), budget, reserve, cost model, kv heads."""
    p.add_argument("--model", required=True, help="preset name (see `paradyse-lab catalog models`), config.json or a "
                   "model folder holding one")
    add_cluster_arguments(p)
    p.add_argument("--batch", default="1", help="sequences per step (default 1, as in the paper)")
    p.add_argument("--strategies", help="comma-separated option names (default: all usable)")
    p.add_argument("--recompute", action="store_true", help="also offer each strategy with recomputation")
    add_technique_arguments(p)
    p.add_argument("--granularity", choices=GRANULARITIES, default="block",
                   help="block: one choice per layer (the paper); sublayer: attention and MLP choose apart")
    if head:
        p.add_argument("--head", choices=HEAD_CHOICES, default="auto",
                       help="head and loss: whole (the replicated head and whole logits), tiled (the tiled "
                       "loss), vocab (the embedding and head sharded by vocabulary rows, with the tiled loss), or "
                       "auto (default: the fastest that fits, at one GPU without vocab)")
    add_budget_arguments(p)
    add_reserve_argument(p)
    p.add_argument("--kv-heads", help="override the model's key/value heads (grouped-query attention; must divide "
                   "its heads): shows what GQA does to each strategy (the ring passes kv_heads/heads of the K/V "
                   "bytes; the strategies' rule on kv_heads is in `paradyse-lab catalog strategies`)")
    p.add_argument("--cost-model", default="auto",
                   help="auto (default: replay where the cluster has measured kernel tables, bundled or beside its "
                   "cluster file, else analytic), replay (the runtime's traced operations priced on the cluster's "
                   "kernel tables), analytic (calibrated when the --cluster file carries a calibration), paper "
                   "(the ParaDySe authors' measured A100 times; bert, llama, gpt, paper-7b on a100-80gb-x8 only), "
                   "calibrated, a learned kind (hybrid, forest, polynomial, residual; fitted on --profiles) or a "
                   ".joblib file")
    p.add_argument("--profiles", default="", help="profile CSV the calibrated and learned models are fitted on "
                   "(default: the cluster's bundled profile)")


def register(sub) -> None:
    p = sub.add_parser(
        "cost", help="per-strategy time and memory at one sequence length",
        description="Analytic cost of running every layer with one strategy: time per layer (forward + "
        "backward), kept activation bytes per layer, transient bytes, model-state bytes, whole-model peak, "
        "whether it fits the budget a plan gets, and bytes sent per layer by collective. All numbers are per GPU; "
        "each row takes the head option `plan` would (--head auto: the fastest that fits).",
    )
    add_question_arguments(p)
    add_step_arguments(p)
    add_format_argument(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from paradyse_lab.costmodel.factory import cost_model_label, priced_by  # pandas: only when run

    answer = uniform_costs(question_of(args))
    ctx, cm, costs, refused, heads = answer.context, answer.cost_model, answer.costs, answer.refused, answer.head_parts
    model, cluster = ctx.model, ctx.cluster
    if args.format == "json":
        packed = {"documents": list(cm.step.documents), "padding": cm.step.padding} if args.documents else {}
        print_json({
            "model": model.name, "cluster": cluster.name, "gpus": cluster.gpus, "seq_len": answer.seq_len,
            "batch": answer.batch, **packed, "cost_model": cost_model_label(cm),
            "priced_by": priced_by(cm), "budget_bytes": ctx.budget_bytes,
            "strategies": {
                c.option: {
                    "time_s_per_layer": c.time_s_per_layer, "kept_bytes_per_layer": c.kept_bytes_per_layer,
                    "transient_bytes": c.transient_bytes, "model_state_bytes": c.model_state_bytes,
                    "peak_bytes": c.peak_bytes, "fits": c.fits, "comm_bytes_per_layer": c.comm_bytes_per_layer,
                    "total_time_s": c.total_time_s, "host_bytes_per_layer": c.host_bytes_per_layer,
                    "head": answer.heads[c.option],
                } for c in costs
            },
            "cannot_split": refused,
            "head": heads,
        })
        return 0
    print(f"{model.name} ({model.layers} layers) on {cluster.name} ({cluster.gpus}x {cluster.gpu_name}, "
          f"{format_bytes(cluster.memory_bytes)} each, budget {format_bytes(ctx.budget_bytes)}), {answer.what}; "
          f"cost model {cost_model_label(cm)}; per GPU:")
    print("priced by: " + ", ".join(f"{what.replace('_', ' ')} {name}" for what, name in priced_by(cm).items()))
    rows = [[c.option, answer.heads[c.option], format_seconds(c.time_s_per_layer), format_bytes(c.kept_bytes_per_layer),
             format_bytes(c.transient_bytes), format_bytes(c.model_state_bytes), format_bytes(c.peak_bytes),
             "yes" if c.fits else "OOM",
             ", ".join(f"{op} {format_bytes(n)}" for op, n in c.comm_bytes_per_layer.items()) or "-"]
            for c in costs]
    rows += [[name, "-", "-", "-", "-", "-", "-", "cannot split", "-"] for name in refused]
    header = ["strategy", "head", "time/layer", "kept/layer", "transient", "model states", "peak", "fits",
              "sent per layer"]
    if any(c.host_bytes_per_layer for c in costs):  # offload: what each layer moves to host memory
        hosts = {c.option: format_bytes(c.host_bytes_per_layer) for c in costs}
        rows = [row[:4] + [hosts.get(row[0], "-")] + row[4:] for row in rows]
        header = header[:4] + ["host/layer"] + header[4:]
    print_table(header, rows)
    for why in refused.values():
        print(f"cannot split: {why}")
    if heads:
        print("\nembedding, head and loss (outside the layers; each row above takes the fastest head option that "
              "fits, as `paradyse-lab plan` does; --head fixes one):")
        print_table(["head option", "time", "kept", "transient", "model states"],
                    [[name, format_seconds(h["time_s"]), format_bytes(h["kept_bytes"]),
                      format_bytes(h["transient_bytes"]), format_bytes(h["model_state_bytes"])]
                     for name, h in heads.items()])
    return 0
