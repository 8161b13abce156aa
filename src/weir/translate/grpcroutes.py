"""GRPCRoutes: gRPC calls routed by service, method and metadata to HTTP/2 backends.

A gRPC call is an HTTP/2 ``POST`` to ``/<service>/<method>``, its metadata
HTTP/2 headers. GRPCRoutes therefore become the same IR routes as HTTPRoutes,
on the same listeners (HTTP and HTTPS), attached by the same rules
(:mod:`weir.translate.attachment`: ``parentRefs``, ``allowedRoutes``,
hostname intersection):

- ``method`` ``Exact`` with service and method: the exact path
  ``/<service>/<method>``; with the service only: the path prefix
  ``/<service>`` (whole segments); with the method only: the regular
  expression ``/[^/]+/<method>``. ``RegularExpression``: the path must match
  ``/(?:<service>)/(?:<method>)`` (RE2), an absent part matching any name.
  No match at all: every call.
- ``headers``: ``Exact`` or ``RegularExpression`` header conditions; of two
  naming the same header (case-insensitive), only the first counts.
- Filters: ``RequestHeaderModifier``, ``ResponseHeaderModifier`` (per rule
  and per backend), ``RequestMirror`` (per rule), through the code that
  serves HTTPRoutes' (their schemas are the same). ``ExtensionRef`` and
  ``sessionPersistence`` are not supported: the route is not accepted.
- Backends: by weight. Services are always spoken to in HTTP/2, which gRPC
  needs (the Gateway API lets an implementation infer the protocol from the
  route kind); XBackends must speak HTTP/2 (see
  :meth:`weir.translate.backends.BackendResolver.resolve`). The share of
  calls for a backend that failed to resolve, and every call of a rule
  without a usable backend, is answered ``UNAVAILABLE`` (HTTP 503, which
  Envoy turns into a gRPC status for gRPC requests), as the Gateway API
  requires. A call that matches no rule gets ``UNIMPLEMENTED`` (Envoy's 404).
- Timeouts: none per call (gRPC calls carry their own deadline, which the
  client enforces, and streaming calls last as long as they need), and the
  idle limit of long-lived exchanges, :data:`weir.translate.routes.MCP_IDLE_TIMEOUT_MS`.

Precedence within a hostname follows the GRPCRoute specification: the most
characters of service, then of method, then the most header conditions,
then the oldest route (creation time, then namespace/name), then rule and
match order.

An HTTPRoute and a GRPCRoute attached to the same listener with hostnames in
common (:func:`kind_conflicts`): the Gateway API says exactly one of them is
accepted there, the oldest (creation time, then namespace/name); the other's
parent entry is ``Accepted=False``, reason ``Conflicted``, and it serves
nothing on that listener.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from weir import ir
from weir.api.gateway_v1 import (
    BackendRef,
    HTTPBackendRef,
    HTTPRoute,
    HTTPRouteFilter,
    HTTPRouteRule,
)
from weir.api.gateway_v1_grpcroute import GRPCRoute, GRPCRouteFilter, GRPCRouteMatch, GRPCRouteRule
from weir.api.meta import ObjectKey
from weir.resources import Resources
from weir.translate import filters
from weir.translate.attachment import (
    NONE_ATTACHED,
    Attachment,
    RouteParent,
    RouteTable,
    attach,
    count_attached,
    intersect_hostnames,
    parent_index,
    parent_refs,
    route_parent_entry,
    route_parents,
    route_precedence,
    route_status,
    unservable,
)
from weir.translate.backends import BackendResolver, RefFailure, no_usable_backend
from weir.translate.gateways import GatewayContext
from weir.translate.routes import MCP_IDLE_TIMEOUT_MS, SortKey, failed_shares, place_route, unsupported_fields

KIND = "GRPCRoute"

#: What a gRPC client reads as ``UNAVAILABLE``: the answer for calls whose backend failed to resolve.
UNAVAILABLE: Final[Literal[503]] = 503

#: The first element of a gRPC route's precedence key. HTTP routes' keys start with smaller
#: numbers, so the two kinds compare without error should they ever share a hostname (which
#: :func:`kind_conflicts` prevents), HTTP routes first.
_KIND_ORDER = 3

#: Any one gRPC service or method name, as a part of a path.
_ANY_NAME = "[^/]+"


# ------------------------------------------------------------------ conflicts with HTTPRoutes


@dataclass
class KindConflicts:
    """Listeners where a route lost to an older route of the other kind sharing a hostname.

    ``lost``: route key → ``id`` of the listener context → why (for the route's status).
    ``grpc_claims``: ``id`` of the listener context → the hostnames of each GRPCRoute that would
    attach there, won or lost (what an edited HTTPRoute may not share, see :func:`meets_grpc_routes`).
    """

    lost: dict[ObjectKey, dict[int, str]] = field(default_factory=dict)
    grpc_claims: dict[int, list[tuple[str, ...]]] = field(default_factory=dict)

    def of(self, route: ObjectKey) -> Mapping[int, str]:
        return self.lost.get(route, {})


def kind_conflicts(resources: Resources, gateways: list[GatewayContext]) -> KindConflicts:
    """Which HTTPRoutes and GRPCRoutes must not attach where, because of a route of the other kind.

    Computed before either kind is translated, from where each route would
    attach (the same rules translation applies), so that neither kind needs
    the other's result. Oldest first, each route attaches to a listener
    unless a route of the other kind already attached there shares a
    hostname with it: a route that lost a listener takes nothing from
    younger routes there.
    """
    if not resources.grpc_routes or not resources.http_routes:
        return KindConflicts()
    by_key, existing = parent_index(resources, gateways)
    claims: dict[int, list[tuple[HTTPRoute | GRPCRoute, Attachment]]] = defaultdict(list)
    routes: list[HTTPRoute | GRPCRoute] = [*resources.http_routes, *resources.grpc_routes]
    for route in routes:
        unsupported = unsupported_fields(route) if isinstance(route, HTTPRoute) else _problems(route)
        if unsupported:
            continue
        for ref, ctx, gw_key in parent_refs(route, by_key, existing):
            _, found = attach(resources, route, ref, ctx, gw_key, None)
            for att in found:
                claims[id(att.listener)].append((route, att))
    out = KindConflicts()
    for listener, entries in claims.items():
        # Per kind: a route is compared with the other kind's only (10,000 HTTPRoutes on a listener
        # with one GRPCRoute: 10,000 comparisons, not 50 million).
        kept: dict[str, list[tuple[HTTPRoute | GRPCRoute, Attachment]]] = {HTTPRoute.KIND: [], KIND: []}
        grpc = [att.hostnames for route, att in entries if route.KIND == KIND]
        if grpc:
            out.grpc_claims[listener] = grpc
        for route, att in sorted(entries, key=lambda e: _age(e[0])):
            others = kept[KIND if route.KIND == HTTPRoute.KIND else HTTPRoute.KIND]
            winner = next(
                (other for other, other_att in others if _overlap(att.hostnames, other_att.hostnames)),
                None,
            )
            if winner is None:
                kept[route.KIND].append((route, att))
                continue
            lc = att.listener
            out.lost.setdefault(route.key, {})[listener] = (
                f"the older {winner.KIND} {winner.namespace}/{winner.name} serves hostnames in common on "
                f"listener {lc.name} of Gateway {lc.gateway.namespace}/{lc.gateway.name}; an HTTPRoute and "
                "a GRPCRoute cannot share a hostname on a listener: give them different hostnames"
            )
    return out


def meets_grpc_routes(
    resources: Resources,
    route: HTTPRoute,
    by_key: Mapping[ObjectKey, GatewayContext],
    existing: AbstractSet[ObjectKey],
    conflicts: KindConflicts,
) -> bool:
    """Whether ``route`` would attach to a listener where a GRPCRoute (``conflicts.grpc_claims``)
    claims a hostname it shares: then editing it can change which routes of either kind lose
    there, and only :func:`kind_conflicts` over all routes can tell."""
    if not conflicts.grpc_claims or unsupported_fields(route):
        return False
    for ref, ctx, gw_key in parent_refs(route, by_key, existing):
        _, found = attach(resources, route, ref, ctx, gw_key, None)
        for att in found:
            claims = conflicts.grpc_claims.get(id(att.listener), ())
            if any(_overlap(att.hostnames, hostnames) for hostnames in claims):
                return True
    return False


def _overlap(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    if "*" in a or "*" in b:
        return True
    return any(intersect_hostnames(host, b) for host in a)


def _age(route: HTTPRoute | GRPCRoute) -> tuple[str, str, str]:
    return route_precedence(route)


# ------------------------------------------------------------------ translation


def translate_grpc_routes(
    resources: Resources,
    gateways: list[GatewayContext],
    resolver: BackendResolver,
    controller_name: str,
    table: RouteTable,
    conflicts: KindConflicts,
    attached: Mapping[ObjectKey, list[RouteParent]] = NONE_ATTACHED,
) -> dict[ObjectKey, dict[str, Any]]:
    """Attach every GRPCRoute (unless ``attached`` already: see
    :func:`weir.translate.users.xbackend_users`), fill ``table``, and return the routes' statuses.

    As for HTTPRoutes: ``attachedRoutes`` counts the routes attached to each
    listener; only parentRefs to weir's Gateways (or to Gateways that do not
    exist) get a status entry, other controllers' entries are kept.
    """
    by_key, existing = parent_index(resources, gateways)
    statuses: dict[ObjectKey, dict[str, Any]] = {}
    for route in resources.grpc_routes:
        parents = attached.get(route.key)
        if parents is None:
            parents = route_parents(resources, route, by_key, existing, GRPC_KIND, conflicts.of(route.key))
        attachments = [a for parent in parents for a in parent.attachments]
        if not parents:
            stale = route_status(route, controller_name, [], resolver.interner)
            if stale is not None:
                statuses[route.key] = stale
            continue
        gateways_used = {a.listener.gateway.key for a in attachments}
        rules, failure = _resolve_rules(route, resolver, gateways_used, table)
        count_attached(parents)
        for att in attachments:
            _add_routes(route, att, rules)
        ours = [route_parent_entry(route, p.ref, controller_name, p.accepted, failure) for p in parents]
        statuses[route.key] = route_status(route, controller_name, ours, resolver.interner) or {"parents": []}
    return statuses


def resolved_refs(route: GRPCRoute) -> Iterator[BackendRef]:
    """Every reference :func:`_resolve_rules` resolves: each rule's backendRefs, then its mirrors'."""
    for rule in route.spec.rules:
        http_rule = _as_http_rule(rule)
        yield from http_rule.backend_refs
        if not any(f.request_mirror is not None for f in http_rule.filters):  # most rules: skip parsing
            continue
        for mirror_ref, _, _ in filters.rule_filters(http_rule.filters).mirrors:
            yield BackendRef.model_validate(mirror_ref.model_dump())


def _as_http_rule(rule: GRPCRouteRule) -> HTTPRouteRule:
    """The rule's filters and backendRefs as an HTTPRoute rule's.

    GRPCRoute's filters are a subset of HTTPRoute's, with the same schemas:
    checking and translating them is the same code (:mod:`weir.translate.filters`).
    """
    return HTTPRouteRule(
        filters=_http_filters(rule.filters),
        backend_refs=tuple(
            HTTPBackendRef(
                group=ref.group,
                kind=ref.kind,
                name=ref.name,
                namespace=ref.namespace,
                port=ref.port,
                weight=ref.weight,
                filters=_http_filters(ref.filters),
            )
            for ref in rule.backend_refs
        ),
        session_persistence=rule.session_persistence,
    )


def _http_filters(grpc_filters: tuple[GRPCRouteFilter, ...]) -> tuple[HTTPRouteFilter, ...]:
    return tuple(
        HTTPRouteFilter(
            type=f.type,
            request_header_modifier=f.request_header_modifier,
            response_header_modifier=f.response_header_modifier,
            request_mirror=f.request_mirror,
            extension_ref=f.extension_ref,
        )
        for f in grpc_filters
    )


class GrpcRouteKind:
    """GRPCRoute's side of :class:`~weir.translate.attachment.RouteKind`."""

    by_hostname = True

    def unsupported(self, route: GRPCRoute) -> str | None:
        return unservable(_problems(route))


