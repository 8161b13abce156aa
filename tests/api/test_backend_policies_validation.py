"""BackendCredentialPolicy and BackendMCPPolicy validation, and their CRDs.

What the loader refuses (every message names file, object and field path) and what it fills in,
as the API server would with the CRDs ``weir crds`` prints: both run the same declarations.
"""

from __future__ import annotations

import re
import textwrap
from typing import Any

import pytest
import yaml

from weir.api import crds
from weir.api.weir_policies_v1alpha1 import BackendCredentialPolicy, BackendMCPPolicy
from weir.loader import load_text

XB = "{group: gateway.networking.x-k8s.io, kind: XBackend, name: llm}"
SVC = '{group: "", kind: Service, name: svc}'


def manifest(kind: str, spec: str) -> str:
    head = f"apiVersion: weir.dev/v1alpha1\nkind: {kind}\nmetadata: {{name: p, namespace: default}}\nspec:\n"
    return head + textwrap.indent(textwrap.dedent(spec), "  ")


def problems(kind: str, spec: str) -> list[str]:
    _, found = load_text(manifest(kind, spec), "case.yaml")
    # Each problem names its field's line (tests/loader/test_loader.py and test_yamlsource.py check
    # those); these tables are about what is said, so problems read ``case.yaml:1:`` alike.
    return [re.sub(r"^case\.yaml:\d+:", "case.yaml:1:", str(p)) for p in found]


# ------------------------------------------------------------------ BackendCredentialPolicy


def test_a_minimal_credential_policy_gets_the_defaults() -> None:
    loaded, found = load_text(
        manifest("BackendCredentialPolicy", f"targetRefs: [{XB}, {SVC}]\nsecretRef: {{name: s, key: k}}\n"),
        "case.yaml",
    )
    assert found == []
    policy = loaded[0].object
    assert isinstance(policy, BackendCredentialPolicy)
    assert (policy.spec.header.name, policy.spec.header.value_prefix) == ("Authorization", None)
    assert policy.spec.overwrite is True
    assert [(r.kind, r.name) for r in policy.spec.target_refs] == [("XBackend", "llm"), ("Service", "svc")]


def test_a_full_credential_policy_loads() -> None:
    spec = """\
        targetRefs: [{group: "", kind: Service, name: svc, sectionName: https}]
        secretRef: {name: openai, key: api-key}
        header: {name: X-Api-Key, valuePrefix: "Bearer "}
        overwrite: false
        """
    loaded, found = load_text(manifest("BackendCredentialPolicy", spec), "case.yaml")
    assert found == [], [str(p) for p in found]
    policy = loaded[0].object
    assert isinstance(policy, BackendCredentialPolicy)
    assert (policy.spec.header.name, policy.spec.header.value_prefix) == ("X-Api-Key", "Bearer ")
    assert policy.spec.overwrite is False and policy.spec.target_refs[0].section_name == "https"


