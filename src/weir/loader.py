"""Manifests → validated objects, with problems people can act on.

:func:`load_text`, :func:`load_file` and :func:`load_paths` read multi-document
YAML (or JSON), unpack ``kind: List`` documents, parse every object with the
model :mod:`weir.api.registry` names for its ``apiVersion``/``kind`` and turn
every validation error into a :class:`Problem` that says where (file, line,
object, field path in Kubernetes notation) and what, in the API server's
words::

    routes.yaml:12: HTTPRoute default/web: spec.rules[0].backendRefs[1].port:
        Invalid value: 0: should be greater than or equal to 1

(one line, wrapped here)

A file is read as a whole: a YAML syntax error (or a duplicate mapping key)
anywhere in it yields one problem and no objects from that file. Within a
readable file, each object stands on its own: an invalid one is reported
and skipped, the others load.

The lower-level :func:`parse_text` returns a :class:`FileResult` that keeps,
per document, the object's key even when the object is invalid; the files
provider uses it to keep serving an object's last valid version.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import re
import types
import typing
from collections import abc
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ValidationError
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.resolver import Resolver

from weir.api import registry
from weir.api.meta import KubeObject, ObjectKey

__all__ = [
    "MANIFEST_SUFFIXES",
    "Assembler",
    "Document",
    "FileResult",
    "LoadReport",
    "Loaded",
    "Problem",
    "assemble",
    "gc_paused",
    "load_file",
    "load_paths",
    "load_text",
    "manifest_files",
    "parse_bytes",
    "parse_text",
]

#: File name endings read when walking a folder (a file named explicitly is always read).
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")

Severity = Literal["error", "warning"]


# ------------------------------------------------------------------ results


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the input, located as precisely as the input allows.

    ``line`` is 1-based: the line where the object's document (or List item)
    starts, or the line of a YAML syntax error. ``object`` reads
    ``"HTTPRoute default/web"`` (``"GatewayClass weir"`` for cluster-scoped
    kinds); ``field`` is a Kubernetes field path such as
    ``spec.rules[0].backendRefs[1].port``.
    """

    severity: Severity
    file: str
    line: int | None
    object: str | None
    field: str | None
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        parts = [where]
        if self.object:
            parts.append(self.object)
        if self.field:
            parts.append(self.field)
        parts.append(self.message)
        return ": ".join(parts)

    def to_data(self) -> dict[str, Any]:
        """A plain dict (every key present, ``None`` for unknown) for JSON or YAML output."""
        return {
            "severity": self.severity,
            "file": self.file,
            "line": self.line,
            "object": self.object,
            "field": self.field,
            "message": self.message,
        }


@dataclass(frozen=True)
class Loaded:
    """A valid object and where it was read from (``line`` is 1-based, its document's start)."""

    object: KubeObject
    file: str
    line: int


@dataclass(frozen=True)
class Document:
    """The outcome of one document (or one item of a ``List``) of a file.

    ``key`` is set for a kind weir reads whenever ``apiVersion``, ``kind``
    and ``metadata.name`` are readable, even if the object is invalid;
    ``loaded`` is set only for a valid object; ``unknown`` is
    ``(apiVersion, kind)`` for a kind weir does not read (such documents carry
    no problems: :class:`Assembler` reports them once per kind); ``label`` is
    the object as problems name it (``"HTTPRoute default/web"``) when known.
    """

    line: int
    key: ObjectKey | None
    loaded: Loaded | None
    problems: tuple[Problem, ...] = ()
    unknown: tuple[str, str] | None = None
    label: str | None = None


@dataclass(frozen=True)
class FileResult:
    """Everything one file yielded. ``fatal`` is set (and ``documents`` empty) when unreadable."""

    file: str
    documents: tuple[Document, ...]
    fatal: Problem | None = None


@dataclass
class LoadReport:
    """What :func:`load_paths` found: the valid objects and every problem, in file order."""

    objects: list[Loaded]
    problems: list[Problem]

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "warning"]

    @property
    def ok(self) -> bool:
        """True when there are no errors (warnings allowed)."""
        return not any(p.severity == "error" for p in self.problems)


# ------------------------------------------------------------------ YAML


