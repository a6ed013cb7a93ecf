"""What `python -m paradyse_lab.app.measure.gpu_session` measures (`MeasurementPlan`, `QUICK`), its output folder,
budget and log (`Session`), and the helpers its stages share. Library module of the command and
of its stages, both of which import it (it imports neither).
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from paradyse_lab.core.strategies import USABLE
from paradyse_lab.files.atomic_write import write_text_atomic

REPO = Path(__file__).resolve().parents[3]
STAGES = ("env", "pytest", "gemm", "attention", "kernels", "profiles", "peers", "summary")
QUICK_STAGES = tuple(s for s in STAGES if s != "peers")
"""The stages `--quick` runs unless `--stages` names others: the peer benchmark spawns gloo worlds (tens of
seconds even at its smallest), so the CPU test of this script leaves it out."""
PROFILE_MODELS = ("bert", "llama", "gpt")


@dataclass(frozen=True)
class MeasurementPlan:
    """What a run measures (full or --quick)."""

    models: tuple[str, ...] = PROFILE_MODELS
    layers: int = 0
    """Layers of each profiled stack (0: the preset's)."""
    p: int = 8
    lengths: tuple[int, ...] = tuple(512 * 2**k for k in range(13))  # 512 .. 2M, doubling
    gemm_seqs: tuple[int, ...] = (4096, 32768)
    gemm_ops: tuple[str, ...] = ("fwd", "dgrad", "wgrad")
    attention_seqs: tuple[int, ...] = tuple(128 * 2**k for k in range(11))  # 128 .. 128K
    max_repeats: int = 3
    replay_strategies: tuple[str, ...] = USABLE
    """Strategies whose traced operations the kernels stage measures (the replay model's tables)."""
    peer_lengths: tuple[int, ...] = (2048, 8192)
    """Sequence lengths of the peer benchmark (examples/peer_benchmark.py)."""
    peer_repeats: int = 3
    caps_s: dict = field(default_factory=lambda: {"pytest": 120.0, "gemm": 45.0, "attention": 60.0,
                                                  "kernels": 150.0, "peers": 240.0})
    """Longest time each stage may take (also at most 20% of the budget each)."""
    min_s: dict = field(default_factory=lambda: {"pytest": 20.0, "gemm": 5.0, "attention": 5.0, "kernels": 10.0,
                                                 "profiles": 10.0, "peers": 30.0, "summary": 3.0})
    """A stage starts only with this much budget left."""


QUICK = MeasurementPlan(models=("bert",), layers=1, lengths=(64, 128), gemm_seqs=(512,), gemm_ops=("fwd",),
             attention_seqs=(64, 128), max_repeats=1, replay_strategies=("megatron_cz",), peer_lengths=(64,),
             peer_repeats=1, min_s={"pytest": 3.0, "gemm": 0.3, "attention": 0.3, "kernels": 0.3, "profiles": 0.5,
                                    "peers": 0.5, "summary": 0.3})


class Session:
    """The output folder, the budget and session_log.json."""

    def __init__(self, out: Path, budget_s: float, started: float, argv: list[str]):
        self.out, self.budget_s, self.started = out, budget_s, started
        self.deadline = started + budget_s
        self.log: dict = {"argv": argv, "budget_s": budget_s, "started": now_utc(), "stages": [], "profiles": {}}

    def left(self) -> float:
        return self.deadline - time.perf_counter()

    def say(self, text: str) -> None:
        print(f"[{time.perf_counter() - self.started:7.1f}s] {text}", flush=True)

    def save_log(self) -> None:
        self.log["wall_s"] = round(time.perf_counter() - self.started, 2)
        write_text_atomic(self.out / "session_log.json", json.dumps(self.log, indent=1, default=str))

    def run_stage(self, name: str, fn, min_s: float | None) -> None:
        """Run `fn(record)` guarded; skipped when less than `min_s` of the budget is left (None: always run)."""
        record = {"name": name, "status": "ok"}
        self.log["stages"].append(record)
        if min_s is not None and self.left() < min_s:
            record.update(status="skipped", reason=f"time budget: {max(self.left(), 0):.1f} s left, needs {min_s} s")
            self.say(f"{name}: skipped ({record['reason']})")
            self.save_log()
            return
        self.say(f"{name}: start")
        t0 = time.perf_counter()
        try:
            fn(record)
        except Exception as err:  # noqa: BLE001 - one stage's failure must not lose the others
            record.update(status="error", error=f"{type(err).__name__}: {err}", traceback=traceback.format_exc())
            self.say(f"{name}: ERROR {type(err).__name__}: {err}")
        record["seconds"] = round(time.perf_counter() - t0, 2)
        self.say(f"{name}: {record['status']} in {record['seconds']} s")
        self.save_log()


def now_utc() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def write_csv_atomic(path: Path, rows: list[dict], columns) -> None:
    """Rows as CSV (columns in order), atomically."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(columns), extrasaction="raise", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    write_text_atomic(path, buf.getvalue())


def device_kind(name: str, total_bytes: int) -> tuple[str, str | None]:
    """(file-name label, cluster preset or None) of a device: `h100-80gb` / h100-80gb-x8 and so on."""
    upper = name.upper()
    if "H200" in upper:
        return "h200", "h200-x8"
    if "H100" in upper:
        return "h100-80gb", "h100-80gb-x8"
    if "A100" in upper:
        big = total_bytes > 50 * 2**30
        return ("a100-80gb", "a100-80gb-x8") if big else ("a100-40gb", "a100-40gb-x8")
    if name == "cpu":
        return "cpu", None
    return "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-") or "gpu", None
