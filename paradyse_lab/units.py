"""The one unit of memory options: GiB (2**30 bytes), as every table and report prints memory.

`--reserve-gb` (simulate, experiment), `--budget-gib` (train, plan) and the cluster TOML's `memory_gib` are in
GiB (only the deprecated `--budget-gb` is read in GB); `gib_to_bytes` is the one conversion.
"""

from __future__ import annotations

GIB = 2**30
"""Bytes in one GiB."""


def gib_to_bytes(gib: float) -> int:
    """`gib` GiB in whole bytes."""
    return int(gib * GIB)