_STR = "tag:yaml.org,2002:str"
_MAP = "tag:yaml.org,2002:map"
_SEQ = "tag:yaml.org,2002:seq"
_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_BOOL = "tag:yaml.org,2002:bool"
_NULL = "tag:yaml.org,2002:null"
_TIMESTAMP = "tag:yaml.org,2002:timestamp"
_MERGE = "tag:yaml.org,2002:merge"
_RESOLVED: dict[str, str] = {}  # plain scalar → tag; most scalars repeat ("name", "port")


class _Resolver(Resolver):
    """The YAML 1.1 implicit tags (as Kubernetes' YAML reader), with a cache, no path resolvers."""

    def descend_resolver(self, current_node: Any, current_index: Any) -> None:
        pass

    def ascend_resolver(self) -> None:
        pass

    def resolve(self, kind: type[Node], value: Any, implicit: tuple[bool, bool]) -> str:
        if kind is ScalarNode:
            if not implicit[0]:
                return _STR
            tag = _RESOLVED.get(value)
            if tag is None:
                tag = super().resolve(kind, value, (True, False))  # type: ignore[no-untyped-call]
                if len(_RESOLVED) > 50_000:
                    _RESOLVED.clear()
                _RESOLVED[value] = tag
            return tag
        return _SEQ if kind is SequenceNode else _MAP


class _Constructor:
    """Nodes → plain data, as Kubernetes reads YAML.

    Safe tags only; timestamps stay strings (Kubernetes has no date type);
    a mapping key written twice is an error (``kubectl`` rejects it too);
    merge keys (``<<``) and aliases work; recursive aliases do not.
    """

    def __init__(self) -> None:
        self._safe = SafeConstructor()
        self._memo: dict[int, Any] = {}
        self._busy: set[int] = set()

    def construct(self, node: Node) -> Any:
        self._memo.clear()
        return self._node(node)

    def _node(self, node: Node) -> Any:
        if isinstance(node, ScalarNode):
            return self._scalar(node)
        ident = id(node)
        if ident in self._memo:
            return self._memo[ident]
        if ident in self._busy:
            raise ConstructorError(None, None, "found a recursive alias", node.start_mark)
        self._busy.add(ident)
        try:
            if isinstance(node, MappingNode) and node.tag == _MAP:
                value: Any = self._mapping(node)
            elif isinstance(node, SequenceNode) and node.tag == _SEQ:
                value = [self._node(child) for child in node.value]
            else:  # !!omap, !!set, ... or an unknown tag (which raises)
                value = self._safe.construct_object(node, deep=True)
        finally:
            self._busy.discard(ident)
        self._memo[ident] = value
        return value

    def _scalar(self, node: ScalarNode) -> Any:
        tag = node.tag
        if tag in (_STR, _TIMESTAMP):
            return node.value
        if tag == _NULL:
            return None
        if tag == _BOOL:
            return self._safe.bool_values[node.value.lower()]
        if tag == _INT:
            return self._safe.construct_yaml_int(node)
        if tag == _FLOAT:
            return self._safe.construct_yaml_float(node)
        return self._safe.construct_object(node, deep=True)

    def _mapping(self, node: MappingNode) -> dict[Any, Any]:
        result: dict[Any, Any] = {}
        keys: dict[Any, Node] = {}
        merges: list[Node] = []
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE:
                merges.append(value_node)
                continue
            key = self._node(key_node)
            try:
                first = keys.setdefault(key, key_node)
            except TypeError:
                raise ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    "found an unhashable key",
                    key_node.start_mark,
                ) from None
            if first is not key_node:
                raise ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"mapping key {json.dumps(str(key))} already defined at line {first.start_mark.line + 1}",
                    key_node.start_mark,
                )
            result[key] = self._node(value_node)
        if not merges:
            return result
        merged: dict[Any, Any] = {}
        sources: list[Node] = []
        for merge in merges:
            sources.extend(merge.value if isinstance(merge, SequenceNode) else [merge])
        for source in reversed(sources):  # the first source named wins
            value = self._node(source)
            if not isinstance(value, dict):
                raise ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    "expected a mapping (or a list of mappings) to merge",
                    source.start_mark,
                )
            merged.update(value)
        merged.update(result)
        return merged


