"""Route attachment, one path for every route kind: which parentRefs are weir's, which listeners
accept a route, why one refuses it, the hostnames it serves there, and its ``status.parents``.

HTTPRoute, GRPCRoute, TLSRoute, TCPRoute and UDPRoute attach the same way
(Gateway API, "Attaching Routes to Gateways"): a parentRef names a Gateway
or a ListenerSet (:func:`parent_refs`; refs to other controllers' parents
are left alone), ``sectionName`` and ``port`` select its listeners, a
listener takes the route when its protocol carries the kind and its
``allowedRoutes`` admit the route's namespace (:func:`allowed_listeners`),
and, for the kinds with hostnames, when the two have hostnames in common
(:func:`intersect_hostnames`). The checks run in the order a user fixes
them, and the first that fails is the ``Accepted=False`` reason.

Each kind implements :class:`RouteKind` (what makes a route unservable,
whether it attaches by hostname); :func:`route_parents` runs the whole
path for one route and :func:`route_status` writes its entries. What a kind
does once attached (rules, backends, who wins a listener) stays in its own
module.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

from weir import ir
from weir.api.gateway_v1 import GROUP, HTTPRoute, ParentReference
from weir.api.gateway_v1_grpcroute import GRPCRoute
from weir.api.gateway_v1_listenerset import ListenerSet
from weir.api.gateway_v1_tcproute import TCPRoute
from weir.api.gateway_v1_tlsroute import TLSRoute
from weir.api.gateway_v1_udproute import UDPRoute
from weir.api.meta import KubeObject, ObjectKey
from weir.resources import Resources
from weir.translate import status as st
from weir.translate.backends import RefFailure
from weir.translate.gateways import GatewayContext, ListenerContext, namespace_selected

#: A route of any kind weir attaches.
AttachableRoute = HTTPRoute | GRPCRoute | TLSRoute | TCPRoute | UDPRoute


class RouteKind(Protocol):
    """What attachment asks of one route kind; each kind's module provides one."""

    #: Whether a listener takes the route only for the hostnames both have (HTTP, gRPC, TLS).
    @property
    def by_hostname(self) -> bool: ...

    def unsupported(self, route: Any) -> str | None:
        """Why weir cannot serve ``route`` at all (``UnsupportedValue``), or ``None``."""
        ...


@dataclass(frozen=True, slots=True)
class RouteParent:
    """One parentRef of a route that is weir's to answer: its ``Accepted`` and where it attached."""

    ref: ParentReference
    accepted: st.Condition
    attachments: list[Attachment]

    @property
    def listeners(self) -> list[ListenerContext]:
        return [a.listener for a in self.attachments]


#: No route attached in advance: the default of each kind's ``attached`` (see
#: :func:`weir.translate.users.xbackend_users`).
NONE_ATTACHED: Mapping[ObjectKey, list[RouteParent]] = MappingProxyType({})


def route_parents(
    resources: Resources,
    route: AttachableRoute,
    by_key: Mapping[ObjectKey, GatewayContext],
    existing: AbstractSet[ObjectKey],
    kind: RouteKind,
    lost: Mapping[int, str] | None = None,
) -> list[RouteParent]:
    """Attach ``route`` through each of its parentRefs that is weir's (see :func:`parent_index`)."""
    why_not = kind.unsupported(route)
    parents = []
    for ref, ctx, gw_key in parent_refs(route, by_key, existing):
        accepted, found = attach(
            resources, route, ref, ctx, gw_key, why_not, lost, by_hostname=kind.by_hostname
        )
        parents.append(RouteParent(ref, accepted, found))
    return parents


def unservable(problems: Sequence[str]) -> str | None:
    """A kind's ``unsupported`` message from the problems found in a route (``None``: none)."""
    return "weir cannot serve this route: " + "; ".join(problems) if problems else None


def count_attached(parents: Iterable[RouteParent]) -> None:
    """Count the route once in the ``attachedRoutes`` of each listener it attached to."""
    for listener in {id(a.listener): a.listener for p in parents for a in p.attachments}.values():
        listener.attached += 1


def route_precedence(route: KubeObject) -> tuple[str, str, str]:
    """The Gateway API's order among routes that claim the same thing: the oldest (creation time),
    then by namespace and name."""
    return (route.metadata.creation_timestamp or "", route.namespace, route.name)


