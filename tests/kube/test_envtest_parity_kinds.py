"""Validation parity for the kinds weir reads besides HTTPRoute, Gateway and GRPCRoute.

TLSRoute, TCPRoute, UDPRoute, GatewayClass, ListenerSet, ReferenceGrant,
BackendTLSPolicy, XBackend (v1.6) and XBackendTrafficPolicy, each against upstream's CRD on a real
API server.

As :mod:`test_envtest_upstream_parity` does for HTTPRoute, Gateway and
GRPCRoute: an API server of this module's own runs upstream's CRDs
(``testdata/gateway-api-v1.6.1/l4routes.yaml``, ``policies.yaml``,
``listenersets.yaml``, ``xbackends.yaml`` and ``xbackendtrafficpolicies.yaml``, each naming the commit
it was read at), and every case goes to it as a dry-run
create and to weir's loader; the two must agree on whether it is refused.
The cases are a valid object per kind, a variant per schema constraint it
reaches (:func:`parity.variants`), and hand-made cases for the CEL rules.

:data:`KNOWN` lists where weir differs on purpose, with the reason; each is
checked to stay exactly that.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from envtest import Api
from kube_world import start_cluster
from parity import generated, record, server_refuses, spec_schema, weir_refuses

UPSTREAM = Path(__file__).parent / "testdata" / "gateway-api-v1.6.1"


def crds() -> dict[str, dict[str, Any]]:
    """The CRDs this module's API server runs, by kind."""
    found: list[dict[str, Any]] = yaml.safe_load((UPSTREAM / "l4routes.yaml").read_text())["items"]
    found += yaml.safe_load((UPSTREAM / "policies.yaml").read_text())["items"]
    for single in ("xbackends.yaml", "xbackendtrafficpolicies.yaml", "listenersets.yaml"):
        found.append(yaml.safe_load((UPSTREAM / single).read_text()))
    # For upstream's experimental invalid examples of these two kinds (see the end).
    for single in ("httproutes.yaml", "grpcroutes.yaml"):
        found += [d for d in yaml.safe_load_all((UPSTREAM / single).read_text()) if d]
    return {crd["spec"]["names"]["kind"]: crd for crd in found}


CRDS = crds()


@pytest.fixture(scope="module")
def upstream() -> Iterator[Api]:
    folder = Path(tempfile.mkdtemp(prefix="weir-kube-parity-kinds-", dir="/tmp"))
    cluster = start_cluster(folder, crds=list(CRDS.values()))
    try:
        yield cluster.admin
    finally:
        cluster.stop()
        shutil.rmtree(folder, ignore_errors=True)


def cases(base: dict[str, Any], hand_made: dict[str, dict[str, Any]]) -> list[Any]:
    kind = base["kind"]
    made = generated(base, spec_schema(CRDS[kind]))
    made += [(f"{kind}:cel:{name}", obj) for name, obj in hand_made.items()]
    return [pytest.param(obj, id=case) for case, obj in made]


#: Where weir differs on purpose from the API server with these CRDs: case id → (the server's
#: verdict as a list of messages, weir's, why).
KNOWN: dict[str, tuple[list[str], list[str], str]] = {
    "XBackend:cel:port-name-valid": (
        ['spec.port.name: Invalid value: "string": Name must be a valid DNS label'],
        [],
        "v1.6.1's rule compares format.dns1123Label().validate(self) with null, but validate() "
        "returns an empty optional, never null: the server refuses every non-empty name. weir "
        "follows the rule's intent (a DNS label or nothing) and warns that such clusters refuse it",
    ),
}


def check(api: Api, obj: dict[str, Any], case: str) -> None:
    server = server_refuses(api, obj)
    weir = weir_refuses(obj)
    record(case, server, weir)
    if case in KNOWN:
        assert (server, weir) == KNOWN[case][:2]
        return
    assert bool(server) == bool(weir), f"\nAPI server: {server or 'accepts'}\nweir: {weir or 'accepts'}"


