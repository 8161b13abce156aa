"""Pydantic validation errors → the API server's words.

:func:`api_errors` turns the :class:`pydantic.ValidationError` raised while
validating a resource model into ``(field path, message)`` pairs: the path in
Kubernetes notation (``spec.rules[0].backendRefs[1].port``, found by walking
the model's types, so union member tags and validator names do not show) and
the message as ``kubectl`` would print it (``Required value``,
``Invalid value: 0: should be greater than or equal to 1``, ...). Errors that
only follow from others (a list too short because its items failed) are
dropped, the failed branches of a union give one message, and duplicates are
removed; order follows pydantic's. :func:`show_value` renders a value as
those messages do.
"""

from __future__ import annotations

import json
import re
import types
import typing
from collections import abc
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

__all__ = ["api_errors", "show_value"]


_JSON_TYPES: tuple[tuple[type, str], ...] = (
    (bool, "boolean"),
    (int, "integer"),
    (float, "number"),
    (str, "string"),
    (dict, "object"),
    (list, "array"),
    (tuple, "array"),
)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    for typ, name in _JSON_TYPES:
        if isinstance(value, typ):
            return name
    return type(value).__name__


def show_value(value: Any) -> str:
    """A value as the API server shows it in ``Invalid value: ...``."""
    if isinstance(value, dict):
        return '"object"'
    if isinstance(value, list | tuple):
        return '"array"'
    if isinstance(value, str) and len(value) > 100:
        value = value[:100] + "..."
    if isinstance(value, int) and value.bit_length() > 1000:  # no decimal string past 4,300 digits
        return f'"an integer of {value.bit_length()} bits"'
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return json.dumps(str(value), ensure_ascii=False)


_LENGTH_ERRORS = frozenset({"too_short", "too_long"})
_TYPE_NAMES = {
    "string_type": "string",
    "string_unicode": "string",
    "int_type": "integer",
    "int_parsing": "integer",
    "int_from_float": "integer",
    "int_parsing_size": "integer",
    "float_type": "number",
    "float_parsing": "number",
    "bool_type": "boolean",
    "bool_parsing": "boolean",
    "dict_type": "object",
    "model_type": "object",
    "model_attributes_type": "object",
    "dataclass_type": "object",
    "list_type": "array",
    "tuple_type": "array",
    "set_type": "array",
    "frozen_set_type": "array",
}
_QUOTED = re.compile(r"'((?:[^'\\]|\\.)*)'")


@dataclass(frozen=True, slots=True)
class _Located:
    path: str
    loc: tuple[int | str, ...]
    via_union: bool
    is_field: bool  # the last step named a model field (not a list item or a map value)


def _strip(tp: Any) -> Any:
    """``Annotated[X, ...]`` → X; ``X | None`` → X."""
    while True:
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            tp = typing.get_args(tp)[0]
            continue
        if origin is typing.Union or origin is types.UnionType:
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            if len(args) == 1:
                tp = args[0]
                continue
        return tp


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


@cache
def _fields_by_alias(model: type[BaseModel]) -> dict[str, Any]:
    return {(info.alias or name): info.annotation for name, info in model.model_fields.items()}


def _union_members(tp: Any) -> list[Any]:
    origin = typing.get_origin(tp)
    if origin is typing.Union or origin is types.UnionType:
        return [_strip(a) for a in typing.get_args(tp) if a is not type(None)]
    return []


def _tag_of(tp: Any) -> str:
    tp = _strip(tp)
    if typing.get_origin(tp) is Literal:
        return "literal[" + ",".join(repr(a) for a in typing.get_args(tp)) + "]"
    return getattr(tp, "__name__", repr(tp))


def _locate(model: type[BaseModel], loc: tuple[int | str, ...]) -> _Located:
    """Render pydantic's ``loc`` as a Kubernetes field path, walking the model's types."""
    out: list[str] = []
    tp: Any = model
    api_version = str(getattr(model, "API_VERSION", ""))
    native = api_version == "v1" or api_version.startswith("discovery.k8s.io/") or loc[:1] == ("metadata",)
    via_union = False
    is_field = False
    for part in loc:
        tp = _strip(tp)
        members = _union_members(tp)
        if members and isinstance(part, str):
            owner = next((m for m in members if _is_model(m) and part in _fields_by_alias(m)), None)
            if owner is None:
                # A union member tag ('int', 'str', 'LabelSelector', ...): not part of the path.
                via_union = True
                tp = next((m for m in members if _tag_of(m) == part), Any)
                continue
            tp = owner
        if isinstance(part, int):
            out.append(f"[{part}]")
            args = typing.get_args(tp)
            if typing.get_origin(tp) is tuple and args and (len(args) != 2 or args[1] is not ...):
                tp = args[part] if part < len(args) else Any
            else:
                tp = args[0] if args else Any
            is_field = False
            continue
        origin = typing.get_origin(tp)
        if _is_model(tp):
            fields = _fields_by_alias(tp)
            if part in fields:
                out.append(f".{part}")
                tp = fields[part]
                is_field = True
                continue
            if part.startswith("function-") or "[" in part:
                continue  # a validator's name, not a field
            out.append(f".{part}")
            tp = Any
            is_field = True
            continue
        if origin is dict or tp is dict or origin is abc.Mapping:
            args = typing.get_args(tp)
            # A map value: ``data[key]`` in Kubernetes' own kinds; ``labels.key`` in a custom
            # resource, whose schema validation joins the path with dots (kube-apiserver v1.32).
            out.append(f"[{part}]" if native else f".{part}")
            tp = args[1] if len(args) == 2 else Any
            is_field = False
            continue
        if part == "[key]":
            continue
        out.append(f".{part}")
        tp = Any
        is_field = True
    path = "".join(out)
    return _Located(path[1:] if path.startswith(".") else path, loc, via_union, is_field)


