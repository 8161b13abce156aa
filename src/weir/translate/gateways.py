"""GatewayClasses and Gateways: which are weir's, which listeners are usable, and their status."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any

from weir.api.gateway_v1 import GROUP, Gateway, GatewayClass, Listener
from weir.api.meta import ObjectKey
from weir.resources import Resources
from weir.translate import status as st
from weir.translate.egress import class_config
from weir.translate.settings import Settings

#: Route kinds a listener of each protocol can carry, today.
SUPPORTED_KINDS: dict[str, tuple[str, ...]] = {"HTTP": ("HTTPRoute",), "TCP": ("TCPRoute",)}


@dataclass(frozen=True)
class Conflict:
    """Why a listener of a supported protocol is not served: another listener wants its socket.

    ``reason`` is the listener's ``Accepted=False`` reason; ``protocol``
    marks a Gateway API protocol conflict (``Conflicted=True``,
    ``ProtocolConflict``).
    """

    reason: str
    message: str
    protocol: bool


@dataclass
class ListenerContext:
    """One Gateway listener weir will serve, with what routes attach to it.

    ``attached`` counts routes that attached (for ``attachedRoutes``);
    translation of routes increments it. ``valid`` is False for an
    unsupported protocol and for a listener that lost its socket to another
    (``conflict`` says why).
    """

    gateway: Gateway
    spec: Listener
    sockets: tuple[tuple[str, int], ...]
    kinds: tuple[str, ...]
    valid: bool
    attached: int = 0
    conflict: Conflict | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def protocol(self) -> str:
        return self.spec.protocol


@dataclass
class GatewayContext:
    gateway: Gateway
    listeners: list[ListenerContext] = field(default_factory=list)
    addresses: tuple[str, ...] = ()
    conditions: list[st.Condition] = field(default_factory=list)


def accepted_classes(
    resources: Resources, settings: Settings
) -> tuple[set[str], dict[ObjectKey, dict[str, Any]]]:
    """Names of the GatewayClasses weir controls, and their statuses.

    Classes naming another controller are left alone: no status is written
    for them, exactly as another implementation would expect.
    """
    names: set[str] = set()
    statuses: dict[ObjectKey, dict[str, Any]] = {}
    for gc in resources.all(GatewayClass):
        if gc.spec.controller_name != settings.controller_name:
            continue
        names.add(gc.name)
        gen = gc.metadata.generation
        config = class_config(resources, gc)
        if isinstance(config, str):
            # Still weir's: its Gateways serve Services; egress through them is refused.
            message = (
                f"{config}. Until this is fixed, Gateways of this class send nothing to external hostnames"
            )
            accepted = st.condition(st.ACCEPTED, False, st.R_INVALID_PARAMETERS, message, gen)
        else:
            message = f"Handled by {settings.controller_name}"
            if config is not None:
                message += f" with the parameters of {config.KIND} {config.name}"
            accepted = st.condition(st.ACCEPTED, True, st.R_ACCEPTED, message, gen)
        statuses[gc.key] = {"conditions": [accepted]}
    return names, statuses


def gateway_contexts(resources: Resources, settings: Settings, classes: set[str]) -> list[GatewayContext]:
    """A context for every Gateway of a class weir controls, sorted by namespace/name.

    Listeners that cannot have their socket are marked invalid first (see
    :func:`_settle_sockets`), so each Gateway's ``Accepted`` counts them.
    """
    out = []
    for gw in resources.all(Gateway):
        if gw.spec.gateway_class_name in classes:
            out.append(_gateway_context(gw, settings))
    _settle_sockets(out)
    for ctx in out:
        _gateway_accepted(ctx)
    return out


def _settle_sockets(gateways: list[GatewayContext]) -> None:
    """Give every socket to listeners of one protocol; mark the others invalid.

    HTTP listeners share a socket (virtual hosts tell them apart); a TCP
    listener needs its socket for itself. Within one Gateway, listeners of
    different protocols on one port are all refused (Gateway API:
    ``Conflicted=True``, ``ProtocolConflict``; none of them is served).
    Across Gateways, which all run in this one Envoy, the oldest Gateway
    (creation time, then namespace/name) keeps the socket and a newer one's
    listener is refused with ``PortUnavailable``: a Gateway created later
    never takes a port away from one that is serving (without creation
    times, as in plain files, namespace/name decides).
    """
    owners: dict[tuple[str, int], ListenerContext] = {}
    ordered = sorted(
        gateways,
        key=lambda c: (c.gateway.metadata.creation_timestamp or "", c.gateway.namespace, c.gateway.name),
    )
    for ctx in ordered:
        valid = [lc for lc in ctx.listeners if lc.valid]
        for lc in valid:
            rivals = [
                o.name
                for o in valid
                if o is not lc and o.spec.port == lc.spec.port and o.protocol != lc.protocol
            ]
            if rivals:
                lc.conflict = Conflict(
                    st.R_INVALID,
                    f"Port {lc.spec.port} is also used by listener {', '.join(rivals)} with another "
                    f"protocol; one port serves one protocol: change the port of one of them",
                    protocol=True,
                )
        for lc in valid:
            if lc.conflict is not None:
                lc.valid = False
                continue
            for socket in lc.sockets:
                owner = owners.get(socket)
                if owner is None or owner.gateway is lc.gateway:
                    continue
                if owner.protocol == "HTTP" and lc.protocol == "HTTP":
                    continue
                address, port = socket
                lc.conflict = Conflict(
                    st.R_PORT_UNAVAILABLE,
                    f"{address}:{port} is already served by listener {owner.name} ({owner.protocol}) of "
                    f"the older Gateway {owner.gateway.namespace}/{owner.gateway.name}; "
                    + (
                        "a TCP listener needs its port for itself"
                        if "TCP" in (lc.protocol, owner.protocol)
                        else "listeners of different protocols cannot share a port"
                    )
                    + ": use another port or another address",
                    protocol=False,
                )
                lc.valid = False
                break
            else:
                for socket in lc.sockets:
                    owners.setdefault(socket, lc)


def _gateway_context(gw: Gateway, settings: Settings) -> GatewayContext:
    gen = gw.metadata.generation
    ctx = GatewayContext(gateway=gw)
    addresses: list[str] = []
    unsupported: list[str] = []
    for addr in gw.spec.addresses:
        if addr.type != "IPAddress":
            unsupported.append(f"{addr.type} {addr.value!r}")
            continue
        try:
            addresses.append(str(ipaddress.ip_address(addr.value)))
        except ValueError:
            unsupported.append(f"IPAddress {addr.value!r} (not an IP address)")
    if unsupported:
        ctx.conditions.append(
            st.condition(
                st.ACCEPTED,
                False,
                st.R_UNSUPPORTED_ADDRESS,
                "weir binds listeners only on addresses of type IPAddress; unsupported: "
                + ", ".join(unsupported),
                gen,
            )
        )
        return ctx
    ctx.addresses = tuple(addresses) or (settings.bind_address,)
    for spec in gw.spec.listeners:
        ctx.listeners.append(_listener_context(gw, spec, ctx.addresses))
    return ctx


def _gateway_accepted(ctx: GatewayContext) -> None:
    """Append the Gateway's ``Accepted`` condition once its listeners are settled."""
    if not ctx.addresses:
        return  # already refused (unsupported addresses)
    gen = ctx.gateway.metadata.generation
    valid = [lc for lc in ctx.listeners if lc.valid]
    if len(valid) == len(ctx.listeners):
        ctx.conditions.append(st.condition(st.ACCEPTED, True, st.R_ACCEPTED, "Gateway is valid", gen))
    else:
        bad = ", ".join(lc.name for lc in ctx.listeners if not lc.valid)
        ctx.conditions.append(
            st.condition(
                st.ACCEPTED,
                bool(valid),
                st.R_LISTENERS_NOT_VALID,
                f"Listeners not valid: {bad}; see each listener's conditions",
                gen,
            )
        )


