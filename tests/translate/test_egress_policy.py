"""Egress policy pieces: refused hostnames, allow-list patterns, networks, precedence, parameters, flags."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from unit_manifests import GATEWAY
from weir import ir
from weir.api.gateway_v1 import GatewayClass
from weir.cli import app
from weir.loader import load_text
from weir.resources import Resources
from weir.translate import Settings
from weir.translate import status as st
from weir.translate.egress import (
    ClassPolicy,
    class_policy,
    decide,
    hostname_matches,
    normalise_networks,
    refused_hostname,
)
from weir.translate.settings import DEFAULT_DENIED_CIDRS

# ------------------------------------------------------------------ hostnames


@pytest.mark.parametrize(
    ("hostname", "why"),
    [
        ("10.0.0.1", "IP address"),
        ("169.254.169.254", "IP address"),
        ("::1", "IP address"),
        ("localhost", "localhost"),
        ("app.localhost", "localhost"),
        ("localhost.localdomain", "localhost"),
        ("intranet", "single-label"),
        ("metadata", "single-label"),
        ("instance-data", "single-label"),
        ("kubernetes.default.svc", "Service"),
        ("web.prod.svc.cluster.local", "Service"),
        ("db.prod.svc.clusterset.local", "Service"),
        ("metadata.google.internal", "metadata"),
        ("metadata.goog", "metadata"),
        ("instance-data.ec2.internal", "metadata"),
        ("instance-data.eu-west-1.compute.internal", "metadata"),
        ("metadata.azure.com", "metadata"),
        ("metadata.tencentyun.com", "metadata"),
        ("api.metadata.cloud.ibm.com", "metadata"),
        ("metadata.platformequinix.com", "metadata"),
    ],
)
def test_refused_hostnames_say_why(hostname: str, why: str) -> None:
    message = refused_hostname(hostname)
    assert message is not None and why in message and repr(hostname) in message


@pytest.mark.parametrize(
    "hostname",
    ["api.openai.com", "example.com", "svc.example.com", "localhost.example.com", "ip-10-0-0-1.example.org"],
)
def test_ordinary_hostnames_are_not_refused(hostname: str) -> None:
    assert refused_hostname(hostname) is None


@pytest.mark.parametrize(
    ("hostname", "pattern", "matches"),
    [
        ("api.openai.com", "api.openai.com", True),
        ("api.openai.com", "openai.com", False),
        ("a.example.com", "*.example.com", True),
        ("a.b.example.com", "*.example.com", True),
        ("example.com", "*.example.com", False),
        ("badexample.com", "*.example.com", False),
        ("example.com.evil.test", "*.example.com", False),
    ],
)
def test_allow_list_patterns(hostname: str, pattern: str, matches: bool) -> None:
    assert hostname_matches(hostname, pattern) is matches


def test_networks_are_canonical_sorted_and_deduplicated() -> None:
    assert normalise_networks(
        ["127.0.0.66/32", "fc00::/7", "127.0.0.0/8", "10.0.0.0/8", "fd00::/8", "::1"]
    ) == (
        "10.0.0.0/8",
        "127.0.0.0/8",
        "::1/128",
        "fc00::/7",
    )
    # Neighbours are kept apart, so each keeps the name logs will show.
    assert normalise_networks(["::1/128", "::/128"]) == ("::/128", "::1/128")
    assert normalise_networks(DEFAULT_DENIED_CIDRS) == DEFAULT_DENIED_CIDRS


# ------------------------------------------------------------------ policy of a class

CONFIG = """\
apiVersion: weir.dev/v1alpha1
kind: GatewayClassConfig
metadata: {name: egress}
spec:
  egress:
    deniedCIDRs: [192.0.2.0/24]
    allowedHostnames: ["*.example.com"]
  dns:
    resolvers: [{address: 10.0.0.53}]
    lookupTimeout: 3s
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: weir}
spec:
  controllerName: weir.dev/gateway-controller
  parametersRef: {group: weir.dev, kind: GatewayClassConfig, name: egress}
