"""GatewayClasses and Gateways: which are weir's, which listeners are usable, and their status."""

from __future__ import annotations

import ipaddress
from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from weir import ir
from weir.api.core_v1 import Service
from weir.api.gateway_v1 import GROUP, Gateway, GatewayClass, LabelSelector, Listener
from weir.api.gateway_v1_listenerset import ListenerSet
from weir.api.meta import KubeObject, ObjectKey
from weir.features import supported_features
from weir.resources import Resources
from weir.translate import frontendtls, infrastructure, tls
from weir.translate import status as st
from weir.translate.backendclientcert import gateway_client_certificate
from weir.translate.certificates import CertificateProblem, listener_certificates
from weir.translate.egress import class_config
from weir.translate.frontendtls import ClientCAProblem, ClientValidation
from weir.translate.settings import Settings

#: Route kinds a listener of each protocol can carry, today.
#: HTTPS carries what HTTP carries, inside TLS; TLS carries TLSRoutes (passthrough or terminated).
SUPPORTED_KINDS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "HTTP": ("HTTPRoute", "GRPCRoute"),
        "HTTPS": ("HTTPRoute", "GRPCRoute"),
        "TCP": ("TCPRoute",),
        "UDP": ("UDPRoute",),
        "TLS": ("TLSRoute",),
    }
)

#: The Gateway API release whose resources weir implements (``SupportedVersion``).
GATEWAY_API_VERSION = "v1.6"

#: The protocols of the Gateway API core, which it says to compare case-insensitively.
CORE_PROTOCOLS = ("HTTP", "HTTPS", "TLS", "TCP", "UDP")

#: Which listeners can share a socket: HTTP ones (told apart by Host), TLS ones (HTTPS and
#: TLS, told apart by the server name of the ClientHello); a TCP or UDP listener has its socket
#: alone (weir keys sockets by address and port, so a UDP listener does not share a port with TCP).
FAMILIES = MappingProxyType({"HTTP": "HTTP", "HTTPS": "TLS", "TLS": "TLS", "TCP": "TCP", "UDP": "UDP"})
#: Families whose listener has its socket alone.
ALONE = ("TCP", "UDP")

#: A route's place among the routes of one domain: smaller first (see :mod:`weir.translate.routes`).
RouteEntry = tuple[tuple[Any, ...], ir.Route]


@dataclass(frozen=True)
class Conflict:
    """Why a listener of a supported protocol is not served: another listener wants its socket or name.

    ``reason`` is the listener's ``Accepted=False`` reason; ``conflicted``
    the reason of ``Conflicted=True`` (``ProtocolConflict``,
    ``HostnameConflict``), if the Gateway API calls it a conflict.
    """

    reason: str
    message: str
    conflicted: str | None


@dataclass
class ListenerContext:
    """One Gateway listener weir will serve, with what routes attach to it.

    ``attached`` counts routes that attached (for ``attachedRoutes``);
    translation of routes increments it. ``valid`` (``Accepted=True``) is
    False for an unsupported protocol, for a value weir does not support
    (``unsupported`` says which), and for a listener that lost its socket or
    server name to another (``conflict`` says why). Routes attach to valid
    listeners. A valid listener that terminates TLS is only served once its
    ``certificates`` resolve: with a ``certificate_problem`` routes still
    attach (and count) but it serves nothing.
    """

    gateway: Gateway
    spec: Listener
    sockets: tuple[tuple[str, int], ...]
    kinds: tuple[str, ...]
    valid: bool
    attached: int = 0
    conflict: Conflict | None = None
    unsupported: str | None = None
    certificates: tuple[ir.TlsCertificate, ...] = ()
    certificate_problem: CertificateProblem | None = None
    #: HTTPS only: how clients' certificates are validated (the Gateway's ``spec.tls.frontend``
    #: for this port), or why they cannot be; either way the listener owns its server name.
    client_validation: ClientValidation | None = None
    client_ca_problem: ClientCAProblem | None = None
    #: Listeners on the same socket whose TLS hostnames overlap this one's (``OverlappingTLSConfig``).
    overlapping: list[str] = field(default_factory=list)
    #: The HTTP routes attached to this listener, by domain (filled by route translation); what
    #: an HTTPS listener serves, since the server name of a connection picks one listener.
    routes: dict[str, list[RouteEntry]] = field(default_factory=lambda: defaultdict(list))
    #: A TLS listener's server names, each with the backends of the TLSRoute that gets its
    #: connections (filled by TLSRoute translation).
    relays: dict[str, tuple[ir.WeightedBackend, ...]] = field(default_factory=dict)
    #: The ListenerSet this listener comes from (``None``: the Gateway's own).
    listener_set: ListenerSet | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def owner(self) -> KubeObject:
        """The object that declares the listener: its Gateway, or the ListenerSet that adds it."""
        return self.listener_set if self.listener_set is not None else self.gateway

    @property
    def protocol(self) -> str:
        """``spec.protocol``, upper-cased when it is a core protocol (``https`` is ``HTTPS``)."""
        upper = self.spec.protocol.upper()
        return upper if upper in CORE_PROTOCOLS else self.spec.protocol

    @property
    def family(self) -> str:
        """Which listeners this one can share a socket with (see :data:`FAMILIES`)."""
        return FAMILIES.get(self.protocol, self.protocol)

    @property
    def hostname(self) -> str | None:
        return self.spec.hostname

    @property
    def terminates_tls(self) -> bool:
        """HTTPS, or TLS in mode ``Terminate``: the gateway presents certificates."""
        tls = self.spec.tls
        return self.protocol == "HTTPS" or (
            self.protocol == "TLS" and tls is not None and tls.mode == "Terminate"
        )

    @property
    def served(self) -> bool:
        """Accepted and usable: it is in the data plane."""
        return self.valid and self.certificate_problem is None and self.client_ca_problem is None


