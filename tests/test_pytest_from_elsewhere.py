"""The suite collects when pytest runs from another folder (`cd /tmp && pytest /path/to/checkout/tests/...`).

The test folder tests/paradyse_lab sits on sys.path for its own test modules; without the checkout's root on
sys.path too (pyproject.toml's `pythonpath`), `import paradyse_lab` found that folder as a namespace package
before the installed package, and collection failed with "cannot import name 'main' from 'paradyse_lab.cli'".
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_a_test_file_collects_from_another_folder(tmp_path):
    target = ROOT / "tests" / "paradyse_lab" / "cli" / "test_cli.py"
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "-p", "no:xdist", "-p", "no:hypothesispytest", str(target)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "tests collected" in done.stdout
