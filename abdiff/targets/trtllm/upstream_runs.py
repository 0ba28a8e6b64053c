"""Upstream's own run outputs as a side: `abdiff compare UPSTREAM_RUN_DIR RUNFILE`.

Users of upstream's layer-wise benchmark keep, per run, run.py's output (its `print(args)`
line and one timing line per shape and rank:
`[RANK 0]  batch_size 32  seq_len_q 4  seq_len_kv_cache 2049  min .. max .. mean ..
median ..  P90 ..  (us)`) and, under run.sh, the nsys reports parse.py reads
(`report_np<N>_rank<R>.nsys-rep`, or its `.sqlite` export). A folder of such outputs is
read as a run file:

- each `*.log` / `*.txt` file holding timing lines is one round (one run.py process);
  a config's round latency is the slowest rank's median (mean where an older run.py
  prints no median), as abdiff's rank merge takes the slowest rank;
- run type and model come from the args line, the backend from the model's name (DSA
  for DeepSeek-V3.2/V4) as for upstream config files; a balance ratio is part of the id;
- where rank 0's report (SQLite export, or `.nsys-rep` with nsys on PATH) is in the
  folder, each config's kernels, copies, kernel and module times come from it, the way
  abdiff reads its own nsys runs (nsys.py); the one profile stands for every round.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from abdiff.errors import InputError
from abdiff.store.records import ConfigRuns, RoundRecord, RunFile
from abdiff.targets.layerwise import config_id
from abdiff.targets.trtllm import nsys
from abdiff.targets.trtllm.upstream_config import DSA_MODEL

TIMING = re.compile(
    r"\[RANK (?P<rank>\d+)\]\s+batch_size (?P<bs>\d+)\s+seq_len_q (?P<q>\d+)\s+"
    r"seq_len_kv_cache (?P<kv>\d+)(?:\s+balance_ratio (?P<br>[\d.]+))?"
    r"(?:\s+min [\d.]+\s+max [\d.]+)?\s+mean (?P<mean>[\d.]+)(?:\s+median (?P<median>[\d.]+))?")
RUN_TYPE = re.compile(r"run_type='(CTX|GEN)'")
MODEL = re.compile(r"\bmodel='([^']*)'")
LOG_SUFFIXES = (".log", ".txt")


@dataclass
class _Config:
    params: dict[str, Any]
    rounds: list[RoundRecord] = field(default_factory=list)


def _params(text: str, match: re.Match[str], where: Path) -> dict[str, Any]:
    run_type = RUN_TYPE.search(text)
    if run_type is None:
        raise InputError(f"{where}: run.py's args line (run_type='GEN' or 'CTX') is missing; "
                         "keep run.py's whole output in the log")
    model = MODEL.search(text)
    backend = "DSA" if model and DSA_MODEL.search(model[1]) else "TRTLLM"
    params: dict[str, Any] = {"run_type": run_type[1], "backend": backend,
                              "batch_size": int(match["bs"]), "seq_len_q": int(match["q"]),
                              "seq_len_kv_cache": int(match["kv"])}
    if match["br"] is not None:
        params["balance_ratio"] = float(match["br"])
    return params


def _profile(folder: Path) -> dict[tuple[int, int, int], nsys.ShapeKernels]:
    """Kernels per shape from rank 0's report in the folder, if there is one."""
    exports = sorted(folder.glob("report_np*_rank0.sqlite"))
    if exports:
        return nsys.kernels_by_shape(exports[0])
    reports = sorted(folder.glob("report_np*_rank0.nsys-rep"))
    return nsys.kernels_by_shape(nsys.export_sqlite(reports[0])) if reports else {}


def import_run_dir(folder: Path) -> RunFile:
    folder = Path(folder)
    logs = sorted(p for p in folder.iterdir() if p.suffix in LOG_SUFFIXES and p.is_file())
    configs: dict[str, _Config] = {}
    shapes = _profile(folder)
    for number, log in enumerate(logs):
        text = log.read_text(encoding="utf-8", errors="replace")
        slowest: dict[str, float] = {}
        for match in TIMING.finditer(text):
            params = _params(text, match, log)
            cid = config_id(params)
            configs.setdefault(cid, _Config(params))
            value = float(match["median"] or match["mean"])
            slowest[cid] = max(slowest.get(cid, 0.0), value)
        for cid, latency in slowest.items():
            config = configs[cid]
            shape = shapes.get((config.params["batch_size"], config.params["seq_len_q"],
                                config.params["seq_len_kv_cache"]))
            config.rounds.append(RoundRecord(
                "ok", latency_us=[latency], round=number,
                kernels=shape.per_iteration() if shape else {},
                kernel_us=shape.kernel_us() if shape else {},
                module_us=shape.module_us() if shape else {}))
    if not configs:
        raise InputError(f"{folder}: cannot read run file: a folder with no run.py timing "
                         f"lines ([RANK 0] batch_size ...) in a {' or '.join(LOG_SUFFIXES)} "
                         "file; give a run file, or save run.py's output there")
    return RunFile(rev=f"upstream:{folder.name}", sha="", target="trtllm", suite=folder.name,
                   env={"source": f"upstream run.py outputs in {folder}",
                        "timing": "run.py's CUDA events (median per round)"},
                   configs=[ConfigRuns(cid, c.params, c.rounds) for cid, c in configs.items()])
