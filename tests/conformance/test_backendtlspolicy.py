"""BackendTLSPolicy conformance cases (``gateway.networking.k8s.io/v1``), from the specification.

The Service ``backendtlspolicy-test`` is served by a TLS echo server whose
certificate (from the module's CA, trusted through the ConfigMap
``backend-tls-checks-certificate``) names ``abc.example.com`` and
``san.example.com``; its answer says which SNI it saw. Requests reach it
through the plain HTTP listener of the ``same-namespace`` Gateway, so these
cases depend on nothing but upstream TLS origination.
"""

from __future__ import annotations

import pytest

from .harness import (
    INFRA_NS,
    Case,
    Conformance,
    Exchange,
    Expect,
    GatewayStatus,
    PolicyStatus,
    Request,
    RouteStatus,
    Seen,
    Step,
    params,
    run_case,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")

HARNESS = {"tls_backends": True}

BTP = "backendtlspolicy-test"
ROUTE = """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: backendtlspolicy-route, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{{name: same-namespace}}]
  rules:
  - matches: [{{path: {{type: PathPrefix, value: /backendTLS}}}}]
    backendRefs: [{{name: {service}, port: 443}}]
"""
POLICY = """
---
apiVersion: gateway.networking.k8s.io/v1
kind: BackendTLSPolicy
metadata: {{name: {name}, namespace: gateway-conformance-infra, generation: {generation}}}
spec:
  targetRefs: [{{group: "", kind: Service, name: {service}}}]
  validation:
    caCertificateRefs: [{ca_ref}]
    hostname: {hostname}
{extra}
"""
GOOD_CA = "{group: '', kind: ConfigMap, name: backend-tls-checks-certificate}"


def policy(
    name: str = "normative-test-backendtlspolicy",
    *,
    service: str = BTP,
    ca_ref: str = GOOD_CA,
    hostname: str = "abc.example.com",
    extra: str = "",
    generation: int = 1,
) -> str:
    return POLICY.format(
        name=name, service=service, ca_ref=ca_ref, hostname=hostname, extra=extra, generation=generation
    )


def sans(*names: str) -> str:
    items = ", ".join(f"{{type: Hostname, hostname: {n}}}" for n in names)
    return f"    subjectAltNames: [{items}]"


def second_service(h: Conformance) -> str:
    """``backendtlspolicy-other``: another Service in front of the same TLS pod."""
    pod = h.pod(BTP)
    return f"""
---
apiVersion: v1
kind: Service
metadata: {{name: backendtlspolicy-other, namespace: gateway-conformance-infra}}
spec:
  ports: [{{name: https, port: 443, targetPort: {pod.port}}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: backendtlspolicy-other-1
  namespace: gateway-conformance-infra
  labels: {{kubernetes.io/service-name: backendtlspolicy-other}}
addressType: IPv4
ports: [{{name: https, port: {pod.port}}}]
endpoints: [{{addresses: [{pod.address}]}}]
"""


def through_tls(sni: str = "abc.example.com") -> Exchange:
    """Answered by the TLS backend, which saw the gateway's TLS with SNI ``sni``."""
    return Exchange(Request(path="/backendTLS"), Expect(backend=BTP, seen=Seen(sni=sni, path="/backendTLS")))


REFUSED = Exchange(Request(path="/backendTLS"), Expect(server_error=True))


def accepted(name: str = "normative-test-backendtlspolicy", generation: int | None = None) -> PolicyStatus:
    return PolicyStatus(
        "BackendTLSPolicy", name, {"Accepted": "True", "ResolvedRefs": "True"}, generation=generation
    )


CASES = [
    Case(
        "BackendTLSPolicy",
        ROUTE.format(service=BTP) + policy(),
        statuses=(RouteStatus("backendtlspolicy-route"), accepted()),
        exchanges=(through_tls(),),
    ),
    Case(
        "BackendTLSPolicySANValidation",
        # With subjectAltNames, the certificate must carry one of them (hostname only sets SNI).
        lambda h: (
            ROUTE.format(service=BTP)
            + """---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: backendtlspolicy-route-wrong-san, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /wrong-san}}]
    backendRefs: [{name: backendtlspolicy-other, port: 443}]
"""
            + second_service(h)
            + policy("san-matches", extra=sans("san.example.com"))
            + policy("san-does-not-match", service="backendtlspolicy-other", extra=sans("wrong.example.com"))
        ),
        statuses=(accepted("san-matches"), accepted("san-does-not-match")),
        exchanges=(
            through_tls(),
            Exchange(Request(path="/wrong-san"), Expect(server_error=True)),
        ),
    ),
    Case(
        "BackendTLSPolicyHostnameMismatch",
        # The certificate does not name validation.hostname: no connection, never plaintext.
        ROUTE.format(service=BTP) + policy(hostname="not-in-the-certificate.example.com"),
        statuses=(accepted(),),
        exchanges=(REFUSED,),
    ),
    Case(
        "BackendTLSPolicyInvalidCACertificateRef",
        ROUTE.format(service=BTP) + policy(ca_ref="{group: '', kind: ConfigMap, name: does-not-exist}"),
        statuses=(
            PolicyStatus(
                "BackendTLSPolicy",
                "normative-test-backendtlspolicy",
                {
                    "Accepted": ("False", "NoValidCACertificate"),
                    "ResolvedRefs": ("False", "InvalidCACertificateRef"),
                },
            ),
        ),
        exchanges=(REFUSED,),
    ),
    Case(
        "BackendTLSPolicyInvalidKind",
        ROUTE.format(service=BTP)
        + policy(ca_ref="{group: '', kind: NotAConfigMap, name: backend-tls-checks-certificate}"),
        statuses=(
            PolicyStatus(
                "BackendTLSPolicy",
                "normative-test-backendtlspolicy",
                {"Accepted": ("False", "NoValidCACertificate"), "ResolvedRefs": ("False", "InvalidKind")},
            ),
        ),
        exchanges=(REFUSED,),
    ),
    Case(
        "BackendTLSPolicyConflictResolution",
        # Two policies for one Service: the first by namespace/name (same creation time) wins,
        # the other is not accepted (reason Conflicted).
        ROUTE.format(service=BTP)
        + policy("a-policy-wins")
        + policy("b-policy-conflicts", hostname="san.example.com"),
        statuses=(
            accepted("a-policy-wins"),
            PolicyStatus("BackendTLSPolicy", "b-policy-conflicts", {"Accepted": ("False", "Conflicted")}),
        ),
        exchanges=(through_tls("abc.example.com"),),
    ),
    Case(
        "BackendTLSPolicyObservedGenerationBump",
        ROUTE.format(service=BTP) + policy(generation=1),
        statuses=(accepted(generation=1),),
        exchanges=(through_tls(),),
        steps=(
            Step(
                ROUTE.format(service=BTP) + policy(generation=2, hostname="san.example.com"),
                statuses=(accepted(generation=2),),
                exchanges=(through_tls("san.example.com"),),
            ),
        ),
    ),
]

CLIENT_CERT_GW = "gateway-tls-backend-client-certificate"
CLIENT_CERT_BACKEND = "tls-backend-with-client-cert-validation"
BACKEND_CLIENT_CERTIFICATE = """
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gateway-tls-backend-client-certificate, namespace: gateway-conformance-infra}}
spec:
  gatewayClassName: gateway-conformance
  listeners: [{{name: http, port: 80, protocol: HTTP, allowedRoutes: {{namespaces: {{from: Same}}}}}}]
{tls}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: gateway-tls-backend-client-certificate, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{{name: gateway-tls-backend-client-certificate}}]
  hostnames: [abc.example.com]
  rules:
  - matches: [{{path: {{type: Exact, value: /}}}}]
    backendRefs: [{{group: "", kind: Service, name: tls-backend-with-client-cert-validation, port: 443}}]
"""
WITH_CLIENT_CERT = """  tls:
    backend:
      clientCertificateRef: {group: "", kind: Secret, name: tls-checks-client-certificate}"""


def invalid_backend_tls(name: str, ref: str) -> str:
    return f"""
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: {name}, namespace: gateway-conformance-infra}}
spec:
  gatewayClassName: gateway-conformance
  listeners: [{{name: http, port: 80, protocol: HTTP}}]
  tls: {{backend: {{clientCertificateRef: {ref}}}}}
"""


CASES += [
    Case(
        "GatewayBackendClientCertificateFeature",
        # The backend's pods require a client certificate from the CA of
        # tls-checks-client-certificate: the request passes only if the gateway presents it.
        BACKEND_CLIENT_CERTIFICATE.format(tls=WITH_CLIENT_CERT)
        + policy("gateway-tls-backend-client-certificate-test", service=CLIENT_CERT_BACKEND),
        statuses=(
            GatewayStatus(
                CLIENT_CERT_GW,
                {
                    "Accepted": ("True", "Accepted"),
                    "ResolvedRefs": ("True", "ResolvedRefs"),
                    "Programmed": "True",
                },
            ),
            RouteStatus(CLIENT_CERT_GW, gateway=CLIENT_CERT_GW),
            PolicyStatus(
                "BackendTLSPolicy",
                "gateway-tls-backend-client-certificate-test",
                {"Accepted": "True", "ResolvedRefs": "True"},
                gateway=CLIENT_CERT_GW,
            ),
        ),
        exchanges=(
            Exchange(
                Request(host="abc.example.com", gateway=CLIENT_CERT_GW),
                Expect(backend=CLIENT_CERT_BACKEND, seen=Seen(sni="abc.example.com")),
            ),
        ),
        steps=(
            # Without spec.tls.backend the gateway presents nothing, and the backend refuses it.
            Step(
                BACKEND_CLIENT_CERTIFICATE.format(tls="")
                + policy("gateway-tls-backend-client-certificate-test", service=CLIENT_CERT_BACKEND),
                exchanges=(
                    Exchange(
                        Request(host="abc.example.com", gateway=CLIENT_CERT_GW), Expect(server_error=True)
                    ),
                ),
            ),
        ),
    ),
    Case(
        "GatewayInvalidTLSBackendConfiguration",
        # Each Gateway's backend client certificate cannot be used: Accepted all the same,
        # ResolvedRefs=False with the reason the Gateway API names.
        invalid_backend_tls("gateway-client-certificate-nonexistent-secret", "{name: does-not-exist}")
        + invalid_backend_tls(
            "gateway-client-certificate-unsupported-kind",
            "{group: '', kind: ConfigMap, name: does-not-matter}",
        )
        + invalid_backend_tls("gateway-client-certificate-malformed-secret", "{name: malformed-certificate}")
        + invalid_backend_tls(
            "gateway-client-certificate-missing-reference-grant",
            "{name: certificate, namespace: gateway-conformance-web-backend}",
        ),
        statuses=tuple(
            GatewayStatus(name, {"Accepted": ("True", "Accepted"), "ResolvedRefs": ("False", reason)})
            for name, reason in (
                ("gateway-client-certificate-nonexistent-secret", "InvalidClientCertificateRef"),
                ("gateway-client-certificate-unsupported-kind", "InvalidClientCertificateRef"),
                ("gateway-client-certificate-malformed-secret", "InvalidClientCertificateRef"),
                ("gateway-client-certificate-missing-reference-grant", "RefNotPermitted"),
            )
        ),
    ),
]


@pytest.mark.parametrize("case", params(CASES))
async def test_case(conformance: Conformance, case: Case) -> None:
    await run_case(conformance, case)


async def test_no_policy_means_no_tls(conformance: Conformance) -> None:
    """Without a policy the gateway speaks plaintext to the port: the TLS backend refuses it (5xx)."""
    h = conformance
    await h.apply("case-no-policy", ROUTE.format(service=BTP))
    try:
        h.check(RouteStatus("backendtlspolicy-route"))
        await h.expect(REFUSED.request, REFUSED.expect)
        assert h.status("BackendTLSPolicy", INFRA_NS, "normative-test-backendtlspolicy") is None
    finally:
        await h.delete("case-no-policy")
