"""What a model folder means, one rule for `train --model DIR` and the API's `build_model(DIR)`: a folder holding
weights (`model.safetensors`, or the shards of `model.safetensors.index.json`) starts from them; a folder with
only a config.json starts from random weights (seeded), its shapes from the config."""

from __future__ import annotations

from pathlib import Path

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json")
"""The files that make a folder's weights (one file, or the index of its shards), as Hugging Face writes them."""


def has_weights(source) -> bool:
    """Whether `source` names a folder holding weights."""
    path = Path(str(source))
    return path.is_dir() and any((path / name).is_file() for name in WEIGHT_FILES)


def weights_line(init_from: str, seed: int, resumed: str = "") -> str:
    """The line a run starts with about its weights: resumed from a checkpoint, loaded from a folder, or random."""
    if resumed:
        return f"weights: resumed from checkpoint {resumed}"
    if init_from:
        return f"weights: loaded from {init_from}"
    return f"weights: random (initialised from --seed {seed}; a model folder holding weights loads them)"
