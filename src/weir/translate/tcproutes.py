"""TCPRoutes and UDPRoutes: attachment to TCP and UDP listeners, the backends each listener
forwards to, and route status.

A TCP connection (a UDP session) carries nothing to choose a route by: a TCP
listener forwards every connection to the backends of one TCPRoute, a UDP
listener every datagram to the backend of one UDPRoute (weir does not split
UDP by weight: a UDPRoute with several backends of non-zero weight is
refused, ``UnsupportedValue``). When several
TCPRoutes attach to one listener, the oldest (creation time, then
namespace/name: the Gateway API's route precedence) gets the connections.
Following the Gateway API conformance test ``TCPRouteMultipleRoutesAttachment``,
the others stay ``Accepted=True`` and count in the listener's
``attachedRoutes``; their ``Accepted`` message names the route that gets
the connections instead.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from weir import ir
from weir.api.gateway_v1 import GROUP, BackendRef
from weir.api.gateway_v1_tcproute import TCPRoute
from weir.api.gateway_v1_udproute import UDPRoute
from weir.api.meta import ObjectKey
from weir.resources import Resources
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

#: A route of either kind: they share their schema.
RelayRoute = TCPRoute | UDPRoute


@dataclass
class _Route:
    route: RelayRoute
    parents: list[RouteParent]
    backends: tuple[ir.WeightedBackend, ...]
    failure: RefFailure | None

    @property
    def precedence(self) -> tuple[str, str, str]:
        return route_precedence(self.route)


def translate_tcp_routes(
    resources: Resources,
    gateways: list[GatewayContext],
    resolver: BackendResolver,
    controller_name: str,
    table: RouteTable,
    attached: Mapping[ObjectKey, list[RouteParent]] = NONE_ATTACHED,
) -> dict[ObjectKey, dict[str, Any]]:
    """Attach every TCPRoute (unless ``attached`` already: see :func:`weir.translate.users.xbackend_users`),
    fill ``table.tcp``, and return the routes' statuses (see :func:`_translate`)."""
    return _translate(
        resources, resources.tcp_routes, gateways, resolver, controller_name, table.tcp, table, attached
    )


def translate_udp_routes(
    resources: Resources,
    gateways: list[GatewayContext],
    resolver: BackendResolver,
    controller_name: str,
    table: RouteTable,
) -> dict[ObjectKey, dict[str, Any]]:
    """Attach every UDPRoute, fill ``table.udp``, and return the routes' statuses (see :func:`_translate`)."""
    return _translate(
        resources, resources.all(UDPRoute), gateways, resolver, controller_name, table.udp, table
    )


def _translate(
    resources: Resources,
    routes_in: tuple[RelayRoute, ...],
    gateways: list[GatewayContext],
    resolver: BackendResolver,
    controller_name: str,
    forwarding: dict[tuple[str, int], tuple[ir.WeightedBackend, ...]],
    table: RouteTable,
    attached: Mapping[ObjectKey, list[RouteParent]] = NONE_ATTACHED,
) -> dict[ObjectKey, dict[str, Any]]:
    """Attach every route of ``routes_in`` (one kind), fill ``forwarding`` (socket -> backends) and
    ``table``'s upstreams and secrets, and return the routes' statuses.

    Increments ``attachedRoutes`` on the listeners routes attach to. As for
    HTTPRoutes, only parentRefs to weir's Gateways (or to Gateways that do
    not exist) get a status entry; other controllers' entries are kept.
    """
    by_key, existing = parent_index(resources, gateways)
    routes: list[_Route] = []
    statuses: dict[ObjectKey, dict[str, Any]] = {}
    for route in routes_in:
        parents = attached.get(route.key)
        if parents is None:
            parents = route_parents(resources, route, by_key, existing, RELAY_KIND)
        if not parents:
            stale = route_status(route, controller_name, [], resolver.interner)
            if stale is not None:
                statuses[route.key] = stale
            continue
        gateways_used = {lc.gateway.key for p in parents for lc in p.listeners}
        backends, failure = _resolve(route, resolver, gateways_used, table)
        routes.append(_Route(route, parents, backends, failure))

    # The oldest route on each listener gets its connections.
    winners: dict[int, _Route] = {}
    for entry in sorted(routes, key=lambda r: r.precedence):
        for parent in entry.parents:
            for lc in parent.listeners:
                winners.setdefault(id(lc), entry)
    for entry in routes:
        count_attached(entry.parents)
        for parent in entry.parents:
            for lc in parent.listeners:
                if winners[id(lc)] is entry:
                    for socket in lc.sockets:
                        forwarding[socket] = entry.backends

    for entry in routes:
        route = entry.route
        ours = []
        for parent in entry.parents:
            accepted = parent.accepted
            shadowed = [(lc, winners[id(lc)]) for lc in parent.listeners if winners[id(lc)] is not entry]
            if shadowed:
                accepted = dataclasses.replace(accepted, message=_shadowed_message(shadowed))
            ours.append(route_parent_entry(route, parent.ref, controller_name, accepted, entry.failure))
        statuses[route.key] = route_status(route, controller_name, ours, resolver.interner) or {"parents": []}
    return statuses


