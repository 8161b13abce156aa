"""What the builders of every kind of Envoy resource share (part of :mod:`weir.xds.build`).

Two things. The names that tie one resource to another: the cluster a route
or TCP proxy points at (:func:`cluster_name`, :data:`UNRESOLVED_CLUSTER`),
the CORS filter that routes configure by name, the key of a cluster's HTTP protocol options.
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
