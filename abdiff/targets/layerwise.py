"""The layer-wise benchmark domain, declared once: run types, attention backends and the
shape keys a config is made of. The suites, both targets and the probe read these names.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import Annotated, Any, Literal, get_args

from abdiff.store.validate import Len, Min

RunType = Literal["GEN", "CTX"]
Backend = Literal["DSA", "TRTLLM"]
BACKENDS: tuple[str, ...] = get_args(Backend)
SHAPE_KEYS = ("batch_size", "seq_len_q", "seq_len_kv_cache")

Positive = Annotated[int, Min(1)]
NonNegative = Annotated[int, Min(0)]


@dataclass
class Matrix:
    """A suite's `matrix:`: each key one value or a list, expanded into configs in this
    field order, which is also the order of the parts of a config id."""

    run_type: Annotated[list[RunType], Len(1)] | RunType
    backend: Annotated[list[Backend], Len(1)] | Backend
    batch_size: Annotated[list[Positive], Len(1)] | Positive
    seq_len_q: Annotated[list[Positive], Len(1)] | Positive
    seq_len_kv_cache: Annotated[list[NonNegative], Len(1)] | NonNegative
    # the MoE routing's balance ratio (upstream's --balance-ratio): optional; two configs
    # that differ only by it have different ids and run in different processes (trtllm)
    balance_ratio: Annotated[list[float], Len(1)] | float | None = None


MATRIX_KEYS: tuple[str, ...] = tuple(f.name for f in fields(Matrix))
ID_PREFIX = MappingProxyType({"batch_size": "bs", "seq_len_q": "q", "seq_len_kv_cache": "kv",
                              "balance_ratio": "br"})


def config_id(params: dict[str, Any]) -> str:
    """Readable id such as GEN-TRTLLM-bs32-q4-kv2049."""
    return "-".join(f"{ID_PREFIX.get(key, '')}{params[key]}"
                    for key in MATRIX_KEYS if key in params)
