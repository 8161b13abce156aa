"""List types (``x-kubernetes-list-type: map`` / ``set``), declared once on the models and enforced.

A list field whose items must be unique says so in its schema, as the
upstream CRD does::

    headers: tuple[HeaderMatch, ...] = Field(default=(), max_length=16, json_schema_extra=list_map("name"))
    remove: tuple[str, ...] = Field(default=(), max_length=16, json_schema_extra=LIST_SET)

The CRD that :mod:`weir.api.crds` prints carries that annotation, and a
kind that mixes in :class:`ObjectChecked` (every kind with such lists does)
refuses a repeated key as the API server does: one error per repeat, at the
item that repeats an earlier one (``spec.rules[0].matches[0].headers[1]``),
worded as the API server words it::

    Duplicate value: map[string]interface {}{"name":"x-tenant"}   (a map: its keys, Go's %#v)
    Duplicate value: "x-debug"                                     (a set: the item)

Keys compare exactly (a header named ``X-A`` and one named ``x-a`` are two
keys to the API server, though HTTP treats them as one; translation handles
that). Measured on kube-apiserver v1.32: the API server reports these next
to CEL rule failures, which still run; :class:`ObjectChecked` does the same,
and is where a kind adds checks on the whole object (:meth:`ObjectChecked.object_errors`).
"""

from __future__ import annotations

import json
import typing
from dataclasses import dataclass
from functools import cache
from typing import Any, Self

from pydantic import BaseModel, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from weir.api.meta import Model

__all__ = ["DUPLICATE", "LIST_SET", "ObjectChecked", "ObjectError", "duplicate_errors", "list_map"]

#: ``json_schema_extra`` of a list whose items are unique.
LIST_SET: dict[str, Any] = {"x-kubernetes-list-type": "set"}
#: The pydantic error type of a repeated key (rendered by :mod:`weir.api.errors`).
DUPLICATE = "duplicate"

#: One error found on a whole object: ``(loc, pydantic error type, message, input)``.
ObjectError = tuple[tuple[int | str, ...], str, str, Any]


def list_map(*keys: str) -> dict[str, Any]:
    """``json_schema_extra`` of a list of objects unique by ``keys`` (their JSON names)."""
    return {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": list(keys)}


def _go_value(value: Any) -> str:
    """``value`` as Go's ``%#v`` prints a JSON-decoded value (strings quoted, numbers bare)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return json.dumps(value)
    return json.dumps(value, ensure_ascii=False)


def model_types(annotation: Any) -> set[type[BaseModel]]:
    """The model classes a value of ``annotation`` may hold, at any depth of its type arguments."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return {annotation}
    return {model for arg in typing.get_args(annotation) for model in model_types(arg)}


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    alias: str
    list_type: str | None  # "map", "set" or None
    keys: tuple[str, ...]  # a map's keys (JSON names)
    nested: bool  # may hold models with list types


@cache
def _plan(model: type[BaseModel]) -> tuple[_Field, ...]:
    out = []
    for name, info in model.model_fields.items():
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        kind = extra.get("x-kubernetes-list-type")
        list_type = kind if kind in ("map", "set") else None
        named = extra.get("x-kubernetes-list-map-keys") if list_type == "map" else None
        keys = tuple(str(k) for k in named) if isinstance(named, list) else ()
        nested = any(m is not model and _plan(m) for m in model_types(info.annotation))
        if list_type or nested:
            out.append(_Field(name, info.alias or name, list_type, keys, nested))
    return tuple(out)


@cache
def _attributes(model: type[BaseModel], keys: tuple[str, ...]) -> tuple[str, ...]:
    """The attribute names of a map's ``keys`` (JSON names) in ``model``."""
    by_alias = {(info.alias or name): name for name, info in model.model_fields.items()}
    return tuple(by_alias[k] for k in keys)


def _repeats(f: _Field, items: tuple[Any, ...] | list[Any], loc: tuple[int | str, ...]) -> list[ObjectError]:
    out: list[ObjectError] = []
    seen: set[Any] = set()
    for i, item in enumerate(items):
        if f.list_type == "set":
            key: Any = item
        elif isinstance(item, BaseModel):
            key = tuple(getattr(item, a) for a in _attributes(type(item), f.keys))
        else:
            continue
        if key in seen:
            if f.list_type == "set":
                shown = _go_value(item)
            else:
                pairs = sorted(zip(f.keys, key, strict=True))
                inner = ", ".join(f"{json.dumps(k)}:{_go_value(v)}" for k, v in pairs)
                shown = "map[string]interface {}{" + inner + "}"
            out.append(((*loc, f.alias, i), DUPLICATE, f"Duplicate value: {shown}", item))
        seen.add(key)
    return out


def duplicate_errors(obj: BaseModel, loc: tuple[int | str, ...] = ()) -> list[ObjectError]:
    """Every item of a list-map or list-set in ``obj`` that repeats an earlier one's key."""
    out: list[ObjectError] = []
    for f in _plan(type(obj)):
        value = getattr(obj, f.name)
        if not value:
            continue
        if f.list_type and len(value) > 1 and isinstance(value, tuple | list):
            out.extend(_repeats(f, value, loc))
        if not f.nested:
            continue
        if isinstance(value, BaseModel):
            out.extend(duplicate_errors(value, (*loc, f.alias)))
        elif isinstance(value, tuple | list):
            for i, element in enumerate(value):
                if isinstance(element, BaseModel):
                    out.extend(duplicate_errors(element, (*loc, f.alias, i)))
    return out


def raise_errors(model: type[BaseModel], errors: list[ObjectError]) -> None:
    """Raise ``errors`` as one :class:`~pydantic.ValidationError` (nothing when there are none)."""
    if errors:
        raise ValidationError.from_exception_data(
            model.__name__,
            [
                InitErrorDetails(
                    type=PydanticCustomError(kind, "{message}", {"message": message}), loc=loc, input=value
                )
                for loc, kind, message, value in errors
            ],
        )


class ObjectChecked(Model):
    """Mixin for a resource kind: once the object has passed its schema, check it as a whole.

    The list types of every list in it (:func:`duplicate_errors`), then what
    the kind adds (:meth:`object_errors`); every error is reported.
    """

    def object_errors(self) -> list[ObjectError]:
        """Errors that need the whole object; :func:`duplicate_errors` first, then the kind's own."""
        return duplicate_errors(self)

    @model_validator(mode="after")
    def _check_object(self) -> Self:
        raise_errors(type(self), self.object_errors())
        return self