_Parser: Any
try:
    from yaml.cyaml import CParser as _Parser  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - libyaml is present wherever weir is built
    _Parser = None


if _Parser is not None:

    class _Composer(_Parser, _Resolver):  # type: ignore[misc]
        """libyaml's parser and composer (nodes keep their start marks), our resolver."""

        def __init__(self, stream: str) -> None:
            _Parser.__init__(self, stream)
            _Resolver.__init__(self)

else:  # pragma: no cover

    class _Composer(  # type: ignore[no-redef]
        yaml.reader.Reader,
        yaml.scanner.Scanner,
        yaml.parser.Parser,
        yaml.composer.Composer,
        _Resolver,
    ):
        def __init__(self, stream: str) -> None:
            yaml.reader.Reader.__init__(self, stream)
            yaml.scanner.Scanner.__init__(self)
            yaml.parser.Parser.__init__(self)
            yaml.composer.Composer.__init__(self)
            _Resolver.__init__(self)

        def dispose(self) -> None:
            pass


def _yaml_problem(file: str, err: yaml.YAMLError) -> Problem:
    if isinstance(err, yaml.MarkedYAMLError):
        mark = err.problem_mark or err.context_mark
        message = f"invalid YAML: {err.problem or err.context or 'syntax error'}"
        if err.context and err.problem:
            where = f" started on line {err.context_mark.line + 1}" if err.context_mark else ""
            message += f" ({err.context}{where})"
        return Problem("error", file, mark.line + 1 if mark else None, None, None, message)
    return Problem("error", file, None, None, None, f"invalid YAML: {err}")


def _compose(text: str) -> list[tuple[Node, Any]]:
    """Every non-empty document of ``text`` as (node, data). Raises :class:`yaml.YAMLError`."""
    composer = _Composer(text)
    constructor = _Constructor()
    out: list[tuple[Node, Any]] = []
    try:
        while composer.check_node():
            node = composer.get_node()
            if node is None:
                continue
            data = constructor.construct(node)
            if data is not None:
                out.append((node, data))
    finally:
        composer.dispose()
    return out


def _mapping_value(node: Node, key: str) -> Node | None:
    if isinstance(node, MappingNode):
        for key_node, value_node in node.value:
            if isinstance(key_node, ScalarNode) and key_node.value == key:
                result: Node = value_node
                return result
    return None


# ------------------------------------------------------------------ parsing


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


def _show(value: Any) -> str:
    """A value as the API server shows it in ``Invalid value: ...``."""
    if isinstance(value, dict):
        return '"object"'
    if isinstance(value, list | tuple):
        return '"array"'
    if isinstance(value, str) and len(value) > 100:
        value = value[:100] + "..."
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return json.dumps(str(value), ensure_ascii=False)


def _label(kind: str, namespace: str, name: str) -> str:
    return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"


def parse_text(text: str, file: str) -> FileResult:
    """Parse and validate every object in ``text`` (one file) without cross-file checks."""
    try:
        composed = _compose(text)
    except yaml.YAMLError as err:
        return FileResult(file, (), _yaml_problem(file, err))
    except RecursionError:
        problem = Problem("error", file, None, None, None, "invalid YAML: nested too deeply")
        return FileResult(file, (), problem)
    docs: list[Document] = []
    for node, data in composed:
        line = node.start_mark.line + 1
        if isinstance(data, dict) and isinstance(data.get("items"), list) and _is_list_kind(data):
            items_node = _mapping_value(node, "items")
            item_nodes = items_node.value if isinstance(items_node, SequenceNode) else []
            default_api = data.get("apiVersion")
            kind = data.get("kind")
            default_kind = kind[: -len("List")] if isinstance(kind, str) and kind != "List" else None
            for i, item in enumerate(data["items"]):
                item_line = item_nodes[i].start_mark.line + 1 if i < len(item_nodes) else line
                if isinstance(item, dict) and default_kind and default_api:
                    # The API's typed lists (HTTPRouteList) omit apiVersion/kind on items.
                    item = {"apiVersion": default_api, "kind": default_kind, **item}
                docs.append(_parse_object(item, file, item_line))
        else:
            docs.append(_parse_object(data, file, line))
    return FileResult(file, tuple(docs))