def _listener_context(gw: Gateway, spec: Listener, addresses: tuple[str, ...]) -> ListenerContext:
    supported = SUPPORTED_KINDS.get(spec.protocol)
    sockets = tuple((a, spec.port) for a in addresses)
    if supported is None:
        return ListenerContext(gw, spec, sockets, (), valid=False)
    if spec.allowed_routes.kinds:
        kinds = tuple(k.kind for k in spec.allowed_routes.kinds if k.group == GROUP and k.kind in supported)
    else:
        kinds = supported
    return ListenerContext(gw, spec, sockets, kinds, valid=True)


def gateway_status(ctx: GatewayContext) -> dict[str, Any]:
    """The status of a Gateway once routes have attached (``attachedRoutes`` is final)."""
    gen = ctx.gateway.metadata.generation
    conditions = list(ctx.conditions)
    if ctx.addresses:
        conditions.append(st.condition(st.PROGRAMMED, False, st.R_PENDING, st.PENDING_MESSAGE, gen))
    else:
        conditions.append(
            st.condition(st.PROGRAMMED, False, st.R_INVALID, "The Gateway is not accepted", gen)
        )
    listeners = []
    for lc in ctx.listeners:
        listeners.append(
            {
                "name": lc.name,
                "supportedKinds": [{"group": GROUP, "kind": k} for k in lc.kinds],
                "attachedRoutes": lc.attached,
                "conditions": _listener_conditions(lc, gen),
            }
        )
    status: dict[str, Any] = {"conditions": conditions, "listeners": listeners}
    if ctx.addresses:
        status["addresses"] = [{"type": "IPAddress", "value": a} for a in ctx.addresses]
    return status