@dataclass
class ListenerSetContext:
    """A ListenerSet that names one of weir's Gateways: its listeners once attached, or why not.

    ``refusal`` is its ``Accepted=False`` reason and message (the Gateway does
    not allow it, or is not accepted itself); its listeners are then not
    part of the Gateway.
    """

    listener_set: ListenerSet
    listeners: list[ListenerContext] = field(default_factory=list)
    refusal: tuple[str, str] | None = None

    @property
    def key(self) -> ObjectKey:
        return self.listener_set.key


@dataclass
class GatewayContext:
    """A Gateway of weir's classes. ``listeners`` is the merged list the Gateway API describes: the
    Gateway's own, then those of its attached ListenerSets in precedence order."""

    gateway: Gateway
    listeners: list[ListenerContext] = field(default_factory=list)
    addresses: tuple[str, ...] = ()
    conditions: list[st.Condition] = field(default_factory=list)
    #: ``status.addresses`` when they are not where listeners bind (see :func:`published_addresses`).
    published: tuple[tuple[str, str], ...] | None = None
    #: Every ListenerSet naming this Gateway, oldest first (attached or refused).
    listener_sets: list[ListenerSetContext] = field(default_factory=list)
    #: The Gateway's own ``ResolvedRefs``, when it has references of its own (``spec.tls.backend``).
    resolved_refs: st.Condition | None = None
    #: Why the Gateway has no Service of its own (``--gateway-services``: a foreign Service has its name).
    address_problem: str | None = None

    @property
    def own_listeners(self) -> list[ListenerContext]:
        """The listeners of ``spec.listeners`` (those the Gateway's status reports)."""
        return [lc for lc in self.listeners if lc.listener_set is None]


def accepted_classes(
    resources: Resources, settings: Settings
) -> tuple[set[str], dict[ObjectKey, dict[str, Any]]]:
    """Names of the GatewayClasses weir controls, and their statuses.

    Classes naming another controller are left alone: no status is written
    for them, exactly as another implementation would expect.

    ``status.supportedFeatures`` lists :func:`weir.features.supported_features` (those of the
    modes ``settings`` turns on included).
    ``SupportedVersion`` is always True. The Gateway API defines it from the
    ``gateway.networking.k8s.io/bundle-version`` annotation of the installed
    CRDs, and in standalone mode there are none; in a cluster, whatever
    CRDs are installed, weir reads objects with its own models of
    :data:`GATEWAY_API_VERSION` (fields it does not know are dropped, as
    the API server of an older version would), so that is the version whose
    resources are supported.
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
        supported = st.condition(
            st.SUPPORTED_VERSION,
            True,
            st.R_SUPPORTED_VERSION,
            f"weir implements Gateway API {GATEWAY_API_VERSION} and reads these resources with its own "
            "models of that version",
            gen,
        )
        statuses[gc.key] = {
            "conditions": st.conditions_data([accepted, supported]),
            "supportedFeatures": [
                {"name": name}
                for name in supported_features(gateway_services=settings.gateway_services is not None)
            ],
        }
    return names, statuses


#: ``status.supportedFeatures`` of every GatewayClass weir accepts (:mod:`weir.features`).
def gateway_contexts(resources: Resources, settings: Settings, classes: set[str]) -> list[GatewayContext]:
    """A context for every Gateway of a class weir controls, sorted by namespace/name.

    Listeners that cannot have their socket or server name are marked
    invalid first (see :func:`_settle_sockets`), so each Gateway's
    ``Accepted`` counts them; then overlapping TLS hostnames are noted.
    """
    out = []
    for gw in resources.all(Gateway):
        if gw.spec.gateway_class_name in classes:
            out.append(_gateway_context(resources, gw, settings))
    _attach_listener_sets(resources, out)
    _settle_sockets(out)
    _note_overlaps(out)
    for ctx in out:
        _gateway_accepted(ctx)
    return out


def _attach_listener_sets(resources: Resources, gateways: list[GatewayContext]) -> None:
    """Give each Gateway the ListenerSets that name it, oldest first, their listeners added to its own.

    A ListenerSet is attached when its Gateway is accepted and allows it
    (``spec.allowedListeners``; none by default); otherwise it is refused
    (``NotAllowed``, ``ParentNotAccepted``) and adds nothing. ListenerSets
    naming a Gateway of another controller, or none that exists, are not
    weir's to report on.
    """
    by_key = {ctx.gateway.key: ctx for ctx in gateways}
    for ls in sorted(resources.all(ListenerSet), key=_precedence):
        ref = ls.spec.parent_ref
        ctx = by_key.get(ObjectKey("Gateway", ref.namespace or ls.namespace, ref.name))
        if ref.group != GROUP or ref.kind != "Gateway" or ctx is None:
            continue
        lsc = ListenerSetContext(ls)
        ctx.listener_sets.append(lsc)
        gw = ctx.gateway
        if not ctx.addresses:
            lsc.refusal = (st.R_PARENT_NOT_ACCEPTED, f"Gateway {gw.namespace}/{gw.name} is not accepted")
            continue
        refused = _listener_set_refused(resources, gw, ls)
        if refused is not None:
            lsc.refusal = (st.R_NOT_ALLOWED, refused)
            continue
        for spec in ls.spec.listeners:
            lc = _listener_context(resources, gw, spec, ctx.addresses, listener_set=ls)
            lsc.listeners.append(lc)
            ctx.listeners.append(lc)


def _precedence(obj: KubeObject) -> tuple[str, str, str]:
    """The Gateway API's order among objects of one kind: oldest first, then namespace/name."""
    return (obj.metadata.creation_timestamp or "", obj.namespace, obj.name)


