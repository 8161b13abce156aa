"""Where the Lease goes, and what weir says when leader election cannot work."""

from __future__ import annotations

import logging

import pytest
from envtest import ADMIN_TOKEN, Cluster
from kube_harness import (
    GW,
    TIMING,
    admin_get,
    conditions,
    eventually,
    gateway,
    gateway_class,
    metric,
    running_weir,
)
from kube_world import Objects

from weir.providers.kubernetes.leader import LeaseSettings
from weir.providers.kubernetes.provider import KubernetesOptions
from weir.testkit import free_port

LEASE = "coordination.k8s.io/v1"


def lease_holder(cluster: Cluster, namespace: str, name: str) -> str | None:
    lease = cluster.admin.get(LEASE, "Lease", namespace, name)
    return None if lease is None else lease["spec"].get("holderIdentity")


@pytest.mark.parametrize("context_namespace", ["own", None])
async def test_out_of_a_pod_the_lease_goes_to_the_kubeconfig_context_namespace(
    cluster: Cluster, objects: Objects, context_namespace: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It used to go to weir-system, which a fresh cluster does not have: status was never written."""
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    ns = objects.namespace
    name = f"lease-{ns}"
    kubeconfig = cluster.kubeconfig(f"admin-{ns}", ADMIN_TOKEN, namespace=ns if context_namespace else None)
    expected = ns if context_namespace else "default"
    options = KubernetesOptions(
        kubeconfig=str(kubeconfig), lease=LeaseSettings.scaled("", name, "me", 3.0), timing=TIMING
    )
    async with running_weir(options) as (_controller, provider):
        await eventually(lambda: lease_holder(cluster, expected, name) == "me")
        assert provider.election_problem is None
    cluster.admin.delete(LEASE, "Lease", expected, name)


async def test_an_election_that_cannot_work_is_loud_and_specific(
    cluster: Cluster, objects: Objects, caplog: pytest.LogCaptureFixture
) -> None:
    """The Lease's namespace does not exist: an ERROR naming it and the fix (once), a problem in
    /status, /ready 503 when asked for, a metric; creating the namespace mends it all."""
    caplog.set_level(logging.INFO, logger="weir")
    ns = objects.namespace
    missing = f"{ns}-leases"
    kubeconfig = cluster.kubeconfig(f"admin-{ns}", ADMIN_TOKEN, namespace=missing)
    port = free_port()
    objects.apply(gateway_class(ns), gateway(ns, ns, port))
    options = KubernetesOptions(
        kubeconfig=str(kubeconfig),
        lease=LeaseSettings.scaled("", "weir-leader", "me", 1.5),
        unready_without_election=True,
        timing=TIMING,
    )
    async with running_weir(options) as (controller, provider):
        await eventually(lambda: provider.election_problem is not None)
        await eventually(
            lambda: any(p.object == f"Lease {missing}/weir-leader" for p in controller._current.problems)
        )
        status = (await admin_get(controller, "/status")).json()
        problem = status["provider"]["lease"]["problem"]
        assert f"the namespace '{missing}' does not exist" in problem and "--lease-namespace" in problem
        assert any(p["object"] == f"Lease {missing}/weir-leader" for p in status["problems"])
        ready = await admin_get(controller, "/ready")
        assert ready.status_code == 503 and "does not exist" in ready.json()["reason"]
        text = (await admin_get(controller, "/metrics")).text
        assert metric(text, "weir_kubernetes_leader_election_failing") == 1
        assert metric(text, "weir_kubernetes_leader") == 0
        assert metric(text, "weir_kubernetes_api_errors_total", code="404") >= 1
        assert cluster.admin.status(GW, "Gateway", ns, "gw") == {}  # nobody writes status
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert len([e for e in errors if "does not exist" in e]) == 1, errors

        objects.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": missing}})
        await eventually(lambda: provider.election_problem is None, timeout=10)
        assert (await admin_get(controller, "/ready")).status_code == 200
        await eventually(
            lambda: (
                conditions(cluster.admin.status(GW, "Gateway", ns, "gw")).get("Accepted", ("",))[0] == "True"
            ),
            timeout=10,
        )
        assert not (await admin_get(controller, "/status")).json()["problems"]
    cluster.admin.delete(LEASE, "Lease", missing, "weir-leader")
