"""cli: the commands that only read files run where torch is not installed (`pip install
abdiff` without the `bench` extra, as the trusted PR-comment job installs it)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASELINE = ROOT / "baselines" / "reference-cpu.json"

# One interpreter in which torch cannot be imported, as where it is not installed, runs
# each command line of argv[1] (a JSON list) through abdiff's main and prints the exit
# codes as JSON; it fails if anything imported torch.
WITHOUT_TORCH = """
import contextlib, io, json, sys

class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "torch":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

sys.meta_path.insert(0, NoTorch())
from abdiff.cli import main
codes, outputs = [], []
for argv in json.loads(sys.argv[1]):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        codes.append(main(argv))
    outputs.append(out.getvalue())
assert "torch" not in sys.modules
print(json.dumps({"codes": codes, "outputs": outputs}))
"""


def test_reading_commands_run_without_torch(tmp_path: Path) -> None:
    result = tmp_path / "result.json"
    commands = [
        ["compare", BASELINE, BASELINE, "--format", "markdown", "--json", result],
        ["compare", BASELINE, BASELINE, "--format", "html"],
        ["comment", "--repo", "octo/bench", "--pr", "7", "--result", result, "--dry-run"],
        ["baseline", "list"],
        ["baseline", "show", "reference-cpu"],
    ]
    done = subprocess.run(  # in this clone: the baseline commands look for a repository
        [sys.executable, "-c", WITHOUT_TORCH, json.dumps([[str(a) for a in c] for c in commands])],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    # an A/A comparison of one file: nothing unintended (0), nothing measured is no error here
    assert report["codes"] == [0, 0, 0, 0, 0], (report["codes"], done.stderr)
    compare_md, compare_html, comment, listed, shown = report["outputs"]
    assert compare_md.startswith("<!-- abdiff -->") and "<html" in compare_html.lower()
    assert "would POST" in comment and "<!-- abdiff -->" in comment
    assert "reference-cpu" in listed and "fingerprint:" in shown
