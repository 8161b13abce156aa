"""Backend references: Services (through EndpointSlices) and XBackends, to IR upstreams.

A :class:`BackendResolver` lives for one translation. It resolves each
``backendRef`` of a route, evaluates every XBackend once, decides its egress
guard (or its refusal) from the policies of the Gateways that use it
(:class:`weir.translate.egress.EgressPolicy`, who uses what being known
before resolution: :mod:`weir.translate.users`), and remembers which
Gateways use which XBackend so that the XBackend's ``status.parents`` can be
written per Gateway.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from weir import ir
from weir.api.core_v1 import Pod, Service, ServicePort
from weir.api.gateway_v1 import GROUP as GATEWAY_GROUP
from weir.api.gateway_v1 import BackendRef, Gateway
from weir.api.meta import ObjectKey
from weir.api.xbackend_v1alpha1 import GROUP as XBACKEND_GROUP
from weir.api.xbackend_v1alpha1 import SELECTOR_LABEL, XBACKEND_STATUS_KEYS, XBackend
from weir.resources import Resources
from weir.translate import egress, tls
from weir.translate import status as st
from weir.translate.backendclientcert import gateway_client_certificate
from weir.translate.backendtls import BackendTLSPolicies
from weir.translate.credentials import AppliedCredential, CredentialPolicies
from weir.translate.grants import reference_permitted
from weir.translate.mcppolicy import McpPolicies
from weir.translate.settings import Settings
from weir.translate.traffic import TrafficPolicies

#: Kubernetes' standard application protocols (KEP-3726) weir acts on.
H2C_APP_PROTOCOL = "kubernetes.io/h2c"
WS_APP_PROTOCOL = "kubernetes.io/ws"
WSS_APP_PROTOCOL = "kubernetes.io/wss"


#: XBackend protocols whose exchanges are long-lived: MCP's event streams, gRPC's streaming calls
#: (which carry their own deadline), WebSocket sessions. Routes to them have no request timeout.
STREAMING_PROTOCOLS = ("MCP", "GRPC", "WSS")

#: Route kinds that relay bytes rather than requests: their backends speak raw TCP.
RAW_ROUTE_KINDS = ("TCPRoute", "TLSRoute")
UDP_ROUTE = "UDPRoute"


@dataclass(frozen=True, slots=True)
class RefFailure:
    """A backendRef that does not resolve: the route's ``ResolvedRefs=False`` reason and message."""

    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class Resolved:
    """A backendRef that resolved to an object.

    ``upstream`` is ``None`` when the object exists but cannot be used (for
    example an XBackend whose CA does not load, or a Service whose
    BackendTLSPolicy does not): requests for it get 500, and the object's
    (or the policy's) own status says why. ``streaming`` marks a backend
    whose exchanges are long-lived (an XBackend with protocol ``MCP``, a
    Service port of appProtocol ``kubernetes.io/ws``): routes to it must not
    time them out.
    """

    upstream: ir.Upstream | None
    secrets: tuple[ir.Secret, ...] = ()
    streaming: bool = False
    #: Why the object cannot be used (``upstream`` is ``None``), for the route's own status.
    unusable: str = ""
    #: The session persistence an XBackendTrafficPolicy asks of requests to this backend.
    session: ir.SessionAffinity | None = None
    #: The egress policy refuses the XBackend (its own status says why). ``upstream`` is what it
    #: would be: the route is built as with a usable backend (timeouts, sessions, its status),
    #: but that backend's share fails (500, closed connections), a mirror to it is dropped, and
    #: neither the upstream nor its secrets go into the IR. So too when the egress policy refuses
    #: the token endpoint of the backend's OAuth2 credential (whose status says why): no token can
    #: be had, and requests are never sent without it.
    refused: bool = False
    #: The upstream of the token endpoint of the backend's OAuth2 credential (its XBackend, with the
    #: egress decision for the route's Gateways), to be served with it: no route names it.
    token_upstream: ir.Upstream | None = None


def no_usable_backend(index: int, unusable: list[str], any_usable: bool, outcome: str) -> RefFailure | None:
    """The ``ResolvedRefs=False`` of rule ``index`` when its backends all exist and none can be
    used (``unusable`` says why, one entry per backend; ``outcome``: what requests get then).

    ``BackendNotFound`` is the reason: Gateway API's route reasons have none for "exists but
    unusable", and the XBackend spec uses this one for a reference that names an XBackend it
    cannot use (a port that differs). Upstream conformance for an invalid BackendTLSPolicy
    checks that such a route stays ``Accepted`` and answers 5xx; it does, and now says why."""
    if any_usable or not unusable:
        return None
    return RefFailure(
        st.R_BACKEND_NOT_FOUND,
        f"spec.rules[{index}] has no usable backend: {'; '.join(dict.fromkeys(unusable))}; {outcome}",
    )


@dataclass(frozen=True, slots=True)
class XBackendVerdict:
    """An XBackend evaluated on its own: usable (``upstream``) or why not."""

    upstream: ir.Upstream | None
    secrets: tuple[ir.Secret, ...]
    conditions: tuple[tuple[str, bool, str, str], ...]  # (type, ok, reason, message)


