"""The probe that runs inside every rank of upstream's layer-wise benchmark.

upstream's `examples/layer_wise_benchmarks/run.py` is started unmodified. The
folder `site/` is put first on PYTHONPATH, so Python imports its
`sitecustomize.py` at start-up; that module activates the probe only when
ABDIFF_PROBE_JOB names a probe plan, and never imports tensorrt_llm itself.
The probe (runtime.py) then waits for `tensorrt_llm.tools.layer_wise_benchmarks`
to be imported by run.py and wraps `create_run_pack` on its runner classes.
"""

from __future__ import annotations

from pathlib import Path

SITE_DIR = Path(__file__).resolve().parent / "site"
PLAN_ENV = "ABDIFF_PROBE_JOB"