def _listener_set_refused(resources: Resources, gw: Gateway, ls: ListenerSet) -> str | None:
    """Why ``gw``'s ``spec.allowedListeners`` does not allow ``ls``, or ``None`` when it does."""
    allowed = gw.spec.allowed_listeners
    source = allowed.namespaces.from_ if allowed is not None else "None"
    gateway = f"Gateway {gw.namespace}/{gw.name}"
    if source == "All" or (source == "Same" and ls.namespace == gw.namespace):
        return None
    if source == "Selector" and allowed is not None:
        if namespace_selected(resources, allowed.namespaces.selector, ls.namespace):
            return None
        return (
            f"{gateway} allows ListenerSets only from namespaces its spec.allowedListeners selector selects"
        )
    if source == "Same":
        return f"{gateway} allows ListenerSets only from its own namespace ({gw.namespace})"
    return f"{gateway} allows no ListenerSets: set its spec.allowedListeners.namespaces.from"


def namespace_selected(resources: Resources, selector: LabelSelector | None, namespace: str) -> bool:
    """Whether ``selector`` selects ``namespace`` by the labels of its Namespace object. Like the API
    server, every namespace carries ``kubernetes.io/metadata.name``, declared or not."""
    if selector is None:
        return False
    ns = resources.namespace(namespace)
    labels = {**(ns.metadata.labels if ns else {}), "kubernetes.io/metadata.name": namespace}
    for key, value in selector.match_labels.items():
        if labels.get(key) != value:
            return False
    for expr in selector.match_expressions:
        present = expr.key in labels
        if expr.operator == "In" and (not present or labels[expr.key] not in expr.values):
            return False
        if expr.operator == "NotIn" and present and labels[expr.key] in expr.values:
            return False
        if expr.operator == "Exists" and not present:
            return False
        if expr.operator == "DoesNotExist" and present:
            return False
    return True


def _settle_sockets(gateways: list[GatewayContext]) -> None:
    """Give every socket to listeners of one family, and every TLS server name to one listener.

    HTTP listeners share a socket (virtual hosts tell them apart), so do
    HTTPS and TLS listeners (the server name of the ClientHello tells them
    apart); a TCP listener needs its socket for itself. Within one Gateway,
    listeners on one port that cannot share it are all refused (Gateway API:
    ``Conflicted=True``, ``ProtocolConflict``; none of them is served): those
    of different families, and an HTTPS and a TLS listener with the same
    hostname (or both without one). Across Gateways, which all run in this
    one Envoy, the oldest Gateway (creation time, then namespace/name) keeps
    the socket, and a newer one's listener is refused with
    ``PortUnavailable``, or, for an HTTPS or TLS hostname an older Gateway
    serves on that socket, with ``Conflicted=True``, ``HostnameConflict``: a
    Gateway created later never takes a port or a name away from one that is
    serving (without creation times, as in plain files, namespace/name
    decides).
    """
    owners: dict[tuple[str, int], ListenerContext] = {}
    names: dict[tuple[tuple[str, int], str], ListenerContext] = {}
    ordered = sorted(
        gateways,
        key=lambda c: (c.gateway.metadata.creation_timestamp or "", c.gateway.namespace, c.gateway.name),
    )
    for ctx in ordered:
        # The Gateway's own listeners, then each attached ListenerSet's: within one of these
        # groups conflicting listeners are all refused; a later group never takes a port or
        # a server name from an earlier one (the Gateway API's precedence for ListenerSets).
        groups = [ctx.own_listeners, *(lsc.listeners for lsc in ctx.listener_sets)]
        kept = _PortIndex()
        for group in groups:
            valid = [lc for lc in group if lc.valid]
            in_group = _PortIndex(valid)
            for lc in valid:
                lc.conflict = _conflict_within(lc, in_group) or _conflict_within(lc, kept)
            for lc in valid:
                if lc.conflict is None:
                    lc.conflict = _conflict_across(lc, owners, names)
                if lc.conflict is not None:
                    lc.valid = False
                    continue
                kept.add(lc)
                for socket in lc.sockets:
                    owners.setdefault(socket, lc)
                    if lc.family == "TLS":
                        names.setdefault((socket, lc.hostname or ""), lc)


