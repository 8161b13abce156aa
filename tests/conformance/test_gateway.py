"""Gateway and GatewayClass conformance cases, written from the Gateway API specification.

Case names are those of the upstream conformance tests that check the same
behaviour. In standalone mode nothing bumps ``metadata.generation``: the
generation cases write it, as the API server would after an edit.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest

from .harness import (
    WEB_NS,
    Case,
    Conformance,
    Exchange,
    Expect,
    GatewayStatus,
    ListenerStatus,
    ObjectStatus,
    Request,
    RouteStatus,
    Step,
    params,
    run_case,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")

V1, V2, V3 = "infra-backend-v1", "infra-backend-v2", "infra-backend-v3"
ACCEPTED = {"Accepted": "True", "ResolvedRefs": "True"}
LISTENER_OK = {"Accepted": "True", "ResolvedRefs": "True", "Programmed": "True"}


def via(gateway: str, host: str = "", path: str = "/", port: int = 80) -> Request:
    return Request(host=host, path=path, gateway=gateway, port=port)


def answered(backend: str) -> Expect:
    return Expect(backend=backend)


NOT_FOUND = Expect(404)
REFUSED = Expect(error=True)

# -- GatewayHTTPListenerIsolation --------------------------------------------------------------

ISOLATION_GATEWAY = """
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: {name}, namespace: gateway-conformance-infra}}
spec:
  gatewayClassName: gateway-conformance
  listeners:
  - {{name: empty-hostname, port: 80, protocol: HTTP, allowedRoutes: {{namespaces: {{from: All}}}}}}
  - name: wildcard-example-com
    port: 80
    protocol: HTTP
    hostname: "*.example.com"
    allowedRoutes: {{namespaces: {{from: All}}}}
  - name: wildcard-foo-example-com
    port: 80
    protocol: HTTP
    hostname: "*.foo.example.com"
    allowedRoutes: {{namespaces: {{from: All}}}}
  - name: abc-foo-example-com
    port: 80
    protocol: HTTP
    hostname: abc.foo.example.com
    allowedRoutes: {{namespaces: {{from: All}}}}
"""
ISOLATION_ROUTE = """
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: attaches-to-{listener}{suffix}, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{{name: {gateway}, sectionName: {listener}}}]
  {hostnames}
  rules:
  - matches: [{{path: {{type: PathPrefix, value: /{listener}}}}}]
    backendRefs: [{{name: infra-backend-v1, port: 8080}}]
"""
LISTENERS = ("empty-hostname", "wildcard-example-com", "wildcard-foo-example-com", "abc-foo-example-com")
#: The hostname a request is sent with, for each listener that must take it.
ISOLATION_HOSTS = {
    "empty-hostname": "bar.com",
    "wildcard-example-com": "bar.example.com",
    "wildcard-foo-example-com": "bar.foo.example.com",
    "abc-foo-example-com": "abc.foo.example.com",
}


def isolation_manifests(gateway: str, with_hostnames: bool) -> str:
    """Four listeners from least to most specific, a route on each (see the upstream test)."""
    text = ISOLATION_GATEWAY.format(name=gateway)
    for listener in LISTENERS:
        # Every route also names the hostnames of the more specific listeners: listener isolation
        # must still keep their requests away from it.
        hostnames = (
            'hostnames: [bar.com, "*.example.com", "*.foo.example.com", abc.foo.example.com]'
            if with_hostnames
            else ""
        )
        text += ISOLATION_ROUTE.format(
            listener=listener,
            gateway=gateway,
            hostnames=hostnames,
            suffix="-with-hostname-intersection" if with_hostnames else "",
        )
    return text


def isolation_exchanges(gateway: str) -> tuple[Exchange, ...]:
    """A request for each (host of a listener, path of a route): only the listener's own route answers."""
    out = []
    for owner, host in ISOLATION_HOSTS.items():
        for listener in LISTENERS:
            expect = answered(V1) if listener == owner else NOT_FOUND
            out.append(Exchange(via(gateway, host, f"/{listener}"), expect))
    return tuple(out)


def isolation_case(name: str, gateway: str, with_hostnames: bool) -> Case:
    suffix = "-with-hostname-intersection" if with_hostnames else ""
    return Case(
        name,
        isolation_manifests(gateway, with_hostnames),
        statuses=tuple(
            RouteStatus(f"attaches-to-{listener}{suffix}", gateway=gateway, section=listener)
            for listener in LISTENERS
        ),
        exchanges=isolation_exchanges(gateway),
    )


# -- GatewayWithAttachedRoutes ----------------------------------------------------------------

