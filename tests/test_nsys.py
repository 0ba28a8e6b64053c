"""Kernel records from nsys SQLite exports laid out as `nsys export --type sqlite` writes them.

The tables and columns are those upstream's parse.py queries (StringIds,
ENUM_NSYS_EVENT_TYPE, NVTX_EVENTS, CUPTI_ACTIVITY_KIND_KERNEL,
CUPTI_ACTIVITY_KIND_RUNTIME); the test writes a small export by hand.
"""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import pytest

from abdiff.errors import InfrastructureError
from abdiff.targets.trtllm import nsys

PUSH_POP = 59  # ENUM_NSYS_EVENT_TYPE id of NvtxPushPopRange in nsys exports
DOMAIN_CREATE = 75

SCHEMA = """
CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE ENUM_NSYS_EVENT_TYPE (id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT);
CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL,
    rangeId INTEGER, category INTEGER, color INTEGER, text TEXT, globalTid INTEGER,
    endGlobalTid INTEGER, textId INTEGER, domainId INTEGER, uint64Value INTEGER,
    int64Value INTEGER, doubleValue REAL, uint32Value INTEGER, int32Value INTEGER,
    floatValue REAL, jsonTextId INTEGER, jsonText TEXT);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL,
    eventClass INTEGER NOT NULL, globalTid INTEGER, correlationId INTEGER, nameId INTEGER,
    returnValue INTEGER, callchainId INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL,
    deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, greenContextId INTEGER,
    streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
    demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL, mangledName INTEGER,
    launchType INTEGER, cacheConfig INTEGER, registersPerThread INTEGER NOT NULL,
    gridX INTEGER NOT NULL, gridY INTEGER NOT NULL, gridZ INTEGER NOT NULL,
    blockX INTEGER NOT NULL, blockY INTEGER NOT NULL, blockZ INTEGER NOT NULL,
    staticSharedMemory INTEGER NOT NULL, dynamicSharedMemory INTEGER NOT NULL,
    localMemoryPerThread INTEGER NOT NULL, localMemoryTotal INTEGER NOT NULL,
    gridId INTEGER NOT NULL, sharedMemoryExecuted INTEGER, graphNodeId INTEGER,
    sharedMemoryLimitConfig INTEGER);
CREATE TABLE CUDA_GRAPH_NODE_EVENTS (start INTEGER NOT NULL, end INTEGER NOT NULL,
    nameId INTEGER NOT NULL, globalTid INTEGER, correlationId INTEGER,
    graphNodeId INTEGER NOT NULL, originalGraphNodeId INTEGER);
"""

FMHA = "void fmhaSm90Kernel_QkvE4m3OBfloat16HQk576HV512HVPerCta512PagedKvSparse<...>"
XQA = "void tensorrt_llm::kernels::xqa_kernel_spec_dec<__nv_bfloat16, 4>(...)"
MQA = "void deep_gemm::sm90_fp8_paged_mqa_logits<64, 1>(...)"
GEMM = "nvjet_tst_128x256_64x4_2x1_v_bz_coopA_NNT"


