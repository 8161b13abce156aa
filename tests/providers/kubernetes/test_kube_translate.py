"""What translation does with what only a cluster provides: a publish Service, kinds not served."""

from __future__ import annotations

import dataclasses
from typing import Any

from unit_manifests import GATEWAY
from weir.api.meta import ObjectKey
from weir.loader import load_text
from weir.resources import Resources
from weir.translate import Settings, translate

BASE = (
    GATEWAY
    + """---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: pinned, namespace: default}
spec:
  gatewayClassName: weir
  addresses: [{type: IPAddress, value: 127.0.0.9}]
  listeners: [{name: http, port: 8081, protocol: HTTP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: api, namespace: default}
spec:
  parentRefs: [{name: gw}]
  rules: [{backendRefs: [{group: gateway.networking.x-k8s.io, kind: XBackend, name: api}]}]
"""
)

PUBLISH = """\
---
apiVersion: v1
kind: Service
metadata: {name: weir, namespace: weir-system}
spec: {type: LoadBalancer, clusterIP: 10.96.0.10, ports: [{name: http, port: 80}]}
"""


def resources(text: str, *, unserved: frozenset[str] = frozenset(), lb: list[Any] | None = None) -> Resources:
    loaded, problems = load_text(text, "test.yaml")
    assert not [p for p in problems if p.severity == "error"], problems
    objects = [item.object for item in loaded]
    if lb is not None:
        objects = [
            o.model_copy(update={"status": {"loadBalancer": {"ingress": lb}}}) if o.KIND == "Service" else o
            for o in objects
        ]
    return Resources.from_objects(objects, unserved=unserved)


def addresses(res: Resources, settings: Settings, gateway: str = "gw") -> list[dict[str, str]]:
    status = translate(res, settings).statuses[ObjectKey("Gateway", "default", gateway)]
    found: list[dict[str, str]] = status["addresses"]
    return found


def test_status_addresses_come_from_the_publish_service() -> None:
    settings = Settings(publish_service=("weir-system", "weir"))
    ingress = [{"ip": "203.0.113.7"}, {"hostname": "lb.example.com"}]
    assert addresses(resources(BASE + PUBLISH, lb=ingress), settings) == [
        {"type": "IPAddress", "value": "203.0.113.7"},
        {"type": "Hostname", "value": "lb.example.com"},
    ]
    # No load balancer (yet): the cluster IP.
    assert addresses(resources(BASE + PUBLISH), settings) == [{"type": "IPAddress", "value": "10.96.0.10"}]
    # No such Service: nothing is published (rather than an address nobody can reach).
    assert addresses(resources(BASE), settings) == []
    # Fixed addresses win; a Gateway that asks for addresses keeps them.
    fixed = dataclasses.replace(settings, gateway_addresses=("192.0.2.1", "gw.example.com"))
    assert addresses(resources(BASE + PUBLISH), fixed) == [
        {"type": "IPAddress", "value": "192.0.2.1"},
        {"type": "Hostname", "value": "gw.example.com"},
    ]
    assert addresses(resources(BASE + PUBLISH), fixed, "pinned") == [
        {"type": "IPAddress", "value": "127.0.0.9"}
    ]
    # Standalone: where listeners bind, as before.
    assert addresses(resources(BASE), Settings()) == [{"type": "IPAddress", "value": "127.0.0.1"}]


def test_a_reference_to_a_kind_that_is_not_served_is_invalid_kind() -> None:
    key = ObjectKey("HTTPRoute", "default", "api")

    def resolved_refs(res: Resources) -> tuple[str, str, str]:
        [parent] = translate(res, Settings()).statuses[key]["parents"]
        cond = next(c for c in parent["conditions"] if c["type"] == "ResolvedRefs")
        return cond["status"], cond["reason"], cond["message"]

    status, reason, message = resolved_refs(resources(BASE, unserved=frozenset({"XBackend"})))
    assert (status, reason) == ("False", "InvalidKind")
    assert "not served by this cluster" in message and "experimental Gateway API CRDs" in message
    assert resolved_refs(resources(BASE))[:2] == ("False", "BackendNotFound")