CREDENTIAL_CASES = [
    (
        "targetRefs: []\nsecretRef: {name: s, key: k}",
        "spec.targetRefs: Invalid value: 0: should have at least 1 items",
    ),
    (
        "targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]\n"
        "secretRef: {name: s, key: k}",
        'spec.targetRefs: Invalid value: "array": targetRefs must be Services (group "", kind Service) or '
        "XBackends (group gateway.networking.x-k8s.io, kind XBackend)",
    ),
    (
        f"targetRefs: [{XB}, {XB}]\nsecretRef: {{name: s, key: k}}",
        'spec.targetRefs: Invalid value: "array": sectionName must be unique when targetRefs includes 2 '
        "or more references to the same target",
    ),
    (
        f"targetRefs: [{XB}]",
        'spec: Invalid value: "object": set exactly one of secretRef (a static credential), '
        "oauth2 or awsSigV4",
    ),
    (f"targetRefs: [{XB}]\nsecretRef: {{name: s}}", "spec.secretRef.key: Required value"),
    (
        f"targetRefs: [{XB}]\nsecretRef: {{name: s, key: 'a/b'}}",
        "spec.secretRef.key: Invalid value: \"a/b\": should match '^[-._a-zA-Z0-9]+$'",
    ),
    (
        f"targetRefs: [{XB}]\nsecretRef: {{name: s, key: k}}\nheader: {{name: 'x api key'}}",
        "spec.header.name: Invalid value: \"x api key\": should match '^[A-Za-z0-9!#$%&'*+\\-.^_`|~]+$'",
    ),
    (
        f"targetRefs: [{XB}]\nsecretRef: {{name: s, key: k}}\nheader: {{name: Content-Length}}",
        'spec.header.name: Invalid value: "string": header name must not be Host, Content-Length, '
        "Transfer-Encoding, Connection, Keep-Alive, Proxy-Connection, TE or Upgrade: Envoy sets those itself",
    ),
    (
        f"targetRefs: [{XB}]\nsecretRef: {{name: s, key: k}}\nheader: {{valuePrefix: ' Bearer'}}",
        "spec.header.valuePrefix: Invalid value: \" Bearer\": should match '^[!-~][ -~]*$'",
    ),
    (
        f'targetRefs: [{XB}]\nsecretRef: {{name: s, key: k}}\nheader: {{valuePrefix: "Bearer\\n"}}',
        "spec.header.valuePrefix: Invalid value: \"Bearer\\n\": should match '^[!-~][ -~]*$'",
    ),
    (
        f"targetRefs: [{XB}]\nsecretRef: {{name: s, key: k}}\noverwrite: 'yes'",
        'spec.overwrite: Invalid value: "string": must be of type boolean',
    ),
]


@pytest.mark.parametrize(("spec", "expected"), CREDENTIAL_CASES)
def test_credential_policy_refusals(spec: str, expected: str) -> None:
    found = problems("BackendCredentialPolicy", spec + "\n")
    assert f"case.yaml:1: BackendCredentialPolicy default/p: {expected}" in found, found


def test_seventeen_targets_are_too_many() -> None:
    refs = ", ".join(f"{{group: '', kind: Service, name: s{i}}}" for i in range(17))
    found = problems("BackendCredentialPolicy", f"targetRefs: [{refs}]\nsecretRef: {{name: s, key: k}}\n")
    assert any("spec.targetRefs: Too many: 17: must have at most 16 items" in p for p in found), found


def test_one_bad_policy_does_not_hide_the_good_one() -> None:
    good = manifest("BackendCredentialPolicy", f"targetRefs: [{XB}]\nsecretRef: {{name: s, key: k}}\n")
    bad = good.replace("name: p,", "name: q,").replace("key: k", "key: 'a b'")
    loaded, found = load_text(good + "---\n" + bad, "case.yaml")
    assert [item.object.name for item in loaded] == ["p"]
    assert len(found) == 1 and "BackendCredentialPolicy default/q: spec.secretRef.key" in str(found[0])


# ------------------------------------------------------------------ BackendMCPPolicy


def test_an_mcp_policy_loads() -> None:
    spec = f"targetRefs: [{XB}]\nallowedTools: [search_code, 'get_*', a.b-c_D9]\ndeniedTools: ['*']\n"
    loaded, found = load_text(manifest("BackendMCPPolicy", spec), "case.yaml")
    assert found == [], [str(p) for p in found]
    policy = loaded[0].object
    assert isinstance(policy, BackendMCPPolicy)
    assert policy.spec.allowed_tools == ("search_code", "get_*", "a.b-c_D9")
    assert policy.spec.denied_tools == ("*",)


MCP_CASES = [
    (
        f"targetRefs: [{SVC}]\ndeniedTools: [x]",
        'spec.targetRefs: Invalid value: "array": targetRefs must be XBackends (group '
        "gateway.networking.x-k8s.io, kind XBackend) of protocol MCP",
    ),
    (
        f"targetRefs: [{XB}]",
        'spec: Invalid value: "object": set allowedTools, deniedTools, rules, or several of them',
    ),
    (
        f"targetRefs: [{XB}]\nallowedTools: []",
        "spec.allowedTools: Invalid value: 0: should have at least 1 items",
    ),
    (
        f"targetRefs: [{XB}]\nallowedTools: ['get secret']",
        "spec.allowedTools[0]: Invalid value: \"get secret\": should match '^[A-Za-z0-9._*-]+$'",
    ),
    (
        f"targetRefs: [{XB}]\ndeniedTools: [ok, 'tools/call']",
        "spec.deniedTools[1]: Invalid value: \"tools/call\": should match '^[A-Za-z0-9._*-]+$'",
    ),
    (
        f"targetRefs: [{XB}]\ndeniedTools: ['']",
        'spec.deniedTools[0]: Invalid value: "": should be at least 1 chars long',
    ),
    (
        f"targetRefs: [{XB}]\ndeniedTools: [{'a' * 129}]",
        "spec.deniedTools[0]: Too long: may not be longer than 128",
    ),
]


