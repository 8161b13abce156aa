"""BackendCredentialPolicy's credentials that are not static keys (``oauth2``, ``awsSigV4``): what the
loader refuses, and that any policy object, however malformed, ends as reported problems or a status
(never an exception), through validation and translation alike."""

from __future__ import annotations

import copy
import re
import textwrap
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from weir.api.weir_policies_v1alpha1 import BackendCredentialPolicy
from weir.loader import load_text
from weir.resources import Resources
from weir.translate import translate
from weir.translate.settings import Settings

SETTINGS = Settings(system_trust_file="/etc/ssl/certs/ca-certificates.crt")

XB = "{group: gateway.networking.x-k8s.io, kind: XBackend, name: llm}"
OAUTH2 = (
    "oauth2: {tokenEndpoint: {backendRef: {name: idp}, path: /token}, "
    "clientIDRef: {name: c, key: id}, clientSecretRef: {name: c, key: secret}}"
)
SIGV4 = "awsSigV4: {region: us-east-1, service: bedrock, credentialsRef: {name: aws}}"


def manifest(spec: str) -> str:
    head = "apiVersion: weir.dev/v1alpha1\nkind: BackendCredentialPolicy\n"
    return (
        head
        + "metadata: {name: p, namespace: default}\nspec:\n"
        + textwrap.indent(textwrap.dedent(spec), "  ")
    )


def problems(spec: str) -> list[str]:
    _, found = load_text(manifest(spec + "\n"), "case.yaml")
    return [re.sub(r"^case\.yaml:\d+:", "case.yaml:1:", str(p)) for p in found]


def test_an_oauth2_policy_loads_with_its_defaults() -> None:
    loaded, found = load_text(manifest(f"targetRefs: [{XB}]\n{OAUTH2}\n"), "case.yaml")
    assert found == []
    policy = loaded[0].object
    assert isinstance(policy, BackendCredentialPolicy) and policy.spec.oauth2 is not None
    oauth2 = policy.spec.oauth2
    assert (oauth2.token_endpoint.backend_ref.kind, oauth2.token_endpoint.path) == ("XBackend", "/token")
    assert (oauth2.scopes, oauth2.client_authentication) == (None, "Body")
    assert policy.spec.secret_ref is None and policy.spec.aws_sig_v4 is None


def test_a_sigv4_policy_loads_with_its_defaults() -> None:
    loaded, found = load_text(manifest(f"targetRefs: [{XB}]\n{SIGV4}\n"), "case.yaml")
    assert found == []
    policy = loaded[0].object
    assert isinstance(policy, BackendCredentialPolicy) and policy.spec.aws_sig_v4 is not None
    assert policy.spec.aws_sig_v4.payload == "Signed"


EXACTLY_ONE = (
    'spec: Invalid value: "object": set exactly one of secretRef (a static credential), oauth2 or awsSigV4'
)
CASES = [
    (
        f"targetRefs: [{XB}]\nsecretRef: {{name: s, key: k}}\n{SIGV4}",
        EXACTLY_ONE,
    ),
    (
        f"targetRefs: [{XB}]\n{OAUTH2}\n{SIGV4}",
        EXACTLY_ONE,
    ),
    (
        f"targetRefs: [{XB}]\n{OAUTH2}\nheader: {{name: X-Api-Key}}",
        'spec: Invalid value: "object": header applies to secretRef only: oauth2 sends Authorization: Bearer '
        "<token>, awsSigV4 its signature in Authorization",
    ),
    (
        f"targetRefs: [{XB}]\n{SIGV4}\noverwrite: false",
        'spec: Invalid value: "object": overwrite: false cannot apply to awsSigV4: the signature covers the '
        "request as sent and always replaces a client's Authorization",
    ),
    (
        f"targetRefs: [{XB}]\n" + OAUTH2.replace("path: /token", "path: token"),
        "spec.oauth2.tokenEndpoint.path: Invalid value: \"token\": should match '^/[!-~]*$'",
    ),
    (
        f"targetRefs: [{XB}]\n" + OAUTH2.replace("{name: idp}", "{name: idp, kind: Service}"),
        'spec.oauth2.tokenEndpoint.backendRef.kind: Unsupported value: "Service": '
        'supported values: "XBackend"',
    ),
    (
        f"targetRefs: [{XB}]\n" + OAUTH2.replace("clientIDRef: {name: c, key: id}, ", ""),
        "spec.oauth2.clientIDRef: Required value",
    ),
    (
        f"targetRefs: [{XB}]\n" + OAUTH2[:-1] + ", scopes: ['a b']}",
        "spec.oauth2.scopes[0]: Invalid value: \"a b\": should match '^[!#-\\[\\]-~]+$'",
    ),
    (
        f"targetRefs: [{XB}]\n" + OAUTH2[:-1] + ", clientAuthentication: Header}",
        'spec.oauth2.clientAuthentication: Unsupported value: "Header": supported values: "Body", "Basic"',
    ),
    (
        f"targetRefs: [{XB}]\n" + SIGV4.replace("us-east-1", "US_EAST"),
        "spec.awsSigV4.region: Invalid value: \"US_EAST\": should match '^[a-z0-9][a-z0-9-]*$'",
    ),
    (
        f"targetRefs: [{XB}]\n" + SIGV4.replace("}}", "}, payload: Streaming}"),
        'spec.awsSigV4.payload: Unsupported value: "Streaming": supported values: "Signed", "Unsigned"',
    ),
]


@pytest.mark.parametrize(("spec", "expected"), CASES)
def test_refusals(spec: str, expected: str) -> None:
    found = problems(spec)
    assert f"case.yaml:1: BackendCredentialPolicy default/p: {expected}" in found, found


