"""Route configurations: IR virtual hosts and routes → Envoy ``RouteConfiguration`` resources.

Part of :mod:`weir.xds.build`. :func:`route_configuration` builds the routes
of an HTTP listener or of an HTTPS server of a TLS listener. An IR route becomes an Envoy route: its
match (path, headers, query parameters, method) and its action, a direct
response, a redirect, or forwarding to weighted clusters with timeouts,
retries, request mirrors, header edits (per route and per backend), path and
host rewrites, WebSocket upgrades and a CORS policy.

Route order and backend order are kept (they are semantic); virtual hosts
and domains are sorted. A route the IR contract forbids (an unknown
upstream, a raw TCP upstream, a negative timeout, an invalid redirect, retry
or mirror) raises :class:`ValueError`. Pure functions.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from envoy.config.core.v3 import base_pb2
from envoy.config.route.v3 import route_components_pb2, route_pb2
from envoy.type.matcher.v3 import regex_pb2, string_pb2
from envoy.type.v3 import percent_pb2
from google.protobuf import wrappers_pb2

from weir import ir
from weir.xds import filters, mcp, oauth2
from weir.xds.common import (
    cluster_name,
    duration_ms,
    upstream_of,
)
from weir.xds.filters.cors import origin_matcher as origin_matcher  # build re-exports it

#: Upstream protocols no HTTP route may send to, as error messages name them.
_NOT_HTTP = {ir.UpstreamProtocol.TCP: "raw TCP", ir.UpstreamProtocol.UDP: "UDP"}

#: ``Forward.unresolved_status`` as a route's ``cluster_not_found_response_code`` (a gRPC
#: request gets it as a gRPC status: 503 is ``UNAVAILABLE``).
_UNRESOLVED_CODES = {
    500: route_components_pb2.RouteAction.INTERNAL_SERVER_ERROR,
    503: route_components_pb2.RouteAction.SERVICE_UNAVAILABLE,
}


# --------------------------------------------------------------------------
# Route configurations and routes
# --------------------------------------------------------------------------


def route_configuration(listener: ir.Listener, upstreams: Mapping[str, ir.Upstream]) -> Any:
    """The listener's routes. Virtual hosts are sorted: Envoy picks one by domain, not order."""
    return route_pb2.RouteConfiguration(
        name=listener.name,
        virtual_hosts=[
            route_components_pb2.VirtualHost(
                name=vhost.name,
                domains=sorted(vhost.domains),
                routes=[_route(r, upstreams) for r in vhost.routes],
            )
            for vhost in sorted(listener.virtual_hosts, key=lambda v: v.name)
        ],
        **_CONFIGURATION_SETTINGS,
    )


#: What every route configuration says besides its name and virtual hosts (all of it in fields
#: numbered after ``virtual_hosts``: see :func:`route_configuration_bytes`).
_CONFIGURATION_SETTINGS: dict[str, Any] = {
    # A route may name UNRESOLVED_CLUSTER on purpose, or an upstream that is still warming; neither
    # may make Envoy reject the whole configuration.
    "validate_clusters": wrappers_pb2.BoolValue(value=False),
    # Virtual host domains carry no port: ``Host: a.example:8080`` picks ``a.example``, and the
    # backend receives the Host as the client sent it (Gateway API hostname intersection).
    # Redirects drop the Host's port (weir.xds.filters.redirect_host).
    "ignore_port_in_host_matching": True,
}


def route_configuration_bytes(name: str, virtual_hosts: list[bytes]) -> bytes:
    """:func:`route_configuration`'s message serialised (deterministically), from its virtual hosts
    already serialised and framed (:func:`virtual_host_field`, in name order).

    The build cache keeps those per virtual host, so that an edit of one of 10,000 virtual hosts
    joins bytes instead of building and serialising 10,000 messages. A deterministic
    serialisation writes fields in number order: the name (1), the virtual hosts (2), the rest.
    """
    head = route_pb2.RouteConfiguration(name=name).SerializeToString(deterministic=True)
    tail = route_pb2.RouteConfiguration(**_CONFIGURATION_SETTINGS).SerializeToString(deterministic=True)
    return b"".join((head, *virtual_hosts, tail))


