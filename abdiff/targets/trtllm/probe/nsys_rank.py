"""`python -m abdiff.targets.trtllm.probe.nsys_rank -- COMMAND...`: one rank under `nsys profile`.

Used when the suite's target block says `nsys: true`. The launcher starts this
wrapper on every rank; it runs COMMAND (upstream's run.py) under `nsys profile`
with upstream's run.sh options, writing `<report>_np<N>_rank<R>.nsys-rep`, the name
upstream's parse.py reads (`python3 parse.py --profile-dir <work>/nsys --world-size N`). The probe
in the child writes its `done` lines to a side file instead of the record log;
after the child has exited, rank 0 exports its report to SQLite, replaces each
record's kernels with the kernels nsys saw in that shape's last timed
iteration (abdiff/targets/trtllm/nsys.py), and appends the records to the log. `start` and
`facts` lines go to the log directly, so a crash is still attributed.

The wrapper exits as the child did: a rank killed by a signal kills the
wrapper with the same signal, so the launcher sees an abort, not a failure.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from abdiff.targets.trtllm.probe import PLAN_ENV
from abdiff.targets.trtllm.probe.runtime import ProbePlan, rank_from_env


def _patched_records(plan: ProbePlan, report: Path) -> list[tuple[str, dict]]:
    """The pending done records, with nsys kernels where the report has the shape."""
    pending = Path(plan.nsys_pending or "")
    if not pending.is_file():
        return []
    records = []
    for line in pending.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(event, dict) and event.get("event") == "done":
            records.append((str(event.get("id")), dict(event.get("record") or {})))
    shapes: dict = {}
    if report.is_file():
        from abdiff.targets.trtllm import nsys

        try:
            shapes = nsys.kernels_by_shape(nsys.export_sqlite(report))
        except Exception as exc:  # noqa: BLE001 - keep the records; say why kernels are missing
            print(f"abdiff nsys: {exc}", file=sys.stderr)
    keys = {c["id"]: (c["batch_size"], c["seq_len_q"], c["seq_len_kv_cache"])
            for c in plan.configs}
    for cid, record in records:
        shape = shapes.get(tuple(int(v) for v in keys.get(cid, ())))
        if record.get("status") == "ok" and shape is not None:
            record["kernels"] = shape.per_iteration()  # copies and fills included
            record["kernel_us"] = shape.kernel_us()  # GPU times, for the root cause
            record["module_us"] = shape.module_us()
    return records


def _exit_like(returncode: int) -> None:
    """Leave with the child's status; a signal death is re-raised on this process."""
    sig = -returncode if returncode < 0 else (returncode - 128 if returncode > 128 else 0)
    if sig:
        try:
            signal.signal(sig, signal.SIG_DFL)
            os.kill(os.getpid(), sig)
        except (ValueError, OSError):
            pass
    sys.exit(returncode if 0 <= returncode < 256 else 1)


def main(argv: list[str]) -> None:
    if "--" in argv:
        argv = argv[argv.index("--") + 1:]
    if not argv:
        sys.exit("usage: python -m abdiff.targets.trtllm.probe.nsys_rank -- COMMAND...")
    plan = ProbePlan.read(os.environ[PLAN_ENV])
    rank = rank_from_env()
    from abdiff.targets.trtllm import nsys

    base = Path(plan.nsys_report or "report")
    # upstream's name: `parse.py --profile-dir <folder> --world-size N --rank R` reads it
    output = base.with_name(f"{base.name}_np{plan.world_size}_rank{rank}")
    output.parent.mkdir(parents=True, exist_ok=True)
    child = subprocess.Popen([*nsys.profile_argv(output), *argv])
    signal.signal(signal.SIGTERM, lambda *_: child.send_signal(signal.SIGTERM))
    returncode = child.wait()
    if rank == 0:
        from abdiff.run.protocol import RecordWriter
        from abdiff.store.records import parse_round

        writer = RecordWriter(Path(plan.record_path))
        for cid, record in _patched_records(plan, output.with_suffix(".nsys-rep")):
            writer.done(cid, parse_round(record, f"record of {cid}"))
        writer.close()
    _exit_like(returncode)


if __name__ == "__main__":
    main(sys.argv[1:])
