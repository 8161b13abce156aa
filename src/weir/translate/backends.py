"""Backend references: Services (through EndpointSlices) and XBackends, to IR upstreams.

A :class:`BackendResolver` lives for one translation. It resolves each
``backendRef`` of a route, evaluates every XBackend once, and remembers which
Gateways use which XBackend so that the XBackend's ``status.parents`` can be
written per Gateway.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from weir import ir
from weir.api.core_v1 import Service, ServicePort
from weir.api.gateway_v1 import GROUP as GATEWAY_GROUP
from weir.api.gateway_v1 import BackendRef
from weir.api.meta import ObjectKey
from weir.api.xbackend_v1alpha1 import GROUP as XBACKEND_GROUP
from weir.api.xbackend_v1alpha1 import XBackend
from weir.resources import Resources
from weir.translate import egress, tls
from weir.translate import status as st
from weir.translate.grants import reference_permitted
from weir.translate.settings import Settings


@dataclass(frozen=True)
class RefFailure:
    """A backendRef that does not resolve: the route's ``ResolvedRefs=False`` reason and message."""

    reason: str
    message: str


@dataclass(frozen=True)
class Resolved:
    """A backendRef that resolved to an object.

    ``upstream`` is ``None`` when the object exists but cannot be used (for
    example an XBackend whose CA does not load): requests for it get 500,
    and the object's own status says why. ``streaming`` marks a backend whose
    responses are long-lived event streams (an XBackend with protocol
    ``MCP``): routes to it must not time them out.
    """

    upstream: ir.Upstream | None
    secrets: tuple[ir.Secret, ...] = ()
    streaming: bool = False


@dataclass(frozen=True)
class XBackendVerdict:
    """An XBackend evaluated on its own: usable (``upstream``) or why not."""

    upstream: ir.Upstream | None
    secrets: tuple[ir.Secret, ...]
    conditions: tuple[tuple[str, bool, str, str], ...]  # (type, ok, reason, message)


