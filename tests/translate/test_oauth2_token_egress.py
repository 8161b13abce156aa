"""An OAuth2 credential's token endpoint (an XBackend no route names) gets the egress decision of the
Gateways whose routes use the credentialed backend: found before resolution (weir.translate.users),
decided as those routes resolve it. A refused token endpoint refuses the backends needing its token:
their share is answered 500 and nothing of them reaches the IR (never a request without the token)."""

from __future__ import annotations

from weir import ir
from weir.api.meta import ObjectKey
from weir.loader import load_text
from weir.resources import Resources
from weir.translate import Settings, translate
from weir.translate import status as st
from weir.translate.gateways import accepted_classes, gateway_contexts
from weir.translate.grpcroutes import kind_conflicts
from weir.translate.users import xbackend_users

SETTINGS = Settings(dns_resolvers=(("127.0.0.1", 5353),))

MANIFESTS = """
apiVersion: weir.dev/v1alpha1
kind: GatewayClassConfig
metadata: {name: strict}
spec:
  egress:
    allowedHostnames: ALLOWED
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: strict}
spec:
  controllerName: weir.dev/gateway-controller
  parametersRef: {group: weir.dev, kind: GatewayClassConfig, name: strict}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: egress, namespace: default}
spec:
  gatewayClassName: strict
  listeners: [{name: http, port: 8080, protocol: HTTP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: ai, namespace: default}
spec:
  parentRefs: [{name: egress}]
  rules:
  - matches: [{path: {value: /llm}}]
    backendRefs: [{group: gateway.networking.x-k8s.io, kind: XBackend, name: llm}]
  - matches: [{path: {value: /svc}}]
    backendRefs: [{name: svc, port: 80}]
  - matches: [{path: {value: /plain}}]
    backendRefs: [{group: gateway.networking.x-k8s.io, kind: XBackend, name: plain}]
---
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackend
metadata: {name: idp, namespace: default}
spec:
  type: ExternalHostname
  externalHostname: {hostname: login.example.com}
  port: {port: 443}
  tls: {mode: ServerOnly}
---
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackend
metadata: {name: llm, namespace: default}
spec:
  type: ExternalHostname
  externalHostname: {hostname: llm.example.com}
  port: {port: 443}
  tls: {mode: ServerOnly}
---
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackend
metadata: {name: plain, namespace: default}
spec:
  type: ExternalHostname
  externalHostname: {hostname: plain.example.com}
  port: {port: 443}
  tls: {mode: ServerOnly}
---
apiVersion: v1
kind: Service
metadata: {name: svc, namespace: default}
spec:
  ports: [{name: http, port: 80}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: svc-1, namespace: default, labels: {kubernetes.io/service-name: svc}}
addressType: IPv4
ports: [{name: http, port: 8080}]
endpoints: [{addresses: [10.0.2.2]}]
---
apiVersion: v1
kind: Secret
metadata: {name: idp-client, namespace: default}
stringData: {client-id: weir-egress, client-secret: s3cr3t}
---
apiVersion: weir.dev/v1alpha1
kind: BackendCredentialPolicy
metadata: {name: token, namespace: default}
spec:
  targetRefs:
  - {group: gateway.networking.x-k8s.io, kind: XBackend, name: llm}
  - {group: "", kind: Service, name: svc}
  oauth2:
    tokenEndpoint: {backendRef: {name: idp}, path: /oauth2/token}
    clientIDRef: {name: idp-client, key: client-id}
    clientSecretRef: {name: idp-client, key: client-secret}
"""

IDP = ObjectKey("XBackend", "default", "idp")


def _resources(allowed: list[str]) -> Resources:
    loaded, problems = load_text(MANIFESTS.replace("ALLOWED", repr(allowed)), "case.yaml")
    assert not [p for p in problems if p.severity == "error"], [str(p) for p in problems]
    return Resources.from_objects(item.object for item in loaded)


def _actions(result: ir.IR) -> dict[str, ir.RouteAction]:
    [listener] = result.listeners
    assert isinstance(listener, ir.Listener)
    return {
        route.match.path.value: route.action
        for vhost in listener.virtual_hosts
        for route in vhost.routes
        if route.match.path is not None
    }


def _accepted(status: dict[str, object]) -> tuple[str, str]:
    [parent] = status["parents"]  # type: ignore[misc]
    [accepted] = [c for c in parent["conditions"] if c["type"] == st.ACCEPTED]
    return accepted["status"], accepted["reason"]


def test_the_users_of_a_token_endpoint_are_the_gateways_of_the_credentialed_backends() -> None:
    resources = _resources(["*.example.com"])
    classes, _ = accepted_classes(resources, SETTINGS)
    gateways = gateway_contexts(resources, SETTINGS, classes)
    users, _ = xbackend_users(resources, gateways, kind_conflicts(resources, gateways))
    assert users[IDP] == {ObjectKey("Gateway", "default", "egress")}


def test_an_allowed_token_endpoint_is_served_with_the_gateways_guard() -> None:
    result = translate(_resources(["*.example.com"]), SETTINGS)
    upstreams = {u.name: u for u in result.ir.upstreams}
    idp = upstreams["xbackend/default/idp"]
    assert idp.egress_guard is not None
    for name in ("xbackend/default/llm", "service/default/svc/80"):
        oauth2 = upstreams[name].oauth2
        assert oauth2 is not None and oauth2.token_upstream == "xbackend/default/idp"
    assert _accepted(result.statuses[IDP]) == ("True", st.R_ACCEPTED)
    assert all(isinstance(a, ir.Forward) for a in _actions(result.ir).values())


def test_a_refused_token_endpoint_refuses_the_backends_needing_its_token() -> None:
    result = translate(_resources(["llm.example.com", "plain.example.com"]), SETTINGS)
    names = {u.name for u in result.ir.upstreams}
    assert names == {"xbackend/default/plain"}, names  # neither the token endpoint nor its users
    assert not any(isinstance(s, ir.GenericSecret) for s in result.ir.secrets)  # the client secret
    actions = _actions(result.ir)
    assert actions["/llm"] == ir.DirectResponse(500)
    assert actions["/svc"] == ir.DirectResponse(500)
    assert isinstance(actions["/plain"], ir.Forward)
    # The token endpoint's status says why, under the Gateway that uses it through the credential.
    assert _accepted(result.statuses[IDP]) == ("False", st.R_NOT_ALLOWED)