ATTACHED_ROUTES = """
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gateway-with-one-attached-route, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: gateway-conformance
  listeners:
  - {name: http, port: 80, protocol: HTTP}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gateway-with-two-listeners-and-one-attached-route, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: gateway-conformance
  listeners:
  - {name: http-unattached, port: 8080, protocol: HTTP}
  - {name: http, port: 80, protocol: HTTP}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: unresolved-gateway-with-one-attached-unresolved-route, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: gateway-conformance
  listeners:
  - {name: http, port: 80, protocol: HTTP}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: http-route-1, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: gateway-with-one-attached-route}]
  rules:
  - backendRefs: [{name: infra-backend-v1, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: http-route-2, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: gateway-with-two-listeners-and-one-attached-route, sectionName: http}]
  rules:
  - backendRefs: [{name: infra-backend-v2, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: http-route-4, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: unresolved-gateway-with-one-attached-unresolved-route}]
  rules:
  - backendRefs: [{name: does-not-exist, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: not-allowed-from-this-namespace, namespace: gateway-conformance-web-backend}
spec:
  parentRefs: [{name: gateway-with-one-attached-route, namespace: gateway-conformance-infra}]
  rules:
  - backendRefs: [{name: web-backend, port: 8080}]
"""

# -- GatewayModifyListeners -----------------------------------------------------------------

MODIFY_GATEWAY = """
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gateway-modify-listeners, namespace: gateway-conformance-infra, generation: {generation}}}
spec:
  gatewayClassName: gateway-conformance
  listeners:
  - {{name: http, port: 80, protocol: HTTP}}
{extra}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: route-to-new-listener, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{{name: gateway-modify-listeners, sectionName: http-new}}]
  rules:
  - backendRefs: [{{name: infra-backend-v2, port: 8080}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: route-to-first-listener, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{{name: gateway-modify-listeners, sectionName: http}}]
  rules:
  - backendRefs: [{{name: infra-backend-v1, port: 8080}}]
"""
NEW_LISTENER = "  - {name: http-new, port: 8080, protocol: HTTP}"
MODIFY = "gateway-modify-listeners"

# -- GatewayObservedGenerationBump --------------------------------------------------------------

GENERATION_GATEWAY = """
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gateway-observed-generation-bump, namespace: gateway-conformance-infra, generation: {gen}}}
spec:
  gatewayClassName: gateway-conformance
  listeners:
  - {{name: http, port: 80, protocol: HTTP}}
{extra}
"""

GATEWAY_CLASS_GENERATION = """
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {{name: gatewayclass-observed-generation-bump, generation: {gen}}}
spec:
  controllerName: weir.dev/gateway-controller
  description: "{description}"
"""

STATIC = "gateway-static-addresses"
STATIC_ADDRESSES = """
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gateway-static-addresses, namespace: gateway-conformance-infra}}
spec:
  gatewayClassName: gateway-conformance
  addresses: [{addresses}]
  listeners:
  - {{name: http, port: 80, protocol: HTTP}}
"""
UNUSABLE = "{type: IPAddress, value: 192.0.2.10}"
USABLE = "{type: IPAddress, value: 127.0.1.251}"

INVALID_TLS = """
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: {name}, namespace: gateway-conformance-infra}}
spec:
  gatewayClassName: gateway-conformance
  listeners:
  - name: https
    port: 443
    protocol: HTTPS
    hostname: secure.test.com
    tls: {{certificateRefs: [{ref}]}}
"""
INVALID_TLS_REFS = {
    "gateway-certificate-nonexistent-secret": "{kind: Secret, name: nonexistent-certificate}",
    "gateway-certificate-unsupported-group": (
        "{group: wrong.group.company.io, kind: Secret, name: tls-validity-checks-certificate}"
    ),
    "gateway-certificate-unsupported-kind": (
        "{group: '', kind: WrongKind, name: tls-validity-checks-certificate}"
    ),
    "gateway-certificate-malformed-secret": "{kind: Secret, name: malformed-certificate}",
}


# -- GatewayFrontendClientCertificateValidation (and its insecure fallback) ---------------------

DEFAULT_CLIENT = "tls-validity-checks-client-certificate"
PER_PORT_CLIENT = "tls-validity-checks-per-port-client-certificate"


