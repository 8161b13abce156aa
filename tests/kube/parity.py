"""Parity with a real API server, shared by the parity modules of tests/kube.

An object goes to the API server as a dry-run create and to weir's loader; a
test compares the two verdicts. :func:`variants` walks a CRD schema along a
valid object and yields, for each constraint the object reaches, a value that
breaks it (and the boundary values it allows); :func:`fill` first adds a value
for every property of the schema the object lacks, so a field a CRD gains is
covered without anyone writing a case for it.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Iterator
from typing import Any

import yaml
from envtest import Api, ApiError, resource_path

from weir.loader import load_text

Path_ = tuple[str | int, ...]


def server_refuses(api: Api, obj: dict[str, Any]) -> list[str]:
    """What the API server says against creating ``obj`` (dry run: nothing is stored).

    Field validation is the server's default, as a controller's client gets it: a field the
    schema does not declare is dropped, not refused (``kubectl`` asks for ``Strict`` and gets
    it refused; weir's models of the Gateway API kinds hold only the fields weir reads and
    ignore the others, so weir agrees with the default)."""
    meta = obj.get("metadata") or {}
    where = resource_path(obj["apiVersion"], obj["kind"], meta.get("namespace", "default"))
    try:
        api.request("POST", where, params={"dryRun": "All"}, json=obj)
    except ApiError as refused:
        if refused.code not in (400, 422):
            raise
        causes = (refused.body.get("details") or {}).get("causes") or []
        return [f"{c.get('field')}: {c.get('message')}" for c in causes] or [str(refused.body.get("message"))]
    return []


def weir_refuses(obj: dict[str, Any]) -> list[str]:
    _, problems = load_text(yaml.safe_dump(obj, sort_keys=False), "case.yaml")
    return [f"{p.field}: {p.message}" for p in problems if p.severity == "error"]


def set_at(obj: Any, path: Path_, value: Any) -> Any:
    changed = copy.deepcopy(obj)
    target = changed
    for step in path[:-1]:
        target = target[step]
    if value is DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return changed


DELETE = object()

#: Strings tried, in order, for a value off a field's pattern (Python's ``re`` reads these
#: patterns as RE2 does).
_OFF_PATTERN = ("UPPER_case", "a b", "-a-", "*", "a..b", "/", ":x", "a" * 64 + "." + "b", "[]", "")


def _string_cases(s: dict[str, Any], value: str) -> Iterator[tuple[str, Any]]:
    low, high = s.get("minLength", 0), s.get("maxLength")
    pattern = s.get("pattern")
    enum = s.get("enum")
    if high is not None:
        yield "maxLength", "a" * (high + 1)
        if not enum:
            yield (
                "maxLength-boundary",
                (value * (high // max(len(value), 1) + 1))[:high] if value else "a" * high,
            )
    if low > 0:
        yield "minLength", ""
    if pattern:
        for candidate in _OFF_PATTERN:
            if re.search(pattern, candidate) is None and low <= len(candidate) <= (high or 10**6):
                yield "pattern", candidate
                break
    if enum:
        yield "enum", "NotInTheEnum"
    yield "type", 12


def _integer_cases(s: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    if "minimum" in s:
        yield "minimum", s["minimum"] - 1
        yield "minimum-boundary", s["minimum"]
    if "maximum" in s:
        yield "maximum", s["maximum"] + 1
        yield "maximum-boundary", s["maximum"]
    if "enum" in s:
        yield "enum", 299
    yield "type", "80"


def variants(schema: dict[str, Any], value: Any, path: Path_) -> Iterator[tuple[str, Path_, Any]]:
    """``(constraint, path, new value)`` for each constraint of ``schema`` that ``value`` reaches."""
    kind = schema.get("type")
    if kind == "string" and isinstance(value, str):
        for name, new in _string_cases(schema, value):
            yield name, path, new
    elif kind == "integer" and isinstance(value, int):
        for name, new in _integer_cases(schema):
            yield name, path, new
    elif kind == "array" and isinstance(value, list) and value:
        list_type = schema.get("x-kubernetes-list-type")
        if "maxItems" in schema:
            yield "maxItems", path, value + [copy.deepcopy(value[-1])] * (schema["maxItems"] + 1 - len(value))
        if schema.get("minItems"):
            yield "minItems", path, []
        if list_type in ("map", "set"):
            yield f"list-{list_type}", path, [*value, copy.deepcopy(value[0])]
        for i, item in enumerate(value):
            yield from variants(schema.get("items", {}), item, (*path, i))
    elif kind == "object" and isinstance(value, dict):
        for key in schema.get("required", ()):
            if key in value:
                yield "required", (*path, key), DELETE
        for key, sub in schema.get("properties", {}).items():
            if key in value and "default" in sub and key not in schema.get("required", ()):
                yield "default", (*path, key), DELETE
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict) and value:
            if "maxProperties" in schema:
                more = {
                    f"k{i}": copy.deepcopy(next(iter(value.values())))
                    for i in range(schema["maxProperties"] + 1)
                }
                yield "maxProperties", path, more
            for key in value:
                yield from variants(extra, value[key], (*path, key))
        for key, sub in schema.get("properties", {}).items():
            if key in value:
                yield from variants(sub, value[key], (*path, key))


def spec_schema(crd: dict[str, Any], version: str | None = None) -> dict[str, Any]:
    """The schema of ``spec`` in ``crd`` (of ``version``, or its first)."""
    versions = crd["spec"]["versions"]
    chosen = next((v for v in versions if v["name"] == version), None) if version else versions[0]
    if chosen is None:
        raise LookupError(f"{crd['metadata']['name']} has no version {version}")
    spec: dict[str, Any] = chosen["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return spec


#: Strings tried, in order, for a value a pattern allows: the first the pattern matches is used.
_ON_PATTERN = (
    "a",
    "a.example.com",
    "A",
    "System",
    "example.com/a",
    "https://a.example.com",
    "10.0.0.1",
    "10.0.0.0/8",
    "1s",
    "a-1",
)


def synth(schema: dict[str, Any]) -> Any:
    """A value of ``schema``'s type that its declared constraints allow (CEL rules aside): the
    first ``enum`` value, a string its ``pattern`` takes, an integer at its ``minimum``, an object
    with each required property, a list of one item. The verdict on it is left to the two
    validators; the case only needs something for them to judge."""
    if "default" in schema:
        return copy.deepcopy(schema["default"])
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type")
    if kind == "string":
        pattern = schema.get("pattern")
        low, high = schema.get("minLength", 0), schema.get("maxLength", 10**6)
        for candidate in _ON_PATTERN:
            if low <= len(candidate) <= high and (pattern is None or re.search(pattern, candidate)):
                return candidate
        return "a" * max(low, 1)
    if kind == "integer":
        return max(schema.get("minimum", 1), 1) if schema.get("maximum", 1) >= 1 else schema["maximum"]
    if kind == "number":
        return schema.get("minimum", 1)
    if kind == "boolean":
        return True
    if kind == "array":
        return [synth(schema.get("items", {}))] * max(schema.get("minItems", 1), 1)
    if kind == "object":
        props = schema.get("properties", {})
        if not props and isinstance(schema.get("additionalProperties"), dict):
            return {"a": synth(schema["additionalProperties"])}
        return {key: synth(props[key]) for key in schema.get("required", ()) if key in props}
    return "a"


def fill(schema: dict[str, Any], value: Any) -> Any:
    """``value`` with every property ``schema`` declares and ``value`` lacks added (see :func:`synth`),
    recursively: a walk of the result by :func:`variants` reaches every constraint of the schema.
    Properties that exclude each other are the caller's to remove."""
    kind = schema.get("type")
    if kind == "object" and isinstance(value, dict):
        props = schema.get("properties", {})
        out = {key: fill(props[key], v) if key in props else v for key, v in value.items()}
        for key, sub in props.items():
            if key not in out:
                out[key] = fill(sub, synth(sub))
        return out
    if kind == "array" and isinstance(value, list):
        return [fill(schema.get("items", {}), item) for item in value]
    return value


def generated(base: dict[str, Any], schema: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """``(case id, object)`` for each variant of ``base``'s ``spec`` under ``schema``."""
    cases = [(f"{base['kind']}:spec.notAField:unknown", set_at(base, ("spec", "notAField"), 1))]
    for name, path, new in variants(schema, base["spec"], ("spec",)):
        where = ".".join(str(p) for p in path)
        cases.append((f"{base['kind']}:{where}:{name}", set_at(base, path, new)))
    return cases


def record(case: str, server: list[str], weir: list[str]) -> None:
    """Append the two verdicts to the file ``WEIR_PARITY_TALLY`` names, if set (a tally of the
    corpus: how many cases each side refuses, for a report)."""
    where = os.environ.get("WEIR_PARITY_TALLY")
    if where:
        with open(where, "a", encoding="utf-8") as out:
            out.write(f"{case}\t{'refuses' if server else 'accepts'}\t{'refuses' if weir else 'accepts'}\n")