"""


def _resources(text: str) -> Resources:
    loaded, problems = load_text(text, "case.yaml")
    assert not [p for p in problems if p.severity == "error"], [str(p) for p in problems]
    return Resources.from_objects(item.object for item in loaded)


def _policy(settings: Settings, text: str = CONFIG) -> ClassPolicy:
    resources = _resources(text)
    return class_policy(resources, settings, resources.get(GatewayClass, "", "weir"))


def test_class_parameters_apply_when_no_flag_is_given() -> None:
    policy = _policy(Settings())
    assert policy.denied_networks == ("192.0.2.0/24",)
    assert policy.allowed_hostnames == ("*.example.com",)
    assert policy.dns == ir.DnsSettings(resolvers=(("10.0.0.53", 53),), lookup_timeout_ms=3000)
    assert policy.problem is None


def test_flags_replace_class_parameters() -> None:
    settings = Settings(
        egress_denied_cidrs=(),
        egress_allowed_hostnames=("api.openai.com",),
        dns_resolvers=(("127.0.0.1", 53),),
    )
    policy = _policy(settings)
    assert policy.denied_networks == ()  # an empty flag denies nothing
    assert policy.allowed_hostnames == ("api.openai.com",)
    assert "--egress-allowed-hostnames" in policy.allowed_source
    # The flag's resolvers replace the class's; the class's lookup timeout still applies.
    assert policy.dns == ir.DnsSettings(resolvers=(("127.0.0.1", 53),), lookup_timeout_ms=3000)


def test_defaults_without_parameters_or_flags() -> None:
    policy = class_policy(Resources(), Settings(), None)
    assert policy.denied_networks == DEFAULT_DENIED_CIDRS
    assert policy.allowed_hostnames == ()
    assert policy.dns is None
    # Absent deniedCIDRs in the parameters also means the defaults; [] means nothing.
    assert _policy(Settings(), CONFIG.replace("    deniedCIDRs: [192.0.2.0/24]\n", "")).denied_networks == (
        DEFAULT_DENIED_CIDRS
    )
    assert _policy(Settings(), CONFIG.replace("[192.0.2.0/24]", "[]")).denied_networks == ()


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        (
            "{group: weir.dev, kind: GatewayClassConfig, name: nope}",
            "'nope' named by parametersRef does not exist",
        ),
        ("{group: '', kind: ConfigMap, name: egress, namespace: default}", "weir reads parameters from"),
        ("{group: weir.dev, kind: GatewayClassConfig, name: egress, namespace: default}", "cluster-scoped"),
    ],
)
def test_invalid_parameters_ref_is_a_problem(ref: str, expected: str) -> None:
    text = CONFIG.replace("{group: weir.dev, kind: GatewayClassConfig, name: egress}", ref)
    assert ref in text
    policy = _policy(Settings(), text)
    assert policy.problem is not None and expected in policy.problem


# ------------------------------------------------------------------ combining classes


def _class(
    name: str, denied: tuple[str, ...] = (), allowed: tuple[str, ...] = (), **kw: object
) -> ClassPolicy:
    return ClassPolicy(name, denied, allowed, f"{name}'s list", **kw)  # type: ignore[arg-type]


def test_shared_xbackend_gets_the_union_and_must_satisfy_every_allow_list() -> None:
    a = _class("a", ("10.0.0.0/8",), ("*.example.com",))
    b = _class("b", ("10.1.0.0/16", "192.0.2.0/24"), ("api.example.com", "other.test"))
    decision = decide("api.example.com", [a, b])
    assert decision.refusal is None
    assert decision.guard == ir.EgressGuard(("10.0.0.0/8", "192.0.2.0/24"))
    refusal = decide("x.example.com", [a, b]).refusal
    assert refusal is not None and refusal[0] == st.R_NOT_ALLOWED and "GatewayClass b" in refusal[1]


def test_unknown_policy_or_disagreeing_resolvers_refuse() -> None:
    broken = _class("broken", problem="parametersRef is wrong")
    refusal = decide("api.example.com", [_class("a"), broken]).refusal
    assert refusal is not None and refusal[0] == st.R_NOT_ALLOWED and "broken" in refusal[1]
    own = _class("own", dns=ir.DnsSettings(resolvers=(("10.0.0.53", 53),)))
    refusal = decide("api.example.com", [_class("a"), own]).refusal
    assert refusal is not None and refusal[0] == st.R_UNSUPPORTED_VALUE and "a, own" in refusal[1]


# ------------------------------------------------------------------ GatewayClassConfig validation


@pytest.mark.parametrize(
    ("spec", "field", "message"),
    [
        ("{egress: {deniedCIDRs: [10.0.0.1/8]}}", "spec.egress.deniedCIDRs", "did you mean 10.0.0.0/8?"),
        ("{egress: {deniedCIDRs: [intranet]}}", "spec.egress.deniedCIDRs", "not a network in CIDR notation"),
        ("{egress: {allowedHostnames: ['*']}}", "spec.egress.allowedHostnames[0]", "should match"),
        ("{dns: {resolvers: [{address: dns.example.com}]}}", "spec.dns.resolvers[0].address", "not an IP"),
        ("{dns: {lookupTimeout: 500ms}}", "spec.dns.lookupTimeout", "use 1s to 60s"),
        ("{dns: {lookupTimeout: soon}}", "spec.dns.lookupTimeout", "not a duration"),
    ],
)
def test_invalid_class_config_is_reported_by_field(spec: str, field: str, message: str) -> None:
    text = f"apiVersion: weir.dev/v1alpha1\nkind: GatewayClassConfig\nmetadata: {{name: bad}}\nspec: {spec}\n"
    loaded, problems = load_text(text, "case.yaml")
    assert loaded == []
    [problem] = problems
    assert problem.field == field and message in problem.message, str(problem)


# ------------------------------------------------------------------ flags

MANIFESTS = (
    GATEWAY
    + """---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: api, namespace: default}
