"""A stand-in for a set-up-bound target: the demo with TensorRT-LLM-like set-up costs,
abdiff against by hand.

Builds the demo repository (abdiff.demo.builder) and changes it on both `main` and `pr`
(one commit on each) so that its set-up costs what TensorRT-LLM's does, scaled down:

- importing `tinyllm` takes IMPORT_S (4 s, a sleep);
- each kernel shape (backend, run type, batch size, q, kv length) is JIT-compiled once
  (COMPILE_S, 1 s, a sleep) into a cache under `$HOME/.deep_gemm`, or DG_JIT_CACHE_DIR
  when set, the way DeepGEMM keeps it: a shape already in the cache costs nothing.

Every import and every compile appends one line to a counter file in HOME (abdiff gives
each side's workers a HOME of its own, kept in its cache, the one place besides their
rounds' folders its sandbox lets them write; the by-hand processes get one per side), so
the counts are per side (the line names the branch) whoever ran them. Then it runs

- `abdiff main..pr --configs mtp` (wall, imports, compiles, verdicts), and
- the same configs by hand: one process per backend and side, each config set up and
  run once (the suite's warm-up and timed calls), a process restarted after an abort
  (it dies on the aborting config; the next one takes the configs left), each side with
  a cache of its own kept between its processes,

and prints a table of both. With `--devices-check`, a second stand-in bound by set-up
(every config's set-up BUILD_S, uncached, on a branch `pr-build`) is run as an A/A
`pr-build..pr-build` with `--devices 0:1` (two CPU sets) and with `--devices 0` (one),
REPEATS times each: the wall ratio and how many configs each A/A flagged.

    python lab/setup_cost.py                               # the lead's run, quiet machine
    python lab/setup_cost.py --configs lab/data/small-mtp.yaml --rounds 2 --max-rounds 2
    python lab/setup_cost.py --devices-check --repeats 3   # plus the --devices comparison
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from tabulate import tabulate

from abdiff.demo.builder import build_demo_repo
from abdiff.suites import load_suite

RUNNER = "tinyllm/tools/layer_wise_benchmarks/runner.py"
JIT_MODULE = "tinyllm/_jit.py"
COUNTS_FILE = ".setup-cost-counts"  # in each side's HOME

JIT_SOURCE = '''"""Stand-in for DeepGEMM's JIT (lab/setup_cost.py): each kernel shape is
compiled once into a cache under $HOME/.deep_gemm (DG_JIT_CACHE_DIR when set)."""

import os
import time

SIDE = {side!r}
COUNTS_FILE = {counts_file!r}
COMPILE_S = {compile_s!r}
BUILD_S = {build_s!r}


def count(what: str) -> None:
    """One line per import or compile, appended (O_APPEND: whole lines from any process) to
    a file in HOME: the side's own, kept folder, the one place besides its rounds' folders
    that abdiff's sandbox lets the side's workers write."""
    line = f"{{what}} {{SIDE}} {{os.getpid()}}\\n".encode()
    handle = os.open(os.path.join(os.path.expanduser("~"), COUNTS_FILE),
                     os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        os.write(handle, line)
    finally:
        os.close(handle)


def cache_dir() -> str:
    return os.environ.get("DG_JIT_CACHE_DIR") or os.path.join(os.path.expanduser("~"),
                                                               ".deep_gemm")


def compile_kernel(shape: str) -> None:
    """The shape's kernel from the cache, compiled (COMPILE_S) where it is not there yet;
    then the uncached part of a config's set-up (BUILD_S: a model build)."""
    path = os.path.join(cache_dir(), "cache", shape + ".cubin")
    if not os.path.exists(path):
        time.sleep(COMPILE_S)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path + ".tmp", "w") as made:
            made.write(shape)
        os.replace(path + ".tmp", path)
        count("compile " + shape)
    time.sleep(BUILD_S)
'''

INIT_ADDITION = '''
import time as _time

from tinyllm import _jit

