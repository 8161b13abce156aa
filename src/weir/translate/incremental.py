"""Incremental translation: after a change, recompute only what it can affect.

:class:`Translator` gives, for each snapshot of one source, exactly what
:func:`weir.translate.translate` gives (``tests/translate/test_incremental.py``
holds it to that over random edit sequences), at a cost that follows the
change rather than the number of objects: at 10,000 routes a one-route edit
costs about a millisecond instead of most of a second.

How. A full translation (:func:`weir.translate.full_pass`) keeps its
intermediate results: every HTTPRoute's :class:`~weir.translate.routes.RouteUnit`
(what the route contributes, computed from the route and what it reads
alone), the listener contexts the units are placed in, the upstream and
secret tables. The next snapshot is compared with the last one by object
identity (providers hand over the same object for what did not change), and
when every change is of a kind whose effects are known exactly —
HTTPRoutes, XBackends, Services, EndpointSlices, and the Secrets and
ConfigMaps that only XBackends name — it is *patched*:

1. The routes to recompute: the changed ones and those naming a changed
   backend (``RouteUnit.reads``); a Secret or ConfigMap changes the
   XBackends that name it (:func:`_xbackend_names`), as if they had been
   edited. Their old units are taken out of the listener contexts and the
   new ones put in.
2. The XBackends to settle again: the changed ones and those the old or new
   units resolved. Their users (Gateways), egress policy, upstream and
   status are recomputed from the users the units record.
3. Only the virtual hosts of the domains where a unit was taken out or put
   in are made again (all of a socket's when such a domain is a wildcard or
   a listener's hostname, which other virtual hosts depend on), and on a TLS
   socket only the HTTPS servers of those listeners; the
   statuses, upstreams and secrets of everything else are the same objects
   as before, so what consumes them can compare by identity.

Anything else falls back to a full translation, which is always correct:
a change of another kind (a Gateway, a ReferenceGrant, a policy,
a Namespace, a GRPCRoute ...), a Secret or ConfigMap whose name any object
of those kinds mentions (a listener's certificate, a policy's CA: found by
name, conservatively), an edited HTTPRoute that shares a hostname
with a GRPCRoute on a listener (their conflicts are settled over all routes
of both kinds), a touched backend that a TCPRoute, TLSRoute, GRPCRoute or
policy also names, an XBackend the egress policy refuses before or after,
and the first snapshot. :attr:`Translator.counts` says how often each path
was taken.

The translator owns the state it patches (listener contexts are mutated in
place); a failure while patching discards it, so the next snapshot is
translated in full.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from weir import infrastructure, ir
from weir.api.discovery_v1 import EndpointSlice
from weir.api.gateway_v1 import HTTPRoute
from weir.api.gateway_v1_grpcroute import GRPCRoute
from weir.api.gateway_v1_tcproute import TCPRoute
from weir.api.gateway_v1_tlsroute import TLSRoute
from weir.api.gateway_v1_udproute import UDPRoute
from weir.api.meta import ObjectKey
from weir.api.xbackend_v1alpha1 import SELECTOR_LABEL, XBackend
from weir.api.xbackendtrafficpolicy_v1alpha1 import XBackendTrafficPolicy
from weir.resources import Resources
from weir.translate import (
    Pass,
    Settings,
    Surroundings,
    Translation,
    full_pass,
    patched_listener,
)
from weir.translate.backends import BackendResolver
from weir.translate.gateways import (
    GatewayContext,
    ListenerContext,
    ListenerSetContext,
    gateway_status,
    listener_set_status,
)
from weir.translate.grpcroutes import meets_grpc_routes
from weir.translate.policies import targets
from weir.translate.routes import RouteUnit, backend_key, http_route_unit, parent_index
from weir.translate.virtualhosts import Owners

#: Kinds whose changes a patch follows exactly; a change of any other kind means a full translation.
PATCHED_KINDS = frozenset({"HTTPRoute", "XBackend", "Service", "EndpointSlice"})
#: Kinds whose changes are patched when only XBackends name the object (see :func:`_xbackend_names`).
CONFIG_KINDS = frozenset({"Secret", "ConfigMap"})
#: Kinds that read no Secret or ConfigMap (their translation has no path to one; the XBackends'
#: reads are indexed by name instead): every other kind's mentions pin a name.
_NO_CONFIG_READS = PATCHED_KINDS - {"XBackend"} | CONFIG_KINDS

Socket = tuple[str, int]


@dataclass
class _State:
    """What the last translation was made from, indexed for patching; owned by one :class:`Translator`."""

    resources: Resources
    translation: Translation
    #: what the last full pass settled (the translation and units above are kept up to date instead)
    fixed: Surroundings
    by_key: dict[ObjectKey, GatewayContext]
    existing: frozenset[ObjectKey]
    units: dict[ObjectKey, RouteUnit]
    #: backend (Service or XBackend key) -> the routes whose backendRefs name it
    readers: dict[ObjectKey, set[ObjectKey]]
    #: XBackend -> route -> the Gateways that route is attached to (the XBackend's users)
    users: dict[ObjectKey, dict[ObjectKey, frozenset[ObjectKey]]]
    #: how many units contribute each upstream and secret name
    upstream_refs: Counter[str]
    secret_refs: Counter[str]
    #: the IR tables by name (final: egress policy applied, refused upstreams out)
    upstreams: dict[str, ir.Upstream]
    secrets: dict[str, ir.Secret]
    #: backends that something besides HTTPRoutes reads (TCPRoutes, TLSRoutes, policies, the
    #: published Service): touching one means a full translation
    pinned: frozenset[ObjectKey]
    #: Secret or ConfigMap name -> the XBackends whose spec names it; and each XBackend's names
    config_readers: dict[str, set[ObjectKey]] = field(default_factory=dict)
    xbackend_names: dict[ObjectKey, frozenset[str]] = field(default_factory=dict)
    #: every name that an object of another kind (a Gateway, a policy, a route relayed over TCP ...)
    #: mentions: a Secret or ConfigMap of such a name takes a full pass
    config_pinned: frozenset[str] = frozenset()
    listener_at: dict[Socket, int] = field(default_factory=dict)
    #: per served socket, who owns which name among its listeners (made when first patched)
    owners: dict[Socket, Owners] = field(default_factory=dict)

    def owners_of(self, socket: Socket, listeners: Callable[[], list[ListenerContext]]) -> Owners:
        """The socket's :class:`Owners`, made from ``listeners()`` the first time (listed only then:
        a socket of 1,000 HTTPS listeners is not walked on every edit)."""
        found = self.owners.get(socket)
        if found is None:
            found = self.owners[socket] = Owners(listeners())
        return found


class Translator:
    """:func:`weir.translate.translate` for successive snapshots of one source (see the module doc)."""

    def __init__(self, settings: Settings, *, patch_always: int | None = None) -> None:
        """``patch_always``: a patch recomputing at most this many routes is always made (default
        :data:`PATCH_ALWAYS`; tests of the share rule at small sizes set 0)."""
        self.settings = settings
        self.patch_always = PATCH_ALWAYS if patch_always is None else patch_always
        self._state: _State | None = None
        #: how many translations were full (and why), patched, or found nothing changed
        self.counts: Counter[str] = Counter()
        #: how the last translation was made: "patched", "unchanged", "full", or "full: REASON"
        self.last = ""

    def translate(self, resources: Resources) -> Translation:
        state, self._state = self._state, None  # a failure below leaves nothing half-patched
        if state is not None:
            if resources.objects is state.resources.objects or (
                resources.unserved == state.resources.unserved
                and not (changed := _changed(state.resources, resources))
            ):
                state.resources = resources
                self._state = state
                self._count("unchanged")
                return state.translation
            why = "unserved kinds" if resources.unserved != state.resources.unserved else None
            why = why or _patch(state, resources, changed, self.settings, self.patch_always)
            if why is None:
                self._state = state
                self._count("patched")
                return state.translation
            self.counts[f"full: {why}"] += 1
        self._state = _index(resources, full_pass(resources, self.settings), self.settings)
        self._count("full", why if state is not None else "first")
        return self._state.translation

    def _count(self, how: str, why: str | None = None) -> None:
        self.counts[how] += 1
        self.last = f"{how}: {why}" if why else how


#: A change that recomputes more than this share of the routes takes a full pass: a patch keeps old
#: and new state side by side and does per-route bookkeeping a full pass does not (a CA that every
#: XBackend trusts, at 10,000 routes).
_PATCH_AT_MOST = 0.5

#: ... unless it recomputes at most this many: a patch that small is cheap whatever the share, and a
#: small configuration (one route edited of two) keeps taking the same path as a large one.
PATCH_ALWAYS = 64

#: Beyond this many replaced objects, equal ones are not looked for (the pass will be full anyway).
_COMPARE_AT_MOST = 256


def _changed(base: Resources, resources: Resources) -> set[ObjectKey]:
    """Keys added, removed, or holding a different object since ``base``.

    A replaced object equal to the one before does not count: a file read
    again yields new objects for every document in it, and a Gateway that
    shares a file with an edited route has not changed.
    """
    before, after = base.objects, resources.objects
    known = resources.changed_since(base)
    if known is not None:
        changed = {key for key in known if before.get(key) is not after.get(key)}
    else:
        changed = {key for key, obj in after.items() if before.get(key) is not obj}
        kept = len(after) - sum(1 for key in changed if key not in before)
        if kept < len(before):  # something was removed
            changed.update(key for key in before if key not in after)
    if len(changed) <= _COMPARE_AT_MOST:
        changed = {
            key for key in changed if key not in before or key not in after or before[key] != after[key]
        }
    return changed


def _index(resources: Resources, passed: Pass, settings: Settings) -> _State:
    units = {unit.key: unit for unit in passed.units}
    readers: dict[ObjectKey, set[ObjectKey]] = {}
    users: dict[ObjectKey, dict[ObjectKey, frozenset[ObjectKey]]] = {}
    upstream_refs: Counter[str] = Counter()
    secret_refs: Counter[str] = Counter()
    for unit in passed.units:
        for backend in unit.reads:
            readers.setdefault(backend, set()).add(unit.key)
        for xbackend in unit.uses:
            users.setdefault(xbackend, {})[unit.key] = unit.gateways
        upstream_refs.update(unit.upstreams.keys())
        secret_refs.update(unit.secrets.keys())
    pinned: set[ObjectKey] = set()
    relayed: list[TCPRoute | TLSRoute | UDPRoute | GRPCRoute] = [
        *resources.tcp_routes,
        *resources.tls_routes,
        *resources.all(UDPRoute),
        *resources.grpc_routes,
    ]
    for route in relayed:
        refs: list[Any] = [ref for rule in route.spec.rules for ref in rule.backend_refs]
        if isinstance(route, GRPCRoute):  # and their mirrors, of a rule or of a backend
            for grpc_rule in route.spec.rules:
                for grpc_filter in (
                    *grpc_rule.filters,
                    *(f for r in grpc_rule.backend_refs for f in r.filters),
                ):
                    if grpc_filter.request_mirror is not None:
                        refs.append(grpc_filter.request_mirror.backend_ref)
        pinned.update(key for ref in refs if (key := backend_key(ref, route.namespace)) is not None)
    for policy_targets in (
        *map(targets, resources.backend_tls_policies),
        *map(targets, resources.backend_credential_policies),
        *map(targets, resources.backend_mcp_policies),
        *map(targets, resources.all(XBackendTrafficPolicy)),
    ):
        pinned.update(ObjectKey(t.kind, t.namespace, t.name) for t in policy_targets)
    if settings.publish_service is not None:
        pinned.add(ObjectKey("Service", *settings.publish_service))
    if settings.gateway_services is not None:  # each Gateway's own Service gives its addresses
        own = infrastructure.service_name
        pinned.update(ObjectKey("Service", gw.namespace, own(gw.name)) for gw in resources.gateways)
    translation = passed.translation
    by_key, existing = parent_index(resources, passed.surroundings.gateways)
    config_readers: dict[str, set[ObjectKey]] = {}
    xbackend_names: dict[ObjectKey, frozenset[str]] = {}
    config_pinned: set[str] = set()
    for key, obj in resources.objects.items():
        if isinstance(obj, XBackend):
            if names := _xbackend_names(obj):
                xbackend_names[key] = names
            for name in names:
                config_readers.setdefault(name, set()).add(key)
        elif key.kind not in _NO_CONFIG_READS:
            config_pinned |= _named(obj)
    return _State(
        resources=resources,
        translation=translation,
        fixed=passed.surroundings,
        by_key=by_key,
        existing=existing,
        units=units,
        readers=readers,
        users=users,
        upstream_refs=upstream_refs,
        secret_refs=secret_refs,
        upstreams={u.name: u for u in translation.ir.upstreams},
        secrets={s.name: s for s in translation.ir.secrets},
        pinned=frozenset(pinned),
        config_readers=config_readers,
        xbackend_names=xbackend_names,
        config_pinned=frozenset(config_pinned),
        listener_at={(lst.address, lst.port): i for i, lst in enumerate(translation.ir.listeners)},
    )


def _named(obj: Any) -> frozenset[str]:
    """Every string in ``obj``'s ``spec`` (or, for a kind without one, in the whole object but its
    metadata): a superset of the names of the Secrets and ConfigMaps it can refer to, whatever the
    field. Conservative on purpose: a name mentioned for another reason only costs a full pass."""
    found: set[str] = set()
    stack: list[Any] = [getattr(obj, "spec", None) or obj.model_dump(exclude={"metadata", "status"})]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            found.add(value)
        elif isinstance(value, BaseModel):
            stack.extend(value.__dict__.values())
        elif isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list | tuple | set | frozenset):
            stack.extend(value)
    return frozenset(found)


def _xbackend_names(xb: XBackend) -> frozenset[str]:
    """The names of the Secrets and ConfigMaps an XBackend's translation reads: its CA references
    and its client certificate (what :func:`weir.translate.backends._evaluate_xbackend` passes to
    :mod:`weir.translate.tls`). Names only: a namespace given, or another kind, at worst makes an
    XBackend recomputed that did not need to be."""
    tls = xb.spec.tls
    if tls is None:
        return frozenset()
    names = {ref.name for ref in tls.validation.ca_certificate_refs} if tls.validation else set()
    if tls.client_certificate_ref is not None:
        names.add(tls.client_certificate_ref.name)
    return frozenset(names)


def _changed_backends(state: _State, resources: Resources, changed: Iterable[ObjectKey]) -> set[ObjectKey]:
    """The Services and XBackends whose resolution ``changed`` can alter (a slice: its Service; a
    Secret or ConfigMap: the XBackends that name it)."""
    out: set[ObjectKey] = set()
    for key in changed:
        if key.kind in ("Service", "XBackend"):
            out.add(key)
        elif key.kind in CONFIG_KINDS:
            out.update(state.config_readers.get(key.name, ()))
        elif key.kind == EndpointSlice.KIND:
            for obj in (state.resources.objects.get(key), resources.objects.get(key)):
                if isinstance(obj, EndpointSlice) and obj.service_name:
                    out.add(ObjectKey("Service", key.namespace, obj.service_name))
    # A Service made for an EndpointSelector XBackend: its endpoints are that XBackend's.
    for key in [k for k in out if k.kind == "Service"]:
        for svc in (state.resources.objects.get(key), resources.objects.get(key)):
            owner = svc.metadata.labels.get(SELECTOR_LABEL) if svc is not None else None
            if owner:
                out.add(ObjectKey("XBackend", key.namespace, owner))
    return out


def _patch(
    state: _State, resources: Resources, changed: set[ObjectKey], settings: Settings, patch_always: int
) -> str | None:
    """Bring ``state`` to ``resources``; else (``state`` untouched) why only a full pass can."""
    if any(key.kind not in PATCHED_KINDS and key.kind not in CONFIG_KINDS for key in changed):
        return "other kinds changed"
    if any(key.kind in CONFIG_KINDS and key.name in state.config_pinned for key in changed):
        return "a Secret or ConfigMap that other kinds name"
    if any(policy.spec.oauth2 is not None for policy in resources.backend_credential_policies):
        # A token endpoint is an upstream no route names: a full pass places it.
        return "an OAuth2 BackendCredentialPolicy"
    backends = _changed_backends(state, resources, changed)
    todo = {key for key in changed if key.kind == "HTTPRoute"}
    for backend in backends:
        todo.update(state.readers.get(backend, ()))
    if len(todo) > max(_PATCH_AT_MOST * len(state.units), patch_always):
        return "most routes to recompute"

    # Compute everything first, mutate nothing until the patch is known to apply. An XBackend's
    # users known before its routes are resolved: those of the routes not recomputed (the
    # recomputed ones add theirs as they resolve it; all are settled again below).
    def kept_users(xbackend: ObjectKey) -> frozenset[ObjectKey]:
        found = state.users.get(xbackend, {})
        return frozenset(gw for route, gateways in found.items() if route not in todo for gw in gateways)

    resolver = BackendResolver(resources, settings, dataclasses.replace(state.fixed.egress, users=kept_users))
    old_units = {key: state.units.get(key) for key in todo}
    new_units: dict[ObjectKey, RouteUnit | None] = {}
    for key in sorted(todo):
        route = resources.objects.get(key)
        new_units[key] = (
            None
            if route is None
            else http_route_unit(
                resources,
                route,  # type: ignore[arg-type]
                state.by_key,
                state.existing,
                resolver,
                settings.controller_name,
                request_timeout_ms=settings.request_timeout_ms,
            )
        )
    if resources.grpc_routes and any(
        isinstance(route, HTTPRoute)
        and meets_grpc_routes(resources, route, state.by_key, state.existing, state.fixed.conflicts)
        for key in todo
        for route in (state.resources.objects.get(key), resources.objects.get(key))
    ):
        return "an HTTPRoute sharing a hostname with a GRPCRoute"
    units = [u for u in (*old_units.values(), *new_units.values()) if u is not None]
    touched = set(backends)
    for unit in units:
        touched |= unit.reads
    if touched & state.pinned:
        return "a backend other objects name"
    fixed = state.fixed
    if resolver.refused or any(name in fixed.refused_secrets for unit in units for name in unit.secrets):
        return "refused XBackend"

    settle = {key for key in backends if key.kind == "XBackend"}
    for unit in units:
        settle |= unit.uses
    # Each new unit's users, gathered once (per XBackend a scan of every new unit was quadratic in
    # the routes an edit touches: 43 s for a CA that 10,000 XBackends share).
    new_users: dict[ObjectKey, list[tuple[ObjectKey, frozenset[ObjectKey]]]] = {}
    for k, u in new_units.items():
        if u is not None:
            for xbackend in u.uses:
                new_users.setdefault(xbackend, []).append((k, u.gateways))
    users: dict[ObjectKey, dict[ObjectKey, frozenset[ObjectKey]]] = {}
    for xbackend in settle:
        found = {k: v for k, v in state.users.get(xbackend, {}).items() if k not in todo}
        found.update(new_users.get(xbackend, ()))
        users[xbackend] = found
        if found:
            resolver.register_users(xbackend, {gw for gateways in found.values() for gw in gateways})
    settled = resolver.apply_egress_policy()
    if any(upstream is None for upstream, _ in settled.values()) or any(
        key in fixed.refused for unit in units for key in unit.uses
    ):
        return "refused XBackend"  # a full pass builds every route using it with its share failed
    xbackend_statuses = resolver.xbackend_statuses(settings.controller_name, only=settle)

    # Apply.
    for key in changed:
        if key.kind == "XBackend":
            _index_names(state, key, resources.objects.get(key))
    statuses = dict(state.translation.statuses)
    added = False
    listeners: dict[int, ListenerContext] = {}
    upstream_names: set[str] = set(settled)
    secret_names: set[str] = set()
    new_upstreams: dict[str, ir.Upstream] = {}
    new_secrets: dict[str, ir.Secret] = {}
    for key in sorted(todo):
        old, new = old_units[key], new_units[key]
        if old is not None:
            _unplace(state, old, listeners)
            upstream_names.update(old.upstreams)
            secret_names.update(old.secrets)
        if new is not None:
            _place(state, new, listeners)
            upstream_names.update(new.upstreams)
            secret_names.update(new.secrets)
            new_upstreams.update(new.upstreams)
            new_secrets.update(new.secrets)
        added |= _set_status(statuses, key, None if new is None else new.status)
    for xbackend, found in users.items():
        if found:
            state.users[xbackend] = found
        else:
            state.users.pop(xbackend, None)
        added |= _set_status(statuses, xbackend, xbackend_statuses.get(xbackend))
    for ctx in {id(lc.gateway): state.by_key[lc.gateway.key] for lc in listeners.values()}.values():
        _set_status(statuses, ctx.gateway.key, gateway_status(ctx))
    for lsc in {
        id(lc.listener_set): _set_of(state.by_key, lc) for lc in listeners.values() if lc.listener_set
    }.values():
        _set_status(statuses, lsc.key, listener_set_status(lsc))

    upstreams_moved = _update_table(
        state.upstreams,
        state.upstream_refs,
        upstream_names,
        {**new_upstreams, **{name: up for name, (up, _) in settled.items() if up is not None}},
        fixed.other.upstreams,
    )
    secrets_moved = _update_table(
        state.secrets, state.secret_refs, secret_names, new_secrets, fixed.other.secrets
    )
    before = state.translation.ir
    ir_listeners = list(before.listeners)
    # The domains each listener context gained or lost routes for: only their virtual hosts change.
    moved: dict[int, tuple[ListenerContext, set[str]]] = {}
    for unit in units:
        for lc, domain, _ in unit.placements:
            moved.setdefault(id(lc), (lc, set()))[1].add(domain)
    for socket in sorted({sock for lc, _ in moved.values() for sock in lc.sockets}):
        at = state.listener_at.get(socket)
        if at is not None:  # served (a listener whose certificate does not load serves nothing)
            ir_listeners[at] = patched_listener(
                socket,
                ir_listeners[at],
                fixed.http_sockets,
                fixed.tls_sockets,
                moved.values(),
                state.owners_of,
            )
    state.translation = Translation(
        ir=ir.IR(
            listeners=tuple(ir_listeners),
            upstreams=_ordered(state.upstreams, before.upstreams, upstreams_moved, upstream_names),
            secrets=_ordered(state.secrets, before.secrets, secrets_moved, secret_names),
            dns=before.dns,
        ),
        statuses=dict(sorted(statuses.items())) if added else statuses,
        gateway_sockets=state.translation.gateway_sockets,
    )
    state.resources = resources
    return None


def _index_names(state: _State, key: ObjectKey, xb: object) -> None:
    """Keep :attr:`_State.config_readers` true for the XBackend ``key``, now ``xb`` (or gone)."""
    for name in state.xbackend_names.pop(key, ()):
        readers = state.config_readers.get(name)
        if readers is not None:
            readers.discard(key)
            if not readers:
                del state.config_readers[name]
    if isinstance(xb, XBackend) and (names := _xbackend_names(xb)):
        state.xbackend_names[key] = names
        for name in names:
            state.config_readers.setdefault(name, set()).add(key)


def _unplace(state: _State, unit: RouteUnit, listeners: dict[int, ListenerContext]) -> None:
    for lc in unit.attached:
        lc.attached -= 1
        listeners[id(lc)] = lc
    for lc, domain, entry in unit.placements:
        lc.routes[domain].remove(entry)
        listeners[id(lc)] = lc
    for backend in unit.reads:
        readers = state.readers.get(backend)
        if readers is not None:
            readers.discard(unit.key)
            if not readers:
                del state.readers[backend]
    state.upstream_refs.subtract(unit.upstreams.keys())
    state.secret_refs.subtract(unit.secrets.keys())
    del state.units[unit.key]


def _place(state: _State, unit: RouteUnit, listeners: dict[int, ListenerContext]) -> None:
    for lc in unit.attached:
        lc.attached += 1
        listeners[id(lc)] = lc
    for lc, domain, entry in unit.placements:
        lc.routes[domain].append(entry)
        listeners[id(lc)] = lc
    for backend in unit.reads:
        state.readers.setdefault(backend, set()).add(unit.key)
    state.upstream_refs.update(unit.upstreams.keys())
    state.secret_refs.update(unit.secrets.keys())
    state.units[unit.key] = unit


def _set_status(
    statuses: dict[ObjectKey, dict[str, Any]], key: ObjectKey, status: dict[str, Any] | None
) -> bool:
    """Put or drop ``key``'s status; ``True`` when the key is new (the order must be made again)."""
    if status is None:
        statuses.pop(key, None)
        return False
    before = statuses.get(key)
    if before is None:
        statuses[key] = status
        return True
    if before != status:  # an equal status stays the same object: consumers compare by identity
        statuses[key] = status
    return False


