"""What the Kubernetes provider counts, for ``/metrics``.

One :class:`KubeMetrics` per provider; the watchers, the status writer, the
event recorder and the provider itself count into it, and
:meth:`KubernetesProvider.collect <weir.providers.kubernetes.provider.KubernetesProvider.collect>`
adds the gauges read at scrape time (leadership, election failing).
"""

from __future__ import annotations

from collections.abc import Iterator

from weir.metrics import Counter, MetricFamily
from weir.providers.kubernetes.api import status_code

__all__ = ["KubeMetrics", "error_code"]


def error_code(exc: BaseException) -> str:
    """The label of a failed call: its HTTP status code, or ``none`` when no answer came."""
    code = status_code(exc)
    return str(code) if code is not None else "none"


class KubeMetrics:
    def __init__(self) -> None:
        self.lists = Counter(
            "weir_kubernetes_lists_total",
            "Lists of a kind from the API server: the first, then one after each expired watch (410) "
            "or lost history, or when a kind not served before is served.",
            ["kind"],
        )
        self.watches = Counter(
            "weir_kubernetes_watch_requests_total",
            "Watch requests made, by kind (the API server ends each after its timeout, a few minutes).",
            ["kind"],
        )
        self.watch_restarts = Counter(
            "weir_kubernetes_watch_restarts_total",
            "Watches that ended early, by kind and reason: expired (410 Gone, listed again), "
            "history_lost (the API server no longer has the version: etcd restored or wiped; listed "
            "again), silent (a dead connection), error (any other failure; retried with backoff), relist "
            "(the kind's CRD changed: listed again).",
            ["kind", "reason"],
        )
        self.status_writes = Counter(
            "weir_kubernetes_status_writes_total",
            "Writes of the status subresource, by kind and result: written, conflict (409: read "
            "again and retried), error.",
            ["kind", "result"],
        )
        self.api_errors = Counter(
            "weir_kubernetes_api_errors_total",
            "Failed API-server calls, by HTTP status code ('none': no answer: connection refused or cut, "
            "timeout).",
            ["code"],
        )
        self.leader_transitions = Counter(
            "weir_kubernetes_leader_transitions_total",
            "Times this replica became the leader (took the Lease).",
        )
        self.events = Counter(
            "weir_kubernetes_events_total",
            "Kubernetes Events weir reported, by result: created, dropped (rate limit), failed.",
            ["result"],
        )
        self.leader_transitions.touch()
        for result in ("created", "dropped", "failed"):
            self.events.touch(result)

    def counters(self) -> Iterator[MetricFamily]:
        for counter in (
            self.lists,
            self.watches,
            self.watch_restarts,
            self.status_writes,
            self.api_errors,
            self.leader_transitions,
            self.events,
        ):
            yield counter.collect()
