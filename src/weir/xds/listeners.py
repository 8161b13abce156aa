"""Listeners: IR listeners → Envoy ``Listener`` resources (part of :mod:`weir.xds.build`).

- HTTP listeners (:func:`http_listener`): one HTTP connection manager whose
  routes come over RDS under the listener's name, with its HTTP filters
  (CORS, router), JSON access log, local replies (the egress guard's 403
  body) and path normalisation; where routes lead to MCP tool policies,
  also their filters, gRPC access log and JSON-RPC errors (:mod:`weir.xds.mcp`).
- TCP listeners (:func:`tcp_listener`): a TCP proxy to the backends' clusters.
- TLS listeners (:func:`tls_listener`): a TLS inspector, and one filter
  chain per HTTPS server (TLS termination and a connection manager whose
  routes are named after the server) and per TLS relay (a TCP proxy, behind
  TLS termination when the relay has certificates).

Callers pass upstreams already resolved and checked against the IR contract
(:func:`weir.xds.build.build` does); these functions only shape messages and
are pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from envoy.config.accesslog.v3 import accesslog_pb2
from envoy.config.core.v3 import address_pb2, base_pb2
from envoy.config.core.v3 import substitution_format_string_pb2 as format_pb2
from envoy.config.listener.v3 import listener_components_pb2, listener_pb2, udp_listener_config_pb2
from envoy.extensions.access_loggers.filters.cel.v3 import cel_pb2
from envoy.extensions.access_loggers.stream.v3 import stream_pb2
from envoy.extensions.filters.listener.tls_inspector.v3 import tls_inspector_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm_pb2,
)
from envoy.extensions.filters.network.tcp_proxy.v3 import tcp_proxy_pb2
from envoy.extensions.filters.udp.udp_proxy.v3 import route_pb2 as udp_route_pb2
from envoy.extensions.filters.udp.udp_proxy.v3 import udp_proxy_pb2
from envoy.extensions.transport_sockets.tls.v3 import common_pb2, tls_pb2
from google.protobuf import struct_pb2, wrappers_pb2
from xds.core.v3 import extension_pb2 as xds_extension_pb2
from xds.type.matcher.v3 import matcher_pb2 as xds_matcher_pb2

from weir import ir
from weir.xds import filters
from weir.xds.common import (
    UNRESOLVED_CLUSTER,
    ads,
    cluster_name,
    duration_ms,
    pack,
    socket_address,
)
from weir.xds.endpoints import DENIED_HOST_PREFIX
from weir.xds.mcp import McpUse
from weir.xds.secrets import sds

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
#: ends). A connection to an external hostname whose every address is denied
#: names the internal listener ``weir-egress-denied`` in ``upstream_host``
#: (see :mod:`weir.xds.endpoints`).
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


#: JSON access log fields of TLS relays: those of TCP listeners, and the client's server name.
TLS_RELAY_ACCESS_LOG_FORMAT = {**TCP_ACCESS_LOG_FORMAT, "server_name": "%REQUESTED_SERVER_NAME%"}


#: The protocols an HTTPS server offers in ALPN, preferred first.
HTTPS_ALPN = ("h2", "http/1.1")


#: The body of the 403 a client gets when every address of an external hostname is denied
#: (the upstream host is ``envoy://weir-egress-denied/<each address and its network>``).
EGRESS_DENIED_BODY = (
    "weir egress guard: every address %UPSTREAM_CLUSTER% resolves to is in a denied network; "
    "no connection was made [%UPSTREAM_HOST%]\n"
)


# --------------------------------------------------------------------------
# HTTP listeners
# --------------------------------------------------------------------------


def http_listener(
    listener: ir.Listener,
    *,
    mcp_tools: McpUse | None = None,
    oauth2_credentials: tuple[ir.OAuth2Credential, ...] = (),
) -> Any:
    """One plain-HTTP listener whose single filter chain is an HTTP connection manager.

    ``mcp_tools``: some route reaches an upstream with an MCP tool policy (see
    :func:`weir.xds.mcp.uses_tool_policies`); ``oauth2_credentials``: those of
    the upstreams its routes reach (:func:`weir.xds.oauth2.credentials_used`).
    """
    return listener_pb2.Listener(
        name=listener.name,
        address=socket_address(listener.address, listener.port),
        filter_chains=[
            listener_components_pb2.FilterChain(
                filters=[
                    _http_connection_manager(
                        listener.name,
                        route_config_name=listener.name,
                        mcp_tools=mcp_tools,
                        oauth2_credentials=oauth2_credentials,
                    )
                ]
            )
        ],
    )


def _http_connection_manager(
    listener_name: str,
    *,
    route_config_name: str,
    mcp_tools: McpUse | None,
    unverified_certificates: bool = False,
    oauth2_credentials: tuple[ir.OAuth2Credential, ...] = (),
) -> Any:
    """The HTTP connection manager filter of an HTTP listener, or of an HTTPS server of a TLS listener.

    Its routes come over RDS (``route_config_name``). Over TLS, ALPN decides
    between HTTP/2 and HTTP/1.1 (the codec follows it). With ``mcp_tools``,
    the filters, access log and local replies of MCP tool policies
    (:mod:`weir.xds.mcp`), which routes enable where they apply; likewise
    the token filter of each of ``oauth2_credentials`` (:mod:`weir.xds.oauth2`),
    last before the router.
    """
    needs = filters.ChainNeeds(
        mcp_tools=mcp_tools is not None,
        mcp_jwt=mcp_tools.jwt if mcp_tools is not None else frozenset(),
        unverified_certificates=unverified_certificates,
        oauth2_credentials=oauth2_credentials,
    )
    hcm = hcm_pb2.HttpConnectionManager(
        # Envoy names listener stats ``listener.ADDRESS_PORT``; follow suit.
        stat_prefix=listener_name.replace(":", "_"),
        # AUTO: HTTP/1.1 and prior-knowledge HTTP/2 (h2c) clients alike.
        codec_type=hcm_pb2.HttpConnectionManager.AUTO,
        rds=hcm_pb2.Rds(config_source=ads(), route_config_name=route_config_name),
        # The chain of the filter registry, in its declared order (weir.xds.filters).
        http_filters=filters.http_filters(needs),
        access_log=[_access_log(), *filters.access_logs(needs)],
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
        local_reply_config=_local_replies(needs),
        # Declared here, off: Envoy passes an upgrade on only if the connection manager knows
        # its type, and then per route; routes to WebSocket upstreams turn it on (weir.xds.routes).
        upgrade_configs=[
            hcm_pb2.HttpConnectionManager.UpgradeConfig(
                upgrade_type="websocket", enabled=wrappers_pb2.BoolValue(value=False)
            )
        ],
    )
    return listener_components_pb2.Filter(
        name="envoy.filters.network.http_connection_manager", typed_config=pack(hcm)
    )


def _local_replies(needs: filters.ChainNeeds) -> Any:
    """Envoy's own answers, reworded where its default says too little.

    A request to an external hostname whose every address is denied reaches
    the endpoint :data:`weir.xds.endpoints.EGRESS_DENIED`, which closes the
    connection (Envoy's answer: 503, reset before headers). This mapper
    selects those by the upstream host's address (a CEL filter; the
    address is weir's) and answers 403 naming the upstream and the refused
    addresses (for a gRPC call, ``PERMISSION_DENIED``).
    The filter modules add theirs (:mod:`weir.xds.filters`): the MCP tool
    policy's refusals become JSON-RPC errors the same way
    (:func:`weir.xds.mcp.local_reply_mappers`).
    """
    denied = cel_pb2.ExpressionFilter(
        expression=f"has(upstream.address) && upstream.address.startsWith('{DENIED_HOST_PREFIX}')"
    )
    body = format_pb2.SubstitutionFormatString(
        text_format_source=base_pb2.DataSource(inline_string=EGRESS_DENIED_BODY)
    )
    mapper = hcm_pb2.ResponseMapper(
        filter=accesslog_pb2.AccessLogFilter(
            extension_filter=accesslog_pb2.ExtensionFilter(
                name="envoy.access_loggers.extension_filters.cel", typed_config=pack(denied)
            )
        ),
        status_code=wrappers_pb2.UInt32Value(value=403),
        body_format_override=body,
    )
    return hcm_pb2.LocalReplyConfig(mappers=[mapper, *filters.local_reply_mappers(needs)])


def _access_log(fields: Mapping[str, str] = ACCESS_LOG_FORMAT) -> Any:
    fmt = struct_pb2.Struct()
    fmt.update(fields)
    stdout = stream_pb2.StdoutAccessLog(log_format=format_pb2.SubstitutionFormatString(json_format=fmt))
    return accesslog_pb2.AccessLog(name="envoy.access_loggers.stdout", typed_config=pack(stdout))


# --------------------------------------------------------------------------
# TCP listeners
# --------------------------------------------------------------------------


def tcp_listener(listener: ir.TcpListener, chosen: list[ir.Upstream | None]) -> Any:
    """A listener whose single filter chain is a TCP proxy to the listener's backends (``chosen``:
    their upstreams, ``None`` for a failed share), picked by weight.

    An external hostname's cluster holds only the addresses its egress policy
    allows (:mod:`weir.xds.endpoints`), so the proxy connects directly.
    """
    return listener_pb2.Listener(
        name=listener.name,
        address=socket_address(listener.address, listener.port),
        filter_chains=[
            listener_components_pb2.FilterChain(filters=[_tcp_proxy(listener.name, listener, chosen)])
        ],
    )


def udp_listener(listener: ir.UdpListener, cluster: str | None) -> Any:
    """A UDP listener whose proxy sends every session's datagrams to ``cluster``.

    ``None`` (no usable backend): to :data:`UNRESOLVED_CLUSTER`, which does
    not exist, so Envoy drops the datagrams (``no_route`` in the proxy's stats)
    rather than sending them anywhere.
    """
    route = udp_route_pb2.Route(cluster=cluster or UNRESOLVED_CLUSTER)
    action = xds_extension_pb2.TypedExtensionConfig(name="route", typed_config=pack(route))
    proxy = udp_proxy_pb2.UdpProxyConfig(
        # Envoy names listener stats ``listener.ADDRESS_PORT``; follow suit.
        stat_prefix=listener.name.replace(":", "_"),
        idle_timeout=duration_ms(listener.idle_timeout_ms),
        matcher=xds_matcher_pb2.Matcher(on_no_match=xds_matcher_pb2.Matcher.OnMatch(action=action)),
    )
    address = socket_address(listener.address, listener.port)
    address.socket_address.protocol = address_pb2.SocketAddress.UDP
    return listener_pb2.Listener(
        name=listener.name,
        address=address,
        udp_listener_config=udp_listener_config_pb2.UdpListenerConfig(),
        listener_filters=[
            listener_components_pb2.ListenerFilter(
                name="envoy.filters.udp_listener.udp_proxy", typed_config=pack(proxy)
            )
        ],
    )


def _tcp_proxy(
    listener_name: str,
    relay: ir.TcpListener | ir.TlsRelay,
    chosen: list[ir.Upstream | None],
    *,
    access_log: Mapping[str, str] = TCP_ACCESS_LOG_FORMAT,
) -> Any:
    """The TCP proxy filter relaying the connections of a TCP listener or a TLS relay (see above)."""
    proxy = tcp_proxy_pb2.TcpProxy(
        # Envoy names listener stats ``listener.ADDRESS_PORT``; follow suit.
        stat_prefix=listener_name.replace(":", "_"),
        # Always explicit, 0 included (no limit).
        idle_timeout=duration_ms(relay.idle_timeout_ms),
        access_log=[_access_log(access_log)],
    )
    if len(relay.backends) <= 1:
        proxy.cluster = cluster_name(chosen[0] if chosen else None)
    else:
        for backend, upstream in zip(relay.backends, chosen, strict=True):
            proxy.weighted_clusters.clusters.add(name=cluster_name(upstream), weight=backend.weight)
    return listener_components_pb2.Filter(name="envoy.filters.network.tcp_proxy", typed_config=pack(proxy))


# --------------------------------------------------------------------------
# TLS listeners
# --------------------------------------------------------------------------


def tls_listener(
    listener: ir.TlsListener,
    relays: Mapping[str, list[ir.Upstream | None]],
    mcp_servers: Mapping[str, McpUse] | None = None,
    oauth2_servers: Mapping[str, tuple[ir.OAuth2Credential, ...]] | None = None,
) -> Any:
    """A listener reading each connection's ClientHello, with one filter chain per HTTPS server and relay.

    The TLS inspector reads the server name; Envoy then picks the filter
    chain whose ``server_names`` match it best (exact, then the longest
    wildcard, then the chain without names), among chains for TLS only:
    anything else is closed, as is a name no chain matches. HTTPS servers
    terminate TLS and run a connection manager whose routes, over RDS, are
    named after the server; relays run a TCP proxy, behind a TLS
    termination when they have certificates. ``relays`` gives each relay's
    upstreams (``None``: failed to resolve);
    ``mcp_servers`` the HTTPS servers with routes to upstreams with MCP tool
    policies (as ``mcp_tools`` of :func:`http_listener`), ``oauth2_servers`` the
    OAuth2 credentials of each HTTPS server's routes. With no entry at
    all, one chain without filters closes every connection (Envoy needs a
    chain).
    """
    chains = []
    for server in sorted(listener.https, key=lambda x: x.name):
        chain = listener_components_pb2.FilterChain(
            name=server.name,
            filter_chain_match=_server_name_match(server.server_names),
            filters=[
                _http_connection_manager(
                    listener.name,
                    route_config_name=server.name,
                    mcp_tools=(mcp_servers or {}).get(server.name),
                    unverified_certificates=server.client_validation is not None
                    and not server.client_validation.required,
                    oauth2_credentials=(oauth2_servers or {}).get(server.name, ()),
                )
            ],
        )
        _terminate_tls(chain, server.certificates, alpn=HTTPS_ALPN, clients=server.client_validation)
        chains.append(chain)
    for relay in sorted(listener.relays, key=lambda x: x.name):
        proxy = _tcp_proxy(
            listener.name,
            relay,
            relays[relay.name],
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
        address=socket_address(listener.address, listener.port),
        listener_filters=[
            listener_components_pb2.ListenerFilter(
                name="envoy.filters.listener.tls_inspector",
                typed_config=pack(tls_inspector_pb2.TlsInspector()),
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


def _terminate_tls(
    chain: Any,
    certificates: tuple[str, ...],
    *,
    alpn: tuple[str, ...],
    clients: ir.ClientValidation | None = None,
) -> None:
    """Give ``chain`` a TLS transport socket presenting ``certificates`` (SDS), TLS 1.2 to 1.3.

    With several certificates, Envoy presents the one whose names match the
    client's server name (exact before wildcard), else the first. With
    ``clients``, clients are asked for a certificate that chains to its
    trusted CA (over SDS); a required one fails the handshake when missing
    or untrusted, an optional one (``ACCEPT_UNTRUSTED``) never does.
    """
    common = tls_pb2.CommonTlsContext(
        tls_params=common_pb2.TlsParameters(
            tls_minimum_protocol_version=common_pb2.TlsParameters.TLSv1_2,
            tls_maximum_protocol_version=common_pb2.TlsParameters.TLSv1_3,
        ),
        tls_certificate_sds_secret_configs=[sds(name) for name in certificates],
        alpn_protocols=list(alpn),
    )
    context = tls_pb2.DownstreamTlsContext(common_tls_context=common)
    if clients is not None:
        combined = context.common_tls_context.combined_validation_context  # the context holds a copy
        combined.validation_context_sds_secret_config.CopyFrom(sds(clients.trusted_ca))
        combined.default_validation_context.SetInParent()  # required by Envoy, even when empty
        # Explicit either way: Envoy warns that its default (not required) will change.
        context.require_client_certificate.value = clients.required
        if not clients.required:
            combined.default_validation_context.trust_chain_verification = (
                common_pb2.CertificateValidationContext.ACCEPT_UNTRUSTED
            )
    chain.transport_socket.name = "envoy.transport_sockets.tls"
    chain.transport_socket.typed_config.CopyFrom(pack(context))
