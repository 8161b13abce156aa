"""Envoy's statistics as weir reads them: which stats, fetched how, renamed into which metric
families (part of :mod:`weir.telemetry`'s ``/metrics``).

Envoy's stats
-------------
:data:`ENVOY_STATS_USED` lists every Envoy stat read here (RE2 patterns,
matched against the whole name); Envoy's bootstrap may keep only these (and
what else it needs) in its stats inclusion list. Cluster stats are named
``cluster.<cluster>.<stat>``, with the cluster name as weir builds it
(``xbackend/NS/NAME``, ``service/NS/NAME/PORT[/tcp|/h2]``, slashes and all),
read against the clusters of the configuration being served
(:class:`StatNames`); a Service's clusters are summed into one series per
Service. A backend's series appear when Envoy creates the stat: with
deferred stat creation, at the cluster's first request. What each family
counts, and from which stat:

=========================================== ===================================================
``weir_backend_requests_total{code_class}`` ``upstream_rq_<1-5>xx``: responses to requests Envoy
                                            routed to the backend, by class, including the
                                            503 Envoy answers itself when the connection or
                                            TLS handshake fails. Envoy creates these only when
                                            the router's dynamic stats are on, and each class
                                            at its first response.
``weir_backend_connect_failures_total``     ``upstream_cx_connect_fail`` (refused, timed out,
                                            TLS handshake failed)
``weir_backend_unavailable_total``          ``upstream_cx_none_healthy``: answered 503 at once,
                                            no address (unresolved name, no ready endpoint)
``weir_egress_refused_total``               ``listener.envoy_internal_weir-egress-denied.``
                                            ``downstream_cx_total``: requests and TCP
                                            connections sent to a name whose every address
                                            is denied (403 or closed; no connection made)
``weir_backend_tls_verify_failures_total``  ``ssl.fail_verify_error`` (``reason="chain"``: not
                                            signed by a trusted CA, expired...),
                                            ``ssl.fail_verify_san`` (``"san"``: the name does
                                            not match), ``ssl.fail_verify_no_cert``
``weir_downstream_requests_total``          ``http.<ADDRESS_PORT>.downstream_rq_<1-5>xx``: every
                                            response on a Gateway socket (all the Gateway
                                            listeners served there; see
                                            ``weir_gateway_listener_info``)
``weir_oauth2_token_fetches_total``         ``http.<ADDRESS_PORT>.credential_injector.oauth2.``
                                            ``token_fetched``: OAuth2 tokens fetched for the
                                            BackendCredentialPolicies of a socket's routes
``weir_oauth2_token_fetch_failures_total``  ``...oauth2.token_fetch_failed_on_<reason>``: fetches
                                            that gave no token, by reason (``bad_response_code``,
                                            ``bad_token``, ``stream_reset``, ``client_secret``,
                                            ``cluster_not_found``)
``weir_credential_refusals_total``          ``http.<ADDRESS_PORT>.credential_injector.failed``:
                                            requests answered 401 because the token (or
                                            static credential's secret) was missing
``weir_backend_sigv4_signed_total``         ``aws_request_signing.signing_added`` and
                                            ``..signing_failed`` (``result``): requests signed
                                            (SigV4) on their way to a backend, or that failed
=========================================== ===================================================

They are counters of the Envoy process: when weir restarts Envoy they start
again from 0, which Prometheus reads as a counter reset.

Fetching them never stalls the control plane: the response is parsed as it
streams in, a chunk (:data:`weir.envoy_admin.READ_SIZE`) per turn of the event loop, with a
deadline (:data:`ENVOY_STATS_TIMEOUT_S`) and a size bound
(:data:`ENVOY_STATS_MAX_BYTES`); scrapes within :data:`ENVOY_STATS_TTL_S` of
each other share one fetch; the page is built and rendered a slice at a time.
Measured at 10,000 XBackends (``bench/metrics_scrape.py``): a scrape takes
about 150 ms, of which Envoy's admin interface about 100 ms, and 50 ms of
weir's CPU, in slices of a few ms. When Envoy does not answer, the page still
has everything else, and ``weir_envoy_stats_up`` is 0.
"""

from __future__ import annotations

import asyncio
import logging
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field

from weir.envoy_admin import EnvoyAdmin
from weir.metrics import (
    MetricFamily,
    Sample,
)
from weir.translate import Translation

__all__ = [
    "ENVOY_STATS_USED",
    "EnvoyStats",
    "EnvoyStatsCache",
    "StatNames",
    "fetch_envoy_stats",
]

log = logging.getLogger("weir.telemetry")  # its records are /metrics' own

# --------------------------------------------------------------------------
# Which Envoy stats, and what they become
# --------------------------------------------------------------------------

