"""Reading YAML the way Kubernetes reads it, keeping node positions.

:func:`compose` turns a (multi-document) YAML or JSON text into one
``(node, data)`` pair per non-empty document: ``data`` is plain Python data
(dicts, lists, scalars) and ``node`` the composed YAML node, whose start marks
give line numbers (:func:`mapping_value` finds a child node by key).

Only safe tags are read, with YAML 1.1 implicit typing; timestamps stay
strings; a mapping key written twice is an error; merge keys (``<<``) and
aliases work, recursive aliases do not. Bad input raises
:class:`yaml.YAMLError`, which :func:`describe_error` words with its line
(input nested too deeply raises :class:`RecursionError`). That includes a
value YAML can read but not build, whatever its tag (``!!bool maybe``,
``!!int ""``, an integer of more than 4,300 digits): it raises
:class:`BuildError`, which also says which node failed, in which document,
so that :func:`field_path` can name the field.
"""

from __future__ import annotations

import json
import re
from sys import intern
from typing import Any

import yaml
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.resolver import Resolver

__all__ = ["BuildError", "compose", "describe_error", "field_line", "field_path", "mapping_value"]


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

    # The composer calls these two for every node. With no path resolvers they do nothing, and
    # as C callables (no Python frame) they cost nothing: ``{}.get(parent, index)`` returns
    # ``index``, ``tuple()`` returns ``()``.
    descend_resolver: Any = {}.get
    ascend_resolver: Any = tuple

    def resolve(self, kind: type[Node], value: Any, implicit: tuple[bool, bool]) -> str:
        if kind is ScalarNode:
            if not implicit[0] or (value and value[0] not in _IMPLICIT_FIRST):
                return _STR  # quoted, or no implicit tag starts with this character
            tag = _RESOLVED.get(value)
            if tag is None:
                tag = super().resolve(kind, value, (True, False))  # type: ignore[no-untyped-call]
                if len(_RESOLVED) > 50_000:
                    _RESOLVED.clear()
                _RESOLVED[value] = tag
            return tag
        return _SEQ if kind is SequenceNode else _MAP


#: The first characters of plain scalars that can have an implicit tag other than str (digits,
#: signs, ``~``, ``n``/``y``/``t``/``f``/``o`` in either case, ...); ``''`` stands for the empty scalar.
_IMPLICIT_FIRST = frozenset(_Resolver.yaml_implicit_resolvers)
assert None not in _IMPLICIT_FIRST  # a resolver for any first character would defeat the shortcut


class BuildError(ConstructorError):
    """A node that could not be built into data: ``node`` is it, ``document`` the root of its document."""

    def __init__(
        self, problem: str, node: Node, context: str | None = None, within: Node | None = None
    ) -> None:
        super().__init__(context, within.start_mark if within else None, problem, node.start_mark)
        self.node = node
        self.document: Node | None = None


def _build_error(node: Node, exc: Exception) -> BuildError:
    """``exc``, raised while building ``node``, as a :class:`BuildError` (keeping its wording if YAML's)."""
    if isinstance(exc, BuildError):
        return exc
    if isinstance(exc, yaml.MarkedYAMLError):
        error = BuildError(exc.problem or "cannot build this value", node, exc.context)
        error.problem_mark = exc.problem_mark or node.start_mark
        error.context_mark = exc.context_mark
        return error
    tag = node.tag.replace("tag:yaml.org,2002:", "!!")
    if isinstance(node, ScalarNode):
        shown = node.value if len(node.value) <= 40 else node.value[:40] + "..."
        what = f"{json.dumps(shown)} is not a valid {tag}"
    else:
        what = f"this {type(node).__name__[:-4].lower()} is not a valid {tag}"
    # Python's own words, up to any advice meant for programmers ("use sys.set_int_max_str_digits()").
    reason = str(exc).split("\n")[0].split(";")[0][:120] if isinstance(exc, ValueError) else ""
    return BuildError(f"{what} ({reason})" if reason else what, node)


