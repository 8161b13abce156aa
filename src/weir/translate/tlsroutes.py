"""TLSRoutes: attachment to TLS listeners by server name, the backends of each name, and route status.

A TLS listener serves the server names (SNI) that its hostname and its
routes' ``hostnames`` have in common (:func:`weir.translate.attachment.intersect_hostnames`):
a route whose hostnames match none of the listener's is not accepted there
(``NoMatchingListenerHostname``). When several routes claim one server name
on a listener, the oldest (creation time, then namespace/name) gets its
connections; the others stay ``Accepted=True``, count in ``attachedRoutes``
and say in their message which route gets the connections instead, as for
TCPRoutes.

In mode ``Passthrough`` the client's TLS goes to the backend unchanged, so a
backend that would wrap it in TLS of the gateway's own (an XBackend with
``tls``, a Service with a BackendTLSPolicy) is refused there: its share of
connections is closed and the route's ``ResolvedRefs`` says why. In mode
``Terminate`` such a backend is how the relayed bytes get encrypted again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from weir import ir
from weir.api.gateway_v1 import BackendRef
from weir.api.gateway_v1_tlsroute import TLSRoute
from weir.api.meta import ObjectKey
from weir.resources import Resources
from weir.translate import status as st
from weir.translate.attachment import (
    NONE_ATTACHED,
    RouteParent,
    RouteTable,
    count_attached,
    parent_index,
    route_parent_entry,
    route_parents,
    route_precedence,
    route_status,
)
from weir.translate.backends import BackendResolver, RefFailure, no_usable_backend
from weir.translate.gateways import GatewayContext, ListenerContext
from weir.translate.tcproutes import tcp_backends

KIND = "TLSRoute"


@dataclass
class _Route:
    route: TLSRoute
    parents: list[RouteParent]
    #: Backends for listeners that terminate TLS, and for passthrough ones (TLS-originating
    #: upstreams turned into closed shares).
    backends: tuple[ir.WeightedBackend, ...]
    passthrough_backends: tuple[ir.WeightedBackend, ...]
    failure: RefFailure | None

    @property
    def precedence(self) -> tuple[str, str, str]:
        return route_precedence(self.route)


def translate_tls_routes(
    resources: Resources,
    gateways: list[GatewayContext],
    resolver: BackendResolver,
    controller_name: str,
    table: RouteTable,
    attached: Mapping[ObjectKey, list[RouteParent]] = NONE_ATTACHED,
) -> dict[ObjectKey, dict[str, Any]]:
    """Attach every TLSRoute (unless ``attached`` already: see :func:`weir.translate.users.xbackend_users`),
    fill the listeners' ``relays``, and return the routes' statuses.

    Upstreams and secrets of the backends go to ``table``. As for the other
    route kinds, only parentRefs to weir's Gateways (or to Gateways that do
    not exist) get a status entry; other controllers' entries are kept.
    """
    by_key, existing = parent_index(resources, gateways)
    routes: list[_Route] = []
    statuses: dict[ObjectKey, dict[str, Any]] = {}
    for route in resources.tls_routes:
        parents = attached.get(route.key)
        if parents is None:
            parents = route_parents(resources, route, by_key, existing, TLS_KIND)
        if not parents:
            stale = route_status(route, controller_name, [], resolver.interner)
            if stale is not None:
                statuses[route.key] = stale
            continue
        gateways_used = {a.listener.gateway.key for p in parents for a in p.attachments}
        passthrough = any(not a.listener.terminates_tls for p in parents for a in p.attachments)
        routes.append(_resolve(route, parents, resolver, gateways_used, table, passthrough=passthrough))

    # On each listener, each server name goes to the oldest route claiming it.
    winners: dict[tuple[int, str], _Route] = {}
    for entry in sorted(routes, key=lambda r: r.precedence):
        for parent in entry.parents:
            for att in parent.attachments:
                for name in att.hostnames:
                    if winners.setdefault((id(att.listener), name), entry) is entry:
                        lc = att.listener
                        lc.relays[name] = entry.backends if lc.terminates_tls else entry.passthrough_backends
    for entry in routes:
        count_attached(entry.parents)

    for entry in routes:
        route = entry.route
        ours = []
        for parent in entry.parents:
            accepted = parent.accepted
            shadowed = [
                (att.listener, name, winners[(id(att.listener), name)])
                for att in parent.attachments
                for name in att.hostnames
                if winners[(id(att.listener), name)] is not entry
            ]
            if shadowed:
                accepted = dataclasses.replace(accepted, message=_shadowed_message(shadowed))
            ours.append(route_parent_entry(route, parent.ref, controller_name, accepted, entry.failure))
        statuses[route.key] = route_status(route, controller_name, ours, resolver.interner) or {"parents": []}
    return statuses


class TlsRouteKind:
    """TLSRoute's side of :class:`~weir.translate.attachment.RouteKind`: a listener takes the route
    for the server names both have."""

    by_hostname = True

    def unsupported(self, route: TLSRoute) -> str | None:
        return None


TLS_KIND = TlsRouteKind()


def _resolve(
    route: TLSRoute,
    parents: list[RouteParent],
    resolver: BackendResolver,
    gateways: set[ObjectKey],
    table: RouteTable,
    *,
    passthrough: bool,
) -> _Route:
    """Resolve the rule's references (a TLSRoute has exactly one rule).

    A reference that fails keeps its weight as a share of connections that
    are closed; weight 0 drops a backend. ``passthrough``: the route is
    attached to a passthrough listener, where a TLS-originating upstream is
    refused (see the module doc).
    """
    failure: RefFailure | None = None
    weights: dict[str | None, int] = {}
    passthrough_weights: dict[str | None, int] = {}
    unusable: list[str] = []
    for ref in route.spec.rules[0].backend_refs:
        result = resolver.resolve(
            route_kind=KIND, route_namespace=route.namespace, ref=ref, gateways=gateways
        )
        name: str | None = None
        passthrough_name: str | None = None
        if isinstance(result, RefFailure):
            failure = failure or result
        else:
            upstream = result.upstream
            if upstream is None:
                unusable.append(result.unusable)
            else:
                if not result.refused:  # a refused one's share is closed (see Resolved.refused)
                    name = upstream.name
                    table.upstreams[name] = upstream
                if upstream.tls is None:
                    passthrough_name = name
                elif passthrough:
                    failure = failure or RefFailure(
                        st.R_UNSUPPORTED_PROTOCOL,
                        f"{ref.kind} {ref.namespace or route.namespace}/{ref.name} is reached over TLS that "
                        "the gateway originates (the XBackend's tls, or a BackendTLSPolicy), but a "
                        "passthrough listener relays the client's own TLS, which would arrive wrapped in a "
                        "second TLS session: its share of connections is closed; use a backend without "
                        "TLS origination, or a listener in mode Terminate",
                    )
            for secret in () if result.refused else result.secrets:
                table.secrets[secret.name] = secret
        if ref.weight > 0:
            weights[name] = weights.get(name, 0) + ref.weight
            passthrough_weights[passthrough_name] = passthrough_weights.get(passthrough_name, 0) + ref.weight
    usable = len(unusable) < len(route.spec.rules[0].backend_refs)
    failure = failure or no_usable_backend(0, unusable, usable, "its connections are closed")
    return _Route(route, parents, tcp_backends(weights), tcp_backends(passthrough_weights), failure)


def resolved_refs(route: TLSRoute) -> Iterator[BackendRef]:
    """Every reference :func:`_resolve` resolves: those of the (one) rule."""
    for rule in route.spec.rules[:1]:
        yield from rule.backend_refs


def _shadowed_message(shadowed: list[tuple[ListenerContext, str, _Route]]) -> str:
    parts = []
    for lc, name, winner in shadowed:
        gw = lc.gateway
        parts.append(
            f"on listener {lc.name} of Gateway {gw.namespace}/{gw.name}, {name} goes to the older TLSRoute "
            f"{winner.route.namespace}/{winner.route.name}"
        )
    return (
        "Route is accepted, but "
        + "; ".join(parts)
        + ": a server name is served by the oldest route that claims it, so this route gets none of "
        "those connections"
    )