_CODE_CLASSES = ("1xx", "2xx", "3xx", "4xx", "5xx")

#: Connections to the endpoint that stands for a name whose addresses are all denied
#: (weir.xds.endpoints.EGRESS_DENIED): one per refused request or TCP connection.
EGRESS_REFUSED_STAT = "listener.envoy_internal_weir-egress-denied.downstream_cx_total"

#: A cluster stat → (family, extra label value or None).
_CLUSTER_STATS: Mapping[str, tuple[str, str | None]] = {
    **{f"upstream_rq_{c}": ("weir_backend_requests_total", c) for c in _CODE_CLASSES},
    "upstream_cx_connect_fail": ("weir_backend_connect_failures_total", None),
    "upstream_cx_none_healthy": ("weir_backend_unavailable_total", None),
    "ssl.fail_verify_error": ("weir_backend_tls_verify_failures_total", "chain"),
    "ssl.fail_verify_san": ("weir_backend_tls_verify_failures_total", "san"),
    "ssl.fail_verify_no_cert": ("weir_backend_tls_verify_failures_total", "no_cert"),
    "aws_request_signing.signing_added": ("weir_backend_sigv4_signed_total", "signed"),
    "aws_request_signing.signing_failed": ("weir_backend_sigv4_signed_total", "failed"),
}

#: The credential injector's stats in a connection manager (``http.<socket>.credential_injector.<stat>``).
_CREDENTIAL_PREFIX = ".credential_injector."
_TOKEN_FAILED_PREFIX = "oauth2.token_fetch_failed_on_"

#: Every Envoy stat :class:`Telemetry` reads (all counters): RE2 patterns matching whole stat names.
ENVOY_STATS_USED: tuple[str, ...] = (
    r"cluster\.(?:xbackend|service)/.+\.(?:upstream_rq_[1-5]xx|upstream_cx_connect_fail"
    r"|upstream_cx_none_healthy|ssl\.fail_verify_(?:error|san|no_cert)"
    r"|aws_request_signing\.signing_(?:added|failed))",
    r"http\..+\.downstream_rq_[1-5]xx",
    r"http\..+\.credential_injector\.(?:failed|oauth2\.(?:token_fetched|token_fetch_failed_on_[a-z_]+))",
    EGRESS_REFUSED_STAT.replace(".", r"\."),
)

#: The admin ``/stats`` filter: the same patterns, anchored (Envoy's filter searches).
_FILTER = "|".join(f"^(?:{pattern})$" for pattern in ENVOY_STATS_USED)

#: The counter families drawn from Envoy's stats: help, label names.
_DATA_PLANE: Mapping[str, tuple[str, tuple[str, ...]]] = {
    "weir_backend_requests_total": (
        "Responses to requests Envoy routed to a backend, by class (including the 503 Envoy answers "
        "when connecting or the TLS handshake fails; the egress guard's refusals are not here).",
        ("kind", "namespace", "name", "code_class"),
    ),
    "weir_backend_connect_failures_total": (
        "Connections to a backend that failed (refused, timed out, or TLS handshake failed).",
        ("kind", "namespace", "name"),
    ),
    "weir_backend_unavailable_total": (
        "Requests answered 503 at once because the backend had no address "
        "(its name did not resolve, or no endpoint is ready).",
        ("kind", "namespace", "name"),
    ),
    "weir_egress_refused_total": (
        "Requests (403) and TCP connections (closed) the egress guard refused because every "
        "address an XBackend's hostname resolved to is in a denied network; no connection was made. "
        "The XBackend's status names the addresses.",
        (),
    ),
    "weir_backend_tls_verify_failures_total": (
        "Backend certificates Envoy refused: reason chain (not issued by a trusted CA, expired, ...), "
        "san (does not carry the expected name), no_cert (none presented).",
        ("kind", "namespace", "name", "reason"),
    ),
    "weir_downstream_requests_total": (
        "Responses Envoy sent on a Gateway socket (ADDRESS:PORT), by class; "
        "weir_gateway_listener_info says which Gateway listeners the socket serves.",
        ("socket", "code_class"),
    ),
    "weir_oauth2_token_fetches_total": (
        "OAuth2 access tokens the gateway fetched (client-credentials grant) for the "
        "BackendCredentialPolicies of the routes on a Gateway socket.",
        ("socket",),
    ),
    "weir_oauth2_token_fetch_failures_total": (
        "OAuth2 token fetches that gave no token, by reason (bad_response_code, bad_token, "
        "stream_reset, client_secret, cluster_not_found); requests needing it are refused meanwhile.",
        ("socket", "reason"),
    ),
    "weir_credential_refusals_total": (
        "Requests on a Gateway socket answered 401 because the credential to add (an OAuth2 token) "
        "was not available; none was sent without it.",
        ("socket",),
    ),
    "weir_backend_sigv4_signed_total": (
        "Requests signed with AWS Signature Version 4 on their way to a backend (result signed), or "
        "whose signing failed (result failed).",
        ("kind", "namespace", "name", "result"),
    ),
}

