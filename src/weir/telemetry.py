"""weir's ``/metrics``: the control plane's own counters and Envoy's stats, in Prometheus words.

Three sources, one page (:meth:`Telemetry.scrape`):

* **Control plane** — events the controller hands over
  (:meth:`Telemetry.translation`) and state read at scrape time through
  :class:`Sources`: standing configuration problems, published statuses,
  the Envoy process, the ADS server's :class:`~weir.xds.counters.XdsCounters`.
* **Data plane** — Envoy's own statistics, fetched from its admin interface
  at scrape time (:class:`EnvoyStatsCache`) and renamed: Envoy counts where
  the requests are, weir does not count them again.
* **Other collectors** handed to :class:`Telemetry` (e.g. per-tool MCP
  metrics).

Envoy's stats, which of them weir reads and what they become, are
:mod:`weir.envoy_stats`'s.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from weir import __version__
from weir.admin import Text
from weir.api.meta import ObjectKey
from weir.envoy import EnvoyProcess
from weir.envoy_stats import (
    ENVOY_STATS_USED,
    EnvoyStats,
    EnvoyStatsCache,
    StatNames,
    _data_plane_families,
    fetch_envoy_stats,
)
from weir.loader import Problem
from weir.metrics import (
    CONTENT_TYPE,
    Collector,
    Counter,
    Histogram,
    MetricFamily,
    Sample,
    gather,
    render_async,
)
from weir.translate import Translation
from weir.xds.counters import XdsCounters

__all__ = [
    "ENVOY_STATS_USED",
    "EnvoyStats",
    "EnvoyStatsCache",
    "Sources",
    "StatNames",
    "Telemetry",
    "fetch_envoy_stats",
]

log = logging.getLogger("weir.telemetry")

# --------------------------------------------------------------------------
# The control plane
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Sources:
    """What :class:`Telemetry` reads at scrape time; each is called on the event loop, and cheap."""

    #: Standing problems with the input (file, object, field, message).
    problems: Callable[[], Sequence[Problem]]
    #: Published statuses, by object.
    statuses: Callable[[], Mapping[ObjectKey, Mapping[str, Any]]]
    #: The translation being served, if any.
    translation: Callable[[], Translation | None]
    #: The Envoy processes (a standby too, if there is one); their stats are summed.
    envoys: Callable[[], Sequence[EnvoyProcess]]
    #: The ADS server's counters, if it runs.
    xds: Callable[[], XdsCounters | None]
    #: Whether Envoy accepted the configuration being served.
    config_accepted: Callable[[], bool]
    #: Only status entries written by this controller are counted.
    controller_name: str = ""


#: Upper bounds (seconds) of the translation histogram (10,000 routes take seconds).
TRANSLATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Telemetry:
    """The metrics of one weir process.

    The controller calls :meth:`translation` after each translation; the
    admin endpoint awaits :meth:`scrape`. ``collectors`` are added to every
    page as they are.
    """

    def __init__(self, sources: Sources, collectors: Iterable[Collector] = ()) -> None:
        self._sources = sources
        self._collectors = list(collectors)
        #: One cache per Envoy (by admin socket).
        self._envoy_stats: dict[str, EnvoyStatsCache] = {}
        self.translations = Counter(
            "weir_translations_total",
            "Configurations translated (a provider snapshot: translation and xDS build).",
        )
        self.translation_failures = Counter(
            "weir_translation_failures_total",
            "Translations that failed with an internal error; the previous configuration kept "
            "serving (weir status shows the error).",
        )
        self.translation_seconds = Histogram(
            "weir_translation_duration_seconds",
            "Time to translate a provider snapshot and build Envoy's resources.",
            TRANSLATION_BUCKETS,
        )
        self.translations.touch()
        self.translation_failures.touch()
        self._summary: tuple[object, list[MetricFamily]] | None = None
        self._names: tuple[Translation | None, StatNames] | None = None

    def add_collector(self, collector: Collector) -> None:
        self._collectors.append(collector)

    # ---------------------------------------------------------------- events

    def translation(self, seconds: float, *, failed: bool) -> None:
        """One provider snapshot was translated (and built) in ``seconds``, or failed to."""
        self.translations.inc()
        if failed:
            self.translation_failures.inc()
        self.translation_seconds.observe(seconds)

    # ---------------------------------------------------------------- scraping

    async def scrape(self) -> tuple[int, Text]:
        """The page: 200 and every family (Envoy's absent if it did not answer).

        At 10,000 backends the page has tens of thousands of series: the
        data-plane families are built, and the page rendered, a slice at a
        time, so that the event loop (which serves ADS) keeps its turns.
        """
        stats = await self._fetch_envoy_stats()
        data_plane = await _data_plane_families(stats)
        xds = self._sources.xds()
        collectors: list[Collector] = [self._control_plane]
        if xds is not None:
            collectors.append(xds.collect)
        collectors.append(lambda: data_plane)
        collectors.extend(self._collectors)
        body = await render_async(gather(collectors))
        return 200, Text(body, CONTENT_TYPE)

    async def _fetch_envoy_stats(self) -> EnvoyStats:
        """Every ready Envoy's stats, summed (a standby serves part of the traffic)."""
        envoys = [e for e in self._sources.envoys() if e.ready]
        if not envoys:
            return EnvoyStats(error="Envoy is not running")
        translation = self._sources.translation()
        if self._names is None or self._names[0] is not translation:
            self._names = (translation, StatNames.of(translation))
        names = self._names[1]
        for gone in set(self._envoy_stats) - {e.admin.path for e in envoys}:
            del self._envoy_stats[gone]
        caches = [self._envoy_stats.setdefault(e.admin.path, EnvoyStatsCache()) for e in envoys]
        fetched = await asyncio.gather(*(c.get(e.admin, names) for c, e in zip(caches, envoys, strict=True)))
        if len(fetched) == 1:
            return fetched[0]
        values: dict[tuple[str, tuple[str, ...]], float] = {}
        for stats in fetched:
            for key, value in stats.values.items():
                values[key] = values.get(key, 0.0) + value
        errors = [s.error for s in fetched if s.error]
        return EnvoyStats(
            {} if errors else values,
            "; ".join(errors) or None,
            max(s.duration_s for s in fetched),
            sum(s.lines for s in fetched),
        )

    def _control_plane(self) -> Iterator[MetricFamily]:
        src = self._sources
        yield MetricFamily(
            "weir_build_info", "gauge", "weir's version (always 1).", (Sample({"version": __version__}, 1),)
        )
        yield self.translations.collect()
        yield self.translation_failures.collect()
        yield self.translation_seconds.collect()
        severities = {"error": 0, "warning": 0}
        for problem in src.problems():
            severities[problem.severity] = severities.get(problem.severity, 0) + 1
        yield MetricFamily(
            "weir_config_problems",
            "gauge",
            "Standing problems with the input (objects skipped or partly used); weir status lists them.",
            tuple(Sample({"severity": sev}, n) for sev, n in sorted(severities.items())),
        )
        envoys = src.envoys()
        yield MetricFamily(
            "weir_envoy_ready",
            "gauge",
            "1 while Envoy runs and is ready (with a standby: either), else 0.",
            (Sample({}, 1.0 if any(e.ready for e in envoys) else 0.0),),
        )
        reasons: collections.Counter[str] = collections.Counter()
        for envoy in envoys:
            reasons.update(envoy.restart_reasons)
        yield MetricFamily(
            "weir_envoy_restarts_total",
            "counter",
            "Times weir restarted Envoy: reason exited (it exited unexpectedly) or not_serving (it ran "
            "but no longer served the listeners it had accepted, e.g. after drain_listeners).",
            tuple(Sample({"reason": r}, float(reasons.get(r, 0))) for r in ("exited", "not_serving")),
        )
        yield MetricFamily(
            "weir_envoy_config_accepted",
            "gauge",
            "1 when Envoy accepted the configuration being served, 0 while it is pending or rejected.",
            (Sample({}, 1.0 if src.config_accepted() else 0.0),),
        )
        yield from self._status_summary()
        yield self._gateway_sockets()

    def _status_summary(self) -> list[MetricFamily]:
        """Counts over the published statuses, recomputed only when they change."""
        statuses = self._sources.statuses()
        if self._summary is not None and self._summary[0] is statuses:
            return self._summary[1]
        managed: dict[str, int] = {}
        conditions: dict[tuple[str, str, str], int] = {}
        programmed = 0
        mine = self._sources.controller_name
        for key, status in statuses.items():
            managed[key.kind] = managed.get(key.kind, 0) + 1
            lists = [status.get("conditions") or ()]
            for entry in [*(status.get("parents") or ()), *(status.get("ancestors") or ())]:
                if not mine or entry.get("controllerName") in (None, mine):  # not another controller's
                    lists.append(entry.get("conditions") or ())
            for conds in lists:
                for cond in conds:
                    index = (key.kind, str(cond.get("type", "")), str(cond.get("status", "")))
                    conditions[index] = conditions.get(index, 0) + 1
            if key.kind == "Gateway" and any(
                c.get("type") == "Programmed" and c.get("status") == "True" for c in lists[0]
            ):
                programmed += 1
        families = [
            MetricFamily(
                "weir_managed_objects",
                "gauge",
                "Objects weir publishes a status for, per kind.",
                tuple(Sample({"kind": kind}, n) for kind, n in sorted(managed.items())),
            ),
            MetricFamily(
                "weir_gateways_programmed",
                "gauge",
                "Gateways whose Programmed condition is True.",
                (Sample({}, programmed),),
            ),
            MetricFamily(
                "weir_status_conditions",
                "gauge",
                "Conditions in published statuses, per kind, type and status (a route's or policy's "
                "conditions count once per parent Gateway).",
                tuple(
                    Sample({"kind": kind, "type": ctype, "status": cstatus}, n)
                    for (kind, ctype, cstatus), n in sorted(conditions.items())
                ),
            ),
        ]
        self._summary = (statuses, families)
        return families

    def _gateway_sockets(self) -> MetricFamily:
        translation = self._sources.translation()
        samples: list[Sample] = []
        for key, listeners in sorted((translation.gateway_sockets if translation else {}).items()):
            for listener, sockets in sorted(listeners.items()):
                for address, port in sockets:
                    socket = f"[{address}]:{port}" if ":" in address else f"{address}:{port}"
                    labels = {"namespace": key.namespace, "gateway": key.name, "listener": listener}
                    samples.append(Sample({**labels, "socket": socket}, 1))
        return MetricFamily(
            "weir_gateway_listener_info",
            "gauge",
            "1 for each Gateway listener and the socket it is served on "
            "(join with weir_downstream_requests_total on socket).",
            tuple(samples),
        )
