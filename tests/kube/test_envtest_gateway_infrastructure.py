"""A Service per Gateway (``--gateway-services``) on a real API server, with deploy/'s RBAC plus
deploy/gateway-services/: upstream's GatewayInfrastructure case, then what a cluster can do to it.

No controller-manager runs here: no garbage collector (weir must delete what it
owns itself, and the tests check that it does) and no EndpointSlice controller
(the slices of weir's own Service, which would list its pods, are written by the
test; the API server refuses loopback addresses in them, so they hold
documentation addresses and no traffic goes through the Gateway's Service).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envtest import WEIR_TOKEN, Cluster, documents
from kube_harness import GW, TIMING, conditions, eventually, gateway_class, running_weir
from kube_world import DEPLOY, LEASE_NAMESPACE

from weir.providers.kubernetes.provider import KubernetesOptions
from weir.testkit import free_port

NS = "gateway-conformance-infra"
NAME = "gateway-with-infrastructure-metadata"
SERVICE = f"{NAME}-weir"
PUBLISH = (LEASE_NAMESPACE, "weir")
CLASS = "weir"


def setup(cluster: Cluster) -> Path:
    """deploy/gateway-services/'s RBAC, the test namespace, weir's class, and weir's own Service with
    the slice Kubernetes would keep for its pods (one ready, one not); weir's kubeconfig."""
    admin = cluster.admin
    admin.apply_all(documents(DEPLOY / "gateway-services" / "clusterrole.yaml"))
    admin.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    admin.apply(gateway_class(CLASS))
    admin.apply_all(
        [
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": PUBLISH[1], "namespace": PUBLISH[0]},
                "spec": {
                    "selector": {"app.kubernetes.io/name": "weir"},
                    "ports": [{"name": "http", "port": 80}],
                },
            },
            pods_slice([("10.0.0.7", True), ("10.0.0.8", False)]),
        ]
    )
    return cluster.kubeconfig("weir", WEIR_TOKEN, namespace=LEASE_NAMESPACE)


def pods_slice(endpoints: list[tuple[str, bool]]) -> dict[str, Any]:
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": "weir-abcde",
            "namespace": PUBLISH[0],
            "labels": {"kubernetes.io/service-name": PUBLISH[1]},
        },
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 80}],
        "endpoints": [{"addresses": [ip], "conditions": {"ready": ready}} for ip, ready in endpoints],
    }


def infra_gateway(
    http: int, udp: int, infrastructure: dict[str, Any], class_name: str = CLASS
) -> dict[str, Any]:
    """Upstream's ``gateway-with-infrastructure-metadata`` (tests/gateway-infrastructure.yaml), with
    free ports for Envoy to bind, and a UDP listener for the Service's protocols."""
    return {
        "apiVersion": GW,
        "kind": "Gateway",
        "metadata": {"name": NAME, "namespace": NS},
        "spec": {
            "gatewayClassName": class_name,
            "infrastructure": infrastructure,
            "listeners": [
                {
                    "name": "http",
                    "port": http,
                    "protocol": "HTTP",
                    "allowedRoutes": {"namespaces": {"from": "Same"}},
                },
                {"name": "dns", "port": udp, "protocol": "UDP"},
            ],
        },
    }


def labelled_services(cluster: Cluster) -> list[dict[str, Any]]:
    """What upstream's test finds: Services of the namespace labelled with the Gateway's name."""
    selector = f"gateway.networking.k8s.io/gateway-name={NAME}"
    items: list[dict[str, Any]] = cluster.admin.list("v1", "Service", NS, labelSelector=selector)["items"]
    return items


def weirs_slices(cluster: Cluster) -> list[dict[str, Any]]:
    selector = "endpointslice.kubernetes.io/managed-by=gateway-services.weir.dev"
    items: list[dict[str, Any]] = cluster.admin.list(
        "discovery.k8s.io/v1", "EndpointSlice", NS, labelSelector=selector
    )["items"]
    return items


