"""Side-by-side benchmark of the runtime's strategies against the torch-native implementations a user would pick.

Run: `python examples/peer_benchmark.py --lengths 2048 --repeats 3 --out /tmp/peers.csv` (`--help` for all).
One LLaMA block (hidden 512, 8 query / 4 K/V heads, ffn 1408, RMSNorm, rotary, SwiGLU, fp32, batch 1), forward
and backward, on a world of 2 gloo ranks on CPU with one intra-op thread per rank (and at p = 1 in one process):
- megatron_ts against torch tensor parallel + sequence parallel with torchtitan's Llama plan;
- ulysses_z against FSDP2 + Ulysses attention;
- megatron_cz against FSDP2 + ring attention (causal, contiguous shards: the peer skips the blocks a rank's
  queries cannot see, so its ranks are unbalanced, where ours is zig-zag);
- ours at p = 1 (megatron_ts on one rank) against the same block in plain torch.
The peers are examples/peer_blocks.py. Per pair and length, ours and the peer alternate (the first to run
alternates too) for `--repeats` timed steps after one warm-up each; the table gives the median time ratio
ours / peer, the peak bytes of tensors alive at once per rank above what existed before the step (rank 0,
`paradyse_lab.runtime.trace.dispatch_count`), the aten operators per step (rank 0, as a TorchDispatchMode sees them: a
DTensor
operator counts once), and the largest difference of the output and of the input gradient from the
single-device reference (the plain block in fp64), relative to the reference's largest magnitude. The load
average is printed before and after. DeepSpeed and megatron-core peers run only when installed (a line says
when they are skipped). `--out` writes the rows as CSV (one per pair and length), `--format json` prints them
as JSON instead of the table.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import peer_blocks  # noqa: E402

from paradyse_lab.core.model_spec import ModelSpec  # noqa: E402
from paradyse_lab.core.strategies import StrategyOption  # noqa: E402
from paradyse_lab.errors import UserInputError  # noqa: E402
from paradyse_lab.runtime.launch import ranks as launch  # noqa: E402
from paradyse_lab.runtime.model.layout import gather_sequence, shard_sequence  # noqa: E402
from paradyse_lab.runtime.model.parallel_gpt import run_option  # noqa: E402
from paradyse_lab.runtime.model.reference import init_state_dict  # noqa: E402
from paradyse_lab.runtime.model.sublayer import make_ctx  # noqa: E402
from paradyse_lab.runtime.model.weight_shards import PARAM_NAMES, shard_sublayer  # noqa: E402
from paradyse_lab.runtime.trace.dispatch_count import DispatchCount  # noqa: E402

CONFIG = ModelSpec(vocab_size=32, max_positions=0, hidden=512, heads=8, layers=1, ffn_hidden=1408, kv_heads=4,
                   norm="rmsnorm", ffn_kind="swiglu", bias=False, rope_theta=10000.0, tied=False, name="runtime")
"""The block: LLaMA-shaped, 8 query / 4 K/V heads of 64, SwiGLU 1408 (the vocabulary is unused)."""
PAIRS = {2: [("megatron_ts", "torch TP + SP (torchtitan plan)", peer_blocks.tensor_parallel),
             ("ulysses_z", "FSDP2 + Ulysses", peer_blocks.fsdp_ulysses),
             ("megatron_cz", "FSDP2 + ring", peer_blocks.fsdp_ring)],
         1: [("megatron_ts", "plain torch block", None)]}
"""World size -> (our strategy, peer label, peer builder) pairs."""
SEQUENCE_SHARDED = (peer_blocks.fsdp_ulysses, peer_blocks.fsdp_ring)
"""The peers whose rotary embeddings see only their rank's contiguous shard of positions."""
COLUMNS = ("p", "seq_len", "ours", "peer", "ours_s", "peer_s", "time_ratio", "ours_mib", "peer_mib", "ours_ops",
           "peer_ops", "ours_err", "peer_err", "repeats", "load_before", "load_after")
OPTIONAL_PEERS = {"deepspeed": "DeepSpeed ZeRO-3 + Ulysses", "megatron.core": "megatron-core TP + SP"}


def _sublayers():
    """The full attention and MLP parameters of layer 0 ({name: tensor} each)."""
    sd = init_state_dict(CONFIG, seed=0)
    return ({n: sd[f"layers.0.attn.{n}"] for n in PARAM_NAMES}, {n: sd[f"layers.0.mlp.{n}"] for n in PARAM_NAMES})


def _inputs(s: int, dtype=torch.float32):
    gen = torch.Generator().manual_seed(1)
    return tuple(torch.randn(1, s, CONFIG.hidden, generator=gen).to(dtype) for _ in range(2))  # x, dy [1, s, h]