def virtual_host_field(vhost: ir.VirtualHost, routes: list[bytes]) -> bytes:
    """``vhost`` serialised and framed as one element of ``RouteConfiguration.virtual_hosts``, its
    routes given serialised and framed (:func:`route_bytes`, in order). Fields in number order:
    the name (1), the domains (2), the routes (3)."""
    head = route_components_pb2.VirtualHost(name=vhost.name, domains=sorted(vhost.domains))
    return _field(_VIRTUAL_HOSTS_TAG, b"".join((head.SerializeToString(deterministic=True), *routes)))


def route_bytes(route: ir.Route, upstreams: Mapping[str, ir.Upstream]) -> bytes:
    """``route`` serialised and framed as one element of ``VirtualHost.routes``: a few hundred
    bytes, where the message would take several KiB."""
    return _field(_ROUTES_TAG, envoy_route(route, upstreams).SerializeToString(deterministic=True))


#: ``RouteConfiguration.virtual_hosts`` is field 2 and ``VirtualHost.routes`` field 3, both
#: length-delimited: their tag bytes are (2 << 3) | 2 and (3 << 3) | 2.
_VIRTUAL_HOSTS_TAG = b"\x12"
_ROUTES_TAG = b"\x1a"


def _field(tag: bytes, encoded: bytes) -> bytes:
    """``encoded`` framed as one length-delimited field with ``tag``."""
    size = len(encoded)
    prefix = bytearray(tag)
    while size > 0x7F:  # base-128 varint, least significant group first
        prefix.append((size & 0x7F) | 0x80)
        size >>= 7
    prefix.append(size)
    return bytes(prefix) + encoded


def _route(route: ir.Route, upstreams: Mapping[str, ir.Upstream]) -> Any:
    out = route_components_pb2.Route(name=route.name, match=_match(route.match))
    # Backends' own response edits carry the route's too (see _weighted_edits).
    own_response = isinstance(route.action, ir.Forward) and any(
        b.response_headers is not None for b in route.action.backends
    )
    if route.response_headers is not None and not own_response:
        out.response_headers_to_add.extend(_header_options(route.response_headers))
        out.response_headers_to_remove.extend(route.response_headers.remove)
    for name, config in filters.per_route_configs(route):  # CORS, redirect host, session (weir.xds.filters)
        out.typed_per_filter_config[name].CopyFrom(config)
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
    chosen = [upstream_of(route.name, b, upstreams) for b in backends]
    for upstream in chosen:
        if upstream is not None and upstream.protocol in _NOT_HTTP:
            raise ValueError(
                f"route {route.name!r}: upstream {upstream.name!r} "
                f"speaks {_NOT_HTTP[upstream.protocol]}, not HTTP"
            )
    action = out.route
    # Always explicit, 0 included (Envoy: no limit). The idle timeout of the
    # route replaces the connection manager's stream idle timeout. No filter
    # on the way (router; on clusters, header-only ones) buffers response
    # bodies (the MCP tool policy reads requests only), so responses, event
    # streams included, are passed on as they arrive.
    if route.action.request_timeout_ms < 0 or route.action.idle_timeout_ms < 0:
        raise ValueError(f"route {route.name!r}: negative timeout")
    action.timeout.CopyFrom(duration_ms(route.action.request_timeout_ms))
    action.idle_timeout.CopyFrom(duration_ms(route.action.idle_timeout_ms))
    if any(upstream is None for upstream in chosen):
        action.cluster_not_found_response_code = _UNRESOLVED_CODES[forward.unresolved_status]
    if any(upstream is not None and upstream.websocket for upstream in chosen):
        # A split with other upstreams too: they answer an upgrade request as they see fit.
        action.upgrade_configs.add(upgrade_type="websocket", enabled=wrappers_pb2.BoolValue(value=True))
    if any(upstream is not None and upstream.grpc for upstream in chosen):
        # A call's grpc-timeout becomes its limit upstream (0: the header's value, uncapped).
        action.max_stream_duration.grpc_timeout_header_max.CopyFrom(duration_ms(0))
    _forward_extras(route, forward, out, upstreams)
    rewrite_host = forward.rewrite.hostname if forward.rewrite is not None else None
    if rewrite_host is not None:
        action.host_rewrite_literal = rewrite_host
    own_edits = any(b.request_headers is not None or b.response_headers is not None for b in backends)
    # MCP tool policies apply to the share of requests whose destination (or a mirror) has one.
    mirrored = [upstreams.get(m.upstream) for m in forward.mirrors]
    # An OAuth2 token is added before the split chooses: only for a route whose every destination has it.
    for name, config in oauth2.per_filter_config([*chosen, *mirrored]).items():
        out.typed_per_filter_config[name].CopyFrom(config)
    if len(backends) == 1 and not own_edits:
        upstream = chosen[0]
        action.cluster = cluster_name(upstream)
        for name, config in mcp.per_filter_config(upstream, mirrored).items():
            out.typed_per_filter_config[name].CopyFrom(config)
        if upstream is not None and upstream.host_header is not None:
            # The route's own Host rewrite, if any, wins over the external hostname.
            action.host_rewrite_literal = rewrite_host or upstream.host_header
        return out
    for backend, upstream in zip(backends, chosen, strict=True):
        weight = action.weighted_clusters.clusters.add(name=cluster_name(upstream))
        weight.weight.value = backend.weight
        # Per backend: the Host rewrite applies only to the share of requests
        # that go to the external hostname.
        if upstream is not None and upstream.host_header is not None:
            weight.host_rewrite_literal = rewrite_host or upstream.host_header
        _weighted_edits(weight, route, backends, backend)
        for name, config in mcp.per_filter_config(upstream, mirrored).items():
            weight.typed_per_filter_config[name].CopyFrom(config)
    return out


