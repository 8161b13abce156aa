"""What the builders of every kind of Envoy resource share (part of :mod:`weir.xds.build`).

Two things. The names that tie one resource to another: the cluster a route
or TCP proxy points at (:func:`cluster_name`, :data:`UNRESOLVED_CLUSTER`),
the internal path of guarded TCP traffic (:data:`TCP_EGRESS`,
:func:`tunnel_authority`), the egress guard's RBAC policies, the CORS filter
that routes configure by name, the key of a cluster's HTTP protocol options.
And the small messages every builder uses: the ADS config source, socket
addresses, durations, deterministic packing into ``Any``.

Everything here is pure. :func:`upstream_of` raises :class:`ValueError` for a
backend naming an upstream the IR does not have.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from envoy.config.core.v3 import address_pb2, config_source_pb2
from google.protobuf import any_pb2, duration_pb2

from weir import ir

#: Cluster name used for a backend that failed to resolve. No upstream is ever
#: called this (upstream names contain ``/``), so Envoy answers the route's
#: ``cluster_not_found_response_code`` (500) for that share of requests, as the
#: Gateway API requires; a TCP proxy closes that share of connections.
UNRESOLVED_CLUSTER = "weir-unresolved-backend"


#: The name of the internal listener, its route configuration and the cluster
#: leading to it, through which a TCP listener with a guarded upstream relays
#: its connections (see :func:`weir.xds.listeners.tcp_listener`). No IR name looks like it (IR
#: listener names contain ``:``, upstream names ``/``).
TCP_EGRESS = "weir-tcp-egress"

#: The internal listener (and the cluster leading to it) through which request
#: mirrors to a guarded upstream go (see :func:`weir.xds.listeners.mirror_egress_listener`),
#: and the request header naming the mirror's real cluster there. Envoy's
#: upstream RBAC filter skips requests that have no downstream connection, as
#: mirror copies have none: sent straight to their cluster they passed the
#: guard unchecked. Through this listener they are requests like any other.
MIRROR_EGRESS = "weir-mirror-egress"
MIRROR_CLUSTER_HEADER = "x-weir-mirror-cluster"


#: The egress guard: the RBAC policy that denies a network is named
#: ``EGRESS_POLICY_PREFIX + CIDR``, so Envoy's response code details (in the
#: access log and the 403's body) read
#: ``rbac_access_denied_matched_policy[weir-denied-network:10.0.0.0/8]``.
#: Its counters are ``cluster.<upstream>.rbac.denied`` and ``.allowed`` (the
#: guard is the only RBAC filter on a cluster).
EGRESS_POLICY_PREFIX = "weir-denied-network:"


#: The CORS filter of HTTP listeners; routes configure it under this name.
CORS_FILTER = "envoy.filters.http.cors"


#: The key of a cluster's HTTP protocol options in its
#: ``typed_extension_protocol_options``.
HTTP_PROTOCOL_OPTIONS = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"


def upstream_of(
    route: str, backend: ir.WeightedBackend, upstreams: Mapping[str, ir.Upstream]
) -> ir.Upstream | None:
    if backend.upstream is None:
        return None
    if backend.upstream not in upstreams:
        raise ValueError(f"route {route!r}: unknown upstream {backend.upstream!r}")
    return upstreams[backend.upstream]


def cluster_name(upstream: ir.Upstream | None) -> str:
    return UNRESOLVED_CLUSTER if upstream is None else upstream.name


def guarded(upstream: ir.Upstream) -> bool:
    """Whether ``upstream`` needs a per-request guard in Envoy: never any more.

    External hostnames are EDS clusters whose assignments hold only allowed
    addresses (:mod:`weir.xds.endpoints`), so no path needs the detours
    through :data:`TCP_EGRESS` or :data:`MIRROR_EGRESS` that a per-request
    filter needed.
    """
    return False


def tunnel_authority(name: str) -> str:
    """The ``CONNECT`` authority (and :data:`TCP_EGRESS` domain) of a relay: its name as a valid authority.

    A TCP listener's name (``127.0.0.1:5432``) is one already. A TLS relay's
    (``127.0.0.1:443/db.example.com``, ``127.0.0.1:443/*.example.com``) has a
    ``/``, which an authority cannot carry, and maybe a ``*``, which Envoy
    reads as a wildcard in a domain: ``127.0.0.1:443.db.example.com``,
    ``127.0.0.1:443._.example.com`` (no hostname has a ``_``, and a port has
    no ``.``, so no two relays share one).
    """
    return name.replace("/", ".", 1).replace("*", "_")


def ads() -> Any:
    """The ADS stream, API v3: where every dynamic reference is resolved."""
    return config_source_pb2.ConfigSource(
        ads=config_source_pb2.AggregatedConfigSource(),
        resource_api_version=config_source_pb2.V3,
    )


def socket_address(host: str, port: int) -> Any:
    return address_pb2.Address(socket_address=address_pb2.SocketAddress(address=host, port_value=port))


def duration_ms(ms: int) -> Any:
    return duration_pb2.Duration(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def pack(message: Any) -> Any:
    """Pack deterministically, so maps inside (e.g. the access log format) keep their bytes."""
    packed = any_pb2.Any()
    packed.Pack(message, deterministic=True)
    return packed