def parse_bytes(raw: bytes, file: str) -> FileResult:
    """:func:`parse_text` for raw file content (UTF-8, with or without a byte order mark)."""
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        problem = Problem("error", file, line, None, None, f"not UTF-8 text: {err.reason}")
        return FileResult(file, (), problem)
    return parse_text(text, file)


def _is_list_kind(data: dict[str, Any]) -> bool:
    """``kind: List`` (as ``kubectl get -o yaml`` prints) or a typed list (``HTTPRouteList``)."""
    kind = data.get("kind")
    return isinstance(kind, str) and kind.endswith("List") and registry.model_for_kind(kind) is None


def _parse_object(data: Any, file: str, line: int) -> Document:
    if not isinstance(data, dict):
        return Document(
            line,
            None,
            None,
            (
                Problem(
                    "error",
                    file,
                    line,
                    None,
                    None,
                    f"Invalid value: {_show(data)}: a manifest must be an object "
                    "with apiVersion, kind and metadata.name",
                ),
            ),
        )
    api_version = data.get("apiVersion")
    kind = data.get("kind")
    metadata = data.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    namespace = metadata.get("namespace") if isinstance(metadata, dict) else None

    # The identity fields come first: without them nothing else can be said.
    identity: list[tuple[str, str]] = []
    for path, value, expected in (
        ("apiVersion", api_version, str),
        ("kind", kind, str),
        ("metadata", metadata, dict),
    ):
        if value is None or value == "":
            identity.append((path, "Required value"))
        elif not isinstance(value, expected):
            want = "string" if expected is str else "object"
            identity.append((path, f"Invalid value: {_show(value)}: must be of type {want}"))
    if isinstance(metadata, dict):
        if name is None or name == "":
            identity.append(("metadata.name", "Required value"))
        elif not isinstance(name, str):
            identity.append(("metadata.name", f"Invalid value: {_show(name)}: must be of type string"))
        if namespace is not None and not isinstance(namespace, str):
            identity.append(
                ("metadata.namespace", f"Invalid value: {_show(namespace)}: must be of type string")
            )
    if identity:
        label = None
        if isinstance(kind, str) and kind and isinstance(name, str) and name:
            label = _label(kind, namespace if isinstance(namespace, str) else "", name)
        return Document(
            line,
            None,
            None,
            tuple(Problem("error", file, line, label, path, msg) for path, msg in identity),
            label=label,
        )
    assert isinstance(api_version, str) and isinstance(kind, str)
    assert isinstance(metadata, dict) and isinstance(name, str)
    assert namespace is None or isinstance(namespace, str)

    model = registry.lookup(api_version, kind)
    if model is None:
        label = _label(kind, namespace or "", name)
        return Document(line, None, None, unknown=(api_version, kind), label=label)

    if model.NAMESPACED:
        if not namespace:
            namespace = "default"
            data = {**data, "metadata": {**metadata, "namespace": namespace}}
    elif namespace is not None:
        # The API server ignores metadata.namespace on cluster-scoped objects.
        namespace = ""
        meta = dict(metadata)
        del meta["namespace"]
        data = {**data, "metadata": meta}
    namespace = namespace or ""
    key = ObjectKey(model.KIND, namespace, name)
    label = str(key)
    try:
        obj = model.model_validate(data)
    except ValidationError as err:
        problems = tuple(
            Problem("error", file, line, label, path, message)
            for path, message in _translate_errors(model, err)
        )
        return Document(line, key, None, problems, label=label)
    return Document(line, key, Loaded(obj, file, line), label=label)


