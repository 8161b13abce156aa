"""ReferenceGrant conformance cases: backend references and certificate references across namespaces.

Written from the Gateway API specification; case names are those of the upstream
conformance tests that check the same behaviour (``...V1`` and ``...Revoked``
are this suite's own).
"""

from __future__ import annotations

import pytest

from .harness import (
    APP_NS,
    WEB_NS,
    Case,
    CondSpec,
    Conformance,
    Exchange,
    Expect,
    GatewayStatus,
    ListenerStatus,
    Request,
    RouteStatus,
    Step,
    ok,
    params,
    run_case,
    status,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")

V1 = "infra-backend-v1"
RESOLVED: dict[str, CondSpec] = {"Accepted": "True", "ResolvedRefs": "True"}
NOT_PERMITTED: dict[str, CondSpec] = {"Accepted": "True", "ResolvedRefs": ("False", "RefNotPermitted")}

ROUTE_TO_WEB_BACKEND = """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: reference-grant, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - backendRefs: [{name: web-backend, namespace: gateway-conformance-web-backend, port: 8080}]
"""
GRANT_TO_WEB_BACKEND = """
---
apiVersion: gateway.networking.k8s.io/{version}
kind: ReferenceGrant
metadata: {{name: reference-grant, namespace: gateway-conformance-web-backend}}
spec:
  from: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: gateway-conformance-infra}}]
  to: [{{group: "", kind: Service, name: web-backend}}]
"""

ROUTE_TO_APP_BACKEND = """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: invalid-reference-grant, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{{name: same-namespace}}]
  rules:{same_namespace_rule}
  - matches: [{{path: {{type: PathPrefix, value: /app}}}}]
    backendRefs: [{{name: app-backend-v1, namespace: gateway-conformance-app-backend, port: 8080}}]
"""
SAME_NAMESPACE_RULE = """
  - matches: [{path: {type: PathPrefix, value: /v1}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]"""
#: Three grants that each fail to permit the route's reference to app-backend-v1.
INVALID_GRANTS = """
---
# Permits HTTPRoutes of another namespace only: not this route's.
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: reference-grant-wrong-namespace, namespace: gateway-conformance-app-backend}
spec:
  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: gateway-conformance-web-backend}]
  to: [{group: "", kind: Service, name: app-backend-v1}]
---
# Permits this route's namespace, but another Service.
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: reference-grant-wrong-service, namespace: gateway-conformance-app-backend}
spec:
  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: gateway-conformance-infra}]
  to: [{group: "", kind: Service, name: app-backend-v2}]
---
# In the route's own namespace: a grant only counts in the namespace of the target.
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: reference-grant-in-source-namespace, namespace: gateway-conformance-infra}
spec:
  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: gateway-conformance-infra}]
  to: [{group: "", kind: Service, name: app-backend-v1}]
"""

HTTPS_GATEWAY = """
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: {gateway}, namespace: gateway-conformance-infra}}
spec:
  gatewayClassName: gateway-conformance
  listeners:
  - name: https
    port: 443
    protocol: HTTPS
    hostname: "*.example.org"
    tls:
      certificateRefs: [{{kind: Secret, name: certificate, namespace: gateway-conformance-web-backend}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {gateway}-route, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{{name: {gateway}}}]
  rules:
  - backendRefs: [{{name: infra-backend-v1, port: 8080}}]
"""
SECRET_GRANT = """
---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {{name: reference-grant, namespace: gateway-conformance-web-backend}}
spec:
  from: [{{group: gateway.networking.k8s.io, kind: Gateway, namespace: gateway-conformance-infra}}]
  to: [{{group: "", kind: Secret{name}}}]
"""


def secret_case(name: str, gateway: str, grant: str | None, ok_: bool, pending: str | None = None) -> Case:
    """A Gateway whose HTTPS listener uses a Secret of another namespace, with ``grant`` (or none)."""
    manifests = HTTPS_GATEWAY.format(gateway=gateway) + (grant or "")
    if ok_:
        listener = ListenerStatus(
            {"Accepted": "True", "ResolvedRefs": "True", "Programmed": "True"}, attached=1
        )
        exchanges: tuple[Exchange, ...] = (
            Exchange(
                Request(host="www.example.org", scheme="https", port=443, gateway=gateway), Expect(backend=V1)
            ),
        )
    else:
        listener = ListenerStatus({"ResolvedRefs": ("False", "RefNotPermitted"), "Programmed": "False"})
        exchanges = ()
    return Case(
        name,
        manifests,
        statuses=(GatewayStatus(gateway, listeners={"https": listener}),),
        exchanges=exchanges,
        pending=pending,
    )


CASES = [
    Case(
        "HTTPRouteReferenceGrant",
        ROUTE_TO_WEB_BACKEND + GRANT_TO_WEB_BACKEND.format(version="v1beta1"),
        statuses=(RouteStatus("reference-grant", RESOLVED),),
        exchanges=(ok("", "/", "web-backend", WEB_NS),),
    ),
    Case(
        "HTTPRouteReferenceGrantV1",
        # ReferenceGrant is served as gateway.networking.k8s.io/v1 since Gateway API v1.5.
        ROUTE_TO_WEB_BACKEND + GRANT_TO_WEB_BACKEND.format(version="v1"),
        statuses=(RouteStatus("reference-grant", RESOLVED),),
        exchanges=(ok("", "/", "web-backend", WEB_NS),),
    ),
    Case(
        "HTTPRouteReferenceGrantRevoked",
        ROUTE_TO_WEB_BACKEND + GRANT_TO_WEB_BACKEND.format(version="v1beta1"),
        statuses=(RouteStatus("reference-grant", RESOLVED),),
        exchanges=(ok("", "/", "web-backend", WEB_NS),),
        steps=(
            Step(
                ROUTE_TO_WEB_BACKEND,
                statuses=(RouteStatus("reference-grant", NOT_PERMITTED),),
                exchanges=(status("", "/", 500),),
            ),
        ),
    ),
    Case(
        "HTTPRouteInvalidCrossNamespaceBackendRefWithoutGrant",
        ROUTE_TO_WEB_BACKEND,
        statuses=(RouteStatus("reference-grant", NOT_PERMITTED),),
        exchanges=(status("", "/", 500),),
    ),
    Case(
        "HTTPRoutePartiallyInvalidViaInvalidReferenceGrant",
        ROUTE_TO_APP_BACKEND.format(same_namespace_rule=SAME_NAMESPACE_RULE) + INVALID_GRANTS,
        statuses=(RouteStatus("invalid-reference-grant", NOT_PERMITTED),),
        exchanges=(ok("", "/v1", V1), status("", "/app", 500)),
    ),
    Case(
        "HTTPRouteInvalidReferenceGrant",
        ROUTE_TO_APP_BACKEND.format(same_namespace_rule="") + INVALID_GRANTS,
        statuses=(RouteStatus("invalid-reference-grant", NOT_PERMITTED),),
        exchanges=(status("", "/app", 500),),
    ),
    Case(
        "HTTPRouteReferenceGrantToOtherBackendNamespace",
        # One grant in each target namespace: both backends of one rule resolve.
        f"""
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: two-namespaces, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{{name: same-namespace}}]
  rules:
  - matches: [{{path: {{type: PathPrefix, value: /app}}}}]
    backendRefs: [{{name: app-backend-v2, namespace: {APP_NS}, port: 8080}}]
  - matches: [{{path: {{type: PathPrefix, value: /web}}}}]
    backendRefs: [{{name: web-backend, namespace: {WEB_NS}, port: 8080}}]
---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {{name: all-services, namespace: {APP_NS}}}
spec:
  from: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: gateway-conformance-infra}}]
  to: [{{group: "", kind: Service}}]
"""
        + GRANT_TO_WEB_BACKEND.format(version="v1beta1"),
        statuses=(RouteStatus("two-namespaces", RESOLVED),),
        exchanges=(ok("", "/app", "app-backend-v2", APP_NS), ok("", "/web", "web-backend", WEB_NS)),
    ),
    secret_case(
        "GatewaySecretReferenceGrantAllInNamespace",
        "gateway-secret-reference-grant-all-in-namespace",
        SECRET_GRANT.format(name=""),
        ok_=True,
    ),
    secret_case(
        "GatewaySecretReferenceGrantSpecific",
        "gateway-secret-reference-grant-specific",
        SECRET_GRANT.format(name=", name: certificate"),
        ok_=True,
    ),
    secret_case(
        "GatewaySecretMissingReferenceGrant",
        "gateway-secret-missing-reference-grant",
        None,
        ok_=False,
    ),
    secret_case(
        "GatewaySecretInvalidReferenceGrant",
        "gateway-secret-invalid-reference-grant",
        SECRET_GRANT.format(name=", name: not-the-certificate"),
        ok_=False,
    ),
]


@pytest.mark.parametrize("case", params(CASES))
async def test_case(conformance: Conformance, case: Case) -> None:
    await run_case(conformance, case)
