"""`paradyse-lab cost`: per-strategy time and memory of one sequence length under a cost model.

Examples: `paradyse-lab cost --model gpt --seq 65536` (analytic model, table),
`paradyse-lab cost --model bert --seq 4K --cost-model paper --format json` (the authors' measured times),
`paradyse-lab cost --model llama --seq 64K --kv-heads 8` (the paper's LLaMA layer with grouped-query attention);
`paradyse-lab cost --model gpt --documents 16K,8K,4K,4K` (one packed step of four documents, attention inside
each; paradyse_lab/costmodel/packed.py).
"""

from __future__ import annotations

from dataclasses import replace

from paradyse_lab.cli.output import (
    add_cluster_arguments,
    add_format_argument,
    cluster_of,
    format_bytes,
    format_seconds,
    print_json,
    print_table,
)
from paradyse_lab.core.model_spec import ModelSpec, get_model
from paradyse_lab.core.strategies import USABLE, StrategyOption
from paradyse_lab.costmodel import uniform_plan_cost
from paradyse_lab.errors import UserInputError

MAX_COUNT = 2**30
"""Largest sequence length or batch the commands accept (1G tokens)."""


def parse_int(field: str, text: str) -> int:
    """A positive integer (at most MAX_COUNT) from the command line, accepting 64K / 1M / 1_000 / 1e3 forms.

    Read exactly (decimal arithmetic, never through float: 2**53 + 1 stays itself), its range checked before
    any use, and refused with the text as typed; digits of other scripts are refused."""
    from decimal import Decimal, InvalidOperation

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


def parse_options(text: str | None, recompute: bool, tiled: bool = False, offload: bool = False
                  ) -> list[StrategyOption]:
    """Comma-separated option names (`NAME[+recompute][+tiled][+offload]`); default: the usable strategies. Each
    flag given adds every option so far with it (`--recompute`, `--tiled-mlp`, `--offload`)."""
    names = [n.strip() for n in text.split(",") if n.strip()] if text else list(USABLE)
    opts = [StrategyOption.parse(n) for n in names]
    for flag, wanted in (("recompute", recompute), ("tiled", tiled), ("offload", offload)):
        if wanted:
            opts += [replace(o, **{flag: True}) for o in opts if not getattr(o, flag)]
    return list(dict.fromkeys(opts))


def add_technique_arguments(p) -> None:
    """`--tiled-mlp` and `--offload`: the long-context options beside `--recompute` (docs/tiled_mlp_and_offload.md)."""
    p.add_argument("--tiled-mlp", action="store_true",
                   help="also offer each option with the tiled MLP (NAME+tiled: the MLP over chunks of about "
                   "hidden positions, keeping only its input and recomputing each chunk in the backward; ALST's "
                   "TiledMLP)")
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


def step_of(args, cm):
    """(cost model to ask, seq_len, batch, what the step is) of `--seq` or `--documents` (then batch 1)."""
    from paradyse_lab.core.strategies import layout_unit
    from paradyse_lab.costmodel.packed import PackedCostModel, PackedStep

    batch = parse_int("--batch", args.batch)
    if args.documents is None:
        seq = parse_int("--seq", args.seq)
        return cm, seq, batch, f"seq {seq}, batch {batch}"
    docs = [parse_int("--documents", x) for x in args.documents.split(",") if x.strip()]
    if not docs:
        raise UserInputError("--documents must list at least one length, e.g. 16K,8K,4K")
    if batch != 1:
        raise UserInputError(f"--documents is one packed step: --batch must be 1, got {batch}")
    step = PackedStep(tuple(docs), layout_unit(cm.p))
    return (PackedCostModel(cm, step), step.padded_len, 1,
            f"one packed step of {len(docs)} documents, {step.tokens} tokens padded to {step.padded_len}")


def register(sub) -> None:
    p = sub.add_parser(
        "cost", help="per-strategy time and memory at one sequence length",
        description="Analytic cost of running every layer with one strategy: time per layer (forward + "
        "backward), kept activation bytes per layer, transient bytes, model-state bytes, whole-model peak, "
        "whether it fits the GPU, and bytes sent per layer by collective. All numbers are per GPU.",
    )
    p.add_argument("--model", required=True, help="preset name (see `paradyse-lab models`), config.json or a "
                   "model folder holding one")
    add_cluster_arguments(p)
    add_step_arguments(p)
    p.add_argument("--kv-heads", help="override the model's key/value heads (grouped-query attention; must divide "
                   "its heads): shows what GQA does to each strategy (the ring passes kv_heads/heads of the K/V "
                   "bytes; the strategies' rule on kv_heads is in `paradyse-lab strategies`)")
    p.add_argument("--batch", default="1", help="sequences per step (default 1, as in the paper)")
    p.add_argument("--strategies", help="comma-separated names (default: all usable)")
    p.add_argument("--recompute", action="store_true", help="also show each strategy with recomputation")
    add_technique_arguments(p)
    p.add_argument("--cost-model", default="analytic",
                   help="analytic (default; calibrated when the --cluster file carries a calibration), paper "
                   "(the ParaDySe authors' measured A100 times; bert, llama, gpt, paper-7b on a100-80gb-x8 only), "
                   "calibrated, a learned kind (hybrid, forest, polynomial, residual; fitted on --profiles) or a "
                   ".joblib file")
    p.add_argument("--profiles", default="", help="profile CSV the calibrated and learned models are fitted on "
                   "(default: the cluster's bundled profile)")
    add_format_argument(p)
    p.set_defaults(func=run)