# ------------------------------------------------------------------ pydantic errors → API words


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
            out.append(f"[{part}]")
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
        supported = ", ".join(json.dumps(e) for e in expected)
        return f"Unsupported value: {_show(value)}: supported values: {supported}"
    if kind == "greater_than_equal":
        return f"Invalid value: {_show(value)}: should be greater than or equal to {ctx.get('ge')}"
    if kind == "greater_than":
        return f"Invalid value: {_show(value)}: should be greater than {ctx.get('gt')}"
    if kind == "less_than_equal":
        return f"Invalid value: {_show(value)}: should be less than or equal to {ctx.get('le')}"
    if kind == "less_than":
        return f"Invalid value: {_show(value)}: should be less than {ctx.get('lt')}"
    if kind == "multiple_of":
        return f"Invalid value: {_show(value)}: should be a multiple of {ctx.get('multiple_of')}"
    if kind == "string_pattern_mismatch":
        return f"Invalid value: {_show(value)}: should match '{ctx.get('pattern')}'"
    if kind == "string_too_long":
        return f"Too long: may not be longer than {ctx.get('max_length')}"
    if kind == "string_too_short":
        return f"Invalid value: {_show(value)}: should be at least {ctx.get('min_length')} chars long"
    if kind == "too_long":
        shown = ctx.get("actual_length")
        if shown is None and isinstance(value, list | tuple):
            shown = len(value)
        return f"Too many: {shown}: must have at most {ctx.get('max_length')} items"
    if kind == "too_short":
        shown = len(value) if isinstance(value, list | tuple | dict) else ctx.get("actual_length")
        return f"Invalid value: {shown}: should have at least {ctx.get('min_length')} items"
    if kind in _TYPE_NAMES:
        if value is None and located.is_field:
            return "Required value"
        return f"Invalid value: {_show(_json_type(value))}: must be of type {_TYPE_NAMES[kind]}"
    if kind in ("value_error", "assertion_error"):
        error = ctx.get("error")
        text = str(error) if error is not None else str(err.get("msg", ""))
        return f"Invalid value: {_show(value)}: {text}"
    if kind == "extra_forbidden":
        return "Forbidden: unknown field (check the spelling)"
    return f"Invalid value: {_show(value)}: {err.get('msg', kind)}"


def _translate_errors(model: type[BaseModel], err: ValidationError) -> list[tuple[str, str]]:
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
        shown = _show(_json_type(first.get("input")))
        return f"Invalid value: {shown}: must be of type {' or '.join(types_)}"
    # Report the branch that got furthest (not a plain type mismatch).
    for e, where in group:
        if e["type"] not in _TYPE_NAMES:
            return _message(e, where)
    return _message(*group[0])


# ------------------------------------------------------------------ assembling a load


class Assembler:
    """The checks that span documents and files, applied as documents are added in order.

    The first object with a key wins; a later one is an error naming the
    first. Documents of kinds weir does not read give one warning per
    ``(apiVersion, kind)``, at the first such document, with the count.
    """

    def __init__(self) -> None:
        self._problems: list[Problem | None] = []
        self._first: dict[ObjectKey, tuple[str, int]] = {}
        self._unknown: dict[tuple[str, str], _UnknownKind] = {}

    def problem(self, *problems: Problem) -> None:
        self._problems.extend(problems)

    def unknown(self, doc: Document, file: str) -> None:
        """Count a document of a kind weir does not read (``doc.unknown`` is set)."""
        assert doc.unknown is not None
        entry = self._unknown.get(doc.unknown)
        if entry is None:
            self._unknown[doc.unknown] = _UnknownKind(file, doc.line, doc.label, len(self._problems))
            self._problems.append(None)  # filled in by problems(), once the count is known
        else:
            entry.count += 1

    def claim(self, key: ObjectKey, file: str, line: int, label: str | None = None) -> bool:
        """True if ``key`` is first seen here; otherwise record the duplicate and return False."""
        first = self._first.get(key)
        if first is None:
            self._first[key] = (file, line)
            return True
        self._problems.append(
            Problem(
                "error",
                file,
                line,
                label or str(key),
                None,
                f"Duplicate value: already defined at {first[0]}:{first[1]}; this definition is ignored",
            )
        )
        return False

    def problems(self) -> list[Problem]:
        """Every problem recorded, in the order the documents were added."""
        out = list(self._problems)
        for (api_version, kind), entry in self._unknown.items():
            out[entry.index] = unknown_kind_problem(
                api_version, kind, entry.file, entry.line, entry.label, entry.count
            )
        return [p for p in out if p is not None]


@dataclass
class _UnknownKind:
    file: str
    line: int
    label: str | None
    index: int
    count: int = 1


