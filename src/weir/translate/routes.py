"""HTTPRoutes: attachment to Gateway listeners, hostnames, rules to IR routes, and route status."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from weir import ir
from weir.api.gateway_v1 import GROUP, HTTPRoute, HTTPRouteMatch, ParentReference
from weir.api.meta import ObjectKey
from weir.resources import Resources
from weir.translate import status as st
from weir.translate.backends import BackendResolver, RefFailure
from weir.translate.gateways import GatewayContext, ListenerContext

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


@dataclass
class RouteTable:
    """What routes contribute to the data plane, before it is shaped into IR listeners."""

    #: socket -> domain -> [(precedence, route)]
    entries: dict[Socket, dict[str, list[tuple[SortKey, ir.Route]]]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(list))
    )
    upstreams: dict[str, ir.Upstream] = field(default_factory=dict)
    secrets: dict[str, ir.Secret] = field(default_factory=dict)
    #: socket of a TCP listener -> the backends of the TCPRoute it forwards to
    tcp: dict[Socket, tuple[ir.WeightedBackend, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class _Attachment:
    listener: ListenerContext
    hostnames: tuple[str, ...]


def translate_http_routes(
    resources: Resources,
    gateways: list[GatewayContext],
    resolver: BackendResolver,
    controller_name: str,
    table: RouteTable,
    *,
    request_timeout_ms: int = ir.DEFAULT_REQUEST_TIMEOUT_MS,
) -> dict[ObjectKey, dict[str, Any]]:
    """Attach every HTTPRoute, fill ``table``, and return the routes' statuses.

    Increments ``attachedRoutes`` on the listeners routes attach to. Only
    parentRefs to weir's Gateways (or to Gateways that do not exist) get a
    status entry; entries of other controllers are kept as they are.
    ``request_timeout_ms`` is the request timeout of rules without an MCP
    backend (see :func:`_action`).
    """
    by_key = {ctx.gateway.key: ctx for ctx in gateways}
    existing = {gw.key for gw in resources.gateways}
    statuses: dict[ObjectKey, dict[str, Any]] = {}
    for route in resources.http_routes:
        parents: list[tuple[ParentReference, st.Condition]] = []
        attachments: list[_Attachment] = []
        gen = route.metadata.generation
        unsupported = _unsupported(route)
        for ref in route.spec.parent_refs:
            if ref.group != GROUP or ref.kind != "Gateway":
                continue
            gw_key = ObjectKey("Gateway", ref.namespace or route.namespace, ref.name)
            ctx = by_key.get(gw_key)
            if ctx is None and gw_key in existing:
                continue  # another controller's Gateway
            accepted, found = _attach(resources, route, ref, ctx, gw_key, unsupported)
            attachments.extend(found)
            parents.append((ref, accepted))
        if not parents:
            stale = st.parents_status(route.status, controller_name, [])
            if stale is not None:  # weir's entries for Gateways the route no longer names
                statuses[route.key] = stale
            continue
        gateways_used = {a.listener.gateway.key for a in attachments}
        resolved = _resolve_rules(route, resolver, gateways_used, table, request_timeout_ms)
        seen: set[int] = set()
        for att in attachments:
            if id(att.listener) not in seen:
                seen.add(id(att.listener))
                att.listener.attached += 1
            _add_routes(route, att, resolved, table)
        refs = (
            (False, resolved.failure.reason, resolved.failure.message)
            if resolved.failure
            else (True, st.R_RESOLVED_REFS, "All references resolved")
        )
        ours = [
            {
                "parentRef": parent_ref_data(ref, route.namespace),
                "controllerName": controller_name,
                "conditions": [accepted, st.condition(st.RESOLVED_REFS, refs[0], refs[1], refs[2], gen)],
            }
            for ref, accepted in parents
        ]
        statuses[route.key] = st.parents_status(route.status, controller_name, ours) or {"parents": []}
    return statuses


def _attach(
    resources: Resources,
    route: HTTPRoute,
    ref: ParentReference,
    ctx: GatewayContext | None,
    gw_key: ObjectKey,
    unsupported: list[str],
) -> tuple[st.Condition, list[_Attachment]]:
    gen = route.metadata.generation

    def refuse(reason: str, message: str) -> tuple[st.Condition, list[_Attachment]]:
        return st.condition(st.ACCEPTED, False, reason, message, gen), []

    if ctx is None:
        return refuse(st.R_NO_MATCHING_PARENT, f"Gateway {gw_key.namespace}/{gw_key.name} does not exist")
    if not ctx.addresses:
        return refuse(st.R_NO_MATCHING_PARENT, f"Gateway {gw_key.namespace}/{gw_key.name} is not accepted")
    if unsupported:
        return refuse(st.R_UNSUPPORTED_VALUE, "weir does not support yet: " + "; ".join(unsupported))
    candidates = parent_listeners(ctx, ref)
    if not candidates:
        return refuse(st.R_NO_MATCHING_PARENT, no_listener_message(gw_key, ref))
    allowed = [
        lc for lc in candidates if lc.valid and listener_allows(resources, lc, "HTTPRoute", route.namespace)
    ]
    if not allowed:
        return refuse(
            st.R_NOT_ALLOWED_BY_LISTENERS,
            not_allowed_message("HTTPRoute", route.namespace, candidates, gw_key),
        )
    attachments = []
    for lc in allowed:
        hostnames = intersect_hostnames(lc.spec.hostname, route.spec.hostnames)
        if hostnames:
            attachments.append(_Attachment(lc, hostnames))
    if not attachments:
        return refuse(
            st.R_NO_MATCHING_LISTENER_HOSTNAME,
            "None of the route's hostnames matches a listener hostname: "
            + ", ".join(sorted({lc.spec.hostname or "*" for lc in allowed})),
        )
    return st.condition(st.ACCEPTED, True, st.R_ACCEPTED, "Route is accepted", gen), attachments


def parent_listeners(ctx: GatewayContext, ref: ParentReference) -> list[ListenerContext]:
    """The listeners of ``ctx`` that ``ref`` selects by ``sectionName`` and ``port`` (all when unset)."""
    return [
        lc
        for lc in ctx.listeners
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
    return f"Gateway {gw_key.namespace}/{gw_key.name} has no listener with {wanted}"


def not_allowed_message(
    kind: str, namespace: str, candidates: list[ListenerContext], gw_key: ObjectKey
) -> str:
    """Why none of ``candidates`` takes a route of ``kind`` from ``namespace`` (``NotAllowedByListeners``)."""
    gateway = f"Gateway {gw_key.namespace}/{gw_key.name}"
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
    if namespaces.from_ == "Same":
        return namespace == lc.gateway.namespace
    # Selector: matched against the labels of the route's Namespace object. Like the API
    # server, every namespace carries kubernetes.io/metadata.name, declared or not.
    ns = resources.namespace(namespace)
    labels = {**(ns.metadata.labels if ns else {}), "kubernetes.io/metadata.name": namespace}
    return _selects(namespaces.selector, labels)


def _selects(selector: Any, labels: dict[str, str]) -> bool:
    if selector is None:
        return False
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


def _unsupported(route: HTTPRoute) -> list[str]:
    """Fields set on ``route`` that weir does not implement yet (the route is not accepted)."""
    found: list[str] = []
    for ri, rule in enumerate(route.spec.rules):
        where = f"spec.rules[{ri}]"
        if rule.filters:
            found.append(f"{where}.filters")
        if rule.timeouts is not None:
            found.append(f"{where}.timeouts")
        if rule.retry is not None:
            found.append(f"{where}.retry")
        if rule.session_persistence is not None:
            found.append(f"{where}.sessionPersistence")
        for bi, backend in enumerate(rule.backend_refs):
            if backend.filters:
                found.append(f"{where}.backendRefs[{bi}].filters")
        for mi, match in enumerate(rule.matches):
            m = f"{where}.matches[{mi}]"
            if match.path.type == "RegularExpression":
                found.append(f"{m}.path.type RegularExpression")
            if match.query_params:
                found.append(f"{m}.queryParams")
            if match.method is not None:
                found.append(f"{m}.method")
            for hi, header in enumerate(match.headers):
                if header.type != "Exact":
                    found.append(f"{m}.headers[{hi}].type {header.type}")
    return found


@dataclass(frozen=True)
class _ResolvedRules:
    actions: tuple[ir.RouteAction, ...]  # one per rule
    failure: RefFailure | None


def _resolve_rules(
    route: HTTPRoute,
    resolver: BackendResolver,
    gateways: set[ObjectKey],
    table: RouteTable,
    request_timeout_ms: int,
) -> _ResolvedRules:
    actions: list[ir.RouteAction] = []
    failure: RefFailure | None = None
    for rule in route.spec.rules:
        weights: dict[str | None, int] = {}
        streaming = False
        for ref in rule.backend_refs:
            result = resolver.resolve(
                route_kind="HTTPRoute", route_namespace=route.namespace, ref=ref, gateways=gateways
            )
            if isinstance(result, RefFailure):
                failure = failure or result
                upstream_name = None
            else:
                upstream_name = None
                if result.upstream is not None:
                    upstream_name = result.upstream.name
                    table.upstreams[upstream_name] = result.upstream
                for secret in result.secrets:
                    table.secrets[secret.name] = secret
                if ref.weight > 0 and upstream_name is not None:
                    streaming = streaming or result.streaming
            if ref.weight > 0:
                weights[upstream_name] = weights.get(upstream_name, 0) + ref.weight
        actions.append(_action(weights, streaming=streaming, request_timeout_ms=request_timeout_ms))
    return _ResolvedRules(tuple(actions), failure)


def _action(weights: dict[str | None, int], *, streaming: bool, request_timeout_ms: int) -> ir.RouteAction:
    """Forward by weight; 500 when nothing is usable (no refs, all invalid, or all weight 0).

    A rule that can send requests to a streaming (MCP) backend gets no request
    timeout and :data:`MCP_IDLE_TIMEOUT_MS`, even if it also has other
    backends: a route has one set of timeouts, and cutting an MCP stream
    breaks the protocol, while the other backends only lose a safeguard (the
    idle limit still ends a response that stalls).
    """
    if not any(name is not None for name in weights):
        return ir.DirectResponse(500)
    backends = tuple(
        ir.WeightedBackend(name, weight)
        for name, weight in sorted(weights.items(), key=lambda kv: (kv[0] is None, kv[0] or ""))
    )
    if streaming:
        return ir.Forward(backends, request_timeout_ms=0, idle_timeout_ms=MCP_IDLE_TIMEOUT_MS)
    return ir.Forward(backends, request_timeout_ms=request_timeout_ms)


def _add_routes(route: HTTPRoute, att: _Attachment, resolved: _ResolvedRules, table: RouteTable) -> None:
    created = route.metadata.creation_timestamp or ""
    for ri, rule in enumerate(route.spec.rules):
        for mi, match in enumerate(rule.matches):
            ir_route = ir.Route(
                name=f"httproute/{route.namespace}/{route.name}/rule/{ri}/match/{mi}",
                match=_match(match),
                action=resolved.actions[ri],
            )
            key = (*_precedence(match), created, route.namespace, route.name, ri, mi)
            for socket in att.listener.sockets:
                for host in att.hostnames:
                    table.entries[socket][host].append((key, ir_route))


def _match(match: HTTPRouteMatch) -> ir.RouteMatch:
    value = match.path.value
    if match.path.type == "PathPrefix" and value != "/":
        value = value.rstrip("/")
    kind: Literal["Exact", "PathPrefix"] = "Exact" if match.path.type == "Exact" else "PathPrefix"
    headers = tuple(ir.HeaderMatch(h.name.lower(), h.value) for h in match.headers)
    return ir.RouteMatch(
        ir.PathMatch(kind, value), tuple(sorted(set(headers), key=lambda h: (h.name, h.value)))
    )


def _precedence(match: HTTPRouteMatch) -> SortKey:
    """Gateway API order: exact path, longest prefix, method, most headers, most query params."""
    exact = match.path.type == "Exact"
    return (
        0 if exact else 1,
        -len(match.path.value.rstrip("/") or "/"),
        0 if match.method else 1,
        -len(match.headers),
        -len(match.query_params),
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
