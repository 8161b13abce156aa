"""Events (events.k8s.io/v1) for condition changes and NACKs, as ``kubectl describe`` lists them,
created with deploy/'s RBAC."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

from envtest import Cluster
from kube_harness import TIMING, admin_get, eventually, gateway, gateway_class, metric, route, running_weir
from kube_world import LEASE_NAME, Objects

from weir.providers.kubernetes.leader import LeaseSettings
from weir.providers.kubernetes.provider import KubernetesOptions
from weir.testkit import free_port


def events_about(cluster: Cluster, namespace: str, kind: str, name: str) -> list[dict[str, Any]]:
    listing = cluster.admin.list("events.k8s.io/v1", "Event", namespace)
    return [e for e in listing["items"] if e["regarding"]["kind"] == kind and e["regarding"]["name"] == name]


async def test_condition_changes_and_a_nack_are_events(
    cluster: Cluster, objects: Objects, weir_kubeconfig: Path
) -> None:
    ns = objects.namespace
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]  # Envoy cannot bind it: it rejects the listener (a NACK)
        objects.apply(
            gateway_class(ns),
            gateway(ns, ns, free_port(), name="gw"),
            gateway(ns, ns, port, name="blocked"),
            route(ns, "web", "/", {"name": "missing", "port": 80}),
        )
        options = KubernetesOptions(
            kubeconfig=str(weir_kubeconfig),
            lease=LeaseSettings.scaled("", LEASE_NAME, "events-test", 3.0),
            timing=TIMING,
        )
        async with running_weir(options) as (controller, _provider):

            def reported() -> bool:
                return bool(events_about(cluster, ns, "Gateway", "blocked")) and bool(
                    events_about(cluster, ns, "HTTPRoute", "web")
                )

            await eventually(reported, timeout=20)
            text = (await admin_get(controller, "/metrics")).text
            assert metric(text, "weir_kubernetes_events_total", result="created") >= 2
            assert metric(text, "weir_kubernetes_events_total", result="failed") == 0

    nack = [e for e in events_about(cluster, ns, "Gateway", "blocked") if e["type"] == "Warning"]
    assert nack, events_about(cluster, ns, "Gateway", "blocked")
    assert any("Programmed=False" in e["note"] and "bind" in e["note"] for e in nack), nack
    refused = events_about(cluster, ns, "HTTPRoute", "web")
    backend = [e for e in refused if e["reason"] == "BackendNotFound"]
    assert (
        backend and backend[0]["type"] == "Warning" and backend[0]["note"].startswith("ResolvedRefs=False: ")
    )
    event = backend[0]
    assert event["reportingController"] == "weir.dev/gateway-controller"
    assert event["reportingInstance"] == "events-test"
    assert event["action"] == "StatusChanged"
    assert event["regarding"]["uid"] and event["regarding"]["apiVersion"] == "gateway.networking.k8s.io/v1"
    gateway_class_events = events_about(cluster, "default", "GatewayClass", ns)
    assert any(e["type"] == "Normal" and e["reason"] == "Accepted" for e in gateway_class_events)