def with_kv_heads(model: ModelSpec, text: str | None) -> ModelSpec:
    """`model` with `--kv-heads` applied (named 'NAME kv=N'), or as it is when not given."""
    if text is None:
        return model
    kv = parse_int("--kv-heads", text)
    if model.heads % kv:
        raise UserInputError(f"--kv-heads must divide the model's heads ({model.heads}), got {kv}")
    return replace(model, kv_heads=kv, name=f"{model.name} kv={kv}")


def _split_costs(cm, opts, seq: int, batch: int) -> tuple[list, dict[str, str]]:
    """(costs of the options whose shapes split at this p, {option: why not} for the others): a strategy that
    cannot split the model (heads not divisible by p, ...) is marked, not the whole table lost."""
    costs, refused = [], {}
    for o in opts:
        try:
            cm.check(o, seq, batch)
        except UserInputError as err:
            refused[o.name] = str(err)
            continue
        costs.append(uniform_plan_cost(cm, o, seq, batch))
    if not costs:
        raise UserInputError("no strategy can split this model at this size: " + "; ".join(refused.values()))
    return costs, refused


def run(args) -> int:
    from paradyse_lab.costmodel.factory import build_cost_model, cost_model_label  # pandas: only when run

    model = with_kv_heads(get_model(args.model), args.kv_heads)
    cluster = cluster_of(args)
    cm, seq, batch, what = step_of(args, build_cost_model(args.cost_model, model, cluster,
                                                          profiles=args.profiles or None))
    costs, refused = _split_costs(cm, parse_options(args.strategies, args.recompute, args.tiled_mlp, args.offload),
                                  seq, batch)
    heads = head_costs(cm, seq, batch)
    if args.format == "json":
        packed = {"documents": list(cm.step.documents), "padding": cm.step.padding} if args.documents else {}
        print_json({
            "model": model.name, "cluster": cluster.name, "gpus": cluster.gpus, "seq_len": seq, "batch": batch,
            **packed, "cost_model": cost_model_label(cm),
            "strategies": {
                c.option: {
                    "time_s_per_layer": c.time_s_per_layer, "kept_bytes_per_layer": c.kept_bytes_per_layer,
                    "transient_bytes": c.transient_bytes, "model_state_bytes": c.model_state_bytes,
                    "peak_bytes": c.peak_bytes, "fits": c.fits, "comm_bytes_per_layer": c.comm_bytes_per_layer,
                    "total_time_s": c.total_time_s, "host_bytes_per_layer": c.host_bytes_per_layer,
                } for c in costs
            },
            "cannot_split": refused,
            "head": heads,
        })
        return 0
    print(f"{model.name} ({model.layers} layers) on {cluster.name} ({cluster.gpus}x {cluster.gpu_name}, "
          f"{format_bytes(cluster.memory_bytes)} each), {what}; cost model "
          f"{cost_model_label(cm)}; per GPU:")
    rows = [[c.option, format_seconds(c.time_s_per_layer), format_bytes(c.kept_bytes_per_layer),
             format_bytes(c.transient_bytes), format_bytes(c.model_state_bytes), format_bytes(c.peak_bytes),
             "yes" if c.fits else "OOM",
             ", ".join(f"{op} {format_bytes(n)}" for op, n in c.comm_bytes_per_layer.items()) or "-"]
            for c in costs]
    rows += [[name, "-", "-", "-", "-", "-", "cannot split", "-"] for name in refused]
    header = ["strategy", "time/layer", "kept/layer", "transient", "model states", "peak", "fits", "sent per layer"]
    if any(c.host_bytes_per_layer for c in costs):  # offload: what each layer moves to host memory
        hosts = {c.option: format_bytes(c.host_bytes_per_layer) for c in costs}
        rows = [row[:3] + [hosts.get(row[0], "-")] + row[3:] for row in rows]
        header = header[:3] + ["host/layer"] + header[3:]
    print_table(header, rows)
    for why in refused.values():
        print(f"cannot split: {why}")
    if heads:
        print("\nembedding, head and loss (outside the layers; a plan takes the fastest option that fits, "
              "`paradyse-lab plan --head`):")
        print_table(["head option", "time", "kept", "transient", "model states"],
                    [[name, format_seconds(h["time_s"]), format_bytes(h["kept_bytes"]),
                      format_bytes(h["transient_bytes"]), format_bytes(h["model_state_bytes"])]
                     for name, h in heads.items()])
    return 0


def head_costs(cm, seq: int, batch: int) -> dict:
    """Per head option (paradyse_lab/costmodel/head_loss.py): time, kept, transient and model-state bytes of the
    embedding, head and loss; empty for a model without them."""
    from paradyse_lab.costmodel.head_loss import HEAD_OPTIONS, HeadLossCostModel

    if not cm.model.embedding_and_head:
        return {}
    out = {}
    for head in HEAD_OPTIONS:
        f = HeadLossCostModel(cm, head).fixed(seq, batch)
        out[head] = {"time_s": f.time_s, "kept_bytes": f.kept_bytes, "transient_bytes": f.transient_bytes,
                     "model_state_bytes": f.model_state_bytes}
    return out