#: Scrapes this close together share one fetch of Envoy's stats.
ENVOY_STATS_TTL_S = 1.0
#: Give up on Envoy's stats after this long (the rest of the page is still served).
ENVOY_STATS_TIMEOUT_S = 3.0
#: Give up on Envoy's stats past this size (about 400,000 stats as filtered).
ENVOY_STATS_MAX_BYTES = 64 * 1024 * 1024


def _backend(cluster: str) -> tuple[str, str, str] | None:
    """``(kind, namespace, name)`` of a cluster weir builds for a backend, else ``None``."""
    parts = cluster.split("/")
    if parts[0] == "xbackend" and len(parts) == 3:
        return "XBackend", parts[1], parts[2]
    if parts[0] == "service" and len(parts) >= 4:
        return "Service", parts[1], parts[2]
    return None


@dataclass(frozen=True)
class StatNames:
    """The names in Envoy's stats that weir knows, for the configuration being served.

    ``backends``: cluster name → ``(kind, namespace, name)``. Knowing the
    clusters is what makes stat names unambiguous: a name may contain dots
    (``xbackend/default/api.v2``), and with the router's dynamic stats Envoy
    also counts ``cluster.<name>.external.upstream_rq_2xx``, which must not be
    read as cluster ``<name>.external``. ``sockets``: the stat prefix of each
    Gateway socket's HTTP connection manager (``ADDRESS_PORT``) → its name.
    """

    backends: Mapping[str, tuple[str, str, str]] = field(default_factory=dict)
    sockets: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, translation: Translation | None) -> StatNames:
        if translation is None:
            return cls()
        backends = {u.name: b for u in translation.ir.upstreams if (b := _backend(u.name)) is not None}
        sockets = {lst.name.replace(":", "_"): lst.name for lst in translation.ir.listeners}
        return cls(backends, sockets)


# --------------------------------------------------------------------------
# Fetching Envoy's stats
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class EnvoyStats:
    """What one fetch of Envoy's stats gave: ``values[(family, label values)]``, summed.

    ``error`` says why the fetch failed (``values`` is then empty).
    ``duration_s`` is how long it took; ``lines`` how many stats Envoy sent.
    """

    values: Mapping[tuple[str, tuple[str, ...]], float] = field(default_factory=dict)
    error: str | None = None
    duration_s: float = 0.0
    lines: int = 0


class _StatsParser:
    """Envoy's text ``/stats`` (``name: value`` lines), fed in chunks, summed per series."""

    def __init__(self, names: StatNames) -> None:
        self._names = names
        self._partial = b""
        self.values: dict[tuple[str, tuple[str, ...]], float] = {}
        self.lines = 0

    def feed(self, data: bytes) -> None:
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        for line in lines:
            self._line(line.decode("utf-8", "replace"))

    def close(self) -> None:
        if self._partial:
            self._line(self._partial.decode("utf-8", "replace"))
            self._partial = b""

    def _line(self, line: str) -> None:
        name, sep, text = line.partition(": ")
        if not sep:
            return
        try:
            value = float(text)
        except ValueError:
            return  # a histogram summary or a text readout: not ours
        self.lines += 1
        key = self._series(name)
        if key is not None:
            self.values[key] = self.values.get(key, 0.0) + value

    def _series(self, name: str) -> tuple[str, tuple[str, ...]] | None:
        if name.startswith("cluster."):
            head, _, last = name.rpartition(".")
            stat, cluster = last, head
            if stat not in _CLUSTER_STATS:
                head2, _, middle = head.rpartition(".")
                stat, cluster = f"{middle}.{last}", head2
                if stat not in _CLUSTER_STATS:
                    return None
            backend = self._names.backends.get(cluster[len("cluster.") :])
            if backend is None:
                return None  # another cluster, or another stat (external.upstream_rq_2xx)
            family, extra = _CLUSTER_STATS[stat]
            return family, backend if extra is None else (*backend, extra)
        if name == EGRESS_REFUSED_STAT:
            return "weir_egress_refused_total", ()
        if name.startswith("http.") and _CREDENTIAL_PREFIX in name:
            head, _, stat = name.partition(_CREDENTIAL_PREFIX)
            socket = self._names.sockets.get(head[len("http.") :])
            if socket is None:
                return None
            if stat == "oauth2.token_fetched":
                return "weir_oauth2_token_fetches_total", (socket,)
            if stat.startswith(_TOKEN_FAILED_PREFIX):
                return "weir_oauth2_token_fetch_failures_total", (
                    socket,
                    stat.removeprefix(_TOKEN_FAILED_PREFIX),
                )
            if stat == "failed":
                return "weir_credential_refusals_total", (socket,)
            return None
        if name.startswith("http."):
            head, _, stat = name.rpartition(".")
            socket = self._names.sockets.get(head[len("http.") :])
            if socket is None or not stat.startswith("downstream_rq_"):
                return None  # admin, the internal TCP egress listener, or a socket gone
            return "weir_downstream_requests_total", (socket, stat.removeprefix("downstream_rq_"))
        return None


