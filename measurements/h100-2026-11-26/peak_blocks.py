"""One step of `paradyse-lab train` in this process under CUDA's memory history, and what is live at its peak.

Run from the repository root (PYTHONPATH=$PWD): `python3 measurements/h100-2026-11-26/peak_blocks.py --out DIR`.
It trains one step of llama1b at the longest planned length on one GPU (the plan of call1.sh's train_max: metp on
all 16 layers, the tiled loss, bf16) with torch.cuda.memory._record_memory_history on, then replays the recorded
allocations and frees: DIR/peak_blocks.txt gets the step's peak_bytes against the two earlier sessions' step 1, the
replayed peak, and the largest blocks live at that peak with their innermost frames in this repository; DIR/
train_max.csv is the step's log. Without CUDA (a dry run on CPU: --model llama-tiny --length 256) the step trains
and the report says that there is no memory history.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

STEP1_2026_11_25 = 67_092_243_456
"""Step 1's peak_bytes of the first session's call1 (../h100-2026-11-25/train_llama1b_max_length.csv)."""
STEP1_2026_11_26 = 67_260_015_616
"""Step 1's peak_bytes of this session's call1 (train_max.csv): 167,772,160 bytes more."""
REPO_DIRS = ("/runtime/", "/paradyse_lab/")


def _train(model: str, length: int, log: Path) -> int:
    from paradyse_lab.cli import main

    return main(["train", "--model", model, "--dataset", f"uniform:{length}:{length}", "--steps", "1",
                 "--cluster", "h100-80gb-x8", "--no-progress", "--nproc", "1", "--log-file", str(log)])


def _events(snapshot) -> list[dict]:
    traces = [t for t in snapshot.get("device_traces", []) if t]
    return traces[0] if traces else []


def _replay(events, stop: int | None = None):
    """(index of the event at the highest allocated total, that total, the live blocks addr -> event after event
    `stop`, or at the end)."""
    live, total, best, best_at = {}, 0, -1, -1
    for i, e in enumerate(events):
        if e["action"] == "alloc":
            live[e["addr"]] = e
            total += e["size"]
        elif e["action"] in ("free_requested", "free_completed") and e["addr"] in live:
            total -= live.pop(e["addr"])["size"]
        if total > best:
            best, best_at = total, i
        if stop is not None and i == stop:
            break
    return best_at, best, live


def _where(event) -> str:
    frames = [f for f in event.get("frames", []) if any(d in f["filename"] for d in REPO_DIRS)]
    return " < ".join(f"{f['filename'].rsplit('/', 2)[-2]}/{f['filename'].rsplit('/', 1)[-1]}:{f['line']} {f['name']}"
                      for f in frames[:4]) or "(no frame in this repository)"


def _report(events, lines: list[str]) -> None:
    at, peak, _ = _replay(events)
    live = _replay(events, at)[2]
    lines.append(f"replayed peak: {peak:,} bytes at event {at} of {len(events)} ({len(live)} live blocks)")
    blocks = sorted(live.values(), key=lambda e: -e["size"])
    lines.append("largest live blocks at the peak (bytes, innermost frames in this repository):")
    lines += [f"  {e['size']:>14,}  {_where(e)}" for e in blocks[:30]]
    by_site: dict[str, int] = {}
    for e in blocks:
        by_site[_where(e)] = by_site.get(_where(e), 0) + e["size"]
    lines.append("live bytes at the peak by allocation site (largest 20):")
    lines += [f"  {b:>14,}  {s}" for s, b in sorted(by_site.items(), key=lambda kv: -kv[1])[:20]]
    fp32_sums = [e for e in blocks if e["size"] in (134_217_728, 67_108_864) and "grad_accumulator" in _where(e)]
    lines.append(f"fp32 weight-gradient sums (sublayer.grad_accumulator, 128 and 64 MiB) live at the peak: "
                 f"{len(fp32_sums)}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="measurements/h100-2026-11-25/llama1b")
    parser.add_argument("--length", type=int, default=125_688)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.memory._record_memory_history(enabled="all", context="alloc", stacks="python",
                                                 max_entries=2_000_000)
    log = out / "train_max.csv"
    rc = _train(args.model, args.length, log)
    lines = [f"train rc={rc}; device: {torch.cuda.get_device_name() if cuda else 'cpu (no CUDA)'}"]
    rows = log.read_text().splitlines() if log.is_file() else []
    if len(rows) > 1:
        header, first = rows[0].split(","), rows[1].split(",")
        peak = int(first[header.index("peak_bytes")])
        lines.append(f"step 1 peak_bytes {peak:,} ({first[header.index('peak_of')]}); 2026-11-25 call1 "
                     f"{STEP1_2026_11_25:,} (difference {peak - STEP1_2026_11_25:+,}); 2026-11-26 call1 "
                     f"{STEP1_2026_11_26:,} (difference {peak - STEP1_2026_11_26:+,})")
    if cuda:
        events = _events(torch.cuda.memory._snapshot())
        torch.cuda.memory._record_memory_history(enabled=None)
        _report(events, lines) if events else lines.append("no memory history recorded")
    else:
        lines.append("no CUDA: no memory history (a dry run)")
    (out / "peak_blocks.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