class Ours:
    """Our block under one strategy: x [1, t, h] in the zig-zag layout -> y, with its sharded parameters."""

    def __init__(self, strategy: str, s: int, attn: dict, mlp: dict, rank: int, p: int):
        self.option = StrategyOption(strategy, False, False, False)
        self.ctx = [make_ctx(CONFIG, None, kind, s, kind) for kind in ("attention", "mlp")]
        self.weights = [[shard_sublayer(full, kind, rank, p)[n].requires_grad_() for n in PARAM_NAMES]
                        for full, kind in ((attn, "attention"), (mlp, "mlp"))]

    def local(self, x):
        return shard_sequence(x, 1, None)  # [1, s, h] -> [1, t, h], zig-zag

    def full(self, y):
        return gather_sequence(y, 1, None)  # [1, t, h] -> [1, s, h], natural order

    def step(self, x, dy):
        for w in self.weights[0] + self.weights[1]:
            w.grad = None
        y = x
        for ctx, w in zip(self.ctx, self.weights):
            y = run_option(self.option, ctx, y, w, 0)
        y.backward(dy)
        return y


class Peer:
    """A peer block: x [1, t, h] a contiguous sequence shard (the whole sequence at p = 1) -> y."""

    def __init__(self, block, s: int, rank: int, p: int, sharded: bool):
        self.block, self.p, self.rank = block, p, rank
        t = s // p
        positions = torch.arange(rank * t, (rank + 1) * t) if sharded else torch.arange(s)
        self.cos, self.sin = peer_blocks.rope_tables(positions, CONFIG.head_dim, CONFIG.rope_theta, torch.float32)

    def local(self, x):
        t = x.shape[1] // self.p
        return x[:, self.rank * t:(self.rank + 1) * t].contiguous()  # [1, s, h] -> [1, t, h], contiguous

    def full(self, y):
        if self.p == 1:
            return y
        parts = [torch.empty_like(y) for _ in range(self.p)]
        dist.all_gather(parts, y.contiguous())
        return torch.cat(parts, dim=1)  # p x [1, t, h] -> [1, s, h]

    def step(self, x, dy):
        self.block.zero_grad(set_to_none=True)
        y = self.block(x, self.cos, self.sin)
        y.backward(dy)
        return y


def make_peer(name: str, s: int, attn: dict, mlp: dict, rank: int, p: int) -> Peer:
    """The peer `name` (a builder of peer_blocks, or 'plain': the plain block) for sequences of `s` tokens."""
    if name == "plain":
        return Peer(peer_blocks.plain_block(CONFIG, attn, mlp), s, rank, p, False)
    build = getattr(peer_blocks, name)
    return Peer(build(CONFIG, attn, mlp, None), s, rank, p, build in SEQUENCE_SHARDED)


def _barrier(p: int) -> None:
    if p > 1:
        dist.barrier()


def _timed(impl, x, dy, p: int) -> float:
    xl = impl.local(x).requires_grad_()
    dyl = impl.local(dy)
    _barrier(p)
    start = time.perf_counter()
    impl.step(xl, dyl)
    _barrier(p)
    return time.perf_counter() - start


def _counted(impl, x, dy) -> tuple[int, int]:
    """(aten operators, peak live tensor bytes) of one step of `impl`."""
    xl = impl.local(x).requires_grad_()
    dyl = impl.local(dy)
    with DispatchCount() as counter:
        impl.step(xl, dyl)
    return counter.count("aten"), counter.peak_bytes


def _error(impl, x, dy, want_y, want_dx) -> float:
    """Largest |difference| of y and dx from the fp64 reference, over the reference's largest |value|."""
    xl = impl.local(x).requires_grad_()
    y = impl.step(xl, impl.local(dy))
    got_y, got_dx = impl.full(y.detach()), impl.full(xl.grad)
    if want_y is None:
        return float("nan")
    return max(float((got.double() - want).abs().max() / want.abs().max())
               for got, want in ((got_y, want_y), (got_dx, want_dx)))


def _reference(s: int, attn: dict, mlp: dict, x, dy):
    """(y, dx) of the plain block in fp64 on the whole sequence."""
    block = peer_blocks.plain_block(CONFIG, attn, mlp, torch.float64)
    cos, sin = peer_blocks.rope_tables(torch.arange(s), CONFIG.head_dim, CONFIG.rope_theta, torch.float64)
    xr = x.double().requires_grad_()
    y = block(xr, cos, sin)
    y.backward(dy.double())
    return y.detach(), xr.grad


