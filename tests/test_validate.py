"""validate: one type-hint-driven decoder for every document abdiff reads, and the JSON
Schema files generated from the same dataclasses."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import pytest

from abdiff.errors import InputError
from abdiff.store.validate import Len, Min, from_json

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Inner:
    kind: Literal["a", "b"]
    weight: Annotated[float, Min(0, exclusive=True)] = 1.0


@dataclass
class Outer:
    name: str
    inner: Inner
    items: Annotated[list[int], Len(1)] = field(default_factory=lambda: [0])
    pair: Annotated[list[Any], Len(2, 2)] | None = None
    table: dict[str, list[str] | str] = field(default_factory=dict)
    flag: bool = False


def test_decodes_nested_dataclasses_and_ignores_unknown_keys() -> None:
    data = {"name": "x", "inner": {"kind": "b", "weight": 2}, "items": [1, 2],
            "pair": [None, 3], "table": {"k": "v", "l": ["w"]}, "flag": True, "later": 1}
    assert from_json(Outer, data, "f.json") == Outer(
        "x", Inner("b", 2.0), [1, 2], [None, 3], {"k": "v", "l": ["w"]}, True)
    assert from_json(Outer, {"name": "x", "inner": {"kind": "a"}}, "f.json") == Outer(
        "x", Inner("a"))


@pytest.mark.parametrize(("data", "message"), [
    ([], "f.json: the document must be an object, got list"),
    ({"inner": {"kind": "a"}}, "f.json: the document is missing field 'name'"),
    ({"name": 1, "inner": {}}, "f.json: name must be str, got int"),
    ({"name": "x", "inner": {"kind": "c"}}, "f.json: inner.kind must be one of 'a', 'b', got 'c'"),
    ({"name": "x", "inner": {"kind": "a", "weight": 0}}, "f.json: inner.weight must be > 0, got 0"),
    ({"name": "x", "inner": {"kind": "a", "weight": True}},
     "f.json: inner.weight must be float, got bool"),
    ({"name": "x", "inner": {"kind": "a", "weight": 10**400}},
     "f.json: inner.weight must be a finite number"),
    ({"name": "x", "inner": {"kind": "a"}, "items": []},
     "f.json: items must have at least 1 item, got []"),
    ({"name": "x", "inner": {"kind": "a"}, "items": [1, "2"]}, "f.json: items[1] must be int"),
    ({"name": "x", "inner": {"kind": "a"}, "pair": [1]},
     "f.json: pair must have exactly 2 items, got [1]"),
    ({"name": "x", "inner": {"kind": "a"}, "table": {"k": 3}},
     "f.json: table.k must be a list or str, got int"),
    ({"name": "x", "inner": {"kind": "a"}, "flag": "yes"}, "f.json: flag must be bool, got str"),
])
def test_errors_are_one_line_naming_the_json_path(data: Any, message: str) -> None:
    with pytest.raises(InputError) as info:
        from_json(Outer, data, "f.json")
    assert str(info.value).startswith(message), str(info.value)
    assert "\n" not in str(info.value)


def test_reject_unknown_keys_names_the_allowed_ones() -> None:
    with pytest.raises(InputError, match=r"^f.yaml: inner has unknown key 'colour'; "
                                         r"allowed: kind, weight$"):
        from_json(Outer, {"name": "x", "inner": {"kind": "a", "colour": 1}}, "f.yaml",
                  reject_unknown=True)


def test_committed_json_schemas_match_the_dataclasses() -> None:
    """docs/schemas/*.json are generated (scripts/make_schemas.py); a field added to a
    dataclass without regenerating them fails here."""
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_schemas.py"), "--check"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert {p.name for p in (ROOT / "docs" / "schemas").glob("*.json")} == {
        "run.json", "result.json", "suite.json"}
