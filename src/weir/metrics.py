"""Prometheus metrics: the families weir exposes on its admin endpoint (``/metrics``).

A *collector* is a callable returning :class:`MetricFamily` values; it is
called at scrape time, so a collector reads whatever state it summarises
when asked and keeps no copy. :func:`render` writes families in the
Prometheus text exposition format (version 0.0.4).

Names follow Prometheus conventions: ``weir_`` prefix, base units
(seconds, bytes), ``_total`` for counters.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["Collector", "MetricFamily", "Sample", "render"]

MetricType = Literal["counter", "gauge", "histogram", "untyped"]


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


def render(families: Iterable[MetricFamily]) -> str:
    """The text exposition of ``families`` (one ``# HELP``/``# TYPE`` block each)."""
    lines: list[str] = []
    for family in families:
        lines.append(f"# HELP {family.name} {_escape_help(family.help)}")
        lines.append(f"# TYPE {family.name} {family.type}")
        for sample in family.samples:
            labels = ",".join(f'{key}="{_escape_label(val)}"' for key, val in sample.labels.items())
            head = family.name + sample.name_suffix + (f"{{{labels}}}" if labels else "")
            lines.append(f"{head} {_number(sample.value)}")
    return "\n".join(lines) + "\n" if lines else ""


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