async def fetch_envoy_stats(
    admin: EnvoyAdmin,
    names: StatNames,
    *,
    timeout: float = ENVOY_STATS_TIMEOUT_S,
    max_bytes: int = ENVOY_STATS_MAX_BYTES,
) -> EnvoyStats:
    """Envoy's stats listed in :data:`ENVOY_STATS_USED`, from its admin interface ``admin``.

    ``names`` says which clusters and sockets are weir's backends and Gateway
    sockets. The response is parsed as it arrives; never raises (a failure is
    in :attr:`EnvoyStats.error`).
    """
    started = time.perf_counter()
    # Counters only: Envoy then walks none of its gauges and histograms (a third less of its time).
    target = "/stats?type=Counters&filter=" + urllib.parse.quote(_FILTER, safe="")
    parser = _StatsParser(names)
    try:
        await admin.stream(target, parser.feed, timeout=timeout, max_bytes=max_bytes)
    except (OSError, TimeoutError) as exc:
        reason = str(exc) or type(exc).__name__
        if isinstance(exc, TimeoutError):
            reason = f"no complete answer within {timeout:g} s"
        return EnvoyStats(error=reason, duration_s=time.perf_counter() - started)
    parser.close()
    return EnvoyStats(parser.values, None, time.perf_counter() - started, parser.lines)


class EnvoyStatsCache:
    """Envoy's stats, fetched at most once per ``ttl`` seconds; concurrent callers share a fetch."""

    def __init__(self, ttl: float = ENVOY_STATS_TTL_S) -> None:
        self._ttl = ttl
        self._last: tuple[float, EnvoyAdmin, EnvoyStats] | None = None
        self._pending: asyncio.Task[EnvoyStats] | None = None

    async def get(self, admin: EnvoyAdmin, names: StatNames) -> EnvoyStats:
        now = time.monotonic()
        last = self._last
        if last is not None and last[1] is admin and now - last[0] < self._ttl:
            return last[2]
        if self._pending is None:
            self._pending = asyncio.create_task(self._fetch(admin, names))
        return await asyncio.shield(self._pending)

    async def _fetch(self, admin: EnvoyAdmin, names: StatNames) -> EnvoyStats:
        try:
            stats = await fetch_envoy_stats(admin, names)
            if stats.error:
                log.warning("cannot read Envoy's stats from %s: %s", admin.path, stats.error)
            self._last = (time.monotonic(), admin, stats)
            return stats
        finally:
            self._pending = None


#: Series built between two turns of the event loop.
_SLICE = 1_000


async def _data_plane_families(stats: EnvoyStats) -> list[MetricFamily]:
    """The families drawn from ``stats``, built a slice of series at a time between turns of the loop."""
    grouped: dict[str, list[tuple[tuple[str, ...], float]]] = {name: [] for name in _DATA_PLANE}
    for (family, values), value in stats.values.items():
        grouped[family].append((values, value))
    families: list[MetricFamily] = []
    for name, (help_text, labelnames) in _DATA_PLANE.items():
        rows = sorted(grouped[name])
        samples: list[Sample] = []
        for values, value in rows:
            samples.append(Sample(dict(zip(labelnames, values, strict=True)), value))
            if len(samples) % _SLICE == 0:
                await asyncio.sleep(0)
        families.append(MetricFamily(name, "counter", help_text, tuple(samples)))
    families.append(
        MetricFamily(
            "weir_envoy_stats_up",
            "gauge",
            "1 if Envoy's stats were read for this page, 0 if not (weir's log says why).",
            (Sample({}, 0.0 if stats.error else 1.0),),
        )
    )
    families.append(
        MetricFamily(
            "weir_envoy_stats_fetch_duration_seconds",
            "gauge",
            "How long reading Envoy's stats took for this page (or its last fetch, at most "
            f"{ENVOY_STATS_TTL_S:g} s old).",
            (Sample({}, stats.duration_s),),
        )
    )
    return families