def _seen_from(other: ListenerContext, lc: ListenerContext) -> str:
    """``other``'s name as ``lc``'s owner reads it: qualified when another object declares it
    (listener names repeat across a Gateway and its ListenerSets)."""
    if other.owner is lc.owner:
        return other.name
    owner = other.owner
    return f"{other.name} of {type(owner).KIND} {owner.namespace}/{owner.name}"


class _PortIndex:
    """Valid listeners of one Gateway (or ListenerSet) by port: by family, and those of the TLS
    family by hostname, so that finding what ``lc`` conflicts with costs what it conflicts with,
    not a pass over every listener (a Gateway of 1,000 listeners: a million tests)."""

    __slots__ = ("families", "names", "order")

    def __init__(self, listeners: list[ListenerContext] | None = None) -> None:
        self.families: dict[int, dict[str, list[ListenerContext]]] = {}
        self.names: dict[tuple[int, str | None], list[ListenerContext]] = {}
        self.order: dict[int, int] = {}  # id of a listener -> when it came: messages name them in order
        for lc in listeners or ():
            self.add(lc)

    def add(self, lc: ListenerContext) -> None:
        self.order[id(lc)] = len(self.order)
        port = lc.spec.port
        self.families.setdefault(port, {}).setdefault(lc.family, []).append(lc)
        if lc.family == "TLS":
            self.names.setdefault((port, lc.hostname), []).append(lc)


def _conflict_within(lc: ListenerContext, index: _PortIndex) -> Conflict | None:
    """Why ``lc`` cannot share its port with the other valid listeners of its Gateway (those of
    ``index``), if it cannot.

    ``ProtocolConflict`` for another family, or an HTTPS and a TLS listener
    with one hostname; ``HostnameConflict`` for one TLS-family hostname twice
    with the same protocol spelled differently (``https``, ``HTTPS``).
    """
    port = lc.spec.port
    families = sorted(
        (o for family, group in index.families.get(port, {}).items() if family != lc.family for o in group),
        key=lambda o: index.order[id(o)],
    )
    if families:
        message = (
            f"Port {port} is also used by listener "
            + ", ".join(f"{_seen_from(o, lc)} ({o.protocol})" for o in families)
            + f", which cannot share it with {lc.protocol}: a port serves HTTP listeners, or HTTPS and "
            "TLS listeners, or one TCP or UDP listener; change the port of one of them"
        )
        return Conflict(st.R_INVALID, message, conflicted=st.R_PROTOCOL_CONFLICT)
    if lc.family != "TLS":
        return None
    same = [o for o in index.names.get((port, lc.hostname), ()) if o is not lc]
    if not same:
        return None
    what = f"hostname {lc.hostname}" if lc.hostname else "no hostname (every server name)"
    named = ", ".join(f"{_seen_from(o, lc)} ({o.protocol})" for o in same)
    message = (
        f"Listener {named} also has port {port} and {what}: "
        "the server name of a TLS connection could not tell them apart; give them different hostnames "
        "or ports"
    )
    # Same protocol: only spelled differently (https, HTTPS), which the CRD's uniqueness rule misses.
    protocol = any(o.protocol != lc.protocol for o in same)
    return Conflict(
        st.R_INVALID, message, conflicted=st.R_PROTOCOL_CONFLICT if protocol else st.R_HOSTNAME_CONFLICT
    )


def _conflict_across(
    lc: ListenerContext,
    owners: dict[tuple[str, int], ListenerContext],
    names: dict[tuple[tuple[str, int], str], ListenerContext],
) -> Conflict | None:
    """Why an older Gateway's listeners (already in ``owners`` and ``names``) keep ``lc``'s socket."""
    for socket in lc.sockets:
        address, port = socket
        owner = owners.get(socket)
        if (
            owner is not None
            and owner.gateway is not lc.gateway
            and (owner.family != lc.family or lc.family in ALONE)
        ):
            gw = owner.gateway
            return Conflict(
                st.R_PORT_UNAVAILABLE,
                f"{address}:{port} is already served by listener {owner.name} ({owner.protocol}) of "
                f"the older Gateway {gw.namespace}/{gw.name}; "
                + (
                    f"a {alone.protocol} listener needs its port for itself"
                    if (alone := lc if lc.family in ALONE else owner).family in ALONE
                    else "listeners of these protocols cannot share a port"
                )
                + ": use another port or another address",
                conflicted=None,
            )
        holder = names.get((socket, lc.hostname or ""))
        if holder is not None and holder.gateway is not lc.gateway:
            gw = holder.gateway
            what = f"hostname {lc.hostname}" if lc.hostname else "every server name (no hostname)"
            return Conflict(
                st.R_INVALID,
                f"{address}:{port} already serves {what} for listener {holder.name} ({holder.protocol}) of "
                f"the older Gateway {gw.namespace}/{gw.name}; use another hostname, port or address",
                conflicted=st.R_HOSTNAME_CONFLICT,
            )
    return None


