"""HTTPRoutes: attachment to Gateway listeners, hostnames, rules to IR routes, and route status."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from weir import ir
from weir.api.gateway_v1 import (
    GROUP,
    BackendRef,
    HTTPRequestRedirectFilter,
    HTTPRoute,
    HTTPRouteMatch,
    ParentReference,
)
from weir.api.gateway_v1_grpcroute import GRPCRoute
from weir.api.gateway_v1_listenerset import ListenerSet
from weir.api.gateway_v1_tcproute import TCPRoute
from weir.api.gateway_v1_tlsroute import TLSRoute
from weir.api.gateway_v1_udproute import UDPRoute
from weir.api.meta import KubeObject, ObjectKey
from weir.api.xbackend_v1alpha1 import GROUP as XBACKEND_GROUP
from weir.resources import Resources
from weir.translate import filters
from weir.translate import status as st
from weir.translate.backends import BackendResolver, RefFailure, no_usable_backend
from weir.translate.gateways import GatewayContext, ListenerContext, RouteEntry, namespace_selected

Socket = tuple[str, int]

#: The idle limit of routes to MCP backends, which have no request timeout.
#: Streamable HTTP keeps a response open as long as a tool runs (POST) or a
#: session listens for server messages (GET), possibly silent all along:
#: Envoy's default of 5 minutes would cut quiet tool calls, no limit at all
#: would keep the streams of vanished peers forever. An hour is generous
#: and still bounded; an MCP client reopens a GET stream that was closed.
MCP_IDLE_TIMEOUT_MS = 3_600_000

#: Sorts routes within a virtual host by Gateway API precedence; smaller first.
SortKey = tuple[Any, ...]


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


@dataclass(frozen=True, slots=True)
class RouteUnit:
    """What one HTTPRoute contributes to a translation, from the route and what it reads alone.

    Computing a unit mutates nothing; :func:`place_unit` applies it. That
    split is what lets :mod:`weir.translate.incremental` recompute only the
    units a change can affect and take the others from the previous
    translation: a unit depends on the route, the Gateways' listener
    contexts (not on routes placed in them), the namespaces, ReferenceGrants
    and policies, and the backends it names (``reads``), nothing else.

    ``status``: the route's status, ``None`` when weir writes none.
    ``placements``: (listener, domain, entry) for each IR route it serves.
    ``attached``: the listeners it counts in (each once). ``gateways``: the
    Gateways it is attached to (users of its XBackends). ``upstreams`` and
    ``secrets``: what its backendRefs resolved to (XBackends before the
    egress policy). ``reads``: the Service and XBackend keys its backendRefs
    name, resolved or not. ``uses``: the XBackends it resolved, whose
    ``status.parents`` and egress policy its ``gateways`` take part in.
    """

    key: ObjectKey
    status: dict[str, Any] | None
    placements: tuple[tuple[ListenerContext, str, RouteEntry], ...] = ()
    attached: tuple[ListenerContext, ...] = ()
    gateways: frozenset[ObjectKey] = frozenset()
    upstreams: Mapping[str, ir.Upstream] = field(default_factory=dict)
    secrets: Mapping[str, ir.Secret] = field(default_factory=dict)
    reads: frozenset[ObjectKey] = frozenset()
    uses: frozenset[ObjectKey] = frozenset()


def translate_http_routes(
    resources: Resources,
    gateways: list[GatewayContext],
    resolver: BackendResolver,
    controller_name: str,
    *,
    request_timeout_ms: int = ir.DEFAULT_REQUEST_TIMEOUT_MS,
    lost: Mapping[ObjectKey, Mapping[int, str]] | None = None,
) -> list[RouteUnit]:
    """The :class:`RouteUnit` of every HTTPRoute, in order (see :func:`http_route_unit`)."""
    by_key, existing = parent_index(resources, gateways)
    return [
        http_route_unit(
            resources,
            route,
            by_key,
            existing,
            resolver,
            controller_name,
            request_timeout_ms=request_timeout_ms,
            lost=(lost or {}).get(route.key),
        )
        for route in resources.http_routes
    ]


def http_route_unit(
    resources: Resources,
    route: HTTPRoute,
    by_key: Mapping[ObjectKey, GatewayContext],
    existing: AbstractSet[ObjectKey],
    resolver: BackendResolver,
    controller_name: str,
    *,
    request_timeout_ms: int = ir.DEFAULT_REQUEST_TIMEOUT_MS,
    lost: Mapping[int, str] | None = None,
) -> RouteUnit:
    """Attach ``route`` to the listeners of ``by_key`` (weir's Gateways), resolve its backends.

    Only parentRefs to weir's Gateways and ListenerSets (or to ones that do not
    exist: ``existing``, see :func:`parent_index`) get a status entry; entries of other
    controllers are kept as they are. ``request_timeout_ms`` is the request
    timeout of rules without an MCP backend (see :func:`_action`). ``lost``:
    the listeners (``id`` of their context) the route lost to an older
    GRPCRoute, and why (see :func:`weir.translate.grpcroutes.kind_conflicts`).
    """
    parents: list[tuple[ParentReference, st.Condition]] = []
    attachments: list[Attachment] = []
    unsupported = unsupported_fields(route)
    for ref, ctx, gw_key in parent_refs(route, by_key, existing):
        accepted, found = attach(resources, route, ref, ctx, gw_key, unsupported, lost)
        attachments.extend(found)
        parents.append((ref, accepted))
    if not parents:
        # weir's entries for Gateways the route no longer names
        return RouteUnit(
            route.key, st.parents_status(route.status, controller_name, [], interner=resolver.interner)
        )
    # The routes of one Gateway share one set (a set costs 216 bytes).
    gateways_used: frozenset[ObjectKey] = resolver.interner.one_of(
        frozenset(a.listener.gateway.key for a in attachments)
    )
    table = RouteTable()
    resolved = _resolve_rules(route, resolver, set(gateways_used), table, request_timeout_ms)
    attached: dict[int, ListenerContext] = {}
    placements: list[tuple[ListenerContext, str, RouteEntry]] = []
    for att in attachments:
        attached.setdefault(id(att.listener), att.listener)
        placements.extend(_route_entries(route, att, resolved))
    ours = [
        route_parent_entry(route, ref, controller_name, accepted, resolved.failure)
        for ref, accepted in parents
    ]
    return RouteUnit(
        key=route.key,
        status=st.parents_status(route.status, controller_name, ours, interner=resolver.interner)
        or {"parents": []},
        placements=tuple(placements),
        attached=tuple(attached.values()),
        gateways=gateways_used,
        upstreams=table.upstreams,
        secrets=table.secrets,
        reads=resolved.reads,
        uses=resolved.uses,
    )


def place_unit(unit: RouteUnit, table: RouteTable) -> None:
    """Apply ``unit``: count it on its listeners, serve its routes there, add what it resolved."""
    for listener in unit.attached:
        listener.attached += 1
    for listener, domain, entry in unit.placements:
        listener.routes[domain].append(entry)
    table.upstreams.update(unit.upstreams)
    table.secrets.update(unit.secrets)


def attach(
    resources: Resources,
    route: HTTPRoute | GRPCRoute,
    ref: ParentReference,
    ctx: GatewayContext | None,
    gw_key: ObjectKey,
    unsupported: list[str],
    lost: Mapping[int, str] | None = None,
) -> tuple[st.Condition, list[Attachment]]:
    """The ``Accepted`` condition of ``route`` for parentRef ``ref``, and where it attaches.

    For HTTPRoutes and GRPCRoutes alike. ``unsupported``: what in the route
    weir cannot serve (not accepted). ``lost``: listeners (``id`` of their
    context) the route must not attach to, because an older route of the
    other kind shares a hostname there, and why.
    """
    gen = route.metadata.generation

    def refuse(reason: str, message: str) -> tuple[st.Condition, list[Attachment]]:
        return st.condition(st.ACCEPTED, False, reason, message, gen), []

    why_not = "weir cannot serve this route: " + "; ".join(unsupported) if unsupported else None
    allowed = allowed_listeners(resources, route, ref, ctx, gw_key, why_not)
    if isinstance(allowed, Refusal):
        return refuse(allowed.reason, allowed.message)
    attachments = []
    for lc in allowed:
        hostnames = intersect_hostnames(lc.spec.hostname, route.spec.hostnames)
        if hostnames:
            attachments.append(Attachment(lc, hostnames))
    if not attachments:
        return refuse(
            st.R_NO_MATCHING_LISTENER_HOSTNAME,
            "None of the route's hostnames matches a listener hostname: "
            + ", ".join(sorted({lc.spec.hostname or "*" for lc in allowed})),
        )
    conflicts = [lost[id(a.listener)] for a in attachments if lost and id(a.listener) in lost]
    if conflicts:
        attachments = [a for a in attachments if not lost or id(a.listener) not in lost]
        if not attachments:
            return refuse(st.R_CONFLICTED, "Not attached: " + "; ".join(conflicts))
        message = "Route is accepted, but not everywhere: " + "; ".join(conflicts)
        return st.condition(st.ACCEPTED, True, st.R_ACCEPTED, message, gen), attachments
    return st.condition(st.ACCEPTED, True, st.R_ACCEPTED, "Route is accepted", gen), attachments


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
    route: HTTPRoute | GRPCRoute | TCPRoute | TLSRoute | UDPRoute,
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


def unsupported_fields(route: HTTPRoute) -> list[str]:
    """What in ``route`` weir cannot serve (the route is then not accepted): see :mod:`.filters`."""
    found: list[str] = []
    for ri, rule in enumerate(route.spec.rules):
        found.extend(filters.rule_problems(rule, f"spec.rules[{ri}]"))
    return found


@dataclass(frozen=True, slots=True)
class _Rule:
    """One rule, resolved: what its routes do, except a redirect's listener-dependent part."""

    action: ir.RouteAction
    redirect: HTTPRequestRedirectFilter | None = None
    response_headers: ir.HeaderEdits | None = None
    cors: ir.Cors | None = None


