"""XBackend in both shapes on a real API server: status in the shape of the installed CRD.

An API server with upstream main's XBackend CRD silently drops a status
written as ``status.parents`` (v1.6's), and one with v1.6's drops
``status.ancestors``: the patch succeeds and the status is gone. So every
check here reads the object back from the server.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from envtest import WEIR_TOKEN, Cluster
from kube_harness import (
    API_HOST,
    CONTROLLER,
    TIMING,
    XB,
    eventually,
    gateway,
    gateway_class,
    route,
    running_weir,
    to_xbackend,
    xbackend,
)
from kube_world import LEASE_NAMESPACE, install_crds, xbackend_crd

from weir.api.xbackend_v1alpha1 import SCHEMAS, Shape
from weir.providers.kubernetes.provider import KubernetesOptions
from weir.testkit import DnsStub, RecordingUpstream, free_port

NS = "default"


def xbackend_in(shape: Shape, name: str, port: int) -> dict[str, Any]:
    """An XBackend for the DNS stub's host in ``shape`` (v1.6: ``port.port``; main: ``port.number``)."""
    obj = xbackend(NS, name, API_HOST, port)
    if shape == "main":
        obj["spec"]["port"] = {"number": port}
    return obj


def ours(cluster: Cluster, name: str, shape: Shape) -> dict[str, Any] | None:
    """weir's entry in the XBackend's status as the server holds it, if it is in ``shape``'s keys
    and the status has no list of the other shape."""
    status = cluster.admin.status(XB, "XBackend", NS, name)
    wanted = SCHEMAS[shape].status_list
    if any(schema.status_list in status for schema in SCHEMAS.values() if schema.status_list != wanted):
        return None
    ref = SCHEMAS[shape].status_ref
    return next(
        (e for e in status.get(wanted, []) if e.get("controllerName") == CONTROLLER and ref in e), None
    )


async def get(port: int, path: str) -> httpx.Response:
    async with httpx.AsyncClient(timeout=5) as client:
        return await client.get(f"http://127.0.0.1:{port}{path}")


@pytest.mark.parametrize(("before", "after"), [("v1.6", "main"), ("main", "v1.6")])
async def test_xbackend_status_follows_the_installed_crds_shape_and_its_replacement(
    fresh_cluster: Cluster, before: Shape, after: Shape
) -> None:
    """XBackend's CRD in one shape, then replaced by the other under a running weir (the Gateway
    API CRDs upgraded): weir reads the CRD's shape (with deploy/'s RBAC: ``get`` on that one CRD)
    and writes the status of the XBackend it already holds, read in the old shape, in the new
    shape's keys. It used to keep writing the object's shape, which the server dropped; and
    since its own earlier write matched, it did not even try."""
    admin = fresh_cluster.admin
    install_crds(admin, [xbackend_crd(before)])
    kubeconfig = fresh_cluster.kubeconfig("weir", WEIR_TOKEN, namespace=LEASE_NAMESPACE)
    mark = fresh_cluster.audit_mark()
    port = free_port()
    async with DnsStub() as dns, RecordingUpstream("api", host="127.0.0.2") as upstream:
        dns.set(API_HOST, ["127.0.0.2"])
        admin.apply_all(
            [
                gateway_class("xb"),
                gateway(NS, "xb", port),
                xbackend_in(before, "api", upstream.port),
                route(NS, "web", "/one", to_xbackend("api")),
            ]
        )
        options = KubernetesOptions(kubeconfig=str(Path(kubeconfig)), timing=TIMING)  # no election
        async with running_weir(options, dns) as (_controller, provider):
            assert provider.xbackend_shape == before
            assert (await get(port, "/one")).json()["upstream"] == "api"
            entry = await eventually(lambda: ours(fresh_cluster, "api", before), timeout=15)
            assert {c["type"]: c["status"] for c in entry["conditions"]}["Accepted"] == "True"

            install_crds(admin, [xbackend_crd(after)])
            await eventually(lambda: provider.xbackend_shape == after, timeout=10)
            entry = await eventually(lambda: ours(fresh_cluster, "api", after), timeout=15)
            assert {c["type"]: c["status"] for c in entry["conditions"]}["Accepted"] == "True"

            # An XBackend written in the new shape: read in it, written in it, traffic through it.
            admin.apply_all(
                [xbackend_in(after, "api2", upstream.port), route(NS, "web2", "/two", to_xbackend("api2"))]
            )
            await eventually(lambda: ours(fresh_cluster, "api2", after), timeout=15)
            assert (await get(port, "/two")).json()["upstream"] == "api"
            assert ours(fresh_cluster, "api", after) is not None
    assert not fresh_cluster.refused_since(mark)


