"""GatewayClasses and Gateways: which are weir's, which listeners are usable, and their status.

This module makes the contexts (:mod:`weir.translate.listener_contexts`) of
weir's Gateways and ListenerSets; :mod:`weir.translate.listener_sockets`
settles which listeners share a socket or a name, and
:mod:`weir.translate.gateway_status` writes their status once routes have
attached. The names other modules import from here are re-exported.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from weir import infrastructure
from weir.api.core_v1 import Service
from weir.api.gateway_v1 import GROUP, Gateway, GatewayClass, LabelSelector, Listener
from weir.api.gateway_v1_listenerset import ListenerSet
from weir.api.meta import KubeObject, ObjectKey
from weir.features import supported_features
from weir.resources import Resources
from weir.translate import frontendtls, tls
from weir.translate import status as st
from weir.translate.backendclientcert import gateway_client_certificate
from weir.translate.certificates import CertificateProblem, listener_certificates
from weir.translate.egress import class_config
from weir.translate.frontendtls import ClientCAProblem
from weir.translate.gateway_status import gateway_status as gateway_status
from weir.translate.gateway_status import listener_set_status as listener_set_status
from weir.translate.listener_contexts import ALONE as ALONE
from weir.translate.listener_contexts import CORE_PROTOCOLS as CORE_PROTOCOLS
from weir.translate.listener_contexts import FAMILIES as FAMILIES
from weir.translate.listener_contexts import GATEWAY_API_VERSION as GATEWAY_API_VERSION
from weir.translate.listener_contexts import SUPPORTED_KINDS as SUPPORTED_KINDS
from weir.translate.listener_contexts import Conflict as Conflict
from weir.translate.listener_contexts import GatewayContext as GatewayContext
from weir.translate.listener_contexts import ListenerContext as ListenerContext
from weir.translate.listener_contexts import ListenerSetContext as ListenerSetContext
from weir.translate.listener_contexts import RouteEntry as RouteEntry
from weir.translate.listener_sockets import _label as _label
from weir.translate.listener_sockets import _note_overlaps, _settle_sockets
from weir.translate.listener_sockets import covers as covers
from weir.translate.listener_sockets import hostnames_overlap as hostnames_overlap
from weir.translate.listener_sockets import wildcards_over as wildcards_over
from weir.translate.settings import Settings


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
    (the per-Gateway Service mode, :mod:`weir.infrastructure`), the
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