def _note_overlaps(gateways: list[GatewayContext]) -> None:
    """Mark TLS-terminating listeners whose hostnames overlap on a socket (``OverlappingTLSConfig``).

    A client may reuse a connection made for one name for another its
    certificate also covers (HTTP connection coalescing); on a socket
    serving ``a.example.com`` and ``*.example.com`` that reaches the
    other listener's certificate, answered 421 by weir. Only a warning: both
    are served.
    """
    by_socket: dict[tuple[str, int], list[ListenerContext]] = defaultdict(list)
    for ctx in gateways:
        for lc in ctx.listeners:
            if lc.valid and lc.terminates_tls:
                for socket in lc.sockets:
                    by_socket[socket].append(lc)
    for listeners in by_socket.values():
        # Found through each hostname's wildcard suffixes, not by testing every pair: a socket of
        # 1,000 HTTPS listeners would cost a million tests (and each is named in the order given).
        order = {id(lc): at for at, lc in enumerate(listeners)}
        by_hostname: dict[str | None, list[ListenerContext]] = defaultdict(list)
        for lc in listeners:
            by_hostname[lc.hostname].append(lc)
        beneath: dict[str | None, list[str]] = defaultdict(list)  # the hostnames each one covers
        for hostname in by_hostname:
            if hostname is not None:
                beneath[None].append(hostname)
                for wildcard in wildcards_over(hostname):
                    if wildcard in by_hostname:
                        beneath[wildcard].append(hostname)
        for hostname, group in by_hostname.items():
            names: list[str | None] = [hostname, *beneath.get(hostname, ())]
            if hostname is not None:
                names += [w for w in wildcards_over(hostname) if w in by_hostname]
                names.append(None)
            others = sorted(
                {id(o): o for name in names for o in by_hostname.get(name, ())}.values(),
                key=lambda o: order[id(o)],
            )
            for lc in group:
                seen = set(lc.overlapping)
                for other in others:
                    label = _label(other, lc.gateway)
                    if other is not lc and label not in seen:
                        seen.add(label)
                        lc.overlapping.append(label)


def _label(lc: ListenerContext, seen_from: Gateway) -> str:
    gw = lc.gateway
    name = f"{lc.name} ({lc.hostname or 'no hostname'})"
    return name if gw is seen_from else f"{name} of Gateway {gw.namespace}/{gw.name}"


def wildcards_over(name: str) -> Iterator[str]:
    """The wildcard hostnames other than ``name`` that match ``name``, most specific first:
    ``a.b.example`` gives ``*.b.example``, ``*.example`` (not ``*``, which is no hostname)."""
    at = name.find(".")
    while at >= 0:
        wildcard = "*" + name[at:]
        if wildcard != name:
            yield wildcard
        at = name.find(".", at + 1)


def hostnames_overlap(a: str | None, b: str | None) -> bool:
    """Whether some server name matches both listener hostnames (``None``: every name)."""
    if a is None or b is None or a == b:
        return True
    return covers(a, b) or covers(b, a)


def covers(hostname: str | None, name: str) -> bool:
    """Whether listener ``hostname`` matches ``name`` (possibly a wildcard itself: then all it matches).

    ``None`` matches every name; ``*.example.com`` any name with one or more
    labels in front of ``example.com``.
    """
    if hostname is None or hostname == name:
        return True
    if not hostname.startswith("*."):
        return False
    return name.endswith(hostname[1:])


