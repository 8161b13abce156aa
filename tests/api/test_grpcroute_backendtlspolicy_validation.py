"""GRPCRoute and BackendTLSPolicy validation: the upstream CRDs' rules, in the API server's words."""

from __future__ import annotations

import re
import textwrap

import pytest

from weir.api.gateway_v1_backendtlspolicy import BackendTLSPolicy
from weir.api.gateway_v1_grpcroute import GRPCRoute
from weir.loader import load_text

GRPC_HEAD = """\
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: r, namespace: default}
spec:
"""

POLICY_HEAD = """\
apiVersion: gateway.networking.k8s.io/v1
kind: BackendTLSPolicy
metadata: {name: p, namespace: default}
spec:
"""


def problems(text: str) -> list[str]:
    _, found = load_text(text, "case.yaml")
    # Each problem names its field's line (tests/loader/test_loader.py and test_yamlsource.py check
    # those); these tables are about what is said, so problems read ``case.yaml:1:`` alike.
    return [re.sub(r"^case\.yaml:\d+:", "case.yaml:1:", str(p)) for p in found]


def test_a_minimal_grpcroute_loads_with_the_crd_defaults() -> None:
    loaded, found = load_text(GRPC_HEAD + "  rules: [{matches: [{method: {service: a.B}}]}]\n", "case.yaml")
    assert found == []
    route = loaded[0].object
    assert isinstance(route, GRPCRoute)
    [rule] = route.spec.rules
    assert rule.matches[0].method is not None and rule.matches[0].method.type == "Exact"
    assert rule.backend_refs == ()


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (
            "rules: [{matches: [{method: {type: Exact}}]}]",
            "spec.rules[0].matches[0].method: Invalid value: \"object\": One or both of 'service' or "
            "'method' must be specified",
        ),
        (
            "rules: [{matches: [{method: {service: 'a/b'}}]}]",
            'spec.rules[0].matches[0].method: Invalid value: "object": service must only contain valid '
            "characters (matching ^(?i)\\.?[a-z_][a-z_0-9]*(\\.[a-z_][a-z_0-9]*)*$)",
        ),
        (
            "rules: [{matches: [{method: {method: 'Get.*'}}]}]",
            'spec.rules[0].matches[0].method: Invalid value: "object": method must only contain valid '
            "characters (matching ^[A-Za-z_][A-Za-z_0-9]*$)",
        ),
        (
            "rules: [{filters: [{type: RequestMirror}]}]",
            'spec.rules[0].filters[0]: Invalid value: "object": filter.requestMirror must be specified '
            "for RequestMirror filter.type",
        ),
        (
            "rules: [{filters: [{type: ExtensionRef, requestHeaderModifier: {}, "
            "extensionRef: {group: x.io, kind: F, name: f}}]}]",
            'spec.rules[0].filters[0]: Invalid value: "object": filter.requestHeaderModifier must be nil '
            "if the filter.type is not RequestHeaderModifier",
        ),
        (
            "rules: [{filters: [{type: ResponseHeaderModifier, responseHeaderModifier: {}}, "
            "{type: ResponseHeaderModifier, responseHeaderModifier: {}}]}]",
            'spec.rules[0].filters: Invalid value: "array": ResponseHeaderModifier filter cannot be repeated',
        ),
        # list types (x-kubernetes-list-type map / set), with the API server's words
        (
            "rules: [{matches: [{headers: [{name: x-a, value: '1'}, {name: x-a, value: '2'}]}]}]",
            'spec.rules[0].matches[0].headers[1]: Duplicate value: map[string]interface {}{"name":"x-a"}',
        ),
        (
            "rules: [{filters: [{type: RequestHeaderModifier, requestHeaderModifier: {remove: [a, b, a]}}]}]",
            'spec.rules[0].filters[0].requestHeaderModifier.remove[2]: Duplicate value: "a"',
        ),
    ],
)
def test_grpcroute_cel_rules(spec: str, expected: str) -> None:
    assert f"case.yaml:1: GRPCRoute default/r: {expected}" in problems(GRPC_HEAD + f"  {spec}\n")


def test_grpcroute_regular_expressions_skip_the_name_rules() -> None:
    text = GRPC_HEAD + "  rules: [{matches: [{method: {type: RegularExpression, method: 'Get.*'}}]}]\n"
    assert problems(text) == []


def test_grpcroute_total_matches_rule() -> None:
    match = "{method: {service: a.B}}"
    rule = "{matches: [" + ", ".join([match] * 8) + "]}"
    text = GRPC_HEAD + "  rules: [" + ", ".join([rule] * 16) + "]\n"
    assert problems(text) == [], "128 matches are allowed"
    assert problems(text.replace("a.B}}]}]", "a.B}}, " + match + "]}]")) != []


def test_a_backendtlspolicy_loads() -> None:
    text = POLICY_HEAD + textwrap.indent(
        textwrap.dedent(
            """\
            targetRefs: [{group: "", kind: Service, name: s, sectionName: https}]
            validation: {hostname: s.example.test, wellKnownCACertificates: System}
            options: {weir.dev/tls-min-version: "1.3"}
            """
        ),
        "  ",
    )
    loaded, found = load_text(text, "case.yaml")
    assert found == []
    policy = loaded[0].object
    assert isinstance(policy, BackendTLSPolicy)
    assert policy.spec.target_refs[0].section_name == "https"


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (
            'targetRefs: [{group: "", kind: Service, name: s}, {group: "", kind: Service, name: s, '
            "sectionName: a}]",
            'spec.targetRefs: Invalid value: "array": sectionName must be specified when targetRefs '
            "includes 2 or more references to the same target",
        ),
        (
            'targetRefs: [{group: "", kind: Service, name: s, sectionName: a}, {group: "", kind: Service, '
            "name: s, sectionName: a}]",
            'spec.targetRefs: Invalid value: "array": sectionName must be unique when targetRefs includes '
            "2 or more references to the same target",
        ),
    ],
)
def test_backendtlspolicy_target_rules(spec: str, expected: str) -> None:
    text = POLICY_HEAD + f"  {spec}\n  validation: {{hostname: s.test, wellKnownCACertificates: System}}\n"
    assert f"case.yaml:1: BackendTLSPolicy default/p: {expected}" in problems(text)


def test_backendtlspolicy_validation_rules_are_xbackends() -> None:
    text = (
        POLICY_HEAD
        + '  targetRefs: [{group: "", kind: Service, name: s}]\n  validation: {hostname: s.test}\n'
    )
    assert problems(text) == [
        'case.yaml:1: BackendTLSPolicy default/p: spec.validation: Invalid value: "object": must specify '
        "either CACertificateRefs or WellKnownCACertificates"
    ]
