"""Per-caller BackendMCPPolicy: any object, however wrong, is a reported problem, never an exception.

Hypothesis builds BackendMCPPolicy manifests from the fields the API has
(``jwt``, ``rules``, ``from.jwt``/``clientCertificate``, claims, SANs) with
values of the right and the wrong types and shapes, plus a ConfigMap or
Secret whose JWKS text may be anything. Each goes through the loader, then
(when it loads) translation and the xDS build: the loader reports what is
wrong, translation reports a bad key set in the policy's status, and nothing
raises.
"""

from __future__ import annotations

import json
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from weir.loader import load_text
from weir.resources import Resources
from weir.translate import Settings, translate
from weir.xds import build as xds_build

HEAD = """\
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: weir}
spec: {controllerName: weir.dev/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: egress, namespace: default}
spec:
  gatewayClassName: weir
  listeners: [{name: http, port: 8080, protocol: HTTP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: mcp, namespace: default}
spec:
  parentRefs: [{name: egress}]
  rules: [{backendRefs: [{group: gateway.networking.x-k8s.io, kind: XBackend, name: mcp}]}]
---
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackend
metadata: {name: mcp, namespace: default}
spec:
  type: ExternalHostname
  externalHostname: {hostname: mcp.example.com}
  port: {port: 443}
  protocol: MCP
  tls: {mode: ServerOnly}
"""

GOOD_JWKS = json.dumps(
    {
        "keys": [
            {
                "kty": "EC",
                "crv": "P-256",
                "kid": "k1",
                "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU",
                "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0",
            }
        ]
    }
)

scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.sampled_from(["", "a", "alice", "get_*", "spiffe://x/y", "CN=x", "a b", "sub", "jwks.json", "*"]),
    st.text(max_size=8),
)
anything = st.recursive(
    scalar,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)


def policy_specs(wild: bool) -> st.SearchStrategy[dict[str, Any]]:
    """Specs of the API's shape; ``wild``: any node may also be anything at all."""

    def maybe(value: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        return st.one_of(value, anything) if wild else value

    tools = ["a", "get_*", "*", "tools.write", "ops", "bad name"]
    names = maybe(st.lists(st.sampled_from(tools), min_size=1, max_size=3))
    claim = maybe(
        st.fixed_dictionaries({"name": maybe(st.sampled_from(["groups", "scope", "sub"])), "values": names})
    )
    jwt_caller = maybe(
        st.fixed_dictionaries({}, optional={"subjects": names, "claims": maybe(st.lists(claim, max_size=2))})
    )
    sans = st.sampled_from(["ci.example", "spiffe://x/y", "CN=x", ""])
    cert_caller = maybe(
        st.fixed_dictionaries({"subjectAltNames": maybe(st.lists(sans, min_size=1, max_size=2))})
    )
    caller = maybe(
        st.one_of(
            st.fixed_dictionaries({"jwt": jwt_caller}),
            st.fixed_dictionaries({"clientCertificate": cert_caller}),
            st.fixed_dictionaries({}, optional={"jwt": jwt_caller, "clientCertificate": cert_caller}),
        )
    )
    rule = maybe(st.fixed_dictionaries({"from": caller, "allowedTools": names}))
    ref = maybe(
        st.fixed_dictionaries(
            {
                "name": maybe(st.sampled_from(["keys", "missing"])),
                "key": maybe(st.sampled_from(["jwks.json", "other"])),
            }
        )
    )
    jwks = maybe(
        st.one_of(
            st.fixed_dictionaries({"configMapRef": ref}),
            st.fixed_dictionaries({"secretRef": ref}),
            st.fixed_dictionaries({}, optional={"configMapRef": ref, "secretRef": ref}),
        )
    )
    jwt_spec = maybe(
        st.fixed_dictionaries(
            {"issuer": maybe(st.just("https://idp.example")), "jwks": jwks}, optional={"audiences": names}
        )
    )
    return st.fixed_dictionaries(
        {
            "targetRefs": st.just(
                [{"group": "gateway.networking.x-k8s.io", "kind": "XBackend", "name": "mcp"}]
            ),
            "rules": maybe(st.lists(rule, min_size=1, max_size=3)),
        },
        optional={"allowedTools": names, "deniedTools": names, "jwt": jwt_spec},
    )


key_set = st.one_of(
    st.just(GOOD_JWKS),
    st.sampled_from(
        ["", "{}", '{"keys": []}', '{"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}', "not json", "[1]"]
    ),
    st.text(max_size=20),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=st.one_of(policy_specs(wild=False), policy_specs(wild=True)), text=key_set)
def test_any_policy_is_a_reported_problem_never_an_exception(spec: dict[str, Any], text: str) -> None:
    objects = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "keys", "namespace": "default"},
            "data": {"jwks.json": text},
        },
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "keys", "namespace": "default"},
            "stringData": {"jwks.json": text},
        },
        {
            "apiVersion": "weir.dev/v1alpha1",
            "kind": "BackendMCPPolicy",
            "metadata": {"name": "p", "namespace": "default"},
            "spec": spec,
        },
    ]
    manifest = HEAD + "".join("---\n" + yaml.safe_dump(o) for o in objects)
    loaded, problems = load_text(manifest, "case.yaml")
    kinds = {item.object.KIND for item in loaded}
    if "BackendMCPPolicy" not in kinds:
        # Refused by validation: a problem that names the file, the object and a field.
        assert any("BackendMCPPolicy default/p" in str(p) for p in problems), [str(p) for p in problems]
        return
    result = translate(Resources.from_objects(item.object for item in loaded), Settings())
    statuses = {(k.kind, k.name): s for k, s in result.statuses.items()}
    status = statuses[("BackendMCPPolicy", "p")]
    conditions = [c for a in status["ancestors"] for c in a["conditions"] if c["type"] == "Accepted"]
    assert conditions and all(c["message"] for c in conditions)
    if any(c["status"] == "False" for c in conditions):
        assert any("spec.jwt.jwks" in c["message"] for c in conditions), conditions
    xds_build.build(result.ir)  # the xDS build takes whatever translation made