# ------------------------------------------------------------------ any policy: problems, never exceptions

WORLD = """\
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: weir}
spec: {controllerName: weir.dev/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: egress, namespace: default}
spec: {gatewayClassName: weir, listeners: [{name: http, port: 8080, protocol: HTTP}]}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: ai, namespace: default}
spec:
  parentRefs: [{name: egress}]
  rules:
  - matches: [{path: {value: /llm}}]
    backendRefs: [{group: gateway.networking.x-k8s.io, kind: XBackend, name: llm}]
  - matches: [{path: {value: /idp}}]
    backendRefs: [{group: gateway.networking.x-k8s.io, kind: XBackend, name: idp}]
  - matches: [{path: {value: /other}}]
    backendRefs: [{group: gateway.networking.x-k8s.io, kind: XBackend, name: other}]
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
metadata: {name: idp, namespace: default}
spec:
  type: ExternalHostname
  externalHostname: {hostname: idp.example.com}
  port: {port: 443}
  tls: {mode: ServerOnly}
---
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackend
metadata: {name: other, namespace: default}
spec: {type: ExternalHostname, externalHostname: {hostname: other.example.com}, port: {port: 443}}
---
apiVersion: v1
kind: Secret
metadata: {name: c, namespace: default}
stringData: {id: client, secret: s3cr3t, AWS_ACCESS_KEY_ID: AKID, AWS_SECRET_ACCESS_KEY: "sk\\n"}
"""

GOOD_POLICY: dict[str, Any] = {
    "apiVersion": "weir.dev/v1alpha1",
    "kind": "BackendCredentialPolicy",
    "metadata": {"name": "p", "namespace": "default"},
    "spec": {
        "targetRefs": [{"group": "gateway.networking.x-k8s.io", "kind": "XBackend", "name": "llm"}],
        "oauth2": {
            "tokenEndpoint": {"backendRef": {"name": "idp"}, "path": "/token"},
            "clientIDRef": {"name": "c", "key": "id"},
            "clientSecretRef": {"name": "c", "key": "secret"},
        },
        "awsSigV4": {"region": "us-east-1", "service": "bedrock", "credentialsRef": {"name": "c"}},
    },
}

_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.text(max_size=12),
    st.sampled_from(["idp", "llm", "c", "absent", "id", "secret", "/token", "Basic", "Unsigned", "XBackend"]),
    st.lists(st.text(max_size=6), max_size=3),
    st.dictionaries(st.sampled_from(["name", "key", "path", "kind"]), st.text(max_size=6), max_size=2),
)
_PATHS = [
    ("oauth2",),
    ("awsSigV4",),
    ("oauth2", "tokenEndpoint", "backendRef", "name"),
    ("oauth2", "tokenEndpoint", "path"),
    ("oauth2", "tokenEndpoint"),
    ("oauth2", "clientIDRef", "key"),
    ("oauth2", "clientSecretRef", "name"),
    ("oauth2", "clientSecretRef"),
    ("oauth2", "scopes"),
    ("oauth2", "clientAuthentication"),
    ("awsSigV4", "region"),
    ("awsSigV4", "credentialsRef", "name"),
    ("awsSigV4", "credentialsRef"),
    ("awsSigV4", "payload"),
    ("header",),
    ("overwrite",),
    ("secretRef",),
    ("targetRefs",),
]


@st.composite
def policies(draw: st.DrawFn) -> dict[str, Any]:
    doc = copy.deepcopy(GOOD_POLICY)
    # Usually one kind, as a valid policy has; sometimes both or none.
    for kind in draw(st.sampled_from([("awsSigV4",), ("oauth2",), (), ("oauth2", "awsSigV4")])):
        del doc["spec"][kind]
    for _ in range(draw(st.integers(0, 3))):
        path = draw(st.sampled_from(_PATHS))
        node = doc["spec"]
        for key in path[:-1]:
            if not isinstance(node.get(key), dict):
                node[key] = {}
            node = node[key]
        if draw(st.booleans()):
            node[path[-1]] = draw(_VALUES)
        else:
            node.pop(path[-1], None)
    return doc


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(policies())
def test_any_policy_is_reported_never_raised(doc: dict[str, Any]) -> None:
    text = WORLD + "---\n" + yaml.safe_dump(doc)
    loaded, found = load_text(text, "world.yaml")
    policy_loaded = any(isinstance(item.object, BackendCredentialPolicy) for item in loaded)
    if not policy_loaded:
        assert any("BackendCredentialPolicy default/p" in str(p) for p in found), [str(p) for p in found]
        return
    result = translate(Resources.from_objects(item.object for item in loaded), SETTINGS)
    ancestors = result.statuses[
        next(i.object.key for i in loaded if isinstance(i.object, BackendCredentialPolicy))
    ]
    for ancestor in ancestors["ancestors"]:
        accepted = next(c for c in ancestor["conditions"] if c["type"] == "Accepted")
        assert accepted["message"] and accepted["reason"] in (
            "Accepted",
            "Invalid",
            "TargetNotFound",
            "Conflicted",
        )
        assert "s3cr3t" not in str(ancestors)
    # The route's rule to a backend without the policy is served whatever the policy is.
    [listener] = [lst for lst in result.ir.listeners]
    routes = {r.name: r for vh in listener.virtual_hosts for r in vh.routes}  # type: ignore[union-attr]
    other = routes["httproute/default/ai/rule/2/match/0"].action
    assert type(other).__name__ == "Forward"