_time.sleep({import_s!r})  # stand-in for TensorRT-LLM's import (lab/setup_cost.py)
_jit.count("import")
'''

JIT_CALL = ('        _jit.compile_kernel(f"{self.backend}-{run_type}-{batch_size}-{seq_len_q}-"\n'
            '                            f"{seq_len_kv_cache}")\n')


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=abdiff lab", "-c",
                           "user.email=lab@localhost", *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def add_setup_cost(repo: Path, branch: str, base: str, import_s: float, compile_s: float,
                   build_s: float = 0.0) -> None:
    """Commit the stand-in's set-up costs on `branch` (made from `base` when new)."""
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        if branch == base:
            git(repo, "worktree", "add", "-q", str(tree), branch)
        else:
            git(repo, "worktree", "add", "-q", "-b", branch, str(tree), base)
        (tree / JIT_MODULE).write_text(JIT_SOURCE.format(
            side=branch, counts_file=COUNTS_FILE, compile_s=compile_s, build_s=build_s))
        init = tree / "tinyllm/__init__.py"
        init.write_text(init.read_text() + INIT_ADDITION.format(import_s=import_s))
        runner = tree / RUNNER
        text = runner.read_text()
        anchor = "        s = self.local_shapes\n        kv_cache_manager"
        assert anchor in text, "the demo's runner changed: update lab/setup_cost.py"
        text = text.replace(anchor, JIT_CALL + anchor, 1)
        text = text.replace("import torch\n", "import torch\n\nfrom tinyllm import _jit\n", 1)
        runner.write_text(text)
        git(tree, "add", "-A")
        git(tree, "commit", "-qm", f"stand-in set-up costs (import {import_s} s, JIT "
                                    f"{compile_s} s a shape, build {build_s} s a config)")
        git(repo, "worktree", "remove", "--force", str(tree))


def counted(homes: list[Path]) -> dict[str, Counter[str]]:
    """{"import"|"compile": Counter(branch -> lines)} from the counter files in `homes`."""
    found: dict[str, Counter[str]] = {"import": Counter(), "compile": Counter()}
    for counts in (home / COUNTS_FILE for home in homes):
        if not counts.exists():
            continue
        for line in counts.read_text().splitlines():
            what, *rest = line.split()
            side = rest[1] if what == "compile" else rest[0]
            found[what][side] += 1
    return found


def run_abdiff(repo: Path, cache: Path, rev_range: str, configs: str, extra: list[str]
               ) -> tuple[int, float, dict]:
    result_path = cache / f"result-{time.monotonic_ns()}.json"
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "abdiff.cli", rev_range, "--configs", configs,
                           "--repo", str(repo), "--cache-dir", str(cache), "--json",
                           str(result_path), "--quiet", *extra],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          check=False)
    wall = time.perf_counter() - start
    if not result_path.exists():
        sys.exit(f"setup_cost.py: abdiff {rev_range} exit {done.returncode} wrote no result: "
                 f"{done.stderr.strip().splitlines()[-1:]}")
    return done.returncode, wall, json.loads(result_path.read_text())


def verdict_words(result: dict) -> str:
    tally = Counter(c["verdict"] for c in result["configs"])
    return ", ".join(f"{n} {verdict}" for verdict, n in sorted(tally.items()))


def by_hand_child(checkout: Path, backend: str, suite_name: str) -> int:
    """One by-hand process: import the checkout's harness, then each config left (argv
    order) set up and run once; one JSON line per config, flushed (an abort ends it)."""
    import torch

    sys.path.insert(0, str(checkout))
    from tinyllm.tools.layer_wise_benchmarks import Runner

    torch.set_num_threads(1)
    suite = load_suite(suite_name)
    done = set(json.loads(os.environ.get("SETUP_COST_DONE", "[]")))
    for config in suite.configs:
        if config.params["backend"] != backend or config.id in done:
            continue
        print(json.dumps({"id": config.id, "status": "started"}), flush=True)
        params = config.params
        try:
            run_pack = Runner(backend, device="cpu").create_run_pack(
                params["run_type"], batch_size=params["batch_size"],
                seq_len_q=params["seq_len_q"], seq_len_kv_cache=params["seq_len_kv_cache"])
            for _ in range(suite.warmup_times):
                run_pack()
            times = []
            for _ in range(suite.run_times):
                start = time.perf_counter_ns()
                run_pack()
                times.append((time.perf_counter_ns() - start) / 1000)
            times.sort()
            record = {"id": config.id, "status": "ok", "median_us": times[len(times) // 2]}
        except Exception as exc:  # noqa: BLE001 - a config's failure is its status
            record = {"id": config.id, "status": "failed", "error": repr(exc)[:200]}
        print(json.dumps(record), flush=True)
    sys.stdout.flush()
    os._exit(0)


def by_hand(repo: Path, work: Path, configs: str) -> tuple[float, dict[str, dict[str, str]]]:
    """The configs by hand: per side and backend one process, restarted after an abort.
    Returns the wall time and {side: {config id: status}}."""
    suite = load_suite(configs)
    backends = sorted({c.params["backend"] for c in suite.configs})
    statuses: dict[str, dict[str, str]] = {}
    start = time.perf_counter()
    for side in ("main", "pr"):
        checkout = work / f"hand-{side}"
        if not checkout.exists():
            git(repo, "worktree", "add", "-q", "--detach", str(checkout), side)
        home = work / f"hand-home-{side}"  # the side's own cache, kept between its processes
        home.mkdir(exist_ok=True)
        statuses[side] = {}
        for backend in backends:
            while True:
                env = {**os.environ, "HOME": str(home),
                       "SETUP_COST_DONE": json.dumps(sorted(statuses[side]))}
                env.pop("DG_JIT_CACHE_DIR", None)
                done = subprocess.run(
                    [sys.executable, __file__, "--by-hand-child", str(checkout), backend,
                     configs], cwd=checkout, env=env, capture_output=True, text=True,
                    check=False)
                started = None
                for line in done.stdout.splitlines():
                    event = json.loads(line)
                    if event["status"] == "started":
                        started = event["id"]
                    else:
                        statuses[side][event["id"]] = event["status"]
                        started = None
                if started is not None:  # it died in this config: aborted
                    statuses[side][started] = "aborted"
                    continue  # a new process for the configs left
                break
    return time.perf_counter() - start, statuses


def status_words(statuses: dict[str, dict[str, str]]) -> str:
    changes = Counter(f"{statuses['main'].get(c)} -> {statuses['pr'].get(c)}"
                      for c in statuses["main"] if statuses["main"][c] != statuses["pr"].get(c))
    same = sum(statuses["main"][c] == statuses["pr"].get(c) for c in statuses["main"])
    return ", ".join([f"{n} {change}" for change, n in sorted(changes.items())]
                     + [f"{same} same status (latency: one number per side)"])


def per_side(counts: dict[str, Counter[str]], what: str) -> str:
    sides = counts[what]
    return f"{sum(sides.values())} (main {sides['main']}, pr {sides['pr']})"


def side_homes(cache: Path) -> list[Path]:
    """Every side's kept HOME in an abdiff cache (store/sides.py)."""
    return sorted(cache.glob("sides/*/home"))


def devices_check(repo: Path, work: Path, configs: str, repeats: int,
                  extra: list[str], build_s: float) -> list[list[str]]:
    """A/A runs of a set-up-bound stand-in on two CPU sets and on one."""
    add_setup_cost(repo, "pr-build", "pr~1", 0.0, 0.0, build_s)  # pr as built
    rows = []
    cpus = sorted(os.sched_getaffinity(0))
    for label, devices in (("two CPU sets", f"{cpus[0]}:{cpus[1]}"), ("one CPU set",
                                                                       f"{cpus[0]}")):
        walls, flagged = [], []
        for n in range(repeats):
            code, wall, result = run_abdiff(repo, work / f"cache-devices-{n}-{len(devices)}",
                                            "pr-build..pr-build", configs,
                                            ["--devices", devices, "--seed", str(100 + n),
                                             *extra])
            walls.append(wall)
            flagged.append(sum(c["verdict"] not in ("unchanged", "inconclusive")
                               for c in result["configs"]))
        rows.append([f"--devices {devices} ({label})", f"{sum(walls) / len(walls):.1f}",
                     " ".join(f"{w:.1f}" for w in walls),
                     f"{sum(f > 0 for f in flagged)} of {repeats} runs "
                     f"({sum(flagged)} configs)"])
    ratio = float(rows[0][1]) / float(rows[1][1])
    rows.append(["wall ratio, two sets / one", f"{ratio:.2f}", "", ""])
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, help="work in this folder and keep it")
    parser.add_argument("--configs", default="mtp")
    parser.add_argument("--import-s", type=float, default=4.0)
    parser.add_argument("--compile-s", type=float, default=1.0)
    parser.add_argument("--devices-check", action="store_true")
    parser.add_argument("--repeats", type=int, default=3, help="A/A runs per --devices setting")
    parser.add_argument("--build-s", type=float, default=1.0,
                        help="the --devices stand-in's uncached set-up per config")
    parser.add_argument("--devices-rounds", type=int, default=8,
                        help="rounds per side of the --devices A/As (4 ABBA blocks: 2 waves "
                             "on two devices)")
    parser.add_argument("--skip-main", action="store_true", help="only the --devices check")
    parser.add_argument("--by-hand-child", nargs=3, help=argparse.SUPPRESS)
    args, extra = parser.parse_known_args()
    if args.by_hand_child:
        checkout, backend, configs = args.by_hand_child
        return by_hand_child(Path(checkout), backend, configs)
    if Path(args.configs).is_file():  # the by-hand processes run in the checkouts
        args.configs = str(Path(args.configs).resolve())
    work = (args.work or Path(tempfile.mkdtemp(prefix="abdiff-setup-cost-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    repo = work / "demo"
    build_demo_repo(repo)
    git(repo, "checkout", "-q", "--detach")  # main free for a worktree of its own
    for branch in ("main", "pr"):
        add_setup_cost(repo, branch, branch, args.import_s, args.compile_s)
    git(repo, "checkout", "-q", "main")
    print(f"stand-in: {repo} (import {args.import_s} s, JIT {args.compile_s} s a shape); "
          f"counted in each side's HOME ({COUNTS_FILE}); abdiff options {extra or 'default'}",
          flush=True)
    if not args.skip_main:
        code, wall, result = run_abdiff(repo, work / "cache", "main..pr", args.configs, extra)
        tool = counted(side_homes(work / "cache"))
        hand_wall, statuses = by_hand(repo, work, args.configs)
        hand = counted(sorted(work.glob("hand-home-*")))
        rows = [[f"abdiff main..pr --configs {args.configs}", f"{wall:.1f}",
                 per_side(tool, "import"), per_side(tool, "compile"),
                 f"exit {code}: {verdict_words(result)}"],
                ["by hand (a process per backend and side)", f"{hand_wall:.1f}",
                 per_side(hand, "import"), per_side(hand, "compile"), status_words(statuses)]]
        print(tabulate(rows, headers=["run", "wall s", "package imports", "JIT compiles",
                                      "verdicts"]))
        print(f"wall ratio abdiff / by hand: {wall / hand_wall:.2f}; abdiff's own split: "
              f"{json.dumps(result.get('time'))}")
    if args.devices_check:
        rounds = [f"--rounds={args.devices_rounds}", f"--max-rounds={args.devices_rounds}"]
        rows = devices_check(repo, work, args.configs, args.repeats, [*extra, *rounds],
                             args.build_s)
        print(tabulate(rows, headers=["A/A pr-build..pr-build", "mean wall s", "walls",
                                      "flagged"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