@dataclass(frozen=True, slots=True)
class _ResolvedRules:
    rules: tuple[_Rule, ...]
    failure: RefFailure | None
    #: The Service and XBackend keys the backendRefs name; the XBackends that resolved.
    reads: frozenset[ObjectKey] = frozenset()
    uses: frozenset[ObjectKey] = frozenset()


#: A backend's identity within a rule: requests to the same upstream with the same edits merge.
_BackendKey = tuple[str | None, ir.HeaderEdits | None, ir.HeaderEdits | None]


def _resolve_rules(
    route: HTTPRoute,
    resolver: BackendResolver,
    gateways: set[ObjectKey],
    table: RouteTable,
    request_timeout_ms: int,
) -> _ResolvedRules:
    rules: list[_Rule] = []
    failure: RefFailure | None = None
    reads: set[ObjectKey] = set()
    uses: set[ObjectKey] = set()

    unusable: list[str] = []  # the current rule's backends that exist but cannot be used
    sessions: dict[str, ir.SessionAffinity | None] = {}

    def resolve(ref: BackendRef) -> tuple[str | None, bool]:
        """The upstream name (``None``: unusable) and whether it streams; records failures (and in
        ``sessions`` the session persistence a backend's policy asks, by upstream name)."""
        nonlocal failure
        target = backend_key(ref, route.namespace)
        if target is not None:
            reads.add(target)
        result = resolver.resolve(
            route_kind="HTTPRoute", route_namespace=route.namespace, ref=ref, gateways=gateways
        )
        if isinstance(result, RefFailure):
            failure = failure or result
            return None, False
        if target is not None and target.kind == "XBackend":
            uses.add(target)
        for secret in result.secrets:
            table.secrets[secret.name] = secret
        if result.upstream is None:
            unusable.append(result.unusable)
            return None, False
        table.upstreams[result.upstream.name] = result.upstream
        sessions[result.upstream.name] = result.session
        return result.upstream.name, result.streaming

    for index, rule in enumerate(route.spec.rules):
        weights: dict[_BackendKey, int] = {}
        streaming = False
        unusable.clear()
        usable = False
        for ref in rule.backend_refs:
            upstream_name, streams = resolve(ref)
            usable = usable or upstream_name is not None
            if ref.weight <= 0:
                continue
            streaming = streaming or streams
            own = filters.rule_filters(ref.filters)
            key = (upstream_name, own.request_headers, own.response_headers)
            weights[key] = weights.get(key, 0) + ref.weight
        failure = failure or no_usable_backend(index, unusable, usable, "its requests get 500")
        found = filters.rule_filters(rule.filters)
        mirrors = []
        for mirror_ref, numerator, denominator in found.mirrors:
            name, _ = resolve(BackendRef.model_validate(mirror_ref.model_dump()))
            if name is not None and numerator > 0:
                mirrors.append(ir.Mirror(name, numerator, denominator))
        if found.redirect is not None:
            # Any backendRefs are refused by validation; the listener decides the port.
            action: ir.RouteAction = ir.DirectResponse(500)
        else:
            timing = filters.rule_timing(
                rule,
                request_ms=0 if streaming else request_timeout_ms,
                idle_ms=MCP_IDLE_TIMEOUT_MS if streaming else ir.DEFAULT_IDLE_TIMEOUT_MS,
            )
            session = filters.session_affinity(
                rule.session_persistence, f"httproute/{route.namespace}/{route.name}/rule/{index}"
            ) or filters.backends_session([sessions.get(name or "") for name, _, _ in weights])
            action = _action(weights, timing, found, tuple(mirrors), session)
        rules.append(_Rule(action, found.redirect, found.response_headers, found.cors))
    named, resolved = frozenset(reads), frozenset(uses)
    # Usually the same backends (all resolved): one set, not two, for each of 10,000 routes.
    return _ResolvedRules(tuple(rules), failure, named, named if resolved == named else resolved)


