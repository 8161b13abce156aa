"""IR → Envoy v3 resources. With its sibling modules, the only place in weir that knows Envoy's field names.

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
listener the server's. One resource has no IR counterpart: the internal
listener :data:`~weir.xds.endpoints.EGRESS_DENIED`, which stands for the
addresses of an external hostname that are all denied (see
:mod:`weir.xds.endpoints`).

This module holds the entry points and the checks of the IR's contract, which
run before anything is built. The resources themselves are built, one kind per
module, by :mod:`weir.xds.listeners`, :mod:`weir.xds.routes`,
:mod:`weir.xds.clusters` and :mod:`weir.xds.secrets`, with
:mod:`weir.xds.common` for the names and small messages they share. The
constants other code imports from here are re-exported from those modules.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

from google.protobuf import json_format
from google.protobuf.message import Message

from weir import ir
from weir.xds import oauth2
from weir.xds.clusters import (
    EXTERNAL_HEADER_PREFIXES_TO_REMOVE,
    EXTERNAL_HEADERS_TO_REMOVE,
    upstream_cluster,
)
from weir.xds.common import (
    CORS_FILTER,
    UNRESOLVED_CLUSTER,
    upstream_of,
)
from weir.xds.endpoints import EGRESS_DENIED, egress_denied_listener
from weir.xds.listeners import (
    ACCESS_LOG_FORMAT,
    EGRESS_DENIED_BODY,
    HTTPS_ALPN,
    TCP_ACCESS_LOG_FORMAT,
    TLS_RELAY_ACCESS_LOG_FORMAT,
    http_listener,
    tcp_listener,
    tls_listener,
    udp_listener,
)
from weir.xds.mcp import McpUse, uses_tool_policies
from weir.xds.routes import (
    RETRY_ON,
    fraction,
    origin_matcher,
    path_rewrite,
    route_configuration,
)
from weir.xds.secrets import envoy_secret, redact
from weir.xds.snapshot import CLUSTER, LISTENER, PUSH_ORDER, ROUTE, SECRET

__all__ = [
    "ACCESS_LOG_FORMAT",
    "CORS_FILTER",
    "EGRESS_DENIED_BODY",
    "EXTERNAL_HEADERS_TO_REMOVE",
    "EXTERNAL_HEADER_PREFIXES_TO_REMOVE",
    "HTTPS_ALPN",
    "RETRY_ON",
    "TCP_ACCESS_LOG_FORMAT",
    "TLS_RELAY_ACCESS_LOG_FORMAT",
    "UNRESOLVED_CLUSTER",
    "build",
    "to_data",
]

# Helpers of routes that unit tests reach through this module under their former private names.
_fraction = fraction
_origin_matcher = origin_matcher
_path_rewrite = path_rewrite


def build(ir_: ir.IR) -> dict[str, dict[str, Message]]:
    """Envoy resources for ``ir_``: type URL → resource name → message.

    Every type URL of :mod:`weir.xds.snapshot` is present, possibly empty
    (endpoints always are: the controller adds them,
    :mod:`weir.external_endpoints`); names are inserted in sorted order.
    Raises :class:`ValueError` when the IR breaks its own contract (a
    duplicate name, a reference to an upstream or secret that does not
    exist or is of the wrong kind, TLS
    without a trust source or without names to verify): such an IR is a bug
    in translation, and serving it could be insecure or fail silently.

    :class:`weir.xds.cache.BuildCache` gives the same resources, serialised,
    rebuilding only what an IR change touches.
    """
    return assemble(ir_, Parts())


class Parts:
    """How :func:`assemble` makes each part of the output; this one builds every part afresh.

    A part is what one IR object becomes: an upstream its cluster, a secret
    its SDS secret, a listener its Envoy listener and route configurations. Each
    method is a pure function of its arguments, and reads from ``upstreams``
    and ``secrets`` only the entries it needs, so that a cache
    (:class:`weir.xds.cache.BuildCache`) may reuse a part while those
    entries are unchanged.
    """

    def cluster(self, upstream: ir.Upstream, dns: ir.DnsSettings) -> Any:
        return upstream_cluster(upstream, dns)

    def secret(self, secret: ir.Secret) -> Any:
        return envoy_secret(secret)

    def egress_denied(self) -> dict[str, Any]:
        """The listener answering for names whose addresses are all denied (:mod:`weir.xds.endpoints`)."""
        return {EGRESS_DENIED: egress_denied_listener()}

    def listener(
        self,
        listener: ir.AnyListener,
        upstreams: Mapping[str, ir.Upstream],
        secrets: Mapping[str, ir.Secret],
    ) -> dict[str, dict[str, Any]]:
        """Type URL → name → resource: the listener and its route configurations."""
        return listener_part(listener, upstreams, secrets)

    def clusters(self, upstreams: Mapping[str, ir.Upstream], dns: ir.DnsSettings) -> dict[str, Any]:
        """Every upstream's cluster, by name in order (a cache remakes only those that changed)."""
        return {name: self.cluster(upstreams[name], dns) for name in sorted(upstreams)}

    def secrets(self, secrets: Mapping[str, ir.Secret]) -> dict[str, Any]:
        """Every secret's SDS secret, by name in order."""
        return {name: self.secret(secrets[name]) for name in sorted(secrets)}

    def to_check(
        self, upstreams: Mapping[str, ir.Upstream], secrets: Mapping[str, ir.Secret]
    ) -> Iterable[ir.Upstream]:
        """The upstreams whose settings :func:`assemble` must check (a cache: those that changed,
        when no secret did)."""
        return upstreams.values()