def assemble(results: Iterable[FileResult]) -> tuple[list[Loaded], list[Problem]]:
    """Objects and problems of several files, with the checks of :class:`Assembler`."""
    asm = Assembler()
    objects: list[Loaded] = []
    for result in results:
        if result.fatal is not None:
            asm.problem(result.fatal)
            continue
        for doc in result.documents:
            if doc.unknown is not None:
                asm.unknown(doc, result.file)
                continue
            if doc.key is not None and not asm.claim(doc.key, result.file, doc.line, doc.label):
                continue
            asm.problem(*doc.problems)
            if doc.loaded is not None:
                objects.append(doc.loaded)
    return objects, asm.problems()


def unknown_kind_problem(
    api_version: str, kind: str, file: str, line: int, label: str | None, count: int
) -> Problem:
    """The warning for objects of a kind weir does not read (the first one at file:line)."""
    known = registry.model_for_kind(kind)
    if known is not None:
        what = f"weir reads {kind} as apiVersion {known.API_VERSION}, not {api_version}"
    else:
        what = f"weir does not read {kind} ({api_version})"
    objects = "1 object" if count == 1 else f"{count} objects"
    return Problem("warning", file, line, label, None, f"{what}; skipped {objects} of this kind")


def load_text(text: str, file: str) -> tuple[list[Loaded], list[Problem]]:
    """The valid objects of ``text`` and its problems. ``file`` names it in problems."""
    return assemble([parse_text(text, file)])


def load_file(path: str | os.PathLike[str]) -> tuple[list[Loaded], list[Problem]]:
    """:func:`load_text` for a file; an unreadable file gives one problem."""
    return assemble([read_file(path)])


def read_file(path: str | os.PathLike[str]) -> FileResult:
    """Read and parse one file into a :class:`FileResult`."""
    file = os.fspath(path)
    try:
        raw = Path(file).read_bytes()
    except OSError as err:
        return FileResult(file, (), Problem("error", file, None, None, None, f"cannot read: {err.strerror}"))
    return parse_bytes(raw, file)


# ------------------------------------------------------------------ files and folders


def _is_manifest_name(name: str) -> bool:
    return not name.startswith(".") and name.lower().endswith(MANIFEST_SUFFIXES)


def _walk(root: Path) -> Iterator[Path]:
    seen_dirs: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        real = os.path.realpath(dirpath)
        if real in seen_dirs:  # a symlink loop
            dirnames[:] = []
            continue
        seen_dirs.add(real)
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in filenames:
            if _is_manifest_name(name):
                yield Path(dirpath, name)


def manifest_files(paths: Sequence[str | os.PathLike[str]]) -> tuple[list[Path], list[Problem]]:
    """The files ``paths`` name, folders walked recursively, and an error per missing path.

    Folders contribute ``*.yaml``, ``*.yml`` and ``*.json`` files, skipping
    hidden files and folders (a name starting with ``.``) below the folder;
    a file named explicitly is always read. Each root's files are sorted by
    path; roots keep the order given; a file reached twice is read once.
    """
    files: list[Path] = []
    problems: list[Problem] = []
    seen: set[str] = set()
    for given in paths:
        root = Path(given)
        if root.is_dir():
            found = sorted(_walk(root), key=lambda p: p.parts)
        elif root.exists():
            found = [root]
        else:
            problems.append(Problem("error", str(root), None, None, None, "no such file or directory"))
            continue
        for path in found:
            real = os.path.realpath(path)
            if real not in seen:
                seen.add(real)
                files.append(path)
    return files, problems


def load_paths(paths: Sequence[str | os.PathLike[str]]) -> LoadReport:
    """Load every manifest in ``paths`` (files, and folders walked recursively)."""
    files, missing = manifest_files(paths)
    with gc_paused():
        objects, problems = assemble([read_file(path) for path in files])
    return LoadReport(objects, missing + problems)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while reading many files.

    Parsing allocates millions of small objects that all survive (YAML nodes,
    then models); without this the collector rescans them over and over and
    loading 10,000 routes takes several times longer. Nothing parsed here
    forms reference cycles, so nothing is lost by waiting.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
