"""Translation: Gateway API resources → IR and status. A pure function.

``translate(resources, settings)`` reads nothing but its arguments, touches
no clock and no randomness: the same input gives the same
:class:`Translation`, and :func:`weir.ir.to_data` of it gives the same bytes.
It decides everything a user can observe — which routes attach where, which
backends resolve, every status condition — except ``Programmed``, which
depends on Envoy (see :mod:`weir.translate.status`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from weir import ir
from weir.api.meta import ObjectKey
from weir.resources import Resources
from weir.translate import egress
from weir.translate.attachment import RouteTable
from weir.translate.backends import BackendResolver
from weir.translate.gateways import (
    GatewayContext,
    ListenerContext,
    accepted_classes,
    gateway_contexts,
    gateway_status,
    listener_set_status,
)
from weir.translate.grpcroutes import KindConflicts, kind_conflicts, translate_grpc_routes
from weir.translate.routes import RouteUnit, place_unit, translate_http_routes
from weir.translate.settings import Settings
from weir.translate.tcproutes import translate_tcp_routes, translate_udp_routes
from weir.translate.tlslisteners import https_server, tls_listener
from weir.translate.tlsroutes import translate_tls_routes
from weir.translate.users import xbackend_users
from weir.translate.virtualhosts import Owners, claimed, owned_virtual_hosts, patched_virtual_hosts

__all__ = [
    "Pass",
    "Settings",
    "Surroundings",
    "Translation",
    "full_pass",
    "patched_listener",
    "routed_listener",
    "translate",
]


@dataclass(frozen=True)
class Translation:
    """The result of one translation.

    ``statuses``: the ``status`` weir computes for each object it manages,
    keyed by object. ``gateway_sockets``: per Gateway, per listener name, the
    ``(address, port)`` sockets the listener is served on — what
    ``Programmed`` waits for.
    """

    ir: ir.IR
    statuses: Mapping[ObjectKey, dict[str, Any]] = field(default_factory=dict)
    gateway_sockets: Mapping[ObjectKey, Mapping[str, tuple[tuple[str, int], ...]]] = field(
        default_factory=dict
    )


def translate(resources: Resources, settings: Settings) -> Translation:
    return full_pass(resources, settings).translation


@dataclass(frozen=True)
class Surroundings:
    """What a full translation settled that a patch by :mod:`weir.translate.incremental` leaves as
    it is (a change that would alter it gets a full pass).

    ``gateways``: the listener contexts the HTTPRoutes' units are placed in (a
    patch moves units in and out of them). ``other``: what the other route
    kinds and the listeners' certificates added to the upstreams and secrets.
    ``http_sockets`` and ``tls_sockets``: the listeners of each socket that
    serves HTTP, or TLS (HTTPS among them; see :func:`routed_listener`).
    ``egress``: the policy inputs (Gateway → class, class → policy, the
    policy of unused XBackends; users are each patch's own). ``refused``:
    XBackends the egress policy refused, and the secrets resolved for them.
    ``conflicts``: where HTTPRoutes
    and GRPCRoutes met (an edited HTTPRoute that meets a GRPCRoute needs a
    full pass).
    """

    gateways: list[GatewayContext]
    other: RouteTable
    http_sockets: dict[tuple[str, int], list[ListenerContext]]
    tls_sockets: dict[tuple[str, int], list[ListenerContext]]
    egress: egress.EgressPolicy
    refused: frozenset[ObjectKey]
    refused_secrets: frozenset[str]
    conflicts: KindConflicts = field(default_factory=KindConflicts)


@dataclass(frozen=True)
class Pass:
    """A full translation: its result, every HTTPRoute's :class:`~weir.translate.routes.RouteUnit`
    (placed in ``surroundings.gateways``' listener contexts), and its :class:`Surroundings`."""

    translation: Translation
    units: list[RouteUnit]
    surroundings: Surroundings


def full_pass(resources: Resources, settings: Settings) -> Pass:
    """Translate ``resources`` from scratch (:func:`translate`), keeping the intermediate results."""
    classes, statuses = accepted_classes(resources, settings)
    gateways = gateway_contexts(resources, settings, classes)
    table = RouteTable()
    conflicts = kind_conflicts(resources, gateways)  # HTTPRoutes and GRPCRoutes sharing hostnames
    # An XBackend's egress policy depends on all its users: found first, so that resolving a
    # route's backends decides it (weir.translate.users).
    policy = egress.egress_policy(
        resources,
        settings,
        classes,
        {ctx.gateway.key: ctx.gateway.spec.gateway_class_name for ctx in gateways},
    )
    users, attached = xbackend_users(resources, gateways, conflicts)
    no_users: frozenset[ObjectKey] = frozenset()
    resolver = BackendResolver(
        resources,
        settings,
        dataclasses.replace(policy, users=lambda key: users.get(key, no_users), complete=True),
    )
    # The routes the users pre-pass attached are not attached again.
    units = translate_http_routes(
        resources,
        gateways,
        resolver,
        settings.controller_name,
        request_timeout_ms=settings.request_timeout_ms,
        lost=conflicts.lost,
        attached=attached,
    )
    for unit in units:
        place_unit(unit, table)
        if unit.status is not None:
            statuses[unit.key] = unit.status
    other = RouteTable()
    name = settings.controller_name
    statuses.update(translate_grpc_routes(resources, gateways, resolver, name, other, conflicts, attached))
    statuses.update(translate_tcp_routes(resources, gateways, resolver, name, other, attached))
    statuses.update(translate_udp_routes(resources, gateways, resolver, name, other))
    statuses.update(translate_tls_routes(resources, gateways, resolver, name, other, attached))
    table.upstreams.update(other.upstreams)
    table.secrets.update(other.secrets)
    table.tcp.update(other.tcp)
    table.udp.update(other.udp)
    refused = frozenset(resolver.refused)
    refused_secrets = frozenset(secret.name for secrets in resolver.refused.values() for secret in secrets)
    statuses.update(resolver.xbackend_statuses(settings.controller_name))
    statuses.update(resolver.tls_policies.statuses(settings.controller_name))
    statuses.update(resolver.credential_policies.statuses(settings.controller_name))
    statuses.update(resolver.mcp_policies.statuses(settings.controller_name))
    statuses.update(resolver.traffic_policies.statuses(settings.controller_name))

    # socket -> family; translation of gateways gave each socket to one family (HTTP, TLS, TCP),
    # and each TLS server name on a socket to one listener.
    sockets: dict[tuple[str, int], str] = {}
    tls_sockets: dict[tuple[str, int], list[ListenerContext]] = {}
    http_sockets: dict[tuple[str, int], list[ListenerContext]] = {}
    gateway_sockets: dict[ObjectKey, dict[str, tuple[tuple[str, int], ...]]] = {}
    for ctx in gateways:
        statuses[ctx.gateway.key] = gateway_status(ctx)
        gateway_sockets[ctx.gateway.key] = {lc.name: lc.sockets for lc in ctx.own_listeners if lc.served}
        for lsc in ctx.listener_sets:  # settled by the data plane like a Gateway (same status shape)
            statuses[lsc.key] = listener_set_status(lsc)
            gateway_sockets[lsc.key] = {lc.name: lc.sockets for lc in lsc.listeners if lc.served}
        for lc in ctx.listeners:
            if lc.valid and lc.family == "TLS":  # served or not: each owns its server name
                for sock in lc.sockets:
                    tls_sockets.setdefault(sock, []).append(lc)
            if not lc.served:
                continue
            sockets.update(dict.fromkeys(lc.sockets, lc.family))
            if lc.family == "HTTP":
                for sock in lc.sockets:
                    http_sockets.setdefault(sock, []).append(lc)
            listener_secrets: list[ir.Secret] = [*lc.certificates]
            if lc.client_validation is not None:
                listener_secrets.append(lc.client_validation.bundle)
            for secret in listener_secrets:
                table.secrets[secret.name] = secret
                other.secrets[secret.name] = secret

    listeners = tuple(
        _tcp_listener(sock, table)
        if sockets[sock] == "TCP"
        else _udp_listener(sock, table)
        if sockets[sock] == "UDP"
        else routed_listener(sock, http_sockets, tls_sockets)
        for sock in sorted(sockets)
    )
    translation = Translation(
        ir=ir.IR(
            listeners=listeners,
            upstreams=tuple(table.upstreams[name] for name in sorted(table.upstreams)),
            secrets=tuple(table.secrets[name] for name in sorted(table.secrets)),
            dns=egress.instance_dns(settings),
        ),
        statuses=dict(sorted(statuses.items())),
        gateway_sockets=gateway_sockets,
    )
    surroundings = Surroundings(
        gateways, other, http_sockets, tls_sockets, policy, refused, refused_secrets, conflicts
    )
    return Pass(translation, units, surroundings)


def _listener_name(address: str, port: int) -> str:
    return f"{address}:{port}" if ":" not in address else f"[{address}]:{port}"


def _tcp_listener(socket: tuple[str, int], table: RouteTable) -> ir.TcpListener:
    address, port = socket
    return ir.TcpListener(_listener_name(address, port), address, port, table.tcp.get(socket, ()))


def _udp_listener(socket: tuple[str, int], table: RouteTable) -> ir.UdpListener:
    address, port = socket
    return ir.UdpListener(_listener_name(address, port), address, port, table.udp.get(socket, ()))


def routed_listener(
    socket: tuple[str, int],
    http_sockets: Mapping[tuple[str, int], list[ListenerContext]],
    tls_sockets: Mapping[tuple[str, int], list[ListenerContext]],
) -> ir.Listener | ir.TlsListener:
    """The listener of a socket that serves HTTP (``http_sockets``) or TLS (the others), made from the
    routes placed in its listener contexts."""
    if socket in http_sockets:
        return _http_listener(socket, http_sockets[socket])
    return tls_listener(_listener_name(*socket), *socket, tls_sockets[socket])


def patched_listener(
    socket: tuple[str, int],
    before: ir.AnyListener,
    http_sockets: Mapping[tuple[str, int], list[ListenerContext]],
    tls_sockets: Mapping[tuple[str, int], list[ListenerContext]],
    touched: Iterable[tuple[ListenerContext, set[str]]],
    owners: Callable[[tuple[str, int], Callable[[], list[ListenerContext]]], Owners],
) -> ir.Listener | ir.TlsListener:
    """:func:`routed_listener` after routes moved in or out of the ``touched`` listener contexts (for
    the domains given), ``before`` being what it was: only the virtual hosts of those domains (HTTP),
    or the HTTPS servers of those listeners (TLS), are made again when that is all that can change.
    ``owners`` gives the socket's :class:`Owners` of the listeners a function lists (kept by the
    caller: the listeners do not change)."""
    if socket in http_sockets and isinstance(before, ir.Listener):
        listeners = http_sockets[socket]
        domains = {domain for lc, names in touched if socket in lc.sockets for domain in names}
        vhosts = patched_virtual_hosts(
            before.name, before.virtual_hosts, owners(socket, lambda: listeners), domains
        )
        if vhosts is not None:
            return dataclasses.replace(before, virtual_hosts=vhosts)
    elif socket in tls_sockets and isinstance(before, ir.TlsListener):
        listeners = tls_sockets[socket]
        servers = {server.name: server for server in before.https}
        for lc, _ in touched:
            if socket in lc.sockets and lc.protocol == "HTTPS" and lc.served:
                https = owners(socket, lambda: [o for o in listeners if o.protocol == "HTTPS"])
                server = https_server(before.name, lc, https)
                servers[server.name] = server
        return dataclasses.replace(before, https=tuple(servers[name] for name in sorted(servers)))
    return routed_listener(socket, http_sockets, tls_sockets)


def _http_listener(socket: tuple[str, int], listeners: list[ListenerContext]) -> ir.Listener:
    """The HTTP listener of ``socket``: one route configuration for the ``listeners`` on it, each
    serving the Hosts it owns with its own routes (see :mod:`weir.translate.virtualhosts`)."""
    address, port = socket
    name = _listener_name(address, port)
    owners = Owners(listeners)  # listeners of different Gateways with one hostname share its Hosts
    groups = owners.groups
    virtual_hosts = [vhost for group in groups.values() for vhost in owned_virtual_hosts(name, group, owners)]
    domains = {domain for vhost in virtual_hosts for domain in vhost.domains}
    for hostname in groups:
        virtual_hosts += claimed(name, hostname, domains)
    return ir.Listener(
        name=name,
        address=address,
        port=port,
        virtual_hosts=tuple(sorted(virtual_hosts, key=lambda v: v.name)),
    )
