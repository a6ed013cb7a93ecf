"""Rank functions for tests/runtime/test_rank_output.py, importable by spawned ranks (no torch)."""

from __future__ import annotations

import os


def os_error_rank(rank: int, world: int, folder: str) -> None:
    """Rank 1 opens a file that is not there (an `OSError`, as a rank's unreadable input raises); rank 0 ends
    well."""
    if rank == 1:
        open(os.path.join(folder, "missing", "tokens.jsonl")).close()