def backend_key(ref: BackendRef, route_namespace: str) -> ObjectKey | None:
    """The key of the Service or XBackend ``ref`` names; ``None`` for any other kind."""
    if (ref.group, ref.kind) == ("", "Service") or (ref.group, ref.kind) == (XBACKEND_GROUP, "XBackend"):
        return ObjectKey(ref.kind, ref.namespace or route_namespace, ref.name)
    return None


def _action(
    weights: dict[_BackendKey, int],
    timing: filters.Timing,
    found: filters.RuleFilters,
    mirrors: tuple[ir.Mirror, ...],
    session: ir.SessionAffinity | None,
) -> ir.RouteAction:
    """Forward by weight; 500 when nothing is usable (no refs, all invalid, or all weight 0).

    A rule that can send requests to a streaming (MCP) backend gets, unless
    its ``timeouts.request`` says otherwise, no request timeout and
    :data:`MCP_IDLE_TIMEOUT_MS`, even if it also has other backends (see
    :func:`_resolve_rules`): a route has one set of timeouts, and cutting an
    MCP stream breaks the protocol, while the other backends only lose a
    safeguard (the idle limit still ends a response that stalls).
    """
    if not any(name is not None for name, _, _ in weights):
        return ir.DirectResponse(500)
    backends = tuple(
        ir.WeightedBackend(name, weight, request_headers=req, response_headers=resp)
        for (name, req, resp), weight in sorted(weights.items(), key=lambda kv: _backend_order(kv[0]))
    )
    return ir.Forward(
        backends,
        request_timeout_ms=timing.request_ms,
        idle_timeout_ms=timing.idle_ms,
        backend_timeout_ms=timing.backend_ms,
        retry=timing.retry,
        request_headers=found.request_headers,
        rewrite=found.rewrite,
        mirrors=mirrors,
        session=session,
    )


