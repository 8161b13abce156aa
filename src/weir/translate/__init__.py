"""Translation: Gateway API resources → IR and status. A pure function.

``translate(resources, settings)`` reads nothing but its arguments, touches
no clock and no randomness: the same input gives the same
:class:`Translation`, and :func:`weir.ir.to_data` of it gives the same bytes.
It decides everything a user can observe — which routes attach where, which
backends resolve, every status condition — except ``Programmed``, which
depends on Envoy (see :mod:`weir.translate.status`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from weir import ir
from weir.api.meta import ObjectKey
from weir.resources import Resources
from weir.translate.backends import BackendResolver
from weir.translate.gateways import accepted_classes, gateway_contexts, gateway_status
from weir.translate.routes import RouteTable, translate_http_routes
from weir.translate.settings import Settings

__all__ = ["Settings", "Translation", "translate"]


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
    classes, statuses = accepted_classes(resources, settings)
    gateways = gateway_contexts(resources, settings, classes)
    resolver = BackendResolver(resources, settings)
    table = RouteTable()
    statuses.update(translate_http_routes(resources, gateways, resolver, settings.controller_name, table))
    statuses.update(resolver.xbackend_statuses(settings.controller_name))

    sockets: dict[tuple[str, int], None] = {}
    gateway_sockets: dict[ObjectKey, dict[str, tuple[tuple[str, int], ...]]] = {}
    for ctx in gateways:
        statuses[ctx.gateway.key] = gateway_status(ctx)
        per_listener = {lc.name: lc.sockets for lc in ctx.listeners if lc.valid}
        gateway_sockets[ctx.gateway.key] = per_listener
        for socks in per_listener.values():
            sockets.update(dict.fromkeys(socks))

    listeners = tuple(_listener(sock, table) for sock in sorted(sockets))
    return Translation(
        ir=ir.IR(
            listeners=listeners,
            upstreams=tuple(table.upstreams[name] for name in sorted(table.upstreams)),
            secrets=tuple(table.secrets[name] for name in sorted(table.secrets)),
            dns=ir.DnsSettings(resolvers=settings.dns_resolvers),
        ),
        statuses=dict(sorted(statuses.items())),
        gateway_sockets=gateway_sockets,
    )


def _listener(socket: tuple[str, int], table: RouteTable) -> ir.Listener:
    address, port = socket
    name = f"{address}:{port}" if ":" not in address else f"[{address}]:{port}"
    by_domain = table.entries.get(socket, {})
    virtual_hosts = []
    for domain in sorted(by_domain):
        entries = sorted(by_domain[domain], key=lambda e: e[0])
        routes = tuple(dict.fromkeys(route for _, route in entries))
        virtual_hosts.append(ir.VirtualHost(name=f"{name}/{domain}", domains=(domain,), routes=routes))
    return ir.Listener(name=name, address=address, port=port, virtual_hosts=tuple(virtual_hosts))