def _gateway_context(resources: Resources, gw: Gateway, settings: Settings) -> GatewayContext:
    gen = gw.metadata.generation
    ctx = GatewayContext(gateway=gw)
    refused = _refused_parameters(gw)
    if refused is not None:
        ctx.conditions.append(st.condition(st.ACCEPTED, False, st.R_INVALID_PARAMETERS, refused, gen))
        return ctx
    addresses: list[str] = []
    unsupported: list[str] = []
    # An IPAddress without a value asks weir to choose one (GatewayAddressEmpty): the address
    # a Gateway without spec.addresses gets. It cannot be added to addresses that are given.
    chosen = [a for a in gw.spec.addresses if a.type == "IPAddress" and a.value is None]
    if chosen and len(chosen) < len(gw.spec.addresses):
        unsupported.append(
            "IPAddress without a value next to addresses with one (weir assigns the one default "
            "address only to a Gateway that names none: give every address a value, or none)"
        )
    for addr in gw.spec.addresses:
        if addr.type != "IPAddress":
            unsupported.append(f"{addr.type} {addr.value!r}")
            continue
        if addr.value is None:
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
    client_cert = gateway_client_certificate(resources, gw)
    if isinstance(client_cert, tls.TlsProblem):
        reason = client_cert.resolved_reason or st.R_INVALID_CLIENT_CERTIFICATE_REF
        message = (
            f"spec.tls.backend: {client_cert.message}; TLS backends are reached without a client certificate"
        )
        ctx.resolved_refs = st.condition(st.RESOLVED_REFS, False, reason, message, gen)
    elif client_cert is not None:
        message = "spec.tls.backend.clientCertificateRef resolved; it is presented to TLS backends"
        ctx.resolved_refs = st.condition(st.RESOLVED_REFS, True, st.R_RESOLVED_REFS, message, gen)
    if not addresses:
        ctx.published = published_addresses(resources, settings, gw)
        if settings.gateway_services is not None:
            ctx.address_problem = infrastructure.foreign_service(resources, gw)
    for spec in gw.spec.listeners:
        ctx.listeners.append(_listener_context(resources, gw, spec, ctx.addresses))
    return ctx


def _refused_parameters(gw: Gateway) -> str | None:
    """Why the Gateway's ``spec.infrastructure.parametersRef`` refuses it, or ``None`` without one.

    weir has no per-Gateway parameters kind (its GatewayClassConfig configures
    a class, through the GatewayClass's ``parametersRef``), so any reference
    is one it cannot use. The Gateway API asks for the Gateway to be refused
    rather than served without the configuration its author asked for.
    """
    infrastructure = gw.spec.infrastructure
    ref = infrastructure.parameters_ref if infrastructure is not None else None
    if ref is None:
        return None
    named = f"{ref.kind} {ref.name!r} ({ref.group or 'core'})"
    return (
        f"spec.infrastructure.parametersRef names {named}; weir reads no per-Gateway parameters "
        "(a GatewayClassConfig configures the whole class, through the GatewayClass's parametersRef). "
        "Remove spec.infrastructure.parametersRef"
    )


def published_addresses(
    resources: Resources, settings: Settings, gw: Gateway | None = None
) -> tuple[tuple[str, str], ...] | None:
    """``(type, value)`` of where clients reach Gateway ``gw`` (without ``spec.addresses``), or
    ``None`` for the address listeners bind to.

    ``settings.gateway_addresses`` win; else, with ``settings.gateway_services``
    (the per-Gateway Service mode, :mod:`weir.translate.infrastructure`), the
    Gateway's own Service; else the ``settings.publish_service`` Service. A
    Service gives its ``status.loadBalancer.ingress`` (``ip`` → ``IPAddress``,
    ``hostname`` → ``Hostname``), else its cluster IP (a Service without
    either, or missing, publishes nothing yet: a load balancer may still be
    provisioning, the Service not created yet).
    """
    if settings.gateway_addresses:
        return tuple((_address_type(a), a) for a in settings.gateway_addresses)
    if settings.gateway_services is not None and gw is not None:
        return service_addresses(infrastructure.own_service(resources, gw))
    if settings.publish_service is None:
        return None
    return service_addresses(resources.service(*settings.publish_service))


def service_addresses(svc: Service | None) -> tuple[tuple[str, str], ...]:
    """``(type, value)`` where a Service is reached: its load-balancer ingress, else its cluster IP."""
    if svc is None:
        return ()
    found: list[tuple[str, str]] = []
    # status is plain data, unchecked: read only what has the shape the API gives it.
    balancer = svc.status.get("loadBalancer") if isinstance(svc.status, dict) else None
    ingresses = balancer.get("ingress") if isinstance(balancer, dict) else None
    for ingress in ingresses if isinstance(ingresses, list) else ():
        if not isinstance(ingress, dict):
            continue
        if isinstance(ingress.get("ip"), str) and ingress["ip"]:
            found.append(("IPAddress", ingress["ip"]))
        elif isinstance(ingress.get("hostname"), str) and ingress["hostname"]:
            found.append(("Hostname", ingress["hostname"]))
    if not found and svc.spec.cluster_ip and _address_type(svc.spec.cluster_ip) == "IPAddress":
        found.append(("IPAddress", svc.spec.cluster_ip))
    return tuple(dict.fromkeys(found))


def _address_type(value: str) -> str:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return "Hostname"
    return "IPAddress"


def _gateway_accepted(ctx: GatewayContext) -> None:
    """Append the Gateway's ``Accepted`` condition once its listeners are settled."""
    if not ctx.addresses:
        return  # already refused (parameters, unsupported addresses)
    gen = ctx.gateway.metadata.generation
    own = ctx.own_listeners
    valid = [lc for lc in own if lc.valid]
    if all(lc.served for lc in own):
        message = "Gateway is valid"
        if ctx.address_problem is not None:
            message += f", but it has no address: {ctx.address_problem}"
        ctx.conditions.append(st.condition(st.ACCEPTED, True, st.R_ACCEPTED, message, gen))
    else:
        # Not accepted, or accepted but unusable (certificates): either way not configured.
        bad = ", ".join(lc.name for lc in own if not lc.served)
        ctx.conditions.append(
            st.condition(
                st.ACCEPTED,
                bool(valid),
                st.R_LISTENERS_NOT_VALID,
                f"Listeners not valid: {bad}; see each listener's conditions",
                gen,
            )
        )


