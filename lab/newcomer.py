"""A scripted newcomer pass (a newcomer's first hour): the README's commands, the demo, doctor, a
baseline, bisect, history and the `command` target, read at several terminal widths.

    python lab/newcomer.py [--widths 80,100,160] [--out DIR] [--quick]

Everything runs in a fresh folder (`--out`, else a temporary one) with a cache of its
own, through this interpreter (`python -m abdiff`, no activated environment needed).
Measuring commands run once (at the middle width); their results are rendered again at
every width with `abdiff compare` of the same run files, which is what a user at that
width would read. Checked, per width and command:

- width: no line of stdout or stderr wider than COLUMNS;
- cut: no "…" (a shortened kernel name, `… xN`, is listed apart from cut text);
- counts: every count of one run (measured, each verdict, latency undecided, the rounds
  of the `next:` line) is the same number wherever a format states it (table, Markdown,
  HTML) and the same as the JSON result's configs say;
- units: the header names the threshold and alpha; `--help` gives each numeric option's
  unit; `--min-effect 2` (200%) is refused in one line, exit 2;
- honour (the `command` target, unless --quick): a rerun with the `next:` line's
  --max-rounds either takes each undecided config to that many rounds or says why not.

Prints one line per finding and a summary; writes findings.json to the folder. Exit 0
when nothing was found, 1 otherwise. The machine may be busy: nothing here is timed.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

CONFIG = "GEN-TRTLLM-bs8-q2-kv2049"
VERDICTS = ("unintended", "expected", "small-change", "unchanged", "inconclusive",
            "still-failing")
ELLIPSIS = "\u2026"


class Pass:
    """The folder, the widths and what was found."""

    def __init__(self, folder: Path, widths: list[int]) -> None:
        self.folder = folder
        self.cache = folder / "cache"
        self.widths = widths
        self.findings: list[dict[str, Any]] = []
        self.checked: dict[str, int] = {}

    def abdiff(self, *args: object, cwd: Path, width: int, timeout: float = 1800
               ) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ABDIFF_")}
        env.update(COLUMNS=str(width), NO_COLOR="1")
        env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
        return subprocess.run([sys.executable, "-m", "abdiff", *map(str, args)], cwd=cwd,
                              env=env, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, check=False)

    def found(self, check: str, where: str, what: str) -> None:
        self.findings.append({"check": check, "where": where, "what": what})
        print(f"FOUND {check:6} {where}: {what}", flush=True)

    def look(self, where: str, width: int, done: subprocess.CompletedProcess[str]) -> None:
        """The width and cut checks on one command's output."""
        self.checked[where] = width
        for stream, text in (("stdout", done.stdout), ("stderr", done.stderr)):
            for number, line in enumerate(text.splitlines(), start=1):
                if len(line) > width:
                    self.found("width", f"{where} {stream}:{number}",
                               f"{len(line)} > {width}: {line[:90]!r}")
                if ELLIPSIS in line:
                    kind = "name" if re.search(ELLIPSIS + r" x\d+", line) else "cut"
                    self.found(kind, f"{where} {stream}:{number}", line.strip()[:120])


def normal(text: str) -> str:
    """Wrapped text as one line of single spaces (a count split over two lines joins)."""
    return " ".join(text.split())


def stated_counts(text: str) -> dict[str, set[str]]:
    """Each count the text states, by what it counts."""
    said: dict[str, set[str]] = {}
    # a wrapped sentence continues on an indented line; a line at column 0 starts anew (a
    # table row "expected   GEN-DSA-..." after a cell that ended in "-> 3" is no "3 expected")
    text = re.sub(r"\n(?=\S)", " \u00b6 ", text)
    flat = normal(re.sub(r"<[^>]+>", " ", html.unescape(text)))
    for match in re.finditer(r"\b(\d+) of (\d+) configs? measured", flat):
        said.setdefault("measured", set()).add(f"{match[1]} of {match[2]}")
    for verdict in VERDICTS:
        for match in re.finditer(rf"(?<![\w-])(\d+) {verdict}(?![\w-])", flat):
            said.setdefault(verdict, set()).add(match[1])
    for match in re.finditer(r"latency undecided for (\d+) of the (\d+) configs?", flat):
        said.setdefault("latency undecided", set()).add(f"{match[1]} of {match[2]}")
    for match in re.finditer(r"after (\d+)(?: to (\d+))? rounds per side", flat):
        said.setdefault("rounds of next:", set()).add(f"{match[1]}-{match[2] or match[1]}")
    return said