def our_services(cluster: Cluster) -> list[dict[str, Any]]:
    """The Services labelled for an XBackend in ``NS`` that an XBackend owns."""
    items = cluster.admin.list("v1", "Service", NS, labelSelector="weir.dev/xbackend")["items"]
    return [
        s for s in items if any(ref["kind"] == "XBackend" for ref in s["metadata"].get("ownerReferences", []))
    ]


async def test_an_endpoint_selector_xbackend_gets_a_headless_service_made_and_removed_by_weir(
    fresh_cluster: Cluster,
) -> None:
    """weir (the leader) creates one headless Service per EndpointSelector XBackend, owned by it and
    labelled ``weir.dev/xbackend``; a new selector is a new Service (the old one deleted); a change of
    type deletes it. A Service with the label but no XBackend ownerReference is someone else's and is
    never touched. (No garbage collector runs here: the ownerReference is checked, not exercised.)"""
    admin = fresh_cluster.admin
    install_crds(admin, [xbackend_crd("main")])
    kubeconfig = fresh_cluster.kubeconfig("weir", WEIR_TOKEN, namespace=LEASE_NAMESPACE)
    mark = fresh_cluster.audit_mark()
    pods: dict[str, Any] = {
        "apiVersion": XB,
        "kind": "XBackend",
        "metadata": {"name": "pods", "namespace": NS},
        "spec": {
            "type": "EndpointSelector",
            "endpointSelector": {"matchLabels": {"app": "web"}},
            "port": {"number": 8080},
        },
    }
    theirs = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "theirs", "namespace": NS, "labels": {"weir.dev/xbackend": "pods"}},
        "spec": {"clusterIP": "None", "selector": {"app": "other"}, "ports": [{"port": 80}]},
    }
    admin.apply_all([pods, theirs])
    uid = admin.get(XB, "XBackend", NS, "pods")["metadata"]["uid"]  # type: ignore[index]
    options = KubernetesOptions(kubeconfig=str(kubeconfig), timing=TIMING)
    async with running_weir(options) as (_controller, provider):
        [svc] = await eventually(lambda: our_services(fresh_cluster), timeout=15)
        assert svc["metadata"]["name"].startswith("pods-")
        assert svc["metadata"]["labels"] == {"weir.dev/xbackend": "pods"}
        [owner] = svc["metadata"]["ownerReferences"]
        assert (owner["apiVersion"], owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
            XB,
            "XBackend",
            "pods",
            uid,
            True,
        )
        assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["selector"] == {"app": "web"}
        assert [(p["port"], p["targetPort"]) for p in svc["spec"]["ports"]] == [(8080, 8080)]
        first = svc["metadata"]["name"]

        pods["spec"]["endpointSelector"] = {"matchLabels": {"app": "web", "tier": "v2"}}
        admin.apply(pods)

        def replaced() -> list[dict[str, Any]]:
            found = our_services(fresh_cluster)
            return found if [s["metadata"]["name"] != first for s in found] == [True] else []

        [svc] = await eventually(replaced, timeout=15)
        assert svc["spec"]["selector"] == {"app": "web", "tier": "v2"}

        pods["spec"] = {
            "type": "ExternalHostname",
            "externalHostname": {"hostname": API_HOST},
            "port": {"number": 8080},
        }
        admin.apply(pods)
        await eventually(lambda: not our_services(fresh_cluster), timeout=15)
        assert provider.selector_services is not None
        assert (provider.selector_services.created, provider.selector_services.deleted) == (2, 2)
    assert admin.get("v1", "Service", NS, "theirs") is not None
    assert not fresh_cluster.refused_since(mark)
