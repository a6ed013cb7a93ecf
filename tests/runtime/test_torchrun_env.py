"""torchrun's environment read by `paradyse_lab.runtime.launch.ranks.torchrun_rank`: what a real launch sets is
accepted."""

import pytest

from paradyse_lab.errors import UserInputError
from paradyse_lab.runtime.launch.ranks import torchrun_rank

BASE = {"RANK": "1", "WORLD_SIZE": "4", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}


@pytest.mark.parametrize("extra", [{}, {"LOCAL_WORLD_SIZE": "2"}, {"LOCAL_WORLD_SIZE": "2", "LOCAL_RANK": "1"},
                                   {"LOCAL_RANK": "3"}], ids=["none", "local-world-only", "both", "local-rank-only"])
def test_a_launch_environment_gives_rank_and_world(monkeypatch, extra):
    for name, value in {**BASE, **extra}.items():
        monkeypatch.setenv(name, value)
    for name in {"LOCAL_WORLD_SIZE", "LOCAL_RANK"} - set(extra):
        monkeypatch.delenv(name, raising=False)
    assert torchrun_rank() == (1, 4)


def test_a_local_rank_beyond_the_local_world_is_refused(monkeypatch):
    for name, value in {**BASE, "LOCAL_WORLD_SIZE": "2", "LOCAL_RANK": "2"}.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(UserInputError, match="LOCAL_RANK"):
        torchrun_rank()