def client_validation_manifest(name: str, mode: str) -> str:
    """A Gateway with a default client CA for port 443 and its own for 8443, a route on each."""
    return f"""
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: {name}, namespace: gateway-conformance-infra}}
spec:
  gatewayClassName: gateway-conformance
  tls:
    frontend:
      default:
        validation:
          caCertificateRefs: [{{group: "", kind: ConfigMap, name: tls-validity-checks-ca-certificate}}]
          mode: {mode}
      perPort:
      - port: 8443
        tls:
          validation:
            caCertificateRefs:
            - {{group: "", kind: ConfigMap, name: tls-validity-checks-per-port-ca-certificate}}
            mode: {mode}
  listeners:
  - name: https
    port: 443
    protocol: HTTPS
    hostname: example.org
    tls: {{certificateRefs: [{{name: tls-validity-checks-certificate}}]}}
  - name: https-per-port
    port: 8443
    protocol: HTTPS
    tls: {{certificateRefs: [{{name: tls-validity-checks-certificate}}]}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}-https-test, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{{name: {name}, sectionName: https}}]
  hostnames: [example.org]
  rules: [{{backendRefs: [{{name: infra-backend-v1, port: 8080}}]}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}-https-test-no-hostname, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{{name: {name}, sectionName: https-per-port}}]
  rules: [{{backendRefs: [{{name: infra-backend-v2, port: 8080}}]}}]
"""


def with_client(gateway: str, host: str, port: int, cert: str | None, expect: Expect) -> Exchange:
    """An HTTPS request to ``gateway`` presenting ``cert`` (none: no client certificate)."""
    request = Request(host=host, gateway=gateway, port=port, scheme="https", client_cert=cert)
    return Exchange(request, expect)