def _listener_context(
    resources: Resources,
    gw: Gateway,
    spec: Listener,
    addresses: tuple[str, ...],
    *,
    listener_set: ListenerSet | None = None,
) -> ListenerContext:
    sockets = tuple((a, spec.port) for a in addresses)
    lc = ListenerContext(gw, spec, sockets, (), valid=False, listener_set=listener_set)
    supported = SUPPORTED_KINDS.get(lc.protocol)
    if supported is None:
        return lc
    if spec.allowed_routes.kinds:
        lc.kinds = tuple(
            k.kind for k in spec.allowed_routes.kinds if k.group == GROUP and k.kind in supported
        )
    else:
        lc.kinds = supported
    lc.valid = True
    if not lc.terminates_tls:
        return lc
    refused = []
    if spec.tls is not None and spec.tls.options:
        refused.append(f"tls.options ({', '.join(sorted(spec.tls.options))}): weir supports no TLS options")
    if refused:
        lc.valid = False
        lc.unsupported = "; ".join(refused)
        return lc
    validation = frontendtls.validation_for(gw, spec.port) if lc.protocol == "HTTPS" else None
    if validation is not None:
        resolved = frontendtls.client_validation(resources, gw, validation)
        if isinstance(resolved, ClientCAProblem):
            lc.client_ca_problem = resolved
        else:
            lc.client_validation = resolved
    found = listener_certificates(resources, lc.owner, spec.tls)
    if isinstance(found, CertificateProblem):
        lc.certificate_problem = found
    else:
        lc.certificates = found
    return lc


def gateway_status(ctx: GatewayContext) -> dict[str, Any]:
    """The status of a Gateway once routes have attached (``attachedRoutes`` is final)."""
    gen = ctx.gateway.metadata.generation
    conditions = list(ctx.conditions)
    if not ctx.addresses:
        conditions.append(
            st.condition(st.PROGRAMMED, False, st.R_INVALID, "The Gateway is not accepted", gen)
        )
    elif any(lc.served for lc in ctx.own_listeners):
        conditions.append(st.condition(st.PROGRAMMED, False, st.R_PENDING, st.PENDING_MESSAGE, gen))
    else:
        conditions.append(
            st.condition(
                st.PROGRAMMED,
                False,
                st.R_INVALID,
                "No listener can be served; see each listener's conditions",
                gen,
            )
        )
    listeners = _listener_entries(ctx.own_listeners, gen)
    if ctx.resolved_refs is not None:
        conditions.append(ctx.resolved_refs)
    if frontendtls.insecure_fallback(ctx.gateway):
        conditions.append(
            st.condition(
                st.INSECURE_FRONTEND_VALIDATION_MODE,
                True,
                st.R_CONFIGURATION_CHANGED,
                "spec.tls.frontend uses AllowInsecureFallback: HTTPS clients without a valid "
                "certificate are let in, and backends must authorize them",
                gen,
            )
        )
    status: dict[str, Any] = {"conditions": st.conditions_data(conditions), "listeners": listeners}
    if ctx.listener_sets:
        status["attachedListenerSets"] = sum(1 for lsc in ctx.listener_sets if lsc.refusal is None)
    if ctx.published is not None:
        status["addresses"] = [{"type": kind, "value": value} for kind, value in ctx.published]
    elif ctx.addresses:
        status["addresses"] = [{"type": "IPAddress", "value": a} for a in ctx.addresses]
    return status


def _listener_entries(listeners: list[ListenerContext], gen: int) -> list[dict[str, Any]]:
    """``status.listeners`` of a Gateway or a ListenerSet (the same shape for both)."""
    return [
        {
            "name": lc.name,
            "supportedKinds": [{"group": GROUP, "kind": k} for k in lc.kinds],
            "attachedRoutes": lc.attached,
            "conditions": st.conditions_data(_listener_conditions(lc, gen)),
        }
        for lc in listeners
    ]