def assemble(ir_: ir.IR, parts: Parts) -> dict[str, dict[str, Any]]:
    """The resources of ``ir_``, each part made by ``parts`` (see :func:`build`)."""
    upstreams = _unique("upstream", ir_.upstreams)
    secrets = _unique("secret", ir_.secrets)
    listeners = _unique("listener", ir_.listeners)
    for upstream in parts.to_check(upstreams, secrets):
        if upstream.tls is not None:
            _check_tls(upstream.name, upstream.tls, secrets)
        if upstream.websocket and upstream.protocol is not ir.UpstreamProtocol.HTTP1:
            raise ValueError(f"upstream {upstream.name!r}: WebSocket upgrades need HTTP/1.1")
        if upstream.grpc and upstream.protocol is not ir.UpstreamProtocol.HTTP2:
            raise ValueError(f"upstream {upstream.name!r}: gRPC needs HTTP/2")

    out: dict[str, dict[str, Any]] = {type_url: {} for type_url in PUSH_ORDER}
    for name in sorted(listeners):
        for type_url, by_name in parts.listener(listeners[name], upstreams, secrets).items():
            out[type_url].update(by_name)
    # Maybe a mapping the parts handed out before (a cache's): replaced below, never changed.
    out[CLUSTER] = parts.clusters(upstreams, ir_.dns)
    out[SECRET] = parts.secrets(secrets)
    if any(isinstance(upstream.destination, ir.DnsName) for upstream in upstreams.values()):
        out[LISTENER] = dict(sorted({**out[LISTENER], **parts.egress_denied()}.items()))
    out[ROUTE] = dict(sorted(out[ROUTE].items()))  # HTTPS servers' routes are named after them
    return out


#: A route configuration made from a listener's (or an HTTPS server's) routes: (the resource,
#: whether a route sends requests to an upstream with an MCP tool policy).
RouteConfig = Callable[[ir.Listener, Mapping[str, ir.Upstream]], tuple[Any, McpUse | None]]


#: Makes a TLS socket's listener: :func:`weir.xds.listeners.tls_listener`'s signature.
TlsListenerMaker = Callable[
    [
        ir.TlsListener,
        Mapping[str, list[ir.Upstream | None]],
        dict[str, McpUse],
        Mapping[str, tuple[ir.OAuth2Credential, ...]],
    ],
    Any,
]