CASES = [
    Case(
        "GatewayFrontendClientCertificateValidation",
        client_validation_manifest("client-validation-default", "AllowValidOnly"),
        statuses=(
            GatewayStatus(
                "client-validation-default",
                conditions={"Accepted": "True", "Programmed": "True"},
                listeners={
                    "https": ListenerStatus(LISTENER_OK),
                    "https-per-port": ListenerStatus(LISTENER_OK),
                },
            ),
        ),
        exchanges=(
            with_client("client-validation-default", "example.org", 443, DEFAULT_CLIENT, answered(V1)),
            with_client("client-validation-default", "example.org", 443, PER_PORT_CLIENT, REFUSED),
            with_client("client-validation-default", "example.org", 443, None, REFUSED),
            with_client(
                "client-validation-default", "second-example.org", 8443, PER_PORT_CLIENT, answered(V2)
            ),
            with_client("client-validation-default", "second-example.org", 8443, DEFAULT_CLIENT, REFUSED),
            with_client("client-validation-default", "second-example.org", 8443, None, REFUSED),
        ),
    ),
    Case(
        "GatewayFrontendClientCertificateValidationInsecureFallback",
        client_validation_manifest("client-validation-insecure-fallback", "AllowInsecureFallback"),
        statuses=(
            GatewayStatus(
                "client-validation-insecure-fallback",
                conditions={
                    "Accepted": "True",
                    "Programmed": "True",
                    "InsecureFrontendValidationMode": ("True", "ConfigurationChanged"),
                },
                listeners={
                    "https": ListenerStatus(LISTENER_OK),
                    "https-per-port": ListenerStatus(LISTENER_OK),
                },
            ),
        ),
        exchanges=tuple(
            with_client("client-validation-insecure-fallback", host, port, cert, answered(backend))
            for host, port, backend in (("example.org", 443, V1), ("second-example.org", 8443, V2))
            for cert in (DEFAULT_CLIENT, PER_PORT_CLIENT, None)
        ),
    ),
    Case(
        "GatewayInvalidFrontendClientCertificateValidation",
        """
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gateway-with-invalid-client-cert-validation, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: gateway-conformance
  tls:
    frontend:
      default:
        validation:
          caCertificateRefs: [{kind: ConfigMap, group: "", name: tls-validity-checks-ca-certificate}]
      perPort:
      - port: 7443
        tls:
          validation:
            caCertificateRefs: [{kind: ConfigMap, group: "", name: non-exisitng-cm}]
      - port: 8443
        tls:
          validation:
            caCertificateRefs: [{kind: Service, group: "", name: infra-backend-v2}]
      - port: 6443
        tls:
          validation:
            caCertificateRefs:
            - {kind: ConfigMap, group: "", name: gateway-conformance-web-backend, namespace: web-backend-cm}
  listeners:
  - name: https
    port: 443
    protocol: HTTPS
    tls: {certificateRefs: [{group: "", kind: Secret, name: tls-validity-checks-certificate}]}
  - name: https-unresolved
    port: 7443
    hostname: first-example.org
    protocol: HTTPS
    tls: {certificateRefs: [{group: "", kind: Secret, name: tls-validity-checks-certificate}]}
  - name: https-invalid-kind
    port: 8443
    hostname: second-example.org
    protocol: HTTPS
    tls: {certificateRefs: [{group: "", kind: Secret, name: tls-validity-checks-certificate}]}
  - name: https-grant-missing
    port: 6443
    hostname: fourth-example.org
    protocol: HTTPS
    tls: {certificateRefs: [{group: "", kind: Secret, name: tls-validity-checks-certificate}]}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: invalid-client-cert-validation-https-test, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: gateway-with-invalid-client-cert-validation}]
  rules: [{backendRefs: [{name: infra-backend-v1, port: 8080}]}]
""",
        statuses=(
            GatewayStatus(
                "gateway-with-invalid-client-cert-validation",
                listeners={
                    "https": ListenerStatus(LISTENER_OK),
                    "https-unresolved": ListenerStatus(
                        {
                            "ResolvedRefs": ("False", "InvalidCACertificateRef"),
                            "Accepted": ("False", "NoValidCACertificate"),
                            "Programmed": "False",
                        }
                    ),
                    "https-invalid-kind": ListenerStatus(
                        {
                            "ResolvedRefs": ("False", "InvalidCACertificateKind"),
                            "Accepted": ("False", "NoValidCACertificate"),
                            "Programmed": "False",
                        }
                    ),
                    "https-grant-missing": ListenerStatus(
                        {
                            "ResolvedRefs": ("False", "RefNotPermitted"),
                            "Accepted": ("False", "NoValidCACertificate"),
                            "Programmed": "False",
                        }
                    ),
                },
            ),
        ),
        exchanges=(
            # Suite's own: the refused listeners' names are closed, not served without validation.
            with_client(
                "gateway-with-invalid-client-cert-validation",
                "example.org",
                443,
                DEFAULT_CLIENT,
                answered(V1),
            ),
            with_client(
                "gateway-with-invalid-client-cert-validation",
                "first-example.org",
                7443,
                DEFAULT_CLIENT,
                REFUSED,
            ),
            with_client(
                "gateway-with-invalid-client-cert-validation", "second-example.org", 8443, None, REFUSED
            ),
        ),
    ),
    Case(
        "GatewayInvalidParametersRef",
        # The upstream manifest names a group and kind no implementation reads; the suite's own
        # second Gateway names a kind weir does know (its GatewayClassConfig) but cannot use per
        # Gateway, and a third one carries only labels and annotations, which weir accepts.
        """
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gateway-invalid-parameters-ref, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: gateway-conformance
  infrastructure:
    parametersRef: {group: invalid.io, kind: InvalidParameters, name: invalid}
  listeners: [{name: http, port: 80, protocol: HTTP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gateway-class-config-as-parameters, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: gateway-conformance
  infrastructure:
    parametersRef: {group: weir.dev, kind: GatewayClassConfig, name: default}
  listeners: [{name: http, port: 80, protocol: HTTP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gateway-infrastructure-metadata, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: gateway-conformance
  infrastructure:
    labels: {label-key: label-value}
    annotations: {annotation-key: annotation-value}
  listeners: [{name: http, port: 80, protocol: HTTP}]
""",
        statuses=(
            GatewayStatus(
                "gateway-invalid-parameters-ref",
                conditions={"Accepted": ("False", "InvalidParameters"), "Programmed": ("False", "Invalid")},
            ),
            GatewayStatus(
                "gateway-class-config-as-parameters",
                conditions={"Accepted": ("False", "InvalidParameters"), "Programmed": ("False", "Invalid")},
            ),
            GatewayStatus(
                "gateway-infrastructure-metadata",
                conditions={"Accepted": "True", "Programmed": "True"},
                listeners={"http": ListenerStatus(LISTENER_OK, attached=0, kinds=("HTTPRoute",))},
            ),
        ),
    ),
    Case(
        "GatewayInvalidRouteKinds",
        """
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gateway-only-invalid-route-kind, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: gateway-conformance
  listeners:
  - name: http
    port: 80
    protocol: HTTP
    allowedRoutes: {kinds: [{group: gateway.networking.k8s.io, kind: FooRoute}]}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gateway-supported-and-invalid-route-kind, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: gateway-conformance
  listeners:
  - name: http
    port: 80
    protocol: HTTP
    allowedRoutes:
      kinds:
      - {group: gateway.networking.k8s.io, kind: FooRoute}
      - {group: gateway.networking.k8s.io, kind: HTTPRoute}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: invalid-route-kind-route, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: gateway-only-invalid-route-kind}, {name: gateway-supported-and-invalid-route-kind}]
  rules:
  - backendRefs: [{name: infra-backend-v1, port: 8080}]
""",
        statuses=(
            GatewayStatus(
                "gateway-only-invalid-route-kind",
                listeners={
                    "http": ListenerStatus(
                        {"ResolvedRefs": ("False", "InvalidRouteKinds")}, attached=0, kinds=()
                    )
                },
            ),
            GatewayStatus(
                "gateway-supported-and-invalid-route-kind",
                listeners={
                    "http": ListenerStatus(
                        {"ResolvedRefs": ("False", "InvalidRouteKinds")},
                        attached=1,
                        only_kinds=("HTTPRoute",),
                    )
                },
            ),
            RouteStatus(
                "invalid-route-kind-route",
                {"Accepted": ("False", "NotAllowedByListeners")},
                gateway="gateway-only-invalid-route-kind",
            ),
            RouteStatus(
                "invalid-route-kind-route", ACCEPTED, gateway="gateway-supported-and-invalid-route-kind"
            ),
        ),
        exchanges=(
            Exchange(via("gateway-supported-and-invalid-route-kind"), answered(V1)),
            Exchange(via("gateway-only-invalid-route-kind"), NOT_FOUND),
        ),
    ),
    Case(
        "GatewayInvalidTLSConfiguration",
        "\n---\n".join(INVALID_TLS.format(name=name, ref=ref) for name, ref in INVALID_TLS_REFS.items()),
        statuses=tuple(
            GatewayStatus(
                name,
                listeners={
                    "https": ListenerStatus(
                        {"ResolvedRefs": ("False", "InvalidCertificateRef"), "Programmed": "False"}
                    )
                },
            )
            for name in INVALID_TLS_REFS
        ),
    ),
    Case(
        "GatewayWithAttachedRoutes",
        ATTACHED_ROUTES,
        statuses=(
            GatewayStatus(
                "gateway-with-one-attached-route",
                conditions={"Accepted": "True", "Programmed": "True"},
                listeners={"http": ListenerStatus(LISTENER_OK, attached=1, kinds=("HTTPRoute",))},
            ),
            GatewayStatus(
                "gateway-with-two-listeners-and-one-attached-route",
                conditions={"Accepted": "True", "Programmed": "True"},
                listeners={
                    "http": ListenerStatus(LISTENER_OK, attached=1),
                    "http-unattached": ListenerStatus(LISTENER_OK, attached=0),
                },
            ),
            # A route whose backend does not resolve is still attached.
            GatewayStatus(
                "unresolved-gateway-with-one-attached-unresolved-route",
                listeners={"http": ListenerStatus(attached=1)},
            ),
            RouteStatus(
                "http-route-4",
                {"Accepted": "True", "ResolvedRefs": ("False", "BackendNotFound")},
                gateway="unresolved-gateway-with-one-attached-unresolved-route",
            ),
            RouteStatus(
                "not-allowed-from-this-namespace",
                {"Accepted": ("False", "NotAllowedByListeners")},
                namespace=WEB_NS,
                gateway="gateway-with-one-attached-route",
            ),
        ),
        exchanges=(
            Exchange(via("gateway-with-one-attached-route"), answered(V1)),
            Exchange(via("gateway-with-two-listeners-and-one-attached-route"), answered(V2)),
            Exchange(via("gateway-with-two-listeners-and-one-attached-route", port=8080), NOT_FOUND),
            Exchange(via("unresolved-gateway-with-one-attached-unresolved-route"), Expect(500)),
        ),
    ),
    Case(
        "GatewayWithAttachedRoutesWithPort8080",
        # A listener on port 8080 next to one on 80: both accepted and programmed, the route
        # attached by sectionName to the one on 80 only; 8080 is served (404: no route there).
        """
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gateway-with-two-listeners-and-one-attached-route, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: gateway-conformance
  listeners:
  - name: http-unattached
    port: 8080
    protocol: HTTP
    allowedRoutes: {kinds: [{kind: HTTPRoute}], namespaces: {from: All}}
  - name: http
    port: 80
    protocol: HTTP
    allowedRoutes: {kinds: [{kind: HTTPRoute}], namespaces: {from: All}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: http-route-4-port8080, namespace: gateway-conformance-infra}
spec:
  parentRefs:
  - kind: Gateway
    name: gateway-with-two-listeners-and-one-attached-route
    namespace: gateway-conformance-infra
    sectionName: http
  rules: [{backendRefs: [{name: infra-backend-v1, port: 8080}]}]
""",
        statuses=(
            GatewayStatus(
                "gateway-with-two-listeners-and-one-attached-route",
                conditions={"Accepted": "True", "Programmed": "True"},
                listeners={
                    "http": ListenerStatus(LISTENER_OK, attached=1, only_kinds=("HTTPRoute",)),
                    "http-unattached": ListenerStatus(LISTENER_OK, attached=0, only_kinds=("HTTPRoute",)),
                },
            ),
            RouteStatus("http-route-4-port8080", gateway="gateway-with-two-listeners-and-one-attached-route"),
        ),
        exchanges=(
            Exchange(via("gateway-with-two-listeners-and-one-attached-route"), answered(V1)),
            Exchange(via("gateway-with-two-listeners-and-one-attached-route", port=8080), NOT_FOUND),
        ),
    ),
    Case(
        "GatewayModifyListeners",
        MODIFY_GATEWAY.format(generation=1, extra=""),
        statuses=(
            GatewayStatus(MODIFY, {"Programmed": "True"}, only_listeners=("http",), generation=1),
            RouteStatus("route-to-new-listener", {"Accepted": ("False", "NoMatchingParent")}, gateway=MODIFY),
            RouteStatus("route-to-first-listener", gateway=MODIFY),
        ),
        exchanges=(Exchange(via(MODIFY), answered(V1)), Exchange(via(MODIFY, port=8080), REFUSED)),
        steps=(
            Step(  # add a listener: the route waiting for it attaches
                MODIFY_GATEWAY.format(generation=2, extra=NEW_LISTENER),
                statuses=(
                    GatewayStatus(
                        MODIFY,
                        {"Accepted": "True", "Programmed": "True"},
                        listeners={
                            "http": ListenerStatus(LISTENER_OK, attached=1),
                            "http-new": ListenerStatus(LISTENER_OK, attached=1, kinds=("HTTPRoute",)),
                        },
                        only_listeners=("http", "http-new"),
                        generation=2,
                    ),
                    RouteStatus("route-to-new-listener", gateway=MODIFY),
                ),
                exchanges=(
                    Exchange(via(MODIFY, port=8080), answered(V2)),
                    Exchange(via(MODIFY), answered(V1)),
                ),
            ),
            Step(  # remove it again
                MODIFY_GATEWAY.format(generation=3, extra=""),
                statuses=(
                    GatewayStatus(MODIFY, {"Programmed": "True"}, only_listeners=("http",), generation=3),
                    RouteStatus(
                        "route-to-new-listener", {"Accepted": ("False", "NoMatchingParent")}, gateway=MODIFY
                    ),
                ),
                exchanges=(Exchange(via(MODIFY, port=8080), REFUSED), Exchange(via(MODIFY), answered(V1))),
            ),
        ),
    ),
    Case(
        "GatewayObservedGenerationBump",
        GENERATION_GATEWAY.format(gen=1, extra=""),
        statuses=(
            GatewayStatus(
                "gateway-observed-generation-bump",
                {"Accepted": "True", "Programmed": "True"},
                listeners={"http": ListenerStatus(LISTENER_OK)},
                generation=1,
            ),
        ),
        steps=(
            Step(
                GENERATION_GATEWAY.format(gen=2, extra="  - {name: http-2, port: 8080, protocol: HTTP}"),
                statuses=(
                    GatewayStatus(
                        "gateway-observed-generation-bump",
                        {"Accepted": "True", "Programmed": "True"},
                        listeners={
                            "http": ListenerStatus(LISTENER_OK),
                            "http-2": ListenerStatus(LISTENER_OK),
                        },
                        generation=2,
                    ),
                ),
            ),
        ),
    ),
    isolation_case("GatewayHTTPListenerIsolation", "http-listener-isolation", with_hostnames=False),
    isolation_case(
        "GatewayHTTPListenerIsolationWithHostnameIntersection",
        "http-listener-isolation-with-hostname-intersection",
        with_hostnames=True,
    ),
    Case(
        "GatewayHTTPListenerIsolationListenerWithoutRoutes",
        # The most specific listener matching a request's host takes it even with no route
        # attached: nothing else may answer (suite's own name; same rule as upstream's test).
        isolation_manifests("http-listener-isolation-no-routes", False).replace(
            "sectionName: abc-foo-example-com", "sectionName: wildcard-foo-example-com"
        ),
        statuses=(
            GatewayStatus(
                "http-listener-isolation-no-routes",
                listeners={
                    "abc-foo-example-com": ListenerStatus(attached=0),
                    "wildcard-foo-example-com": ListenerStatus(attached=2),
                },
            ),
        ),
        exchanges=(
            Exchange(
                via("http-listener-isolation-no-routes", "bar.foo.example.com", "/wildcard-foo-example-com"),
                answered(V1),
            ),
            Exchange(
                via("http-listener-isolation-no-routes", "abc.foo.example.com", "/wildcard-foo-example-com"),
                NOT_FOUND,
            ),
            Exchange(
                via("http-listener-isolation-no-routes", "abc.foo.example.com", "/empty-hostname"), NOT_FOUND
            ),
        ),
    ),
    Case(
        "GatewayListenerProtocolConflict",
        # Two protocols cannot share a port within one Gateway (a part of upstream's
        # GatewayListenerProtocolAndRouteKindConflicts): both listeners are refused.
        """
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gateway-listener-protocol-conflict, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: gateway-conformance
  listeners:
  - {name: http, port: 8090, protocol: HTTP}
  - {name: tcp, port: 8090, protocol: TCP}
  - {name: http-alone, port: 80, protocol: HTTP}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: route-to-lone-listener, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: gateway-listener-protocol-conflict, sectionName: http-alone}]
  rules:
  - backendRefs: [{name: infra-backend-v3, port: 8080}]
""",
        statuses=(
            GatewayStatus(
                "gateway-listener-protocol-conflict",
                {"Accepted": ("True", "ListenersNotValid")},
                listeners={
                    "http": ListenerStatus({"Accepted": "False", "Conflicted": ("True", "ProtocolConflict")}),
                    "tcp": ListenerStatus({"Accepted": "False", "Conflicted": ("True", "ProtocolConflict")}),
                    "http-alone": ListenerStatus(LISTENER_OK, attached=1),
                },
            ),
        ),
        exchanges=(
            Exchange(via("gateway-listener-protocol-conflict"), answered(V3)),
            Exchange(via("gateway-listener-protocol-conflict", port=8090), REFUSED),
        ),
    ),
    Case(
        "GatewayInvalidListenersUnsupportedProtocol",
        """
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gateway-unsupported-protocol, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: gateway-conformance
  listeners:
  - {name: invalid, port: 1111, protocol: INVALID}
  - {name: http, port: 80, protocol: HTTP}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: route-next-to-unsupported, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: gateway-unsupported-protocol}]
  rules:
  - backendRefs: [{name: infra-backend-v2, port: 8080}]
""",
        statuses=(
            GatewayStatus(
                "gateway-unsupported-protocol",
                {"Accepted": ("True", "ListenersNotValid")},
                listeners={
                    "invalid": ListenerStatus(
                        {"Accepted": ("False", "UnsupportedProtocol"), "Programmed": "False"}
                    ),
                    "http": ListenerStatus(LISTENER_OK, attached=1),
                },
            ),
            RouteStatus("route-next-to-unsupported", gateway="gateway-unsupported-protocol"),
        ),
        exchanges=(Exchange(via("gateway-unsupported-protocol"), answered(V2)),),
    ),
    Case(
        "GatewayAddressTypes",
        # An IPAddress weir can bind is used and reported; a Hostname address is refused (suite's own
        # name: the parts of GatewayStaticAddresses that do not depend on AddressNotUsable).
        """
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gateway-static-addresses, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: gateway-conformance
  addresses: [{type: IPAddress, value: 127.0.1.250}]
  listeners:
  - {name: http, port: 80, protocol: HTTP}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gateway-unusable-address-type, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: gateway-conformance
  addresses: [{type: Hostname, value: gateway.example.com}]
  listeners:
  - {name: http, port: 80, protocol: HTTP}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: route-to-static-address, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: gateway-static-addresses}]
  rules:
  - backendRefs: [{name: infra-backend-v3, port: 8080}]
""",
        statuses=(
            GatewayStatus(
                "gateway-static-addresses",
                {"Accepted": "True", "Programmed": "True"},
                addresses=("127.0.1.250",),
            ),
            GatewayStatus("gateway-unusable-address-type", {"Accepted": ("False", "UnsupportedAddress")}),
        ),
        exchanges=(Exchange(via("gateway-static-addresses"), answered(V3)),),
    ),
    Case(
        "GatewayStaticAddresses",
        # An address of a type weir does not support, one it cannot bind (TEST-NET-1) and one it can;
        # each step removes the first remaining one, as upstream's test does.
        STATIC_ADDRESSES.format(
            addresses=f"{{type: Hostname, value: gateway.example.com}}, {UNUSABLE}, {USABLE}"
        ),
        statuses=(GatewayStatus(STATIC, {"Accepted": ("False", "UnsupportedAddress")}),),
        steps=(
            Step(
                STATIC_ADDRESSES.format(addresses=f"{UNUSABLE}, {USABLE}"),
                statuses=(
                    GatewayStatus(
                        STATIC,
                        {"Accepted": ("True", "Accepted"), "Programmed": ("False", "AddressNotUsable")},
                        addresses=("127.0.1.251",),  # the unusable one is left out
                    ),
                ),
            ),
            Step(
                STATIC_ADDRESSES.format(addresses=USABLE),
                statuses=(
                    GatewayStatus(
                        STATIC,
                        {"Accepted": ("True", "Accepted"), "Programmed": ("True", "Programmed")},
                        listeners={
                            "http": ListenerStatus({"Accepted": "True", "ResolvedRefs": "True"}, attached=0)
                        },
                        addresses=("127.0.1.251",),
                    ),
                ),
                exchanges=(Exchange(via(STATIC), NOT_FOUND),),
            ),
        ),
    ),
    Case(
        "GatewayClassObservedGenerationBump",
        GATEWAY_CLASS_GENERATION.format(gen=1, description="first"),
        statuses=(
            ObjectStatus(
                "GatewayClass", "gatewayclass-observed-generation-bump", {"Accepted": "True"}, generation=1
            ),
        ),
        steps=(
            Step(
                GATEWAY_CLASS_GENERATION.format(gen=2, description="second"),
                statuses=(
                    ObjectStatus(
                        "GatewayClass",
                        "gatewayclass-observed-generation-bump",
                        {"Accepted": "True"},
                        generation=2,
                    ),
                ),
            ),
        ),
    ),
]


