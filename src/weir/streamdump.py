"""JSON and YAML written as they are made: ``weir translate`` at 10,000 routes without the whole
document in memory.

A document is plain data in which some mappings and lists are *lazy*
(:class:`LazyMap`, :class:`LazyList`): iterables whose entries are made one
at a time, written, and dropped. What is written is the text that
``json.dumps(data, indent=2)`` and the CLI's YAML (block style, keys in
their order, no aliases) give for the same data made eagerly: JSON byte for
byte but for the spelling of a number with a fraction (orjson writes
``0.00001`` where ``json`` writes ``1e-05``: the same number); YAML the same
document (each entry is written by the same dumper, indented to its place;
only where a long scalar folds can differ, as the dumper counts columns from
the entry, not from the margin).

Each eager part of the JSON is encoded by orjson, in C: the standard
library's encoder has no C path for indented output, and at 10,000 routes it
was most of ``weir translate -o json``'s time (40 s of 52). Text that is not
ASCII, and anything orjson refuses (keys that are not strings, integers
beyond 64 bits), is encoded by ``json`` instead, so that non-ASCII text stays
escaped as ``json`` escapes it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import orjson

Write = Callable[[str], Any]


class LazyMap:
    """A mapping whose ``(key, value)`` entries ``items`` makes as it is written."""

    __slots__ = ("items",)

    def __init__(self, items: Iterable[tuple[str, Any]]) -> None:
        self.items = items


class LazyList:
    """A list whose values ``values`` makes as it is written."""

    __slots__ = ("values",)

    def __init__(self, values: Iterable[Any]) -> None:
        self.values = values


def write_json(data: Any, write: Write) -> None:
    """``json.dumps(data, indent=2)`` and a newline, written piece by piece."""
    _json(data, 0, write)
    write("\n")


def _json(value: Any, depth: int, write: Write) -> None:
    margin = "\n" + "  " * depth
    if isinstance(value, LazyMap | LazyList):
        entries: Iterator[Any] = iter(value.items if isinstance(value, LazyMap) else value.values)
        opening, closing = ("{", "}") if isinstance(value, LazyMap) else ("[", "]")
        write(opening)
        first = True
        for entry in entries:
            write(("" if first else ",") + margin + "  ")
            if isinstance(value, LazyMap):
                key, entry = entry
                write(json.dumps(key) + ": ")
            _json(entry, depth + 1, write)
            first = False
        write(closing if first else margin + closing)
        return
    write(_dumps(value).replace("\n", margin))


def _lazy_default(value: Any) -> Any:
    """orjson's hook for what it cannot encode itself: lazy parts, made as they are reached (and kept
    made, should :func:`_dumps` have to encode the same value again with ``json``)."""
    if isinstance(value, LazyMap):
        value.items = items = list(value.items)
        return dict(items)
    if isinstance(value, LazyList):
        value.values = values = list(value.values)
        return values
    raise TypeError(type(value).__name__)


def _dumps(value: Any) -> str:
    """``json.dumps(eager(value), indent=2)`` (see the module doc for numbers), encoded in C."""
    try:
        text = orjson.dumps(value, default=_lazy_default, option=orjson.OPT_INDENT_2).decode()
    except TypeError:
        text = None
    if text is None or not text.isascii():
        return json.dumps(eager(value), indent=2)
    return text


def write_yaml(data: LazyMap, write: Write, dump: Callable[[Any], str]) -> None:
    """The YAML of ``data`` (a mapping at the top), each eager part written by ``dump``."""
    _yaml_map(data, 0, write, dump)


def _yaml_map(value: LazyMap, indent: int, write: Write, dump: Callable[[Any], str]) -> None:
    for key, entry in value.items:
        if not isinstance(entry, LazyMap | LazyList):
            write(_indented(dump({key: eager(entry)}), indent))
            continue
        # The key's own line as the dumper writes it (quoted if it must be), then the entries.
        head = dump({key: {"": None}}).split("\n", 1)[0]
        written = [False]

        def once(text: str, head: str = head, written: list[bool] = written) -> None:
            if not written[0]:
                write(" " * indent + head + "\n")
                written[0] = True
            write(text)

        if isinstance(entry, LazyMap):
            _yaml_map(entry, indent + 2, once, dump)
        else:
            for item in entry.values:  # a sequence in a mapping is not indented further
                once(_indented(dump([eager(item)]), indent))
        if not written[0]:  # empty: as the dumper writes it
            write(_indented(dump({key: {} if isinstance(entry, LazyMap) else []}), indent))


def eager(value: Any) -> Any:
    """``value`` with its lazy parts made (those inside what is written in one piece)."""
    if isinstance(value, LazyMap):
        return {key: eager(entry) for key, entry in value.items}
    if isinstance(value, LazyList):
        return [eager(entry) for entry in value.values]
    if isinstance(value, dict):
        return {key: eager(entry) for key, entry in value.items()}
    if isinstance(value, list):
        return [eager(entry) for entry in value]
    return value


def _indented(text: str, indent: int) -> str:
    if not indent:
        return text
    pad = " " * indent
    return "".join(pad + line if line.strip() else line for line in text.splitlines(keepends=True))
