"""`calibrate`'s resume settings under torchrun: the world size and the node count are part of them, so a run
across nodes never reuses one node's files."""

import argparse

import pytest

from paradyse_lab.cli import calibrate_command

TORCHRUN = {"RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "LOCAL_RANK": "0"}


def _settings(monkeypatch, world: int, per_node: int) -> dict:
    for name, value in {**TORCHRUN, "WORLD_SIZE": str(world), "LOCAL_WORLD_SIZE": str(per_node)}.items():
        monkeypatch.setenv(name, value)
    parser = argparse.ArgumentParser()
    calibrate_command.add_arguments(parser)
    args = parser.parse_args(["--out", "D", "--model", "gpt2-tiny", "--max-len", "64"])
    return calibrate_command.options_from_args(args).settings()


@pytest.mark.parametrize("other", [(4, 2), (2, 2)], ids=["two-nodes-of-two", "one-node-of-two"])
def test_world_size_and_nodes_key_the_calibration(monkeypatch, other):
    one_node = _settings(monkeypatch, 4, 4)
    assert (one_node["nproc"], one_node["nodes"]) == (4, 1)
    settings = _settings(monkeypatch, *other)
    assert settings != one_node and settings["nproc"] == other[0] and settings["nodes"] == other[0] // other[1]
