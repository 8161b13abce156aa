"""The per-Gateway Service of ``--gateway-services``: its name, the patches and slices the leader
computes, what translation makes of it, and the flag. On a real API server:
tests/kube/test_envtest_gateway_infrastructure.py."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from typer.testing import CliRunner

from weir.api.core_v1 import Service
from weir.api.discovery_v1 import EndpointSlice
from weir.api.gateway_v1 import Gateway, GatewayClass
from weir.cli import app
from weir.features import SUPPORTED_FEATURES
from weir.infrastructure import TRACKED_ANNOTATION, service_name
from weir.providers.kubernetes.gateway_services import desired_service, desired_slices, service_patch
from weir.providers.kubernetes.provider import KubernetesOptions
from weir.resources import Resources
from weir.translate import Settings, translate

GW = "gateway.networking.k8s.io/v1"
UID = "0b9c3c9e-0000-4000-8000-000000000001"


def gateway(infrastructure: dict[str, Any] | None = None, name: str = "edge") -> Gateway:
    spec: dict[str, Any] = {
        "gatewayClassName": "weir",
        "listeners": [
            {"name": "http", "port": 8080, "protocol": "HTTP"},
            {"name": "web", "port": 8080, "protocol": "HTTP", "hostname": "a.example.com"},
            {"name": "dns", "port": 5353, "protocol": "UDP"},
        ],
    }
    if infrastructure is not None:
        spec["infrastructure"] = infrastructure
    return Gateway.model_validate(
        {
            "apiVersion": GW,
            "kind": "Gateway",
            "metadata": {"name": name, "namespace": "shop", "uid": UID},
            "spec": spec,
        }
    )


def test_service_names_are_valid_service_names() -> None:
    assert service_name("edge") == "edge-weir"
    for odd in ("a.b", "1st", "x" * 60):
        name = service_name(odd)
        assert re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name) and len(name) <= 63, name
        assert name == service_name(odd) and name != service_name(odd + "y")


def test_the_service_made_for_a_gateway() -> None:
    svc = desired_service(gateway({"labels": {"team": "edge"}, "annotations": {"note": "x"}}), "ClusterIP")
    meta = svc["metadata"]
    assert meta["name"] == "edge-weir" and meta["namespace"] == "shop"
    assert (
        meta["labels"]["team"] == "edge"
        and meta["labels"]["gateway.networking.k8s.io/gateway-name"] == "edge"
    )
    assert meta["labels"]["weir.dev/gateway-uid"] == UID
    assert meta["annotations"]["note"] == "x"
    assert json.loads(meta["annotations"][TRACKED_ANNOTATION]) == {
        "annotations": ["note"],
        "labels": ["team"],
    }
    assert meta["ownerReferences"] == [
        {"apiVersion": GW, "kind": "Gateway", "name": "edge", "uid": UID, "controller": True}
    ]
    assert "selector" not in svc["spec"]
    assert svc["spec"]["ports"] == [  # listeners sharing a port are one Service port
        {"name": "udp-5353", "port": 5353, "targetPort": 5353, "protocol": "UDP"},
        {"name": "tcp-8080", "port": 8080, "targetPort": 8080, "protocol": "TCP"},
    ]


def test_an_infrastructure_label_cannot_replace_weirs_own() -> None:
    svc = desired_service(gateway({"labels": {"weir.dev/gateway-uid": "forged"}}), "ClusterIP")
    assert svc["metadata"]["labels"]["weir.dev/gateway-uid"] == UID


def as_stored(svc: dict[str, Any], **labels: str) -> dict[str, Any]:
    stored = json.loads(json.dumps(svc))
    stored["metadata"]["resourceVersion"] = "7"
    stored["metadata"]["labels"].update(labels)
    return stored


def test_a_service_in_step_needs_no_patch() -> None:
    gw = gateway({"labels": {"team": "edge"}})
    assert service_patch(as_stored(desired_service(gw, "ClusterIP")), gw, "ClusterIP") is None


def test_keys_removed_from_the_gateway_go_and_other_keys_stay() -> None:
    before = gateway({"labels": {"team": "edge", "tier": "1"}, "annotations": {"a": "1", "b": "2"}})
    stored = as_stored(desired_service(before, "ClusterIP"), users="mine")
    stored["metadata"]["annotations"]["cloud.example.com/lb"] = "internal"  # another controller's
    after = gateway({"labels": {"team": "core"}, "annotations": {"a": "1"}})
    patch = service_patch(stored, after, "ClusterIP")
    assert patch is not None
    assert patch["metadata"]["labels"] == {"team": "core", "tier": None}
    notes = patch["metadata"]["annotations"]
    assert notes["b"] is None and "cloud.example.com/lb" not in notes and "a" not in notes
    assert json.loads(notes[TRACKED_ANNOTATION]) == {"annotations": ["a"], "labels": ["team"]}
    assert patch["metadata"]["resourceVersion"] == "7"  # a concurrent change is a 409, compared again
    assert "spec" not in patch


def test_a_user_key_of_the_same_name_as_a_removed_infrastructure_key_is_removed_only_if_weir_put_it() -> None:
    """Without weir's record of a key (a user put it there), removing nothing from the Gateway
    removes nothing from the Service."""
    gw = gateway()
    stored = as_stored(desired_service(gw, "ClusterIP"), team="users")
    assert service_patch(stored, gw, "ClusterIP") is None


def test_new_listeners_and_type_are_patched() -> None:
    stored = as_stored(desired_service(gateway(), "ClusterIP"))
    stored["spec"]["ports"] = stored["spec"]["ports"][:1]
    patch = service_patch(stored, gateway(), "LoadBalancer")
    assert patch is not None and patch["spec"]["type"] == "LoadBalancer"
    assert [p["port"] for p in patch["spec"]["ports"]] == [5353, 8080]


def endpoint_slice(name: str, kind: str, endpoints: list[dict[str, Any]]) -> EndpointSlice:
    return EndpointSlice.model_validate(
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": name,
                "namespace": "weir-system",
                "labels": {"kubernetes.io/service-name": "weir"},
            },
            "addressType": kind,
            "endpoints": endpoints,
        }
    )


def test_slices_list_weirs_pods_per_address_type() -> None:
    gw = gateway()
    svc = {"metadata": {"name": "edge-weir", "uid": "svc-uid"}}
    sources = [
        endpoint_slice("weir-a", "IPv4", [{"addresses": ["10.0.0.2"], "conditions": {"ready": False}}]),
        endpoint_slice("weir-b", "IPv4", [{"addresses": ["10.0.0.1"]}, {"addresses": ["10.0.0.2"]}]),
        endpoint_slice("weir-c", "IPv6", [{"addresses": ["fd00::1"], "conditions": {"ready": True}}]),
    ]
    slices = desired_slices(gw, svc, sources)
    assert sorted(slices) == ["edge-weir-ipv4", "edge-weir-ipv6"]
    v4 = slices["edge-weir-ipv4"]
    assert v4["endpoints"] == [
        {"addresses": ["10.0.0.1"], "conditions": {}},
        {"addresses": ["10.0.0.2"], "conditions": {"ready": False}},  # the first slice's word
    ]
    assert v4["metadata"]["labels"]["kubernetes.io/service-name"] == "edge-weir"
    assert v4["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"] == "gateway-services.weir.dev"
    assert v4["metadata"]["ownerReferences"][0]["uid"] == "svc-uid"
    assert v4["ports"] == [
        {"name": "udp-5353", "port": 5353, "protocol": "UDP"},
        {"name": "tcp-8080", "port": 8080, "protocol": "TCP"},
    ]
    assert list(desired_slices(gw, svc, [])) == ["edge-weir-ipv4"]
    assert desired_slices(gw, svc, [])["edge-weir-ipv4"]["endpoints"] == []


def service(
    name: str, labels: dict[str, str], cluster_ip: str, status: dict[str, Any] | None = None
) -> Service:
    return Service.model_validate(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": "shop", "labels": labels},
            "spec": {"clusterIP": cluster_ip, "ports": [{"port": 8080}]},
            "status": status or {},
        }
    )


def gateway_class() -> GatewayClass:
    return GatewayClass.model_validate(
        {
            "apiVersion": GW,
            "kind": "GatewayClass",
            "metadata": {"name": "weir"},
            "spec": {"controllerName": "weir.dev/gateway-controller"},
        }
    )


def statuses(settings: Settings, *objects: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(GatewayClass status, Gateway status)``."""
    result = translate(Resources.from_objects([gateway_class(), gateway(), *objects]), settings)
    by_kind = {key.kind: status for key, status in result.statuses.items()}
    return by_kind["GatewayClass"], by_kind["Gateway"]