GRPC_KIND = GrpcRouteKind()


def _problems(route: GRPCRoute) -> list[str]:
    """What in ``route`` weir cannot serve (the route is then not accepted, ``UnsupportedValue``)."""
    found: list[str] = []
    for ri, rule in enumerate(route.spec.rules):
        where = f"spec.rules[{ri}]"
        found.extend(filters.rule_problems(_as_http_rule(rule), where))
        for mi, match in enumerate(rule.matches):
            at = f"{where}.matches[{mi}]"
            if match.method is not None and match.method.type == "RegularExpression":
                problem = filters.regex_problem(_path(match).value)
                if problem:
                    found.append(f"{at}.method: {problem}")
            for hi, header in enumerate(match.headers):
                if header.type == "RegularExpression":
                    problem = filters.regex_problem(header.value)
                    if problem:
                        found.append(f"{at}.headers[{hi}]: {problem}")
    return found


@dataclass(frozen=True)
class _Rule:
    action: ir.RouteAction
    response_headers: ir.HeaderEdits | None


_BackendKey = tuple[str | None, ir.HeaderEdits | None, ir.HeaderEdits | None]


def _resolve_rules(
    route: GRPCRoute, resolver: BackendResolver, gateways: set[ObjectKey], table: RouteTable
) -> tuple[list[_Rule], RefFailure | None]:
    """Each rule's action, and the first backend reference that failed (for ``ResolvedRefs``)."""
    failure: RefFailure | None = None
    unusable: list[str] = []  # the current rule's backends that exist but cannot be used

    sessions: dict[str, ir.SessionAffinity | None] = {}
    refused: set[str] = set()  # upstreams the egress policy refuses (see Resolved.refused)

    def resolve(ref: BackendRef) -> str | None:
        nonlocal failure
        result = resolver.resolve(
            route_kind=KIND, route_namespace=route.namespace, ref=ref, gateways=gateways
        )
        if isinstance(result, RefFailure):
            failure = failure or result
            return None
        if result.refused and result.upstream is not None:
            refused.add(result.upstream.name)
            sessions[result.upstream.name] = result.session
            return result.upstream.name
        for secret in result.secrets:
            table.secrets[secret.name] = secret
        if result.upstream is None:
            unusable.append(result.unusable)
            return None
        table.upstreams[result.upstream.name] = result.upstream
        if result.token_upstream is not None:  # served with it, though no route names it
            table.upstreams[result.token_upstream.name] = result.token_upstream
        sessions[result.upstream.name] = result.session
        return result.upstream.name

    rules: list[_Rule] = []
    for index, rule in enumerate(route.spec.rules):
        http_rule = _as_http_rule(rule)
        weights: dict[_BackendKey, int] = {}
        unusable.clear()
        usable = False
        for ref in http_rule.backend_refs:
            name = resolve(ref)
            usable = usable or name is not None
            if ref.weight <= 0:
                continue
            own = filters.rule_filters(ref.filters)
            key = (name, own.request_headers, own.response_headers)
            weights[key] = weights.get(key, 0) + ref.weight
        failure = failure or no_usable_backend(index, unusable, usable, "its calls fail (UNAVAILABLE)")
        found = filters.rule_filters(http_rule.filters)
        mirrors = []
        for mirror_ref, numerator, denominator in found.mirrors:
            name = resolve(BackendRef.model_validate(mirror_ref.model_dump()))
            if (
                name is not None and numerator > 0 and name not in refused
            ):  # a mirror's failure is not the client's
                mirrors.append(ir.Mirror(name, numerator, denominator))
        session = filters.session_affinity(
            rule.session_persistence, f"grpcroute/{route.namespace}/{route.name}/rule/{index}"
        ) or filters.backends_session([sessions.get(name or "") for name, _, _ in weights])
        weights = failed_shares(weights, refused)
        action: ir.RouteAction
        if not any(name is not None for name, _, _ in weights):
            action = ir.DirectResponse(UNAVAILABLE)
        else:
            backends = tuple(
                ir.WeightedBackend(name, weight, request_headers=req, response_headers=resp)
                for (name, req, resp), weight in sorted(weights.items(), key=lambda kv: _backend_order(kv[0]))
            )
            action = ir.Forward(
                backends,
                request_timeout_ms=0,
                idle_timeout_ms=MCP_IDLE_TIMEOUT_MS,
                request_headers=found.request_headers,
                mirrors=tuple(mirrors),
                unresolved_status=UNAVAILABLE,
                session=session,
            )
        rules.append(_Rule(action, found.response_headers))
    return rules, failure


