"""launchers/runtime.py: what a measuring command holds open (the child subreaper, the warm
pool it primed) is released when the command leaves its bench, however it leaves: an
error in the set-up, or Ctrl-C once the pool waits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import write_suite

from abdiff.launchers.runtime import Runtime
from abdiff.launchers.sandbox import NO_SANDBOX
from abdiff.store.files import hold_in_use

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")

# a measuring command's set-up (commands/run.py's path to prepare_bench), stopped by `how`
COMMAND = r"""
import ctypes, json, sys
from pathlib import Path
from abdiff.cli import build_parser
from abdiff.commands.common import measuring
from abdiff.errors import InputError
from abdiff.run.session import prepare_bench

def subreaper():
    flag = ctypes.c_int()
    ctypes.CDLL(None).prctl(37, ctypes.byref(flag), 0, 0, 0)  # PR_GET_CHILD_SUBREAPER
    return flag.value

repo, suite, cache, how = sys.argv[1:]
args = build_parser("run").parse_args(
    ["run", "main", "--configs", suite, "--repo", repo, "--cache-dir", cache, "--target",
     "reference", "--prestart", "on", "--sandbox", "off", "--out", cache + "/a.json"])
selection, schedule = measuring(args)
seen = {}
try:
    with prepare_bench(selection, schedule, Path(repo)) as bench:
        waiting = bench.launcher.pool.waiting.proc
        seen["inside"] = {"subreaper": subreaper(), "waiting": waiting.poll() is None}
        if how == "interrupt":
            raise KeyboardInterrupt
        raise InputError("a bad option found after the set-up")
except (KeyboardInterrupt, InputError) as exc:
    seen["stopped"] = type(exc).__name__
seen["after"] = {"subreaper": subreaper(), "pool": bench.launcher.pool is not None,
                 "waiting": waiting.poll() is None}
print(json.dumps(seen))
"""


@linux
@pytest.mark.parametrize("how", ["interrupt", "error"])
def test_leaving_the_bench_ends_its_pool_and_stops_adopting(faulty_repo: Path, tmp_path: Path,
                                                            how: str) -> None:
    """Inside the bench abdiff adopts leftovers and a standby worker waits (the control: both
    really held); once the command leaves it, by Ctrl-C or an error, neither is."""
    suite = write_suite(tmp_path / "s.yaml", [1])
    done = subprocess.run([sys.executable, "-c", COMMAND, str(faulty_repo), str(suite),
                           str(tmp_path / "cache"), how],
                          capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["inside"] == {"subreaper": 1, "waiting": True}
    assert seen["stopped"] == ("KeyboardInterrupt" if how == "interrupt" else "InputError")
    assert seen["after"] == {"subreaper": 0, "pool": False, "waiting": False}


def test_a_lane_shares_the_sandbox_and_leftovers_and_closes_with_its_runtime(
        tmp_path: Path) -> None:
    """A lane of --devices: the runtime's sandbox, limits and leftovers; the in-use lock the
    runtime holds is let go when it closes (`cache clean` may then clean)."""
    runtime = Runtime(NO_SANDBOX, ["OMP_NUM_THREADS"], 2**30)
    lane = runtime.lane()
    assert lane.leftovers is runtime.leftovers and lane.sandbox is runtime.sandbox
    assert (lane.pass_env, lane.max_memory_bytes, lane.pool) == (["OMP_NUM_THREADS"], 2**30,
                                                                 None)
    lock = hold_in_use(tmp_path / "in-use")
    runtime.hold(lock)
    runtime.close()
    assert runtime.lanes == [] and runtime.held == []
    with pytest.raises(OSError):
        os.fstat(lock)
