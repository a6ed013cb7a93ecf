"""`paradyse-lab train` on CUDA sets PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True unless the user set an
allocator configuration (runtime/launch/allocator_env.py); on CPU it leaves the environment alone."""

import os
from unittest import mock

import pytest

from paradyse_lab.cli import train_command
from paradyse_lab.runtime.launch import allocator_env


def _train_sees(monkeypatch, on_cuda: bool, preset: dict) -> dict:
    """The allocator variables a `train` run sees (the training itself replaced by a probe)."""
    for name in allocator_env.ALLOC_CONF_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in preset.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(allocator_env, "cuda_available", lambda: on_cuda)
    seen = {}

    def probe(opts, group=None):
        seen.update({n: os.environ.get(n) for n in allocator_env.ALLOC_CONF_VARIABLES})
        return []

    with mock.patch.object(train_command, "train", probe):  # the name the command module binds
        assert train_command.main(["--model", "gpt2-tiny", "--dataset", "uniform:8:16", "--steps", "1"]) == 0
    return seen


@pytest.mark.parametrize("on_cuda, preset, want", [
    (True, {}, {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "PYTORCH_ALLOC_CONF": None}),
    (False, {}, {"PYTORCH_CUDA_ALLOC_CONF": None, "PYTORCH_ALLOC_CONF": None}),
    (True, {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128"},
     {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128", "PYTORCH_ALLOC_CONF": None}),
    (True, {"PYTORCH_ALLOC_CONF": "expandable_segments:False"},
     {"PYTORCH_CUDA_ALLOC_CONF": None, "PYTORCH_ALLOC_CONF": "expandable_segments:False"}),
])
def test_train_sets_expandable_segments_on_cuda_unless_the_user_chose(monkeypatch, on_cuda, preset, want):
    assert _train_sees(monkeypatch, on_cuda, preset) == want