def counts_of(result: dict[str, Any]) -> dict[str, set[str]]:
    """The same counts, from the JSON result's configs."""
    configs = result["configs"]
    measured = sum(c["status_a"] == "ok" and c["status_b"] == "ok" for c in configs)
    total = max(len(configs) + int(result["summary"].get("not_compared") or 0),
                int(result["summary"].get("configs") or 0))
    out = {"measured": {f"{measured} of {total}"}}
    for verdict in VERDICTS:
        out[verdict] = {str(sum(c["verdict"] == verdict for c in configs))}
    timed = [c for c in configs if c["latency"]["verdict"] != "n/a"]
    undecided = [c for c in timed if c["latency"]["verdict"] == "inconclusive"]
    if undecided:
        out["latency undecided"] = {f"{len(undecided)} of {len(timed)}"}
        rounds = [min(c["latency"]["rounds_a"], c["latency"]["rounds_b"]) for c in undecided]
        out["rounds of next:"] = {f"{min(rounds)}-{max(rounds)}"}
    return out


def check_counts(run: Pass, name: str, result: dict[str, Any], texts: dict[str, str]) -> None:
    truth = counts_of(result)
    for fmt, text in texts.items():
        for what, values in stated_counts(text).items():
            allowed = truth.get(what, {"0"})
            # "N unintended" in the split of the undecided ("3 of the 4 unintended")
            wrong = {v for v in values if v not in allowed}
            if what in VERDICTS:
                wrong -= {m for m in wrong if re.search(
                    rf"\b{m} of the {next(iter(allowed))} {what}\b", normal(text))}
            if wrong:
                run.found("counts", f"{name} {fmt}",
                          f"{what}: says {sorted(values)}, the configs say {sorted(allowed)}")


def check_units(run: Pass, name: str, texts: dict[str, str]) -> None:
    for fmt, text in texts.items():
        flat = normal(html.unescape(re.sub(r"<[^>]+>", " ", text)))
        if not re.search(r"threshold:? ±[\d.]+% \(--min-effect\)", flat):
            run.found("units", f"{name} {fmt}", "the header does not show the threshold")
        if not re.search(r"alpha:? [\d.]+% family-wise", flat):
            run.found("units", f"{name} {fmt}", "the header does not show alpha")


def render_everywhere(run: Pass, name: str, repo: Path, a: Path, b: Path,
                      expect: list[str]) -> dict[str, Any]:
    """`abdiff compare A B` at every width (table), and once as JSON, Markdown and HTML."""
    out = run.folder / "reports" / name
    out.mkdir(parents=True, exist_ok=True)
    args = ["compare", a, b, *expect]
    done = run.abdiff(*args, "--json", out / "result.json", "--html", out / "report.html",
                      "--format", "markdown", "--output", out / "report.md", cwd=repo,
                      width=run.widths[0])
    if done.returncode not in (0, 1):
        run.found("runs", name, f"compare exit {done.returncode}: {done.stderr.strip()[-200:]}")
        return {}
    result = json.loads((out / "result.json").read_text())
    texts = {"markdown": (out / "report.md").read_text(), "html": (out / "report.html").read_text()}
    for width in run.widths:
        shown = run.abdiff(*args, cwd=repo, width=width)
        run.look(f"{name} table@{width}", width, shown)
        texts[f"table@{width}"] = shown.stdout
        (out / f"table-{width}.txt").write_text(shown.stdout + shown.stderr)
    check_counts(run, name, result, texts)
    check_units(run, name, texts)
    return result


def runs_of(cache: Path) -> list[tuple[Path, Path, str, str]]:
    """(a.json, b.json, A's rev, B's rev) of each two-sided run kept in the cache."""
    found = []
    for state in sorted((cache / "runs").glob("*/state.json")):
        a, b = state.parent / "a.json", state.parent / "b.json"
        if a.exists() and b.exists():
            found.append((a, b, json.loads(a.read_text())["rev"], json.loads(b.read_text())["rev"]))
    return found


def readme(run: Pass, root: Path) -> None:
    """The README's set-up says how to get torch's CPU build and never `pip install abdiff`
    by name; docs/targets.md's JSON samples parse."""
    text = (root / "README.md").read_text()
    setup = text[text.index("## Set-up"):text.index("## The demo")]
    if "--index-url https://download.pytorch.org/whl/cpu" not in setup:
        run.found("setup", "README", "no CPU build of torch (--index-url ...whl/cpu)")
    for line in setup.splitlines():
        if re.search(r"pip install abdiff\b(?!\[)", line) and "never" not in line:
            run.found("setup", "README", f"installs abdiff by name: {line.strip()}")
    targets = (root / "docs" / "targets.md").read_text()
    samples = re.findall(r"```json\n(.*?)```", targets, re.S)
    if len(samples) < 2:
        run.found("setup", "docs/targets.md", "no sample of the JSON the command target reads")
    for sample in samples:
        try:
            json.loads(sample)
        except ValueError as exc:
            run.found("setup", "docs/targets.md", f"a sample is not JSON: {exc}")


