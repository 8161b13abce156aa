"""Prometheus metrics: the families weir exposes on its admin endpoint (``/metrics``).

A *collector* is a callable returning :class:`MetricFamily` values; it is
called at scrape time, so a collector reads whatever state it summarises
when asked and keeps no copy. :func:`gather` runs collectors (one that fails
or returns a malformed family loses only its own families), :func:`render`
writes families in the Prometheus text exposition format (version 0.0.4),
served with :data:`CONTENT_TYPE`.

Names follow Prometheus conventions: ``weir_`` prefix, base units
(seconds, bytes), ``_total`` for counters, labels with few values.

:class:`Counter` and :class:`Histogram` hold values that only weir knows
(events it counts itself); fixed histogram buckets keep a family's series
count known in advance. :func:`parse` reads the text format back, strictly:
tests use it to hold :func:`render` (and every collector) to the format.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, get_args

__all__ = [
    "CONTENT_TYPE",
    "Collector",
    "Counter",
    "Histogram",
    "MetricFamily",
    "ParseError",
    "Sample",
    "gather",
    "gauge",
    "parse",
    "render",
    "render_async",
    "render_lines",
]

log = logging.getLogger("weir.metrics")

MetricType = Literal["counter", "gauge", "histogram", "untyped"]

#: The ``Content-Type`` of :func:`render`'s output.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_SUFFIXES: Mapping[str, tuple[str, ...]] = {
    "counter": ("",),
    "gauge": ("",),
    "untyped": ("",),
    "histogram": ("_bucket", "_sum", "_count"),
}


@dataclass(frozen=True, slots=True)
class Sample:
    """One line of a family: ``name_suffix`` is ``""``, ``"_bucket"``, ``"_sum"`` or ``"_count"``."""

    labels: Mapping[str, str]
    value: float
    name_suffix: str = ""


@dataclass(frozen=True, slots=True)
class MetricFamily:
    name: str
    type: MetricType
    help: str
    samples: tuple[Sample, ...] = field(default_factory=tuple)


Collector = Callable[[], Iterable[MetricFamily]]


def gauge(name: str, help: str, values: Mapping[tuple[tuple[str, str], ...], float]) -> MetricFamily:
    """A gauge family from ``{((label, value), ...): number}``."""
    samples = tuple(Sample(dict(labels), value) for labels, value in values.items())
    return MetricFamily(name, "gauge", help, samples)


# --------------------------------------------------------------------------
# Values weir counts itself
# --------------------------------------------------------------------------


class Counter:
    """A counter with fixed label names; a series appears at its first :meth:`inc`.

    Use :meth:`touch` for label values known in advance, so that their series
    start at 0 (a series that appears at 1 hides its first increment from
    ``rate()``).
    """

    def __init__(self, name: str, help: str, labelnames: Sequence[str] = ()) -> None:
        _check_names(name, labelnames)
        self.name, self.help, self.labelnames = name, help, tuple(labelnames)
        self._values: dict[tuple[str, ...], float] = {}

    def inc(self, *labelvalues: str, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError(f"{self.name}: a counter only goes up (got {amount})")
        key = self._key(labelvalues)
        self._values[key] = self._values.get(key, 0.0) + amount

    def touch(self, *labelvalues: str) -> None:
        self._values.setdefault(self._key(labelvalues), 0.0)

    def value(self, *labelvalues: str) -> float:
        return self._values.get(self._key(labelvalues), 0.0)

    def collect(self) -> MetricFamily:
        samples = tuple(
            Sample(dict(zip(self.labelnames, key, strict=True)), value)
            for key, value in sorted(self._values.items())
        )
        return MetricFamily(self.name, "counter", self.help, samples)

    def _key(self, labelvalues: tuple[str, ...]) -> tuple[str, ...]:
        if len(labelvalues) != len(self.labelnames):
            raise ValueError(f"{self.name} takes labels {self.labelnames}, got {labelvalues}")
        return labelvalues


class Histogram:
    """A histogram with fixed, increasing ``buckets`` (upper bounds; ``+Inf`` is implied)."""

    def __init__(
        self, name: str, help: str, buckets: Sequence[float], labelnames: Sequence[str] = ()
    ) -> None:
        _check_names(name, labelnames)
        if "le" in labelnames:
            raise ValueError(f"{name}: 'le' is the bucket label of a histogram")
        bounds = tuple(float(b) for b in buckets if not math.isinf(b))
        if not bounds or any(a >= b for a, b in itertools.pairwise(bounds)):
            raise ValueError(f"{name}: buckets must be increasing and not empty, got {buckets}")
        self.name, self.help, self.labelnames, self.buckets = name, help, tuple(labelnames), bounds
        # Per label values: a count per bucket (not cumulative), then the sum.
        self._series: dict[tuple[str, ...], tuple[list[int], list[float]]] = {}

    def observe(self, value: float, *labelvalues: str) -> None:
        if len(labelvalues) != len(self.labelnames):
            raise ValueError(f"{self.name} takes labels {self.labelnames}, got {labelvalues}")
        counts, total = self._series.setdefault(labelvalues, ([0] * (len(self.buckets) + 1), [0.0]))
        index = next((i for i, bound in enumerate(self.buckets) if value <= bound), len(self.buckets))
        counts[index] += 1
        total[0] += value

    def count(self, *labelvalues: str) -> int:
        series = self._series.get(labelvalues)
        return sum(series[0]) if series else 0

    def collect(self) -> MetricFamily:
        samples: list[Sample] = []
        for key, (counts, total) in sorted(self._series.items()):
            labels = dict(zip(self.labelnames, key, strict=True))
            running = 0
            for bound, count in zip([*self.buckets, math.inf], counts, strict=True):
                running += count
                samples.append(Sample({**labels, "le": _le(bound)}, running, "_bucket"))
            samples.append(Sample(labels, total[0], "_sum"))
            samples.append(Sample(labels, running, "_count"))
        return MetricFamily(self.name, "histogram", self.help, tuple(samples))


def _check_names(name: str, labelnames: Sequence[str]) -> None:
    if not _NAME.fullmatch(name):
        raise ValueError(f"invalid metric name {name!r}")
    for label in labelnames:
        if not _LABEL_NAME.fullmatch(label) or label.startswith("__"):
            raise ValueError(f"{name}: invalid label name {label!r}")


def _le(bound: float) -> str:
    return "+Inf" if math.isinf(bound) else repr(float(bound))


# --------------------------------------------------------------------------
# Gathering and rendering
# --------------------------------------------------------------------------


def gather(collectors: Iterable[Collector], taken: set[str] | None = None) -> list[MetricFamily]:
    """Every family of ``collectors``, in order.

    A collector that raises is logged and skipped; a family with an invalid
    name or labels, or whose name an earlier family (or ``taken``, which is
    updated) took, is logged and dropped. The other families are still served.
    """
    families: list[MetricFamily] = []
    seen: set[str] = taken if taken is not None else set()
    for collector in collectors:
        try:
            produced = list(collector())
        except Exception:
            log.exception("metrics collector %r failed; its families are left out of this scrape", collector)
            continue
        for family in produced:
            problem = _family_problem(family, seen)
            if problem:
                log.error("metric family %r left out: %s", family.name, problem)
                continue
            seen.add(family.name)
            families.append(family)
    return families


def _family_problem(family: MetricFamily, seen: set[str]) -> str | None:
    if not _NAME.fullmatch(family.name):
        return "invalid metric name"
    if family.name in seen:
        return "another collector already produced a family of that name"
    if family.type not in _SUFFIXES:
        return f"unknown type {family.type!r}"
    suffixes = _SUFFIXES[family.type]
    checked: set[tuple[str, ...]] = set()  # the samples of a family mostly share their label names
    for sample in family.samples:
        if sample.name_suffix not in suffixes:
            return f"a {family.type} has no samples named {family.name}{sample.name_suffix}"
        names = tuple(sample.labels)
        if names in checked:
            continue
        for label in names:
            if not _LABEL_NAME.fullmatch(label) or label.startswith("__"):
                return f"invalid label name {label!r}"
        checked.add(names)
    return None


def render(families: Iterable[MetricFamily]) -> str:
    """The text exposition of ``families`` (one ``# HELP``/``# TYPE`` block each)."""
    return "".join(line + "\n" for family in families for line in render_lines(family))


async def render_async(families: Iterable[MetricFamily], every: int = 1000) -> str:
    """:func:`render`, giving the event loop a turn every ``every`` lines (large pages)."""
    lines: list[str] = []
    for family in families:
        for line in render_lines(family):
            lines.append(line + "\n")
            if len(lines) % every == 0:
                await asyncio.sleep(0)
    return "".join(lines)


def render_lines(family: MetricFamily) -> Iterator[str]:
    """The lines of one family, without their newlines."""
    yield f"# HELP {family.name} {_escape_help(family.help)}"
    yield f"# TYPE {family.name} {family.type}"
    for sample in family.samples:
        labels = ",".join(f'{key}="{_escape_label(val)}"' for key, val in sample.labels.items())
        head = family.name + sample.name_suffix + (f"{{{labels}}}" if labels else "")
        yield f"{head} {_number(sample.value)}"


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _escape_label(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


# --------------------------------------------------------------------------
# Reading the text format back (strict)
# --------------------------------------------------------------------------


class ParseError(ValueError):
    """The text is not valid exposition format; the message names the line."""


_SAMPLE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)(?: (-?[0-9]+))?")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"')
_UNESCAPE = re.compile(r"\\(.)")
_ESCAPED_HELP = re.compile(r"(?:[^\\\n]|\\[\\n])*")
_ESCAPED_LABEL = re.compile(r'(?:[^"\\\n]|\\[\\"n])*')


def parse(text: str) -> list[MetricFamily]:
    """The families of ``text``, checked strictly against the text format 0.0.4.

    Beyond the grammar (names, label syntax and escapes, numbers), it
    requires what a well-formed exposition has: ``# HELP`` then ``# TYPE``
    before a family's samples, each family once, samples named after their
    family (``_bucket``/``_sum``/``_count`` for histograms), no series twice,
    counters not negative, and for each histogram series increasing ``le``
    bounds ending in ``+Inf``, cumulative counts, ``_count`` equal to the
    ``+Inf`` bucket, and a ``_sum``. Raises :class:`ParseError`.
    """
    if text and not text.endswith("\n"):
        raise ParseError("the last line does not end with a newline")
    families: list[MetricFamily] = []
    done: set[str] = set()
    current: _Building | None = None
    for number, line in enumerate(text.split("\n")[:-1], start=1):
        where = f"line {number}"
        if line.startswith("# HELP "):
            name, _, help_text = line[7:].partition(" ")
            if not _NAME.fullmatch(name):
                raise ParseError(f"{where}: invalid metric name {name!r}")
            if name in done or (current is not None and current.name == name):
                raise ParseError(f"{where}: family {name} appears twice")
            if current is not None:
                families.append(current.finish())
                done.add(current.name)
            current = _Building(name, _unescape(help_text, where, quotes=False))
        elif line.startswith("# TYPE "):
            name, _, kind = line[7:].partition(" ")
            if current is None or current.name != name or current.type is not None:
                raise ParseError(f"{where}: # TYPE {name} does not follow its # HELP")
            if kind not in get_args(MetricType):
                raise ParseError(f"{where}: unknown type {kind!r}")
            current.type = kind  # type: ignore[assignment]
        elif line.startswith("#"):
            continue  # a comment
        elif not line.strip():
            raise ParseError(f"{where}: empty line")
        else:
            if current is None or current.type is None:
                raise ParseError(f"{where}: a sample before its family's # HELP and # TYPE")
            current.add(line, where)
    if current is not None:
        families.append(current.finish())
    return families


@dataclass
class _Building:
    name: str
    help: str
    type: MetricType | None = None
    samples: list[Sample] = field(default_factory=list)
    series: set[tuple[str, tuple[tuple[str, str], ...]]] = field(default_factory=set)

    def add(self, line: str, where: str) -> None:
        match = _SAMPLE.fullmatch(line)
        if match is None:
            raise ParseError(f"{where}: not a sample line: {line!r}")
        name, label_text, value_text, _timestamp = match.groups()
        assert self.type is not None
        suffix = name[len(self.name) :] if name.startswith(self.name) else None
        if suffix is None or suffix not in _SUFFIXES[self.type]:
            raise ParseError(f"{where}: sample {name} in family {self.name} ({self.type})")
        labels = _parse_labels(label_text or "", where)
        key = (name, tuple(sorted(labels.items())))
        if key in self.series:
            raise ParseError(f"{where}: series {name}{dict(key[1])} appears twice")
        self.series.add(key)
        value = _parse_value(value_text, where)
        if self.type == "counter" and value < 0:
            raise ParseError(f"{where}: counter {name} is negative")
        if suffix == "_bucket" and "le" not in labels:
            raise ParseError(f"{where}: bucket without an 'le' label")
        self.samples.append(Sample(labels, value, suffix))

    def finish(self) -> MetricFamily:
        if self.type is None:
            raise ParseError(f"family {self.name} has # HELP but no # TYPE")
        if self.type == "histogram":
            _check_histogram(self.name, self.samples)
        return MetricFamily(self.name, self.type, self.help, tuple(self.samples))


def _parse_labels(text: str, where: str) -> dict[str, str]:
    labels: dict[str, str] = {}
    position = 0
    while position < len(text):
        match = _LABEL.match(text, position)
        if match is None:
            raise ParseError(f"{where}: malformed labels at {text[position:]!r}")
        name, raw = match.groups()
        if name in labels or name.startswith("__"):
            raise ParseError(f"{where}: label {name!r} repeated or reserved")
        labels[name] = _unescape(raw, where, quotes=True)
        position = match.end()
        if position < len(text):
            if text[position] != ",":
                raise ParseError(f"{where}: expected ',' between labels in {text!r}")
            position += 1
    return labels


def _unescape(text: str, where: str, *, quotes: bool) -> str:
    """``text`` with its escapes resolved: ``\\\\`` and ``\\n``, and ``\\"`` in label values."""
    valid = _ESCAPED_LABEL if quotes else _ESCAPED_HELP
    if not valid.fullmatch(text):
        raise ParseError(f"{where}: invalid escape in {text!r}")
    return _UNESCAPE.sub(lambda m: "\n" if m.group(1) == "n" else m.group(1), text)


def _parse_value(text: str, where: str) -> float:
    if text in ("+Inf", "-Inf", "NaN"):
        return float(text.lower().replace("+", ""))
    if not re.fullmatch(r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?", text):
        raise ParseError(f"{where}: invalid value {text!r}")
    return float(text)


def _check_histogram(name: str, samples: Sequence[Sample]) -> None:
    series: dict[tuple[tuple[str, str], ...], dict[str, list[Sample]]] = {}
    for sample in samples:
        labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "le"))
        series.setdefault(labels, {"_bucket": [], "_sum": [], "_count": []})[sample.name_suffix].append(
            sample
        )
    for labels, parts in series.items():
        what = f"histogram {name}{dict(labels)}"
        buckets = parts["_bucket"]
        if not buckets or buckets[-1].labels["le"] != "+Inf":
            raise ParseError(f'{what}: the last bucket is not le="+Inf"')
        bounds = [_parse_value(b.labels["le"], what) for b in buckets]
        if any(a >= b for a, b in itertools.pairwise(bounds)):
            raise ParseError(f"{what}: bucket bounds are not increasing")
        if any(a.value > b.value for a, b in itertools.pairwise(buckets)):
            raise ParseError(f"{what}: bucket counts are not cumulative")
        if len(parts["_count"]) != 1 or parts["_count"][0].value != buckets[-1].value:
            raise ParseError(f"{what}: _count is missing or differs from the +Inf bucket")
        if len(parts["_sum"]) != 1:
            raise ParseError(f"{what}: _sum is missing")
