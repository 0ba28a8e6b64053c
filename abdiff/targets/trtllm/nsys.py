"""Kernel records from Nsight Systems profiles, read the way upstream's parse.py reads them.

Upstream's layer-wise benchmark is usually run under `nsys profile` (its
run.sh) and its parse.py works on the SQLite export of the report. abdiff
reads the same tables, so a kernel record can come from an nsys profile when
one exists, instead of (or to cross-check) torch.profiler:

- `CUPTI_ACTIVITY_KIND_KERNEL`: one row per kernel launch; `demangledName`
  (and `shortName`) are ids into `StringIds`;
- `CUPTI_ACTIVITY_KIND_RUNTIME`: the CPU-side launch call; its `correlationId`
  ties a kernel to the moment the host launched it (graph replays included);
- `CUPTI_ACTIVITY_KIND_MEMCPY` / `_MEMSET`: copies and fills, with their bytes and
  (memcpy) direction; each is an entry of the kernel record, `[memcpy DtoH 4096 B]`,
  counted per iteration, so the kernel diff shows a copy a change added;
- `NVTX_EVENTS` + `ENUM_NSYS_EVENT_TYPE`: run.py wraps every iteration in an
  NVTX range named `b={batch_size} s={seq_len_q} past={seq_len_kv_cache} ...`;
  kernels whose launch falls in such a range belong to that iteration;
  kernels launched inside a `layer_wise_benchmarks ignore` range (upstream's
  calibrator marks its own bookkeeping copies so) are left out, as parse.py
  leaves them out. For a kernel replayed from a CUDA graph, the launch that
  counts for that is the one captured into the graph (`CUDA_GRAPH_NODE_EVENTS`),
  as in parse.py. The other ranges inside an iteration (the modules upstream's
  runner marks) give each kernel a module: the innermost range around its launch
  (for graph replays, around its capture); a module's time is the GPU time of its
  kernels.

Only the standard library is used (sqlite3, subprocess), so this module works
on any machine that has the export, with or without a GPU.
"""

from __future__ import annotations

import bisect
import re
import shutil
import sqlite3
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from abdiff.errors import InfrastructureError

RUN_RANGE = re.compile(r"^b=(\d+) s=(\d+) past=(\d+)\b")
IGNORE_RANGE = "layer_wise_benchmarks ignore"


def profile_argv(output: Path, nsys: str = "nsys") -> list[str]:
    """`nsys profile` options of upstream's run.sh: CUDA + NVTX, cudaProfilerApi capture range.

    run.py calls cudaProfilerStart just before its timed loop, so the report
    holds the timed iterations only.
    """
    return [
        nsys, "profile", "-t", "cuda,nvtx", "--cpuctxsw", "none", "--cuda-event-trace", "false",
        "--cuda-graph-trace", "node", "-c", "cudaProfilerApi", "--capture-range-end", "stop",
        "-s", "none", "-o", str(output), "--force-overwrite", "true",
    ]


def export_sqlite(report: Path, output: Path | None = None, nsys: str | None = None) -> Path:
    """Convert a `.nsys-rep` to SQLite with `nsys export --type sqlite` (reused when up to date).

    Raises InfrastructureError when nsys is not installed or the export fails:
    without the export there is nothing to read.
    """
    report = Path(report)
    output = Path(output) if output else report.with_suffix(".sqlite")
    if output.is_file() and output.stat().st_mtime >= report.stat().st_mtime:
        return output
    exe = nsys or shutil.which("nsys")
    if exe is None:
        raise InfrastructureError(f"cannot read {report}: nsys is not on PATH (needed for "
                                  "`nsys export --type sqlite`)")
    argv = [exe, "export", "--type", "sqlite", "-o", str(output), "--force-overwrite=true",
            str(report)]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0 or not output.is_file():
        lines = (done.stderr or done.stdout).strip().splitlines()
        why = lines[-1] if lines else f"exit code {done.returncode}"
        raise InfrastructureError(f"nsys export of {report} failed: {why}")
    return output


def _connect(path: Path) -> sqlite3.Connection:
    if not Path(path).is_file():
        raise InfrastructureError(f"{path}: no such nsys SQLite export")
    return sqlite3.connect(f"file:{Path(path).resolve()}?mode=ro", uri=True)


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def _name_column(conn: sqlite3.Connection) -> str:
    """demangledName where the export has it (upstream's choice), else shortName."""
    columns = _columns(conn, "CUPTI_ACTIVITY_KIND_KERNEL")
    for name in ("demangledName", "shortName"):
        if name in columns:
            return name
    raise InfrastructureError("CUPTI_ACTIVITY_KIND_KERNEL has neither demangledName nor shortName")