class BackendResolver:
    def __init__(self, resources: Resources, settings: Settings) -> None:
        self._resources = resources
        self._settings = settings
        self._xbackends: dict[ObjectKey, XBackendVerdict] = {}
        self._xbackend_users: dict[ObjectKey, set[ObjectKey]] = defaultdict(set)

    def resolve(
        self,
        *,
        route_kind: str,
        route_namespace: str,
        ref: BackendRef,
        gateways: set[ObjectKey],
    ) -> Resolved | RefFailure:
        """Resolve ``ref`` written in a route of ``route_kind`` in ``route_namespace``.

        ``route_kind`` also decides what the backend must speak: an
        ``HTTPRoute`` needs HTTP (Service ports, XBackends of any protocol
        but ``TCP``), a ``TCPRoute`` raw TCP (Service ports, XBackends of
        protocol ``TCP``). ``gateways`` are the Gateways the route is
        attached to; they become parents in the status of a referenced
        XBackend.
        """
        namespace = ref.namespace or route_namespace
        target = f"{ref.kind} {namespace}/{ref.name}"
        if (ref.group, ref.kind) == ("", "Service"):
            kind_group = ""
        elif (ref.group, ref.kind) == (XBACKEND_GROUP, "XBackend"):
            kind_group = XBACKEND_GROUP
        else:
            return RefFailure(
                st.R_INVALID_KIND,
                f"backendRef kind {ref.group or 'core'}/{ref.kind} is not supported; "
                f"use a Service or a {XBACKEND_GROUP} XBackend",
            )
        if not reference_permitted(
            self._resources,
            from_group=GATEWAY_GROUP,
            from_kind=route_kind,
            from_namespace=route_namespace,
            to_group=kind_group,
            to_kind=ref.kind,
            to_namespace=namespace,
            to_name=ref.name,
        ):
            return RefFailure(
                st.R_REF_NOT_PERMITTED,
                f"{target} is in another namespace and no ReferenceGrant in {namespace} "
                f"allows {route_kind}s from {route_namespace} to refer to it",
            )
        if kind_group == "":
            return self._service(namespace, ref, tcp=route_kind == "TCPRoute")
        return self._xbackend(route_kind, namespace, ref, gateways)

    # ------------------------------------------------------------ Services

    def _service(self, namespace: str, ref: BackendRef, *, tcp: bool) -> Resolved | RefFailure:
        """A Service port; ``tcp``: for raw TCP (a TCPRoute), an upstream of its own (``.../tcp``)."""
        svc = self._resources.service(namespace, ref.name)
        if svc is None:
            return RefFailure(st.R_BACKEND_NOT_FOUND, f"Service {namespace}/{ref.name} does not exist")
        port = next((p for p in svc.spec.ports if p.port == ref.port), None)
        if port is None:
            have = ", ".join(str(p.port) for p in svc.spec.ports) or "none"
            return RefFailure(
                st.R_BACKEND_NOT_FOUND,
                f"Service {namespace}/{ref.name} has no port {ref.port} (its ports: {have})",
            )
        if tcp:
            return Resolved(
                ir.Upstream(
                    name=f"service/{namespace}/{ref.name}/{port.port}/tcp",
                    destination=ir.StaticEndpoints(self._endpoints(svc, port)),
                    protocol=ir.UpstreamProtocol.TCP,
                )
            )
        return Resolved(
            ir.Upstream(
                name=f"service/{namespace}/{ref.name}/{port.port}",
                destination=ir.StaticEndpoints(self._endpoints(svc, port)),
                protocol=ir.UpstreamProtocol.HTTP2
                if port.app_protocol == "kubernetes.io/h2c"
                else ir.UpstreamProtocol.HTTP1,
            )
        )

    def _endpoints(self, svc: Service, port: ServicePort) -> tuple[ir.Endpoint, ...]:
        """Ready endpoints of ``svc`` for ``port``, matched to slice ports by name."""
        found: set[tuple[str, int]] = set()
        wanted = port.name or ""
        for eps in self._resources.endpoint_slices(svc.namespace, svc.name):
            if eps.address_type == "FQDN":
                continue
            slice_port = next((p for p in eps.ports if (p.name or "") == wanted and p.port), None)
            if slice_port is None or slice_port.port is None:
                continue
            for endpoint in eps.endpoints:
                if endpoint.is_ready:
                    found.update((addr, slice_port.port) for addr in endpoint.addresses)
        return tuple(ir.Endpoint(a, p) for a, p in sorted(found))

    # ------------------------------------------------------------ XBackends

    def _xbackend(
        self, route_kind: str, namespace: str, ref: BackendRef, gateways: set[ObjectKey]
    ) -> Resolved | RefFailure:
        xb = self._resources.get(XBackend, namespace, ref.name)
        if xb is None:
            return RefFailure(st.R_BACKEND_NOT_FOUND, f"XBackend {namespace}/{ref.name} does not exist")
        if ref.port is not None and ref.port != xb.spec.port.port:
            return RefFailure(
                st.R_BACKEND_NOT_FOUND,
                f"backendRef port {ref.port} does not match XBackend {namespace}/{ref.name} "
                f"port {xb.spec.port.port}; omit the port or make them equal",
            )
        if route_kind == "TCPRoute" and xb.spec.protocol != "TCP":
            protocol = xb.spec.protocol or "unset (HTTP)"
            return RefFailure(
                st.R_UNSUPPORTED_PROTOCOL,
                f"XBackend {namespace}/{ref.name} has protocol {protocol}, which a TCPRoute cannot use; "
                "a TCPRoute relays raw bytes: set the XBackend's protocol to TCP, or use an HTTPRoute",
            )
        if route_kind != "TCPRoute" and xb.spec.protocol == "TCP":
            return RefFailure(
                st.R_UNSUPPORTED_PROTOCOL,
                f"XBackend {namespace}/{ref.name} has protocol TCP, which an HTTPRoute cannot use; "
                "use a TCPRoute on a TCP listener",
            )
        self._xbackend_users[xb.key].update(gateways)
        verdict = self.xbackend_verdict(xb)
        return Resolved(verdict.upstream, verdict.secrets, streaming=xb.spec.protocol == "MCP")

    def xbackend_verdict(self, xb: XBackend) -> XBackendVerdict:
        if xb.key not in self._xbackends:
            self._xbackends[xb.key] = _evaluate_xbackend(self._resources, self._settings, xb)
        return self._xbackends[xb.key]

    def apply_egress_policy(
        self,
        gateway_classes: Mapping[ObjectKey, str],
        policies: Mapping[str, egress.ClassPolicy],
        fallback: egress.ClassPolicy,
    ) -> dict[str, tuple[ir.Upstream | None, tuple[ir.Secret, ...]]]:
        """Settle every XBackend resolved so far against the egress policy of its users.

        Call once, after every route has been resolved: an XBackend's policy
        combines those of the classes (``gateway_classes``: Gateway → class
        name) of every Gateway using it (see :func:`weir.translate.egress.decide`);
        ``fallback`` applies to one no Gateway uses. Returns, by upstream
        name, the upstream to serve (now with its egress guard), or ``None``
        with the secrets that were resolved for it, when the policy refuses it.
        """
        settled: dict[str, tuple[ir.Upstream | None, tuple[ir.Secret, ...]]] = {}
        for key, users in sorted(self._xbackend_users.items()):
            verdict = self._xbackends.get(key)
            if verdict is None or verdict.upstream is None:
                continue
            upstream = verdict.upstream
            assert isinstance(upstream.destination, ir.DnsName)
            classes = sorted({gateway_classes[gw] for gw in users if gw in gateway_classes})
            decision = egress.decide(
                upstream.destination.hostname, [policies[c] for c in classes if c in policies] or [fallback]
            )
            if decision.refusal is not None:
                reason, message = decision.refusal
                conditions = (
                    (st.ACCEPTED, False, reason, message),
                    (st.RESOLVED_REFS, True, st.R_RESOLVED_REFS, "All references resolved"),
                )
                self._xbackends[key] = XBackendVerdict(None, (), conditions)
                settled[upstream.name] = (None, verdict.secrets)
                continue
            upstream = dataclasses.replace(
                upstream,
                destination=dataclasses.replace(upstream.destination, dns=decision.dns),
                egress_guard=decision.guard,
            )
            self._xbackends[key] = dataclasses.replace(verdict, upstream=upstream)
            settled[upstream.name] = (upstream, verdict.secrets)
        return settled

    def xbackend_statuses(self, controller_name: str) -> dict[ObjectKey, dict[str, Any]]:
        """``status.parents`` for every XBackend, one entry per Gateway whose routes use it.

        Entries written by other controllers are kept; weir's entries for
        Gateways that no longer use the XBackend disappear. At most 32.
        """
        out: dict[ObjectKey, dict[str, Any]] = {}
        for xb in self._resources.xbackends:
            users = sorted(self._xbackend_users.get(xb.key, ()))
            verdict = self.xbackend_verdict(xb)
            gen = xb.metadata.generation
            ours = [
                {
                    "parentRef": {
                        "group": GATEWAY_GROUP,
                        "kind": "Gateway",
                        "namespace": gw.namespace,
                        "name": gw.name,
                    },
                    "controllerName": controller_name,
                    "conditions": [st.condition(t, ok, r, m, gen) for t, ok, r, m in verdict.conditions],
                }
                for gw in users
            ]
            status = st.parents_status(xb.status, controller_name, ours)
            if status is not None:
                out[xb.key] = status
        return out


