"""HTTPRoutes: rules to IR routes, units a patch can recompute, and route status.

Attachment to listeners (parentRefs, allowedRoutes, hostnames) is every route
kind's and lives in :mod:`weir.translate.attachment`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from weir import ir
from weir.api.gateway_v1 import (
    BackendRef,
    HTTPRequestRedirectFilter,
    HTTPRoute,
    HTTPRouteMatch,
)
from weir.api.meta import ObjectKey
from weir.api.xbackend_v1alpha1 import GROUP as XBACKEND_GROUP
from weir.resources import Resources
from weir.translate import filters
from weir.translate import status as st
from weir.translate.attachment import (
    NONE_ATTACHED,
    Attachment,
    RouteParent,
    RouteTable,
    route_parent_entry,
    route_parents,
    route_status,
    unservable,
)
from weir.translate.attachment import parent_index as parent_index  # incremental imports it from here
from weir.translate.backends import BackendResolver, RefFailure, no_usable_backend
from weir.translate.gateways import GatewayContext, ListenerContext, RouteEntry

#: The idle limit of routes to MCP backends, which have no request timeout.
#: Streamable HTTP keeps a response open as long as a tool runs (POST) or a
#: session listens for server messages (GET), possibly silent all along:
#: Envoy's default of 5 minutes would cut quiet tool calls, no limit at all
#: would keep the streams of vanished peers forever. An hour is generous
#: and still bounded; an MCP client reopens a GET stream that was closed.
MCP_IDLE_TIMEOUT_MS = 3_600_000

#: Sorts routes within a virtual host by Gateway API precedence; smaller first.
SortKey = tuple[Any, ...]


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
    attached: Mapping[ObjectKey, list[RouteParent]] = NONE_ATTACHED,
) -> list[RouteUnit]:
    """The :class:`RouteUnit` of every HTTPRoute, in order (see :func:`http_route_unit`); ``attached``:
    routes already attached (:func:`weir.translate.users.xbackend_users`), by key."""
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
            parents=attached.get(route.key),
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
    parents: list[RouteParent] | None = None,
) -> RouteUnit:
    """Attach ``route`` to the listeners of ``by_key`` (weir's Gateways), resolve its backends.

    Only parentRefs to weir's Gateways and ListenerSets (or to ones that do not
    exist: ``existing``, see :func:`parent_index`) get a status entry; entries of other
    controllers are kept as they are. ``request_timeout_ms`` is the request
    timeout of rules without an MCP backend (see :func:`_action`). ``lost``:
    the listeners (``id`` of their context) the route lost to an older
    GRPCRoute, and why (see :func:`weir.translate.grpcroutes.kind_conflicts`).
    """
    if parents is None:  # not attached already
        parents = route_parents(resources, route, by_key, existing, HTTP_KIND, lost)
    if not parents:
        return RouteUnit(route.key, route_status(route, controller_name, [], resolver.interner))
    attachments = [a for parent in parents for a in parent.attachments]
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
    ours = [route_parent_entry(route, p.ref, controller_name, p.accepted, resolved.failure) for p in parents]
    return RouteUnit(
        key=route.key,
        status=route_status(route, controller_name, ours, resolver.interner),
        placements=tuple(placements),
        attached=tuple(attached.values()),
        gateways=gateways_used,
        upstreams=table.upstreams,
        secrets=table.secrets,
        reads=resolved.reads,
        uses=resolved.uses,
    )


def resolved_refs(route: HTTPRoute) -> Iterator[BackendRef]:
    """Every reference :func:`_resolve_rules` resolves: each rule's backendRefs, then its mirrors'."""
    for rule in route.spec.rules:
        yield from rule.backend_refs
        if not any(f.request_mirror is not None for f in rule.filters):  # most rules: skip parsing
            continue
        for mirror_ref, _, _ in filters.rule_filters(rule.filters).mirrors:
            yield BackendRef.model_validate(mirror_ref.model_dump())


def place_unit(unit: RouteUnit, table: RouteTable) -> None:
    """Apply ``unit``: count it on its listeners, serve its routes there, add what it resolved."""
    for listener in unit.attached:
        listener.attached += 1
    for listener, domain, entry in unit.placements:
        listener.routes[domain].append(entry)
    table.upstreams.update(unit.upstreams)
    table.secrets.update(unit.secrets)


class HttpRouteKind:
    """HTTPRoute's side of :class:`~weir.translate.attachment.RouteKind`."""

    by_hostname = True

    def unsupported(self, route: HTTPRoute) -> str | None:
        return unservable(unsupported_fields(route))


