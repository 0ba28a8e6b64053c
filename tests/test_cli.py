"""cli: the commands that only read files run where torch is not installed (`pip install
abdiff` without the `bench` extra, as the trusted PR-comment job installs it)."""

from __future__ import annotations

import io
import json
import os
import random
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

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


def _noisy_run(rev: str, sha: str, rng: random.Random) -> dict:
    """Two rounds per config whose medians differ up to 10x: the first look of an adaptive
    plan (alpha/27 at df 1) then finds no detectable effect at all."""
    return {"schema": "abdiff.run/1", "rev": rev, "sha": sha * 40, "target": "reference",
            "suite": "noisy", "env": {"device": "cpu"},
            "looks": {"first": 2, "max_rounds": 15, "step": 2},
            "configs": [{"id": f"GEN-TRTLLM-bs{n}-q1-kv64",
                         "params": {"run_type": "GEN", "backend": "TRTLLM", "batch_size": n,
                                    "seq_len_q": 1, "seq_len_kv_cache": 64},
                         "rounds": [{"status": "ok", "round": i, "latency_us": [
                             v * (1 + 0.01 * rng.random()) for _ in range(5)]}
                             for i, v in enumerate(100.0 * n * rng.choice([1, 1.5, 3, 10])
                                                   for _ in range(2))]}
                        for n in range(1, 13)]}


def test_a_noisy_comparison_prints_no_numpy_warning(tmp_path: Path) -> None:
    """Latency that no run of this size could decide: `inconclusive` and the next step, and
    nothing from numpy (an overflow in expm1 reached the terminal before)."""
    rng = random.Random(5)
    for side, rev, sha in (("a", "main", "a"), ("b", "pr", "b")):
        (tmp_path / f"{side}.json").write_text(json.dumps(_noisy_run(rev, sha, rng)))
    done = subprocess.run([sys.executable, "-m", "abdiff.cli", "compare", tmp_path / "a.json",
                           tmp_path / "b.json"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "" and "Warning" not in done.stdout
    lines = done.stdout.splitlines()
    assert lines[-1].startswith("abdiff: no unintended change: 12 of 12 configs measured; ")
    assert lines[-1].endswith("(exit 0: nothing changed outside the expected scope)")
    assert any(line.startswith("next: latency undecided for ") for line in lines[-4:-1]), \
        lines[-4:]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_an_error_wraps_on_a_terminal_and_stays_one_line_in_a_pipe(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from abdiff.cli import main

    monkeypatch.setenv("COLUMNS", "80")
    assert main(["compare"]) == 2
    piped = capsys.readouterr().err.rstrip("\n")
    assert "\n" not in piped and len(piped) > 80
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert main(["compare"]) == 2
    lines = terminal.getvalue().rstrip("\n").splitlines()
    assert len(lines) > 1 and all(len(line) <= 80 for line in lines)
    assert " ".join(line.strip() for line in lines) == piped


def test_a_report_written_to_a_pipe_or_a_device_leaves_it_one(tmp_path: Path) -> None:
    """`--output /dev/null` (or a named pipe a CI step reads) is written into: renaming a
    finished file over it, as a report file is written, would replace the device (as root,
    /dev/null itself for every process on the machine)."""
    from abdiff.cli import main

    fifo = tmp_path / "report.pipe"
    os.mkfifo(fifo)
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()), daemon=True)
    reader.start()
    assert main(["compare", str(BASELINE), str(BASELINE), "--format", "csv",
                 "--output", str(fifo)]) == 0
    reader.join(timeout=60)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert got and got[0].startswith("config,")


def test_the_command_ends_without_the_interpreters_teardown_with_its_output_whole(
        tmp_path: Path) -> None:
    """`abdiff` (cli.command) ends its process at once once `main` returns: the exit code is
    main's, and what it printed is all there, on stdout and on stderr."""
    import contextlib

    from abdiff.cli import main

    expected = io.StringIO()
    with contextlib.redirect_stdout(expected):
        assert main(["compare", str(BASELINE), str(BASELINE), "--format", "csv"]) == 0
    done = subprocess.run([sys.executable, "-m", "abdiff", "compare", BASELINE, BASELINE,
                           "--format", "csv"], capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0 and done.stdout == expected.getvalue()
    assert done.stderr.splitlines()[-1].startswith("abdiff: no unintended change:")
    (tmp_path / "broken.json").write_text("{")
    bad = subprocess.run([sys.executable, "-m", "abdiff", "compare", tmp_path / "broken.json",
                          BASELINE], capture_output=True, text=True, timeout=300, check=False)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "broken.json" in bad.stderr
    if os.path.exists("/dev/full"):  # a full disk under `> report.txt`: not a whole report
        with open("/dev/full", "w") as full:
            lost = subprocess.run([sys.executable, "-m", "abdiff", "compare", BASELINE,
                                   BASELINE], stdout=full, stderr=subprocess.PIPE, text=True,
                                  timeout=300, check=False,
                                  env={k: v for k, v in os.environ.items()
                                       if k != "PYTHONUNBUFFERED"})
        assert lost.returncode == 3, lost.stderr
        assert lost.stderr.splitlines()[-1] == \
            "abdiff: cannot write the output: No space left on device"
