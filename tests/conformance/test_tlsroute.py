"""TLSRoute conformance cases (``gateway.networking.k8s.io/v1``), written from the specification.

The TLS backends (``tls-backend`` in the infra and app-backend namespaces)
are echo servers presenting a certificate for ``abc.example.com`` from the
module's CA and saying, in their answer, which SNI they saw. A passthrough
request is therefore verified by the client against that certificate: the
answer can only come from the backend itself.
"""

from __future__ import annotations

import pytest

from .harness import (
    Case,
    Conformance,
    Exchange,
    Expect,
    GatewayStatus,
    ListenerStatus,
    Request,
    RouteStatus,
    Seen,
    params,
    run_case,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")

HARNESS = {"tls_backends": True}

PASSTHROUGH_GATEWAY = """
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: {name}, namespace: gateway-conformance-infra}}
spec:
  gatewayClassName: gateway-conformance
  listeners:
  - name: tls
    port: 443
    protocol: TLS
    {hostname}
    tls: {{mode: Passthrough}}
    allowedRoutes: {{namespaces: {{from: Same}}, kinds: [{{kind: TLSRoute}}]}}
"""
TLS_ROUTE = """
---
apiVersion: gateway.networking.k8s.io/v1
kind: TLSRoute
metadata: {{name: {name}, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{{name: {gateway}}}]
  hostnames: [{hostnames}]
  rules:
  - backendRefs: [{{name: {backend}, port: {port}{namespace}}}]
"""
GRANT_TO_APP_TLS_BACKEND = """
---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: tls-backend, namespace: gateway-conformance-app-backend}
spec:
  from: [{group: gateway.networking.k8s.io, kind: TLSRoute, namespace: gateway-conformance-infra}]
  to: [{group: "", kind: Service, name: tls-backend}]
"""


def tls_route(
    name: str,
    gateway: str,
    hostnames: str = "abc.example.com",
    backend: str = "tls-backend",
    port: int = 443,
    namespace: str | None = None,
) -> str:
    return TLS_ROUTE.format(
        name=name,
        gateway=gateway,
        hostnames=hostnames,
        backend=backend,
        port=port,
        namespace=f", namespace: {namespace}" if namespace else "",
    )


def tls_request(gateway: str, sni: str = "abc.example.com", path: str = "/") -> Request:
    return Request(host=sni, sni=sni, path=path, scheme="https", port=443, gateway=gateway)


def through_to(
    backend: str, namespace: str = "gateway-conformance-infra", sni: str = "abc.example.com"
) -> Expect:
    """Answered by ``backend`` itself, which saw the client's own TLS (SNI ``sni``)."""
    return Expect(backend=backend, namespace=namespace, seen=Seen(sni=sni))


CASES = [
    Case(
        "TLSRouteSimpleSameNamespace",
        PASSTHROUGH_GATEWAY.format(name="gateway-tlsroute", hostname="")
        + tls_route("gateway-conformance-infra-test", "gateway-tlsroute"),
        statuses=(
            RouteStatus("gateway-conformance-infra-test", kind="TLSRoute", gateway="gateway-tlsroute"),
            GatewayStatus(
                "gateway-tlsroute",
                {"Accepted": "True", "Programmed": "True"},
                listeners={
                    "tls": ListenerStatus(
                        {"Accepted": "True", "ResolvedRefs": "True", "Programmed": "True"},
                        attached=1,
                        only_kinds=("TLSRoute",),
                    )
                },
            ),
        ),
        exchanges=(
            Exchange(tls_request("gateway-tlsroute"), through_to("tls-backend")),
            # No route for this name: the connection is closed, nothing answers.
            Exchange(tls_request("gateway-tlsroute", sni="unknown.example.com"), Expect(error=True)),
        ),
    ),
    Case(
        "TLSRouteListenerHostnameMatching",
        PASSTHROUGH_GATEWAY.format(name="tlsroute-listener-hostname", hostname='hostname: "*.example.com"')
        + tls_route("matches-listener", "tlsroute-listener-hostname", hostnames="abc.example.com")
        + tls_route("does-not-match-listener", "tlsroute-listener-hostname", hostnames="abc.example.org"),
        statuses=(
            RouteStatus("matches-listener", kind="TLSRoute", gateway="tlsroute-listener-hostname"),
            RouteStatus(
                "does-not-match-listener",
                {"Accepted": ("False", "NoMatchingListenerHostname")},
                kind="TLSRoute",
                gateway="tlsroute-listener-hostname",
            ),
            GatewayStatus("tlsroute-listener-hostname", listeners={"tls": ListenerStatus(attached=1)}),
        ),
        exchanges=(Exchange(tls_request("tlsroute-listener-hostname"), through_to("tls-backend")),),
    ),
    Case(
        "TLSRouteInvalidReferenceGrant",
        PASSTHROUGH_GATEWAY.format(name="gateway-tlsroute-referencegrant", hostname="")
        + tls_route(
            "gateway-conformance-infra-test",
            "gateway-tlsroute-referencegrant",
            namespace="gateway-conformance-app-backend",
        ),
        statuses=(
            RouteStatus(
                "gateway-conformance-infra-test",
                {"Accepted": "True", "ResolvedRefs": ("False", "RefNotPermitted")},
                kind="TLSRoute",
                gateway="gateway-tlsroute-referencegrant",
            ),
        ),
        exchanges=(Exchange(tls_request("gateway-tlsroute-referencegrant"), Expect(error=True)),),
    ),
    Case(
        "TLSRouteReferenceGrant",
        PASSTHROUGH_GATEWAY.format(name="gateway-tlsroute-referencegrant", hostname="")
        + tls_route(
            "gateway-conformance-infra-test",
            "gateway-tlsroute-referencegrant",
            namespace="gateway-conformance-app-backend",
        )
        + GRANT_TO_APP_TLS_BACKEND,
        statuses=(
            RouteStatus(
                "gateway-conformance-infra-test", kind="TLSRoute", gateway="gateway-tlsroute-referencegrant"
            ),
        ),
        exchanges=(
            Exchange(
                tls_request("gateway-tlsroute-referencegrant"),
                through_to("tls-backend", "gateway-conformance-app-backend"),
            ),
        ),
    ),
    Case(
        "TLSRouteModeTerminate",
        # A TLS listener in Terminate mode: the gateway ends the client's TLS and relays the
        # bytes in plaintext, so a plain HTTP echo server answers the HTTP inside the TLS.
        """
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gateway-tlsroute-terminate, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: gateway-conformance
  listeners:
  - name: tls
    port: 443
    protocol: TLS
    hostname: abc.example.com
    tls: {mode: Terminate, certificateRefs: [{kind: Secret, name: tls-checks-certificate}]}
    allowedRoutes: {kinds: [{kind: TLSRoute}]}
"""
        + tls_route("terminated", "gateway-tlsroute-terminate", backend="infra-backend-v1", port=8080),
        statuses=(
            RouteStatus("terminated", kind="TLSRoute", gateway="gateway-tlsroute-terminate"),
            GatewayStatus(
                "gateway-tlsroute-terminate",
                listeners={"tls": ListenerStatus({"Programmed": "True"}, attached=1)},
            ),
        ),
        exchanges=(
            Exchange(
                tls_request("gateway-tlsroute-terminate"),
                # The backend got plaintext: no SNI of its own.
                Expect(backend="infra-backend-v1", seen=Seen(sni="", host="abc.example.com")),
            ),
        ),
    ),
    Case(
        "TLSRouteTerminateSimpleSameNamespace",
        # Upstream's manifests: a TLS listener on 8443 in mode Terminate; the backend is a
        # plaintext port, and answers the HTTP the client sent inside its TLS.
        """
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gateway-tlsroute-terminate, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: gateway-conformance
  listeners:
  - name: tlsterminate
    port: 8443
    protocol: TLS
    hostname: tls.example.com
    allowedRoutes: {namespaces: {from: Same}, kinds: [{kind: TLSRoute}]}
    tls: {mode: Terminate, certificateRefs: [{name: tls-terminate-checks-certificate}]}
"""
        + tls_route(
            "gateway-conformance-infra-test",
            "gateway-tlsroute-terminate",
            hostnames="tls.example.com",
            backend="infra-backend-v2",
            port=8080,
        ),
        statuses=(
            RouteStatus(
                "gateway-conformance-infra-test", kind="TLSRoute", gateway="gateway-tlsroute-terminate"
            ),
            GatewayStatus(
                "gateway-tlsroute-terminate",
                {"Accepted": "True", "Programmed": "True"},
                listeners={
                    "tlsterminate": ListenerStatus(
                        {"Accepted": "True", "ResolvedRefs": "True", "Programmed": "True"},
                        attached=1,
                        only_kinds=("TLSRoute",),
                    )
                },
            ),
        ),
        exchanges=(
            Exchange(
                Request(
                    host="tls.example.com", scheme="https", port=8443, gateway="gateway-tlsroute-terminate"
                ),
                Expect(backend="infra-backend-v2", seen=Seen(sni="", host="tls.example.com")),
            ),
            # Another name: no listener serves it, the handshake fails.
            Exchange(
                Request(
                    host="abc.example.com", scheme="https", port=8443, gateway="gateway-tlsroute-terminate"
                ),
                Expect(error=True),
            ),
        ),
    ),
    Case(
        "TLSRouteMixedTerminationSameNamespace",
        # Two TLS listeners on one port, told apart by SNI: tls.example.com terminated by the
        # gateway (the backend gets plaintext), abc.example.com passed through (the backend
        # ends the client's own TLS).
        """
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gateway-tlsroute-mixed-termination, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: gateway-conformance
  listeners:
  - name: tls-terminate
    port: 8883
    protocol: TLS
    hostname: tls.example.com
    allowedRoutes: {namespaces: {from: Same}, kinds: [{kind: TLSRoute}]}
    tls: {mode: Terminate, certificateRefs: [{name: tls-terminate-checks-certificate}]}
  - name: tls-passthrough
    port: 8883
    protocol: TLS
    hostname: abc.example.com
    allowedRoutes: {namespaces: {from: Same}, kinds: [{kind: TLSRoute}]}
    tls: {mode: Passthrough}
"""
        + tls_route("gateway-conformance-mixed-passthroughroute", "gateway-tlsroute-mixed-termination")
        + tls_route(
            "gateway-conformance-mixed-terminateroute",
            "gateway-tlsroute-mixed-termination",
            hostnames="tls.example.com",
            backend="infra-backend-v1",
            port=8080,
        ),
        statuses=(
            RouteStatus(
                "gateway-conformance-mixed-passthroughroute",
                kind="TLSRoute",
                gateway="gateway-tlsroute-mixed-termination",
            ),
            RouteStatus(
                "gateway-conformance-mixed-terminateroute",
                kind="TLSRoute",
                gateway="gateway-tlsroute-mixed-termination",
            ),
            GatewayStatus(
                "gateway-tlsroute-mixed-termination",
                {"Accepted": "True", "Programmed": "True"},
                listeners={
                    name: ListenerStatus(
                        {"Accepted": ("True", "Accepted")}, attached=1, only_kinds=("TLSRoute",)
                    )
                    for name in ("tls-terminate", "tls-passthrough")
                },
            ),
        ),
        exchanges=(
            Exchange(
                Request(
                    host="tls.example.com",
                    scheme="https",
                    port=8883,
                    gateway="gateway-tlsroute-mixed-termination",
                ),
                Expect(backend="infra-backend-v1", seen=Seen(sni="", host="tls.example.com")),
            ),
            Exchange(
                Request(
                    host="abc.example.com",
                    scheme="https",
                    port=8883,
                    gateway="gateway-tlsroute-mixed-termination",
                ),
                through_to("tls-backend"),
            ),
        ),
    ),
    Case(
        "GatewayHTTPSAndTLSPassthroughSamePort",
        # One port, two listeners told apart by SNI: HTTPS terminated by the gateway for
        # example.org, TLS passed through for abc.example.com.
        """
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gateway-https-and-tls-passthrough, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: gateway-conformance
  listeners:
  - name: https
    port: 443
    protocol: HTTPS
    hostname: example.org
    tls: {certificateRefs: [{kind: Secret, name: tls-validity-checks-certificate}]}
  - name: tls
    port: 443
    protocol: TLS
    hostname: abc.example.com
    tls: {mode: Passthrough}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: https-route, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: gateway-https-and-tls-passthrough, sectionName: https}]
  rules:
  - backendRefs: [{name: infra-backend-v2, port: 8080}]
"""
        + tls_route("tls-route", "gateway-https-and-tls-passthrough"),
        statuses=(
            RouteStatus("https-route", gateway="gateway-https-and-tls-passthrough"),
            RouteStatus("tls-route", kind="TLSRoute", gateway="gateway-https-and-tls-passthrough"),
            GatewayStatus(
                "gateway-https-and-tls-passthrough",
                {"Accepted": "True", "Programmed": "True"},
                listeners={
                    "https": ListenerStatus({"Programmed": "True"}, attached=1),
                    "tls": ListenerStatus({"Programmed": "True"}, attached=1),
                },
            ),
        ),
        exchanges=(
            Exchange(
                tls_request("gateway-https-and-tls-passthrough", sni="example.org"),
                Expect(backend="infra-backend-v2", seen=Seen(host="example.org", sni="")),
            ),
            Exchange(tls_request("gateway-https-and-tls-passthrough"), through_to("tls-backend")),
        ),
    ),
]


@pytest.mark.parametrize("case", params(CASES))
async def test_case(conformance: Conformance, case: Case) -> None:
    await run_case(conformance, case)