def _evaluate_xbackend(resources: Resources, settings: Settings, xb: XBackend) -> XBackendVerdict:
    spec = xb.spec
    assert spec.external_hostname is not None  # guaranteed by the model for type ExternalHostname
    hostname = spec.external_hostname.hostname
    name = f"xbackend/{xb.namespace}/{xb.name}"

    def refused(accepted_reason: str, message: str, resolved_reason: str | None = None) -> XBackendVerdict:
        conds = [(st.ACCEPTED, False, accepted_reason, message)]
        if resolved_reason:
            conds.append((st.RESOLVED_REFS, False, resolved_reason, message))
        else:
            conds.append((st.RESOLVED_REFS, True, st.R_RESOLVED_REFS, "All references resolved"))
        return XBackendVerdict(None, (), tuple(conds))

    why_not = egress.refused_hostname(hostname)
    if why_not is not None:
        return refused(st.R_UNSUPPORTED_VALUE, why_not)
    mode = spec.tls.mode if spec.tls else "None"
    if spec.protocol == "H2C" and mode != "None":
        return refused(
            st.R_INVALID,
            "protocol H2C is HTTP/2 over plaintext and cannot be combined with TLS; "
            "use HTTP2 for HTTP/2 over TLS",
        )
    upstream_tls: ir.UpstreamTLS | None = None
    secrets: list[ir.Secret] = []
    if spec.tls is not None and mode != "None":
        prefix = f"xbackend/{xb.namespace}/{xb.name}"
        result = tls.server_validation(
            resources,
            settings,
            namespace=xb.namespace,
            validation=spec.tls.validation,
            default_hostname=hostname,
            secret_prefix=prefix,
        )
        if isinstance(result, tls.TlsProblem):
            return refused(result.accepted_reason, result.message, result.resolved_reason)
        upstream_tls = result.tls
        secrets.extend(result.secrets)
        if spec.tls.client_certificate_ref is not None:
            cert = tls.client_certificate(
                resources,
                from_kind="XBackend",
                from_group=XBACKEND_GROUP,
                namespace=xb.namespace,
                ref=spec.tls.client_certificate_ref,
                secret_prefix=prefix,
            )
            if isinstance(cert, tls.TlsProblem):
                return refused(cert.accepted_reason, cert.message, cert.resolved_reason)
            secrets.append(cert)
            upstream_tls = dataclasses.replace(upstream_tls, client_certificate=cert.name)
    upstream = ir.Upstream(
        name=name,
        destination=ir.DnsName(hostname, spec.port.port),
        protocol=_protocol(spec.protocol, tls_on=upstream_tls is not None),
        tls=upstream_tls,
        host_header=None if spec.protocol == "TCP" else hostname,
    )
    if upstream_tls is None:
        message = (
            f"Traffic to {hostname}:{spec.port.port} is sent unencrypted (tls.mode None); "
            "set tls.mode ServerOnly to encrypt and verify it"
        )
    else:
        names = ", ".join(san.value for san in upstream_tls.subject_alt_names)
        message = (
            f"Traffic to {hostname}:{spec.port.port} uses TLS with SNI {upstream_tls.sni}; "
            f"the certificate must name {names}"
        )
    conds = (
        (st.ACCEPTED, True, st.R_ACCEPTED, message),
        (st.RESOLVED_REFS, True, st.R_RESOLVED_REFS, "All references resolved"),
    )
    return XBackendVerdict(upstream, tuple(secrets), conds)


def _protocol(protocol: str | None, *, tls_on: bool) -> ir.UpstreamProtocol:
    """What is spoken to an XBackend: raw bytes for ``TCP`` (TCPRoutes only), else an HTTP version.

    ``HTTP2`` is HTTP/2 only: over TLS with ALPN ``h2``, in plaintext h2c with
    prior knowledge; a server that cannot speak it fails the request, there is
    no fallback to HTTP/1.1. ``H2C`` is the plaintext half of that (with TLS
    it never gets here). ``HTTP11`` is HTTP/1.1 only. Unset, ``HTTP`` and
    ``MCP`` (streamable HTTP is plain HTTP) let ALPN choose over TLS and
    speak HTTP/1.1 in plaintext, where nothing can negotiate.
    """
    if protocol == "TCP":
        return ir.UpstreamProtocol.TCP
    if protocol in ("HTTP2", "H2C"):
        return ir.UpstreamProtocol.HTTP2
    if protocol == "HTTP11":
        return ir.UpstreamProtocol.HTTP1
    return ir.UpstreamProtocol.AUTO if tls_on else ir.UpstreamProtocol.HTTP1