class BackendResolver:
    def __init__(
        self, resources: Resources, settings: Settings, egress_policy: egress.EgressPolicy | None = None
    ) -> None:
        self._resources = resources
        self._settings = settings
        #: Decides each external XBackend's guard when a route resolves it (default: no Gateway
        #: class is known, every XBackend gets weir's own policy).
        self.egress = egress_policy or egress.egress_policy(resources, settings, (), {})
        self._xbackends: dict[ObjectKey, XBackendVerdict] = {}
        self._xbackend_users: dict[ObjectKey, set[ObjectKey]] = defaultdict(set)
        #: Per (XBackend, Gateways of the resolving route): the verdict with the egress decision.
        self._decisions: dict[tuple[ObjectKey, frozenset[ObjectKey]], XBackendVerdict] = {}
        #: Per XBackend: the last decided verdict, the one its status shows.
        self._decided: dict[ObjectKey, XBackendVerdict] = {}
        #: XBackends the egress policy refused, with the secrets their own evaluation resolved.
        self.refused: dict[ObjectKey, tuple[ir.Secret, ...]] = {}
        #: XBackends whose verdict is being made (an OAuth2 token endpoint must not need itself).
        self._evaluating: set[ObjectKey] = set()
        self.tls_policies = BackendTLSPolicies(resources, settings)
        self.credential_policies = CredentialPolicies(resources)
        self.mcp_policies = McpPolicies(resources)
        self.traffic_policies = TrafficPolicies(resources)
        #: This pass's status interner (see :class:`~weir.translate.status.StatusInterner`): every route
        #: kind receives the resolver, so the statuses they write share their equal parts through it.
        self.interner = st.StatusInterner()

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
        but ``TCP``), a ``GRPCRoute`` HTTP/2 (Service ports, always spoken to
        in HTTP/2; XBackends of protocol ``HTTP2`` or ``H2C``, or of
        protocol ``HTTP`` or unset with TLS, where ALPN offers h2), a
        ``TCPRoute`` or ``TLSRoute`` raw TCP (Service ports, XBackends of protocol ``TCP``).
        ``gateways`` are the Gateways the route is attached to; they become
        parents in the status of a referenced XBackend, and ancestors in the
        status of the BackendTLSPolicy of a referenced Service.
        """
        failure = reference_failure(self._resources, route_kind, route_namespace, ref)
        if failure is not None:
            return failure
        namespace = ref.namespace or route_namespace
        if ref.kind == "Service":
            return self._service(route_kind, namespace, ref, gateways)
        return self._xbackend(route_kind, namespace, ref, gateways)

    # ------------------------------------------------------------ Services

    def _service(
        self, route_kind: str, namespace: str, ref: BackendRef, gateways: set[ObjectKey]
    ) -> Resolved | RefFailure:
        """A Service port, with TLS when a BackendTLSPolicy targets it.

        What is spoken to it depends on the route kind and the port's
        ``appProtocol`` (Kubernetes' standard names, KEP-3726):

        - ``TCPRoute``, ``TLSRoute``: raw bytes, an upstream of its own (``.../tcp``).
        - ``GRPCRoute``: HTTP/2, which gRPC needs (the Gateway API lets the
          route kind decide the protocol): an upstream of its own
          (``.../h2``), unless the port already speaks HTTP/2.
        - ``HTTPRoute``: ``kubernetes.io/h2c``: HTTP/2 with prior knowledge
          (with a policy's TLS: HTTP/2 negotiated as ``h2``);
          ``kubernetes.io/ws``: HTTP/1.1, WebSocket upgrades passed through;
          ``kubernetes.io/wss``: the same over TLS, so it needs a policy;
          anything else: HTTP/1.1, or with TLS what ALPN negotiates.
        """
        svc = self._resources.service(namespace, ref.name)
        if svc is None:
            return RefFailure(st.R_BACKEND_NOT_FOUND, f"Service {namespace}/{ref.name} does not exist")
        # A port number may be served over TCP and UDP alike (DNS): UDPRoutes use the UDP one,
        # every other kind the TCP one.
        transport = "UDP" if route_kind == UDP_ROUTE else "TCP"
        port = next((p for p in svc.spec.ports if p.port == ref.port and p.protocol == transport), None)
        if port is None:
            have = ", ".join(f"{p.port}/{p.protocol}" for p in svc.spec.ports) or "none"
            return RefFailure(
                st.R_BACKEND_NOT_FOUND,
                f"Service {namespace}/{ref.name} has no {transport} port {ref.port} (its ports: {have})",
            )
        applied_credential = None  # raw bytes (TCPRoute, TLSRoute, UDPRoute) carry no headers
        traffic = None  # nor retries, nor sessions
        if route_kind == UDP_ROUTE:  # datagrams: no TLS origination either
            name = f"service/{namespace}/{ref.name}/{port.port}/udp"
            endpoints = ir.StaticEndpoints(service_endpoints(self._resources, svc, port))
            return Resolved(ir.Upstream(name=name, destination=endpoints, protocol=ir.UpstreamProtocol.UDP))
        if route_kind not in RAW_ROUTE_KINDS:
            applied_credential = self.credential_policies.for_service_port(svc, port, gateways)
            traffic = self.traffic_policies.for_service(svc, gateways)
        token = applied_credential.verdict.token_endpoint if applied_credential is not None else None
        if token is not None:  # the token endpoint is used by the same Gateways (their egress guard)
            self._xbackend_users[token].update(gateways)
        applied = self.tls_policies.for_port(svc, port, gateways)
        upstream_tls: ir.UpstreamTLS | None = None
        secrets: tuple[ir.Secret, ...] = ()
        if applied is not None:
            if applied.origination is None:  # the policy says why; never plaintext instead
                return Resolved(None, unusable=_policy_refused("BackendTLSPolicy", namespace, ref.name))
            upstream_tls, secrets = applied.origination.tls, applied.origination.secrets
        app_protocol = port.app_protocol
        name = f"service/{namespace}/{ref.name}/{port.port}"
        if upstream_tls is not None:
            presented = self._gateway_client_certificates(gateways)
            if len(presented) > 1:
                named = ", ".join(sorted(f"{k.namespace}/{k.name}" for k in gateways))
                return Resolved(
                    None,
                    unusable=f"Service {namespace}/{ref.name} is reached over TLS from Gateways ({named}) "
                    "that present different client certificates (spec.tls.backend), and one request "
                    "cannot carry both: attach the route to Gateways that present the same one",
                )
            if presented:
                [cert] = presented
                upstream_tls = dataclasses.replace(upstream_tls, client_certificate=cert.name)
                secrets = (*secrets, cert)
                # A cluster per presented certificate: clusters are shared by every Gateway.
                name = f"{name}/client-{cert.name.rsplit('/', 1)[1]}"
        websocket = False
        if route_kind in RAW_ROUTE_KINDS:
            name, protocol = f"{name}/tcp", ir.UpstreamProtocol.TCP
        elif route_kind == "GRPCRoute":
            protocol = ir.UpstreamProtocol.HTTP2
            if app_protocol != H2C_APP_PROTOCOL:
                name = f"{name}/h2"
        elif app_protocol == H2C_APP_PROTOCOL:
            protocol = ir.UpstreamProtocol.HTTP2
        elif app_protocol in (WS_APP_PROTOCOL, WSS_APP_PROTOCOL):
            if app_protocol == WSS_APP_PROTOCOL and upstream_tls is None:
                return RefFailure(
                    st.R_UNSUPPORTED_PROTOCOL,
                    f"Service {namespace}/{ref.name} port {port.port} has appProtocol {WSS_APP_PROTOCOL} "
                    "(WebSocket over TLS), but no BackendTLSPolicy targets it: add one to say how to "
                    f"verify the backend, or use {WS_APP_PROTOCOL}",
                )
            protocol, websocket = ir.UpstreamProtocol.HTTP1, True
        else:
            protocol = ir.UpstreamProtocol.AUTO if upstream_tls is not None else ir.UpstreamProtocol.HTTP1
        upstream = ir.Upstream(
            name=name,
            destination=ir.StaticEndpoints(service_endpoints(self._resources, svc, port)),
            protocol=protocol,
            tls=upstream_tls,
            websocket=websocket,
            retry_budget=traffic.retry_budget if traffic else None,
        )
        if applied_credential is not None:
            with_credential = self._with_credential(upstream, applied_credential, gateways)
            if with_credential is None:
                # The policy (or the token endpoint's XBackend) says why; never without the credential.
                why = _policy_refused("BackendCredentialPolicy", namespace, ref.name)
                return Resolved(None, unusable=why)
            upstream, more = with_credential
            secrets = (*secrets, *more)
        session = traffic.session if traffic else None
        return self._with_token_endpoint(
            Resolved(upstream, secrets, websocket, session=session), token, gateways
        )

    def _with_credential(
        self, upstream: ir.Upstream, applied: AppliedCredential, gateways: set[ObjectKey]
    ) -> tuple[ir.Upstream, tuple[ir.Secret, ...]] | None:
        """``upstream`` with ``applied``'s credential and the secrets that go with it, or ``None``
        when the credential cannot be used.

        An OAuth2 credential also needs its token endpoint's XBackend: usable
        (else ``None``), and used by ``gateways`` from now on, so that it is
        served with their egress guard and shows them as its parents. Its
        secrets (a CA) travel with the credentialed upstream's.
        """
        if not applied.usable:
            return None
        key = applied.verdict.token_endpoint
        if key is None:
            return applied.apply(upstream), applied.secrets
        xb = self._resources.get(XBackend, key.namespace, key.name)
        if xb is None or key in self._evaluating:  # a token endpoint that needs its own token
            return None
        self._evaluating.add(key)
        try:
            token = self.xbackend_verdict(xb)
        finally:
            self._evaluating.discard(key)
        if token.upstream is None:
            return None
        self._xbackend_users[key].update(gateways)
        return applied.apply(upstream, token.upstream), (*applied.secrets, *token.secrets)

    def _with_token_endpoint(
        self, resolved: Resolved, token: ObjectKey | None, gateways: set[ObjectKey]
    ) -> Resolved:
        """``resolved`` with the upstream of ``token``, the token endpoint of its OAuth2 credential,
        decided for ``gateways`` as if their routes named it (its users include them: the users
        pre-pass, :mod:`weir.translate.users`, counts them).

        When the egress policy refuses the token endpoint no token can be had: ``resolved`` is
        then refused too (its share fails, nothing of it goes into the IR; never sent without its
        token), and the token endpoint's status says why.
        """
        upstream = resolved.upstream
        if token is None or upstream is None or upstream.oauth2 is None or resolved.refused:
            return resolved
        verdict = self._xbackends.get(token)  # evaluated when the credential was applied
        if verdict is None or verdict.upstream is None:
            return resolved
        if isinstance(verdict.upstream.destination, ir.DnsName):
            verdict = self._decide(token, verdict, gateways)
            if verdict.upstream is None:
                return dataclasses.replace(resolved, refused=True)
        return dataclasses.replace(resolved, token_upstream=verdict.upstream)

    def _gateway_client_certificates(self, gateways: set[ObjectKey]) -> list[ir.TlsCertificate]:
        """The distinct client certificates ``gateways`` present to TLS backends (their
        ``spec.tls.backend``; a reference that does not resolve presents none)."""
        found: dict[str, ir.TlsCertificate] = {}
        for key in sorted(gateways):
            gw = self._resources.get(Gateway, key.namespace, key.name)
            cert = gateway_client_certificate(self._resources, gw) if gw is not None else None
            if isinstance(cert, ir.TlsCertificate):
                found[cert.name] = cert
        return list(found.values())

    # ------------------------------------------------------------ XBackends

    def _xbackend(
        self, route_kind: str, namespace: str, ref: BackendRef, gateways: set[ObjectKey]
    ) -> Resolved | RefFailure:
        xb = usable_xbackend(self._resources, route_kind, namespace, ref)
        if isinstance(xb, RefFailure):
            return xb
        self._xbackend_users[xb.key].update(gateways)
        # The Gateways become ancestors of the policies; the verdict applies them (once per XBackend).
        credential = self.credential_policies.for_xbackend(xb, gateways)
        token = credential.verdict.token_endpoint if credential is not None else None
        if token is not None:  # the token endpoint is used by the same Gateways (their egress guard)
            self._xbackend_users[token].update(gateways)
        self.mcp_policies.for_xbackend(xb, gateways)
        traffic = self.traffic_policies.for_xbackend(xb, gateways)
        verdict = self.xbackend_verdict(xb)
        streaming = xb.spec.protocol in STREAMING_PROTOCOLS
        session = traffic.session if traffic else None
        if verdict.upstream is not None and isinstance(verdict.upstream.destination, ir.DnsName):
            decided = self._decide(xb.key, verdict, gateways)
            if decided.upstream is None:
                return Resolved(verdict.upstream, verdict.secrets, streaming, session=session, refused=True)
            verdict = decided
        why = ""
        if verdict.upstream is None:
            failed = next((c for c in verdict.conditions if not c[1]), None)
            detail = f"{failed[0]}=False, {failed[2]}: {failed[3]}" if failed else "see its status"
            why = f"XBackend {namespace}/{ref.name} is refused ({detail})"
        resolved = Resolved(
            verdict.upstream, verdict.secrets, streaming=streaming, unusable=why, session=session
        )
        return self._with_token_endpoint(resolved, token, gateways)

    def _decide(self, key: ObjectKey, verdict: XBackendVerdict, gateways: set[ObjectKey]) -> XBackendVerdict:
        """``verdict`` (usable, of an external hostname) with the egress decision for its users: the
        upstream with its guard and resolver, or a refusal (``Accepted=False``, no upstream)."""
        # With complete users every route gets the same decision: one per XBackend.
        users = frozenset() if self.egress.complete else frozenset(gateways)
        found = self._decisions.get((key, users))
        if found is None:
            assert verdict.upstream is not None and isinstance(verdict.upstream.destination, ir.DnsName)
            destination = verdict.upstream.destination
            decision = self.egress.decide(key, destination.hostname, users)
            found = self._decisions[key, users] = self._settled(key, verdict, decision)
        self._decided[key] = found
        return found

    def _settled(
        self, key: ObjectKey, verdict: XBackendVerdict, decision: egress.Decision
    ) -> XBackendVerdict:
        """``verdict`` after ``decision``; a refusal is recorded in :attr:`refused`."""
        upstream = verdict.upstream
        assert upstream is not None and isinstance(upstream.destination, ir.DnsName)
        if decision.refusal is not None:
            reason, message = decision.refusal
            self.refused[key] = verdict.secrets
            conditions = (
                (st.ACCEPTED, False, reason, message),
                (st.RESOLVED_REFS, True, st.R_RESOLVED_REFS, "All references resolved"),
            )
            return XBackendVerdict(None, (), conditions)
        self.refused.pop(key, None)
        upstream = dataclasses.replace(
            upstream,
            destination=dataclasses.replace(upstream.destination, dns=decision.dns),
            egress_guard=decision.guard,
        )
        return dataclasses.replace(verdict, upstream=upstream)

    def xbackend_verdict(self, xb: XBackend) -> XBackendVerdict:
        if xb.key not in self._xbackends:
            verdict = _evaluate_xbackend(self._resources, self._settings, xb)
            self._xbackends[xb.key] = self._with_policies(xb, verdict)
        return self._xbackends[xb.key]

    def _with_policies(self, xb: XBackend, verdict: XBackendVerdict) -> XBackendVerdict:
        """``verdict`` with the BackendCredentialPolicy and BackendMCPPolicy that apply to ``xb``.

        An unusable credential policy makes the XBackend unusable too (its
        requests are answered 500, never sent without the credential); its
        status stays its own, with a pointer to the policy.
        """
        upstream = verdict.upstream
        if upstream is None:
            return verdict
        tools = self.mcp_policies.for_xbackend(xb)
        if tools is not None:
            upstream = dataclasses.replace(upstream, mcp_tools=tools)
        traffic = self.traffic_policies.for_xbackend(xb)
        if traffic is not None and traffic.retry_budget is not None:
            upstream = dataclasses.replace(upstream, retry_budget=traffic.retry_budget)
        applied = self.credential_policies.for_xbackend(xb)
        if applied is None:
            return dataclasses.replace(verdict, upstream=upstream)
        self._evaluating.add(xb.key)
        try:
            with_credential = self._with_credential(upstream, applied, set())
        finally:
            self._evaluating.discard(xb.key)
        if with_credential is None:
            (kind, ok, reason, message), *rest = verdict.conditions
            policy = f"{applied.policy.KIND} {applied.policy.namespace}/{applied.policy.name}"
            message += f". Requests to it are refused (500) until {policy} can be used: see its status"
            token = applied.verdict.token_endpoint
            if applied.usable and token is not None:
                message += f" and that of its token endpoint, XBackend {token.namespace}/{token.name}"
            return XBackendVerdict(None, (), ((kind, ok, reason, message), *rest))
        upstream, secrets = with_credential
        return XBackendVerdict(upstream, (*verdict.secrets, *secrets), verdict.conditions)

    def apply_egress_policy(self) -> dict[str, tuple[ir.Upstream | None, tuple[ir.Secret, ...]]]:
        """Decide again, with the users registered now (:meth:`register_users`), every external
        XBackend resolved so far; for :mod:`weir.translate.incremental`, which learns the complete
        users of an XBackend only after its routes resolved it (a full pass knows them before).

        Returns, by upstream name, the upstream to serve (with its egress guard), or ``None``
        with the secrets that were resolved for it, when the policy refuses it.
        """
        settled: dict[str, tuple[ir.Upstream | None, tuple[ir.Secret, ...]]] = {}
        for key, users in sorted(self._xbackend_users.items()):
            verdict = self._xbackends.get(key)
            if verdict is None or verdict.upstream is None:
                continue
            upstream = verdict.upstream
            if not isinstance(upstream.destination, ir.DnsName):
                # EndpointSelector: Pods in the cluster, whose addresses their owners choose (as for
                # Services); the egress guard is for external hostnames.
                settled[upstream.name] = (upstream, verdict.secrets)
                continue
            decision = self.egress.decide_for(upstream.destination.hostname, users)
            final = self._decided[key] = self._settled(key, verdict, decision)
            settled[upstream.name] = (final.upstream, verdict.secrets)
        return settled

    def register_users(self, xbackend: ObjectKey, gateways: set[ObjectKey]) -> None:
        """Record that routes attached to ``gateways`` resolved ``xbackend``, as :meth:`resolve` does
        (for :mod:`weir.translate.incremental`, which knows users without resolving every route)."""
        self._xbackend_users[xbackend].update(gateways)

    def xbackend_statuses(
        self, controller_name: str, only: set[ObjectKey] | None = None
    ) -> dict[ObjectKey, dict[str, Any]]:
        """``status.parents`` for every XBackend (or those in ``only``), one entry per Gateway whose
        routes use it.

        Entries written by other controllers are kept; weir's entries for
        Gateways that no longer use the XBackend disappear. At most 32. The
        status has the shape of the object (:attr:`XBackend.shape`):
        ``parents[].parentRef`` for v1.6, ``ancestors[].ancestorRef`` for
        main, never both (a provider whose CRD has the other shape converts
        it with :func:`weir.api.xbackend_v1alpha1.reshape_xbackend_status`).
        """
        out: dict[ObjectKey, dict[str, Any]] = {}
        if only is None:
            xbackends: Iterable[XBackend] = self._resources.xbackends
        else:
            found = (self._resources.get(XBackend, key.namespace, key.name) for key in sorted(only))
            xbackends = [xb for xb in found if xb is not None]
        for xb in xbackends:
            users = sorted(self._xbackend_users.get(xb.key, ()))
            verdict = self._decided.get(xb.key) or self.xbackend_verdict(xb)
            gen = xb.metadata.generation
            conditions = tuple(st.condition(t, ok, r, m, gen) for t, ok, r, m in verdict.conditions)
            status_list, status_ref = XBACKEND_STATUS_KEYS[xb.shape]
            entry = st.AncestorStatus if status_ref == st.AncestorStatus.REF_KEY else st.ParentStatus
            ours = [
                entry(
                    (
                        ("group", GATEWAY_GROUP),
                        ("kind", "Gateway"),
                        ("namespace", gw.namespace),
                        ("name", gw.name),
                    ),
                    controller_name,
                    conditions,
                )
                for gw in users
            ]
            # No interner: an XBackend's Accepted message names its hostname and port (one of a kind).
            status = st.parents_status(xb.status, controller_name, ours, key=status_list)
            if status is not None:
                out[xb.key] = status
        return out


def reference_failure(
    resources: Resources, route_kind: str, route_namespace: str, ref: BackendRef
) -> RefFailure | None:
    """Why ``ref`` (in a route of ``route_kind`` in ``route_namespace``) cannot refer to its object at
    all: a kind weir does not resolve, or one not served, or a namespace no ReferenceGrant opens."""
    namespace = ref.namespace or route_namespace
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
    if ref.kind in resources.unserved:
        return RefFailure(
            st.R_INVALID_KIND,
            f"backendRef kind {ref.group}/{ref.kind} is not served by this cluster (its CRD is not "
            "installed); install the experimental Gateway API CRDs, or refer to a Service",
        )
    if not reference_permitted(
        resources,
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
            f"{ref.kind} {namespace}/{ref.name} is in another namespace and no ReferenceGrant in {namespace} "
            f"allows {route_kind}s from {route_namespace} to refer to it",
        )
    return None


def credential_token_endpoint(
    resources: Resources, policies: CredentialPolicies, route_kind: str, route_namespace: str, ref: BackendRef
) -> ObjectKey | None:
    """The token endpoint (an XBackend) of the OAuth2 credential :meth:`BackendResolver.resolve`
    would give the backend ``ref`` names (a Service port or an XBackend that a route of
    ``route_kind`` can use), if any: the route's Gateways are users of that XBackend too."""
    if route_kind in RAW_ROUTE_KINDS or route_kind == UDP_ROUTE:  # raw bytes carry no credential
        return None
    if reference_failure(resources, route_kind, route_namespace, ref) is not None:
        return None
    namespace = ref.namespace or route_namespace
    applied: AppliedCredential | None = None
    if ref.kind == "Service":
        svc = resources.service(namespace, ref.name)
        ports = svc.spec.ports if svc is not None else ()
        port = next((p for p in ports if p.port == ref.port and p.protocol == "TCP"), None)
        if svc is not None and port is not None:
            applied = policies.for_service_port(svc, port, set())
    else:
        xb = usable_xbackend(resources, route_kind, namespace, ref)
        if not isinstance(xb, RefFailure):
            applied = policies.for_xbackend(xb)
    return applied.verdict.token_endpoint if applied is not None else None


def used_xbackend(
    resources: Resources, route_kind: str, route_namespace: str, ref: BackendRef
) -> XBackend | None:
    """The XBackend ``ref`` makes its route a user of, if any: one :meth:`BackendResolver.resolve`
    would resolve (and count the route's Gateways among its users) rather than refuse the reference."""
    if (ref.group, ref.kind) != (XBACKEND_GROUP, "XBackend"):
        return None
    if reference_failure(resources, route_kind, route_namespace, ref) is not None:
        return None
    xb = usable_xbackend(resources, route_kind, ref.namespace or route_namespace, ref)
    return None if isinstance(xb, RefFailure) else xb


def usable_xbackend(
    resources: Resources, route_kind: str, namespace: str, ref: BackendRef
) -> XBackend | RefFailure:
    """The XBackend ``ref`` names in ``namespace``, or why a route of ``route_kind`` cannot use it
    (it does not exist, its port differs, its protocol is not the route kind's)."""
    xb = resources.get(XBackend, namespace, ref.name)
    if xb is None:
        return RefFailure(st.R_BACKEND_NOT_FOUND, f"XBackend {namespace}/{ref.name} does not exist")
    if route_kind == UDP_ROUTE:
        return RefFailure(
            st.R_UNSUPPORTED_PROTOCOL,
            f"XBackend {namespace}/{ref.name} cannot take UDP: XBackends speak TCP-based protocols "
            "(external UDP egress is not guarded by weir); use a Service",
        )
    if ref.port is not None and ref.port != xb.spec.port_number:
        return RefFailure(
            st.R_BACKEND_NOT_FOUND,
            f"backendRef port {ref.port} does not match XBackend {namespace}/{ref.name} "
            f"port {xb.spec.port_number}; omit the port or make them equal",
        )
    if route_kind == "GRPCRoute" and not _carries_grpc(xb):
        protocol = xb.spec.protocol or "unset (HTTP)"
        mode = xb.spec.tls.mode if xb.spec.tls else "None"
        return RefFailure(
            st.R_UNSUPPORTED_PROTOCOL,
            f"XBackend {namespace}/{ref.name} has protocol {protocol} with tls.mode {mode}, which cannot "
            "carry gRPC: gRPC needs HTTP/2; set the protocol to HTTP2 (or H2C in plaintext)",
        )
    if route_kind in RAW_ROUTE_KINDS and xb.spec.protocol != "TCP":
        protocol = xb.spec.protocol or "unset (HTTP)"
        return RefFailure(
            st.R_UNSUPPORTED_PROTOCOL,
            f"XBackend {namespace}/{ref.name} has protocol {protocol}, which a {route_kind} cannot use; "
            f"a {route_kind} relays raw bytes: set the XBackend's protocol to TCP, or use an HTTPRoute",
        )
    if route_kind not in RAW_ROUTE_KINDS and xb.spec.protocol == "TCP":
        return RefFailure(
            st.R_UNSUPPORTED_PROTOCOL,
            f"XBackend {namespace}/{ref.name} has protocol TCP, which an HTTPRoute cannot use; "
            "use a TCPRoute on a TCP listener",
        )
    return xb


def _policy_refused(policy: str, namespace: str, service: str) -> str:
    return (
        f"Service {namespace}/{service} cannot be used: its {policy} is not accepted "
        "(see the policy's status)"
    )


def service_endpoints(resources: Resources, svc: Service, port: ServicePort) -> tuple[ir.Endpoint, ...]:
    """The endpoints of ``svc`` for ``port``, from every slice, matched to slice ports by name.

    As kube-proxy does: the ready endpoints; when there are none, the
    terminating ones that still serve, so that connections keep working
    while a whole Service rolls over (they would otherwise all fail,
    though the old pods still answer). Endpoints that neither are ready
    nor serve are never used. FQDN slices are not read.
    """
    ready: set[tuple[str, int]] = set()
    draining: set[tuple[str, int]] = set()
    wanted = port.name or ""
    for eps in resources.endpoint_slices(svc.namespace, svc.name):
        if eps.address_type == "FQDN":
            continue
        slice_port = next(
            (p for p in eps.ports if (p.name or "") == wanted and p.protocol == port.protocol and p.port),
            None,
        )
        if slice_port is None or slice_port.port is None:
            continue
        for endpoint in eps.endpoints:
            if endpoint.is_ready:
                ready.update((addr, slice_port.port) for addr in endpoint.addresses)
            elif endpoint.is_serving and endpoint.is_terminating:
                draining.update((addr, slice_port.port) for addr in endpoint.addresses)
    return tuple(ir.Endpoint(a, p) for a, p in sorted(ready or draining))


def selected_endpoints(resources: Resources, xb: XBackend) -> tuple[ir.Endpoint, ...]:
    """The endpoints of an EndpointSelector XBackend, on its port, in its namespace only.

    The ready Pods of the namespace whose labels include every
    ``matchLabels`` pair (files), and the endpoints of the Services of the
    namespace labelled :data:`SELECTOR_LABEL` with the XBackend's name
    (a cluster: the headless Service made for it, whose EndpointSlices say
    which Pods are ready, as for any Service). Pods of other namespaces are
    never selected.
    """
    selector = xb.spec.endpoint_selector
    assert selector is not None
    port = xb.spec.port_number
    found: set[tuple[str, int]] = set()
    for pod in resources.all(Pod):
        if pod.namespace != xb.namespace or not pod.ready:
            continue
        labels = pod.metadata.labels
        if all(labels.get(k) == v for k, v in selector.match_labels.items()):
            found.update((address, port) for address in pod.addresses)
    for svc in resources.all(Service):
        if svc.namespace == xb.namespace and svc.metadata.labels.get(SELECTOR_LABEL) == xb.name:
            for svc_port in svc.spec.ports:
                found.update((e.address, e.port) for e in service_endpoints(resources, svc, svc_port))
    return tuple(ir.Endpoint(a, p) for a, p in sorted(found))


def _evaluate_xbackend(resources: Resources, settings: Settings, xb: XBackend) -> XBackendVerdict:
    spec = xb.spec
    name = f"xbackend/{xb.namespace}/{xb.name}"

    def refused(accepted_reason: str, message: str, resolved_reason: str | None = None) -> XBackendVerdict:
        conds = [(st.ACCEPTED, False, accepted_reason, message)]
        if resolved_reason:
            conds.append((st.RESOLVED_REFS, False, resolved_reason, message))
        else:
            conds.append((st.RESOLVED_REFS, True, st.R_RESOLVED_REFS, "All references resolved"))
        return XBackendVerdict(None, (), tuple(conds))

    selector = spec.endpoint_selector
    if spec.external_hostname is not None:
        hostname: str | None = spec.external_hostname.hostname
        why_not = egress.refused_hostname(spec.external_hostname.hostname)
        if why_not is not None:
            return refused(st.R_UNSUPPORTED_VALUE, why_not)
    else:  # type EndpointSelector (main shape): Pods in the cluster; the egress guard is for external names
        hostname = None
        tls_validation = spec.tls.validation if spec.tls is not None else None
        if spec.tls is not None and spec.tls.mode != "None" and tls_validation is None:
            return refused(
                st.R_INVALID,
                "type EndpointSelector with TLS needs tls.validation (its hostname is the SNI and the name "
                "the Pods' certificate must carry): there is no external hostname to default to",
            )
    mode = spec.tls.mode if spec.tls else "None"
    if spec.protocol == "H2C" and mode != "None":
        return refused(
            st.R_INVALID,
            "protocol H2C is HTTP/2 over plaintext and cannot be combined with TLS; "
            "use HTTP2 for HTTP/2 over TLS",
        )
    if spec.protocol == "WSS" and mode == "None":
        # main's schema takes tls.mode None as "tls is set"; WSS is WebSocket over TLS all the same.
        return refused(
            st.R_INVALID,
            "protocol WSS is WebSocket over TLS, but tls.mode is None (plaintext); "
            "set tls.mode ServerOnly (or ClientAndServer)",
        )
    upstream_tls: ir.UpstreamTLS | None = None
    secrets: list[ir.Secret] = []
    if spec.tls is not None and mode != "None":
        prefix = f"xbackend/{xb.namespace}/{xb.name}"
        assert spec.tls.validation is not None or hostname is not None  # checked above
        result = tls.server_validation(
            resources,
            settings,
            namespace=xb.namespace,
            validation=spec.tls.validation,
            default_hostname=hostname or "",
        )
        if isinstance(result, tls.TlsProblem) or result.skipped:
            # An XBackend trusts exactly what it names: one unusable CA reference refuses it.
            problem = result if isinstance(result, tls.TlsProblem) else result.skipped[0]
            return refused(problem.accepted_reason, problem.message, problem.resolved_reason)
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
    destination: ir.DnsName | ir.StaticEndpoints
    if hostname is not None:
        destination = ir.DnsName(hostname, spec.port_number)
        target = f"{hostname}:{spec.port_number}"
    else:
        assert selector is not None
        destination = ir.StaticEndpoints(selected_endpoints(resources, xb))
        # Not how many are ready: that changes with every rollout, and status would follow.
        chosen = ",".join(f"{k}={v}" for k, v in sorted(selector.match_labels.items()))
        target = f"the Pods of {xb.namespace} selected by {chosen}, port {spec.port_number},"
    upstream = ir.Upstream(
        name=name,
        destination=destination,
        protocol=_protocol(spec.protocol, tls_on=upstream_tls is not None),
        tls=upstream_tls,
        host_header=None if spec.protocol == "TCP" else hostname,
        websocket=spec.protocol == "WSS",
        grpc=spec.protocol == "GRPC",
    )
    if upstream_tls is None:
        message = (
            f"Traffic to {target} is sent unencrypted (tls.mode None); "
            "set tls.mode ServerOnly to encrypt and verify it"
        )
    else:
        names = ", ".join(san.value for san in upstream_tls.subject_alt_names)
        message = (
            f"Traffic to {target} uses TLS with SNI {upstream_tls.sni}; the certificate must name {names}"
        )
    conds = (
        (st.ACCEPTED, True, st.R_ACCEPTED, message),
        (st.RESOLVED_REFS, True, st.R_RESOLVED_REFS, "All references resolved"),
    )
    return XBackendVerdict(upstream, tuple(secrets), conds)


def _carries_grpc(xb: XBackend) -> bool:
    """Whether what weir speaks to ``xb`` can be HTTP/2 (see :func:`_protocol`)."""
    if xb.spec.protocol in ("HTTP2", "H2C", "GRPC"):
        return True
    tls_on = xb.spec.tls is not None and xb.spec.tls.mode != "None"
    return xb.spec.protocol in (None, "HTTP") and tls_on


def _protocol(protocol: str | None, *, tls_on: bool) -> ir.UpstreamProtocol:
    """What is spoken to an XBackend: raw bytes for ``TCP`` (TCPRoutes only), else an HTTP version.

    ``HTTP2`` is HTTP/2 only: over TLS with ALPN ``h2``, in plaintext h2c with
    prior knowledge; a server that cannot speak it fails the request, there is
    no fallback to HTTP/1.1. ``H2C`` is the plaintext half of that (with TLS
    it never gets here). ``GRPC`` is gRPC, which is HTTP/2 (ALPN ``h2``, or
    h2c in plaintext). ``HTTP11`` is HTTP/1.1 only, and so is ``WSS``: a
    WebSocket session starts as an HTTP/1.1 upgrade (RFC 6455), over TLS.
    Unset, ``HTTP`` and ``MCP`` (streamable HTTP is plain HTTP) let ALPN
    choose over TLS and speak HTTP/1.1 in plaintext, where nothing can negotiate.
    """
    if protocol == "TCP":
        return ir.UpstreamProtocol.TCP
    if protocol in ("HTTP2", "H2C", "GRPC"):
        return ir.UpstreamProtocol.HTTP2
    if protocol in ("HTTP11", "WSS"):
        return ir.UpstreamProtocol.HTTP1
    return ir.UpstreamProtocol.AUTO if tls_on else ir.UpstreamProtocol.HTTP1