#: One IR route as an Envoy route (what :func:`route_configuration` builds each route with).
envoy_route = _route


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
        prefix, regex = path_rewrite(route.name, path, route.match)
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
        if target.protocol in _NOT_HTTP:
            raise ValueError(
                f"route {route.name!r}: upstream {target.name!r} "
                f"speaks {_NOT_HTTP[target.protocol]}, not HTTP"
            )
        policy = action.request_mirror_policies.add(
            cluster=target.name, disable_shadow_host_suffix_append=True
        )
        if target.host_header is not None:
            policy.host_rewrite_literal = target.host_header
        if mirror.numerator != mirror.denominator:
            policy.runtime_fraction.default_value.CopyFrom(fraction(mirror.numerator, mirror.denominator))


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


# --------------------------------------------------------------------------
# Matches
# --------------------------------------------------------------------------


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
# Rewrites and redirects
# --------------------------------------------------------------------------


def path_rewrite(name: str, path: ir.PathRewrite, match: ir.RouteMatch) -> tuple[str, Any]:
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
    route's redirect-host filter has removed (:mod:`weir.xds.filters.redirect_host`): ``None`` writes none."""
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
            prefix, regex = path_rewrite(name, redirect.path, match)
            if regex is not None:
                out.regex_rewrite.CopyFrom(regex)
            else:
                out.prefix_rewrite = prefix
    return out


# --------------------------------------------------------------------------
# Retries and mirrors
# --------------------------------------------------------------------------


#: What is retried besides the status codes: connection errors (refused, reset,
#: disconnected) and, through ``reset``, an attempt cut by the per-try timeout
#: (``backendRequest``). Gateway API v1.6 asks for both once ``retry`` is set
#: (features HTTPRouteRetryConnectionError and HTTPRouteRetryBackendTimeout).
RETRY_ON = ("connect-failure", "refused-stream", "reset")


def _retry_policy(retry: ir.Retry | None, per_try_ms: int) -> Any:
    """Envoy's retry policy; with ``retry`` ``None`` it only carries the per-attempt timeout."""
    out = route_components_pb2.RetryPolicy()
    if per_try_ms:
        out.per_try_timeout.CopyFrom(duration_ms(per_try_ms))
    if retry is None:
        out.num_retries.value = 0
        return out
    if retry.attempts < 0 or any(not 100 <= code <= 599 for code in retry.codes):
        raise ValueError(f"invalid retry policy {retry!r}")
    out.retry_on = ",".join((*RETRY_ON, "retriable-status-codes") if retry.codes else RETRY_ON)
    out.retriable_status_codes.extend(sorted(retry.codes))
    out.num_retries.value = retry.attempts
    if retry.backoff_ms is not None:
        out.retry_back_off.base_interval.CopyFrom(duration_ms(max(1, retry.backoff_ms)))
    return out


def fraction(numerator: int, denominator: int) -> Any:
    """``numerator/denominator`` as Envoy's fraction (per hundred, ten thousand or million)."""
    kinds = percent_pb2.FractionalPercent
    for scale, kind in ((100, kinds.HUNDRED), (10_000, kinds.TEN_THOUSAND), (1_000_000, kinds.MILLION)):
        if scale % denominator == 0:
            return kinds(numerator=numerator * (scale // denominator), denominator=kind)
    return kinds(numerator=round(numerator * 1_000_000 / denominator), denominator=kinds.MILLION)