# CUPTI_ActivityMemcpyKind, the values nsys stores in CUPTI_ACTIVITY_KIND_MEMCPY.copyKind
COPY_KINDS = MappingProxyType({1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD",
                               7: "DtoA", 8: "DtoD", 9: "HtoH", 10: "PtoP"})


def copy_name(kind: str, size: int) -> str:
    """A copy or fill as a kernel record entry: `[memcpy DtoH 4096 B]`, `[memset 512 B]`.
    One entry per direction and size, counted per iteration like a kernel, so a change
    that adds a device-to-host copy per step is a kernel change of the config."""
    return f"[{kind} {size} B]"


@dataclass
class ShapeKernels:
    """The iterations run.py marked for one shape: the kernels (copies and fills included)
    of each, their GPU time, and the GPU time of each module range inside the iteration."""

    batch_size: int
    seq_len_q: int
    seq_len_kv_cache: int
    runs: list[Counter[str]] = field(default_factory=list)
    times_ns: list[Counter[str]] = field(default_factory=list)  # per run: name -> GPU ns
    modules_ns: list[Counter[str]] = field(default_factory=list)  # per run: module -> GPU ns

    @property
    def key(self) -> tuple[int, int, int]:
        return (self.batch_size, self.seq_len_q, self.seq_len_kv_cache)

    def per_iteration(self) -> dict[str, int]:
        """The kernels of one iteration: the last marked run (after warm-up, as parse.py uses)."""
        return dict(sorted(self.runs[-1].items())) if self.runs else {}

    def kernel_us(self) -> dict[str, float]:
        """GPU time of each kernel (copy, fill) in the last marked run, microseconds."""
        return {k: v / 1000 for k, v in sorted(self.times_ns[-1].items())} if self.runs else {}

    def module_us(self) -> dict[str, float]:
        """GPU time of the kernels launched inside each module range of the last marked
        run (upstream's runner marks layers and modules with NVTX), microseconds."""
        return {k: v / 1000 for k, v in sorted(self.modules_ns[-1].items())} if self.runs else {}


def _push_pop_type(conn: sqlite3.Connection) -> int | None:
    if "ENUM_NSYS_EVENT_TYPE" not in _tables(conn):
        return None
    row = conn.execute(
        "SELECT id FROM ENUM_NSYS_EVENT_TYPE WHERE name = 'NvtxPushPopRange'").fetchone()
    return int(row[0]) if row else None


def kernels_by_shape(path: Path) -> dict[tuple[int, int, int], ShapeKernels]:
    """Kernels of each iteration of each (batch_size, seq_len_q, seq_len_kv_cache) run.py timed.

    A kernel belongs to an iteration when the host call that launched it
    (`CUPTI_ACTIVITY_KIND_RUNTIME`, joined on `correlationId`) started inside
    that iteration's NVTX range, which is how upstream's parse.py assigns them.
    """
    read = _ranges_and_kernels(path)
    if read is None:
        return {}
    ranges, kernels = read
    runs: list[tuple[int, int, int]] = []  # (start, end, index into `marked`)
    marked: list[tuple[ShapeKernels, int]] = []  # (shape, index of the run in the shape)
    shapes: dict[tuple[int, int, int], ShapeKernels] = {}
    ignored = [(int(start), int(end)) for start, end, label in ranges
               if label == IGNORE_RANGE and end is not None]
    modules = [(int(start), int(end), str(label)) for start, end, label in ranges
               if end is not None and label and label != IGNORE_RANGE
               and not RUN_RANGE.match(label) and not label.startswith("layer_wise_benchmarks")]
    for start, end, label in ranges:
        match = RUN_RANGE.match(label or "")
        if not match or end is None:
            continue
        key = (int(match[1]), int(match[2]), int(match[3]))
        shape = shapes.setdefault(key, ShapeKernels(*key))
        shape.runs.append(Counter())
        shape.times_ns.append(Counter())
        shape.modules_ns.append(Counter())
        runs.append((int(start), int(end), len(marked)))
        marked.append((shape, len(shape.runs) - 1))
    starts = [r[0] for r in runs]
    for launched, call_start, call_end, name, duration in kernels:
        if any(lo <= int(call_start) and int(call_end) <= hi for lo, hi in ignored):
            continue
        i = bisect.bisect_right(starts, int(launched)) - 1
        if i < 0 or int(launched) >= runs[i][1]:
            continue
        shape, n = marked[runs[i][2]]
        shape.runs[n][str(name)] += 1
        shape.times_ns[n][str(name)] += int(duration or 0)
        module = _innermost(modules, int(call_start), int(call_end))
        if module is not None:
            shape.modules_ns[n][module] += int(duration or 0)
    return shapes