def listener_set_status(lsc: ListenerSetContext) -> dict[str, Any]:
    """The status of a ListenerSet once routes have attached (``attachedRoutes`` is final).

    ``Programmed`` is ``Pending`` while any of its listeners is served (the
    data plane settles it, as for Gateways).
    """
    gen = lsc.listener_set.metadata.generation
    if lsc.refusal is not None:
        reason, message = lsc.refusal
        # A set its Gateway does not allow is NotAllowed in both conditions (upstream's
        # ListenerSetDefaultNotAllowed checks Programmed's reason too); otherwise Invalid.
        not_programmed = st.R_NOT_ALLOWED if reason == st.R_NOT_ALLOWED else st.R_INVALID
        return {
            "conditions": st.conditions_data(
                [
                    st.condition(st.ACCEPTED, False, reason, message, gen),
                    st.condition(
                        st.PROGRAMMED, False, not_programmed, "The ListenerSet is not accepted", gen
                    ),
                ]
            ),
            "listeners": [],
        }
    served = [lc for lc in lsc.listeners if lc.served]
    bad = ", ".join(lc.name for lc in lsc.listeners if not lc.served)
    if not bad:
        accepted = st.condition(
            st.ACCEPTED, True, st.R_ACCEPTED, "ListenerSet is attached to its Gateway", gen
        )
    else:
        message = f"Listeners not valid: {bad}; see each listener's conditions"
        valid = any(lc.valid for lc in lsc.listeners)
        accepted = st.condition(st.ACCEPTED, valid, st.R_LISTENERS_NOT_VALID, message, gen)
    if served:
        programmed = st.condition(st.PROGRAMMED, False, st.R_PENDING, st.PENDING_MESSAGE, gen)
    else:
        message = "No listener can be served; see each listener's conditions"
        programmed = st.condition(st.PROGRAMMED, False, st.R_INVALID, message, gen)
    return {
        "conditions": st.conditions_data([accepted, programmed]),
        "listeners": _listener_entries(lsc.listeners, gen),
    }


def _listener_conditions(lc: ListenerContext, gen: int) -> list[st.Condition]:
    not_accepted = st.condition(st.PROGRAMMED, False, st.R_INVALID, "The listener is not accepted", gen)
    no_refs = st.condition(st.RESOLVED_REFS, True, st.R_RESOLVED_REFS, "No references to resolve", gen)
    if lc.conflict is not None:
        conds = [
            st.condition(st.ACCEPTED, False, lc.conflict.reason, lc.conflict.message, gen),
            not_accepted,
            no_refs,
        ]
        if lc.conflict.conflicted is not None:
            conds.append(st.condition(st.CONFLICTED, True, lc.conflict.conflicted, lc.conflict.message, gen))
        return conds
    if not lc.valid:
        if lc.unsupported is not None:
            accepted = st.condition(
                st.ACCEPTED, False, st.R_UNSUPPORTED_VALUE, f"Not supported: {lc.unsupported}", gen
            )
        else:
            message = (
                f"Protocol {lc.spec.protocol} is not supported by weir yet; "
                f"supported: {', '.join(sorted(SUPPORTED_KINDS))}"
            )
            accepted = st.condition(st.ACCEPTED, False, st.R_UNSUPPORTED_PROTOCOL, message, gen)
        return [accepted, not_accepted, no_refs]
    accepted = st.condition(st.ACCEPTED, True, st.R_ACCEPTED, "Listener is valid", gen)
    programmed = st.condition(st.PROGRAMMED, False, st.R_PENDING, st.PENDING_MESSAGE, gen)
    problems: list[tuple[str, str]] = []
    if lc.client_ca_problem is not None:
        problem = lc.client_ca_problem
        problems.append((problem.reason, problem.message))
        accepted = st.condition(
            st.ACCEPTED,
            False,
            st.R_NO_VALID_CA_CERTIFICATE,
            "Client certificates cannot be validated as spec.tls.frontend asks: the listener serves "
            "nothing rather than let clients in unchecked; see ResolvedRefs",
            gen,
        )
        programmed = st.condition(st.PROGRAMMED, False, st.R_INVALID, "The listener is not accepted", gen)
    elif lc.certificate_problem is not None:
        problems.append((lc.certificate_problem.reason, lc.certificate_problem.message))
        programmed = st.condition(
            st.PROGRAMMED,
            False,
            st.R_INVALID,
            "The listener serves nothing until its certificates resolve; see ResolvedRefs",
            gen,
        )
    conds = [accepted, programmed]
    wanted = [f"{k.group}/{k.kind}" for k in lc.spec.allowed_routes.kinds]
    invalid = [w for w in wanted if w.split("/", 1)[1] not in lc.kinds or not w.startswith(GROUP + "/")]
    if invalid:
        problems.append(
            (
                st.R_INVALID_ROUTE_KINDS,
                f"Route kinds not supported on a {lc.spec.protocol} listener: {', '.join(invalid)}",
            )
        )
    if problems:
        message = "; ".join(message for _, message in problems)
        conds.append(st.condition(st.RESOLVED_REFS, False, problems[0][0], message, gen))
    else:
        conds.append(st.condition(st.RESOLVED_REFS, True, st.R_RESOLVED_REFS, "All references resolved", gen))
    if lc.overlapping:
        conds.append(
            st.condition(
                st.OVERLAPPING_TLS_CONFIG,
                True,
                st.R_OVERLAPPING_HOSTNAMES,
                f"Hostname {lc.hostname or '(none: every name)'} overlaps on port {lc.spec.port} with "
                + ", ".join(lc.overlapping)
                + "; a certificate may cover several of these names, and an HTTPS request on a "
                "connection made for another listener's name is answered 421 (Misdirected Request)",
                gen,
            )
        )
    return conds
