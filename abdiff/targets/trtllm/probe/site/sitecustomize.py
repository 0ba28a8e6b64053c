"""Start-up hook of abdiff's TensorRT-LLM probe (this folder is first on PYTHONPATH).

Does nothing unless ABDIFF_PROBE_JOB is set, so a stray PYTHONPATH cannot
change an unrelated Python process. A sitecustomize that this one shadows
(the environment's own) is still run afterwards.
"""

import os
import sys


def _chain() -> None:
    """Run the next sitecustomize on sys.path, the one this file hides."""
    import importlib.machinery
    import importlib.util

    here = os.path.realpath(os.path.dirname(__file__))
    others = [p for p in sys.path if os.path.realpath(p or os.getcwd()) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


if os.environ.get("ABDIFF_PROBE_JOB"):
    try:
        from abdiff.targets.trtllm.probe.runtime import activate

        activate()
    except Exception as exc:  # noqa: BLE001 - site.py would swallow it and run unprobed
        print(f"abdiff probe could not start: {type(exc).__name__}: {exc}", file=sys.stderr)
        os._exit(1)
_chain()