def _ranges_and_kernels(path: Path) -> tuple[list[Any], list[Any]] | None:
    """The report's NVTX ranges (start, end, text) and kernels (host launch, launch call
    start and end, name, duration), None where it lacks the tables needed."""
    conn = _connect(path)
    try:
        tables = _tables(conn)
        needed = {"NVTX_EVENTS", "StringIds", "CUPTI_ACTIVITY_KIND_KERNEL",
                  "CUPTI_ACTIVITY_KIND_RUNTIME"}
        if not needed <= tables:
            return None
        event_type = _push_pop_type(conn)
        nvtx_cols = _columns(conn, "NVTX_EVENTS")
        text = "COALESCE(N.text, S.value)" if "text" in nvtx_cols else "S.value"
        where = "WHERE N.eventType = ?" if event_type is not None else ""
        params = (event_type,) if event_type is not None else ()
        ranges = conn.execute(
            f"SELECT N.start, N.end, {text} FROM NVTX_EVENTS AS N "
            f"LEFT JOIN StringIds AS S ON N.textId = S.id {where} ORDER BY N.start",
            params,
        ).fetchall()
        column = _name_column(conn)
        # (host launch time, launch call start and end as captured, name): for graph
        # replays the captured call is the node's original capture, as parse.py joins it
        graph = "CUDA_GRAPH_NODE_EVENTS" in tables and "graphNodeId" in _columns(
            conn, "CUPTI_ACTIVITY_KIND_KERNEL")
        captured = ("COALESCE(G2.start, R.start), COALESCE(G2.end, R.end)" if graph
                    else "R.start, R.end")
        joins = ("LEFT JOIN CUDA_GRAPH_NODE_EVENTS AS G1 ON K.graphNodeId = G1.graphNodeId "
                 "AND G1.originalGraphNodeId IS NOT NULL "
                 "LEFT JOIN CUDA_GRAPH_NODE_EVENTS AS G2 "
                 "ON G1.originalGraphNodeId = G2.graphNodeId " if graph else "")
        kernels = conn.execute(
            f"SELECT R.start, {captured}, S.value, K.end - K.start "
            f"FROM CUPTI_ACTIVITY_KIND_KERNEL AS K "
            f"JOIN CUPTI_ACTIVITY_KIND_RUNTIME AS R ON K.correlationId = R.correlationId "
            f"{joins}JOIN StringIds AS S ON K.{column} = S.id ORDER BY R.start"
        ).fetchall()
        kernels += _copies(conn, tables)
    finally:
        conn.close()
    return ranges, kernels


def _innermost(ranges: list[tuple[int, int, str]], start: int, end: int) -> str | None:
    """The name of the shortest range holding the host call `start`..`end` (the module
    whose code launched it; for graph replays, the call captured into the graph)."""
    holding = [(hi - lo, label) for lo, hi, label in ranges if lo <= start and end <= hi]
    return min(holding)[1] if holding else None


def _copies(conn: sqlite3.Connection, tables: set[str]) -> list[tuple]:
    """Memcpy and memset records as (host launch, call start, call end, name, GPU ns)."""
    found: list[tuple] = []
    for table, kind in (("CUPTI_ACTIVITY_KIND_MEMCPY", "memcpy"),
                        ("CUPTI_ACTIVITY_KIND_MEMSET", "memset")):
        if table not in tables or not {"bytes", "correlationId"} <= _columns(conn, table):
            continue
        direction = "C.copyKind" if kind == "memcpy" else "NULL"
        for launched, call_end, copy_kind, size, duration in conn.execute(
                f"SELECT R.start, R.end, {direction}, C.bytes, C.end - C.start FROM {table} AS C "
                "JOIN CUPTI_ACTIVITY_KIND_RUNTIME AS R ON C.correlationId = R.correlationId "
                "ORDER BY R.start"):
            label = kind if copy_kind is None else (
                f"{kind} {COPY_KINDS.get(int(copy_kind), f'kind{copy_kind}')}")
            found.append((launched, launched, call_end, copy_name(label, int(size)), duration))
    return found