class _Constructor:
    """Nodes → plain data, as Kubernetes reads YAML.

    Safe tags only; timestamps stay strings (Kubernetes has no date type);
    a mapping key written twice is an error (``kubectl`` rejects it too);
    merge keys (``<<``) and aliases work; recursive aliases do not.

    Strings are interned: most recur in every manifest (``name``,
    ``default``, ``PathPrefix``, the apiVersion), and the models keep them.
    """

    def __init__(self) -> None:
        self._safe = SafeConstructor()
        self._memo: dict[int, Any] = {}
        self._busy: set[int] = set()
        self._shared = True

    def construct(self, node: Node, *, aliases: bool = True) -> Any:
        """``node`` as data. ``aliases=False`` promises that no node occurs twice (the text has no
        alias), so no node needs remembering: a plain walk of the tree, a fifth faster."""
        self._memo.clear()
        self._shared = aliases
        return self._node(node)

    def _node(self, node: Node) -> Any:
        if isinstance(node, ScalarNode):
            return self._scalar(node)
        if not self._shared:
            return self._collection(node)
        ident = id(node)
        if ident in self._memo:
            return self._memo[ident]
        if ident in self._busy:
            raise BuildError("found a recursive alias", node)
        self._busy.add(ident)
        try:
            value = self._collection(node)
        finally:
            self._busy.discard(ident)
        self._memo[ident] = value
        return value

    def _collection(self, node: Node) -> Any:
        if isinstance(node, MappingNode) and node.tag == _MAP:
            return self._mapping(node)
        if isinstance(node, SequenceNode) and node.tag == _SEQ:
            return [
                intern(item.value) if item.tag == _STR and isinstance(item, ScalarNode) else self._node(item)
                for item in node.value
            ]
        # !!omap, !!set, ... or an unknown tag (which raises)
        try:
            return self._safe.construct_object(node, deep=True)
        except Exception as exc:
            raise _build_error(node, exc) from None

    def _scalar(self, node: ScalarNode) -> Any:
        tag = node.tag
        if tag == _STR:
            return intern(node.value)
        if tag == _TIMESTAMP:
            return node.value
        if tag == _NULL:
            return None
        try:
            if tag == _BOOL:
                return self._safe.bool_values[node.value.lower()]
            if tag == _INT:
                return self._safe.construct_yaml_int(node)
            if tag == _FLOAT:
                return self._safe.construct_yaml_float(node)
            return self._safe.construct_object(node, deep=True)
        except Exception as exc:  # any tag, any value: YAML read it, it cannot be built
            raise _build_error(node, exc) from None

    def _mapping(self, node: MappingNode) -> dict[Any, Any]:
        result: dict[Any, Any] = {}
        merges: list[Node] = []
        for key_node, value_node in node.value:
            # A string is most keys and values: read inline (as _scalar does) rather than by two calls.
            tag = key_node.tag
            if tag == _STR and isinstance(key_node, ScalarNode):
                key = intern(key_node.value)
            elif tag == _MERGE:
                merges.append(value_node)
                continue
            else:
                key = self._node(key_node)
            try:
                seen = key in result
            except TypeError:
                raise BuildError(
                    "found an unhashable key", key_node, "while constructing a mapping", node
                ) from None
            if seen:
                first = self._first_key_node(node, key)
                raise BuildError(
                    f"mapping key {json.dumps(str(key))} already defined at line {first.start_mark.line + 1}",
                    key_node,
                    "while constructing a mapping",
                    node,
                )
            if value_node.tag == _STR and isinstance(value_node, ScalarNode):
                result[key] = intern(value_node.value)
            else:
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
                raise BuildError(
                    "expected a mapping (or a list of mappings) to merge",
                    source,
                    "while constructing a mapping",
                    node,
                )
            merged.update(value)
        merged.update(result)
        return merged

    def _first_key_node(self, node: MappingNode, key: Any) -> Node:
        """The key node that first gave ``key`` in ``node`` (a key written twice was found)."""
        keys: dict[Any, Node] = {}
        for key_node, _ in node.value:  # the keys before it were read once already: no error here
            if key_node.tag != _MERGE:
                keys.setdefault(self._node(key_node), key_node)
                if key in keys:
                    return keys[key]
        raise AssertionError("a key written twice was not found again")  # pragma: no cover


_Parser: Any
try:
    from yaml.cyaml import CParser as _Parser  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - libyaml is present wherever weir is built
    _Parser = None


class _PyComposer(
    yaml.reader.Reader,
    yaml.scanner.Scanner,
    yaml.parser.Parser,
    yaml.composer.Composer,
    _Resolver,
):
    """PyYAML's pure-Python parser and composer, our resolver: nesting too deep for it raises
    :class:`RecursionError` rather than overflowing the C stack."""

    def __init__(self, stream: str) -> None:
        yaml.reader.Reader.__init__(self, stream)
        yaml.scanner.Scanner.__init__(self)
        yaml.parser.Parser.__init__(self)
        yaml.composer.Composer.__init__(self)
        _Resolver.__init__(self)

    def dispose(self) -> None:
        pass


if _Parser is not None:

    class _Composer(_Parser, _Resolver):  # type: ignore[misc]
        """libyaml's parser and composer (nodes keep their start marks), our resolver."""

        def __init__(self, stream: str) -> None:
            _Parser.__init__(self, stream)
            _Resolver.__init__(self)

else:  # pragma: no cover
    _Composer = _PyComposer  # type: ignore[misc,assignment]

#: libyaml's composer recurses once per nesting level with no limit: about 25,000 levels
#: overflow the C stack and kill the process. A bound on a text's nesting: each level of flow
#: nesting needs an opening bracket or brace, and each level of block nesting a greater column
#: (indentation, or a "- " or "? " on the same line), so depth is at most the openers plus the
#: longest line. Above this bound :class:`_PyComposer` composes the text instead: slower, but
#: stopped by Python's recursion limit ("nested too deeply"). Ordinary manifests are far below.
_C_NESTING_SAFE = 10_000


