"""nsys records beyond GEMMs: memcpy/memset activity (counts and bytes) in the kernel
record, and per-module GPU time from the NVTX ranges inside each iteration, attributed
in the report when latency moves.

The exports are built with the table layout of nsys's SQLite export (test_nsys.Export,
plus CUPTI_ACTIVITY_KIND_MEMCPY / _MEMSET with nsys's columns).
"""

from __future__ import annotations

from pathlib import Path

from test_nsys import FMHA, GEMM, Export

from abdiff.reports import table
from abdiff.store.records import ConfigRuns, RoundRecord, RunFile
from abdiff.targets.trtllm import nsys
from abdiff.verdict.compare import compare_runs

COPY_TABLES = """
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, end INTEGER NOT NULL,
    deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, greenContextId INTEGER,
    streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, bytes INTEGER NOT NULL,
    copyKind INTEGER NOT NULL, deprecatedSrcId INTEGER, srcKind INTEGER, dstKind INTEGER,
    srcDeviceId INTEGER, srcContextId INTEGER, dstDeviceId INTEGER, dstContextId INTEGER,
    migrationCause INTEGER, graphNodeId INTEGER, virtualAddress INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER NOT NULL, end INTEGER NOT NULL,
    deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, greenContextId INTEGER,
    streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, value INTEGER NOT NULL,
    bytes INTEGER NOT NULL, graphNodeId INTEGER, memKind INTEGER);
"""
DTOH, HTOD = 2, 1  # CUPTI_ActivityMemcpyKind


class CopyExport(Export):
    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.conn.executescript(COPY_TABLES)

    def _call(self, launched: int, api: str) -> int:
        self.correlation += 1
        self.conn.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, eventClass, "
                          "correlationId, nameId) VALUES (?, ?, 1, ?, ?)",
                          (launched, launched + 2, self.correlation, self.sid(api)))
        return self.correlation

    def memcpy(self, launched: int, kind: int, size: int) -> None:
        corr = self._call(launched, "cudaMemcpyAsync")
        self.conn.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY (start, end, deviceId, "
                          "contextId, streamId, correlationId, bytes, copyKind) VALUES "
                          "(?, ?, 0, 1, 7, ?, ?, ?)",
                          (launched + 3, launched + 7, corr, size, kind))

    def memset(self, launched: int, size: int) -> None:
        corr = self._call(launched, "cudaMemsetAsync")
        self.conn.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET (start, end, deviceId, "
                          "contextId, streamId, correlationId, value, bytes) VALUES "
                          "(?, ?, 0, 1, 7, ?, 0, ?)", (launched + 3, launched + 5, corr, size))


def step(path: Path, copy_per_step: bool) -> Path:
    """Two timed iterations of b=32 s=4; attention and MoE module ranges inside each; on B a
    device-to-host copy of 128 bytes per step in the MoE module."""
    ex = CopyExport(path)
    for start in (100, 300):
        ex.nvtx(start, start + 190, "b=32 s=4 past=2049 NP8")
        ex.nvtx(start + 1, start + 60, "Attention")
        ex.kernel(start + 10, FMHA)
        ex.memset(start + 20, 4096)
        ex.nvtx(start + 61, start + 180, "MoE")
        ex.kernel(start + 70, GEMM)
        ex.kernel(start + 90, GEMM)
        if copy_per_step:
            ex.memcpy(start + 110, DTOH, 128)
    ex.memcpy(50, HTOD, 1 << 20)  # before the timed loop: not an iteration's
    return ex.close()


def test_copies_and_fills_are_counted_with_their_bytes(tmp_path: Path) -> None:
    a = nsys.kernels_by_shape(step(tmp_path / "a.sqlite", False))[(32, 4, 2049)]
    b = nsys.kernels_by_shape(step(tmp_path / "b.sqlite", True))[(32, 4, 2049)]
    assert a.per_iteration() == {"[memset 4096 B]": 1, FMHA: 1, GEMM: 2}
    assert b.per_iteration() == {"[memcpy DtoH 128 B]": 1, "[memset 4096 B]": 1, FMHA: 1,
                                 GEMM: 2}
    assert len(b.runs) == 2 and all(r["[memcpy DtoH 128 B]"] == 1 for r in b.runs)


def test_module_time_is_the_gpu_time_of_its_kernels(tmp_path: Path) -> None:
    shape = nsys.kernels_by_shape(step(tmp_path / "b.sqlite", True))[(32, 4, 2049)]
    # Export's kernels take 4 ns, the memset 2 ns, the memcpy 4 ns
    assert shape.module_us() == {"Attention": 0.006, "MoE": 0.012}
    assert shape.kernel_us()["[memcpy DtoH 128 B]"] == 0.004


def run_file(rev: str, path: Path, latency: float) -> RunFile:
    shape = nsys.kernels_by_shape(path)[(32, 4, 2049)]
    params = {"run_type": "GEN", "backend": "TRTLLM", "batch_size": 32, "seq_len_q": 4,
              "seq_len_kv_cache": 2049}
    rounds = [RoundRecord("ok", latency_us=[latency + (i + r) % 2 for i in range(20)], round=r,
                          kernels=shape.per_iteration(), kernel_us=shape.kernel_us(),
                          module_us=shape.module_us()) for r in range(8)]
    return RunFile(rev, rev * 4, "trtllm", "mtp", {"device": "cuda"},
                   [ConfigRuns("GEN-TRTLLM-bs32-q4-kv2049", params, rounds)])


def test_an_added_copy_is_a_kernel_change_attributed_to_its_module(tmp_path: Path) -> None:
    a = run_file("main", step(tmp_path / "a.sqlite", False), 100.0)
    b = run_file("pr", step(tmp_path / "b.sqlite", True), 120.0)
    result = compare_runs(a, b, {})
    config = result.configs[0]
    assert config.kernels_added == {"[memcpy DtoH 128 B]": 1} and not config.kernels_removed
    assert config.verdict == "unintended"
    assert [(d.kernel, d.delta_us) for d in config.module_deltas] == [("MoE", 0.004)]
    report = table.render(result, width=160, colour=False)
    assert "+[memcpy DtoH 128 B]" in report
    assert "µs in module MoE" in report
