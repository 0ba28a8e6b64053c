"""`--configs path/to/config_gen.yaml`: upstream's own run.py config, read as a suite.

Users of upstream's layer-wise benchmark already have YAML files in the
shape of examples/layer_wise_benchmarks/config_gen.yaml / config_ctx.yaml:
flat run.py options (`model`, `run_type`, `batch_size`, `seq_len_q`,
`seq_len_kv_cache`, `moe_backend`, `use_cuda_graph`, ...), each a value or a
list. `translate` turns one into the data of an abdiff suite:

- run_type and the three shapes become the matrix (a value is a one-value list);
- the model becomes `target.models` for its backend, which is DSA when the
  model name is a DeepSeek-V3.2/V4 one and TRTLLM otherwise (the probe checks
  at run time that the model really builds that metadata);
- warmup_times / run_times become the suite's;
- every other key with a value becomes a run.py option in `target.options`
  (run.py of each checkout validates it, as it would validate the YAML);
- balance_ratio (a value or a list) becomes a matrix axis, part of each
  config's id (`...-br0.8`), as run.py's product runs every ratio;
- keys that are null (run.py's default applies) are ignored, and named in
  the note that the loader prints.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from abdiff.errors import InputError

SHAPES = ("batch_size", "seq_len_q", "seq_len_kv_cache")
COUNTS = ("warmup_times", "run_times")
DSA_MODEL = re.compile(r"V3\.2|V3_2|V4", re.IGNORECASE)
FACTS = ("attn_metadata.max_draft_tokens", "attn_metadata.max_total_draft_tokens",
         "attn_metadata.is_spec_decoding_enabled", "attn_metadata.kv_lens_cuda_2d.shape")


def is_upstream_config(data: Any) -> bool:
    """A run.py YAML rather than a suite: flat, with a run type and shapes, no matrix."""
    return (isinstance(data, dict) and "matrix" not in data and "run_type" in data
            and any(k in data for k in SHAPES))


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]


def translate(data: dict[str, Any], path: Path) -> tuple[dict[str, Any], str]:
    """(suite data, a one-line note saying what was translated and which keys were ignored)."""
    ignored: list[str] = []
    options: dict[str, Any] = {}
    suite: dict[str, Any] = {"facts": list(FACTS)}
    model = data.get("model")
    backend = "DSA" if isinstance(model, str) and DSA_MODEL.search(model) else "TRTLLM"
    matrix: dict[str, Any] = {"run_type": _as_list(data["run_type"]), "backend": [backend]}
    for key, value in data.items():
        if key in ("run_type", "model"):
            continue
        if value is None:
            ignored.append(f"{key} (null: run.py's default)")
        elif key in SHAPES:
            matrix[key] = _as_list(value)
        elif key in COUNTS:
            suite[key] = value
        elif key == "balance_ratio":  # an axis: run.py's product runs every ratio
            matrix[key] = _as_list(value)
        else:
            options[key] = value
    missing = [k for k in SHAPES if k not in matrix]
    if missing:
        raise InputError(f"{path}: upstream's run.py config without {', '.join(missing)}; "
                         "give every shape a value or a list")
    target: dict[str, Any] = {"options": options}
    if isinstance(model, str):
        target["models"] = {backend: model}
    suite.update(description=f"upstream's {path.name} ({backend} attention)", matrix=matrix,
                 target=target)
    why = f"backend {backend} from the model name {model!r}" if model else "backend TRTLLM"
    note = (f"{path}: upstream's run.py config, translated into a suite ({why}); ignored: "
            f"{', '.join(ignored) or 'nothing'}")
    return suite, note

