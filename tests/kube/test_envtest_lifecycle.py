"""What happens to a cluster under a running weir: a CRD installed after start, etcd wiped.

Each test has an API server of its own (``fresh_cluster``): they break it.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from envtest import WEIR_TOKEN, Cluster, assets
from kube_harness import XB, eventually, service
from kube_world import LEASE_NAMESPACE, crds_for_tests, install_crds, install_rbac

from weir.api.meta import ObjectKey
from weir.providers.kubernetes.provider import KubernetesOptions, KubernetesProvider
from weir.providers.kubernetes.watch import WatchTiming

TIMING = WatchTiming(reprobe_s=0.5, backoff_initial_s=0.1, backoff_max_s=1.0)


@contextlib.asynccontextmanager
async def provider(kubeconfig: Path) -> AsyncIterator[KubernetesProvider]:
    running = KubernetesProvider(KubernetesOptions(kubeconfig=str(kubeconfig), timing=TIMING))
    await running.start()
    try:
        yield running
    finally:
        await running.stop()


def without_xbackend() -> list[dict[str, object]]:
    return [c for c in crds_for_tests() if c["spec"]["names"]["kind"] != "XBackend"]


@pytest.mark.crds(without_xbackend())
async def test_a_crd_installed_after_start_is_listed_and_watched(fresh_cluster: Cluster) -> None:
    kubeconfig = fresh_cluster.kubeconfig("weir", WEIR_TOKEN, namespace=LEASE_NAMESPACE)
    mark = fresh_cluster.audit_mark()
    async with provider(kubeconfig) as running:
        assert "XBackend" in {k.kind for k in running.cache.unserved_kinds()}
        xbackend_crd = [c for c in crds_for_tests() if c["spec"]["names"]["kind"] == "XBackend"]
        install_crds(fresh_cluster.admin, xbackend_crd)
        fresh_cluster.admin.apply(
            {
                "apiVersion": XB,
                "kind": "XBackend",
                "metadata": {"name": "api", "namespace": "default"},
                "spec": {
                    "type": "ExternalHostname",
                    "externalHostname": {"hostname": "api.example.com"},
                    "port": {"port": 443},
                },
            }
        )
        key = ObjectKey("XBackend", "default", "api")
        await eventually(lambda: running.cache.live(key) is not None, timeout=15)
        assert not running.cache.unserved_kinds()
    assert not fresh_cluster.refused_since(mark)


async def test_etcd_wiped_under_weir_is_noticed_and_listed_again(fresh_cluster: Cluster) -> None:
    """etcd wiped (or restored from an older backup) and the API server restarted: the versions
    weir watches from are newer than anything the server has. It used to retry watching from
    them for ever and never see a new object; it lists again."""
    kubeconfig = fresh_cluster.kubeconfig("weir", WEIR_TOKEN, namespace=LEASE_NAMESPACE)
    async with provider(kubeconfig) as running:
        # Make the versions weir holds high, so that they are ahead of the new etcd's.
        for i in range(40):
            fresh_cluster.admin.apply(service("default", f"old-{i}", "127.0.0.2", 80)[0])
        old = ObjectKey("Service", "default", "old-39")
        await eventually(lambda: running.cache.live(old) is not None, timeout=15)
        await asyncio.to_thread(fresh_cluster.restart, wipe=True)
        install_crds(fresh_cluster.admin, crds_for_tests())
        install_rbac(fresh_cluster.admin)
        fresh_cluster.admin.apply(service("default", "new", "127.0.0.2", 80)[0])
        new = ObjectKey("Service", "default", "new")
        await eventually(lambda: running.cache.live(new) is not None, timeout=30)
        await eventually(lambda: running.cache.live(old) is None, timeout=10)


def test_a_port_taken_before_the_api_server_binds_it_is_chosen_again(tmp_path: Path) -> None:
    """Another program on the machine takes the API server's port between choosing and binding
    (parallel suites did: every test of a module failed with ``address already in use``)."""
    binaries = assets()
    assert binaries is not None
    cluster = Cluster(tmp_path, binaries)
    taken = cluster.port
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", taken))
        squatter.listen(1)
        cluster.start()
        try:
            assert cluster.port != taken
            assert cluster.admin.request("GET", "/version")["major"] == "1"
        finally:
            cluster.stop()
