"""Shared pytest configuration: GPU tests are skipped without CUDA; test groups for pytest-xdist.

The README's test command runs the suite on two workers with `--dist loadgroup`. Every item gets an
`xdist_group`: its module, so that a module's fixtures (a `reproduce` run, a spawned world) are built once on
one worker, except the distributed cases, which are grouped by world size so that the worlds of
tests/runtime/test_distributed.py spread over the workers.
"""

import pytest


def skip_gpu_tests_without_cuda(items) -> None:
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if has_cuda:
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def xdist_group_name(item) -> str:
    """The module's path, or the module's path and world size for a parametrized distributed case."""
    module = item.nodeid.split("::", 1)[0]
    callspec = getattr(item, "callspec", None)
    if callspec is not None and "p" in callspec.params and module.endswith("test_distributed.py"):
        return f"{module}-p{callspec.params['p']}"  # no ']' at its end: xdist reads a name ending in ']' as no group
    return module


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    skip_gpu_tests_without_cuda(items)
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(xdist_group_name(item)))
