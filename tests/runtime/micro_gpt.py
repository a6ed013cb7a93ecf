"""A micro GPT-2 config (64 positions, a step well under a second) the run-report tests train: `write_micro`
writes its config.json; `one_thread` (an autouse fixture, imported by those tests) keeps torch on one thread for
a test, restored after it."""

import json

import pytest

MICRO = {"model_type": "gpt2", "n_embd": 16, "n_head": 2, "n_layer": 2, "n_positions": 64, "vocab_size": 96}


def write_micro(folder) -> str:
    """The micro model's config.json written into `folder`; its path."""
    path = folder / "micro.json"
    path.write_text(json.dumps(MICRO))
    return str(path)


@pytest.fixture(autouse=True)
def one_thread():
    """Micro matmuls only lose to thread hand-offs; the test's thread count is put back after it."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
