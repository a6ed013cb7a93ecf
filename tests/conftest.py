"""Shared pytest configuration: GPU tests are skipped without CUDA; test groups for pytest-xdist; the packages'
bytecode written once; the solvers' numba kernels compiled once, in the background, when pytest-xdist runs the
suite on a fresh checkout; what the collection imports is kept out of the garbage collector's full passes
(`pytest_collectreport`).

The README's test command runs the suite on two workers with `--dist loadgroup`. Every item gets an
`xdist_group`: its module, so that a module's fixtures (a `reproduce` run, the spawned worlds) are built once on
one worker. The gloo worlds (tests/runtime/test_distributed.py, one per world size, and the harness's own test) all
run on one worker (`WORLD_MODULES`).
"""

import compileall
import gc
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_KERNELS_COMPILE: list[subprocess.Popen] = []
_REWRITE: list[threading.Thread] = []


GPU_DEVICE_FILES = ("/dev/nvidiactl", "/dev/dxg", "/dev/kfd")
"""Where a Linux machine that torch can run CUDA on shows its GPUs: NVIDIA's driver (containers included), WSL2's
GPU, ROCm's."""


def no_gpu_device() -> bool:
    """Whether this is a Linux machine with none of `GPU_DEVICE_FILES`: no CUDA device, told without importing
    torch (~2.3 CPU s, the whole cost of `pytest tests/gpu` on such a machine)."""
    return sys.platform.startswith("linux") and not any(Path(f).exists() for f in GPU_DEVICE_FILES)


def skip_gpu_tests_without_cuda(items) -> None:
    if not any("gpu" in item.keywords for item in items):
        return  # no torch import for a session without GPU tests
    if not no_gpu_device():
        try:
            import torch
        except ImportError:
            torch = None
        if torch is not None and torch.cuda.is_available():
            return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


WORLD_MODULES = ("tests/runtime/test_distributed.py", "tests/runtime/test_op_count.py",
                 "tests/runtime/test_dist_harness.py")
"""The modules whose tests fork gloo ranks from their pytest process's forkserver (tests/runtime/dist_harness.py):
one xdist group (`WORLDS_GROUP`), so that one forkserver imports the ranks' modules (~8 CPU s) rather than one
per worker, test_distributed's worlds first (the forkserver preloads the cases' module of its first world)."""
WORLDS_GROUP = "gloo-worlds"


def module_path(item) -> str:
    """The item's module, as its node id spells it (tests/...py)."""
    return item.nodeid.split("::", 1)[0]


SOURCE_MODULES = ("tests/test_import_layers.py", "tests/test_import_cycles.py", "tests/test_function_length.py",
                  "tests/test_docstrings.py", "tests/paradyse_lab/test_strategy_home.py",
                  "tests/paradyse_lab/test_plan_and_step.py", "tests/simulator/test_planner.py")
"""The modules whose tests walk the syntax trees of every package file (tests/source_trees.py, parsed once per
process, ~1.2 CPU s): one xdist group (`SOURCE_GROUP`), so that one worker parses them instead of both."""
SOURCE_GROUP = "source-trees"


def xdist_group_name(item) -> str:
    """The module's path, `WORLDS_GROUP` for the modules of `WORLD_MODULES`, `SOURCE_GROUP` for `SOURCE_MODULES`."""
    module = module_path(item)
    return WORLDS_GROUP if module in WORLD_MODULES else SOURCE_GROUP if module in SOURCE_MODULES else module


LONGEST_GROUPS = ("tests/runtime/test_train_safety.py", "tests/runtime/test_comm_replay.py", WORLDS_GROUP,
                  "tests/figures/test_figures.py", "tests/simulator/test_simulation.py",
                  "tests/solvers/test_solvers_agree.py", "tests/paradyse_lab/app/measure/test_gpu_session.py",
                  "tests/paradyse_lab/costmodel/test_learned.py")