def _listener_conditions(lc: ListenerContext, gen: int) -> list[st.Condition]:
    if lc.conflict is not None:
        conds = [
            st.condition(st.ACCEPTED, False, lc.conflict.reason, lc.conflict.message, gen),
            st.condition(st.PROGRAMMED, False, st.R_INVALID, "The listener is not accepted", gen),
            st.condition(st.RESOLVED_REFS, True, st.R_RESOLVED_REFS, "No references to resolve", gen),
        ]
        if lc.conflict.protocol:
            conds.append(st.condition(st.CONFLICTED, True, st.R_PROTOCOL_CONFLICT, lc.conflict.message, gen))
        return conds
    if not lc.valid:
        message = (
            f"Protocol {lc.spec.protocol} is not supported by weir yet; "
            f"supported: {', '.join(sorted(SUPPORTED_KINDS))}"
        )
        return [
            st.condition(st.ACCEPTED, False, st.R_UNSUPPORTED_PROTOCOL, message, gen),
            st.condition(st.PROGRAMMED, False, st.R_INVALID, "The listener is not accepted", gen),
            st.condition(st.RESOLVED_REFS, True, st.R_RESOLVED_REFS, "No references to resolve", gen),
        ]
    conds = [st.condition(st.ACCEPTED, True, st.R_ACCEPTED, "Listener is valid", gen)]
    conds.append(st.condition(st.PROGRAMMED, False, st.R_PENDING, st.PENDING_MESSAGE, gen))
    wanted = [f"{k.group}/{k.kind}" for k in lc.spec.allowed_routes.kinds]
    invalid = [w for w in wanted if w.split("/", 1)[1] not in lc.kinds or not w.startswith(GROUP + "/")]
    if invalid:
        conds.append(
            st.condition(
                st.RESOLVED_REFS,
                False,
                st.R_INVALID_ROUTE_KINDS,
                f"Route kinds not supported on a {lc.spec.protocol} listener: {', '.join(invalid)}",
                gen,
            )
        )
    else:
        conds.append(st.condition(st.RESOLVED_REFS, True, st.R_RESOLVED_REFS, "All references resolved", gen))
    return conds