def route_config(routes: ir.Listener, upstreams: Mapping[str, ir.Upstream]) -> tuple[Any, McpUse | None]:
    """The :data:`RouteConfig` of :func:`build`: the message, built afresh."""
    return route_configuration(routes, upstreams), uses_tool_policies(routes.virtual_hosts, upstreams)


def listener_part(
    listener: ir.AnyListener,
    upstreams: Mapping[str, ir.Upstream],
    secrets: Mapping[str, ir.Secret],
    *,
    make_routes: RouteConfig = route_config,
    make_tls_listener: TlsListenerMaker = tls_listener,
) -> dict[str, dict[str, Any]]:
    """What one IR listener becomes (see :meth:`Parts.listener`); its route configurations made by
    ``make_routes``, a TLS socket's listener by ``make_tls_listener`` (the build cache's keep the
    parts that did not change)."""
    name = listener.name
    out: dict[str, dict[str, Any]] = {LISTENER: {}, ROUTE: {}}
    if isinstance(listener, ir.TcpListener):
        out[LISTENER][name] = tcp_listener(listener, _tcp_upstreams(listener, upstreams))
    elif isinstance(listener, ir.UdpListener):
        chosen = _tcp_upstreams(listener, upstreams)
        out[LISTENER][name] = udp_listener(listener, next((u.name for u in chosen if u is not None), None))
    elif isinstance(listener, ir.TlsListener):
        _check_tls_listener(listener, secrets)
        relays = {relay.name: _tcp_upstreams(relay, upstreams) for relay in listener.relays}
        mcp_servers: dict[str, McpUse] = {}
        oauth2_servers: dict[str, tuple[ir.OAuth2Credential, ...]] = {}
        for server in listener.https:
            # The server's routes, shaped as a listener's: the same route configuration.
            routes = ir.Listener(server.name, listener.address, listener.port, server.virtual_hosts)
            out[ROUTE][server.name], mcp_tools = make_routes(routes, upstreams)
            if mcp_tools is not None:
                mcp_servers[server.name] = mcp_tools
            credentials = oauth2.credentials_used(server.virtual_hosts, upstreams)
            if credentials:
                oauth2_servers[server.name] = credentials
        out[LISTENER][name] = make_tls_listener(listener, relays, mcp_servers, oauth2_servers)
    else:
        out[ROUTE][name], mcp_tools = make_routes(listener, upstreams)
        credentials = oauth2.credentials_used(listener.virtual_hosts, upstreams)
        out[LISTENER][name] = http_listener(listener, mcp_tools=mcp_tools, oauth2_credentials=credentials)
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
            name: _redact_inline_credentials(resource_data(message))
            if type_url == CLUSTER
            else resource_data(message)
            for name, message in by_name.items()
        }
        for type_url, by_name in resources.items()
    }
    return cast(dict[str, Any], _sort_keys(data))  # copies: no part shared


def resource_data(message: Message) -> Any:
    """One resource of :func:`to_data`: its proto JSON mapping, keys sorted, secrets redacted.

    Equal ``Any`` parts are one shared object (see :class:`_SharingPrinter`): read it, or copy it
    before changing it.
    """
    return _sort_keys(redact(_PRINTER._MessageToJsonObject(message)), _PRINTER.sorted)


class _SharingPrinter(json_format._Printer):  # type: ignore[misc]
    """``MessageToDict``'s printer that converts each distinct ``Any`` (type and bytes) once.

    Almost all of a resource's conversion is inside its ``Any`` fields (typed
    filter and protocol configs), and clusters and virtual hosts repeat the same
    ones (the egress guard, the header removal, protocol options): at 10,000
    clusters, converting each once made ``weir translate`` several times faster.
    The converted mappings are kept with their keys sorted (``sorted``: their
    ids, for :func:`_sort_keys` to take as they are), shared and never mutated
    (:func:`redact` replaces top-level fields of a Secret, which is not an
    ``Any``). Holds at most :data:`_SHARED_ANY` of them; an id stays in
    ``sorted`` only while the cache keeps its object alive.
    """

    def __init__(self) -> None:
        super().__init__(preserving_proto_field_name=False)
        self._converted: dict[tuple[str, bytes], Any] = {}
        self.sorted: set[int] = set()

    def _AnyMessageToJsonObject(self, message: Message) -> Any:  # the base's name
        key = (message.type_url, message.value)
        found = self._converted.get(key)
        if found is None:
            if len(self._converted) >= _SHARED_ANY:
                self._converted.clear()
                self.sorted.clear()
            found = _sort_keys(dict(super()._AnyMessageToJsonObject(message)), self.sorted)
            self._converted[key] = found
            self.sorted.add(id(found))
        return found