def _message(err: Any, located: _Located) -> str:
    kind: str = err["type"]
    ctx: dict[str, Any] = err.get("ctx") or {}
    value = err.get("input")
    if kind == "missing":
        return "Required value"
    if kind in ("literal_error", "enum"):
        expected = _QUOTED.findall(str(ctx.get("expected", "")))
        if not expected:  # integer enums (e.g. a redirect's statusCode): "301, 302 or 303"
            expected = [e for e in re.split(r", | or ", str(ctx.get("expected", ""))) if e]
        supported = ", ".join(json.dumps(e) for e in expected)
        return f"Unsupported value: {show_value(value)}: supported values: {supported}"
    if kind == "greater_than_equal":
        return f"Invalid value: {show_value(value)}: should be greater than or equal to {ctx.get('ge')}"
    if kind == "greater_than":
        return f"Invalid value: {show_value(value)}: should be greater than {ctx.get('gt')}"
    if kind == "less_than_equal":
        return f"Invalid value: {show_value(value)}: should be less than or equal to {ctx.get('le')}"
    if kind == "less_than":
        return f"Invalid value: {show_value(value)}: should be less than {ctx.get('lt')}"
    if kind == "multiple_of":
        return f"Invalid value: {show_value(value)}: should be a multiple of {ctx.get('multiple_of')}"
    if kind == "string_pattern_mismatch":
        return f"Invalid value: {show_value(value)}: should match '{ctx.get('pattern')}'"
    if kind == "string_too_long":
        return f"Too long: may not be longer than {ctx.get('max_length')}"
    if kind == "string_too_short":
        return f"Invalid value: {show_value(value)}: should be at least {ctx.get('min_length')} chars long"
    if kind == "too_long":
        shown = ctx.get("actual_length")
        if shown is None and isinstance(value, list | tuple):
            shown = len(value)
        return f"Too many: {shown}: must have at most {ctx.get('max_length')} items"
    if kind == "too_short":
        shown = len(value) if isinstance(value, list | tuple | dict) else ctx.get("actual_length")
        unit = "properties" if isinstance(value, dict) else "items"
        return f"Invalid value: {shown}: should have at least {ctx.get('min_length')} {unit}"
    if kind in _TYPE_NAMES:
        if value is None and located.is_field:
            return "Required value"
        return f"Invalid value: {show_value(_json_type(value))}: must be of type {_TYPE_NAMES[kind]}"
    if kind in ("value_error", "assertion_error"):
        error = ctx.get("error")
        text = str(error) if error is not None else str(err.get("msg", ""))
        return f"Invalid value: {show_value(value)}: {text}"
    if kind == "duplicate":  # a repeated key of a list-map or list-set (weir.api.listtypes)
        return str(err.get("msg", ""))
    if kind == "field_not_declared":  # a key of another shape of the kind (server-side field validation)
        return "field not declared in schema"
    if kind == "too_few_properties":
        shown = len(value) if isinstance(value, dict) else 0
        return f"Invalid value: {shown}: should have at least {ctx.get('min')} properties"
    if kind == "extra_forbidden":
        return "Forbidden: unknown field (check the spelling)"
    return f"Invalid value: {show_value(value)}: {err.get('msg', kind)}"


def api_errors(model: type[BaseModel], err: ValidationError) -> list[tuple[str, str]]:
    """``err`` (from validating ``model``) as (field path, message) pairs, in the API server's words."""
    raw = err.errors(include_url=False)
    located = [_locate(model, tuple(e["loc"])) for e in raw]
    locs = [loc.loc for loc in located]
    out: list[tuple[str, str]] = []
    union_groups: dict[str, list[tuple[Any, _Located]]] = {}
    for e, where in zip(raw, located, strict=True):
        if e["type"] in _LENGTH_ERRORS and any(
            len(other) > len(where.loc) and other[: len(where.loc)] == where.loc for other in locs
        ):
            continue  # derived: the list is short/long only because its items failed
        if where.via_union:
            group = union_groups.setdefault(where.path, [])
            if group:
                group.append((e, where))
                continue
            group.append((e, where))
            out.append((where.path, "\0union"))
            continue
        out.append((where.path, _message(e, where)))
    result: list[tuple[str, str]] = []
    seen: set[tuple[str, str]] = set()
    for path, message in out:
        if message == "\0union":
            message = _union_message(union_groups[path])
        if (path, message) not in seen:
            seen.add((path, message))
            result.append((path, message))
    return result


def _union_message(group: list[tuple[Any, _Located]]) -> str:
    """One message for the branches of a union that all failed (``int | str``)."""
    if all(e["type"] in _TYPE_NAMES for e, _ in group):
        first, where = group[0]
        if first.get("input") is None and where.is_field:
            return "Required value"
        types_ = []
        for e, _ in group:
            name = _TYPE_NAMES[e["type"]]
            if name not in types_:
                types_.append(name)
        shown = show_value(_json_type(first.get("input")))
        return f"Invalid value: {shown}: must be of type {' or '.join(types_)}"
    # Report the branch that got furthest (not a plain type mismatch).
    for e, where in group:
        if e["type"] not in _TYPE_NAMES:
            return _message(e, where)
    return _message(*group[0])