def _backend_order(key: _BackendKey) -> tuple[bool, str, str]:
    name, req, resp = key
    return (name is None, name or "", repr((req, resp)))


def _route_entries(
    route: HTTPRoute, att: Attachment, resolved: _ResolvedRules
) -> list[tuple[ListenerContext, str, RouteEntry]]:
    """Where ``route`` serves what on the listener of ``att``: (listener, domain, (sort key, IR route)),
    in precedence order ``key`` (see :func:`place_route`)."""
    out: list[tuple[ListenerContext, str, RouteEntry]] = []
    created = route.metadata.creation_timestamp or ""
    scheme = "https" if att.listener.protocol == "HTTPS" else "http"
    for ri, rule in enumerate(route.spec.rules):
        resolved_rule = resolved.rules[ri]
        action = resolved_rule.action
        if resolved_rule.redirect is not None:
            action = filters.redirect_action(resolved_rule.redirect, att.listener.spec.port, scheme)
        for mi, match in enumerate(rule.matches):
            ir_route = ir.Route(
                name=f"httproute/{route.namespace}/{route.name}/rule/{ri}/match/{mi}",
                match=_match(match),
                action=action,
                response_headers=resolved_rule.response_headers,
                cors=resolved_rule.cors,
            )
            key = (*_precedence(match), created, route.namespace, route.name, ri, mi)
            entry = (key, ir_route)
            out.extend((att.listener, host, entry) for host in att.hostnames)
    return out