HTTP_KIND = HttpRouteKind()


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
    refused: set[str] = set()  # upstreams the egress policy refuses (see Resolved.refused)

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
        if result.refused and result.upstream is not None:
            refused.add(result.upstream.name)
            sessions[result.upstream.name] = result.session
            return result.upstream.name, result.streaming
        for secret in result.secrets:
            table.secrets[secret.name] = secret
        if result.upstream is None:
            unusable.append(result.unusable)
            return None, False
        table.upstreams[result.upstream.name] = result.upstream
        if result.token_upstream is not None:  # served with it, though no route names it
            table.upstreams[result.token_upstream.name] = result.token_upstream
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
            if (
                name is not None and numerator > 0 and name not in refused
            ):  # a mirror's failure is not the client's
                mirrors.append(ir.Mirror(name, numerator, denominator))
        mixed = _mixed_oauth2(index, [name for name, _, _ in weights] + [m.upstream for m in mirrors], table)
        failure = failure or mixed
        if found.redirect is not None or mixed is not None:
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
            action = _action(failed_shares(weights, refused), timing, found, tuple(mirrors), session)
        rules.append(_Rule(action, found.redirect, found.response_headers, found.cors))
    named, resolved = frozenset(reads), frozenset(uses)
    # Usually the same backends (all resolved): one set, not two, for each of 10,000 routes.
    return _ResolvedRules(tuple(rules), failure, named, named if resolved == named else resolved)


def _mixed_oauth2(index: int, names: list[str | None], table: RouteTable) -> RefFailure | None:
    """The failure of rule ``index`` when its backends (and mirrors) do not all share one OAuth2
    credential, or ``None``.

    Envoy fetches and adds an OAuth2 token in the connection manager, before
    the split chooses a backend (its token injector crashes Envoy 1.40 as a
    cluster filter), so one token goes to every backend of the rule and to
    its mirrors: a backend without that policy would receive another's
    token. Such a rule is answered 500 instead.
    """
    found = {table.upstreams[n].oauth2 for n in names if n is not None and n in table.upstreams}
    if len(found) < 2:
        return None
    return RefFailure(
        st.R_BACKEND_NOT_FOUND,
        f"spec.rules[{index}] sends to backends (or mirrors) with different OAuth2 "
        "BackendCredentialPolicies, "
        "or with and without one: the gateway adds one token per request before choosing the backend, and "
        "would give one backend's token to another; its requests get 500. Give each such backend a rule of "
        "its own",
    )


def backend_key(ref: BackendRef, route_namespace: str) -> ObjectKey | None:
    """The key of the Service or XBackend ``ref`` names; ``None`` for any other kind."""
    if (ref.group, ref.kind) == ("", "Service") or (ref.group, ref.kind) == (XBACKEND_GROUP, "XBackend"):
        return ObjectKey(ref.kind, ref.namespace or route_namespace, ref.name)
    return None


def failed_shares(weights: dict[_BackendKey, int], refused: AbstractSet[str]) -> dict[_BackendKey, int]:
    """``weights`` with the backends in ``refused`` (by the egress policy) turned into failed shares
    (``None``: the rule's unresolved status answers them), merged with those of the same edits."""
    if not refused or not any(name in refused for name, _, _ in weights):
        return weights
    out: dict[_BackendKey, int] = {}
    for (name, req, resp), weight in weights.items():
        key = (None if name in refused else name, req, resp)
        out[key] = out.get(key, 0) + weight
    return out


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
