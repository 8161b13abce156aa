"""External hostnames' endpoints: what Envoy may connect to, decided by weir (part of :mod:`weir.xds.build`).

An upstream that is an external hostname (:class:`weir.ir.DnsName`) is an
EDS cluster (:func:`weir.xds.clusters.upstream_cluster`): weir resolves the
name itself (:class:`weir.resolver.Resolver`) and serves, for each such
cluster, a ``ClusterLoadAssignment`` holding only the addresses its egress
policy allows (:func:`load_assignment`). A denied address never reaches
Envoy, so nothing that opens an upstream connection (a route, a retry, a
mirror, a TCP proxy, a WebSocket upgrade, any future feature) can use it,
and no request pays for a check.

When every address of a name is denied, the assignment holds one endpoint
instead: the internal listener :data:`EGRESS_DENIED` (plain, whatever the
cluster's TLS: :data:`DENIED_SOCKET_MATCH` picks the cluster's raw
transport socket for it), which answers every HTTP request 403 with the
reason (a gRPC call gets ``PERMISSION_DENIED``), and closes a TCP
proxy's connection without a byte. Clients so get the refusal they got
from the former per-request guard, and the cluster is never without an
endpoint. (UDP upstreams are Services' own endpoints, never external names.)

Every endpoint carries the hostname (``Endpoint.hostname``): Envoy uses it
for ``auto_host_rewrite`` and for health-check and log output, as it did
with DNS clusters. SNI and certificate checks come from the cluster's TLS
settings, which do not depend on the assignment.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from envoy.config.endpoint.v3 import endpoint_components_pb2, endpoint_pb2
from envoy.config.listener.v3 import listener_components_pb2, listener_pb2
from envoy.extensions.filters.network.direct_response.v3 import config_pb2 as direct_response_pb2

from weir import ir
from weir.xds.common import pack, socket_address

#: The internal listener that stands for a name whose every address is denied (no IR
#: name looks like it: listener names contain ``:``, upstream names ``/``).
EGRESS_DENIED = "weir-egress-denied"

#: How Envoy writes the address of the :data:`EGRESS_DENIED` endpoint (``%UPSTREAM_HOST%``,
#: CEL ``upstream.address``): then its ``endpoint_id``, :func:`denied_reason`.
DENIED_HOST_PREFIX = f"envoy://{EGRESS_DENIED}/"


def load_assignment(
    cluster: str,
    hostname: str,
    port: int,
    allowed: Sequence[str],
    denied: Sequence[tuple[str, str]] = (),
    *,
    protocol: ir.UpstreamProtocol = ir.UpstreamProtocol.HTTP1,
) -> Any:
    """The assignment of ``cluster``: ``allowed`` addresses on ``port``; only denied: :data:`EGRESS_DENIED`.

    A name without addresses (``NXDOMAIN``, an empty answer) has no
    endpoint: Envoy answers 503, as for any backend without an address.

    ``allowed`` is in the resolver's order; the endpoints are sorted, so an
    answer that only changes order is the same resource (and no push).
    ``denied`` (``(address, network)``) is what the refusal names. A ``UDP``
    upstream gets no endpoint at all instead (datagrams to it are dropped).
    """
    assignment = endpoint_pb2.ClusterLoadAssignment(cluster_name=cluster)
    endpoints = []
    for address in sorted(set(allowed)):
        endpoint = endpoint_components_pb2.Endpoint(address=socket_address(address, port), hostname=hostname)
        endpoints.append(endpoint_components_pb2.LbEndpoint(endpoint=endpoint))
    if not endpoints and denied and protocol is not ir.UpstreamProtocol.UDP:
        endpoint = endpoint_components_pb2.Endpoint(hostname=hostname)
        endpoint.address.envoy_internal_address.server_listener_name = EGRESS_DENIED
        endpoint.address.envoy_internal_address.endpoint_id = denied_reason(port, denied)
        endpoints.append(endpoint_components_pb2.LbEndpoint(endpoint=endpoint))
    if endpoints:
        assignment.endpoints.add(lb_endpoints=endpoints)
    return assignment


def denied_reason(port: int, denied: Sequence[tuple[str, str]]) -> str:
    """What the :data:`EGRESS_DENIED` endpoint says (its ``endpoint_id``): each address and its network."""
    shown = [f"{_host_port(address, port)} in {network}" for address, network in sorted(denied)]
    return ", ".join(shown) or "no address"


def _host_port(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def egress_denied_listener() -> Any:
    """The internal listener :data:`EGRESS_DENIED`: closes every connection at once, sending nothing.

    (A network direct response without data closes the connection.) A TCP
    client's connection is then closed by its TCP proxy with no byte
    relayed; an HTTP request's upstream is reset before any response, and
    the connection manager's local reply mapper turns that 503 into the 403
    naming the refused addresses (:func:`weir.xds.listeners._local_replies`:
    it knows the answer by the upstream host's address, which begins with
    :data:`DENIED_HOST_PREFIX`). Whatever the cluster's transport socket
    (TLS, ALPN), nothing is ever exchanged.
    """
    out = listener_pb2.Listener(
        name=EGRESS_DENIED,
        filter_chains=[
            listener_components_pb2.FilterChain(
                filters=[
                    listener_components_pb2.Filter(
                        name="envoy.filters.network.direct_response",
                        typed_config=pack(direct_response_pb2.Config()),
                    )
                ]
            )
        ],
    )
    out.internal_listener.SetInParent()
    return out
