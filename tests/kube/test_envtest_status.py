"""weir in Kubernetes mode on a real API server with deploy/'s RBAC: traffic through real Envoy,
status through the status subresource, conflicts, leadership and failover."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
from envtest import Cluster
from kube_harness import (
    API_HOST,
    GW,
    KINDS,
    OTHER,
    TIMING,
    admin_get,
    conditions,
    eventually,
    gateway,
    gateway_class,
    metric,
    our_parent,
    route,
    running_weir,
    to_xbackend,
    xbackend,
)
from kube_world import LEASE_NAME, LEASE_NAMESPACE, Objects

from weir.api.meta import ObjectKey
from weir.providers.kubernetes.api import KubeApi, load_config
from weir.providers.kubernetes.cache import ObjectCache
from weir.providers.kubernetes.leader import LeaderElector, LeaseSettings
from weir.providers.kubernetes.provider import KubernetesOptions
from weir.providers.kubernetes.status import StatusWriter
from weir.providers.kubernetes.watch import Backoff, KindWatcher
from weir.testkit import DnsStub, RecordingUpstream, free_port


async def test_traffic_and_status_with_exactly_deploys_rbac(
    cluster: Cluster, objects: Objects, weir_kubeconfig: Path
) -> None:
    """The upstream is an XBackend resolved by a DNS stub to a loopback address (a real API
    server refuses loopback addresses in EndpointSlices, so Service backends cannot reach a
    test upstream here; tests/e2e/test_kubernetes.py covers them against the double)."""
    ns = objects.namespace
    port = free_port()
    async with DnsStub() as dns, RecordingUpstream("api", host="127.0.0.2") as upstream:
        dns.set(API_HOST, ["127.0.0.2"])
        objects.apply(
            gateway_class(ns),
            gateway(ns, ns, port),
            xbackend(ns, "api", API_HOST, upstream.port),
            route(ns, "web", "/svc", to_xbackend("api")),
        )
        # Another controller's entry in the route's status: weir's writes must keep it.
        theirs = {
            "parentRef": {"name": "their-gw"},
            "controllerName": OTHER,
            "conditions": [
                {
                    "type": "Accepted",
                    "status": "True",
                    "reason": "Accepted",
                    "message": "theirs",
                    "lastTransitionTime": "2024-01-01T00:00:00Z",
                    "observedGeneration": 1,
                }
            ],
        }
        web = cluster.admin.get(GW, "HTTPRoute", ns, "web")
        assert web is not None
        cluster.admin.put_status({**web, "status": {"parents": [theirs]}})

        # No lease namespace given: the kubeconfig context's (weir-system, where deploy/ grants it).
        lease = LeaseSettings.scaled("", LEASE_NAME, "replica-a", 3.0)
        options = KubernetesOptions(kubeconfig=str(weir_kubeconfig), lease=lease, timing=TIMING)
        async with running_weir(options, dns) as (controller, _provider):
            async with httpx.AsyncClient(timeout=5) as client:
                response = await client.get(f"http://127.0.0.1:{port}/svc/x")
            assert response.status_code == 200 and response.json()["upstream"] == "api"

            def written() -> bool:
                gw = cluster.admin.status(GW, "Gateway", ns, "gw")
                ours = our_parent(cluster.admin.status(GW, "HTTPRoute", ns, "web")) or {}
                return (
                    conditions(gw).get("Programmed", ("", ""))[0] == "True"
                    and conditions(ours).get("ResolvedRefs", ("", ""))[0] == "True"
                )

            await eventually(written, timeout=15)
            assert conditions(cluster.admin.status(GW, "GatewayClass", None, ns))["Accepted"] == (
                "True",
                "Accepted",
            )
            assert cluster.admin.status(GW, "HTTPRoute", ns, "web")["parents"][0] == theirs
            lease_obj = cluster.admin.get("coordination.k8s.io/v1", "Lease", LEASE_NAMESPACE, LEASE_NAME)
            assert lease_obj is not None and lease_obj["spec"]["holderIdentity"] == "replica-a"

            status = (await admin_get(controller, "/status")).json()
            assert status["provider"]["lease"] == {
                "namespace": LEASE_NAMESPACE,
                "name": LEASE_NAME,
                "identity": "replica-a",
                "holder": "replica-a",
                "problem": None,
            }
            assert status["provider"]["writesStatus"] is True
            text = (await admin_get(controller, "/metrics")).text
            assert metric(text, "weir_kubernetes_leader") == 1
            assert metric(text, "weir_kubernetes_leader_election_failing") == 0
            assert metric(text, "weir_kubernetes_leader_transitions_total") == 1
            assert metric(text, "weir_kubernetes_status_writes_total", kind="Gateway", result="written") >= 1
            assert metric(text, "weir_kubernetes_lists_total", kind="HTTPRoute") >= 1


async def test_a_write_that_conflicts_is_read_again_and_merged(
    objects: Objects, weir_kubeconfig: Path
) -> None:
    """The writer patches with the resourceVersion it compared with; someone wrote in between: the
    API server answers 409, and the writer reads the object again and keeps their entry."""
    ns = objects.namespace
    objects.apply(
        gateway_class(ns), gateway(ns, ns, 8080), route(ns, "web", "/", {"name": "web", "port": 80})
    )
    api = KubeApi(load_config(weir_kubeconfig))
    cache = ObjectCache()
    watcher = KindWatcher(api, cache, KINDS["HTTPRoute"], ns, TIMING)
    await watcher._list()  # the cache now holds the route at its current version, and stays there
    key = ObjectKey("HTTPRoute", ns, "web")
    live = cache.live(key)
    assert live is not None
    web = objects.api.get(GW, "HTTPRoute", ns, "web")
    assert web is not None
    theirs = {"parentRef": {"name": "theirs"}, "controllerName": OTHER, "conditions": []}
    objects.api.put_status({**web, "status": {"parents": [theirs]}})  # the cache did not see this

    writer = StatusWriter(api, cache, KINDS, "weir.dev/gateway-controller", lambda: True, Backoff(0.05, 0.2))
    ours = {
        "parentRef": {"name": "gw"},
        "controllerName": "weir.dev/gateway-controller",
        "conditions": [
            {
                "type": "Accepted",
                "status": "True",
                "reason": "Accepted",
                "message": "ok",
                "lastTransitionTime": "2025-01-01T00:00:00Z",
                "observedGeneration": 1,
            }
        ],
    }
    task = asyncio.create_task(writer.run())
    try:
        writer.submit({key: {"parents": [ours]}})
        await eventually(lambda: writer.writes == 1)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await api.close()
    assert writer.conflicts == 1
    parents = objects.api.status(GW, "HTTPRoute", ns, "web")["parents"]
    assert parents == [theirs, ours]


async def test_leadership_fails_over_when_the_leader_dies_and_at_once_when_it_hands_over(
    cluster: Cluster, weir_kubeconfig: Path
) -> None:
    api_a = KubeApi(load_config(weir_kubeconfig))
    api_b = KubeApi(load_config(weir_kubeconfig))
    a = LeaderElector(api_a, LeaseSettings.scaled(LEASE_NAMESPACE, LEASE_NAME, "a", 2.0))
    b = LeaderElector(api_b, LeaseSettings.scaled(LEASE_NAMESPACE, LEASE_NAME, "b", 2.0))
    task_a = asyncio.create_task(a.run())
    try:
        await eventually(lambda: a.is_leader)
        task_b = asyncio.create_task(b.run())
        await asyncio.sleep(1.0)
        assert not b.is_leader and b.holder == "a"
        # A dies without a word: B takes over once A's Lease has run out.
        task_a.cancel()
        await asyncio.gather(task_a, return_exceptions=True)
        loop = asyncio.get_running_loop()
        died = loop.time()
        await eventually(lambda: b.is_leader, timeout=10)
        assert loop.time() - died < 2.0 + 1.5
        lease = cluster.admin.get("coordination.k8s.io/v1", "Lease", LEASE_NAMESPACE, LEASE_NAME)
        assert lease is not None and lease["spec"]["holderIdentity"] == "b"
        transitions = int(lease["spec"]["leaseTransitions"])
        # B stops cleanly and hands the Lease back: A (running again) takes it on its next try.
        task_a = asyncio.create_task(a.run())
        task_b.cancel()
        await asyncio.gather(task_b, return_exceptions=True)
        await b.release()
        handed = loop.time()
        await eventually(lambda: a.is_leader, timeout=5)
        assert loop.time() - handed < 1.0
        lease = cluster.admin.get("coordination.k8s.io/v1", "Lease", LEASE_NAMESPACE, LEASE_NAME)
        assert lease is not None and int(lease["spec"]["leaseTransitions"]) == transitions + 1
    finally:
        task_a.cancel()
        await asyncio.gather(task_a, return_exceptions=True)
        await a.release()
        await api_a.close()
        await api_b.close()


async def test_a_route_whose_backends_are_all_refused_says_so(
    objects: Objects, weir_kubeconfig: Path
) -> None:
    """It used to say ResolvedRefs=True "All references resolved" while every request got 500; the
    reason was only on the XBackend."""
    ns = objects.namespace
    port = free_port()
    objects.apply(
        gateway_class(ns),
        gateway(ns, ns, port),
        xbackend(ns, "local", "localhost", 8080),
        route(ns, "web", "/", to_xbackend("local")),
    )
    lease = LeaseSettings.scaled("", LEASE_NAME, "refused-test", 3.0)
    options = KubernetesOptions(kubeconfig=str(weir_kubeconfig), lease=lease, timing=TIMING)
    async with running_weir(options):
        async with httpx.AsyncClient(timeout=5) as client:
            response = await client.get(f"http://127.0.0.1:{port}/")
        assert response.status_code == 500

        def resolved() -> dict[str, Any]:
            parent = our_parent(objects.api.status(GW, "HTTPRoute", ns, "web")) or {}
            return next((c for c in parent.get("conditions", []) if c["type"] == "ResolvedRefs"), {})

        await eventually(lambda: resolved().get("status") == "False", timeout=15)
        condition = resolved()
        assert condition["reason"] == "BackendNotFound"
        assert f"XBackend {ns}/local is refused" in condition["message"]
        assert "localhost" in condition["message"] and "500" in condition["message"]
        parent = our_parent(objects.api.status(GW, "HTTPRoute", ns, "web")) or {}
        assert conditions(parent)["Accepted"] == ("True", "Accepted")  # as upstream conformance expects