JWKS = "{configMapRef: {name: keys, key: jwks.json}}"
MCP_CASES += [
    (
        f"targetRefs: [{XB}]\nrules: [{{from: {{jwt: {{}}}}, allowedTools: [a]}}]",
        'spec: Invalid value: "object": rules that match on jwt need spec.jwt: the issuer and keys the '
        "gateway verifies tokens with",
    ),
    (
        f"targetRefs: [{XB}]\njwt: {{issuer: i, jwks: {{}}}}\n"
        "rules: [{from: {jwt: {}}, allowedTools: [a]}]",
        'spec.jwt.jwks: Invalid value: "object": set exactly one of configMapRef and secretRef',
    ),
    (
        f"targetRefs: [{XB}]\njwt: {{issuer: i, jwks: {JWKS}}}\n"
        "rules: [{from: {jwt: {}, clientCertificate: {subjectAltNames: [a]}}, allowedTools: [a]}]",
        'spec.rules[0].from: Invalid value: "object": set exactly one of jwt and clientCertificate',
    ),
    (
        f"targetRefs: [{XB}]\njwt: {{issuer: i, jwks: {JWKS}}}\n"
        "rules: [{from: {jwt: {claims: [{name: sub, values: [a]}]}}, allowedTools: [a]}]",
        'spec.rules[0].from.jwt.claims[0].name: Invalid value: "string": match the subject with subjects, '
        "not with a claim named sub",
    ),
    (
        f"targetRefs: [{XB}]\nrules: [{{from: {{clientCertificate: {{subjectAltNames: ['CN=x']}}}}, "
        "allowedTools: [a]}]",
        'spec.rules[0].from.clientCertificate.subjectAltNames[0]: Invalid value: "CN=x": should match',
    ),
    (
        f"targetRefs: [{XB}]\njwt: {{issuer: i, jwks: {JWKS}}}\n"
        "rules: [{from: {jwt: {claims: [{name: scope, values: ['a b']}]}}, allowedTools: [a]}]",
        'spec.rules[0].from.jwt.claims[0].values[0]: Invalid value: "a b": should match',
    ),
]


def test_a_per_caller_policy_loads() -> None:
    spec = (
        f"targetRefs: [{XB}]\njwt: {{issuer: https://idp.test, audiences: [mcp], jwks: {JWKS}}}\n"
        "allowedTools: [search]\nrules:\n"
        "- from: {jwt: {subjects: [alice], claims: [{name: scope, values: [tools.write]}]}}\n"
        "  allowedTools: ['create_*']\n"
        "- from: {clientCertificate: {subjectAltNames: ['spiffe://ci.test/runner']}}\n"
        "  allowedTools: [get_pr]\n"
    )
    loaded, found = load_text(manifest("BackendMCPPolicy", spec), "case.yaml")
    assert found == [], [str(p) for p in found]
    policy = loaded[0].object
    assert isinstance(policy, BackendMCPPolicy)
    assert policy.spec.rules is not None and policy.spec.jwt is not None
    assert policy.spec.rules[0].from_.jwt is not None
    assert policy.spec.rules[1].from_.client_certificate is not None


@pytest.mark.parametrize(("spec", "expected"), MCP_CASES)
def test_mcp_policy_refusals(spec: str, expected: str) -> None:
    found = problems("BackendMCPPolicy", spec + "\n")
    assert any(f.startswith(f"case.yaml:1: BackendMCPPolicy default/p: {expected}") for f in found), found