def subset(small: dict[str, str], big: dict[str, str]) -> bool:
    return all(big.get(k) == v for k, v in small.items())


async def test_GatewayInfrastructure(fresh_cluster: Cluster) -> None:
    """Upstream's case, and the Service's life: the Gateway is Accepted; the Service labelled with
    its name carries every ``spec.infrastructure`` label and annotation, is owned by it, has its
    listener ports (TCP and UDP) and no selector; its EndpointSlice lists weir's pods; the Gateway's
    address is its cluster IP; GatewayClass status claims GatewayInfrastructurePropagation. Then a
    key removed from the Gateway leaves the Service while a user's key stays; a new pod is listed;
    the Gateway leaving weir's class, and then being deleted, deletes the Service and slice (by weir:
    no garbage collector runs here)."""
    admin = fresh_cluster.admin
    kubeconfig = setup(fresh_cluster)
    mark = fresh_cluster.audit_mark()
    http, udp = free_port(), free_port()
    infra = {
        "labels": {"key": "value", "team": "edge"},
        "annotations": {"key": "value", "example.com/trace": "on"},
    }
    admin.apply(infra_gateway(http, udp, infra))
    uid = admin.get(GW, "Gateway", NS, NAME)["metadata"]["uid"]  # type: ignore[index]
    options = KubernetesOptions(
        kubeconfig=str(kubeconfig), timing=TIMING, publish_service=PUBLISH, gateway_services="ClusterIP"
    )
    async with running_weir(options) as (_controller, provider):
        [svc] = await eventually(lambda: labelled_services(fresh_cluster), timeout=15)
        # upstream's checks
        await eventually(
            lambda: conditions(admin.status(GW, "Gateway", NS, NAME)).get("Accepted", ("",))[0] == "True"
        )
        assert subset(infra["labels"], svc["metadata"]["labels"]), svc["metadata"]
        assert subset(infra["annotations"], svc["metadata"]["annotations"]), svc["metadata"]
        # weir's Service
        assert svc["metadata"]["name"] == SERVICE
        [owner] = svc["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
            "Gateway",
            NAME,
            uid,
            True,
        )
        assert svc["metadata"]["labels"]["weir.dev/gateway-uid"] == uid
        assert svc["metadata"]["labels"]["gateway.networking.k8s.io/gateway-class-name"] == CLASS
        assert "selector" not in svc["spec"] and svc["spec"]["type"] == "ClusterIP"
        ports = sorted((p["name"], p["port"], p["protocol"]) for p in svc["spec"]["ports"])
        assert ports == sorted([(f"tcp-{http}", http, "TCP"), (f"udp-{udp}", udp, "UDP")])
        [es] = await eventually(lambda: weirs_slices(fresh_cluster), timeout=15)
        assert es["metadata"]["labels"]["kubernetes.io/service-name"] == SERVICE
        assert es["metadata"]["ownerReferences"][0]["uid"] == svc["metadata"]["uid"]
        assert [(e["addresses"], e["conditions"].get("ready")) for e in es["endpoints"]] == [
            (["10.0.0.7"], True),
            (["10.0.0.8"], False),
        ]
        assert sorted((p["name"], p["port"]) for p in es["ports"]) == sorted(
            [(f"tcp-{http}", http), (f"udp-{udp}", udp)]
        )
        cluster_ip = svc["spec"]["clusterIP"]
        await eventually(
            lambda: (
                admin.status(GW, "Gateway", NS, NAME).get("addresses")
                == [{"type": "IPAddress", "value": cluster_ip}]
            )
        )
        features = [f["name"] for f in admin.status(GW, "GatewayClass", None, CLASS)["supportedFeatures"]]
        assert "GatewayInfrastructurePropagation" in features

        # A user's label on the Service; a label and an annotation removed from the Gateway, one changed.
        admin.request(
            "PATCH",
            f"/api/v1/namespaces/{NS}/services/{SERVICE}",
            json={"metadata": {"labels": {"users": "mine"}}},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        infra = {"labels": {"key": "changed"}, "annotations": {"key": "value"}}
        admin.apply(infra_gateway(http, udp, infra))

        def updated() -> dict[str, Any] | None:
            found = admin.get("v1", "Service", NS, SERVICE) or {}
            meta = found.get("metadata") or {}
            ok = meta.get("labels", {}).get("key") == "changed" and "team" not in meta.get("labels", {})
            return found if ok and "example.com/trace" not in meta.get("annotations", {}) else None

        svc = await eventually(updated, timeout=15)
        assert svc["metadata"]["labels"]["users"] == "mine"
        assert svc["metadata"]["annotations"]["key"] == "value"
        assert svc["spec"]["clusterIP"] == cluster_ip  # patched, not made again

        # A pod becomes ready, another starts: the slice follows.
        admin.apply(pods_slice([("10.0.0.7", True), ("10.0.0.8", True), ("10.0.0.9", True)]))
        await eventually(
            lambda: (
                [e["addresses"][0] for e in (weirs_slices(fresh_cluster) or [{}])[0].get("endpoints", [])]
                == ["10.0.0.7", "10.0.0.8", "10.0.0.9"]
            ),
            timeout=15,
        )

        # The Gateway moves to a class that is not weir's: weir deletes what it made.
        admin.apply(gateway_class("other") | {"spec": {"controllerName": "example.com/other"}})
        admin.apply(infra_gateway(http, udp, infra, class_name="other"))
        await eventually(
            lambda: not labelled_services(fresh_cluster) and not weirs_slices(fresh_cluster), timeout=15
        )
        # Back, then deleted.
        admin.apply(infra_gateway(http, udp, infra))
        await eventually(lambda: labelled_services(fresh_cluster) and weirs_slices(fresh_cluster), timeout=15)
        admin.delete(GW, "Gateway", NS, NAME)
        await eventually(
            lambda: not labelled_services(fresh_cluster) and not weirs_slices(fresh_cluster), timeout=15
        )
        kept = provider.gateway_services
        assert kept is not None
        await eventually(lambda: kept.deleted >= 4)  # two Services, two slices (counted after the reply)
    assert not fresh_cluster.refused_since(mark)


async def test_a_service_of_the_same_name_that_is_not_weirs_is_left_alone_and_reported(
    fresh_cluster: Cluster,
) -> None:
    """A user's Service already has the name: weir does not take it over (its labels, ports and
    selector unchanged), the Gateway stays Accepted with a message saying why it has no address,
    and a Warning Event says so. Once the user deletes it, weir makes its own; with
    ``LoadBalancer``, the Gateway's address is the load balancer's ingress."""
    admin = fresh_cluster.admin
    kubeconfig = setup(fresh_cluster)
    mark = fresh_cluster.audit_mark()
    theirs = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": SERVICE, "namespace": NS, "labels": {"owner": "someone"}},
        "spec": {"selector": {"app": "theirs"}, "ports": [{"name": "web", "port": 8080}]},
    }
    admin.apply(theirs)
    http, udp = free_port(), free_port()
    admin.apply(infra_gateway(http, udp, {"labels": {"key": "value"}}))
    options = KubernetesOptions(
        kubeconfig=str(kubeconfig), timing=TIMING, publish_service=PUBLISH, gateway_services="LoadBalancer"
    )
    async with running_weir(options) as (_controller, _provider):

        def accepted_message() -> str:
            for cond in admin.status(GW, "Gateway", NS, NAME).get("conditions", []):
                if cond["type"] == "Accepted" and cond["status"] == "True":
                    return str(cond["message"])
            return ""

        message = await eventually(lambda: "is not weir's" in accepted_message() and accepted_message())
        assert f"Service {NS}/{SERVICE} exists" in message and "delete or rename" in message

        def warning() -> list[dict[str, Any]]:
            items = admin.list("events.k8s.io/v1", "Event", NS)["items"]
            return [e for e in items if e["reason"] == "GatewayServiceConflict" and e["type"] == "Warning"]

        [event] = await eventually(warning, timeout=15)
        assert event["regarding"]["kind"] == "Gateway" and event["regarding"]["name"] == NAME
        assert admin.status(GW, "Gateway", NS, NAME).get("addresses") == []
        still = admin.get("v1", "Service", NS, SERVICE)
        assert still is not None
        assert still["metadata"]["labels"] == {"owner": "someone"}
        assert "ownerReferences" not in still["metadata"]
        assert still["spec"]["selector"] == {"app": "theirs"} and still["spec"]["ports"][0]["port"] == 8080
        assert not weirs_slices(fresh_cluster)

        admin.delete("v1", "Service", NS, SERVICE)
        [svc] = await eventually(lambda: labelled_services(fresh_cluster), timeout=15)
        assert svc["spec"]["type"] == "LoadBalancer"
        await eventually(lambda: "is not weir's" not in accepted_message(), timeout=15)
        # No cloud controller here: the test plays it, and the ingress becomes the Gateway's address.
        svc |= {"apiVersion": "v1", "kind": "Service"}  # list items carry neither
        svc["status"] = {"loadBalancer": {"ingress": [{"ip": "192.0.2.10"}]}}
        admin.put_status(svc)
        await eventually(
            lambda: (
                admin.status(GW, "Gateway", NS, NAME).get("addresses")
                == [{"type": "IPAddress", "value": "192.0.2.10"}]
            ),
            timeout=15,
        )
    assert not fresh_cluster.refused_since(mark)


