"""Peak bytes of one plain metp MLP sub-layer (bf16, CPU, one process), forward and backward apart, above what was
allocated when each started (torch's profiler): the CPU experiment behind the README's 160 MiB.

Run from a tree's root: `PYTHONPATH=$PWD python3 measurements/h100-2026-11-26/mlp_backward_peak.py T H`
(T tokens, hidden H, FFN 4H, SwiGLU, RMSNorm, no biases). On another commit's tree (e.g. `git worktree add
--detach DIR 31ca0b6`, the commit of the 2026-11-25 call1) give the script's path in this tree. 8192 128: the
backward at 31ca0b6 and with runtime/strategies/metp.py's `_whole_partial` 69,730,304 bytes, at 5e5c037 70,385,664
(+655,360 = 10 f h); the forward 36,044,800 and 38,141,952 (+2,097,152 = t h e).
"""

import json
import sys
import tempfile

import torch
from torch.profiler import ProfilerActivity, profile

from paradyse_lab.core.model_spec import ModelSpec
from paradyse_lab.runtime.comm.fake_group import FakeGroup
from paradyse_lab.runtime.model.parallel_gpt import STRATEGY_MODULES
from paradyse_lab.runtime.model.reference import init_state_dict
from paradyse_lab.runtime.model.sublayer import make_ctx, run_sublayer
from paradyse_lab.runtime.model.weight_shards import PARAM_NAMES, shard_sublayer


def peak(run) -> int:
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        run()
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        with open(f.name) as trace:
            events = [e["args"] for e in json.load(trace)["traceEvents"] if e.get("name") == "[memory]"]
    return max(e["Total Allocated"] for e in events) - (events[0]["Total Allocated"] - events[0]["Bytes"])


def main() -> None:
    t, h = int(sys.argv[1]), int(sys.argv[2])
    cfg = ModelSpec(vocab_size=64, max_positions=t, hidden=h, heads=max(1, h // 64), layers=1, ffn_hidden=4 * h,
                    kv_heads=max(1, h // 256), norm="rmsnorm", ffn_kind="swiglu", bias=False, rope_theta=5e5,
                    tied=True, name="runtime")
    full = {n.rpartition(".")[2]: v for n, v in init_state_dict(cfg, 3).items() if n.startswith("layers.0.mlp.")}
    params = [v.bfloat16().requires_grad_() for v in (shard_sublayer(full, "mlp", 0, 1)[n] for n in PARAM_NAMES)]
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(1, t, h, generator=gen).bfloat16().requires_grad_()
    dy = torch.randn(1, t, h, generator=gen).bfloat16()
    ctx = make_ctx(cfg, FakeGroup(1, 0), "mlp", t)
    out = {}
    forward = peak(lambda: out.setdefault("y", run_sublayer(STRATEGY_MODULES["metp"].MLP, ctx, False, x, params)))
    backward = peak(lambda: out["y"].backward(dy))
    print(f"t={t} h={h} f={4 * h}: forward {forward:,} bytes, backward {backward:,} bytes "
          f"(10 f h = {40 * h * h:,}, t h e = {2 * t * h:,})")


if __name__ == "__main__":
    main()
