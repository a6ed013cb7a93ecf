"""The software that produced a measurement or a profile row, in one place.

Every writer of provenance calls `software_versions`: the profilers' `software` column,
`calibrate`'s cluster
provenance and the synthetic profiles. Versions are read from the installed
distributions' metadata (`importlib.metadata`, Python docs), so asking imports no torch; the CUDA, cuDNN and
NCCL versions of the torch build (`torch.version.cuda`, `torch.backends.cudnn.version()`,
`torch.cuda.nccl.version()`, PyTorch docs) are added only for a CUDA device.
"""

from __future__ import annotations

import importlib.metadata as md
import platform

MEASUREMENT_PACKAGES = ("torch", "numpy", "flash-attn", "paradyse-lab")
"""What shapes a runtime measurement: the kernels (torch, flash-attn), the host arrays, this toolkit."""


def software_versions(packages=MEASUREMENT_PACKAGES, device=None, *, python: bool = True,
                      absent: str = "none") -> dict[str, str]:
    """name -> version: python (unless `python=False`), each distribution of `packages` (`absent` when it
    is not installed) and, on a CUDA `device`, the torch build's cuda, cudnn and nccl."""
    out = {"python": platform.python_version()} if python else {}
    for name in packages:
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = absent
    if device is not None and getattr(device, "type", None) == "cuda":
        import torch  # torch: only for a CUDA device; the vocabulary never imports it at start-up

        out.update(cuda=str(torch.version.cuda), cudnn=str(torch.backends.cudnn.version()))
        try:
            out["nccl"] = ".".join(str(v) for v in torch.cuda.nccl.version())
        except Exception:  # noqa: BLE001 - NCCL not built in
            pass
    return out


def versions_text(versions: dict[str, str]) -> str:
    """`name=version` pairs joined by ';' (the profiles' `software` column)."""
    return ";".join(f"{name}={version}" for name, version in versions.items())