async def test_base_gateways_are_programmed(conformance: Conformance) -> None:
    """The world every case starts from: the class is accepted, the three Gateways serve."""
    for name in ("same-namespace", "all-namespaces", "backend-namespaces"):
        conformance.check(
            GatewayStatus(
                name,
                {"Accepted": "True", "Programmed": "True"},
                listeners={"http": ListenerStatus(LISTENER_OK, attached=0, kinds=("HTTPRoute",))},
                addresses=(conformance.gateway_address(name),),
            )
        )
    gateway_class = conformance.status("GatewayClass", "", "gateway-conformance")
    assert gateway_class is not None
    [accepted] = [c for c in gateway_class["conditions"] if c["type"] == "Accepted"]
    assert accepted["status"] == "True", accepted


@pytest.mark.parametrize("case", params(CASES))
async def test_case(conformance: Conformance, case: Case) -> None:
    await run_case(conformance, case)


OPTIONAL_ADDRESS = """
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gateway-without-address-value, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: gateway-conformance
  addresses: [{type: IPAddress}]
  listeners: [{name: http, port: 8080, protocol: HTTP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: route-to-assigned-address, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: gateway-without-address-value}]
  rules: [{backendRefs: [{name: infra-backend-v1, port: 8080}]}]
"""


async def test_GatewayOptionalAddressValue(conformance: Conformance) -> None:
    """An address of type IPAddress without a value: weir assigns one (the address a Gateway
    without ``spec.addresses`` gets, 127.0.0.1 in this suite), says so in ``status.addresses``,
    and serves the listener there, through real Envoy."""
    h = conformance
    await h.apply("case-gateway-optional-address-value", OPTIONAL_ADDRESS)
    try:
        name = "gateway-without-address-value"
        h.check(
            GatewayStatus(
                name,
                {"Accepted": "True", "Programmed": "True"},
                listeners={"http": ListenerStatus(LISTENER_OK, attached=1)},
                addresses=("127.0.0.1",),
            )
        )
        h.check(RouteStatus("route-to-assigned-address", gateway=name))
        [address] = (h.status("Gateway", "gateway-conformance-infra", name) or {})["addresses"]
        url = f"http://{address['value']}:{h.listener_port(8080)}/assigned"
        async with httpx.AsyncClient(timeout=5) as client:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 5
            while True:
                try:
                    response = await client.get(url)
                    if response.status_code == 200 and response.json()["service"] == V1:
                        break
                    got = f"{response.status_code} {response.text[:200]}"
                except httpx.TransportError as exc:
                    got = repr(exc)
                assert loop.time() < deadline, f"GET {url}: {got}, want an answer of {V1}"
                await asyncio.sleep(0.05)
        # Next to an address with a value there is no default to assign: refused, and said why.
        mixed = "addresses: [{type: IPAddress}, {type: IPAddress, value: 127.0.1.251}]"
        await h.apply(
            "case-gateway-optional-address-value",
            OPTIONAL_ADDRESS.replace("addresses: [{type: IPAddress}]", mixed),
        )
        h.check(GatewayStatus(name, {"Accepted": ("False", "UnsupportedAddress")}))
    finally:
        await h.delete("case-gateway-optional-address-value")