def _backend_order(key: _BackendKey) -> tuple[bool, str, str]:
    name, req, resp = key
    return (name is None, name or "", repr((req, resp)))


def _add_routes(route: GRPCRoute, att: Attachment, rules: list[_Rule]) -> None:
    created = route.metadata.creation_timestamp or ""
    for ri, rule in enumerate(route.spec.rules):
        matches: tuple[GRPCRouteMatch | None, ...] = rule.matches or (None,)
        for mi, match in enumerate(matches):
            ir_route = ir.Route(
                name=f"grpcroute/{route.namespace}/{route.name}/rule/{ri}/match/{mi}",
                match=_match(match),
                action=rules[ri].action,
                response_headers=rules[ri].response_headers,
            )
            key = (*_precedence(match), created, route.namespace, route.name, ri, mi)
            place_route(att, key, ir_route)


def _match(match: GRPCRouteMatch | None) -> ir.RouteMatch:
    if match is None:
        return ir.RouteMatch(ir.PathMatch("PathPrefix", "/"))
    first: dict[str, ir.HeaderMatch] = {}
    for h in match.headers:
        first.setdefault(h.name.lower(), ir.HeaderMatch(h.name.lower(), h.value, h.type))
    headers = tuple(sorted(first.values(), key=lambda h: (h.name, h.kind, h.value)))
    return ir.RouteMatch(_path(match), headers)


def _path(match: GRPCRouteMatch) -> ir.PathMatch:
    """The request path condition that ``match.method`` means (see the module doc)."""
    method = match.method
    if method is None:
        return ir.PathMatch("PathPrefix", "/")
    if method.type == "RegularExpression":
        service = method.service or _ANY_NAME
        name = method.method or _ANY_NAME
        return ir.PathMatch("RegularExpression", f"/(?:{service})/(?:{name})")
    if method.service and method.method:
        return ir.PathMatch("Exact", f"/{method.service}/{method.method}")
    if method.service:
        return ir.PathMatch("PathPrefix", f"/{method.service}")
    return ir.PathMatch("RegularExpression", f"/{_ANY_NAME}/{re.escape(method.method or '')}")


def _precedence(match: GRPCRouteMatch | None) -> SortKey:
    """GRPCRoute order: most characters of service, then of method, then most header conditions."""
    if match is None:
        return (_KIND_ORDER, 0, 0, 0, 0)
    service = len(match.method.service or "") if match.method else 0
    method = len(match.method.method or "") if match.method else 0
    headers = len({h.name.lower() for h in match.headers})
    return (_KIND_ORDER, -service, -method, -headers, 0)
