"""What a training run records of each optimizer step (library module of the training loop and
its optimizer step): `StepLog`, the per-step CSV of `--log-file`, and `step_peak_bytes`, the step's peak memory.
"""

from __future__ import annotations

import csv
import io
import resource
from pathlib import Path

import torch

from paradyse_lab.files.atomic_write import write_text_atomic
from paradyse_lab.runtime.training.run_inputs import LOG_COLUMNS


def step_peak_bytes(device) -> int:
    """Peak memory of this step: the GPU's allocated peak, or on the CPU the process's peak RSS."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        return int(torch.cuda.max_memory_allocated(device))
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


class StepLog:
    """The per-step CSV of `--log-file` (rank 0): a header and one flushed row per step. Made before the first
    step: a new run starts the file (check_options refuses one that holds another run's log); a resumed run
    keeps the rows up to the step it resumes from and drops the later ones, which it trains again, so the
    file never holds two rows for one step."""

    def __init__(self, path: str, keep_through: int = 0):
        rows = []
        if Path(path).is_file():
            rows = [r for r in csv.reader(io.StringIO(Path(path).read_text(encoding="utf-8", errors="replace")))
                    if r and r[0].isdigit() and int(r[0]) <= keep_through]
        text = io.StringIO()
        csv.writer(text).writerows([list(LOG_COLUMNS), *rows])
        write_text_atomic(path, text.getvalue())
        self.handle = open(path, "a", newline="")
        # a row's keys beyond the columns (eval_steps: for the end summary) stay out of the file
        self.writer = csv.DictWriter(self.handle, fieldnames=LOG_COLUMNS, extrasaction="ignore")

    def write(self, row: dict) -> None:
        """Append `row` (its keys beyond the log's columns left out) and flush it to the file."""
        self.writer.writerow(row)
        self.handle.flush()

    def close(self) -> None:
        """Close the file (every row is already flushed)."""
        self.handle.close()