class RelayRouteKind:
    """TCPRoute's and UDPRoute's side of :class:`~weir.translate.attachment.RouteKind`: every allowed
    listener takes the route (a connection carries no hostname), which must have exactly one rule."""

    by_hostname = False

    def unsupported(self, route: RelayRoute) -> str | None:
        kind, what = route.KIND, "a TCP connection" if isinstance(route, TCPRoute) else "a UDP datagram"
        if len(route.spec.rules) != 1:
            return (
                f"spec.rules has {len(route.spec.rules)} rules; {what} carries nothing to choose "
                f"a rule by, so weir serves {kind}s with exactly one rule (as {GROUP}/v1 requires): "
                f"merge the backendRefs into one rule, or use one {kind} per listener"
            )
        if (
            isinstance(route, UDPRoute)
            and sum(1 for r in route.spec.rules[0].backend_refs if r.weight > 0) > 1
        ):
            return (
                "spec.rules[0].backendRefs has several backends of non-zero weight; weir sends each UDP "
                "session to one backend and does not split datagrams by weight: keep one (or give the "
                "others weight 0)"
            )
        return None


RELAY_KIND = RelayRouteKind()


def _resolve(
    route: RelayRoute, resolver: BackendResolver, gateways: set[ObjectKey], table: RouteTable
) -> tuple[tuple[ir.WeightedBackend, ...], RefFailure | None]:
    """The weighted backends of the route's (first) rule, and the first reference that failed.

    Every rule's references are resolved, for ``ResolvedRefs``; only the
    first rule's are forwarded to (a route with several rules attaches
    nowhere). A reference that fails keeps its weight as a share of
    connections that are closed; weight 0 drops a backend.
    """
    failure: RefFailure | None = None
    weights: dict[str | None, int] = {}
    for index, rule in enumerate(route.spec.rules):
        unusable: list[str] = []
        for ref in rule.backend_refs:
            result = resolver.resolve(
                route_kind=route.KIND, route_namespace=route.namespace, ref=ref, gateways=gateways
            )
            name: str | None = None
            if isinstance(result, RefFailure):
                failure = failure or result
            elif not result.refused:  # a refused one's share is closed (see Resolved.refused)
                if result.upstream is not None:
                    name = result.upstream.name
                    table.upstreams[name] = result.upstream
                else:
                    unusable.append(result.unusable)
                for secret in result.secrets:
                    table.secrets[secret.name] = secret
            if index == 0 and ref.weight > 0:
                weights[name] = weights.get(name, 0) + ref.weight
        usable = len(unusable) < len(rule.backend_refs)
        failure = failure or no_usable_backend(index, unusable, usable, "its connections are closed")
    return tcp_backends(weights), failure


def resolved_refs(route: RelayRoute) -> Iterator[BackendRef]:
    """Every reference :func:`_resolve` resolves: those of every rule."""
    for rule in route.spec.rules:
        yield from rule.backend_refs


def tcp_backends(weights: dict[str | None, int]) -> tuple[ir.WeightedBackend, ...]:
    """Backends for :class:`weir.ir.TcpListener`: by name, the failed share (``None``) last.

    Empty when no backend is usable: every connection is then closed.
    """
    if not any(name is not None for name in weights):
        return ()
    return tuple(
        ir.WeightedBackend(name, weight)
        for name, weight in sorted(weights.items(), key=lambda kv: (kv[0] is None, kv[0] or ""))
    )


def _shadowed_message(shadowed: Sequence[tuple[ListenerContext, _Route]]) -> str:
    parts = []
    kind = shadowed[0][1].route.KIND
    for lc, winner in shadowed:
        gw = lc.gateway
        parts.append(
            f"listener {lc.name} of Gateway {gw.namespace}/{gw.name} forwards to the older {kind} "
            f"{winner.route.namespace}/{winner.route.name}"
        )
    protocol, unit = ("TCP", "connection") if kind == "TCPRoute" else ("UDP", "datagram")
    return (
        "Route is accepted, but "
        + "; ".join(parts)
        + f": a {protocol} listener sends every {unit} to its oldest {kind}, so this route gets none there"
    )
