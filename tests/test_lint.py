"""The code base stays ruff clean (the same check a contributor runs)."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_clean() -> None:
    ruff = shutil.which("ruff") or f"{sys.executable} -m ruff"
    done = subprocess.run([*ruff.split(), "check", "abdiff", "tests", "lab", "scripts"],
                          cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