spec:
  parentRefs: [{name: gw}]
  rules:
  - backendRefs: [{group: gateway.networking.x-k8s.io, kind: XBackend, name: api}]
---
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackend
metadata: {name: api, namespace: default}
spec:
  type: ExternalHostname
  externalHostname: {hostname: api.example.test}
  port: {port: 80}
"""
)


def _translate(tmp_path: Path, *flags: str) -> dict[str, object]:
    (tmp_path / "m.yaml").write_text(MANIFESTS)
    result = CliRunner().invoke(app, ["translate", "-f", str(tmp_path), "-o", "json", *flags])
    assert result.exit_code == 0, result.output
    data: dict[str, object] = json.loads(result.stdout)
    return data


def test_flags_reach_translation(tmp_path: Path) -> None:
    data = _translate(tmp_path, "--egress-denied-cidrs", "10.0.0.0/8, 192.0.2.0/24")
    [upstream] = data["ir"]["upstreams"]  # type: ignore[index]
    assert upstream["egressGuard"] == {"deniedNetworks": ["10.0.0.0/8", "192.0.2.0/24"]}
    data = _translate(tmp_path, "--egress-denied-cidrs", "")
    assert data["ir"]["upstreams"][0]["egressGuard"] == {"deniedNetworks": []}  # type: ignore[index]
    data = _translate(tmp_path, "--egress-allowed-hostnames", "*.example.com")
    assert data["ir"]["upstreams"] == []  # type: ignore[index]
    [xbackend] = [r for r in data["resources"] if r["kind"] == "XBackend"]  # type: ignore[attr-defined]
    assert xbackend["status"]["parents"][0]["conditions"][0]["reason"] == "NotAllowed"


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--egress-denied-cidrs", "10.0.0.1/8", "did you mean 10.0.0.0/8?"),
        ("--egress-denied-cidrs", "intranet", "is not a network"),
        ("--egress-allowed-hostnames", "API.example.com", "is not a hostname"),
    ],
)
def test_bad_flag_values_are_refused(tmp_path: Path, flag: str, value: str, message: str) -> None:
    (tmp_path / "m.yaml").write_text(MANIFESTS)
    result = CliRunner().invoke(app, ["translate", "-f", str(tmp_path), flag, value])
    assert result.exit_code == 2
    assert message in " ".join(result.output.replace("│", " ").split())  # rich wraps it in a box