def route_status(
    route: KubeObject,
    controller_name: str,
    ours: Sequence[st.ParentStatus],
    interner: st.StatusInterner,
) -> dict[str, Any] | None:
    """The ``status`` of a route: other controllers' entries, then weir's ``ours``.

    ``None`` when weir has nothing to write; ``{"parents": []}`` when weir
    answers parentRefs but other controllers' entries are all there is.
    """
    if not ours:  # weir's entries for Gateways the route no longer names go
        return st.parents_status(route.status, controller_name, [], interner=interner)
    return st.parents_status(route.status, controller_name, ours, interner=interner) or {"parents": []}


Socket = tuple[str, int]


@dataclass(slots=True)
class RouteTable:
    """What routes contribute to the data plane, besides the routes each listener keeps
    (:attr:`weir.translate.gateways.ListenerContext.routes`)."""

    upstreams: dict[str, ir.Upstream] = field(default_factory=dict)
    secrets: dict[str, ir.Secret] = field(default_factory=dict)
    #: socket of a TCP listener -> the backends of the TCPRoute it forwards to
    tcp: dict[Socket, tuple[ir.WeightedBackend, ...]] = field(default_factory=dict)
    #: socket of a UDP listener -> the backend of the UDPRoute it forwards to
    udp: dict[Socket, tuple[ir.WeightedBackend, ...]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Attachment:
    """A route attached to a listener, for ``hostnames`` (its own intersected with the listener's)."""

    listener: ListenerContext
    hostnames: tuple[str, ...]


def attach(
    resources: Resources,
    route: AttachableRoute,
    ref: ParentReference,
    ctx: GatewayContext | None,
    gw_key: ObjectKey,
    why_not: str | None,
    lost: Mapping[int, str] | None = None,
    *,
    by_hostname: bool = True,
) -> tuple[st.Condition, list[Attachment]]:
    """The ``Accepted`` condition of ``route`` for parentRef ``ref``, and where it attaches.

    For every route kind. ``why_not``: why weir cannot serve the route at
    all (not accepted), if it cannot. ``by_hostname``: a listener takes the
    route only for the hostnames both have (HTTP, gRPC, TLS); otherwise every
    allowed listener takes it, with no hostnames (TCP, UDP). ``lost``:
    listeners (``id`` of their context) the route must not attach to,
    because an older route of another kind shares a hostname there, and why.
    """
    gen = route.metadata.generation

    def refuse(reason: str, message: str) -> tuple[st.Condition, list[Attachment]]:
        return st.condition(st.ACCEPTED, False, reason, message, gen), []

    allowed = allowed_listeners(resources, route, ref, ctx, gw_key, why_not)
    if isinstance(allowed, Refusal):
        return refuse(allowed.reason, allowed.message)
    if not by_hostname:
        return _ACCEPTED(gen), [Attachment(lc, ()) for lc in allowed]
    attachments = []
    names = route_hostnames(route)
    for lc in allowed:
        hostnames = intersect_hostnames(lc.hostname, names)
        if hostnames:
            attachments.append(Attachment(lc, hostnames))
    if not attachments:
        return refuse(
            st.R_NO_MATCHING_LISTENER_HOSTNAME,
            "None of the route's hostnames matches a listener hostname: "
            + ", ".join(sorted({lc.hostname or "*" for lc in allowed})),
        )
    conflicts = [lost[id(a.listener)] for a in attachments if lost and id(a.listener) in lost]
    if conflicts:
        attachments = [a for a in attachments if not lost or id(a.listener) not in lost]
        if not attachments:
            return refuse(st.R_CONFLICTED, "Not attached: " + "; ".join(conflicts))
        message = "Route is accepted, but not everywhere: " + "; ".join(conflicts)
        return st.condition(st.ACCEPTED, True, st.R_ACCEPTED, message, gen), attachments
    return _ACCEPTED(gen), attachments


def _ACCEPTED(gen: int) -> st.Condition:
    return st.condition(st.ACCEPTED, True, st.R_ACCEPTED, "Route is accepted", gen)


def route_hostnames(route: AttachableRoute) -> tuple[str, ...]:
    """The route's ``spec.hostnames`` (none for the kinds without them: TCP, UDP)."""
    return tuple(getattr(route.spec, "hostnames", ()))


@dataclass(frozen=True)
class Refusal:
    """Why a route does not attach through a parentRef: the ``Accepted=False`` reason and message."""

    reason: str
    message: str


#: What a route's parentRef may name: a Gateway (its own listeners) or a ListenerSet (its listeners).
PARENT_KINDS = frozenset({"Gateway", "ListenerSet"})


def parent_index(
    resources: Resources, gateways: list[GatewayContext]
) -> tuple[dict[ObjectKey, GatewayContext], frozenset[ObjectKey]]:
    """Weir's parents by key (each Gateway, and each ListenerSet naming one, to that Gateway's
    context), and the keys of every Gateway and ListenerSet there is (other controllers' too)."""
    by_key = {ctx.gateway.key: ctx for ctx in gateways}
    for ctx in gateways:
        for lsc in ctx.listener_sets:
            by_key[lsc.key] = ctx
    existing = frozenset(gw.key for gw in resources.gateways) | frozenset(
        ls.key for ls in resources.all(ListenerSet)
    )
    return by_key, existing


def parent_refs(
    route: AttachableRoute,
    by_key: Mapping[ObjectKey, GatewayContext],
    existing: AbstractSet[ObjectKey],
) -> Iterator[tuple[ParentReference, GatewayContext | None, ObjectKey]]:
    """The route's parentRefs that are weir's to answer (see :func:`parent_index`): to weir's
    Gateways and ListenerSets, or to ones that do not exist; with the parent's context and key."""
    for ref in route.spec.parent_refs:
        if ref.group != GROUP or ref.kind not in PARENT_KINDS:
            continue
        key = ObjectKey(ref.kind, ref.namespace or route.namespace, ref.name)
        ctx = by_key.get(key)
        if ctx is None and key in existing:
            continue  # another controller's
        yield ref, ctx, key


def allowed_listeners(
    resources: Resources,
    route: KubeObject,
    ref: ParentReference,
    ctx: GatewayContext | None,
    gw_key: ObjectKey,
    unsupported: str | None = None,
) -> list[ListenerContext] | Refusal:
    """The listeners of ``ctx`` that ``ref`` selects and that allow ``route`` (any route kind), or
    why there are none. ``unsupported``: why weir cannot serve the route at all, if it cannot.

    The checks every route kind shares, in the order a user fixes them: the
    Gateway exists and is accepted, the route is servable, ``ref`` selects a
    listener, a selected listener allows the route's kind and namespace.
    """
    parent = f"{gw_key.kind} {gw_key.namespace}/{gw_key.name}"
    if ctx is None:
        return Refusal(st.R_NO_MATCHING_PARENT, f"{parent} does not exist")
    if not ctx.addresses:
        return Refusal(st.R_NO_MATCHING_PARENT, f"{parent} is not accepted")
    listener_set = next((lsc for lsc in ctx.listener_sets if lsc.key == gw_key), None)
    if listener_set is not None and listener_set.refusal is not None:
        return Refusal(st.R_NO_MATCHING_PARENT, f"{parent} is not accepted: {listener_set.refusal[1]}")
    if unsupported:
        return Refusal(st.R_UNSUPPORTED_VALUE, unsupported)
    candidates = parent_listeners(ctx, ref, listener_set.listeners if listener_set else ctx.own_listeners)
    if not candidates:
        return Refusal(st.R_NO_MATCHING_PARENT, no_listener_message(gw_key, ref))
    kind = type(route).KIND
    allowed = [lc for lc in candidates if lc.valid and listener_allows(resources, lc, kind, route.namespace)]
    if not allowed:
        return Refusal(
            st.R_NOT_ALLOWED_BY_LISTENERS, not_allowed_message(kind, route.namespace, candidates, gw_key)
        )
    return allowed


def parent_listeners(
    ctx: GatewayContext, ref: ParentReference, listeners: list[ListenerContext] | None = None
) -> list[ListenerContext]:
    """The ``listeners`` (default: the Gateway's own) that ``ref`` selects by ``sectionName`` and
    ``port`` (all when unset). A route naming a Gateway attaches to its own listeners only; one
    naming a ListenerSet, to that set's."""
    return [
        lc
        for lc in (ctx.own_listeners if listeners is None else listeners)
        if (ref.section_name is None or lc.name == ref.section_name)
        and (ref.port is None or lc.spec.port == ref.port)
    ]


def no_listener_message(gw_key: ObjectKey, ref: ParentReference) -> str:
    """Why :func:`parent_listeners` found nothing."""
    wanted = " ".join(
        part
        for part in (
            f"sectionName {ref.section_name!r}" if ref.section_name else "",
            f"port {ref.port}" if ref.port else "",
        )
        if part
    )
    return f"{gw_key.kind} {gw_key.namespace}/{gw_key.name} has no listener with {wanted}"


def not_allowed_message(
    kind: str, namespace: str, candidates: list[ListenerContext], gw_key: ObjectKey
) -> str:
    """Why none of ``candidates`` takes a route of ``kind`` from ``namespace`` (``NotAllowedByListeners``)."""
    gateway = f"{gw_key.kind} {gw_key.namespace}/{gw_key.name}"
    if not any(lc.valid and kind in lc.kinds for lc in candidates):
        names = ", ".join(f"{lc.name} ({lc.protocol})" for lc in candidates)
        return (
            f"No listener of {gateway} takes {kind}s: {names}; a listener takes the route kinds of its "
            "protocol (allowedRoutes.kinds may narrow them) and only when it is accepted"
        )
    return (
        f"No listener of {gateway} allows {kind}s from namespace {namespace}; "
        "see the listeners' allowedRoutes"
    )


def listener_allows(resources: Resources, lc: ListenerContext, kind: str, namespace: str) -> bool:
    """Whether ``lc`` takes routes of ``kind`` from ``namespace`` (its kinds and ``allowedRoutes``)."""
    if kind not in lc.kinds:
        return False
    namespaces = lc.spec.allowed_routes.namespaces
    if namespaces.from_ == "All":
        return True
    if namespaces.from_ == "Same":  # the namespace of the Gateway or ListenerSet declaring it
        return namespace == lc.owner.namespace
    return namespace_selected(resources, namespaces.selector, namespace)


def intersect_hostnames(listener: str | None, route: Iterable[str]) -> tuple[str, ...]:
    """The hostnames a route serves on a listener (the more specific of each matching pair).

    ``*.example.com`` matches any name with at least one more label in front
    of ``example.com`` (so not ``example.com`` itself). No listener hostname
    and no route hostnames means every name: ``("*",)``.
    """
    route = tuple(route)
    if listener is None:
        return route or ("*",)
    if not route:
        return (listener,)
    out: list[str] = []
    for host in route:
        if host == listener or (listener.startswith("*.") and _covers(listener, host)):
            out.append(host)
        elif host.startswith("*.") and _covers(host, listener):
            out.append(listener)
    return tuple(dict.fromkeys(out))


def _covers(wildcard: str, name: str) -> bool:
    """True when ``wildcard`` (``*.suffix``) matches ``name``, which may itself be a narrower wildcard."""
    suffix = wildcard[1:]  # ".example.com"
    stem = name[2:] if name.startswith("*.") else name
    return name.endswith(suffix) and len(stem) >= len(suffix) and name != suffix[1:]


def parent_ref_data(ref: ParentReference, route_namespace: str) -> dict[str, Any]:
    """``parentRef`` as a route's status repeats it (namespace filled in)."""
    data: dict[str, Any] = {
        "group": ref.group,
        "kind": ref.kind,
        "namespace": ref.namespace or route_namespace,
        "name": ref.name,
    }
    if ref.section_name is not None:
        data["sectionName"] = ref.section_name
    if ref.port is not None:
        data["port"] = ref.port
    return data


def route_parent_entry(
    route: KubeObject,
    ref: ParentReference,
    controller_name: str,
    accepted: st.Condition,
    failure: RefFailure | None,
) -> st.ParentStatus:
    """One ``status.parents`` entry of a route: ``accepted`` for this parent, and the route's ResolvedRefs."""
    gen = route.metadata.generation
    if failure is not None:
        resolved = st.condition(st.RESOLVED_REFS, False, failure.reason, failure.message, gen)
    else:
        resolved = st.condition(st.RESOLVED_REFS, True, st.R_RESOLVED_REFS, "All references resolved", gen)
    return st.ParentStatus(
        st.ref_of(parent_ref_data(ref, route.namespace)), controller_name, (accepted, resolved)
    )