def rank_main(lengths: list[int], repeats: int, result_path: str, group=None) -> None:
    """Every pair of this world size at every length; rank 0 writes the rows to `result_path` (JSON)."""
    torch.set_num_threads(1)
    p, rank = dist.get_world_size(), dist.get_rank()
    attn, mlp = _sublayers()
    rows = []
    for s in lengths:
        x, dy = _inputs(s)
        want = _reference(s, attn, mlp, x, dy) if rank == 0 else (None, None)
        for strategy, label, build in PAIRS[p]:
            ours = Ours(strategy, s, attn, mlp, rank, p)
            peer_block = build(CONFIG, attn, mlp, None) if build else peer_blocks.plain_block(CONFIG, attn, mlp)
            peer = Peer(peer_block, s, rank, p, build in SEQUENCE_SHARDED)
            load_before = os.getloadavg()[0]
            times = {"ours": [], "peer": []}
            for rep in range(repeats + 1):
                order = [("ours", ours), ("peer", peer)][:: 1 if rep % 2 == 0 else -1]
                for name, impl in order:
                    dt = _timed(impl, x, dy, p)
                    if rep:  # the first round warms up
                        times[name].append(dt)
            counts = {name: _counted(impl, x, dy) for name, impl in (("ours", ours), ("peer", peer))}
            errors = {name: _error(impl, x, dy, *want) for name, impl in (("ours", ours), ("peer", peer))}
            med = {name: statistics.median(v) for name, v in times.items()}
            rows.append({"p": p, "seq_len": s, "ours": strategy if p > 1 else "ours at p = 1", "peer": label,
                         "ours_s": round(med["ours"], 4), "peer_s": round(med["peer"], 4),
                         "time_ratio": round(med["ours"] / med["peer"], 3),
                         "ours_mib": round(counts["ours"][1] / 2**20, 1),
                         "peer_mib": round(counts["peer"][1] / 2**20, 1),
                         "ours_ops": counts["ours"][0], "peer_ops": counts["peer"][0],
                         "ours_err": f"{errors['ours']:.1e}", "peer_err": f"{errors['peer']:.1e}",
                         "repeats": repeats, "load_before": round(load_before, 2),
                         "load_after": round(os.getloadavg()[0], 2)})
            _barrier(p)
    if rank == 0:
        with open(result_path, "w") as f:
            json.dump(rows, f)


def _lengths(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or any(v <= 0 or v % 4 for v in values):
        raise UserInputError(f"--lengths {text!r}: give comma-separated positive multiples of 4 (2p for p = 2), "
                             "e.g. 2048,8192")
    return values


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Time, memory, operator count and accuracy of the runtime's "
                                     "strategies against torch-native peers on one LLaMA block (CPU, gloo).")
    parser.add_argument("--lengths", default="2048", help="comma-separated sequence lengths (default 2048)")
    parser.add_argument("--repeats", type=int, default=3, help="timed steps per implementation (default 3)")
    parser.add_argument("--out", default=None, help="write the rows to this CSV file")
    parser.add_argument("--format", choices=("table", "json"), default="table", help="what to print")
    args = parser.parse_args(argv)
    args.lengths = _lengths(args.lengths)
    if args.repeats < 1:
        raise UserInputError(f"--repeats {args.repeats}: give a positive number of timed steps")
    return args


def _print_table(rows: list[dict]) -> None:
    head = ("ours", "peer", "seq", "time ours/peer", "MiB ours / peer", "aten ops ours / peer",
            "err ours / peer")
    print(" | ".join(head))
    for r in rows:
        print(" | ".join([r["ours"], r["peer"], str(r["seq_len"]), f"{r['time_ratio']:.2f} ({r['ours_s']:.3f} s / "
                          f"{r['peer_s']:.3f} s)", f"{r['ours_mib']} / {r['peer_mib']}",
                          f"{r['ours_ops']} / {r['peer_ops']}", f"{r['ours_err']} / {r['peer_err']}"]))


def main(argv=None) -> int:
    try:
        args = parse_args(argv)
    except UserInputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    skipped = [f"{label}: skipped ({module} is not installed)" for module, label in OPTIONAL_PEERS.items()
               if importlib.util.find_spec(module.split(".")[0]) is None]
    start_load = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for p in (2, 1):
            path = os.path.join(tmp, f"p{p}.json")
            launch.launch(rank_main, p, args.lengths, args.repeats, path)
            with open(path) as f:
                rows += json.load(f)
    end_load = os.getloadavg()
    if args.out:
        import csv

        with open(args.out + ".part", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=COLUMNS)
            writer.writeheader()
            writer.writerows(rows)
        os.replace(args.out + ".part", args.out)
    if args.format == "json":
        print(json.dumps({"rows": rows, "skipped": skipped, "load": [start_load, end_load]}, indent=1))
        return 0
    print(f"one LLaMA block (h {CONFIG.hidden}, {CONFIG.heads}/{CONFIG.kv_heads} heads, ffn {CONFIG.ffn_hidden}, "
          f"fp32), forward + backward, world 2 on gloo, 1 thread per rank, {args.repeats} repeats, "
          f"torch {torch.__version__}; load average (1, 5, 15 min) before {start_load}, after {end_load}")
    _print_table(rows)
    for line in skipped:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
