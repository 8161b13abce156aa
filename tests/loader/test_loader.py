"""weir.loader: manifests → validated objects, and problems that say where and what."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from weir.api import registry
from weir.api.core_v1 import Namespace, Secret, Service
from weir.api.gateway_v1 import GatewayClass, HTTPRoute
from weir.api.gateway_v1_tcproute import TCPRoute
from weir.api.meta import ObjectKey
from weir.loader import (
    Loaded,
    LoadReport,
    Problem,
    load_file,
    load_paths,
    load_text,
    manifest_files,
)

TESTDATA = Path(__file__).parent / "testdata" / "loader"
VALID = TESTDATA / "valid"
TREE = TESTDATA / "tree"


def strs(problems: list[Problem]) -> list[str]:
    return [str(p) for p in problems]


# ------------------------------------------------------------------ valid manifests


def test_every_registered_kind_has_a_valid_fixture() -> None:
    kinds = {m.KIND for m in registry.MODELS}
    fixtures = {load_file(path)[0][0].object.KIND for path in sorted(VALID.glob("*.yaml"))}
    assert kinds == fixtures


@pytest.mark.parametrize("model", registry.MODELS, ids=lambda m: m.KIND)
def test_valid_manifest_of_each_kind_loads(model: type) -> None:
    path = VALID / f"{model.KIND.lower()}.yaml"  # type: ignore[attr-defined]
    objects, problems = load_file(path)
    assert problems == []
    assert len(objects) == 1
    loaded = objects[0]
    assert isinstance(loaded.object, model)
    assert loaded.file == str(path)
    assert loaded.line == 1


def test_valid_fixtures_read_as_written() -> None:
    report = load_paths([VALID])
    assert report.problems == []
    by_key = {o.object.key: o.object for o in report.objects}
    route = by_key[ObjectKey("HTTPRoute", "egress", "openai")]
    assert isinstance(route, HTTPRoute)
    ref = route.spec.rules[0].backend_refs[0]
    assert (ref.kind, ref.name, ref.port) == ("XBackend", "openai", 443)
    secret = by_key[ObjectKey("Secret", "egress", "openai-key")]
    assert isinstance(secret, Secret)
    assert secret.value("token") == b"sk-test"


# ------------------------------------------------------------------ invalid manifests

# Every case is the second document of a file; the first is 4 lines plus `---`,
# so the object under test starts on line 6.
PRELUDE = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: prelude\n---\n"

ROUTE = """\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: web
spec:
"""
GATEWAY = """\
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: gw
  namespace: infra
spec:
"""
GATEWAY_WITH_ADDRESSES = (
    GATEWAY + "  gatewayClassName: weir\n  listeners: [{name: web, port: 80, protocol: HTTP}]\n  addresses:\n"
)
GATEWAY_INFRASTRUCTURE = (
    GATEWAY
    + "  gatewayClassName: weir\n  listeners: [{name: web, port: 80, protocol: HTTP}]\n  infrastructure:\n"
)
TLSROUTE = """\
apiVersion: gateway.networking.k8s.io/v1
kind: TLSRoute
metadata:
  name: db
  namespace: infra
spec:
"""
TCPROUTE_V1 = """\
apiVersion: gateway.networking.k8s.io/v1
kind: TCPRoute
metadata:
  name: db
  namespace: infra
spec:
"""
XBACKEND = """\
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackend
metadata:
  name: openai
  namespace: egress
spec:
  type: ExternalHostname
  port: {port: 443}
