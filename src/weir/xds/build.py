"""IR → Envoy v3 resources. The only module in weir that knows Envoy's field names.

:func:`build` turns an :class:`~weir.ir.IR` into the listeners, route
configurations, clusters and secrets that :mod:`weir.xds.server` serves over
ADS. It is a pure function: no I/O, no clock, no randomness. The same IR gives
resources that serialise (``deterministic=True``) to the same bytes, and the
order of IR collections whose order carries no meaning (listeners, upstreams,
secrets, virtual hosts, domains, header conditions, endpoints, SANs) does not
change the output. Route order and backend order are kept: they are semantic.

:func:`to_data` renders built resources as plain, sorted data for golden files
and ``weir translate`` output, with private key material redacted.

Every resource is named after its IR object, verbatim, so a reader can follow
a name from the IR to Envoy's ``/config_dump``. The route configuration of an
HTTP listener carries the listener's name, that of an HTTPS server of a TLS
listener the server's. One set of resources has no IR
counterpart: :data:`TCP_EGRESS`, the internal path through which TCP
listeners reach guarded upstreams (see :func:`_tcp_listener`).
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Iterable, Mapping
from typing import Any, cast

from envoy.config.accesslog.v3 import accesslog_pb2
from envoy.config.cluster.v3 import circuit_breaker_pb2, cluster_pb2
from envoy.config.common.mutation_rules.v3 import mutation_rules_pb2
from envoy.config.core.v3 import address_pb2, base_pb2, config_source_pb2, extension_pb2
from envoy.config.core.v3 import substitution_format_string_pb2 as format_pb2
from envoy.config.endpoint.v3 import endpoint_components_pb2, endpoint_pb2
from envoy.config.listener.v3 import listener_components_pb2, listener_pb2
from envoy.config.rbac.v3 import rbac_pb2
from envoy.config.route.v3 import route_components_pb2, route_pb2
from envoy.extensions.access_loggers.filters.cel.v3 import cel_pb2
from envoy.extensions.access_loggers.stream.v3 import stream_pb2
from envoy.extensions.clusters.common.dns.v3 import dns_pb2
from envoy.extensions.clusters.dns.v3 import dns_cluster_pb2
from envoy.extensions.filters.http.cors.v3 import cors_pb2
from envoy.extensions.filters.http.header_mutation.v3 import header_mutation_pb2
from envoy.extensions.filters.http.rbac.v3 import rbac_pb2 as rbac_filter_pb2
from envoy.extensions.filters.http.router.v3 import router_pb2
from envoy.extensions.filters.http.upstream_codec.v3 import upstream_codec_pb2
from envoy.extensions.filters.listener.tls_inspector.v3 import tls_inspector_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm_pb2,
)
from envoy.extensions.filters.network.tcp_proxy.v3 import tcp_proxy_pb2
from envoy.extensions.network.dns_resolver.cares.v3 import cares_dns_resolver_pb2
from envoy.extensions.rbac.matchers.upstream_ip_port.v3 import upstream_ip_port_matcher_pb2
from envoy.extensions.transport_sockets.tls.v3 import common_pb2, secret_pb2, tls_pb2
from envoy.extensions.upstreams.http.v3 import http_protocol_options_pb2
from envoy.type.matcher.v3 import regex_pb2, string_pb2
from envoy.type.v3 import percent_pb2
from google.protobuf import any_pb2, duration_pb2, json_format, struct_pb2, wrappers_pb2
from google.protobuf.message import Message

from weir import ir
from weir.xds.snapshot import CLUSTER, LISTENER, PUSH_ORDER, ROUTE, SECRET

__all__ = ["EXTERNAL_REQUEST_HEADERS_TO_REMOVE", "TCP_EGRESS", "UNRESOLVED_CLUSTER", "build", "to_data"]

#: Cluster name used for a backend that failed to resolve. No upstream is ever
#: called this (upstream names contain ``/``), so Envoy answers the route's
#: ``cluster_not_found_response_code`` (500) for that share of requests, as the
#: Gateway API requires; a TCP proxy closes that share of connections.
UNRESOLVED_CLUSTER = "weir-unresolved-backend"

#: The name of the internal listener, its route configuration and the cluster
#: leading to it, through which a TCP listener with a guarded upstream relays
#: its connections (see :func:`_tcp_listener`). No IR name looks like it (IR
#: listener names contain ``:``, upstream names ``/``).
TCP_EGRESS = "weir-tcp-egress"

#: Headers removed from requests sent to an upstream with ``host_header`` (an
#: external hostname): the design promises such requests carry no ``x-envoy-*``
#: headers and no internal addressing. Before routing, the connection manager
#: sets ``x-forwarded-for`` (with ``use_remote_address``, the client address or,
#: for a loopback client, this host's), ``x-forwarded-proto``, and
#: ``x-envoy-external-address`` or ``x-envoy-internal``; the route removes them,
#: client-sent copies included. The router's later
#: ``x-envoy-expected-rq-timeout-ms`` is stopped by ``suppress_envoy_headers``.
#: The ``original-*`` ones are defence in depth for rewrites weir may grow.
#: ``x-request-id`` is not generated (``generate_request_id: false``) but a
#: client's own would pass. Headers a client invents under the same prefixes
#: (``x-envoy-anything``, ``x-forwarded-host``) cannot be listed here: the
#: external upstream's cluster removes them by prefix (see
#: :data:`EXTERNAL_HEADER_PREFIXES_TO_REMOVE`).
EXTERNAL_REQUEST_HEADERS_TO_REMOVE = (
    "x-envoy-external-address",
    "x-envoy-internal",
    "x-envoy-original-host",
    "x-envoy-original-path",
    "x-forwarded-for",
    "x-forwarded-proto",
    "x-request-id",
)

#: Request headers an external upstream's cluster removes, last thing before
#: the request is encoded, whoever set them (client, connection manager or
#: router): every name with one of these prefixes, and ``forwarded``
#: (RFC 7239, the standard spelling of ``x-forwarded-*``) and ``x-request-id``.
EXTERNAL_HEADER_PREFIXES_TO_REMOVE = ("x-envoy-", "x-forwarded-")
EXTERNAL_HEADERS_TO_REMOVE = ("forwarded", "x-request-id")

#: The egress guard: the RBAC policy that denies a network is named
#: ``EGRESS_POLICY_PREFIX + CIDR``, so Envoy's response code details (in the
#: access log and the 403's body) read
#: ``rbac_access_denied_matched_policy[weir-denied-network:10.0.0.0/8]``.
#: Its counters are ``cluster.<upstream>.rbac.denied`` and ``.allowed`` (the
#: guard is the only RBAC filter on a cluster).
EGRESS_POLICY_PREFIX = "weir-denied-network:"
#: The body of the 403 a client gets when the guard refuses a request.
EGRESS_DENIED_BODY = (
    "weir egress guard: %UPSTREAM_CLUSTER% resolved to %UPSTREAM_HOST%, which is in a denied "
    "network; no connection was made (%RESPONSE_CODE_DETAILS%)\n"
)

#: JSON access log fields; the ones that explain a failure are included
#: (flags, details, upstream host and transport failure reason). Each one is a
#: single format command, so Envoy emits numbers as JSON numbers.
ACCESS_LOG_FORMAT = {
    "start_time": "%START_TIME%",
    "method": "%REQ(:METHOD)%",
    "authority": "%REQ(:AUTHORITY)%",
    "path": "%REQ(:PATH)%",
    "protocol": "%PROTOCOL%",
    "response_code": "%RESPONSE_CODE%",
    "response_flags": "%RESPONSE_FLAGS%",
    "response_code_details": "%RESPONSE_CODE_DETAILS%",
    "route_name": "%ROUTE_NAME%",
    "upstream_cluster": "%UPSTREAM_CLUSTER%",
    "upstream_host": "%UPSTREAM_HOST%",
    "upstream_protocol": "%UPSTREAM_PROTOCOL%",
    "upstream_transport_failure_reason": "%UPSTREAM_TRANSPORT_FAILURE_REASON%",
    "duration_ms": "%DURATION%",
    "bytes_received": "%BYTES_RECEIVED%",
    "bytes_sent": "%BYTES_SENT%",
    "downstream_remote_address": "%DOWNSTREAM_REMOTE_ADDRESS%",
}

#: JSON access log fields of TCP listeners (one line per connection, when it
#: ends). For a listener relayed through :data:`TCP_EGRESS`, ``upstream_cluster``
#: is that internal cluster; the internal listener's own line (HTTP fields,
#: method ``CONNECT``, authority the TCP listener's name) names the real
#: upstream, its address, and the guard's refusal in ``response_code_details``.
TCP_ACCESS_LOG_FORMAT = {
    "start_time": "%START_TIME%",
    "listener": "%DOWNSTREAM_LOCAL_ADDRESS%",
    "response_flags": "%RESPONSE_FLAGS%",
    "connection_termination_details": "%CONNECTION_TERMINATION_DETAILS%",
    "upstream_cluster": "%UPSTREAM_CLUSTER%",
    "upstream_host": "%UPSTREAM_HOST%",
    "upstream_transport_failure_reason": "%UPSTREAM_TRANSPORT_FAILURE_REASON%",
    "duration_ms": "%DURATION%",
    "bytes_received": "%BYTES_RECEIVED%",
    "bytes_sent": "%BYTES_SENT%",
    "downstream_remote_address": "%DOWNSTREAM_REMOTE_ADDRESS%",
}

_HTTP_OPTIONS = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
#: ``Forward.unresolved_status`` as a route's ``cluster_not_found_response_code`` (a gRPC
#: request gets it as a gRPC status: 503 is ``UNAVAILABLE``).
_UNRESOLVED_CODES = {
    500: route_components_pb2.RouteAction.INTERNAL_SERVER_ERROR,
    503: route_components_pb2.RouteAction.SERVICE_UNAVAILABLE,
}
#: The CORS filter of HTTP listeners; routes configure it under this name.
CORS_FILTER = "envoy.filters.http.cors"
_TLS_VERSIONS = {"1.2": common_pb2.TlsParameters.TLSv1_2, "1.3": common_pb2.TlsParameters.TLSv1_3}
_SAN_TYPES = {
    "DNS": common_pb2.SubjectAltNameMatcher.DNS,
    "URI": common_pb2.SubjectAltNameMatcher.URI,
}


def build(ir_: ir.IR) -> dict[str, dict[str, Message]]:
    """Envoy resources for ``ir_``: type URL → resource name → message.

    All four type URLs of :mod:`weir.xds.snapshot` are present, possibly
    empty; names are inserted in sorted order. Raises :class:`ValueError` when
    the IR breaks its own contract (a duplicate name, a reference to an
    upstream or secret that does not exist or is of the wrong kind, TLS
    without a trust source or without names to verify): such an IR is a bug
    in translation, and serving it could be insecure or fail silently.
    """
    upstreams = _unique("upstream", ir_.upstreams)
    secrets = _unique("secret", ir_.secrets)
    listeners = _unique("listener", ir_.listeners)
    for upstream in upstreams.values():
        if upstream.tls is not None:
            _check_tls(upstream.name, upstream.tls, secrets)
        if upstream.websocket and upstream.protocol is not ir.UpstreamProtocol.HTTP1:
            raise ValueError(f"upstream {upstream.name!r}: WebSocket upgrades need HTTP/1.1")

    out: dict[str, dict[str, Message]] = {type_url: {} for type_url in PUSH_ORDER}
    tunneled: list[ir.TcpListener | ir.TlsRelay] = []
    for name in sorted(listeners):
        listener = listeners[name]
        if isinstance(listener, ir.TcpListener):
            chosen = _tcp_upstreams(listener, upstreams)
            tunnel = any(_guarded(u) for u in chosen if u is not None)
            out[LISTENER][name] = _tcp_listener(listener, chosen, tunnel=tunnel)
            if tunnel:
                tunneled.append(listener)
        elif isinstance(listener, ir.TlsListener):
            _check_tls_listener(listener, secrets)
            relays = {relay.name: _tcp_upstreams(relay, upstreams) for relay in listener.relays}
            tunnels = {n for n, chosen in relays.items() if any(_guarded(u) for u in chosen if u is not None)}
            out[LISTENER][name] = _tls_listener(listener, relays, tunnels)
            tunneled.extend(relay for relay in listener.relays if relay.name in tunnels)
            for server in listener.https:
                # The server's routes, shaped as a listener's: the same route configuration.
                routes = ir.Listener(server.name, listener.address, listener.port, server.virtual_hosts)
                out[ROUTE][server.name] = _route_configuration(routes, upstreams)
        else:
            out[LISTENER][name] = _listener(listener)
            out[ROUTE][name] = _route_configuration(listener, upstreams)
    for name in sorted(upstreams):
        out[CLUSTER][name] = _cluster(upstreams[name], ir_.dns)
    for name in sorted(secrets):
        out[SECRET][name] = _secret(secrets[name])
    if tunneled:
        out[LISTENER][TCP_EGRESS] = _tcp_egress_listener()
        out[ROUTE][TCP_EGRESS] = _tcp_egress_routes(tunneled, upstreams)
        out[CLUSTER][TCP_EGRESS] = _tcp_egress_cluster()
        for type_url in (LISTENER, CLUSTER):
            out[type_url] = dict(sorted(out[type_url].items()))
    out[ROUTE] = dict(sorted(out[ROUTE].items()))  # HTTPS servers' routes are named after them
    return out


def to_data(resources: Mapping[str, Mapping[str, Message]]) -> dict[str, Any]:
    """Plain, JSON-able data for built resources: type URL → name → proto JSON mapping.

    Field names are proto JSON (camelCase) as produced by ``MessageToDict``;
    every mapping has its keys sorted; lists keep their (meaningful) order.
    Private keys and generic secrets are replaced by ``<redacted>`` because
    this output is meant for people and files.
    """
    data = {
        type_url: {
            name: _redact(json_format.MessageToDict(message, preserving_proto_field_name=False))
            for name, message in by_name.items()
        }
        for type_url, by_name in resources.items()
    }
    return cast(dict[str, Any], _sort_keys(data))


# --------------------------------------------------------------------------
# Contract checks
# --------------------------------------------------------------------------


def _unique(kind: str, items: Iterable[Any]) -> dict[str, Any]:
    """Items by name; a repeated name is an error rather than a silent overwrite."""
    by_name: dict[str, Any] = {}
    for item in items:
        if item.name in by_name:
            raise ValueError(f"duplicate {kind} name {item.name!r} in IR")
        by_name[item.name] = item
    return by_name


def _check_tls(upstream: str, tls: ir.UpstreamTLS, secrets: Mapping[str, ir.Secret]) -> None:
    """Refuse TLS settings that Envoy would accept but that would weaken verification."""
    where = f"upstream {upstream!r}"
    if (tls.trusted_ca is None) == (tls.system_trust_file is None):
        raise ValueError(f"{where}: exactly one of trusted_ca and system_trust_file must be set")
    if not tls.subject_alt_names:
        raise ValueError(f"{where}: TLS needs at least one subject alt name to verify")
    if tls.trusted_ca is not None and not isinstance(secrets.get(tls.trusted_ca), ir.TrustedCA):
        raise ValueError(f"{where}: no TrustedCA secret named {tls.trusted_ca!r}")
    cert = tls.client_certificate
    if cert is not None and not isinstance(secrets.get(cert), ir.TlsCertificate):
        raise ValueError(f"{where}: no TlsCertificate secret named {cert!r}")


# --------------------------------------------------------------------------
# Listeners
# --------------------------------------------------------------------------


def _listener(listener: ir.Listener) -> Any:
    """One plain-HTTP listener whose single filter chain is an HTTP connection manager."""
    return listener_pb2.Listener(
        name=listener.name,
        address=_socket_address(listener.address, listener.port),
        filter_chains=[
            listener_components_pb2.FilterChain(
                filters=[_http_connection_manager(listener.name, route_config_name=listener.name)]
            )
        ],
    )


def _http_connection_manager(listener_name: str, *, route_config_name: str) -> Any:
    """The HTTP connection manager filter of an HTTP listener, or of an HTTPS server of a TLS listener.

    Its routes come over RDS (``route_config_name``). Over TLS, ALPN decides
    between HTTP/2 and HTTP/1.1 (the codec follows it).
    """
    hcm = hcm_pb2.HttpConnectionManager(
        # Envoy names listener stats ``listener.ADDRESS_PORT``; follow suit.
        stat_prefix=listener_name.replace(":", "_"),
        # AUTO: HTTP/1.1 and prior-knowledge HTTP/2 (h2c) clients alike.
        codec_type=hcm_pb2.HttpConnectionManager.AUTO,
        rds=hcm_pb2.Rds(config_source=_ads(), route_config_name=route_config_name),
        http_filters=[
            # Inert unless a route carries a CORS policy (_route); always present, so
            # that adding the first CORS policy changes routes, not the listener.
            hcm_pb2.HttpFilter(name=CORS_FILTER, typed_config=_any(cors_pb2.Cors())),
            hcm_pb2.HttpFilter(
                name="envoy.filters.http.router",
                # No x-envoy-* headers on requests leaving, nor on responses.
                typed_config=_any(router_pb2.Router(suppress_envoy_headers=True)),
            ),
        ],
        access_log=[_access_log()],
        # The listener faces clients directly: trust the peer address, not a
        # client-supplied x-forwarded-for, for x-forwarded-for and "internal".
        use_remote_address=wrappers_pb2.BoolValue(value=True),
        # Request ids would be one more header leaking to external APIs.
        generate_request_id=wrappers_pb2.BoolValue(value=False),
        # Match routes on the path the upstream will interpret: RFC 3986
        # normalisation (``/a/../b`` → ``/b``), ``//`` merged, and encoded
        # slashes (``%2F``, ``%5C``) unescaped with a redirect so the client
        # sees the real path. Without these, ``/public/..%2Fadmin`` could
        # match a ``/public`` rule and reach ``/admin`` upstream.
        normalize_path=wrappers_pb2.BoolValue(value=True),
        merge_slashes=True,
        path_with_escaped_slashes_action=hcm_pb2.HttpConnectionManager.UNESCAPE_AND_REDIRECT,
        # Virtual host domains carry no port; ``Host: a.example:8080`` must match ``a.example``.
        strip_any_host_port=True,
        local_reply_config=_local_replies(),
        # Declared here, off: Envoy passes an upgrade on only if the connection manager knows
        # its type, and then per route; routes to WebSocket upstreams turn it on (_route).
        upgrade_configs=[
            hcm_pb2.HttpConnectionManager.UpgradeConfig(
                upgrade_type="websocket", enabled=wrappers_pb2.BoolValue(value=False)
            )
        ],
    )
    return listener_components_pb2.Filter(
        name="envoy.filters.network.http_connection_manager", typed_config=_any(hcm)
    )


def _local_replies() -> Any:
    """Envoy's own answers, reworded where its default says too little.

    The egress guard (an RBAC filter on the cluster) answers ``403 RBAC:
    access denied``, which RBAC cannot change per filter. This mapper, on
    the connection manager that relays that answer, selects it by its
    response code details (a CEL filter: the policy names are weir's) and
    replaces the body with one naming the upstream and the refused address.
    """
    denied = cel_pb2.ExpressionFilter(
        expression=f"response.code_details.startsWith('rbac_access_denied_matched_policy[{EGRESS_POLICY_PREFIX}')"
    )
    body = format_pb2.SubstitutionFormatString(
        text_format_source=base_pb2.DataSource(inline_string=EGRESS_DENIED_BODY)
    )
    mapper = hcm_pb2.ResponseMapper(
        filter=accesslog_pb2.AccessLogFilter(
            extension_filter=accesslog_pb2.ExtensionFilter(
                name="envoy.access_loggers.extension_filters.cel", typed_config=_any(denied)
            )
        ),
        body_format_override=body,
    )
    return hcm_pb2.LocalReplyConfig(mappers=[mapper])


def _access_log(fields: Mapping[str, str] = ACCESS_LOG_FORMAT) -> Any:
    fmt = struct_pb2.Struct()
    fmt.update(fields)
    stdout = stream_pb2.StdoutAccessLog(log_format=format_pb2.SubstitutionFormatString(json_format=fmt))
    return accesslog_pb2.AccessLog(name="envoy.access_loggers.stdout", typed_config=_any(stdout))


# --------------------------------------------------------------------------
# TCP listeners
# --------------------------------------------------------------------------


def _tcp_upstreams(
    listener: ir.TcpListener | ir.TlsRelay, upstreams: Mapping[str, ir.Upstream]
) -> list[ir.Upstream | None]:
    """The upstream of each backend of a TCP listener or TLS relay (``None``: failed to resolve).

    Refuses a broken IR.
    """
    if listener.idle_timeout_ms < 0:
        raise ValueError(f"listener {listener.name!r}: negative idle timeout")
    chosen = []
    for backend in listener.backends:
        if backend.weight <= 0:
            raise ValueError(f"listener {listener.name!r}: backend weight must be > 0")
        upstream = _upstream_of(listener.name, backend, upstreams)
        if upstream is not None and upstream.protocol is not ir.UpstreamProtocol.TCP:
            raise ValueError(
                f"listener {listener.name!r}: upstream {upstream.name!r} speaks HTTP, not raw TCP"
            )
        chosen.append(upstream)
    return chosen


def _guarded(upstream: ir.Upstream) -> bool:
    return upstream.egress_guard is not None and bool(upstream.egress_guard.denied_networks)


def _tcp_listener(listener: ir.TcpListener, chosen: list[ir.Upstream | None], *, tunnel: bool) -> Any:
    """A listener whose single filter chain is a TCP proxy to the listener's backends.

    The egress guard (an RBAC filter on the cluster) is an HTTP filter: it
    runs in a router, once an address is chosen and before the connection to
    it is made, and a TCP proxy has no router. Envoy 1.40 has no upstream
    network filter that could refuse an address instead (the only one it
    registers is for reverse tunnels), and the network RBAC filter on the
    listener fails open: its ``upstream_ip_port`` matcher finds no upstream
    address there. So when a backend of the listener is guarded (``tunnel``),
    the TCP proxy does not connect itself: it tunnels each connection as an
    HTTP/2 ``CONNECT`` to :data:`TCP_EGRESS`, an internal listener (in
    process, no socket) whose router picks the backend by weight and
    terminates the ``CONNECT`` into a plain TCP connection to the real
    cluster; that cluster's guard refuses a denied address with 403 before
    connecting, and the TCP proxy then closes the client's connection
    without having sent it a byte. Otherwise the TCP proxy picks the
    cluster by weight itself (``weighted_clusters``).
    """
    return listener_pb2.Listener(
        name=listener.name,
        address=_socket_address(listener.address, listener.port),
        filter_chains=[
            listener_components_pb2.FilterChain(
                filters=[_tcp_proxy(listener.name, listener, chosen, tunnel=tunnel)]
            )
        ],
    )


def _tcp_proxy(
    listener_name: str,
    relay: ir.TcpListener | ir.TlsRelay,
    chosen: list[ir.Upstream | None],
    *,
    tunnel: bool,
    access_log: Mapping[str, str] = TCP_ACCESS_LOG_FORMAT,
) -> Any:
    """The TCP proxy filter relaying the connections of a TCP listener or a TLS relay (see above)."""
    proxy = tcp_proxy_pb2.TcpProxy(
        # Envoy names listener stats ``listener.ADDRESS_PORT``; follow suit.
        stat_prefix=listener_name.replace(":", "_"),
        # Always explicit, 0 included (no limit).
        idle_timeout=_duration_ms(relay.idle_timeout_ms),
        access_log=[_access_log(access_log)],
    )
    if tunnel:
        proxy.cluster = TCP_EGRESS
        # The authority of the CONNECT names the relay: its virtual host in TCP_EGRESS.
        proxy.tunneling_config.hostname = _tunnel_authority(relay.name)
    elif len(relay.backends) <= 1:
        proxy.cluster = _cluster_name(chosen[0] if chosen else None)
    else:
        for backend, upstream in zip(relay.backends, chosen, strict=True):
            proxy.weighted_clusters.clusters.add(name=_cluster_name(upstream), weight=backend.weight)
    return listener_components_pb2.Filter(name="envoy.filters.network.tcp_proxy", typed_config=_any(proxy))


def _tunnel_authority(name: str) -> str:
    """The ``CONNECT`` authority (and :data:`TCP_EGRESS` domain) of a relay: its name as a valid authority.

    A TCP listener's name (``127.0.0.1:5432``) is one already. A TLS relay's
    (``127.0.0.1:443/db.example.com``, ``127.0.0.1:443/*.example.com``) has a
    ``/``, which an authority cannot carry, and maybe a ``*``, which Envoy
    reads as a wildcard in a domain: ``127.0.0.1:443.db.example.com``,
    ``127.0.0.1:443._.example.com`` (no hostname has a ``_``, and a port has
    no ``.``, so no two relays share one).
    """
    return name.replace("/", ".", 1).replace("*", "_")


def _tcp_egress_listener() -> Any:
    """The internal listener tunneled TCP connections arrive at, as HTTP/2 ``CONNECT`` streams.

    Its routes (:func:`_tcp_egress_routes`) come over RDS, so a TCPRoute
    change never touches (and drains) this listener. It logs each tunneled
    connection like an HTTP request: the guard's refusals appear there with
    their policy name.
    """
    hcm = hcm_pb2.HttpConnectionManager(
        stat_prefix=TCP_EGRESS,
        codec_type=hcm_pb2.HttpConnectionManager.HTTP2,
        rds=hcm_pb2.Rds(config_source=_ads(), route_config_name=TCP_EGRESS),
        http_filters=[
            hcm_pb2.HttpFilter(
                name="envoy.filters.http.router",
                typed_config=_any(router_pb2.Router(suppress_envoy_headers=True)),
            )
        ],
        upgrade_configs=[hcm_pb2.HttpConnectionManager.UpgradeConfig(upgrade_type="CONNECT")],
        access_log=[_access_log()],
        generate_request_id=wrappers_pb2.BoolValue(value=False),
    )
    hcm.http2_protocol_options.allow_connect = True
    out = listener_pb2.Listener(
        name=TCP_EGRESS,
        filter_chains=[
            listener_components_pb2.FilterChain(
                filters=[
                    listener_components_pb2.Filter(
                        name="envoy.filters.network.http_connection_manager", typed_config=_any(hcm)
                    )
                ]
            )
        ],
    )
    out.internal_listener.SetInParent()
    return out


def _tcp_egress_routes(
    listeners: list[ir.TcpListener | ir.TlsRelay], upstreams: Mapping[str, ir.Upstream]
) -> Any:
    """One virtual host per tunneled TCP listener or TLS relay, forwarding ``CONNECT`` by weight.

    The virtual host's domain is the relay's ``CONNECT`` authority (:func:`_tunnel_authority`).

    ``connect_config`` terminates the ``CONNECT``: the router opens a plain
    TCP connection to the chosen cluster (through its TLS transport socket,
    if any) once the cluster's filters, the egress guard among them, let the
    stream pass. No request timeout (it would cut the connection); the idle
    timeout is the TCP listener's.
    """
    vhosts = []
    for listener in sorted(listeners, key=lambda x: x.name):
        route = route_components_pb2.Route(name=listener.name)
        route.match.connect_matcher.SetInParent()
        action = route.route
        action.timeout.CopyFrom(_duration_ms(0))
        action.idle_timeout.CopyFrom(_duration_ms(listener.idle_timeout_ms))
        action.upgrade_configs.add(upgrade_type="CONNECT").connect_config.SetInParent()
        chosen = [_upstream_of(listener.name, b, upstreams) for b in listener.backends]
        if any(upstream is None for upstream in chosen):
            action.cluster_not_found_response_code = route_components_pb2.RouteAction.INTERNAL_SERVER_ERROR
        if len(chosen) == 1:
            action.cluster = _cluster_name(chosen[0])
        else:
            for backend, upstream in zip(listener.backends, chosen, strict=True):
                weight = action.weighted_clusters.clusters.add(name=_cluster_name(upstream))
                weight.weight.value = backend.weight
        vhosts.append(
            route_components_pb2.VirtualHost(
                name=listener.name, domains=[_tunnel_authority(listener.name)], routes=[route]
            )
        )
    return route_pb2.RouteConfiguration(
        name=TCP_EGRESS, virtual_hosts=vhosts, validate_clusters=wrappers_pb2.BoolValue(value=False)
    )


def _tcp_egress_cluster() -> Any:
    """The cluster leading to the internal listener :data:`TCP_EGRESS`, over HTTP/2.

    Every tunneled connection is one stream of it, whatever its listener, so
    its circuit breakers are lifted: the real clusters' own limits apply, as
    for TCP listeners that are not tunneled.
    """
    out = cluster_pb2.Cluster(name=TCP_EGRESS, connect_timeout=_duration_ms(1000))
    out.type = cluster_pb2.Cluster.STATIC
    endpoint = endpoint_components_pb2.LbEndpoint()
    endpoint.endpoint.address.envoy_internal_address.server_listener_name = TCP_EGRESS
    out.load_assignment.cluster_name = TCP_EGRESS
    out.load_assignment.endpoints.add(lb_endpoints=[endpoint])
    limit = wrappers_pb2.UInt32Value(value=1_000_000_000)
    out.circuit_breakers.thresholds.append(
        circuit_breaker_pb2.CircuitBreakers.Thresholds(
            max_connections=limit, max_pending_requests=limit, max_requests=limit
        )
    )
    options = http_protocol_options_pb2.HttpProtocolOptions()
    options.explicit_http_config.http2_protocol_options.SetInParent()
    out.typed_extension_protocol_options[_HTTP_OPTIONS].CopyFrom(_any(options))
    return out


# --------------------------------------------------------------------------
# TLS listeners
# --------------------------------------------------------------------------

#: The protocols an HTTPS server offers in ALPN, preferred first.
HTTPS_ALPN = ("h2", "http/1.1")

#: JSON access log fields of TLS relays: those of TCP listeners, and the client's server name.
TLS_RELAY_ACCESS_LOG_FORMAT = {**TCP_ACCESS_LOG_FORMAT, "server_name": "%REQUESTED_SERVER_NAME%"}


def _check_tls_listener(listener: ir.TlsListener, secrets: Mapping[str, ir.Secret]) -> None:
    """Refuse a TLS listener whose entries would be ambiguous, or present what does not exist."""
    where = f"listener {listener.name!r}"
    names: set[str] = set()
    claimed: dict[str, str] = {}
    catch_all: list[str] = []
    entries: list[ir.HttpsServer | ir.TlsRelay] = [*listener.https, *listener.relays]
    for entry in entries:
        if entry.name in names:
            raise ValueError(f"{where}: duplicate entry name {entry.name!r}")
        names.add(entry.name)
        if not entry.server_names:
            catch_all.append(entry.name)
        for server_name in entry.server_names:
            if server_name in claimed:
                first = claimed[server_name]
                raise ValueError(f"{where}: server name {server_name!r} in both {first!r} and {entry.name!r}")
            claimed[server_name] = entry.name
        for cert in entry.certificates:
            if not isinstance(secrets.get(cert), ir.TlsCertificate):
                raise ValueError(f"{where}: {entry.name!r} names no TlsCertificate secret {cert!r}")
    if len(catch_all) > 1:
        raise ValueError(f"{where}: several entries without server names: {', '.join(catch_all)}")
    for server in listener.https:
        if not server.certificates:
            raise ValueError(f"{where}: HTTPS server {server.name!r} has no certificate")


def _tls_listener(
    listener: ir.TlsListener, relays: Mapping[str, list[ir.Upstream | None]], tunnels: set[str]
) -> Any:
    """A listener reading each connection's ClientHello, with one filter chain per HTTPS server and relay.

    The TLS inspector reads the server name; Envoy then picks the filter
    chain whose ``server_names`` match it best (exact, then the longest
    wildcard, then the chain without names), among chains for TLS only:
    anything else is closed, as is a name no chain matches. HTTPS servers
    terminate TLS and run a connection manager whose routes, over RDS, are
    named after the server; relays run a TCP proxy, behind a TLS
    termination when they have certificates. ``relays`` gives each relay's
    upstreams (:func:`_tcp_upstreams`); ``tunnels`` names the relays that go
    through :data:`TCP_EGRESS` (guarded upstreams, as for TCP listeners).
    With no entry at all, one chain without filters closes every connection
    (Envoy needs a chain).
    """
    chains = []
    for server in sorted(listener.https, key=lambda x: x.name):
        chain = listener_components_pb2.FilterChain(
            name=server.name,
            filter_chain_match=_server_name_match(server.server_names),
            filters=[_http_connection_manager(listener.name, route_config_name=server.name)],
        )
        _terminate_tls(chain, server.certificates, alpn=HTTPS_ALPN)
        chains.append(chain)
    for relay in sorted(listener.relays, key=lambda x: x.name):
        proxy = _tcp_proxy(
            listener.name,
            relay,
            relays[relay.name],
            tunnel=relay.name in tunnels,
            access_log=TLS_RELAY_ACCESS_LOG_FORMAT,
        )
        chain = listener_components_pb2.FilterChain(
            name=relay.name, filter_chain_match=_server_name_match(relay.server_names), filters=[proxy]
        )
        if relay.certificates:
            _terminate_tls(chain, relay.certificates, alpn=())
        chains.append(chain)
    out = listener_pb2.Listener(
        name=listener.name,
        address=_socket_address(listener.address, listener.port),
        listener_filters=[
            listener_components_pb2.ListenerFilter(
                name="envoy.filters.listener.tls_inspector",
                typed_config=_any(tls_inspector_pb2.TlsInspector()),
            )
        ],
        filter_chains=chains,
    )
    if not chains:
        out.default_filter_chain.name = f"{listener.name}/no-server-name"
    return out


def _server_name_match(server_names: tuple[str, ...]) -> Any:
    return listener_components_pb2.FilterChainMatch(
        server_names=sorted(server_names), transport_protocol="tls"
    )


def _terminate_tls(chain: Any, certificates: tuple[str, ...], *, alpn: tuple[str, ...]) -> None:
    """Give ``chain`` a TLS transport socket presenting ``certificates`` (SDS), TLS 1.2 to 1.3.

    With several certificates, Envoy presents the one whose names match the
    client's server name (exact before wildcard), else the first.
    """
    common = tls_pb2.CommonTlsContext(
        tls_params=common_pb2.TlsParameters(
            tls_minimum_protocol_version=common_pb2.TlsParameters.TLSv1_2,
            tls_maximum_protocol_version=common_pb2.TlsParameters.TLSv1_3,
        ),
        tls_certificate_sds_secret_configs=[_sds(name) for name in certificates],
        alpn_protocols=list(alpn),
    )
    chain.transport_socket.name = "envoy.transport_sockets.tls"
    chain.transport_socket.typed_config.CopyFrom(
        _any(tls_pb2.DownstreamTlsContext(common_tls_context=common))
    )


# --------------------------------------------------------------------------
# Routes
# --------------------------------------------------------------------------


def _route_configuration(listener: ir.Listener, upstreams: Mapping[str, ir.Upstream]) -> Any:
    """The listener's routes. Virtual hosts are sorted: Envoy picks one by domain, not order."""
    return route_pb2.RouteConfiguration(
        name=listener.name,
        virtual_hosts=[
            route_components_pb2.VirtualHost(
                name=vhost.name,
                domains=sorted(vhost.domains),
                routes=[_route(route, upstreams) for route in vhost.routes],
            )
            for vhost in sorted(listener.virtual_hosts, key=lambda v: v.name)
        ],
        # A route may name UNRESOLVED_CLUSTER on purpose, or an upstream that is
        # still warming; neither may make Envoy reject the whole configuration.
        validate_clusters=wrappers_pb2.BoolValue(value=False),
    )


def _route(route: ir.Route, upstreams: Mapping[str, ir.Upstream]) -> Any:
    out = route_components_pb2.Route(name=route.name, match=_match(route.match))
    # Backends' own response edits carry the route's too (see _weighted_edits).
    own_response = isinstance(route.action, ir.Forward) and any(
        b.response_headers is not None for b in route.action.backends
    )
    if route.response_headers is not None and not own_response:
        out.response_headers_to_add.extend(_header_options(route.response_headers))
        out.response_headers_to_remove.extend(route.response_headers.remove)
    if route.cors is not None:
        out.typed_per_filter_config[CORS_FILTER].CopyFrom(_any(_cors_policy(route.cors)))
    if isinstance(route.action, ir.DirectResponse):
        response = route_components_pb2.DirectResponseAction(status=route.action.status)
        if route.action.body:
            response.body.inline_string = route.action.body
        out.direct_response.CopyFrom(response)
        return out
    if isinstance(route.action, ir.Redirect):
        out.redirect.CopyFrom(_redirect(route.name, route.action, route.match))
        return out

    forward = route.action
    backends = forward.backends
    if not backends:
        raise ValueError(f"route {route.name!r}: Forward without backends")
    chosen = [_upstream_of(route.name, b, upstreams) for b in backends]
    for upstream in chosen:
        if upstream is not None and upstream.protocol is ir.UpstreamProtocol.TCP:
            raise ValueError(f"route {route.name!r}: upstream {upstream.name!r} speaks raw TCP, not HTTP")
    action = out.route
    # Always explicit, 0 included (Envoy: no limit). The idle timeout of the
    # route replaces the connection manager's stream idle timeout. No filter
    # on the way (router; on clusters, header-only ones) buffers bodies, so
    # responses, event streams included, are passed on as they arrive.
    if route.action.request_timeout_ms < 0 or route.action.idle_timeout_ms < 0:
        raise ValueError(f"route {route.name!r}: negative timeout")
    action.timeout.CopyFrom(_duration_ms(route.action.request_timeout_ms))
    action.idle_timeout.CopyFrom(_duration_ms(route.action.idle_timeout_ms))
    if any(upstream is None for upstream in chosen):
        action.cluster_not_found_response_code = _UNRESOLVED_CODES[forward.unresolved_status]
    if any(upstream is not None and upstream.websocket for upstream in chosen):
        # A split with other upstreams too: they answer an upgrade request as they see fit.
        action.upgrade_configs.add(upgrade_type="websocket", enabled=wrappers_pb2.BoolValue(value=True))
    _forward_extras(route, forward, out, upstreams)
    rewrite_host = forward.rewrite.hostname if forward.rewrite is not None else None
    if rewrite_host is not None:
        action.host_rewrite_literal = rewrite_host
    own_edits = any(b.request_headers is not None or b.response_headers is not None for b in backends)
    if len(backends) == 1 and not own_edits:
        upstream = chosen[0]
        action.cluster = _cluster_name(upstream)
        if upstream is not None and upstream.host_header is not None:
            # The route's own Host rewrite, if any, wins over the external hostname.
            action.host_rewrite_literal = rewrite_host or upstream.host_header
            out.request_headers_to_remove.extend(EXTERNAL_REQUEST_HEADERS_TO_REMOVE)
        return out
    for backend, upstream in zip(backends, chosen, strict=True):
        weight = action.weighted_clusters.clusters.add(name=_cluster_name(upstream))
        weight.weight.value = backend.weight
        # Per backend: the Host rewrite and header stripping apply only to the
        # share of requests that go to the external hostname.
        if upstream is not None and upstream.host_header is not None:
            weight.host_rewrite_literal = rewrite_host or upstream.host_header
            weight.request_headers_to_remove.extend(EXTERNAL_REQUEST_HEADERS_TO_REMOVE)
        _weighted_edits(weight, route, backends, backend)
    return out


def _weighted_edits(
    weight: Any, route: ir.Route, backends: tuple[ir.WeightedBackend, ...], backend: ir.WeightedBackend
) -> None:
    """A backend's header edits on its weighted cluster, merged with its route's.

    Envoy applies a weighted cluster's edits before the route's, so a route
    edit would win over the backend's on the same header. When any backend
    of the route has edits of a kind (request or response), the route's
    edits of that kind move into every cluster instead, and each backend's
    replace the route's for the headers they name.
    """
    assert isinstance(route.action, ir.Forward)
    if any(b.request_headers is not None for b in backends):
        edits = _merge_edits(route.action.request_headers, backend.request_headers)
        if edits is not None:
            weight.request_headers_to_add.extend(_header_options(edits))
            weight.request_headers_to_remove.extend(edits.remove)
    if any(b.response_headers is not None for b in backends):
        edits = _merge_edits(route.response_headers, backend.response_headers)
        if edits is not None:
            weight.response_headers_to_add.extend(_header_options(edits))
            weight.response_headers_to_remove.extend(edits.remove)


def _merge_edits(route: ir.HeaderEdits | None, own: ir.HeaderEdits | None) -> ir.HeaderEdits | None:
    """``route``'s edits, except for the headers ``own`` names, then ``own``'s."""
    if route is None or own is None:
        return own or route
    named = {h.name for h in (*own.set, *own.add)} | set(own.remove)
    return ir.HeaderEdits(
        set=tuple(h for h in route.set if h.name not in named) + own.set,
        add=tuple(h for h in route.add if h.name not in named) + own.add,
        remove=tuple(n for n in route.remove if n not in named) + own.remove,
    )


def _forward_extras(
    route: ir.Route, forward: ir.Forward, out: Any, upstreams: Mapping[str, ir.Upstream]
) -> None:
    """Request header edits, path rewrite, per-attempt timeout, retries and mirrors of a route."""
    action = out.route
    own_request = any(b.request_headers is not None for b in forward.backends)
    if forward.request_headers is not None and not own_request:  # else: _weighted_edits
        out.request_headers_to_add.extend(_header_options(forward.request_headers))
        out.request_headers_to_remove.extend(forward.request_headers.remove)
    path = forward.rewrite.path if forward.rewrite is not None else None
    if path is not None:
        prefix, regex = _path_rewrite(route.name, path, route.match)
        if regex is not None:
            action.regex_rewrite.CopyFrom(regex)
        else:
            action.prefix_rewrite = prefix
    if forward.backend_timeout_ms < 0:
        raise ValueError(f"route {route.name!r}: negative timeout")
    if forward.retry is not None or forward.backend_timeout_ms:
        action.retry_policy.CopyFrom(_retry_policy(forward.retry, forward.backend_timeout_ms))
    for mirror in forward.mirrors:
        if not 0 <= mirror.numerator <= mirror.denominator or mirror.denominator <= 0:
            raise ValueError(f"route {route.name!r}: mirror share {mirror.numerator}/{mirror.denominator}")
        target = upstreams.get(mirror.upstream)
        if target is None:
            raise ValueError(f"route {route.name!r}: unknown upstream {mirror.upstream!r}")
        if target.protocol is ir.UpstreamProtocol.TCP:
            raise ValueError(f"route {route.name!r}: upstream {target.name!r} speaks raw TCP, not HTTP")
        policy = action.request_mirror_policies.add(
            cluster=target.name, disable_shadow_host_suffix_append=True
        )
        if target.host_header is not None:
            policy.host_rewrite_literal = target.host_header
        if mirror.numerator != mirror.denominator:
            policy.runtime_fraction.default_value.CopyFrom(_fraction(mirror.numerator, mirror.denominator))


def _header_options(edits: ir.HeaderEdits) -> list[Any]:
    """``set`` and ``add`` as Envoy header options; values are literal (``%`` escaped)."""
    actions = base_pb2.HeaderValueOption
    return [
        base_pb2.HeaderValueOption(
            header=base_pb2.HeaderValue(key=header.name, value=header.value.replace("%", "%%")),
            append_action=append_action,
        )
        for headers, append_action in (
            (edits.set, actions.OVERWRITE_IF_EXISTS_OR_ADD),
            (edits.add, actions.APPEND_IF_EXISTS_OR_ADD),
        )
        for header in headers
    ]


def _path_rewrite(name: str, path: ir.PathRewrite, match: ir.RouteMatch) -> tuple[str, Any]:
    """A path rewrite as Envoy's ``prefix_rewrite`` (first) or ``regex_rewrite`` (second, or ``None``).

    ``ReplacePrefixMatch`` keeps the segments after the matched prefix: a
    prefix rewrite, without the value's trailing slash (``/foo/bar`` with
    ``/xyz/`` → ``/xyz/bar``, not ``/xyz//bar``); after the prefix ``/``
    the value gets one (``/bar`` → ``/xyz/bar``). An empty value (or ``/``)
    is a regular expression instead, which also eats the slashes after
    the prefix: ``/foo/bar`` → ``/bar``, ``/foo`` → ``/`` (a plain prefix
    rewrite would leave ``//bar`` and an empty path). Either way the
    query string is kept.
    """
    if path.kind == "ReplaceFullPath":
        return "", _regex_substitution("^.*$", path.value)
    if match.path.kind != "PathPrefix":
        raise ValueError(f"route {name!r}: ReplacePrefixMatch needs a PathPrefix match")
    value = path.value.rstrip("/")
    prefix = match.path.value
    if not value:
        return "", _regex_substitution("^" + re.escape(prefix.rstrip("/")) + "/*", "/")
    return (value + "/" if prefix == "/" else value), None


def _regex_substitution(pattern: str, substitution: str) -> Any:
    # In an RE2 substitution a backslash starts \0-\9 or \\; paths are literal.
    return regex_pb2.RegexMatchAndSubstitute(
        pattern=regex_pb2.RegexMatcher(regex=pattern), substitution=substitution.replace("\\", "\\\\")
    )


_REDIRECT_CODES = {
    301: route_components_pb2.RedirectAction.MOVED_PERMANENTLY,
    302: route_components_pb2.RedirectAction.FOUND,
    303: route_components_pb2.RedirectAction.SEE_OTHER,
    307: route_components_pb2.RedirectAction.TEMPORARY_REDIRECT,
    308: route_components_pb2.RedirectAction.PERMANENT_REDIRECT,
}


def _redirect(name: str, redirect: ir.Redirect, match: ir.RouteMatch) -> Any:
    """A redirect. With no port of its own, Envoy writes the Host header's, which the
    connection manager has stripped (``strip_any_host_port``): ``None`` writes none."""
    if redirect.status not in _REDIRECT_CODES:
        raise ValueError(f"route {name!r}: redirect status {redirect.status}")
    out = route_components_pb2.RedirectAction(response_code=_REDIRECT_CODES[redirect.status])
    if redirect.scheme is not None:
        out.scheme_redirect = redirect.scheme
    if redirect.hostname is not None:
        out.host_redirect = redirect.hostname
    if redirect.port is not None:
        out.port_redirect = redirect.port
    if redirect.path is not None:
        if redirect.path.kind == "ReplaceFullPath":
            # The request's query string is kept (path_redirect has none of its own).
            out.path_redirect = redirect.path.value or "/"
        else:
            prefix, regex = _path_rewrite(name, redirect.path, match)
            if regex is not None:
                out.regex_rewrite.CopyFrom(regex)
            else:
                out.prefix_rewrite = prefix
    return out


#: What is retried besides the status codes: failures before the upstream
#: could process the request (never a reset after it was sent).
RETRY_ON = ("connect-failure", "refused-stream", "reset-before-request")


def _retry_policy(retry: ir.Retry | None, per_try_ms: int) -> Any:
    """Envoy's retry policy; with ``retry`` ``None`` it only carries the per-attempt timeout."""
    out = route_components_pb2.RetryPolicy()
    if per_try_ms:
        out.per_try_timeout.CopyFrom(_duration_ms(per_try_ms))
    if retry is None:
        out.num_retries.value = 0
        return out
    if retry.attempts < 0 or any(not 100 <= code <= 599 for code in retry.codes):
        raise ValueError(f"invalid retry policy {retry!r}")
    out.retry_on = ",".join((*RETRY_ON, "retriable-status-codes") if retry.codes else RETRY_ON)
    out.retriable_status_codes.extend(sorted(retry.codes))
    out.num_retries.value = retry.attempts
    if retry.backoff_ms is not None:
        out.retry_back_off.base_interval.CopyFrom(_duration_ms(max(1, retry.backoff_ms)))
    return out


def _fraction(numerator: int, denominator: int) -> Any:
    """``numerator/denominator`` as Envoy's fraction (per hundred, ten thousand or million)."""
    kinds = percent_pb2.FractionalPercent
    for scale, kind in ((100, kinds.HUNDRED), (10_000, kinds.TEN_THOUSAND), (1_000_000, kinds.MILLION)):
        if scale % denominator == 0:
            return kinds(numerator=numerator * (scale // denominator), denominator=kind)
    return kinds(numerator=round(numerator * 1_000_000 / denominator), denominator=kinds.MILLION)


#: Every method a CORS policy can name (with ``*`` and credentials, all are listed).
_CORS_METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH")
_DEFAULT_PORTS = {"http": "80", "https": "443"}


def _cors_policy(cors: ir.Cors) -> Any:
    """The route's CORS policy. Preflights from an origin not allowed are answered, not forwarded."""
    out = cors_pb2.CorsPolicy(
        allow_origin_string_match=[_origin_matcher(origin) for origin in cors.allow_origins],
        allow_methods=", ".join(cors.allow_methods),
        allow_headers=", ".join(cors.allow_headers),
        expose_headers=", ".join(cors.expose_headers),
        max_age=str(cors.max_age_s),
        forward_not_matching_preflights=wrappers_pb2.BoolValue(value=False),
    )
    if cors.allow_credentials:
        out.allow_credentials.value = True
    return out


def _origin_matcher(origin: str) -> Any:
    """An allowed origin: ``*`` any; else scheme, host (``*`` matches any characters) and port,
    the scheme's default port matching with or without it being written."""
    if origin == "*":
        return string_pb2.StringMatcher(safe_regex=regex_pb2.RegexMatcher(regex=".*"))
    scheme, _, authority = origin.partition("://")
    host, _, port = authority.partition(":")
    host_regex = ".*".join(re.escape(part) for part in host.split("*"))
    default = _DEFAULT_PORTS.get(scheme.lower())
    if not port or port == default:
        port_regex = f"(:{default})?" if default else ""
    else:
        port_regex = ":" + re.escape(port)
    regex = re.escape(scheme) + "://" + host_regex + port_regex
    return string_pb2.StringMatcher(safe_regex=regex_pb2.RegexMatcher(regex=regex))


def _upstream_of(
    route: str, backend: ir.WeightedBackend, upstreams: Mapping[str, ir.Upstream]
) -> ir.Upstream | None:
    if backend.upstream is None:
        return None
    if backend.upstream not in upstreams:
        raise ValueError(f"route {route!r}: unknown upstream {backend.upstream!r}")
    return upstreams[backend.upstream]


def _cluster_name(upstream: ir.Upstream | None) -> str:
    return UNRESOLVED_CLUSTER if upstream is None else upstream.name


def _match(match: ir.RouteMatch) -> Any:
    """Path, headers, query parameters and method; regular expressions must match whole values."""
    out = route_components_pb2.RouteMatch()
    if match.path.kind == "Exact":
        out.path = match.path.value
    elif match.path.kind == "RegularExpression":
        out.safe_regex.regex = match.path.value
    elif match.path.value == "/":
        out.prefix = "/"
    else:
        # Segment-aware: "/foo" matches /foo, /foo/ and /foo/bar, not /foobar,
        # which is the Gateway API's PathPrefix. Envoy rejects a trailing "/",
        # which the IR never has (except "/", handled above).
        out.path_separated_prefix = match.path.value
    for header in sorted(match.headers, key=lambda h: (h.name, h.kind, h.value)):
        out.headers.add(name=header.name, string_match=_string_matcher(header.kind, header.value))
    if match.method is not None:
        out.headers.add(name=":method", string_match=string_pb2.StringMatcher(exact=match.method))
    for param in sorted(match.query, key=lambda q: (q.name, q.kind, q.value)):
        out.query_parameters.add(name=param.name, string_match=_string_matcher(param.kind, param.value))
    return out


def _string_matcher(kind: str, value: str) -> Any:
    if kind == "RegularExpression":
        return string_pb2.StringMatcher(safe_regex=regex_pb2.RegexMatcher(regex=value))
    return string_pb2.StringMatcher(exact=value)


# --------------------------------------------------------------------------
# Clusters
# --------------------------------------------------------------------------


def _cluster(upstream: ir.Upstream, dns: ir.DnsSettings) -> Any:
    out = cluster_pb2.Cluster(
        name=upstream.name,
        connect_timeout=_duration_ms(upstream.connect_timeout_ms),
    )
    destination = upstream.destination
    if isinstance(destination, ir.StaticEndpoints):
        out.type = cluster_pb2.Cluster.STATIC
        endpoints = sorted(destination.endpoints, key=lambda e: (e.address, e.port))
        out.load_assignment.CopyFrom(
            _load_assignment(upstream.name, [(e.address, e.port) for e in endpoints])
        )
    else:
        # The DNS cluster extension, not the deprecated ``type: STRICT_DNS``.
        out.cluster_type.name = "envoy.cluster.dns"
        out.cluster_type.typed_config.CopyFrom(_packed_dns_cluster(destination.dns or dns))
        out.load_assignment.CopyFrom(
            _load_assignment(upstream.name, [(destination.hostname, destination.port)])
        )
    if upstream.protocol is not ir.UpstreamProtocol.TCP:
        options = _http_protocol_options(upstream)
        # The egress guard lives here, with the HTTP options.
        options.http_filters.extend(_upstream_filters(upstream))
        out.typed_extension_protocol_options[_HTTP_OPTIONS].CopyFrom(_any(options))
    elif _guarded(upstream):
        # A TCP cluster speaks no HTTP, but its guard is an HTTP filter: TCP
        # listeners reach a guarded TCP cluster through TCP_EGRESS, whose router
        # runs these filters before it opens the plain TCP connection (see
        # _tcp_listener). The HTTP version is required by the message and unused.
        options = http_protocol_options_pb2.HttpProtocolOptions()
        options.explicit_http_config.http_protocol_options.SetInParent()
        options.http_filters.extend(_upstream_filters(upstream))
        out.typed_extension_protocol_options[_HTTP_OPTIONS].CopyFrom(_any(options))
    if upstream.tls is not None:
        out.transport_socket.name = "envoy.transport_sockets.tls"
        out.transport_socket.typed_config.CopyFrom(_any(_upstream_tls(upstream.tls)))
    return out


def _upstream_filters(upstream: ir.Upstream) -> list[Any]:
    """HTTP filters of the cluster: they run once a host is chosen for a request, before any connection.

    An external hostname gets the egress guard (when it denies something) and
    the removal of internal headers (not a ``TCP`` one: no headers reach it,
    the filters only see the ``CONNECT`` that :data:`TCP_EGRESS` terminates);
    the codec ends a non-empty chain. Other upstreams keep Envoy's default
    chain (the codec alone).
    """
    filters = []
    guard = upstream.egress_guard
    if guard is not None and guard.denied_networks:
        filters.append(hcm_pb2.HttpFilter(name="weir.egress_guard", typed_config=_packed_guard(guard)))
    http = upstream.protocol is not ir.UpstreamProtocol.TCP  # no headers ever reach a TCP upstream
    if http and (upstream.host_header is not None or isinstance(upstream.destination, ir.DnsName)):
        strip = _packed_strip_internal_headers()
        filters.append(hcm_pb2.HttpFilter(name="weir.strip_internal_headers", typed_config=strip))
    if filters:
        codec = upstream_codec_pb2.UpstreamCodec()
        filters.append(hcm_pb2.HttpFilter(name="envoy.filters.http.upstream_codec", typed_config=_any(codec)))
    return filters


# Every external upstream carries the same few filter and DNS configurations: build
# and pack each once (callers copy the Any into their own message, never change it).
@functools.lru_cache(maxsize=64)
def _packed_guard(guard: ir.EgressGuard) -> Any:
    return _any(_egress_guard(guard))


@functools.lru_cache(maxsize=1)
def _packed_strip_internal_headers() -> Any:
    return _any(_strip_internal_headers())


@functools.lru_cache(maxsize=64)
def _packed_dns_cluster(dns: ir.DnsSettings) -> Any:
    return _any(_dns_cluster(dns))


def _egress_guard(guard: ir.EgressGuard) -> Any:
    """An RBAC filter denying requests whose chosen upstream address is in a denied network.

    One DENY policy per network, named after it (the name shows in the
    response code details). The ``upstream_ip_port`` matcher compares
    addresses as written, and ``::ffff:10.0.0.1`` is not inside ``10.0.0.0/8``
    although connecting to it reaches ``10.0.0.1``; each IPv4 network is
    therefore also denied in its IPv4-mapped IPv6 form (``::ffff:10.0.0.0/104``).
    The same matcher in the listener's RBAC filter would fail open (no
    upstream address is known there yet); on the cluster it works.
    """
    policies = {}
    for cidr in guard.denied_networks:
        net = ipaddress.ip_network(cidr)
        ranges = [(str(net.network_address), net.prefixlen)]
        if isinstance(net, ipaddress.IPv4Network):
            ranges.append((f"::ffff:{net.network_address}", 96 + net.prefixlen))
        policies[EGRESS_POLICY_PREFIX + str(net)] = rbac_pb2.Policy(
            permissions=[_upstream_ip(address, length) for address, length in ranges],
            principals=[rbac_pb2.Principal(any=True)],
        )
    rules = rbac_pb2.RBAC(action=rbac_pb2.RBAC.DENY, policies=policies)
    return rbac_filter_pb2.RBAC(rules=rules)


def _upstream_ip(address: str, prefix_len: int) -> Any:
    matcher = upstream_ip_port_matcher_pb2.UpstreamIpPortMatcher(
        upstream_ip=address_pb2.CidrRange(
            address_prefix=address, prefix_len=wrappers_pb2.UInt32Value(value=prefix_len)
        )
    )
    return rbac_pb2.Permission(
        matcher=extension_pb2.TypedExtensionConfig(
            name="envoy.rbac.matchers.upstream_ip_port", typed_config=_any(matcher)
        )
    )


def _strip_internal_headers() -> Any:
    """A header mutation removing :data:`EXTERNAL_HEADER_PREFIXES_TO_REMOVE` and friends.

    As a cluster filter it runs after the router, so it also catches headers
    the router adds, and it can match by prefix, which route-level removal
    cannot.
    """
    mutations = [
        mutation_rules_pb2.HeaderMutation(
            remove_on_match=mutation_rules_pb2.HeaderMutation.RemoveOnMatch(
                key_matcher=string_pb2.StringMatcher(prefix=prefix, ignore_case=True)
            )
        )
        for prefix in EXTERNAL_HEADER_PREFIXES_TO_REMOVE
    ]
    mutations.extend(mutation_rules_pb2.HeaderMutation(remove=name) for name in EXTERNAL_HEADERS_TO_REMOVE)
    return header_mutation_pb2.HeaderMutation(
        mutations=header_mutation_pb2.Mutations(request_mutations=mutations)
    )


def _load_assignment(cluster: str, addresses: Iterable[tuple[str, int]]) -> Any:
    """One locality with the given endpoints; empty is valid (every request gets 503)."""
    lb_endpoints = [
        endpoint_components_pb2.LbEndpoint(
            endpoint=endpoint_components_pb2.Endpoint(address=_socket_address(host, port))
        )
        for host, port in addresses
    ]
    assignment = endpoint_pb2.ClusterLoadAssignment(cluster_name=cluster)
    if lb_endpoints:
        assignment.endpoints.add(lb_endpoints=lb_endpoints)
    return assignment


def _dns_cluster(dns: ir.DnsSettings) -> Any:
    """How a DNS upstream resolves and re-resolves its hostname.

    V4_PREFERRED: use IPv6 only when a name has no IPv4 address, because many
    hosts have no IPv6 route. ``respect_dns_ttl`` follows the record's TTL so
    that a moved service is followed as fast as its owner intends.
    """
    return dns_cluster_pb2.DnsCluster(
        dns_lookup_family=dns_pb2.V4_PREFERRED,
        respect_dns_ttl=True,
        typed_dns_resolver_config=_dns_resolver(dns),
    )


def _dns_resolver(dns: ir.DnsSettings) -> Any:
    """The c-ares resolver, bounded by ``lookup_timeout_ms``.

    With c-ares defaults a silent DNS server holds a cluster warming (and with
    it Envoy's CDS ACK) for about 50 s. One try with a timeout of the whole
    seconds within the bound (c-ares counts in seconds, at least 1) caps it.
    It is set with and without custom resolvers, since the system's resolver
    can be silent too. Custom resolvers replace the system's
    (``use_resolvers_as_fallback: false``). This host's search domains are
    never appended, system resolver included: an external hostname is fully
    qualified, and in a Kubernetes pod (``ndots:5``) ``openai.com`` would
    first be tried as ``openai.com.svc.cluster.local``, the Service
    ``openai`` of a namespace ``com``.
    """
    config = cares_dns_resolver_pb2.CaresDnsResolverConfig(
        query_timeout_seconds=wrappers_pb2.UInt64Value(value=max(1, dns.lookup_timeout_ms // 1000)),
        query_tries=wrappers_pb2.UInt32Value(value=1),
    )
    config.dns_resolver_options.no_default_search_domain = True
    if dns.resolvers:
        config.resolvers.extend(_socket_address(host, port) for host, port in dns.resolvers)
        config.use_resolvers_as_fallback = False
    return extension_pb2.TypedExtensionConfig(
        name="envoy.network.dns_resolver.cares", typed_config=_any(config)
    )


def _http_protocol_options(upstream: ir.Upstream) -> Any:
    """The HTTP version spoken to the upstream.

    HTTP2 over TLS offers ALPN ``h2`` by itself; in plaintext it is prior
    knowledge (h2c). AUTO lets ALPN choose: Envoy offers ``h2,http/1.1`` on
    its own, so ``alpn_protocols`` stays empty (setting it on an HTTP/1
    cluster let servers pick h2 while Envoy spoke HTTP/1.1). AUTO needs an
    ALPN-capable transport; without TLS it falls back to HTTP/1.1, which is
    what the IR says translation does for plaintext anyway.
    """
    options = http_protocol_options_pb2.HttpProtocolOptions()
    protocol = upstream.protocol
    if protocol is ir.UpstreamProtocol.AUTO and upstream.tls is None:
        protocol = ir.UpstreamProtocol.HTTP1
    if protocol is ir.UpstreamProtocol.HTTP2:
        options.explicit_http_config.http2_protocol_options.SetInParent()
    elif protocol is ir.UpstreamProtocol.AUTO:
        options.auto_config.http_protocol_options.SetInParent()
        options.auto_config.http2_protocol_options.SetInParent()
    else:
        options.explicit_http_config.http_protocol_options.SetInParent()
    return options


def _upstream_tls(tls: ir.UpstreamTLS) -> Any:
    """TLS origination that always verifies the chain and a SAN.

    Envoy does not compare SNI with the certificate, so the SAN matchers are
    what protects the name. A trusted CA comes over SDS, merged with the SAN
    matchers through a combined validation context. Translation names
    secrets by content, so a rotated CA or client certificate is a new secret
    and a changed cluster: Envoy replaces the cluster and drains connections
    made with the old material.
    """
    common = tls_pb2.CommonTlsContext(
        tls_params=common_pb2.TlsParameters(
            tls_minimum_protocol_version=_TLS_VERSIONS[tls.min_version],
            # Envoy's upstream default maximum is TLS 1.2.
            tls_maximum_protocol_version=_TLS_VERSIONS[tls.max_version],
        )
    )
    sans = [_san_matcher(san) for san in sorted(tls.subject_alt_names, key=_san_key)]
    if tls.trusted_ca is not None:
        combined = common.combined_validation_context
        combined.default_validation_context.match_typed_subject_alt_names.extend(sans)
        combined.validation_context_sds_secret_config.CopyFrom(_sds(tls.trusted_ca))
    else:
        common.validation_context.trusted_ca.filename = tls.system_trust_file
        common.validation_context.match_typed_subject_alt_names.extend(sans)
    if tls.client_certificate is not None:
        common.tls_certificate_sds_secret_configs.append(_sds(tls.client_certificate))
    return tls_pb2.UpstreamTlsContext(sni=tls.sni, common_tls_context=common)


def _san_key(san: ir.SubjectAltName) -> tuple[str, str]:
    return (san.kind, san.value)


def _san_matcher(san: ir.SubjectAltName) -> Any:
    """A certificate SAN condition.

    For DNS SANs with an ``exact`` matcher Envoy applies DNS semantics: case
    is ignored and a wildcard in the *certificate* (``*.example.com``) covers
    one label. A wildcard in the *expected* name is not understood by that
    matcher (it would only match the literal ``*.example.com``), so
    ``*.example.com`` becomes the regex ``(?i)^[^.]+\\.example\\.com$``: any
    single left-most label, including a certificate's own ``*``, per RFC 6125.
    A ``suffix`` matcher would wrongly accept deeper names (``a.b.example.com``).
    """
    matcher = string_pb2.StringMatcher()
    if san.kind == "DNS" and san.value.startswith("*."):
        pattern = "(?i)^[^.]+" + re.escape(san.value[1:]) + "$"
        # No engine named: ``google_re2`` is deprecated and RE2 is the default.
        matcher.safe_regex.regex = pattern
    else:
        matcher.exact = san.value
    return common_pb2.SubjectAltNameMatcher(san_type=_SAN_TYPES[san.kind], matcher=matcher)


# --------------------------------------------------------------------------
# Secrets
# --------------------------------------------------------------------------


def _secret(secret: ir.Secret) -> Any:
    out = secret_pb2.Secret(name=secret.name)
    if isinstance(secret, ir.TrustedCA):
        out.validation_context.trusted_ca.inline_string = secret.pem
    else:
        out.tls_certificate.certificate_chain.inline_string = secret.certificate_chain
        out.tls_certificate.private_key.inline_string = secret.private_key
    return out


def _redact(resource: dict[str, Any]) -> dict[str, Any]:
    """Replace secret material in a Secret's JSON mapping (others pass through)."""
    cert = resource.get("tlsCertificate")
    if isinstance(cert, dict) and "privateKey" in cert:
        cert["privateKey"] = {"inlineString": "<redacted>"}
    if "genericSecret" in resource:
        resource["genericSecret"] = {"secret": {"inlineString": "<redacted>"}}
    return resource


# --------------------------------------------------------------------------
# Small pieces
# --------------------------------------------------------------------------


def _ads() -> Any:
    """The ADS stream, API v3: where every dynamic reference is resolved."""
    return config_source_pb2.ConfigSource(
        ads=config_source_pb2.AggregatedConfigSource(),
        resource_api_version=config_source_pb2.V3,
    )


def _sds(name: str) -> Any:
    return secret_pb2.SdsSecretConfig(name=name, sds_config=_ads())


def _socket_address(host: str, port: int) -> Any:
    return address_pb2.Address(socket_address=address_pb2.SocketAddress(address=host, port_value=port))


def _duration_ms(ms: int) -> Any:
    return duration_pb2.Duration(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def _any(message: Any) -> Any:
    """Pack deterministically, so maps inside (e.g. the access log format) keep their bytes."""
    packed = any_pb2.Any()
    packed.Pack(message, deterministic=True)
    return packed


def _sort_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _sort_keys(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [_sort_keys(item) for item in value]
    return value
