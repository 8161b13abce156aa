"""What the ADS server counts for ``/metrics``: pushes, ACKs and NACKs per resource type.

The server calls three methods, and nothing else here concerns it:

* :meth:`XdsCounters.pushed` for every response sent to an Envoy (one per
  type per stream; state of the world or delta alike), with the response's
  nonce;
* :meth:`XdsCounters.acked` / :meth:`XdsCounters.nacked` when Envoy answers
  that nonce (stale answers, which the server ignores, are not counted).

The time from a push to its ACK is observed in a histogram. A push whose
answer never comes (Envoy went away, or a newer push superseded it) is
forgotten once :data:`MAX_IN_FLIGHT` newer pushes are waiting, so memory
stays bounded. Type labels are the last segment of the type URL
(``Cluster``, ``Listener``, ``RouteConfiguration``, ``Secret``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from weir.metrics import Counter, Histogram, MetricFamily

__all__ = ["ACK_BUCKETS", "MAX_IN_FLIGHT", "XdsCounters"]

#: Upper bounds (seconds) of the push → ACK histogram. Envoy withholds a CDS
#: ACK while clusters warm (15 s for a missing secret), hence the long tail.
ACK_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

#: Pushes remembered while waiting for their answer.
MAX_IN_FLIGHT = 4096


def type_label(type_url: str) -> str:
    return type_url.rsplit(".", 1)[-1]


class XdsCounters:
    """Counters the ADS server increments; :meth:`collect` is a :data:`weir.metrics.Collector`."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.pushes = Counter(
            "weir_xds_pushes_total",
            "xDS responses sent to Envoy, per resource type (one per type per Envoy stream).",
            ("type",),
        )
        self.acks = Counter(
            "weir_xds_acks_total",
            "xDS responses Envoy accepted (ACK), per resource type.",
            ("type",),
        )
        self.nacks = Counter(
            "weir_xds_nacks_total",
            "xDS responses Envoy rejected (NACK), per resource type; "
            "weir status and the Gateways' Programmed condition carry Envoy's reason.",
            ("type",),
        )
        self.ack_seconds = Histogram(
            "weir_xds_push_ack_duration_seconds",
            "Time from sending an xDS response to Envoy's ACK of it, per resource type.",
            ACK_BUCKETS,
            ("type",),
        )
        self._in_flight: dict[str, tuple[str, float]] = {}

    def pushed(self, type_url: str, nonce: str) -> None:
        label = type_label(type_url)
        self.pushes.inc(label)
        self.acks.touch(label)
        self.nacks.touch(label)
        self._in_flight[nonce] = (label, self._clock())
        while len(self._in_flight) > MAX_IN_FLIGHT:
            del self._in_flight[next(iter(self._in_flight))]

    def acked(self, type_url: str, nonce: str) -> None:
        label = type_label(type_url)
        self.acks.inc(label)
        sent = self._in_flight.pop(nonce, None)
        if sent is not None:
            self.ack_seconds.observe(self._clock() - sent[1], label)

    def nacked(self, type_url: str, nonce: str) -> None:
        self.nacks.inc(type_label(type_url))
        self._in_flight.pop(nonce, None)

    def collect(self) -> Iterator[MetricFamily]:
        yield self.pushes.collect()
        yield self.acks.collect()
        yield self.nacks.collect()
        yield self.ack_seconds.collect()