class Export:
    """Builds an export: strings, NVTX ranges, and kernels launched at given host times."""

    def __init__(self, path: Path, name_column: str = "demangledName") -> None:
        self.path = path
        self.conn = sqlite3.connect(path)
        schema = SCHEMA if name_column == "demangledName" else SCHEMA.replace(
            "demangledName INTEGER NOT NULL, ", "")
        self.conn.executescript(schema)
        self.conn.executemany("INSERT INTO ENUM_NSYS_EVENT_TYPE VALUES (?, ?, ?)",
                              [(PUSH_POP, "NvtxPushPopRange", "NVTX PushPop Range"),
                               (DOMAIN_CREATE, "NvtxDomainCreate", "NVTX Domain Create")])
        self.strings: dict[str, int] = {}
        self.correlation = 0
        self.name_column = name_column
        self.instances: set[int] = set()

    def sid(self, text: str) -> int:
        if text not in self.strings:
            self.strings[text] = len(self.strings) + 1
            self.conn.execute("INSERT INTO StringIds VALUES (?, ?)", (self.strings[text], text))
        return self.strings[text]

    def nvtx(self, start: int, end: int, text: str, inline: bool = False) -> None:
        if inline:  # nsys stores some texts in the row itself
            self.conn.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text, domainId) "
                              "VALUES (?, ?, ?, ?, 0)", (start, end, PUSH_POP, text))
        else:
            self.conn.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, textId, domainId) "
                              "VALUES (?, ?, ?, ?, 0)", (start, end, PUSH_POP, self.sid(text)))

    def captured_node(self, node: int, start: int, end: int) -> None:
        """A graph node created by a launch captured at host time `start`..`end`."""
        self.conn.execute("INSERT INTO CUDA_GRAPH_NODE_EVENTS VALUES (?, ?, ?, 0, 0, ?, NULL)",
                          (start, end, self.sid("cudaGraphNodeCreate"), node))

    def kernel(self, launched: int, name: str, node: int | None = None) -> None:
        """A kernel launched at host time `launched`; with `node`, replayed from a graph
        node that was captured from node `node`."""
        self.correlation += 1
        if node is not None and node not in self.instances:
            # the instantiated graph's node (one row, whatever the replays) points back
            # to the node its capture created
            self.instances.add(node)
            self.conn.execute("INSERT INTO CUDA_GRAPH_NODE_EVENTS VALUES (?, ?, ?, 0, ?, ?, ?)",
                              (launched, launched + 1, self.sid("cudaGraphLaunch"),
                               self.correlation, 1000 + node, node))
        self.conn.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, eventClass, "
                          "correlationId, nameId) VALUES (?, ?, 1, ?, ?)",
                          (launched, launched + 2, self.correlation, self.sid("cudaLaunchKernel")))
        columns = ("start, end, deviceId, contextId, streamId, correlationId, shortName, "
                   "registersPerThread, gridX, gridY, gridZ, blockX, blockY, blockZ, "
                   "staticSharedMemory, dynamicSharedMemory, localMemoryPerThread, "
                   "localMemoryTotal, gridId, graphNodeId")
        values = [launched + 5, launched + 9, 0, 1, 7, self.correlation,
                  self.sid(name.split("<")[0]), 32, 1, 1, 1, 128, 1, 1, 0, 0, 0, 0, 1,
                  None if node is None else 1000 + node]
        if self.name_column == "demangledName":
            columns += ", demangledName"
            values.append(self.sid(name))
        marks = ", ".join("?" * len(values))
        self.conn.execute(f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL ({columns}) VALUES ({marks})",
                          values)

    def close(self) -> Path:
        self.conn.commit()
        self.conn.close()
        return self.path


def two_shapes(path: Path, name_column: str = "demangledName") -> Path:
    """GEN b=32 s=1 (XQA) and b=32 s=4 (spec-dec XQA), two timed iterations each."""
    ex = Export(path, name_column)
    ex.nvtx(0, 1, 'layer_wise_benchmarks args {"run_type": "GEN"}')
    ex.kernel(50, GEMM)  # before any iteration: not counted per shape
    ex.nvtx(90, 91, 'layer_wise_benchmarks problem_spec {"batch_size": 32}')
    for start in (100, 200):
        ex.nvtx(start, start + 90, "b=32 s=1 past=2049 NP8")
        ex.nvtx(start + 1, start + 80, "DeepseekV3DecoderLayer")  # a module range inside
        for offset, name in ((10, GEMM), (20, MQA), (30, FMHA), (40, GEMM)):
            ex.kernel(start + offset, name)
    for start in (300, 400):
        ex.nvtx(start, start + 90, "b=32 s=4 past=2049 NP8", inline=True)
        for offset, name in ((10, GEMM), (20, MQA), (30, XQA), (35, XQA)):
            ex.kernel(start + offset, name)
    return ex.close()


def test_kernels_by_shape_follow_the_iteration_ranges(tmp_path: Path) -> None:
    shapes = nsys.kernels_by_shape(two_shapes(tmp_path / "r.sqlite"))
    assert set(shapes) == {(32, 1, 2049), (32, 4, 2049)}
    gen = shapes[(32, 1, 2049)]
    assert len(gen.runs) == 2
    assert gen.per_iteration() == {FMHA: 1, GEMM: 2, MQA: 1}
    assert shapes[(32, 4, 2049)].per_iteration() == {GEMM: 1, MQA: 1, XQA: 2}


COPY = "void at::native::direct_copy_kernel_cuda<...>(...)"


