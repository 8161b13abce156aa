"""One attachment path for every route kind (:mod:`weir.translate.attachment`)."""

from __future__ import annotations

import pytest

from weir.api.meta import ObjectKey
from weir.loader import load_text
from weir.resources import Resources
from weir.translate import Settings, translate
from weir.translate.attachment import intersect_hostnames

WORLD = """\
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: weir}
spec: {controllerName: weir.dev/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: default}
spec:
  gatewayClassName: weir
  listeners:
  - {name: http, port: 8080, protocol: HTTP, hostname: "*.example.com"}
  - {name: tls, port: 8443, protocol: TLS, hostname: "*.example.com", tls: {mode: Passthrough}}
  - {name: tcp, port: 9000, protocol: TCP}
---
apiVersion: v1
kind: Service
metadata: {name: svc, namespace: default}
spec: {ports: [{port: 80}]}
"""

ROUTES = {
    "HTTPRoute": ("gateway.networking.k8s.io/v1", "http", "rules: [{backendRefs: [{name: svc, port: 80}]}]"),
    "GRPCRoute": ("gateway.networking.k8s.io/v1", "http", "rules: [{backendRefs: [{name: svc, port: 80}]}]"),
    "TLSRoute": ("gateway.networking.k8s.io/v1", "tls", "rules: [{backendRefs: [{name: svc, port: 80}]}]"),
    "TCPRoute": (
        "gateway.networking.k8s.io/v1alpha2",
        "tcp",
        "rules: [{backendRefs: [{name: svc, port: 80}]}]",
    ),
}


def _accepted(kind: str, parent: str, hostnames: str = "") -> dict[str, object]:
    api, _, rules = ROUTES[kind]
    if kind == "TLSRoute" and not hostnames:  # required in TLSRoute v1
        hostnames = "  hostnames: [a.example.com]\n"
    route = (
        f"---\napiVersion: {api}\nkind: {kind}\nmetadata: {{name: r, namespace: default}}\n"
        f"spec:\n  parentRefs: [{parent}]\n{hostnames}  {rules}\n"
    )
    loaded, problems = load_text(WORLD + route, "world.yaml")
    assert not problems, problems
    result = translate(Resources.from_objects(item.object for item in loaded), Settings())
    parents = result.statuses[ObjectKey(kind, "default", "r")]["parents"]
    assert isinstance(parents, list) and len(parents) == 1
    conditions = {c["type"]: c for c in parents[0]["conditions"]}
    return conditions["Accepted"]


@pytest.mark.parametrize("kind", sorted(ROUTES))
def test_every_kind_refuses_a_missing_parent_the_same_way(kind: str) -> None:
    accepted = _accepted(kind, "{name: nope}")
    assert (accepted["status"], accepted["reason"]) == ("False", "NoMatchingParent")
    assert accepted["message"] == "Gateway default/nope does not exist"


@pytest.mark.parametrize("kind", sorted(ROUTES))
def test_every_kind_names_the_listener_it_cannot_find(kind: str) -> None:
    accepted = _accepted(kind, "{name: gw, sectionName: missing}")
    assert (accepted["status"], accepted["reason"]) == ("False", "NoMatchingParent")
    assert "has no listener with sectionName 'missing'" in str(accepted["message"])


@pytest.mark.parametrize("kind", sorted(ROUTES))
def test_every_kind_attaches_to_its_own_listener(kind: str) -> None:
    _, section, _ = ROUTES[kind]
    hostnames = "  hostnames: [a.example.com]\n" if kind != "TCPRoute" else ""
    accepted = _accepted(kind, f"{{name: gw, sectionName: {section}}}", hostnames)
    assert (accepted["status"], accepted["reason"]) == ("True", "Accepted")


@pytest.mark.parametrize("kind", ["HTTPRoute", "GRPCRoute", "TLSRoute"])
def test_kinds_with_hostnames_share_the_hostname_refusal(kind: str) -> None:
    _, section, _ = ROUTES[kind]
    accepted = _accepted(kind, f"{{name: gw, sectionName: {section}}}", "  hostnames: [other.org]\n")
    assert (accepted["status"], accepted["reason"]) == ("False", "NoMatchingListenerHostname")
    assert accepted["message"] == ("None of the route's hostnames matches a listener hostname: *.example.com")


def test_a_listener_of_another_protocol_does_not_take_the_kind() -> None:
    accepted = _accepted("TCPRoute", "{name: gw, sectionName: http}")
    assert (accepted["status"], accepted["reason"]) == ("False", "NotAllowedByListeners")


@pytest.mark.parametrize(
    ("listener", "route", "expected"),
    [
        (None, (), ("*",)),
        (None, ("a.example.com",), ("a.example.com",)),
        ("*.example.com", (), ("*.example.com",)),
        ("*.example.com", ("a.example.com", "example.com"), ("a.example.com",)),
        ("a.example.com", ("*.example.com",), ("a.example.com",)),
        ("*.example.com", ("*.a.example.com",), ("*.a.example.com",)),
        ("a.example.com", ("b.example.com",), ()),
    ],
)
def test_intersect_hostnames(listener: str | None, route: tuple[str, ...], expected: tuple[str, ...]) -> None:
    assert intersect_hostnames(listener, route) == expected