def accepted(status: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == "Accepted")


def test_in_the_mode_a_gateways_address_is_its_own_services() -> None:
    mode = Settings(gateway_services="ClusterIP", publish_service=("weir-system", "weir"))
    own = service("edge-weir", {"weir.dev/gateway-uid": UID}, "10.96.0.20")
    shared = service("weir", {}, "10.96.0.1")
    gc, gw = statuses(mode, own, shared)
    assert gw["addresses"] == [{"type": "IPAddress", "value": "10.96.0.20"}]
    assert "GatewayInfrastructurePropagation" in [f["name"] for f in gc["supportedFeatures"]]
    balanced = service(
        "edge-weir",
        {"weir.dev/gateway-uid": UID},
        "10.96.0.20",
        {"loadBalancer": {"ingress": [{"hostname": "lb.example.com"}]}},
    )
    assert statuses(mode, balanced)[1]["addresses"] == [{"type": "Hostname", "value": "lb.example.com"}]
    _, waiting = statuses(mode)  # not made yet
    assert waiting["addresses"] == [] and accepted(waiting)["message"] == "Gateway is valid"


def test_a_foreign_service_of_that_name_is_said_on_the_gateway() -> None:
    mode = Settings(gateway_services="ClusterIP")
    for labels in ({}, {"weir.dev/gateway-uid": "another-gateway"}):
        _, gw = statuses(mode, service("edge-weir", labels, "10.96.0.30"))
        assert gw["addresses"] == []
        cond = accepted(gw)
        assert cond["status"] == "True"
        assert "Service shop/edge-weir exists and is not weir's" in cond["message"]
        assert "delete or rename that Service" in cond["message"]