def test_kernels_in_ignore_ranges_are_left_out_as_parse_py_does(tmp_path: Path) -> None:
    """upstream's calibrator wraps its bookkeeping in `layer_wise_benchmarks ignore`; eager
    launches inside it, and graph replays of launches captured inside it, are not kernels
    of the layer."""
    ex = Export(tmp_path / "r.sqlite")
    ex.nvtx(10, 20, "layer_wise_benchmarks ignore")  # during the graph capture
    ex.captured_node(1, 12, 14)  # the copy, captured inside the ignore range
    ex.captured_node(2, 30, 32)  # the GEMM, captured outside it
    ex.nvtx(90, 91, 'layer_wise_benchmarks problem_spec {"batch_size": 32}')
    for start in (100, 200):  # graph replays
        ex.nvtx(start, start + 90, "b=32 s=1 past=2049 NP8")
        ex.kernel(start + 10, COPY, node=1)
        ex.kernel(start + 10, GEMM, node=2)
    ex.nvtx(300, 390, "b=32 s=4 past=2049 NP8")  # eager
    ex.nvtx(305, 320, "layer_wise_benchmarks ignore")
    ex.kernel(310, COPY)
    ex.kernel(330, GEMM)
    shapes = nsys.kernels_by_shape(ex.close())
    assert shapes[(32, 1, 2049)].per_iteration() == {GEMM: 1}
    assert shapes[(32, 4, 2049)].per_iteration() == {GEMM: 1}


def test_short_names_when_the_export_has_no_demangled_names(tmp_path: Path) -> None:
    shapes = nsys.kernels_by_shape(two_shapes(tmp_path / "r.sqlite", name_column="shortName"))
    assert shapes[(32, 4, 2049)].per_iteration()["void deep_gemm::sm90_fp8_paged_mqa_logits"] == 1


def test_exports_without_kernels_or_nvtx(tmp_path: Path) -> None:
    path = tmp_path / "empty.sqlite"
    sqlite3.connect(path).execute("CREATE TABLE StringIds (id INTEGER, value TEXT)").connection \
        .close()
    assert nsys.kernels_by_shape(path) == {}
    with pytest.raises(InfrastructureError, match="no such nsys SQLite export"):
        nsys.kernels_by_shape(tmp_path / "absent.sqlite")


def fake_nsys(folder: Path, sqlite_source: Path) -> Path:
    """An `nsys` whose `export` copies a prepared SQLite file (argv recorded for the test)."""
    script = folder / "nsys"
    script.write_text(f"""#!/bin/sh
echo "$@" > "{folder}/argv.txt"
if [ "$1" = export ]; then
  out=""; prev=""
  for a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done
  cp "{sqlite_source}" "$out"
  exit 0
fi
exit 1
""")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def test_export_sqlite_runs_nsys_export_once(tmp_path: Path) -> None:
    source = two_shapes(tmp_path / "prepared.sqlite")
    exe = fake_nsys(tmp_path, source)
    report = tmp_path / "report_np8_rank0.nsys-rep"
    report.write_bytes(b"not really a report")
    out = nsys.export_sqlite(report, nsys=str(exe))
    assert out == tmp_path / "report_np8_rank0.sqlite"
    argv = (tmp_path / "argv.txt").read_text().split()
    assert argv == ["export", "--type", "sqlite", "-o", str(out), "--force-overwrite=true",
                    str(report)]
    (tmp_path / "argv.txt").unlink()
    os.utime(report, (1, 1))  # the export is newer than the report: reused, not redone
    assert nsys.export_sqlite(report, nsys=str(exe)) == out
    assert not (tmp_path / "argv.txt").exists()
    assert nsys.kernels_by_shape(out)[(32, 4, 2049)].per_iteration()[XQA] == 2


def test_export_failures_are_infrastructure_errors(tmp_path: Path, monkeypatch) -> None:
    report = tmp_path / "r.nsys-rep"
    report.write_bytes(b"x")
    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))
    with pytest.raises(InfrastructureError, match="nsys is not on PATH"):
        nsys.export_sqlite(report)
    broken = tmp_path / "nsys"
    broken.write_text("#!/bin/sh\necho 'Importer error: corrupt report' >&2\nexit 1\n")
    broken.chmod(0o755)
    with pytest.raises(InfrastructureError, match="corrupt report"):
        nsys.export_sqlite(report, nsys=str(broken))


def test_profile_argv_mirrors_upstream_run_sh(tmp_path: Path) -> None:
    argv = nsys.profile_argv(tmp_path / "report_rank0")
    assert argv[:4] == ["nsys", "profile", "-t", "cuda,nvtx"]
    for flag, value in (("-c", "cudaProfilerApi"), ("--capture-range-end", "stop"),
                        ("--cuda-graph-trace", "node"), ("-o", str(tmp_path / "report_rank0"))):
        assert argv[argv.index(flag) + 1] == value
