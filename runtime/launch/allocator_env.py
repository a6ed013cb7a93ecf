"""The CUDA caching allocator's setting for training: expandable segments unless the user chose a setting.

Library module (no command). `paradyse-lab train` calls `use_expandable_segments(os.environ)` on every process
before CUDA starts (the allocator reads its configuration once, when it is first used). Expandable segments
let a segment grow in 2 MiB pages instead of allocating one block per large request, so the changing shapes
of a run whose length changes every step leave fewer unusable slivers (PyTorch docs/source/notes/cuda.rst,
pytorch/pytorch#96995; NeMo lists it first among the fixes for fragmentation OOMs: docs/hardware.md section 5).
"""

from __future__ import annotations

from collections.abc import MutableMapping

ALLOC_CONF_VARIABLES = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")
"""The variables the allocator reads (the second is the newer, device-neutral name); a user who set either
keeps their setting."""
EXPANDABLE = "expandable_segments:True"


def cuda_available() -> bool:
    """Whether this process would train on CUDA (asks the driver; does not start the allocator)."""
    import torch

    return torch.cuda.is_available()


def use_expandable_segments(environ: MutableMapping[str, str], on_cuda: bool | None = None) -> bool:
    """Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True in `environ` when training on CUDA (`on_cuda`, default
    `cuda_available()`) and the user set no allocator configuration; returns whether it was set."""
    if any(name in environ for name in ALLOC_CONF_VARIABLES):
        return False
    if not (cuda_available() if on_cuda is None else on_cuda):
        return False
    environ[ALLOC_CONF_VARIABLES[0]] = EXPANDABLE
    return True
