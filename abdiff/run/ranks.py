"""Per-rank record logs of one multi-rank worker launch, merged into one round log.

Each rank of a launch writes its own log (`protocol.rank_record_path`). A config
is done when every rank finished it; the merged record keeps each rank's record
in `RoundRecord.ranks` and summarises them:

- status: `ok` only when every rank is ok; otherwise the first failing rank's,
  its error prefixed with the rank;
- latency: per iteration, the slowest rank's time (as upstream's parse.py takes
  the slowest rank of its timeline: a tensor-parallel step ends when its last
  rank does);
- facts and kernels: rank 0's; a fact whose value differs between ranks is
  kept in `RoundRecord.rank_differences` and reported (`rank_notes`).

A rank that died leaves its config unfinished in its own log: the merged log's
`in_progress` names it even when another rank had moved on or was waiting.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from abdiff.run.protocol import RoundLog, rank_record_path, read_round_log
from abdiff.store.records import RoundRecord, RunFile, Status


def read_rank_logs(record_path: Path, ranks: int) -> list[RoundLog]:
    """The record log of every rank of one launch, rank 0 first (empty for a rank that
    wrote nothing)."""
    return [read_round_log(rank_record_path(record_path, r)) for r in range(ranks)]


def _same(values: list[Any]) -> bool:
    return len({json.dumps(v, sort_keys=True) for v in values}) <= 1


def merge_records(records: list[RoundRecord]) -> RoundRecord:
    """One config's records from every rank (rank order) -> the merged record."""
    first = records[0]
    failing = next(((r, rec) for r, rec in enumerate(records) if rec.status != "ok"), None)
    status: Status = "ok"
    error: str | None = None
    if failing is not None:
        rank, record = failing
        status, error = record.status, f"rank {rank}: {record.error or record.status}"
    latency: list[float] = []
    if status == "ok":
        latency = [max(times) for times in zip(*(r.latency_us for r in records), strict=False)]
    differences = {
        name: [r.facts.get(name) for r in records]
        for name in sorted({n for r in records for n in r.facts})
        if not _same([r.facts.get(name) for r in records])
    }
    return RoundRecord(status, error, latency, first.facts, first.kernels, first.round,
                       ranks=[asdict(r) for r in records], rank_differences=differences,
                       kernel_us=first.kernel_us, module_us=first.module_us)


def merge_rank_logs(logs: list[RoundLog]) -> RoundLog:
    """The round log of a multi-rank launch, as if one process had written it.

    Ranks run the configs in the same order, so the first config that some rank
    started and not every rank finished is where the launch broke: a rank that
    saw its peer die may have failed that config and the next ones on its own
    (a collective's connection error), and none of those count.
    """
    if len(logs) == 1:
        return logs[0]
    merged = RoundLog(env={**logs[0].env, "ranks": len(logs)})
    order = list(dict.fromkeys(cid for log in logs for cid in log.started))
    for cid in order:
        if not all(cid in log.done for log in logs):
            merged.started.append(cid)  # the crash site: last start, not done
            break
        merged.started.append(cid)
        merged.done[cid] = merge_records([log.done[cid] for log in logs])
    for log in logs:
        for cid, why in log.malformed.items():
            merged.malformed.setdefault(cid, why)
        for cid, facts in log.facts.items():
            merged.facts.setdefault(cid, facts)
    # kernels, order and phase are rank 0's, like facts (every rank runs the same order)
    merged.kernels = logs[0].kernels  # each a KernelProfile: counts and times
    merged.order = logs[0].order
    merged.phase = logs[0].phase
    return merged


def rank_notes(side: str, run: RunFile) -> list[str]:
    """What a report must say about the ranks of one side's run file."""
    ranks = run.env.get("ranks")
    if not isinstance(ranks, int) or ranks < 2:
        return []
    notes = [f"side {side} ran {ranks} ranks: per-iteration latency is the slowest rank's; "
             "facts and kernels are rank 0's"]
    for config in run.configs:
        # one note per config: the first round whose ranks disagreed
        record = next((r for r in config.rounds if r.rank_differences), None)
        if record is None or record.rank_differences is None:
            continue
        for name, values in record.rank_differences.items():
            per_rank = ", ".join(f"rank {r}: {json.dumps(v)}" for r, v in enumerate(values))
            notes.append(f"side {side}, {config.id}, round {record.round}: ranks disagree on "
                         f"{name} ({per_rank})")
    return notes