def options(run: Pass, demo: Path) -> None:
    """--help names the unit of every numeric option; a bare value refused in one line."""
    done = run.abdiff("diff", "--help", cwd=demo, width=100)
    units = {"--min-effect": r"2% or 0\.02", "--alpha": r"1% or 0\.01", "--timeout": "SECONDS",
             "--max-memory": r"SIZE .*8G", "--rounds": "rounds per side",
             "--max-rounds": "rounds per side", "--cpu-threads": "threads"}
    for option, unit in units.items():
        block = re.search(rf"^  {option} .*?(?=^  -|\Z)", done.stdout, re.M | re.S)
        text = normal(block[0]) if block else ""
        if not re.search(unit, text):
            run.found("units", f"diff --help {option}", f"no unit ({unit!r}) in {text[:90]!r}")
    for bad in (["--min-effect", "2"], ["--alpha", "5"]):
        done = run.abdiff("main..pr", "--configs", "mtp", *bad, cwd=demo, width=100)
        if done.returncode != 2 or done.stderr.count("\n") != 1 or done.stdout:
            run.found("units", " ".join(bad), f"exit {done.returncode}: {done.stderr!r}")


GBENCH = '''\
"""A Google Benchmark-shaped benchmark for the newcomer pass: BM_spin/16 gets slower on
`pr`; each process is off by a random few percent, so BM_steady and BM_jitter need rounds."""
import json, random, re, sys, time

SPIN = {spin}
FACTOR = 1 + random.gauss(0, 0.04)  # this process's speed


def spin(n):
    total = 0
    for i in range(int(n * FACTOR)):
        total += i
    return total


BENCHMARKS = [("BM_spin/16", lambda: spin(16 * SPIN)), ("BM_steady", lambda: spin(4000)),
              ("BM_jitter", lambda: spin(6000))]
flags = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--") and "=" in a)
if flags.get("benchmark_list_tests") == "true":
    print("\\n".join(name for name, _ in BENCHMARKS))
    sys.exit(0)
pattern = re.compile(flags.get("benchmark_filter", "."))
repetitions = int(flags.get("benchmark_repetitions", "1"))
rows = []
for name, work in BENCHMARKS:
    if not pattern.search(name):
        continue
    for repetition in range(repetitions):
        start = time.perf_counter()
        for _ in range(20):
            work()
        rows.append({{"name": name, "run_name": name, "run_type": "iteration",
                     "repetitions": repetitions, "repetition_index": repetition,
                     "threads": 1, "iterations": 20, "time_unit": "us",
                     "real_time": (time.perf_counter() - start) / 20 * 1e6,
                     "cpu_time": 0.0}})
with open(flags["benchmark_out"], "w") as out:
    json.dump({{"context": {{"host_name": "newcomer", "library_build_type": "release"}},
               "benchmarks": rows}}, out)
'''

SUITE = """\
description: the newcomer pass's Google Benchmark-shaped benchmark
run_times: 5
expect:
  family: [BM_spin]
target:
  command: [python3, bench.py]
  format: gbench
  benchmarks: [BM_spin/16, BM_steady, BM_jitter]
"""


def git(repo: Path, *args: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "newcomer", "GIT_AUTHOR_EMAIL": "n@example.com",
           "GIT_COMMITTER_NAME": "newcomer", "GIT_COMMITTER_EMAIL": "n@example.com"}
    subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True)