def _update_table(
    table: dict[str, Any],
    refs: Counter[str],
    names: set[str],
    fresh: Mapping[str, Any],
    pinned: Mapping[str, Any],
) -> bool:
    """Settle ``names`` in ``table``: kept while a unit contributes them (``refs``) or something else
    does (``pinned``), with the value from ``fresh`` when it has one. ``True`` if names came or went."""
    moved = False
    for name in names:
        if refs[name] <= 0:
            refs.pop(name, None)
            if name not in pinned:
                moved |= table.pop(name, None) is not None
                continue
        moved |= name not in table
        if name in fresh:
            table[name] = fresh[name]
    return moved


def _ordered(
    table: Mapping[str, Any], before: tuple[Any, ...], moved: bool, names: Iterable[str]
) -> tuple[Any, ...]:
    """``table``'s values in name order (as a full pass orders them): ``before`` with the values of
    ``names`` replaced, unless names came or went (``moved``)."""
    if moved:
        return tuple(table[name] for name in sorted(table))
    out = list(before)
    for name in names:
        if name in table:
            at = bisect.bisect_left(out, name, key=lambda item: item.name)
            out[at] = table[name]
    return tuple(out)


def _set_of(by_key: dict[ObjectKey, GatewayContext], lc: ListenerContext) -> ListenerSetContext:
    """The context of the ListenerSet that declares ``lc`` (which comes from one)."""
    assert lc.listener_set is not None
    ctx = by_key[lc.gateway.key]
    return next(lsc for lsc in ctx.listener_sets if lsc.listener_set is lc.listener_set)
