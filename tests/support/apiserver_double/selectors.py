"""Label and field selectors, as the API server parses and applies them.

Label selectors: comma-separated requirements ``k=v``, ``k==v``, ``k!=v``,
``k in (a,b)``, ``k notin (a,b)``, ``k`` (exists) and ``!k`` (does not
exist); all must hold. ``k!=v`` and ``notin`` also match objects without
the label, as in Kubernetes.

Field selectors: ``metadata.name`` and ``metadata.namespace`` with ``=``,
``==`` or ``!=`` — the fields every resource (and every CRD) supports. Any
other field is refused with the API server's ``field label not supported``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from apiserver_double.errors import bad_request

__all__ = ["Selector", "parse_field_selector", "parse_label_selector"]

#: A predicate on a stored object.
Selector = Callable[[Mapping[str, Any]], bool]

_SET_OP = re.compile(r"^\s*(!?)\s*([A-Za-z0-9./_-]+)\s*(?:(notin|in)\s*\(([^)]*)\))?\s*$")
_CMP_OP = re.compile(r"^\s*([A-Za-z0-9./_-]+)\s*(==|!=|=)\s*([A-Za-z0-9._-]*)\s*$")
_FIELDS = ("metadata.name", "metadata.namespace")


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p for p in parts if p.strip()]


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    labels = obj.get("metadata", {}).get("labels") or {}
    return labels if isinstance(labels, Mapping) else {}


def _label_requirement(text: str) -> Selector:
    cmp = _CMP_OP.match(text)
    if cmp:
        key, op, value = cmp.groups()
        if op == "!=":
            return lambda o: _labels(o).get(key) != value
        return lambda o: _labels(o).get(key) == value
    sets = _SET_OP.match(text)
    if sets:
        negated, key, op, values = sets.groups()
        if op is None:
            if negated:
                return lambda o: key not in _labels(o)
            return lambda o: key in _labels(o)
        if negated:
            raise bad_request(f"unable to parse requirement: found '!', expected: identifier in {text!r}")
        allowed = frozenset(v.strip() for v in values.split(",") if v.strip())
        if op == "in":
            return lambda o: _labels(o).get(key) in allowed
        return lambda o: _labels(o).get(key) not in allowed
    raise bad_request(
        f"unable to parse requirement: {text.strip()!r} is not a valid label selector requirement"
    )


def parse_label_selector(text: str | None) -> Selector:
    """A predicate for ``labelSelector``; empty or None selects everything.

    Raises:
        ApiStatusError: 400 BadRequest for a selector that does not parse.
    """
    if not text:
        return lambda o: True
    requirements = [_label_requirement(part) for part in _split_top_level(text)]
    return lambda o: all(req(o) for req in requirements)


def _field_value(obj: Mapping[str, Any], field: str) -> str:
    meta = obj.get("metadata", {})
    return str(meta.get(field.partition(".")[2]) or "")


def _field_requirement(field: str, value: str, *, negated: bool) -> Selector:
    if negated:
        return lambda o: _field_value(o, field) != value
    return lambda o: _field_value(o, field) == value


def parse_field_selector(text: str | None) -> Selector:
    """A predicate for ``fieldSelector`` (``metadata.name`` / ``metadata.namespace`` only).

    Raises:
        ApiStatusError: 400 BadRequest for a selector that does not parse or an unsupported field.
    """
    if not text:
        return lambda o: True
    requirements: list[Selector] = []
    for part in _split_top_level(text):
        match = _CMP_OP.match(part)
        if not match:
            raise bad_request(f"invalid selector: {text!r}; can't understand {part.strip()!r}")
        field, op, value = match.groups()
        if field not in _FIELDS:
            raise bad_request(f"field label not supported: {field}")
        requirements.append(_field_requirement(field, value, negated=op == "!="))
    return lambda o: all(req(o) for req in requirements)