"""The groups that take longest on two workers (CPU seconds of each group's processes under the README's test
command: the worlds' ranks and forkserver), handed out first (`longest_groups_first`; pytest-xdist deals the first
groups to the workers in turn), so that no long group starts when the other worker is nearly done and the two
workers end together; the rest follow in collection order, each a few seconds. The first two need no compiled
kernels: on a fresh checkout they run while the controller compiles them (`pytest_configure`, ~15 CPU s), where
the worlds (whose forkserver loads the kernels) and the figures (the DP solver) would each wait for that compile
with a core idle. The worlds' group also holds the tests that launch `train --nproc` runs in-process or fork ranks
from that worker's fork server (they mark themselves with `WORLDS_GROUP`: the stopped-rank and closed-stdout runs,
the group timeouts, the teardown, a killed rank, the two-node torchrun agents, an error in every rank), so their
ranks fork from the server that imported torch and the runtime for the worlds."""


def longest_groups_first(items) -> None:
    """Reorder `items` (stably): the groups of LONGEST_GROUPS first, in that order, then the others; in the worlds'
    group, the modules in `WORLD_MODULES` order."""
    rank = {name: i for i, name in enumerate(LONGEST_GROUPS)}
    worlds = {module: i for i, module in enumerate(WORLD_MODULES)}
    items.sort(key=lambda item: (rank.get(item.get_closest_marker("xdist_group").args[0], len(rank)),
                                 worlds.get(module_path(item), 0)))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    skip_gpu_tests_without_cuda(items)
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(xdist_group_name(item)))
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: the controller schedules groups in this order
        longest_groups_first(items)


def pytest_collectreport(report):
    """Freeze what is alive once a collector is done (`gc.freeze`): the libraries the test files import (torch,
    pandas, scikit-learn, transformers: some 400,000 objects) live for the whole session, and without this every
    full pass of the garbage collector walks them all again (about 0.3 CPU s a pass; `pytest --collect-only`
    spent 5 of its 17 CPU seconds in those passes, five of the passes pytest's own at the session's end).
    Frozen objects are still freed by reference counting; only a reference cycle among them would stay until the
    process ends."""
    gc.freeze()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """After a module's last test and its fixtures' teardown: collect the garbage, then freeze what is still alive
    (the modules its tests imported, caches, session fixtures), as after collection (`pytest_collectreport`). A
    test's own objects are created after the freeze and collected as before."""
    yield
    if nextitem is None or nextitem.path != item.path:
        gc.collect()
        gc.freeze()


KERNEL_INDEXES = {"kernels.py": "kernels.pareto_pass-*.nbi", "bound_kernels.py": "bound_kernels.lagrangian_dual-*.nbi"}
"""Each file of compiled kernels (solvers/) and the index files of one of its kernels in numba's cache."""


def _kernels_cached() -> bool:
    """Whether numba's cache of solvers/kernels.py and solvers/bound_kernels.py looks current: for each file, an
    index file newer than the source."""
    folder = ROOT / "solvers"
    return all(any(index.stat().st_mtime >= (folder / source).stat().st_mtime
                   for index in (folder / "__pycache__").glob(pattern))
               for source, pattern in KERNEL_INDEXES.items())


def compile_packages() -> None:
    """Write the packages' bytecode (`__pycache__`, as `python -m compileall` does) before any test runs. Where
    PYTHONDONTWRITEBYTECODE is set (this project's machines set it), no Python process writes it, and every
    process the suite starts (CLI runs, launchers and their ranks, torchrun agents, the ranks' forkserver)
    compiled the modules it imports from source again: the subprocess-heavy test files took 64.7 CPU s without
    the bytecode and 58.2 with it. Compiling all five packages takes ~0.6 CPU s, and checking them when
    current a fraction of that."""
    from source_trees import PACKAGES

    for package in PACKAGES:
        compileall.compile_dir(ROOT / package, quiet=2)