def with_spec(base: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {**base, "spec": {**base["spec"], **spec}}


def without(base: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {**base, "spec": {k: v for k, v in base["spec"].items() if k not in keys}}


# ------------------------------------------------------------------ TLSRoute, TCPRoute, UDPRoute

TLSROUTE: dict[str, Any] = yaml.safe_load(
    """
apiVersion: gateway.networking.k8s.io/v1
kind: TLSRoute
metadata: {name: tls, namespace: default}
spec:
  parentRefs:
  - {name: gw, namespace: infra, sectionName: tls, port: 443, group: gateway.networking.k8s.io, kind: Gateway}
  - {name: gw, namespace: infra, sectionName: tls2}
  hostnames: [tls.example.com, "*.example.org"]
  rules:
  - name: main
    backendRefs:
    - {name: web, port: 8443, weight: 3}
    - {name: web2, port: 8443, namespace: other, group: "", kind: Service, weight: 0}
"""
)

TCPROUTE: dict[str, Any] = {
    **TLSROUTE,
    "kind": "TCPRoute",
    "metadata": {"name": "tcp", "namespace": "default"},
    "spec": {k: v for k, v in TLSROUTE["spec"].items() if k != "hostnames"},
}
UDPROUTE: dict[str, Any] = {
    **TCPROUTE,
    "kind": "UDPRoute",
    "metadata": {"name": "udp", "namespace": "default"},
}


def _l4_cel(base: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The CEL rules TLSRoute, TCPRoute and UDPRoute share (parentRefs, backendRefs), and their lists."""
    backends = base["spec"]["rules"][0]["backendRefs"]
    return {
        "parents-same-twice": with_spec(base, parentRefs=[{"name": "gw"}, {"name": "gw"}]),
        "parents-one-section": with_spec(
            base, parentRefs=[{"name": "gw"}, {"name": "gw", "sectionName": "a"}]
        ),
        "parents-same-section-twice": with_spec(
            base, parentRefs=[{"name": "gw", "sectionName": "a"}, {"name": "gw", "sectionName": "a"}]
        ),
        "parents-by-port-only": with_spec(
            base, parentRefs=[{"name": "gw", "port": 1}, {"name": "gw", "port": 2}]
        ),
        "parents-other-namespace": with_spec(
            base, parentRefs=[{"name": "gw"}, {"name": "gw", "namespace": "b"}]
        ),
        "parents-empty-namespace": with_spec(
            base, parentRefs=[{"name": "gw"}, {"name": "gw", "namespace": ""}]
        ),
        "parents-none": with_spec(base, parentRefs=[]),
        "parents-absent": {**base, "spec": {k: v for k, v in base["spec"].items() if k != "parentRefs"}},
        "backend-service-without-port": with_spec(base, rules=[{"backendRefs": [{"name": "a"}]}]),
        "backend-core-pod-without-port": with_spec(
            base, rules=[{"backendRefs": [{"name": "a", "kind": "Pod"}]}]
        ),
        "backend-other-group-without-port": with_spec(
            base, rules=[{"backendRefs": [{"name": "a", "group": "example.com", "kind": "X"}]}]
        ),
        "backend-empty-kind": with_spec(
            base, rules=[{"backendRefs": [{"name": "a", "kind": "", "port": 1}]}]
        ),
        "rules-two": with_spec(base, rules=[{"backendRefs": backends}, {"backendRefs": backends}]),
        "rules-none": with_spec(base, rules=[]),
        "rule-without-backends": with_spec(base, rules=[{"name": "a"}]),
        "rule-empty-backends": with_spec(base, rules=[{"backendRefs": []}]),
        "backends-seventeen": with_spec(
            base, rules=[{"backendRefs": [{"name": f"b{i}", "port": 1} for i in range(17)]}]
        ),
        "spec-empty": {**base, "spec": {}},
        "valid-as-is": base,
    }


TLSROUTE_CEL = {
    **_l4_cel(TLSROUTE),
    "hostname-ip": with_spec(TLSROUTE, hostnames=["10.0.0.1"]),
    "hostname-ipv6": with_spec(TLSROUTE, hostnames=["::1"]),
    "hostname-wildcard-inside": with_spec(TLSROUTE, hostnames=["a.*.example.com"]),
    "hostname-wildcard-alone": with_spec(TLSROUTE, hostnames=["*"]),
    "hostname-wildcard-dot-only": with_spec(TLSROUTE, hostnames=["*."]),
    "hostname-trailing-dot": with_spec(TLSROUTE, hostnames=["example.com."]),
    "hostname-single-label": with_spec(TLSROUTE, hostnames=["localhost"]),
    "hostname-numeric": with_spec(TLSROUTE, hostnames=["1.2.3"]),
    "hostnames-none": with_spec(TLSROUTE, hostnames=[]),
    "hostnames-absent": {**TLSROUTE, "spec": {k: v for k, v in TLSROUTE["spec"].items() if k != "hostnames"}},
    "hostnames-repeat": with_spec(TLSROUTE, hostnames=["a.example.com", "a.example.com"]),
}


@pytest.mark.parametrize("obj", cases(TLSROUTE, TLSROUTE_CEL))
def test_tlsroute_parity(upstream: Api, obj: dict[str, Any], request: pytest.FixtureRequest) -> None:
    check(upstream, obj, request.node.callspec.id)


@pytest.mark.parametrize("obj", cases(TCPROUTE, _l4_cel(TCPROUTE)))
def test_tcproute_parity(upstream: Api, obj: dict[str, Any], request: pytest.FixtureRequest) -> None:
    check(upstream, obj, request.node.callspec.id)


@pytest.mark.parametrize("obj", cases(UDPROUTE, _l4_cel(UDPROUTE)))
def test_udproute_parity(upstream: Api, obj: dict[str, Any], request: pytest.FixtureRequest) -> None:
    check(upstream, obj, request.node.callspec.id)


# ------------------------------------------------------------------ XBackend (v1.6)

XBACKEND: dict[str, Any] = yaml.safe_load(
    """
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackend
metadata: {name: api, namespace: default}
spec:
  type: ExternalHostname
  externalHostname: {hostname: api.example.com}
  port: {port: 443}
  protocol: HTTP2
  tls:
    mode: ClientAndServer
    clientCertificateRef: {name: client, namespace: certs, group: "", kind: Secret}
    validation:
      hostname: api.example.com
      caCertificateRefs: [{group: "", kind: ConfigMap, name: ca}]
      subjectAltNames:
      - {type: Hostname, hostname: "*.example.com"}
      - {type: URI, uri: "spiffe://example.com/ns/a/sa/b"}
"""
)


def _tls(**tls: Any) -> dict[str, Any]:
    return with_spec(XBACKEND, tls=tls)


def _validation(**validation: Any) -> dict[str, Any]:
    return _tls(mode="ServerOnly", validation={"hostname": "api.example.com", **validation})


XBACKEND_CEL = {
    "type-without-external-hostname": {
        **XBACKEND,
        "spec": {k: v for k, v in XBACKEND["spec"].items() if k != "externalHostname"},
    },
    "hostname-cluster-local": with_spec(
        XBACKEND, externalHostname={"hostname": "api.default.svc.cluster.local"}
    ),
    "hostname-ip": with_spec(XBACKEND, externalHostname={"hostname": "10.0.0.1"}),
    "port-name-empty": with_spec(XBACKEND, port={"port": 443, "name": ""}),
    "port-name-valid": with_spec(XBACKEND, port={"port": 443, "name": "https"}),
    "port-name-bad": with_spec(XBACKEND, port={"port": 443, "name": "Not_A_Label"}),
    "protocol-absent": {**XBACKEND, "spec": {k: v for k, v in XBACKEND["spec"].items() if k != "protocol"}},
    "protocol-each": with_spec(XBACKEND, protocol="MCP"),
    "tls-none": _tls(mode="None"),
    "tls-server-only": _tls(
        mode="ServerOnly", validation={"hostname": "a.example.com", "wellKnownCACertificates": "System"}
    ),
    "tls-client-cert-without-mode-for-it": _tls(mode="ServerOnly", clientCertificateRef={"name": "c"}),
    "tls-client-and-server-without-cert": _tls(mode="ClientAndServer"),
    "tls-without-mode": {**XBACKEND, "spec": {**XBACKEND["spec"], "tls": {"validation": {"hostname": "a"}}}},
    "validation-without-ca": _validation(),
    "validation-both-ca": _validation(
        caCertificateRefs=[{"group": "", "kind": "ConfigMap", "name": "ca"}], wellKnownCACertificates="System"
    ),
    "validation-empty-refs-and-system": _validation(caCertificateRefs=[], wellKnownCACertificates="System"),
    "validation-empty-refs": _validation(caCertificateRefs=[]),
    "well-known-public": _validation(wellKnownCACertificates="Public"),
    "well-known-prefixed": _validation(wellKnownCACertificates="example.com/corp-roots"),
    "well-known-prefixed-underscore": _validation(wellKnownCACertificates="example.com/corp_roots.v2"),
    "well-known-prefix-only": _validation(wellKnownCACertificates="example.com/"),
    "well-known-empty": _validation(wellKnownCACertificates=""),
    "san-hostname-without-value": _validation(
        wellKnownCACertificates="System", subjectAltNames=[{"type": "Hostname"}]
    ),
    "san-uri-without-value": _validation(wellKnownCACertificates="System", subjectAltNames=[{"type": "URI"}]),
    "san-hostname-with-uri": _validation(
        wellKnownCACertificates="System",
        subjectAltNames=[{"type": "Hostname", "hostname": "a.example.com", "uri": "https://a"}],
    ),
    "san-uri-with-hostname": _validation(
        wellKnownCACertificates="System",
        subjectAltNames=[{"type": "URI", "hostname": "a.example.com", "uri": "https://a"}],
    ),
    "san-uri-without-scheme": _validation(
        wellKnownCACertificates="System", subjectAltNames=[{"type": "URI", "uri": "example.com/a"}]
    ),
    "san-uri-without-authority": _validation(
        wellKnownCACertificates="System", subjectAltNames=[{"type": "URI", "uri": "urn:example:a"}]
    ),
    "validation-hostname-wildcard": _validation(wellKnownCACertificates="System", hostname="*.example.com"),
    "valid-as-is": XBACKEND,
}


@pytest.mark.parametrize("obj", cases(XBACKEND, XBACKEND_CEL))
def test_xbackend_v16_parity(upstream: Api, obj: dict[str, Any], request: pytest.FixtureRequest) -> None:
    check(upstream, obj, request.node.callspec.id)


# ------------------------------------------------------------------ GatewayClass

GATEWAY_CLASS: dict[str, Any] = yaml.safe_load(
    """
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: weir}
spec:
  controllerName: weir.dev/gateway-controller
  description: weir's Envoy gateways
  parametersRef: {group: weir.dev, kind: GatewayClassConfig, name: egress, namespace: infra}
"""
)

GATEWAY_CLASS_CASES = {
    "controller-without-path": with_spec(GATEWAY_CLASS, controllerName="weir.dev"),
    "controller-without-domain": with_spec(GATEWAY_CLASS, controllerName="/gateway"),
    "controller-path-punctuation": with_spec(GATEWAY_CLASS, controllerName="example.com/a/b~c%20(d)"),
    "controller-path-space": with_spec(GATEWAY_CLASS, controllerName="example.com/a b"),
    "controller-uppercase-domain": with_spec(GATEWAY_CLASS, controllerName="Example.com/a"),
    "parameters-core-configmap": with_spec(
        GATEWAY_CLASS, parametersRef={"group": "", "kind": "ConfigMap", "name": "c", "namespace": "n"}
    ),
    "parameters-without-group": with_spec(GATEWAY_CLASS, parametersRef={"kind": "ConfigMap", "name": "c"}),
    "description-empty": with_spec(GATEWAY_CLASS, description=""),
    "spec-empty": {**GATEWAY_CLASS, "spec": {}},
    "valid-as-is": GATEWAY_CLASS,
}


@pytest.mark.parametrize("obj", cases(GATEWAY_CLASS, GATEWAY_CLASS_CASES))
def test_gatewayclass_parity(upstream: Api, obj: dict[str, Any], request: pytest.FixtureRequest) -> None:
    check(upstream, obj, request.node.callspec.id)


# ------------------------------------------------------------------ ReferenceGrant (v1beta1 and v1)

REFERENCE_GRANT: dict[str, Any] = yaml.safe_load(
    """
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: grant, namespace: default}
spec:
  from:
  - {group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: web}
  - {group: "", kind: Pod, namespace: jobs}
  to:
  - {group: "", kind: Service, name: api}
  - {group: "", kind: Secret}
"""
)

REFERENCE_GRANT_CASES = {
    "from-without-namespace": with_spec(REFERENCE_GRANT, **{"from": [{"group": "", "kind": "Pod"}]}),
    "to-without-group": with_spec(REFERENCE_GRANT, to=[{"kind": "Service"}]),
    "to-name-empty": with_spec(REFERENCE_GRANT, to=[{"group": "", "kind": "Service", "name": ""}]),
    "from-none": with_spec(REFERENCE_GRANT, **{"from": []}),
    "to-absent": without(REFERENCE_GRANT, "to"),
    "v1": {**REFERENCE_GRANT, "apiVersion": "gateway.networking.k8s.io/v1"},
    "v1-bad-kind": {
        **with_spec(REFERENCE_GRANT, to=[{"group": "", "kind": "9Service"}]),
        "apiVersion": "gateway.networking.k8s.io/v1",
    },
    "valid-as-is": REFERENCE_GRANT,
}


@pytest.mark.parametrize("obj", cases(REFERENCE_GRANT, REFERENCE_GRANT_CASES))
def test_referencegrant_parity(upstream: Api, obj: dict[str, Any], request: pytest.FixtureRequest) -> None:
    check(upstream, obj, request.node.callspec.id)


# ------------------------------------------------------------------ BackendTLSPolicy

BACKEND_TLS_POLICY: dict[str, Any] = yaml.safe_load(
    """
apiVersion: gateway.networking.k8s.io/v1
kind: BackendTLSPolicy
metadata: {name: tls, namespace: default}
spec:
  targetRefs:
  - {group: "", kind: Service, name: api, sectionName: https}
  - {group: "", kind: Service, name: api, sectionName: grpc}
  validation:
    hostname: api.example.com
    caCertificateRefs: [{group: "", kind: ConfigMap, name: ca}]
    subjectAltNames:
    - {type: Hostname, hostname: "*.example.com"}
    - {type: URI, uri: "spiffe://example.com/ns/a/sa/b"}
  options: {example.com/min-version: "1.3"}
"""
)


def _policy_validation(**validation: Any) -> dict[str, Any]:
    return with_spec(BACKEND_TLS_POLICY, validation={"hostname": "api.example.com", **validation})


_SVC = {"group": "", "kind": "Service"}

BACKEND_TLS_POLICY_CASES = {
    "targets-same-twice": with_spec(
        BACKEND_TLS_POLICY, targetRefs=[{**_SVC, "name": "a"}, {**_SVC, "name": "a"}]
    ),
    "targets-one-section": with_spec(
        BACKEND_TLS_POLICY, targetRefs=[{**_SVC, "name": "a"}, {**_SVC, "name": "a", "sectionName": "b"}]
    ),
    "targets-same-section": with_spec(
        BACKEND_TLS_POLICY,
        targetRefs=[{**_SVC, "name": "a", "sectionName": "b"}, {**_SVC, "name": "a", "sectionName": "b"}],
    ),
    "target-xbackend": with_spec(
        BACKEND_TLS_POLICY,
        targetRefs=[{"group": "gateway.networking.x-k8s.io", "kind": "XBackend", "name": "a"}],
    ),
    "targets-none": with_spec(BACKEND_TLS_POLICY, targetRefs=[]),
    "validation-absent": without(BACKEND_TLS_POLICY, "validation"),
    "validation-without-ca": _policy_validation(),
    "validation-both-ca": _policy_validation(
        caCertificateRefs=[{"group": "", "kind": "ConfigMap", "name": "ca"}], wellKnownCACertificates="System"
    ),
    "well-known-system": _policy_validation(wellKnownCACertificates="System"),
    "well-known-public": _policy_validation(wellKnownCACertificates="Public"),
    "well-known-prefixed": _policy_validation(wellKnownCACertificates="example.com/roots"),
    "san-hostname-without-value": _policy_validation(
        wellKnownCACertificates="System", subjectAltNames=[{"type": "Hostname"}]
    ),
    "san-uri-with-hostname": _policy_validation(
        wellKnownCACertificates="System",
        subjectAltNames=[{"type": "URI", "hostname": "a.example.com", "uri": "https://a"}],
    ),
    "options-seventeen": with_spec(BACKEND_TLS_POLICY, options={f"example.com/o{i}": "v" for i in range(17)}),
    "options-empty-value": with_spec(BACKEND_TLS_POLICY, options={"example.com/o": ""}),
    "options-key-bad": with_spec(BACKEND_TLS_POLICY, options={"a b": "c"}),
    "valid-as-is": BACKEND_TLS_POLICY,
}


@pytest.mark.parametrize("obj", cases(BACKEND_TLS_POLICY, BACKEND_TLS_POLICY_CASES))
def test_backendtlspolicy_parity(upstream: Api, obj: dict[str, Any], request: pytest.FixtureRequest) -> None:
    check(upstream, obj, request.node.callspec.id)


# ------------------------------------------------------------------ XBackendTrafficPolicy

TRAFFIC_POLICY: dict[str, Any] = yaml.safe_load(
    """
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackendTrafficPolicy
metadata: {name: traffic, namespace: default}
spec:
  targetRefs:
  - {group: "", kind: Service, name: api}
  - {group: gateway.networking.x-k8s.io, kind: XBackend, name: ext}
  retryConstraint:
    budget: {interval: 10s, percent: 20}
    minRetryRate: {count: 10, interval: 1s}
  sessionPersistence:
    sessionName: session
    absoluteTimeout: 1h
    type: Cookie
    cookieConfig: {lifetimeType: Permanent}
"""
)


def _session(**session: Any) -> dict[str, Any]:
    return with_spec(TRAFFIC_POLICY, sessionPersistence=session)


def _retry(**retry: Any) -> dict[str, Any]:
    return with_spec(TRAFFIC_POLICY, retryConstraint=retry)


TRAFFIC_POLICY_CASES = {
    "targets-same-twice": with_spec(
        TRAFFIC_POLICY, targetRefs=[{**_SVC, "name": "a"}, {**_SVC, "name": "a"}]
    ),
    "targets-differ-in-kind": with_spec(
        TRAFFIC_POLICY, targetRefs=[{**_SVC, "name": "a"}, {"group": "", "kind": "Pod", "name": "a"}]
    ),
    "permanent-without-timeout": _session(cookieConfig={"lifetimeType": "Permanent"}),
    "session-without-timeout": _session(cookieConfig={"lifetimeType": "Session"}),
    "cookie-config-empty": _session(cookieConfig={}),
    "cookie-config-on-header": _session(type="Header", cookieConfig={"lifetimeType": "Session"}),
    "header-without-cookie-config": _session(type="Header", sessionName="x-session"),
    "cookie-config-with-default-type": _session(cookieConfig={}, absoluteTimeout="1s"),
    "timeout-bad": _session(absoluteTimeout="1d"),
    "timeout-zero": _session(absoluteTimeout="0s"),
    "session-empty": _session(),
    "budget-interval-under-a-second": _retry(budget={"interval": "999ms"}),
    "budget-interval-hour": _retry(budget={"interval": "1h"}),
    "budget-interval-over-an-hour": _retry(budget={"interval": "1h1ms"}),
    "budget-percent-zero": _retry(budget={"percent": 0}),
    "budget-empty": _retry(budget={}),
    "rate-interval-zero": _retry(minRetryRate={"count": 1, "interval": "0s"}),
    "rate-interval-zero-ms": _retry(minRetryRate={"count": 1, "interval": "0ms"}),
    "rate-interval-1ms": _retry(minRetryRate={"count": 1, "interval": "1ms"}),
    "rate-interval-over-an-hour": _retry(minRetryRate={"count": 1, "interval": "61m"}),
    "rate-without-count": _retry(minRetryRate={"interval": "1s"}),
    "rate-without-interval": _retry(minRetryRate={"count": 1}),
    "rate-empty": _retry(minRetryRate={}),
    "retry-empty": _retry(),
    "targets-only": without(TRAFFIC_POLICY, "retryConstraint", "sessionPersistence"),
    "valid-as-is": TRAFFIC_POLICY,
}


@pytest.mark.parametrize("obj", cases(TRAFFIC_POLICY, TRAFFIC_POLICY_CASES))
def test_xbackendtrafficpolicy_parity(
    upstream: Api, obj: dict[str, Any], request: pytest.FixtureRequest
) -> None:
    check(upstream, obj, request.node.callspec.id)


# ------------------------------------------------------------------ ListenerSet

LISTENER_SET: dict[str, Any] = yaml.safe_load(
    """
apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata: {name: team, namespace: default}
spec:
  parentRef: {name: gw, namespace: infra, group: gateway.networking.k8s.io, kind: Gateway}
  listeners:
  - name: http
    port: 8080
    protocol: HTTP
    hostname: "*.team.example.com"
    allowedRoutes:
      namespaces:
        from: Selector
        selector:
          matchLabels: {team: a}
          matchExpressions: [{key: env, operator: In, values: [prod]}]
      kinds: [{kind: HTTPRoute, group: gateway.networking.k8s.io}]
  - name: https
    port: 8443
    protocol: HTTPS
    hostname: app.team.example.com
    tls:
      mode: Terminate
      certificateRefs: [{name: cert, namespace: certs, kind: Secret, group: ""}]
      options: {example.com/min-version: "1.2"}
  - {name: tls, port: 9443, protocol: TLS, tls: {mode: Passthrough}}
  - {name: tcp, port: 9000, protocol: TCP}
  - {name: udp, port: 9000, protocol: UDP}
"""
)


def _entries(*listeners: dict[str, Any]) -> dict[str, Any]:
    return with_spec(LISTENER_SET, listeners=list(listeners))


_HTTP = {"name": "a", "port": 80, "protocol": "HTTP"}

LISTENER_SET_CASES = {
    "tls-on-http": _entries({**_HTTP, "tls": {"mode": "Passthrough"}}),
    "https-passthrough": _entries(
        {"name": "a", "port": 443, "protocol": "HTTPS", "tls": {"mode": "Passthrough"}}
    ),
    "https-without-tls": _entries({"name": "a", "port": 443, "protocol": "HTTPS"}),
    "tls-without-tls": _entries({"name": "a", "port": 443, "protocol": "TLS"}),
    "terminate-without-certificates": _entries({"name": "a", "port": 443, "protocol": "HTTPS", "tls": {}}),
    "hostname-on-tcp": _entries({"name": "a", "port": 1, "protocol": "TCP", "hostname": "a.example.com"}),
    "same-name": _entries(_HTTP, {**_HTTP, "port": 81}),
    "same-name-other-case": _entries(_HTTP, {**_HTTP, "name": "A", "port": 81}),
    "same-port-protocol-hostname": _entries(_HTTP, {**_HTTP, "name": "b"}),
    "same-port-other-hostname": _entries(_HTTP, {**_HTTP, "name": "b", "hostname": "b.example.com"}),
    "custom-protocol": _entries({"name": "a", "port": 1, "protocol": "example.com/thrift"}),
    "no-listeners": _entries(),
    "parent-service": with_spec(LISTENER_SET, parentRef={"name": "s", "kind": "Service", "group": ""}),
    "parent-absent": without(LISTENER_SET, "parentRef"),
    "valid-as-is": LISTENER_SET,
}


@pytest.mark.parametrize("obj", cases(LISTENER_SET, LISTENER_SET_CASES))
def test_listenerset_parity(upstream: Api, obj: dict[str, Any], request: pytest.FixtureRequest) -> None:
    check(upstream, obj, request.node.callspec.id)


# ------------------------------------------------------------------ upstream's experimental invalid examples

EXPERIMENTAL_EXAMPLES = [
    d for d in yaml.safe_load_all((UPSTREAM / "invalid-examples-experimental.yaml").read_text()) if d
]


#: Examples the standard channel's CRD (which this server runs, and weir follows) accepts: the
#: experimental channel's refuses them with a rule the standard one lacks. Both must accept.
STANDARD_ACCEPTS = {
    "invalid-header-value": "a header value's pattern (no CR, LF) is the experimental channel's only",
}


@pytest.mark.parametrize(
    "obj",
    [pytest.param(o, id=f"upstream-experimental:{o['metadata']['name']}") for o in EXPERIMENTAL_EXAMPLES],
)
def test_upstream_experimental_invalid_example(upstream: Api, obj: dict[str, Any]) -> None:
    """Upstream's "must be refused" list of the experimental channel: both refuse each, but for
    the ones only the experimental channel's rules refuse (:data:`STANDARD_ACCEPTS`)."""
    name = obj["metadata"]["name"]
    server = server_refuses(upstream, obj)
    weir = weir_refuses(obj)
    record(f"upstream-experimental:{name}", server, weir)
    refused = name not in STANDARD_ACCEPTS
    assert bool(server) is refused, f"API server: {server or 'accepts'}"
    assert bool(weir) is refused, f"weir: {weir or 'accepts'}"
