"""Decode JSON/YAML data into the typed dataclasses of records.py and suites/, driven by
their type hints alone.

One small validator in the standard library (the trusted PR-comment job imports only
the standard library, docs/ci.md), so a new optional field needs a default and no
validator code. It knows dataclasses, Literal, list, dict, Optional and other unions,
int, float, str, bool, Any, and two constraints written with `Annotated`: `Min` and
`Len`. Every problem is one InputError naming the file and the JSON path.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from functools import cache
from typing import Annotated, Any, Literal, TypeVar, Union

from abdiff.errors import InputError

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Min:
    """A number at least `value` (greater than it when `exclusive`)."""

    value: float
    exclusive: bool = False

    def check(self, value: Any) -> str | None:
        low = value <= self.value if self.exclusive else value < self.value
        return f"must be {'>' if self.exclusive else '>='} {self.value:g}" if low else None

    def __get_pydantic_json_schema__(self, core_schema: Any, handler: Any) -> dict:
        # read by scripts/schemas.py only; pydantic is not imported here
        schema = handler(core_schema)
        schema["exclusiveMinimum" if self.exclusive else "minimum"] = self.value
        return schema


@dataclasses.dataclass(frozen=True)
class Len:
    """A list with `low` to `high` items (high None: no upper limit)."""

    low: int
    high: int | None = None

    def check(self, value: Any) -> str | None:
        if len(value) >= self.low and (self.high is None or len(value) <= self.high):
            return None
        if self.high == self.low:
            return f"must have exactly {self.low} items"
        return f"must have at least {self.low} item{'s' if self.low != 1 else ''}"

    def __get_pydantic_json_schema__(self, core_schema: Any, handler: Any) -> dict:
        schema = handler(core_schema)
        schema["minItems"] = self.low
        if self.high is not None:
            schema["maxItems"] = self.high
        return schema


def from_json(cls: type[T], data: Any, where: str, *, reject_unknown: bool = False) -> T:
    """`data` as an instance of the dataclass `cls`, or InputError('{where}: {path} ...').

    Unknown keys are ignored (a newer abdiff may add fields) unless `reject_unknown`,
    for hand-written files where an unknown key is a typo.
    """
    return _Decoder(where, reject_unknown).decode(cls, data, "")


def json_type_name(value: Any) -> str:
    """The JSON name of a decoded value's type, as an error message shows it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    names = {int: "int", float: "float", str: "str", list: "list", dict: "object"}
    return next((name for kind, name in names.items() if isinstance(value, kind)),
                type(value).__name__)


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls, include_extras=True)


@cache
def _parts(hint: Any) -> tuple[Any, tuple[Any, ...]]:
    """(origin, args) of a type hint; cached, because typing's look-ups dominate a decode."""
    return typing.get_origin(hint), typing.get_args(hint)


def _describe(hint: Any) -> str:
    """What a type hint accepts, in words for an error message."""
    origin = typing.get_origin(hint)
    if origin is Annotated:
        return _describe(typing.get_args(hint)[0])
    if origin is Literal:
        return "one of " + ", ".join(repr(v) for v in typing.get_args(hint))
    if origin in (Union, types.UnionType):
        return " or ".join(_describe(arg) for arg in typing.get_args(hint))
    if origin is list or hint is list:
        return "a list"
    if origin is dict or hint is dict or dataclasses.is_dataclass(hint):
        return "an object"
    if hint is type(None):
        return "null"
    return getattr(hint, "__name__", str(hint))


class _Decoder:
    def __init__(self, where: str, reject_unknown: bool) -> None:
        self.where = where
        self.reject_unknown = reject_unknown

    def fail(self, path: str, problem: str) -> InputError:
        return InputError(f"{self.where}: {path or 'the document'} {problem}")

    def mismatch(self, path: str, hint: Any, value: Any) -> InputError:
        return self.fail(path, f"must be {_describe(hint)}, got {json_type_name(value)}")

    def decode(self, hint: Any, value: Any, path: str) -> Any:
        origin, args = _parts(hint)
        if origin is Annotated:
            inner, *constraints = args
            decoded = self.decode(inner, value, path)
            for constraint in constraints:
                problem = constraint.check(decoded)
                if problem:
                    raise self.fail(path, f"{problem}, got {value!r}")
            return decoded
        if hint is Any:
            return value
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            return self.dataclass(hint, value, path)
        if origin is Literal:
            if any(type(value) is type(v) and value == v for v in args):
                return value
            raise self.fail(path, f"must be {_describe(hint)}, got {value!r}")
        if origin in (Union, types.UnionType):
            return self.union(hint, value, path)
        if origin is list:
            if not isinstance(value, list):
                raise self.mismatch(path, hint, value)
            (item,) = args
            return [self.decode(item, v, f"{path}[{i}]") for i, v in enumerate(value)]
        if origin is dict:
            if not isinstance(value, dict):
                raise self.mismatch(path, hint, value)
            _, item = args
            return {str(k): self.decode(item, v, _join(path, str(k))) for k, v in value.items()}
        return self.scalar(hint, value, path)

    def union(self, hint: Any, value: Any, path: str) -> Any:
        _, options = _parts(hint)
        if value is None and type(None) in options:
            return None
        # the first option whose JSON kind matches decides, so its error names the real fault
        for option in options:
            if _kind_matches(option, value):
                return self.decode(option, value, path)
        raise self.mismatch(path, hint, value)

    def scalar(self, hint: Any, value: Any, path: str) -> Any:
        if hint is bool and isinstance(value, bool):
            return value
        if isinstance(value, bool):
            raise self.mismatch(path, hint, value)
        if hint is int and isinstance(value, int) or hint is str and isinstance(value, str):
            return value
        if hint is float and isinstance(value, int | float):
            try:
                number = float(value)
            except OverflowError:
                number = math.inf
            if not math.isfinite(number):
                raise self.fail(path, f"must be a finite number, got {value!r}")
            return number
        if hint in (list, dict) and isinstance(value, hint):
            return value
        raise self.mismatch(path, hint, value)

    def dataclass(self, cls: type, value: Any, path: str) -> Any:
        if not isinstance(value, dict):
            raise self.mismatch(path, cls, value)
        hints = _hints(cls)
        fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
        if self.reject_unknown:
            for key in value:
                if key not in fields:
                    raise self.fail(path, f"has unknown key {key!r}; allowed: {', '.join(fields)}")
        kwargs = {}
        for name, spec in fields.items():
            if name in value:
                kwargs[name] = self.decode(hints[name], value[name], _join(path, name))
            elif (spec.default is dataclasses.MISSING
                  and spec.default_factory is dataclasses.MISSING):
                raise self.fail(path, f"is missing field '{name}'")
        return cls(**kwargs)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _kind_matches(hint: Any, value: Any) -> bool:
    """Whether `value` is of the JSON kind `hint` describes (list, object, number, ...)."""
    origin, args = _parts(hint)
    if origin is Annotated:
        return _kind_matches(args[0], value)
    if hint is Any:
        return True
    if origin is Literal:  # by kind, so that a wrong word gets the Literal's own message
        return any(type(value) is type(allowed) for allowed in args)
    if origin in (Union, types.UnionType):
        return any(_kind_matches(arg, value) for arg in args)
    if origin is list or hint is list:
        return isinstance(value, list)
    if origin is dict or hint is dict or dataclasses.is_dataclass(hint):
        return isinstance(value, dict)
    if isinstance(value, bool):
        return hint is bool
    if hint is float:
        return isinstance(value, int | float)
    return isinstance(value, hint) if isinstance(hint, type) else False