def command_target(run: Pass, honour: bool) -> None:
    repo = run.folder / "gbench"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "suite.yaml").write_text(SUITE)
    for branch, spin in (("main", 100), ("pr", 130)):
        if branch == "pr":
            git(repo, "checkout", "-q", "-b", "pr")
        (repo / "bench.py").write_text(GBENCH.format(spin=spin))
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"bench at {spin}")
    middle = run.widths[len(run.widths) // 2]
    args = ["main..pr", "--configs", "suite.yaml", "--target", "command", "--cache-dir",
            run.cache, "--min-effect", "3%"]
    done = run.abdiff(*args, cwd=repo, width=middle)
    run.look(f"command main..pr@{middle}", middle, done)
    if done.returncode not in (0, 1):
        run.found("runs", "command main..pr", f"exit {done.returncode}: {done.stderr[-300:]}")
        return
    a, b, _, _ = next(r for r in runs_of(run.cache)
                      if json.loads(r[0].read_text()).get("target") == "command")
    # the suite is a file: `compare` of its run files is told its scope
    result = render_everywhere(run, "command", repo, a, b, ["--expect", "family=BM_spin"])
    step = re.search(r"re-run with --max-rounds (\d+)", normal(done.stdout))
    print(f"  command target: exit {done.returncode}; next: "
          f"{step[0] if step else 'no --max-rounds suggested'}", flush=True)
    if not honour or not step or not result:
        return
    ceiling = int(step[1])
    again = run.abdiff(*args, "--max-rounds", ceiling, "--json", run.folder / "honour.json",
                       cwd=repo, width=middle)
    run.look(f"command --max-rounds {ceiling}@{middle}", middle, again)
    honoured = json.loads((run.folder / "honour.json").read_text())
    for config in honoured["configs"]:
        latency = config["latency"]
        if latency["verdict"] != "inconclusive":
            continue
        rounds = min(latency["rounds_a"], latency["rounds_b"])
        if rounds < ceiling and f"stopped at {rounds} of --max-rounds {ceiling}" not in \
                normal(again.stdout):
            run.found("honour", config["id"], f"stopped at {rounds} of {ceiling} rounds "
                      "without saying why")
    print(f"  --max-rounds {ceiling}: " + ", ".join(
        f"{c['id']} {c['latency']['verdict']} at {c['latency']['rounds_a']} rounds"
        for c in honoured["configs"]), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--widths", default="80,100,160")
    parser.add_argument("--out", type=Path, help="folder to work in (default: a new one)")
    parser.add_argument("--quick", action="store_true",
                        help="no bisect, no --max-rounds rerun")
    parser.add_argument("--demo-rounds", type=int, default=5,
                        help="`abdiff demo --rounds` (default 5, what the README runs)")
    args = parser.parse_args()
    widths = sorted(int(w) for w in args.widths.split(","))
    folder = (args.out or Path(tempfile.mkdtemp(prefix="abdiff-newcomer-"))).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    run = Pass(folder, widths)
    root = Path(__file__).resolve().parents[1]
    middle = widths[len(widths) // 2]
    print(f"newcomer pass in {folder}, widths {widths}", flush=True)

    readme(run, root)
    # the README's `abdiff demo`: builds ./abdiff-demo and runs main..pr-v1 and main..pr
    done = run.abdiff("demo", "--cache-dir", run.cache, "--rounds", args.demo_rounds,
                      cwd=folder, width=middle)
    run.look(f"demo@{middle}", middle, done)
    print(f"  demo: exit {done.returncode}", flush=True)
    demo = folder / "abdiff-demo"
    for a, b, rev_a, rev_b in runs_of(run.cache):
        render_everywhere(run, f"demo {rev_a}..{rev_b}", demo, a, b, [])
    options(run, demo)
    for width in widths:
        run.look(f"doctor main..pr@{width}", width, run.abdiff(
            "doctor", "main..pr", "--configs", "mtp", "--cache-dir", run.cache, cwd=demo,
            width=width))
    done = run.abdiff("baseline", "refresh", "rel", "--rev", "pr", "--configs", "mtp",
                      "--rounds", 3, "--cache-dir", run.cache, cwd=demo, width=middle)
    run.look(f"baseline refresh@{middle}", middle, done)
    for width in widths:
        for action in (["show", "rel"], ["list"]):
            run.look(f"baseline {action[0]}@{width}", width,
                     run.abdiff("baseline", *action, cwd=demo, width=width))
        run.look(f"history@{width}", width, run.abdiff(
            "history", CONFIG, "GEN-DSA-bs8-q2-kv2049", "--cache-dir", run.cache, cwd=demo,
            width=width))
    if not args.quick:
        bisect_repo = folder / "bisect-demo"
        run.abdiff("demo", "init", bisect_repo, "--history", cwd=folder, width=middle)
        for width in (widths[0], widths[-1]):
            run.look(f"bisect@{width}", width, run.abdiff(
                "bisect", "main..history", "--configs", "mtp", "--rounds", 5,
                "--max-rounds", 5, "--cache-dir", run.cache, cwd=bisect_repo, width=width))
    command_target(run, honour=not args.quick)

    (folder / "findings.json").write_text(json.dumps(
        {"widths": widths, "checked": run.checked, "findings": run.findings}, indent=1))
    kinds: dict[str, int] = {}
    for finding in run.findings:
        kinds[finding["check"]] = kinds.get(finding["check"], 0) + 1
    print(textwrap.fill(f"newcomer pass: {len(run.checked)} outputs checked at widths {widths}; "
                        + (", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
                           or "nothing found") + f"; details in {folder}/findings.json", 100))
    return 1 if run.findings else 0


if __name__ == "__main__":
    sys.exit(main())