_SHARED_ANY = 4096
_PRINTER = _SharingPrinter()


# --------------------------------------------------------------------------
# Contract checks
# --------------------------------------------------------------------------


def _unique(kind: str, items: tuple[Any, ...]) -> dict[str, Any]:
    """Items by name; a repeated name is an error rather than a silent overwrite."""
    unique = {item.name: item for item in items}
    if len(unique) == len(items):
        return unique
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


#: The upstream protocols that are a transport, not HTTP, as messages name them.
_TRANSPORTS = {ir.UpstreamProtocol.TCP: "raw TCP", ir.UpstreamProtocol.UDP: "UDP"}


def _tcp_upstreams(
    listener: ir.TcpListener | ir.TlsRelay | ir.UdpListener, upstreams: Mapping[str, ir.Upstream]
) -> list[ir.Upstream | None]:
    """The upstream of each backend of a TCP or UDP listener or TLS relay (``None``: failed to
    resolve), each of the listener's transport (raw TCP, UDP). Refuses a broken IR."""
    expected = ir.UpstreamProtocol.UDP if isinstance(listener, ir.UdpListener) else ir.UpstreamProtocol.TCP
    if isinstance(listener, ir.UdpListener) and len(listener.backends) > 1:
        raise ValueError(f"listener {listener.name!r}: a UDP listener has at most one backend")
    if listener.idle_timeout_ms < 0:
        raise ValueError(f"listener {listener.name!r}: negative idle timeout")
    chosen = []
    for backend in listener.backends:
        if backend.weight <= 0:
            raise ValueError(f"listener {listener.name!r}: backend weight must be > 0")
        upstream = upstream_of(listener.name, backend, upstreams)
        if upstream is not None and upstream.protocol is not expected:
            spoken = _TRANSPORTS.get(upstream.protocol, "HTTP")
            raise ValueError(
                f"listener {listener.name!r}: upstream {upstream.name!r} speaks {spoken}, "
                f"not {_TRANSPORTS[expected]}"
            )
        chosen.append(upstream)
    return chosen


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


def _redact_inline_credentials(value: Any) -> Any:
    """``value`` with the secret parts of inline AWS credentials (a cluster's SigV4 filter) replaced
    by ``<redacted>``; the parts on the way are copied (converted ``Any`` mappings are shared), the
    rest returned as is."""
    if isinstance(value, dict):
        credential = value.get("inlineCredential")
        if isinstance(credential, dict):
            hidden = {
                k: "<redacted>" if k in ("secretAccessKey", "sessionToken") else v
                for k, v in credential.items()
            }
            return {**value, "inlineCredential": hidden}
        changed = {key: _redact_inline_credentials(item) for key, item in value.items()}
        return value if all(changed[key] is value[key] for key in value) else changed
    if isinstance(value, list):
        items = [_redact_inline_credentials(item) for item in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    return value


def _sort_keys(value: Any, done: set[int] | frozenset[int] = frozenset()) -> Any:
    """``value`` with the keys of every mapping sorted; mappings whose id is in ``done`` (sorted
    already, and kept alive by whoever gave the ids) are taken as they are."""
    if isinstance(value, dict):
        if id(value) in done:
            return value
        return {key: _sort_keys(value[key], done) for key in sorted(value)}
    if isinstance(value, list):
        return [_sort_keys(item, done) for item in value]
    return value