async def test_the_service_of_an_earlier_gateway_of_the_same_name_is_replaced(fresh_cluster: Cluster) -> None:
    """The Gateway deleted and made again while weir was away (no garbage collector here): the
    Service weir made for the first one (its uid, its ownerReference) is weir's own, not a foreign
    one: it is deleted and a Service for the new Gateway made."""
    admin = fresh_cluster.admin
    kubeconfig = setup(fresh_cluster)
    mark = fresh_cluster.audit_mark()
    http, udp = free_port(), free_port()
    options = KubernetesOptions(
        kubeconfig=str(kubeconfig), timing=TIMING, publish_service=PUBLISH, gateway_services="ClusterIP"
    )
    admin.apply(infra_gateway(http, udp, {"labels": {"key": "value"}}))
    async with running_weir(options):
        [first] = await eventually(lambda: labelled_services(fresh_cluster), timeout=15)
    admin.delete(GW, "Gateway", NS, NAME)
    admin.apply(infra_gateway(http, udp, {"labels": {"key": "value"}}))
    uid = admin.get(GW, "Gateway", NS, NAME)["metadata"]["uid"]  # type: ignore[index]
    assert first["metadata"]["labels"]["weir.dev/gateway-uid"] != uid
    async with running_weir(options) as (_controller, provider):

        def replaced() -> list[dict[str, Any]]:
            found = labelled_services(fresh_cluster)
            return [s for s in found if s["metadata"]["labels"]["weir.dev/gateway-uid"] == uid]

        [svc] = await eventually(replaced, timeout=15)
        assert svc["metadata"]["ownerReferences"][0]["uid"] == uid
        assert svc["metadata"]["uid"] != first["metadata"]["uid"]

        def owned_slices() -> list[dict[str, Any]]:
            found = weirs_slices(fresh_cluster)
            return [s for s in found if s["metadata"]["ownerReferences"][0]["uid"] == svc["metadata"]["uid"]]

        [es] = await eventually(owned_slices, timeout=15)
        assert es["metadata"]["labels"]["weir.dev/gateway-uid"] == uid
        assert (
            provider.gateway_services is not None and provider.gateway_services.deleted >= 1
        )  # before create
        items = admin.list("events.k8s.io/v1", "Event", NS)["items"]
        assert not [e for e in items if e["reason"] == "GatewayServiceConflict"]
    assert not fresh_cluster.refused_since(mark)