def place_route(att: Attachment, key: SortKey, ir_route: ir.Route) -> None:
    """Serve ``ir_route`` on the listener and hostnames of ``att``, in precedence order ``key``.

    Each listener keeps its own routes: which of its hostnames it serves, and
    in what order, depends on the other listeners of its sockets
    (:mod:`weir.translate.virtualhosts`).
    """
    for host in att.hostnames:
        att.listener.routes[host].append((key, ir_route))


def _first_by_name(items: Iterable[Any], name: Any) -> list[Any]:
    """``items`` without later entries whose ``name(item)`` repeats (the Gateway API's rule)."""
    seen: dict[str, Any] = {}
    for item in items:
        seen.setdefault(name(item), item)
    return list(seen.values())


def _match(match: HTTPRouteMatch) -> ir.RouteMatch:
    """The IR of a match. Of header (case-insensitive) or query parameter conditions naming the
    same header or parameter twice, only the first counts, as the Gateway API requires."""
    value = match.path.value
    if match.path.type == "PathPrefix" and value != "/":
        value = value.rstrip("/")
    headers = tuple(
        ir.HeaderMatch(h.name.lower(), h.value, h.type)
        for h in _first_by_name(match.headers, lambda h: h.name.lower())
    )
    query = tuple(
        ir.QueryMatch(q.name, q.value, q.type) for q in _first_by_name(match.query_params, lambda q: q.name)
    )
    return ir.RouteMatch(
        ir.PathMatch(match.path.type, value),
        tuple(sorted(headers, key=lambda h: (h.name, h.kind, h.value))),
        tuple(sorted(query, key=lambda q: (q.name, q.kind, q.value))),
        match.method,
    )


#: Path match kinds in precedence order. The Gateway API leaves regular
#: expressions' place to implementations; weir puts them between exact and
#: prefix paths, as Envoy Gateway does: a regular expression is usually
#: written to carve specific paths out of a prefix, which it could not do
#: after a ``/`` prefix.
_PATH_ORDER = MappingProxyType({"Exact": 0, "RegularExpression": 1, "PathPrefix": 2})


def _precedence(match: HTTPRouteMatch) -> SortKey:
    """Gateway API order: exact path, longest prefix, method, most headers, most query params.

    Regular expressions come after exact paths and before prefixes, the
    longer expression first. Lengths count characters of the path as
    written (a prefix's trailing slash ignored).
    """
    path = match.path
    length = len(path.value.rstrip("/") or "/") if path.type == "PathPrefix" else len(path.value)
    return (
        _PATH_ORDER[path.type],
        -length,
        0 if match.method else 1,
        -len({h.name.lower() for h in match.headers}),
        -len({q.name for q in match.query_params}),
    )


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
