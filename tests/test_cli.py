"""cli: the commands that only read files run where torch is not installed (`pip install
abdiff` without the `bench` extra, as the trusted PR-comment job installs it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BASELINE = ROOT / "baselines" / "reference-cpu.json"

# torch cannot be imported in this interpreter, as where it is not installed
WITHOUT_TORCH = """
import sys

class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "torch":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

sys.meta_path.insert(0, NoTorch())
from abdiff.cli import main
code = main(sys.argv[1:])
assert "torch" not in sys.modules
sys.exit(code)
"""


def abdiff_without_torch(*argv: str | Path) -> subprocess.CompletedProcess[str]:
    """abdiff in a fresh interpreter, in this git clone (baseline commands look for one)."""
    return subprocess.run([sys.executable, "-c", WITHOUT_TORCH, *map(str, argv)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize("argv", [
    ("compare", BASELINE, BASELINE, "--format", "markdown"),
    ("compare", BASELINE, BASELINE, "--format", "html"),
    ("baseline", "list"),
    ("baseline", "show", "reference-cpu"),
])
def test_reading_commands_run_without_torch(argv: tuple) -> None:
    done = abdiff_without_torch(*argv)
    assert "Traceback" not in done.stderr, done.stderr
    # an A/A comparison of one file measures nothing new: exit 0 or 3, never a crash
    assert done.returncode in (0, 3), (done.returncode, done.stderr)
    assert done.stdout.strip(), done.stderr


def test_comment_renders_a_result_without_torch(tmp_path: Path) -> None:
    result = tmp_path / "result.json"
    made = abdiff_without_torch("compare", BASELINE, BASELINE, "--json", result)
    assert result.is_file(), made.stderr
    done = abdiff_without_torch("comment", "--repo", "octo/bench", "--pr", "7", "--result",
                                result, "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "reference-cpu" in done.stdout or "unchanged" in done.stdout, done.stdout
