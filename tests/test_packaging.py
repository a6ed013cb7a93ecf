"""What `pip install .` puts in site-packages: one top-level package, `paradyse_lab`, with the root folders
runtime/, solvers/, simulator/ and figures/ inside it as subpackages (pyproject.toml's `package-dir`).

The wheel is built from a copy of the sources (the build writes build/ and *.egg-info beside them) by the build
backend pyproject.toml names, called as pip calls it (PEP 517 `build_wheel`, here without pip's own process in
front: ~1.7 CPU s less), unpacked, and imported in a fresh interpreter from a folder that is not the checkout.
Run: `python -m pytest -q tests/test_packaging.py`.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("paradyse_lab", "runtime", "solvers", "simulator", "figures")


def build_wheel(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    for name in SOURCES:
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    out = tmp_path / "wheel"
    backend = re.search(r'^build-backend\s*=\s*"([^"]+)"', (src / "pyproject.toml").read_text(), re.M).group(1)
    build = f"import importlib; importlib.import_module({backend!r}).build_wheel({str(out)!r})"
    done = subprocess.run([sys.executable, "-c", build], cwd=src, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (wheel,) = out.glob("*.whl")
    return wheel


def test_the_wheel_installs_one_top_level_package(tmp_path):
    wheel = build_wheel(tmp_path)
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"paradyse_lab", "paradyse_lab-0.1.0.dist-info"}, sorted(tops)
    # every module of the source folders is in the wheel (pyproject's package list misses no folder)
    expected = {f"paradyse_lab/{p.relative_to(ROOT).as_posix()}" if p.relative_to(ROOT).parts[0] != "paradyse_lab"
                else p.relative_to(ROOT).as_posix() for name in SOURCES for p in (ROOT / name).rglob("*.py")}
    assert expected <= set(names), sorted(expected - set(names))
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    probe = ("import importlib.util, sys\n"
             "import paradyse_lab.runtime, paradyse_lab.solvers.ilp, paradyse_lab.simulator.engine\n"
             "import paradyse_lab.figures, paradyse_lab.costmodel.profiles as profiles\n"
             f"site = {str(site)!r}\n"
             "for m in (paradyse_lab.runtime, paradyse_lab.solvers.ilp, paradyse_lab.simulator.engine):\n"
             "    assert m.__file__.startswith(site), m.__file__\n"
             "assert profiles.DATA_DIR.is_dir()\n"
             "for top in ('runtime', 'solvers', 'simulator', 'figures'):\n"
             "    spec = importlib.util.find_spec(top)\n"
             "    assert spec is None or not spec.origin.startswith(site), spec\n"
             "assert 'torch' not in sys.modules\n"
             "print('ok')\n")
    done = subprocess.run([sys.executable, "-c", probe], cwd=elsewhere, capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(site), "HOME": str(tmp_path)})
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_a_source_checkout_imports_the_root_folders_as_subpackages():
    """Without any install of this tree (the root on sys.path, as pytest and CI run): paradyse_lab.runtime is the
    root's runtime/ folder, and nothing imports it by its old top-level name."""
    import paradyse_lab.runtime
    import paradyse_lab.solvers

    assert Path(paradyse_lab.runtime.__file__).parent == ROOT / "runtime"
    assert Path(paradyse_lab.solvers.__file__).parent == ROOT / "solvers"
    assert not [m for m in sys.modules if m.split(".")[0] in ("runtime", "solvers", "simulator", "figures")]
