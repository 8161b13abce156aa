"""Tests only: IR objects from the plain data that :func:`weir.ir.to_data` produces.

The conversion is driven by the IR's own type hints, so it follows the IR as it
evolves: mappings with camelCase keys become dataclasses, a ``type`` key picks
the member of a union of dataclasses, lists become tuples, enum values become
enums, and ``Literal`` values are checked. Unknown keys are errors, so a typo
in a test file cannot go unnoticed. Redacted secret material (placeholders
written by ``to_data``) is loaded as the placeholder text.
"""

from __future__ import annotations

import dataclasses
import enum
import types
from collections.abc import Mapping
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from weir import ir


def from_data(data: Mapping[str, Any]) -> ir.IR:
    """The :class:`weir.ir.IR` whose ``weir.ir.to_data`` is ``data``."""
    result = _convert(ir.IR, data, "ir")
    assert isinstance(result, ir.IR)
    return result


def _convert(tp: Any, value: Any, where: str) -> Any:
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        return _convert_union(get_args(tp), value, where)
    if origin is tuple:
        args = get_args(tp)
        _expect(isinstance(value, list), where, "a list")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_convert(args[0], v, f"{where}[{i}]") for i, v in enumerate(value))
        _expect(len(args) == len(value), where, f"{len(args)} items")
        return tuple(
            _convert(a, v, f"{where}[{i}]") for i, (a, v) in enumerate(zip(args, value, strict=True))
        )
    if origin is Literal:
        _expect(value in get_args(tp), where, f"one of {get_args(tp)}")
        return value
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp(value)
    if dataclasses.is_dataclass(tp):
        return _convert_dataclass(tp, value, where)
    if tp in (str, int, bool):
        _expect(type(value) is tp, where, tp.__name__)
        return value
    if tp is type(None):
        _expect(value is None, where, "null")
        return None
    raise TypeError(f"{where}: unsupported type {tp!r}")


def _convert_union(args: tuple[Any, ...], value: Any, where: str) -> Any:
    if value is None:
        _expect(type(None) in args, where, "a value")
        return None
    members = [a for a in args if a is not type(None)]
    if len(members) == 1:
        return _convert(members[0], value, where)
    _expect(isinstance(value, Mapping) and "type" in value, where, "a mapping with 'type'")
    by_name = {m.__name__: m for m in members}
    _expect(value["type"] in by_name, where, f"type in {sorted(by_name)}")
    return _convert(by_name[value["type"]], value, where)


def _convert_dataclass(tp: Any, value: Any, where: str) -> Any:
    _expect(isinstance(value, Mapping), where, "a mapping")
    hints = get_type_hints(tp)  # resolved in the module that defines tp (weir.ir.routing ...)
    keys = {_camel(f.name): f.name for f in dataclasses.fields(tp)}
    unknown = set(value) - set(keys) - {"type"}
    _expect(not unknown, where, f"no unknown keys (got {sorted(unknown)})")
    kwargs = {
        keys[key]: _convert(hints[keys[key]], item, f"{where}.{key}")
        for key, item in value.items()
        if key != "type"
    }
    return tp(**kwargs)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _expect(ok: bool, where: str, what: str) -> None:
    if not ok:
        raise ValueError(f"{where}: expected {what}")