def _composer(text: str) -> Any:
    bound = text.count("[") + text.count("{")
    if bound <= _C_NESTING_SAFE:
        bound += max(map(len, text.splitlines()), default=0)
    return _PyComposer(text) if bound > _C_NESTING_SAFE else _Composer(text)


def describe_error(err: yaml.YAMLError) -> tuple[int | None, str]:
    """A YAML error as (1-based line, or ``None`` when unknown; message starting ``invalid YAML:``)."""
    if isinstance(err, yaml.MarkedYAMLError):
        mark = err.problem_mark or err.context_mark
        message = f"invalid YAML: {err.problem or err.context or 'syntax error'}"
        if err.context and err.problem:
            where = f" started on line {err.context_mark.line + 1}" if err.context_mark else ""
            message += f" ({err.context}{where})"
        return (mark.line + 1 if mark else None), message
    return None, f"invalid YAML: {err}"


def compose(text: str) -> list[tuple[Node, Any]]:
    """Every non-empty document of ``text`` as (node, data). Raises :class:`yaml.YAMLError`."""
    composer = _composer(text)
    constructor = _Constructor()
    aliases = "*" in text  # an alias is written ``*name``: without a '*', every node is new
    out: list[tuple[Node, Any]] = []
    try:
        while composer.check_node():
            node = composer.get_node()
            if node is None:
                continue
            try:
                data = constructor.construct(node, aliases=aliases)
            except BuildError as exc:
                exc.document = node
                raise
            except RecursionError:
                raise
            except Exception as exc:  # a value nothing above foresaw: still this document's problem
                error = _build_error(node, exc)
                error.document = node
                raise error from None
            if data is not None:
                out.append((node, data))
    finally:
        composer.dispose()
    return out


def field_path(document: Node, target: Node) -> str | None:
    """Where ``target`` is in ``document``, as a Kubernetes field path (``spec.rules[0].matches``).

    ``None`` when ``target`` is the document itself or is not in it. A node
    reached through an alias is named by its first path; a key node by the
    path of its mapping. Keys that are not plain words are written
    ``[key]`` (as map keys are: ``metadata.labels[app.kubernetes.io/name]``).
    Iterative, so that deep documents cost no recursion.
    """
    seen: set[int] = set()
    stack: list[tuple[Node, str]] = [(document, "")]
    while stack:
        node, path = stack.pop()
        if node is target:
            return path or None
        if id(node) in seen:
            continue
        seen.add(id(node))
        children: list[tuple[Node, str]] = []
        if isinstance(node, MappingNode):
            for key_node, value_node in node.value:
                if not isinstance(key_node, ScalarNode):
                    if key_node is target:
                        return path or None
                    children.append((value_node, path))
                    continue
                key = key_node.value
                step = f".{key}" if key.isidentifier() else f"[{key}]"
                child = f"{path}{step}" if path or not step.startswith(".") else key
                if key_node is target:  # a key written twice, say: the field it names
                    return child
                children.append((value_node, child))
        elif isinstance(node, SequenceNode):
            children.extend((item, f"{path}[{i}]") for i, item in enumerate(node.value))
        stack.extend(reversed(children))
    return None


#: One step of a Kubernetes field path: ``.name``/``name`` or ``[key]``/``[3]``.
_STEP = re.compile(r"\.?([^.\[\]]+)|\[([^\]]*)\]")


def field_line(document: Node, path: str | None) -> int:
    """The 1-based line of the field ``path`` (as :func:`field_path` writes it) in ``document``.

    The contract linters keep: a problem points at the offending field, not at
    its object. A mapping field's line is its key's (``rules:``, where an
    editor should jump), a list item's the line its item starts on. A field
    the document does not hold (a required one that is missing, a default,
    an index past the end) gets the line of the deepest part of its path that
    is there, at worst the document's own first line; a field reached through
    an alias, the line where the anchored value is written. Never raises.
    """
    line = document.start_mark.line
    node: Node | None = document
    for match in _STEP.finditer(path or ""):
        name = match.group(1) if match.group(1) is not None else match.group(2)
        nxt: Node | None = None
        if isinstance(node, MappingNode):
            for key_node, value_node in node.value:
                if isinstance(key_node, ScalarNode) and key_node.value == name:
                    line, nxt = key_node.start_mark.line, value_node
                    break
        elif isinstance(node, SequenceNode) and match.group(2) is not None and name.isdigit():
            index = int(name)
            if index < len(node.value):
                nxt = node.value[index]
                line = nxt.start_mark.line
        if nxt is None:
            break
        node = nxt
    return line + 1


def mapping_value(node: Node, key: str) -> Node | None:
    """The value node of ``key`` in a mapping node; ``None`` if absent or ``node`` is not a mapping."""
    if isinstance(node, MappingNode):
        for key_node, value_node in node.value:
            if isinstance(key_node, ScalarNode) and key_node.value == key:
                result: Node = value_node
                return result
    return None