def test_without_the_mode_nothing_changes() -> None:
    default = Settings(publish_service=("shop", "weir"))
    gc, gw = statuses(default, service("edge-weir", {}, "10.96.0.30"), service("weir", {}, "10.96.0.1"))
    assert gw["addresses"] == [{"type": "IPAddress", "value": "10.96.0.1"}]
    assert accepted(gw)["message"] == "Gateway is valid"
    assert [f["name"] for f in gc["supportedFeatures"]] == list(SUPPORTED_FEATURES)
    assert "GatewayInfrastructurePropagation" not in SUPPORTED_FEATURES


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--kubernetes", "--gateway-services", "ClusterIP"], "--gateway-services needs --publish-service"),
        (
            ["--kubernetes", "--publish-service", "a/b", "--gateway-services", "NodePort"],
            "must be ClusterIP or",
        ),
        (["-f", ".", "--gateway-services", "ClusterIP"], "--gateway-services: only with --kubernetes"),
    ],
)
def test_the_flag_is_refused_where_it_cannot_work(args: list[str], says: str) -> None:
    result = CliRunner().invoke(app, ["run", *args], env={"COLUMNS": "300"})
    assert result.exit_code == 2, result.output
    assert says in " ".join(result.output.split())


def test_the_provider_option_needs_the_publish_service() -> None:
    with pytest.raises(ValueError, match="needs publish_service"):
        KubernetesOptions(gateway_services="ClusterIP")


def test_the_flag_reaches_the_provider() -> None:
    from weir.cli import _kube_options

    options, publish, _ = _kube_options(
        kubeconfig=None,
        namespace=[],
        lease_namespace=None,
        lease_name="weir-leader",
        lease_duration=15.0,
        publish_service="weir-system/weir",
        gateway_address=[],
        controller_name="weir.dev/gateway-controller",
        reprobe_interval=30.0,
        gateway_services="LoadBalancer",
    )
    assert options.gateway_services == "LoadBalancer" and publish == ("weir-system", "weir")