def test_a_tool_name_of_128_characters_is_fine() -> None:
    assert problems("BackendMCPPolicy", f"targetRefs: [{XB}]\ndeniedTools: [{'a' * 128}]\n") == []


# ------------------------------------------------------------------ the CRDs


def _crd(plural: str) -> dict[str, Any]:
    (found,) = [
        doc
        for doc in yaml.safe_load_all(crds.render())
        if doc and doc["metadata"]["name"] == f"{plural}.weir.dev"
    ]
    return found


def _rules(node: dict[str, Any], path: str = "") -> set[tuple[str, str, str]]:
    out = {(path, r["rule"], r.get("message", "")) for r in node.get("x-kubernetes-validations", [])}
    for name, sub in node.get("properties", {}).items():
        out |= _rules(sub, f"{path}.{name}" if path else name)
    if isinstance(node.get("items"), dict):
        out |= _rules(node["items"], path + "[]")
    return out


@pytest.mark.parametrize(
    ("plural", "kind"),
    [("backendcredentialpolicies", "BackendCredentialPolicy"), ("backendmcppolicies", "BackendMCPPolicy")],
)
def test_the_crds_are_namespaced_with_a_status_subresource(plural: str, kind: str) -> None:
    crd = _crd(plural)
    spec = crd["spec"]
    assert (spec["group"], spec["scope"], spec["names"]["kind"], spec["names"]["plural"]) == (
        "weir.dev",
        "Namespaced",
        kind,
        plural,
    )
    (version,) = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    assert version["subresources"] == {"status": {}}
    ancestors = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["ancestors"]
    assert ancestors["maxItems"] == 16
    assert set(ancestors["items"]["required"]) == {"ancestorRef", "controllerName", "conditions"}


SECTION_RULES = {
    (
        "spec.targetRefs",
        f"sectionName must be {word} when targetRefs includes 2 or more references to the same target",
    )
    for word in ("specified", "unique")
}
CREDENTIAL_RULES = SECTION_RULES | {
    ("spec", "set exactly one of secretRef (a static credential), oauth2 or awsSigV4"),
    (
        "spec",
        "header applies to secretRef only: oauth2 sends Authorization: Bearer <token>, awsSigV4 its "
        "signature in Authorization",
    ),
    (
        "spec",
        "overwrite: false cannot apply to awsSigV4: the signature covers the request as sent and always "
        "replaces a client's Authorization",
    ),
    (
        "spec.targetRefs",
        'targetRefs must be Services (group "", kind Service) or XBackends '
        "(group gateway.networking.x-k8s.io, kind XBackend)",
    ),
    (
        "spec.header.name",
        "header name must not be Host, Content-Length, Transfer-Encoding, Connection, Keep-Alive, "
        "Proxy-Connection, TE or Upgrade: Envoy sets those itself",
    ),
}
MCP_RULES = SECTION_RULES | {
    ("spec", "set allowedTools, deniedTools, rules, or several of them"),
    ("spec", "rules that match on jwt need spec.jwt: the issuer and keys the gateway verifies tokens with"),
    ("spec.jwt.jwks", "set exactly one of configMapRef and secretRef"),
    ("spec.rules[].from", "set exactly one of jwt and clientCertificate"),
    ("spec.rules[].from.jwt.claims[].name", "match the subject with subjects, not with a claim named sub"),
    (
        "spec.targetRefs",
        "targetRefs must be XBackends (group gateway.networking.x-k8s.io, kind XBackend) of protocol MCP",
    ),
}


@pytest.mark.parametrize(
    ("plural", "expected"),
    [("backendcredentialpolicies", CREDENTIAL_RULES), ("backendmcppolicies", MCP_RULES)],
)
def test_the_crds_carry_the_rules_the_models_run(plural: str, expected: set[tuple[str, str]]) -> None:
    schema = _crd(plural)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert {(path, message) for path, _, message in _rules(schema)} == expected


def test_the_credential_crd_declares_the_defaults() -> None:
    schema = _crd("backendcredentialpolicies")["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    spec = schema["properties"]["spec"]["properties"]
    assert spec["header"]["properties"]["name"]["default"] == "Authorization"
    assert spec["overwrite"]["default"] is True