def rewrite_test_modules(config) -> None:
    """Write the assertion-rewritten bytecode of every test module and conftest.py (what pytest's import hook
    caches in `__pycache__/NAME.<interpreter tag>-pytest-X.pyc`), and the plain bytecode of the tests' other modules
    (cases, harnesses), once, in the controller. Where PYTHONDONTWRITEBYTECODE is set no pytest process writes
    them, and each xdist worker parsed, rewrote and compiled all ~240 test modules again while collecting
    (`pytest --collect-only`: 9.8 CPU s with nothing written, 6.1-6.7 with these files); a worker reads a
    current file instead (pytest checks its source's size and mtime).
    Uses pytest's own rewrite and pyc writer (private functions of `_pytest.assertion.rewrite`): where they are
    missing or fail, the workers rewrite the modules themselves, as before."""
    compileall.compile_dir(ROOT / "tests", rx=re.compile(r"[/\\](test_[^/\\]*|conftest)\.py$"), quiet=2)
    try:
        from _pytest.assertion import rewrite
        from _pytest.assertion.rewrite import assertstate_key

        state = config.stash[assertstate_key]
        for path in sorted([*(ROOT / "tests").rglob("test_*.py"), *(ROOT / "tests").rglob("conftest.py")]):
            pyc = rewrite.get_cache_dir(path) / (path.name[:-3] + rewrite.PYC_TAIL)
            if rewrite._read_pyc(path, pyc) is None and rewrite.try_makedirs(pyc.parent):
                stat, code = rewrite._rewrite_test(path, config)
                rewrite._write_pyc(state, code, stat, pyc)
    except Exception:  # noqa: BLE001, S110 - an optimisation only: the workers rewrite what is not written
        pass


def pytest_configure(config):
    """Once per run, in the controller (not in pytest-xdist's workers): write the packages' bytecode
    (`compile_packages`); with pytest-xdist, start compiling the solvers' kernels (~20 s of CPU on a fresh
    checkout) while the workers start and collect: a worker that needs them first waits for this one compile
    (solvers/kernels.py `_compile_lock`) instead of each worker and subprocess compiling its own. The groups
    are handed out in the workers' order (`longest_groups_first`), not by their number of tests."""
    if hasattr(config, "workerinput"):
        return
    config.option.loadscopereorder = False
    compile_packages()
    if not config.getoption("numprocesses", None):
        return
    # beside the workers' start-up: they import pytest, the plugins and tests/conftest.py before they collect
    thread = threading.Thread(target=rewrite_test_modules, args=(config,), daemon=True)
    _REWRITE.append(thread)
    thread.start()
    if _kernels_cached():
        return
    _KERNELS_COMPILE.append(subprocess.Popen(
        [sys.executable, "-c", "from paradyse_lab.solvers.kernels import warm_up; warm_up()"], cwd=ROOT))


def pytest_unconfigure(config):
    for thread in _REWRITE:
        thread.join()
    for proc in _KERNELS_COMPILE:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


@pytest.fixture(scope="session", autouse=True)
def one_torch_thread():
    """torch on one intra-op thread in every test process: the suite's tensors are tiny, and on a shared 2-core
    machine (two pytest workers, gloo ranks beside them) a second OpenMP thread only spins waiting for its share
    of a small matmul (tests/paradyse_lab/test_api.py took 3x the CPU seconds with the default two, the profile
    command's test 2.5x). A test that needs another count sets it and puts it back; the gloo ranks set their
    own (tests/runtime/dist_harness.py), and a subprocess keeps torch's default."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def torch_threads_put_back():
    """After each test, torch on one intra-op thread again: a command run in-process through the CLI's `main` sets
    the count a one-process `train` uses (the machine's free cores), and the tests after it would run on that."""
    yield
    if "torch" in sys.modules and sys.modules["torch"].get_num_threads() != 1:
        sys.modules["torch"].set_num_threads(1)