"""

INVALID: list[tuple[str, str, list[str]]] = [
    (
        "route-port-zero",
        ROUTE + "  rules:\n  - backendRefs:\n    - {name: a, port: 80}\n    - {name: b, port: 0}\n",
        [
            "case.yaml:6: HTTPRoute default/web: spec.rules[0].backendRefs[1].port: "
            "Invalid value: 0: should be greater than or equal to 1"
        ],
    ),
    (
        "route-port-too-big",
        ROUTE + "  rules:\n  - backendRefs: [{name: a, port: 65536}]\n",
        [
            "case.yaml:6: HTTPRoute default/web: spec.rules[0].backendRefs[0].port: "
            "Invalid value: 65536: should be less than or equal to 65535"
        ],
    ),
    (
        "route-port-string",
        ROUTE + "  rules:\n  - backendRefs: [{name: a, port: http}]\n",
        [
            "case.yaml:6: HTTPRoute default/web: spec.rules[0].backendRefs[0].port: "
            'Invalid value: "string": must be of type integer'
        ],
    ),
    (
        "route-weight-negative",
        ROUTE + "  rules:\n  - backendRefs: [{name: a, port: 80, weight: -1}]\n",
        [
            "case.yaml:6: HTTPRoute default/web: spec.rules[0].backendRefs[0].weight: "
            "Invalid value: -1: should be greater than or equal to 0"
        ],
    ),
    (
        "route-backend-name-missing",
        ROUTE + "  rules:\n  - backendRefs: [{port: 80}]\n",
        # No derived "spec.rules: should have at least 1 items" noise.
        ["case.yaml:6: HTTPRoute default/web: spec.rules[0].backendRefs[0].name: Required value"],
    ),
    (
        "route-path-type-enum",
        ROUTE + "  rules:\n  - matches:\n    - path: {type: Prefix, value: /}\n",
        [
            "case.yaml:6: HTTPRoute default/web: spec.rules[0].matches[0].path.type: "
            'Unsupported value: "Prefix": supported values: '
            '"Exact", "PathPrefix", "RegularExpression"'
        ],
    ),
    (
        "route-path-double-slash",
        ROUTE + "  rules:\n  - matches:\n    - path: {type: Exact, value: /a//b}\n",
        [
            "case.yaml:6: HTTPRoute default/web: spec.rules[0].matches[0].path: "
            "Invalid value: \"object\": must not contain '//' when type one of "
            "['Exact', 'PathPrefix']"
        ],
    ),
    (
        "route-path-relative",
        ROUTE + "  rules:\n  - matches:\n    - path: {value: api}\n",
        [
            "case.yaml:6: HTTPRoute default/web: spec.rules[0].matches[0].path: "
            "Invalid value: \"object\": value must be an absolute path and start with '/' "
            "when type one of ['Exact', 'PathPrefix']"
        ],
    ),
    (
        "route-method-enum",
        ROUTE + "  rules:\n  - matches:\n    - method: FETCH\n",
        [
            "case.yaml:6: HTTPRoute default/web: spec.rules[0].matches[0].method: "
            'Unsupported value: "FETCH": supported values: "GET", "HEAD", "POST", "PUT", '
            '"DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"'
        ],
    ),
    (
        "route-header-name-pattern",
        ROUTE + "  rules:\n  - matches:\n    - headers: [{name: 'x team', value: a}]\n",
        [
            "case.yaml:6: HTTPRoute default/web: spec.rules[0].matches[0].headers[0].name: "
            "Invalid value: \"x team\": should match '^[A-Za-z0-9!#$%&'*+\\-.^_\\x60|~]+$'"
        ],
    ),
    (
        "route-hostname-pattern",
        ROUTE + "  hostnames: [Example.COM]\n",
        [
            "case.yaml:6: HTTPRoute default/web: spec.hostnames[0]: "
            'Invalid value: "Example.COM": should match '
            "'^(\\*\\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$'"
        ],
    ),
    (
        "route-too-many-hostnames",
        ROUTE + "  hostnames: [" + ", ".join(f"h{i}.example.com" for i in range(17)) + "]\n",
        ["case.yaml:6: HTTPRoute default/web: spec.hostnames: Too many: 17: must have at most 16 items"],
    ),
    (
        "route-parent-name-too-long",
        ROUTE + "  parentRefs: [{name: " + "g" * 254 + "}]\n",
        ["case.yaml:6: HTTPRoute default/web: spec.parentRefs[0].name: Too long: may not be longer than 253"],
    ),
    (
        "route-rules-not-a-list",
        ROUTE + "  rules: {matches: []}\n",
        ['case.yaml:6: HTTPRoute default/web: spec.rules: Invalid value: "object": must be of type array'],
    ),
    (
        "route-several-errors-in-order",
        ROUTE
        + "  parentRefs: [{name: gw, port: 0}]\n"
        + "  rules:\n  - backendRefs: [{name: a, port: 80, weight: 2000000}]\n",
        [
            "case.yaml:6: HTTPRoute default/web: spec.parentRefs[0].port: "
            "Invalid value: 0: should be greater than or equal to 1",
            "case.yaml:6: HTTPRoute default/web: spec.rules[0].backendRefs[0].weight: "
            "Invalid value: 2000000: should be less than or equal to 1000000",
        ],
    ),
    (
        "gateway-class-name-missing",
        GATEWAY + "  listeners: [{name: http, port: 80, protocol: HTTP}]\n",
        ["case.yaml:6: Gateway infra/gw: spec.gatewayClassName: Required value"],
    ),
    (
        "gateway-no-listeners",
        GATEWAY + "  gatewayClassName: weir\n  listeners: []\n",
        ["case.yaml:6: Gateway infra/gw: spec.listeners: Invalid value: 0: should have at least 1 items"],
    ),
    (
        "gateway-https-passthrough",
        GATEWAY
        + "  gatewayClassName: weir\n"
        + "  listeners: [{name: https, port: 443, protocol: HTTPS, tls: {mode: Passthrough}}]\n",
        [
            "case.yaml:6: Gateway infra/gw: spec.listeners[0]: "
            'Invalid value: "object": tls mode must be Terminate for protocol HTTPS'
        ],
    ),
    (
        "gateway-tls-without-tls",
        GATEWAY + "  gatewayClassName: weir\n  listeners: [{name: tls, port: 443, protocol: tls}]\n",
        [
            "case.yaml:6: Gateway infra/gw: spec.listeners[0]: "
            'Invalid value: "object": tls mode must be set for protocol TLS'
        ],
    ),
    (
        "gateway-terminate-without-certificates",
        GATEWAY
        + "  gatewayClassName: weir\n  listeners: [{name: https, port: 443, protocol: HTTPS, tls: {}}]\n",
        [
            "case.yaml:6: Gateway infra/gw: spec.listeners[0].tls: "
            'Invalid value: "object": certificateRefs or options must be specified when mode is Terminate'
        ],
    ),
    (
        "tlsroute-hostnames",
        TLSROUTE + "  hostnames: [10.0.0.1]\n  rules: [{backendRefs: [{name: db, port: 5432}]}]\n",
        [
            'case.yaml:6: TLSRoute infra/db: spec.hostnames: Invalid value: "array": '
            "Hostnames cannot contain an IP"
        ],
    ),
    (
        "tlsroute-two-rules",
        TLSROUTE
        + "  hostnames: [db.example.com]\n"
        + "  rules: [{backendRefs: [{name: db, port: 5432}]}, {backendRefs: [{name: db, port: 5433}]}]\n",
        ["case.yaml:6: TLSRoute infra/db: spec.rules: Too many: 2: must have at most 1 items"],
    ),
    (
        "tlsroute-no-hostnames",
        TLSROUTE + "  rules: [{backendRefs: [{name: db, port: 5432}]}]\n",
        ["case.yaml:6: TLSRoute infra/db: spec.hostnames: Required value"],
    ),
    (
        "gateway-duplicate-listener-names",
        GATEWAY
        + "  gatewayClassName: weir\n"
        + "  listeners:\n"
        + "  - {name: web, port: 80, protocol: HTTP}\n"
        + "  - {name: web, port: 8080, protocol: HTTP}\n",
        [
            "case.yaml:6: Gateway infra/gw: spec.listeners: "
            'Invalid value: "array": Listener name must be unique within the Gateway'
        ],
    ),
    # ---- constraints of the released v1.6.1 CRDs, each with the API server's message (measured
    # on kube-apiserver v1.32 with the same schema constructs: formats in oneOf/anyOf, list types,
    # patterns, CEL)
    (
        "gateway-address-ipv4-with-port",
        GATEWAY_WITH_ADDRESSES + "  - {type: IPAddress, value: '1.2.3.4:8080'}\n",
        [
            "case.yaml:6: Gateway infra/gw: spec.addresses[0].value: "
            'Invalid value: "1.2.3.4:8080": must be of type ipv4: "1.2.3.4:8080"'
        ],
    ),
    (
        "gateway-address-ipv6-with-prefix-default-type",
        GATEWAY_WITH_ADDRESSES + "  - {value: '12:34:56::/64'}\n",
        [
            "case.yaml:6: Gateway infra/gw: spec.addresses[0].value: "
            'Invalid value: "12:34:56::/64": must be of type ipv4: "12:34:56::/64"'
        ],
    ),
    (
        "gateway-address-ipv4-empty",
        GATEWAY_WITH_ADDRESSES + "  - {type: IPAddress, value: ''}\n",
        [
            "case.yaml:6: Gateway infra/gw: spec.addresses[0].value: "
            'Invalid value: "": must be of type ipv4: ""'
        ],
    ),
    (
        "gateway-address-hostname-with-port",
        GATEWAY_WITH_ADDRESSES + "  - {type: Hostname, value: 'foo.bar:80'}\n",
        [
            'case.yaml:6: Gateway infra/gw: spec.addresses[0]: Invalid value: "object": '
            "Hostname value must be empty or contain only valid characters (matching "
            "^(\\*\\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$)"
        ],
    ),
    (
        "gateway-address-values-unique",
        GATEWAY_WITH_ADDRESSES
        + "  - {type: IPAddress, value: 1.2.3.4}\n  - {value: 1.2.3.4}\n"
        + "  - {type: Hostname, value: foo.bar}\n  - {type: Hostname, value: foo.bar}\n",
        [
            'case.yaml:6: Gateway infra/gw: spec.addresses: Invalid value: "array": '
            "IPAddress values must be unique",
            'case.yaml:6: Gateway infra/gw: spec.addresses: Invalid value: "array": '
            "Hostname values must be unique",
        ],
    ),
    (
        "gateway-address-type-pattern",
        GATEWAY_WITH_ADDRESSES + "  - {type: Other, value: x}\n",
        [
            'case.yaml:6: Gateway infra/gw: spec.addresses[0].type: Invalid value: "Other": should match '
            "'^Hostname|IPAddress|NamedAddress|[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
            "\\/[A-Za-z0-9\\/\\-._~%!$&'()*+,;=:]+$'"
        ],
    ),
    (
        "gateway-infrastructure-label-key",
        GATEWAY_INFRASTRUCTURE + "    labels: {'Bad Key': v}\n",
        [
            'case.yaml:6: Gateway infra/gw: spec.infrastructure.labels: Invalid value: "object": Label keys '
            "must be in the form of an optional DNS subdomain prefix followed by a required name segment "
            "of up to 63 characters."
        ],
    ),
    (
        "gateway-infrastructure-label-value",
        GATEWAY_INFRASTRUCTURE + "    labels: {app: -web}\n",
        [
            'case.yaml:6: Gateway infra/gw: spec.infrastructure.labels.app: Invalid value: "-web": '
            "should match '^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$'"
        ],
    ),
    (
        "gateway-infrastructure-labels-9",
        GATEWAY_INFRASTRUCTURE + "    labels: {" + ", ".join(f"k{i}: v" for i in range(9)) + "}\n",
        ["case.yaml:6: Gateway infra/gw: spec.infrastructure.labels: Too many: 9: must have at most 8 items"],
    ),
    (
        "gateway-infrastructure-annotation-prefix",
        GATEWAY_INFRASTRUCTURE + "    annotations: {" + "a" * 260 + "/x: v}\n",
        [
            'case.yaml:6: Gateway infra/gw: spec.infrastructure.annotations: Invalid value: "object": '
            "If specified, the annotation key's prefix must be a DNS subdomain not longer than 253 "
            "characters in total."
        ],
    ),
    (
        "route-header-match-names-list-map",
        ROUTE + "  rules:\n  - matches:\n    - headers: [{name: x-a, value: '1'}, {name: x-a, value: '2'}]\n",
        [
            "case.yaml:6: HTTPRoute default/web: spec.rules[0].matches[0].headers[1]: "
            'Duplicate value: map[string]interface {}{"name":"x-a"}'
        ],
    ),
    (
        "route-query-param-names-list-map",
        ROUTE + "  rules:\n  - matches:\n    - queryParams: [{name: q, value: '1'}, {name: q, value: '2'}]\n",
        [
            "case.yaml:6: HTTPRoute default/web: spec.rules[0].matches[0].queryParams[1]: "
            'Duplicate value: map[string]interface {}{"name":"q"}'
        ],
    ),
    (
        "route-header-modifier-remove-list-set",
        ROUTE
        + "  rules:\n  - filters:\n    - type: RequestHeaderModifier\n"
        + "      requestHeaderModifier: {remove: [x-a, x-b, x-a]}\n",
        [
            "case.yaml:6: HTTPRoute default/web: spec.rules[0].filters[0].requestHeaderModifier.remove[2]: "
            'Duplicate value: "x-a"'
        ],
    ),
    (
        "route-header-modifier-set-list-map",
        ROUTE
        + "  rules:\n  - filters:\n    - type: ResponseHeaderModifier\n"
        + "      responseHeaderModifier: {set: [{name: x-a, value: '1'}, {name: x-a, value: '2'}]}\n",
        [
            "case.yaml:6: HTTPRoute default/web: spec.rules[0].filters[0].responseHeaderModifier.set[1]: "
            'Duplicate value: map[string]interface {}{"name":"x-a"}'
        ],
    ),
    *(
        (
            f"route-path-characters-{i}",
            ROUTE + f"  rules:\n  - matches:\n    - path: {{type: PathPrefix, value: '{path}'}}\n",
            [
                'case.yaml:6: HTTPRoute default/web: spec.rules[0].matches[0].path: Invalid value: "object": '
                "must only contain valid characters (matching "
                "^(?:[-A-Za-z0-9/._~!$&'()*+,;=:@]|[%][0-9a-fA-F]{2})+$) for types ['Exact', 'PathPrefix']"
            ],
        )
        for i, path in enumerate(("/[]", "/my[/]path01", "/a b", "/%zz"))
    ),
    (
        "gateway-spec-missing",
        GATEWAY.replace("spec:\n", ""),
        ["case.yaml:6: Gateway infra/gw: spec: Required value"],
    ),
    (
        "gateway-spec-null",
        GATEWAY.replace("spec:\n", "spec: null\n"),
        ["case.yaml:6: Gateway infra/gw: spec: Required value"],
    ),
    (
        "gatewayclass-controller-name-pattern",
        "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata:\n  name: weir\n"
        "spec:\n  controllerName: weir\n",
        [
            'case.yaml:6: GatewayClass weir: spec.controllerName: Invalid value: "weir": should '
            "match '^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\\/"
            "[A-Za-z0-9\\/\\-._~%!$&'()*+,;=:]+$'"
        ],
    ),
    (
        "gatewayclass-description-too-long",
        "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata:\n  name: weir\n"
        "spec:\n  controllerName: weir.dev/gateway-controller\n  description: " + "d" * 65 + "\n",
        ["case.yaml:6: GatewayClass weir: spec.description: Too long: may not be longer than 64"],
    ),
    (
        "xbackend-client-cert-without-mutual-tls",
        XBACKEND
        + "  externalHostname: {hostname: api.openai.com}\n"
        + "  tls:\n    mode: ServerOnly\n    clientCertificateRef: {name: client}\n",
        [
            'case.yaml:6: XBackend egress/openai: spec.tls: Invalid value: "object": '
            "clientCertificateRef must be set if and only if mode is ClientAndServer"
        ],
    ),
    (
        "xbackend-mutual-tls-without-client-cert",
        XBACKEND + "  externalHostname: {hostname: api.openai.com}\n  tls: {mode: ClientAndServer}\n",
        [
            'case.yaml:6: XBackend egress/openai: spec.tls: Invalid value: "object": '
            "clientCertificateRef must be set if and only if mode is ClientAndServer"
        ],
    ),
    (
        "xbackend-cluster-local-hostname",
        XBACKEND + "  externalHostname: {hostname: web.apps.svc.cluster.local}\n",
        [
            "case.yaml:6: XBackend egress/openai: spec.externalHostname.hostname: Invalid value: "
            '"string": hostname must not be an IP address or end with .cluster.local'
        ],
    ),
    (
        "xbackend-hostname-missing",
        XBACKEND,
        [
            'case.yaml:6: XBackend egress/openai: spec: Invalid value: "object": '
            "externalHostname must be set when type is ExternalHostname and must be unset otherwise"
        ],
    ),
    (
        "xbackend-type-enum",
        XBACKEND.replace("type: ExternalHostname", "type: Service"),
        [
            "case.yaml:6: XBackend egress/openai: spec.type: "
            'Unsupported value: "Service": supported values: "ExternalHostname"'
        ],
    ),
    (
        "xbackend-tls-mode-missing",
        XBACKEND + "  externalHostname: {hostname: api.openai.com}\n  tls: {}\n",
        ["case.yaml:6: XBackend egress/openai: spec.tls.mode: Required value"],
    ),
    (
        "xbackend-port-name-not-a-label",
        XBACKEND.replace("{port: 443}", "{port: 443, name: Web-TLS}")
        + "  externalHostname: {hostname: api.openai.com}\n",
        [
            'case.yaml:6: XBackend egress/openai: spec.port.name: Invalid value: "string": '
            "Name must be a valid DNS label"
        ],
    ),
    (
        "xbackend-both-trust-sources",
        XBACKEND
        + "  externalHostname: {hostname: api.openai.com}\n"
        + "  tls:\n    mode: ServerOnly\n    validation:\n      hostname: api.openai.com\n"
        + "      wellKnownCACertificates: System\n"
        + "      caCertificateRefs: [{group: '', kind: ConfigMap, name: ca}]\n",
        [
            'case.yaml:6: XBackend egress/openai: spec.tls.validation: Invalid value: "object": '
            "must not contain both CACertificateRefs and WellKnownCACertificates"
        ],
    ),
    (
        "xbackend-san-without-hostname",
        XBACKEND
        + "  externalHostname: {hostname: api.openai.com}\n"
        + "  tls:\n    mode: ServerOnly\n    validation:\n      hostname: api.openai.com\n"
        + "      wellKnownCACertificates: System\n"
        + "      subjectAltNames: [{type: Hostname}]\n",
        [
            "case.yaml:6: XBackend egress/openai: spec.tls.validation.subjectAltNames[0]: "
            'Invalid value: "object": SubjectAltName element must contain Hostname, '
            "if Type is set to Hostname"
        ],
    ),
    (
        "service-target-port-int-or-string",
        "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec:\n"
        "  ports: [{port: 80, targetPort: [8080]}]\n",
        [
            "case.yaml:6: Service default/web: spec.ports[0].targetPort: "
            'Invalid value: "array": must be of type integer or string'
        ],
    ),
    (
        "service-type-enum",
        "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {type: Internal}\n",
        [
            'case.yaml:6: Service default/web: spec.type: Unsupported value: "Internal": '
            'supported values: "ClusterIP", "NodePort", "LoadBalancer", "ExternalName"'
        ],
    ),
    (
        "secret-bad-base64",
        "apiVersion: v1\nkind: Secret\nmetadata: {name: key}\ndata: {token: 'not base64!'}\n",
        ['case.yaml:6: Secret default/key: data: Invalid value: "object": data[token]: illegal base64 data'],
    ),
    (
        "endpointslice-address-type-and-empty-addresses",
        "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: web-1}\n"
        "endpoints: [{addresses: []}]\n",
        [
            "case.yaml:6: EndpointSlice default/web-1: addressType: Required value",
            "case.yaml:6: EndpointSlice default/web-1: endpoints[0].addresses: "
            "Invalid value: 0: should have at least 1 items",
        ],
    ),
    (
        "referencegrant-from-empty",
        "apiVersion: gateway.networking.k8s.io/v1beta1\nkind: ReferenceGrant\n"
        "metadata: {name: g}\nspec:\n  from: []\n  to: [{group: '', kind: Service}]\n",
        ["case.yaml:6: ReferenceGrant default/g: spec.from: Invalid value: 0: should have at least 1 items"],
    ),
    (
        "name-not-a-subdomain",
        ROUTE.replace("name: web", "name: Web_1") + "  rules: []\n",
        [
            'case.yaml:6: HTTPRoute default/Web_1: metadata.name: Invalid value: "Web_1": '
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
            "'-' or '.', and must start and end with an alphanumeric character",
            "case.yaml:6: HTTPRoute default/Web_1: spec.rules: Invalid value: 0: "
            "should have at least 1 items",
        ],
    ),
    (
        "label-value-not-a-string",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  labels: {app: web, version: 2}\n",
        [
            "case.yaml:6: ConfigMap default/c: metadata.labels[version]: "
            'Invalid value: "integer": must be of type string'
        ],
    ),
    (
        "kind-missing",
        "apiVersion: v1\nmetadata: {name: x}\n",
        ["case.yaml:6: kind: Required value"],
    ),
    (
        "api-version-and-name-missing",
        "kind: Service\nmetadata: {namespace: apps}\n",
        ["case.yaml:6: apiVersion: Required value", "case.yaml:6: metadata.name: Required value"],
    ),
    (
        # TCPRoute v1 (Gateway API v1.6 standard) has exactly one rule; v1alpha2 allowed 16.
        "tcproute-v1-two-rules",
        TCPROUTE_V1 + "  rules:\n  - backendRefs: [{name: a, port: 1}]\n"
        "  - backendRefs: [{name: b, port: 1}]\n",
        ["case.yaml:6: TCPRoute infra/db: spec.rules: Too many: 2: must have at most 1 items"],
    ),
    *(
        (
            f"{kind.lower()}-parent-refs-{case}",
            head + f"  parentRefs: {refs}\n" + tail,
            [
                f'case.yaml:6: {kind} {where}: spec.parentRefs: Invalid value: "array": sectionName '
                f"must be {rule} when parentRefs includes 2 or more references to the same parent"
            ],
        )
        for kind, head, where, tail in (
            ("HTTPRoute", ROUTE, "default/web", ""),
            (
                "TLSRoute",
                TLSROUTE,
                "infra/db",
                "  hostnames: [db.example.com]\n  rules: [{backendRefs: [{name: a, port: 1}]}]\n",
            ),
            ("TCPRoute", TCPROUTE_V1, "infra/db", "  rules: [{backendRefs: [{name: a, port: 1}]}]\n"),
        )
        for case, refs, rule in (
            ("same-parent-twice", "[{name: gw}, {name: gw}]", "unique"),
            (
                "same-section-twice",
                "[{name: gw, sectionName: a}, {name: gw, sectionName: a}]",
                "unique",
            ),
            ("one-section-name", "[{name: gw}, {name: gw, sectionName: a}]", "specified"),
            # v1.6.1 standard: port does not tell references apart, though it is a standard field
            ("told-apart-by-port", "[{name: gw, port: 80}, {name: gw, port: 443}]", "unique"),
        )
    ),
    (
        # Gateway API v1.6.1's HTTPRoute CRD: spec is required (tests/kube/test_envtest_upstream_parity.py)
        "route-spec-missing",
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: web}\n",
        ["case.yaml:6: HTTPRoute default/web: spec: Required value"],
    ),
    (
        "route-header-match-value-empty",
        ROUTE + "  rules:\n  - matches:\n    - headers: [{name: x-a, value: ''}]\n",
        [
            "case.yaml:6: HTTPRoute default/web: spec.rules[0].matches[0].headers[0].value: "
            'Invalid value: "": should be at least 1 chars long'
        ],
    ),
    *(
        (
            f"route-cors-{field}-list-set",
            ROUTE
            + f"  rules:\n  - filters:\n    - type: CORS\n      cors: {{{field}: [{value}, {value}]}}\n",
            [
                f"case.yaml:6: HTTPRoute default/web: spec.rules[0].filters[0].cors.{field}[1]: "
                f'Duplicate value: "{value}"'
            ],
        )
        for field, value in (
            ("allowOrigins", "https://a.example.com"),
            ("allowMethods", "GET"),
            ("allowHeaders", "x-a"),
            ("exposeHeaders", "x-b"),
        )
    ),
    (
        "gateway-backend-client-certificate-without-name",
        GATEWAY
        + "  gatewayClassName: weir\n  listeners: [{name: web, port: 80, protocol: HTTP}]\n"
        + "  tls: {backend: {clientCertificateRef: {namespace: certs}}}\n",
        ["case.yaml:6: Gateway infra/gw: spec.tls.backend.clientCertificateRef.name: Required value"],
    ),
    (
        "name-not-a-string",
        "apiVersion: v1\nkind: Service\nmetadata: {name: 42}\n",
        ["case.yaml:6: metadata.name: Invalid value: 42: must be of type string"],
    ),
    (
        "document-not-a-mapping",
        "- apiVersion: v1\n  kind: Service\n",
        [
            'case.yaml:6: Invalid value: "array": a manifest must be an object with apiVersion, '
            "kind and metadata.name"
        ],
    ),
]


#: The line each problem of a case names, where it is not the object's first line (6): the line
#: of the offending field's key (of the list item, for an item), as a linter points at it; for a
#: field that is not written, the deepest part of its path that is.
FIELD_LINES: dict[str, tuple[int, ...]] = {
    "gateway-backend-client-certificate-without-name": (14,),
    "route-header-match-value-empty": (13,),
    "route-cors-allowOrigins-list-set": (14,),
    "route-cors-allowMethods-list-set": (14,),
    "route-cors-allowHeaders-list-set": (14,),
    "route-cors-exposeHeaders-list-set": (14,),
    "route-port-zero": (14,),
    "route-port-too-big": (12,),
    "route-port-string": (12,),
    "route-weight-negative": (12,),
    "route-backend-name-missing": (12,),
    "route-path-type-enum": (13,),
    "route-path-double-slash": (13,),
    "route-path-relative": (13,),
    "route-method-enum": (13,),
    "route-header-name-pattern": (13,),
    "route-hostname-pattern": (11,),
    "route-too-many-hostnames": (11,),
    "route-parent-name-too-long": (11,),
    "route-rules-not-a-list": (11,),
    "route-several-errors-in-order": (11, 13),
    "gateway-class-name-missing": (11,),
    "gateway-no-listeners": (13,),
    "gateway-https-passthrough": (13,),
    "gateway-tls-without-tls": (13,),
    "gateway-terminate-without-certificates": (13,),
    "tlsroute-hostnames": (12,),
    "tlsroute-two-rules": (13,),
    "tlsroute-no-hostnames": (11,),
    "gateway-duplicate-listener-names": (13,),
    "gateway-address-ipv4-with-port": (15,),
    "gateway-address-ipv6-with-prefix-default-type": (15,),
    "gateway-address-ipv4-empty": (15,),
    "gateway-address-hostname-with-port": (15,),
    "gateway-address-values-unique": (14, 14),
    "gateway-address-type-pattern": (15,),
    "gateway-infrastructure-label-key": (15,),
    "gateway-infrastructure-label-value": (15,),
    "gateway-infrastructure-labels-9": (15,),
    "gateway-infrastructure-annotation-prefix": (15,),
    "route-header-match-names-list-map": (13,),
    "route-query-param-names-list-map": (13,),
    "route-header-modifier-remove-list-set": (14,),
    "route-header-modifier-set-list-map": (14,),
    "route-path-characters-0": (13,),
    "route-path-characters-1": (13,),
    "route-path-characters-2": (13,),
    "route-path-characters-3": (13,),
    "gateway-spec-null": (11,),
    "gatewayclass-controller-name-pattern": (11,),
    "gatewayclass-description-too-long": (12,),
    "xbackend-client-cert-without-mutual-tls": (15,),
    "xbackend-mutual-tls-without-client-cert": (15,),
    "xbackend-cluster-local-hostname": (14,),
    "xbackend-hostname-missing": (11,),
    "xbackend-type-enum": (12,),
    "xbackend-tls-mode-missing": (15,),
    "xbackend-port-name-not-a-label": (13,),
    "xbackend-both-trust-sources": (17,),
    "xbackend-san-without-hostname": (20,),
    "service-target-port-int-or-string": (10,),
    "service-type-enum": (9,),
    "secret-bad-base64": (9,),
    "endpointslice-address-type-and-empty-addresses": (6, 9),
    "referencegrant-from-empty": (10,),
    "name-not-a-subdomain": (9, 11),
    "label-value-not-a-string": (10,),
    "api-version-and-name-missing": (6, 7),
    "tcproute-v1-two-rules": (12,),
    "httproute-parent-refs-same-parent-twice": (11,),
    "httproute-parent-refs-same-section-twice": (11,),
    "httproute-parent-refs-one-section-name": (11,),
    "httproute-parent-refs-told-apart-by-port": (11,),
    "tlsroute-parent-refs-same-parent-twice": (12,),
    "tlsroute-parent-refs-same-section-twice": (12,),
    "tlsroute-parent-refs-one-section-name": (12,),
    "tlsroute-parent-refs-told-apart-by-port": (12,),
    "tcproute-parent-refs-same-parent-twice": (12,),
    "tcproute-parent-refs-same-section-twice": (12,),
    "tcproute-parent-refs-one-section-name": (12,),
    "tcproute-parent-refs-told-apart-by-port": (12,),
    "name-not-a-string": (8,),
}


@pytest.mark.parametrize("case", INVALID, ids=[c[0] for c in INVALID])
def test_invalid_manifest(case: tuple[str, str, list[str]]) -> None:
    name, text, expected = case
    objects, problems = load_text(PRELUDE + text, "case.yaml")
    lines = FIELD_LINES.get(name, (6,) * len(expected))
    assert [p.line for p in problems] == list(lines)
    assert strs(problems) == [
        e.replace("case.yaml:6:", f"case.yaml:{n}:", 1) for e, n in zip(expected, lines, strict=True)
    ]
    assert all(p.severity == "error" for p in problems)
    # The invalid object is skipped; the valid one before it loads.
    assert [str(o.object.key) for o in objects] == ["Namespace prelude"]


def test_at_least_25_invalid_cases_across_kinds() -> None:
    assert len(INVALID) >= 25
    kinds = {c[1].split("kind: ", 1)[1].split("\n", 1)[0] for c in INVALID if "kind: " in c[1]}
    assert {"HTTPRoute", "Gateway", "GatewayClass", "XBackend", "Service", "Secret"} <= kinds


def test_problem_fields() -> None:
    _, problems = load_text(PRELUDE + INVALID[0][1], "routes.yaml")
    (problem,) = problems
    assert problem == Problem(
        "error",
        "routes.yaml",
        14,  # the line of the offending item (the object starts on line 6)
        "HTTPRoute default/web",
        "spec.rules[0].backendRefs[1].port",
        "Invalid value: 0: should be greater than or equal to 1",
    )
    assert problem.to_data() == {
        "severity": "error",
        "file": "routes.yaml",
        "line": 14,
        "object": "HTTPRoute default/web",
        "field": "spec.rules[0].backendRefs[1].port",
        "message": "Invalid value: 0: should be greater than or equal to 1",
    }
    json.dumps(problem.to_data())


def test_problem_str_omits_missing_parts() -> None:
    assert str(Problem("error", "a.yaml", None, None, None, "no such file or directory")) == (
        "a.yaml: no such file or directory"
    )
    assert str(Problem("warning", "a.yaml", 3, "GatewayClass weir", None, "m")) == (
        "a.yaml:3: GatewayClass weir: m"
    )
    assert str(Problem("error", "a.yaml", 3, None, "kind", "Required value")) == (
        "a.yaml:3: kind: Required value"
    )


# ------------------------------------------------------------------ YAML


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            PRELUDE + "apiVersion: v1\nkind: Service\nmetadata:\n  name: a\n namespace: b\n",
            "case.yaml:10: invalid YAML: did not find expected key "
            "(while parsing a block mapping started on line 6)",
        ),
        (
            "apiVersion: v1\nkind: Service\nmetadata: {name: [a}\n",
            "case.yaml:3: invalid YAML: did not find expected ',' or ']' "
            "(while parsing a flow sequence started on line 3)",
        ),
        (
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: a\n  name: b\n",
            'case.yaml:5: Service default/a: metadata.name: invalid YAML: mapping key "name" already defined '
            "at line 4 (while constructing a mapping started on line 4)",
        ),
        (
            "apiVersion: v1\nkind: Service\nmetadata: *meta\n",
            "case.yaml:3: invalid YAML: found undefined alias",
        ),
        (
            "apiVersion: v1\nkind: Service\nmetadata: !custom {name: a}\n",
            "case.yaml:3: Service default/a: metadata: invalid YAML: could not determine a constructor "
            "for the tag '!custom'",
        ),
        # Scalars YAML reads but cannot build, whatever the tag: one problem naming the field.
        (
            "apiVersion: v1\nkind: Service\nmetadata: {name: a}\nspec:\n  ports:\n  - port: !!bool maybe\n",
            'case.yaml:6: Service default/a: spec.ports[0].port: invalid YAML: "maybe" is not a valid !!bool',
        ),
        (
            "kind: HTTPRoute\nmetadata: {name: r, namespace: n}\nspec: {x: [1, !!int abc]}\n",
            'case.yaml:3: HTTPRoute n/r: spec.x[1]: invalid YAML: "abc" is not a valid !!int '
            "(invalid literal for int() with base 10: 'abc')",
        ),
        (
            "metadata: {name: a}\nspec: {x: !!float x}\n",
            'case.yaml:2: spec.x: invalid YAML: "x" is not a valid !!float '
            "(could not convert string to float: 'x')",
        ),
        (
            'kind: GatewayClass\nmetadata: {name: c, namespace: n}\nspec: {x: !!int ""}\n',
            'case.yaml:3: GatewayClass c: spec.x: invalid YAML: "" is not a valid !!int',
        ),
        (
            "metadata:\n  labels:\n    app.kubernetes.io/n: " + "9" * 4301 + "\n",
            'case.yaml:3: metadata.labels[app.kubernetes.io/n]: invalid YAML: "' + "9" * 40 + '..." is not a '
            "valid !!int (Exceeds the limit (4300 digits) for integer string conversion: "
            "value has 4301 digits)",
        ),
        (
            "a: !!binary 'a'\n",
            "case.yaml:1: a: invalid YAML: failed to decode base64 data: Invalid base64-encoded string: "
            "number of data characters (1) cannot be 1 more than a multiple of 4",
        ),
        (
            "a: !!timestamp [1]\n",
            "case.yaml:1: a: invalid YAML: expected a scalar node, but found sequence",
        ),
    ],
    ids=[
        "bad-indent",
        "unclosed-flow",
        "duplicate-key",
        "undefined-alias",
        "unknown-tag",
        "bool-maybe",
        "int-abc",
        "float-x",
        "int-empty",
        "int-4301-digits",
        "binary",
        "timestamp-sequence",
    ],
)
def test_yaml_error_is_one_problem_for_the_file(text: str, expected: str) -> None:
    objects, problems = load_text(text, "case.yaml")
    assert objects == []
    assert strs(problems) == [expected]


def test_empty_and_null_documents_are_skipped() -> None:
    text = "---\n# nothing\n---\nnull\n---\n~\n---\n" + PRELUDE + "\n---\n"
    objects, problems = load_text(text, "a.yaml")
    assert problems == []
    assert [(o.line, str(o.object.key)) for o in objects] == [(8, "Namespace prelude")]
    assert load_text("", "empty.yaml") == ([], [])


def test_yaml_reads_as_kubernetes_does() -> None:
    text = textwrap.dedent(
        """\
        apiVersion: v1
        kind: Namespace
        metadata: &meta
          name: dates
          creationTimestamp: 2024-05-01T10:00:00Z
          labels:
            <<: {team: platform, tier: web}
            tier: edge
        """
    )
    objects, problems = load_text(text, "a.yaml")
    assert problems == []
    meta = objects[0].object.metadata
    assert meta.creation_timestamp == "2024-05-01T10:00:00Z"
    assert meta.labels == {"team": "platform", "tier": "edge"}


def test_json_file(tmp_path: Path) -> None:
    path = tmp_path / "ns.json"
    path.write_text(
        json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "j"}}, indent="\t")
    )
    objects, problems = load_file(path)
    assert problems == []
    assert objects[0].object.key == ObjectKey("Namespace", "", "j")


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: caf\xe9}\n".encode("latin-1"))
    objects, problems = load_file(path)
    assert objects == []
    assert strs(problems) == [f"{path}:3: not UTF-8 text: invalid continuation byte"]


# ------------------------------------------------------------------ kinds, namespaces, lists


def test_unknown_kind_warns_once_per_kind_with_count() -> None:
    text = textwrap.dedent(
        """\
        apiVersion: apps/v1
        kind: Deployment
        metadata: {name: one, namespace: apps}
        ---
        apiVersion: apps/v1
        kind: Deployment
        metadata: {name: two}
        ---
        apiVersion: batch/v1
        kind: Job
        metadata: {name: job}
        ---
        apiVersion: apps/v1
        kind: Deployment
        metadata: {name: three}
        """
    )
    objects, problems = load_text(text, "apps.yaml")
    assert objects == []
    assert strs(problems) == [
        "apps.yaml:1: Deployment apps/one: weir does not read Deployment (apps/v1); "
        "skipped 3 objects of this kind",
        "apps.yaml:9: Job job: weir does not read Job (batch/v1); skipped 1 object of this kind",
    ]
    assert all(p.severity == "warning" for p in problems)


def test_known_kind_at_another_version_says_which_version_weir_reads() -> None:
    text = "apiVersion: gateway.networking.k8s.io/v1beta1\nkind: HTTPRoute\nmetadata: {name: old}\n"
    _, problems = load_text(text, "a.yaml")
    assert strs(problems) == [
        "a.yaml:1: HTTPRoute old: weir reads HTTPRoute as apiVersion gateway.networking.k8s.io/v1, "
        "not gateway.networking.k8s.io/v1beta1; skipped 1 object of this kind"
    ]


def test_list_is_unpacked_with_the_line_of_each_item() -> None:
    text = textwrap.dedent(
        """\
        apiVersion: v1
        kind: List
        metadata:
          resourceVersion: ""
        items:
        - apiVersion: v1
          kind: Service
          metadata:
            name: a
            namespace: apps
        - apiVersion: v1
          kind: Service
          metadata:
            name: b
          spec:
            ports: [{port: 0}]
        - apiVersion: gateway.networking.k8s.io/v1
          kind: GatewayClass
          metadata: {name: weir}
          spec: {controllerName: weir.dev/gateway-controller}
        """
    )
    objects, problems = load_text(text, "list.yaml")
    assert [(o.line, str(o.object.key)) for o in objects] == [
        (6, "Service apps/a"),
        (17, "GatewayClass weir"),
    ]
    assert strs(problems) == [
        "list.yaml:16: Service default/b: spec.ports[0].port: "
        "Invalid value: 0: should be greater than or equal to 1"
    ]


def test_typed_list_items_take_kind_from_the_list() -> None:
    text = textwrap.dedent(
        """\
        apiVersion: v1
        kind: ServiceList
        items:
        - metadata: {name: a}
        - metadata: {name: b}
        """
    )
    objects, problems = load_text(text, "list.yaml")
    assert problems == []
    assert [(o.line, str(o.object.key)) for o in objects] == [
        (4, "Service default/a"),
        (5, "Service default/b"),
    ]


def test_namespace_defaults_to_default_for_namespaced_kinds_only() -> None:
    text = textwrap.dedent(
        """\
        apiVersion: v1
        kind: Service
        metadata: {name: web}
        ---
        apiVersion: v1
        kind: Service
        metadata: {name: web, namespace: apps}
        ---
        apiVersion: gateway.networking.k8s.io/v1
        kind: GatewayClass
        metadata: {name: weir, namespace: ignored}
        spec: {controllerName: weir.dev/gateway-controller}
        """
    )
    objects, problems = load_text(text, "a.yaml")
    assert problems == []
    keys = [o.object.key for o in objects]
    assert keys == [
        ObjectKey("Service", "default", "web"),
        ObjectKey("Service", "apps", "web"),
        ObjectKey("GatewayClass", "", "weir"),
    ]
    service = objects[0].object
    assert isinstance(service, Service)
    assert service.metadata.namespace == "default"
    gateway_class = objects[2].object
    assert isinstance(gateway_class, GatewayClass)
    assert gateway_class.metadata.namespace is None
    assert str(gateway_class.key) == "GatewayClass weir"


def test_duplicate_object_keeps_the_first_and_names_it() -> None:
    text = textwrap.dedent(
        """\
        apiVersion: v1
        kind: Service
        metadata: {name: web}
        spec: {ports: [{port: 80}]}
        ---
        apiVersion: v1
        kind: Service
        metadata: {name: web, namespace: default}
        spec: {ports: [{port: 81}]}
        """
    )
    objects, problems = load_text(text, "a.yaml")
    assert strs(problems) == [
        "a.yaml:6: Service default/web: Duplicate value: already defined at a.yaml:1; "
        "this definition is ignored"
    ]
    (loaded,) = objects
    assert isinstance(loaded.object, Service)
    assert loaded.object.spec.ports[0].port == 80


def test_duplicate_across_files(tmp_path: Path) -> None:
    ns = "apiVersion: v1\nkind: Namespace\nmetadata: {name: shared}\n"
    (tmp_path / "a.yaml").write_text(ns)
    (tmp_path / "b.yaml").write_text("# a comment\n" + ns)
    report = load_paths([tmp_path])
    assert [o.file for o in report.objects] == [str(tmp_path / "a.yaml")]
    assert strs(report.problems) == [
        f"{tmp_path}/b.yaml:2: Namespace shared: Duplicate value: already defined at "
        f"{tmp_path}/a.yaml:1; this definition is ignored"
    ]


# ------------------------------------------------------------------ files and folders


def test_recursive_walk_sorted_skipping_hidden_and_other_files() -> None:
    files, problems = manifest_files([TREE])
    assert problems == []
    assert [p.relative_to(TREE).as_posix() for p in files] == [
        "a.yaml",
        "sub/b.yml",
        "sub/deeper/c.json",
        "sub/deeper/list.yaml",
    ]


def test_load_paths_over_a_tree() -> None:
    report = load_paths([TREE])
    assert isinstance(report, LoadReport)
    assert [
        (Path(o.file).relative_to(TREE).as_posix(), o.line, str(o.object.key)) for o in report.objects
    ] == [
        ("a.yaml", 1, "Namespace a"),
        ("sub/b.yml", 7, "Service default/b"),
        ("sub/deeper/c.json", 1, "ConfigMap deep/c"),
        ("sub/deeper/list.yaml", 4, "Namespace listed-one"),
        ("sub/deeper/list.yaml", 8, "Namespace listed-two"),
    ]
    # One warning for the three Deployments in three files, at the first.
    assert strs(report.problems) == [
        f"{TREE}/a.yaml:6: Deployment apps/web: weir does not read Deployment (apps/v1); "
        "skipped 3 objects of this kind"
    ]
    assert report.errors == []
    assert report.warnings == report.problems
    assert report.ok
    names = {o.object.name for o in report.objects}
    assert not names & {"hidden-file", "hidden-dir", "hidden-nested-dir", "not-a-manifest-name"}


def test_explicit_paths_are_read_even_if_hidden_or_oddly_named() -> None:
    report = load_paths([TREE / ".hidden.yaml", TREE / "notes.txt"])
    assert report.problems == []
    assert [o.object.name for o in report.objects] == ["hidden-file", "not-a-manifest-name"]


def test_missing_path_is_an_error_and_the_rest_loads() -> None:
    missing = TESTDATA / "does-not-exist"
    report = load_paths([missing, VALID / "namespace.yaml"])
    assert strs(report.errors) == [f"{missing}: no such file or directory"]
    assert [o.object.name for o in report.objects] == ["egress"]
    assert not report.ok


def test_file_reached_twice_is_read_once() -> None:
    report = load_paths([VALID, VALID / "namespace.yaml"])
    assert report.problems == []
    assert len(report.objects) == len(registry.MODELS)


def test_hidden_folder_given_as_root_is_walked(tmp_path: Path) -> None:
    root = tmp_path / ".config"
    root.mkdir()
    (root / "ns.yaml").write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: n}\n")
    (root / ".skip.yaml").write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: s}\n")
    report = load_paths([root])
    assert [o.object.name for o in report.objects] == ["n"]


def test_loaded_records_origin() -> None:
    objects, _ = load_text(PRELUDE + PRELUDE.replace("prelude", "second"), "x.yaml")
    assert objects[1] == Loaded(objects[1].object, "x.yaml", 6)
    assert isinstance(objects[1].object, Namespace)


def test_integers_are_strict_like_the_api_server() -> None:
    """``port: "80"`` or ``port: true`` is rejected by the API server; weir must not coerce them."""
    text = (
        "apiVersion: gateway.networking.k8s.io/v1\n"
        "kind: HTTPRoute\n"
        "metadata: {name: r, namespace: default}\n"
        "spec:\n"
        '  parentRefs: [{name: gw, port: "80"}]\n'
        '  rules: [{backendRefs: [{name: s, port: true, weight: "5"}]}]\n'
    )
    loaded, problems = load_text(text, "strict.yaml")
    assert loaded == []
    assert [str(p) for p in problems] == [
        'strict.yaml:5: HTTPRoute default/r: spec.parentRefs[0].port: Invalid value: "string": '
        "must be of type integer",
        'strict.yaml:6: HTTPRoute default/r: spec.rules[0].backendRefs[0].port: Invalid value: "boolean": '
        "must be of type integer",
        'strict.yaml:6: HTTPRoute default/r: spec.rules[0].backendRefs[0].weight: Invalid value: "string": '
        "must be of type integer",
    ]


def test_a_file_reached_through_symbolic_links_is_read_once(tmp_path: Path) -> None:
    """Files are told apart by their real path, whichever link leads to them."""
    ns = "apiVersion: v1\nkind: Namespace\nmetadata: {name: %s}\n"
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "one.yaml").write_text(ns % "one")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "link.yaml").symlink_to(tmp_path / "a" / "one.yaml")
    (tmp_path / "b" / "two.yaml").write_text(ns % "two")
    (tmp_path / "c").symlink_to(tmp_path / "b", target_is_directory=True)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "dangling.yaml").symlink_to(tmp_path / "nowhere.yaml")
    files, problems = manifest_files([tmp_path / "c", tmp_path])
    assert problems == []
    assert [p.relative_to(tmp_path).as_posix() for p in files] == [
        "c/link.yaml",  # the first way to a/one.yaml wins
        "c/two.yaml",
        "d/dangling.yaml",
    ]
    report = load_paths([tmp_path])
    assert [o.object.name for o in report.objects] == ["one", "two"]
    assert [p.message for p in report.problems] == ["cannot read: No such file or directory"]


def test_gc_paused_freezes_what_a_big_block_made_only_when_asked() -> None:
    import gc

    from weir.loader import FREEZE_AFTER, gc_paused

    gc.collect()
    try:
        frozen = gc.get_freeze_count()
        with gc_paused():
            kept = [[] for _ in range(FREEZE_AFTER + 1000)]
        assert gc.isenabled() and gc.get_freeze_count() == frozen
        with gc_paused(freeze=True):
            small = [[] for _ in range(100)]
        assert gc.isenabled() and gc.get_freeze_count() == frozen
        with gc_paused(freeze=True):
            big = [[] for _ in range(FREEZE_AFTER + 1000)]
            assert not gc.isenabled()
        assert gc.isenabled()
        assert gc.get_freeze_count() >= frozen + FREEZE_AFTER + 1000
        assert len(kept) + len(small) + len(big) > 0
    finally:
        gc.unfreeze()


def test_tcproute_v1alpha2_still_reads_with_its_own_schema() -> None:
    """Folders written for Gateway API before v1.6 keep working: ``v1alpha2`` allows several rules."""
    text = TCPROUTE_V1.replace("/v1\n", "/v1alpha2\n", 1) + (
        "  rules:\n  - backendRefs: [{name: a, port: 1}]\n  - backendRefs: [{name: b, port: 1}]\n"
    )
    objects, problems = load_text(text, "case.yaml")
    assert problems == []
    [loaded] = objects
    assert isinstance(loaded.object, TCPRoute)
    assert loaded.object.api_version == "gateway.networking.k8s.io/v1alpha2"
    assert len(loaded.object.spec.rules) == 2


def test_listenerset_listener_rules_are_the_gateways() -> None:
    """A ListenerSet's listeners follow the CRD's rules: unique names, tls by protocol, and the
    port/protocol/hostname combination unique with protocols compared case-insensitively."""
    head = (
        "apiVersion: gateway.networking.k8s.io/v1\nkind: ListenerSet\nmetadata: {name: s, namespace: a}\n"
        "spec:\n  parentRef: {name: gw}\n  listeners:\n"
    )
    cases = {
        "  - {name: a, port: 80, protocol: HTTP}\n  - {name: a, port: 81, protocol: HTTP}\n": (
            "Listener name must be unique within the Gateway"
        ),
        "  - {name: a, port: 80, protocol: HTTP}\n  - {name: b, port: 80, protocol: http}\n": (
            "Combination of port, protocol and hostname must be unique for each listener"
        ),
        "  - {name: a, port: 80, protocol: HTTP, tls: {certificateRefs: [{name: c}]}}\n": (
            "tls must not be specified for protocols ['HTTP', 'TCP', 'UDP']"
        ),
    }
    for listeners, message in cases.items():
        _, problems = load_text(head + listeners, "case.yaml")
        assert [message in str(p) for p in problems] == [True], (listeners, strs(problems))


def test_gateway_addresses_the_api_server_accepts() -> None:
    """Measured on kube-apiserver v1.32 with the released schema: a value may be left out (the
    implementation is to assign one), IPv4 parts may have leading zeros, IPv6 may end in IPv4."""
    text = GATEWAY_WITH_ADDRESSES + (
        "  - {type: IPAddress}\n  - {type: Hostname}\n  - {value: 01.2.3.4}\n"
        "  - {value: '::ffff:1.2.3.4'}\n  - {type: Hostname, value: '*.example.com'}\n"
        "  - {type: example.com/custom, value: anything}\n"
    )
    objects, problems = load_text(PRELUDE + text, "case.yaml")
    assert strs(problems) == []
    assert len(objects) == 2


@pytest.mark.parametrize(
    "refs",
    [
        "[{name: gw, sectionName: a}, {name: gw, sectionName: b}]",
        "[{name: gw, sectionName: a, port: 80}, {name: gw, sectionName: b}]",
        "[{name: gw}, {name: gw, namespace: other}]",
        "[{name: gw}, {name: gw, kind: ListenerSet}]",
        "[{name: gw}, {name: other}]",
    ],
)
def test_parent_refs_to_distinct_parents_or_sections_load(refs: str) -> None:
    objects, problems = load_text(ROUTE + f"  parentRefs: {refs}\n", "case.yaml")
    assert strs(problems) == []
    assert len(objects) == 1


def test_a_listener_of_a_custom_protocol_may_have_a_hostname() -> None:
    """Upstream forbids a hostname on TCP and UDP listeners only (measured: the v1.6.1 CRD accepts
    one on ``example.com/thrift``)."""
    text = GATEWAY + (
        "  gatewayClassName: weir\n"
        "  listeners: [{name: a, port: 9, protocol: example.com/thrift, hostname: a.example.com}]\n"
    )
    objects, problems = load_text(text, "case.yaml")
    assert strs(problems) == []
    assert len(objects) == 1
