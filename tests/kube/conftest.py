"""Fixtures of the real-API-server layer (tests/kube/README.md).

One API server per session (``cluster``), with every CRD of ``weir crds
--test-cluster`` and deploy/'s RBAC applied; tests that break a cluster
(etcd wiped, a CRD missing at start) get their own (``fresh_cluster``).
Without ``$KUBEBUILDER_ASSETS`` every test here is skipped with the hint.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from envtest import ASSETS_HINT, WEIR_TOKEN, Cluster, assets
from kube_world import LEASE_NAMESPACE, Objects, start_cluster


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if assets() is not None:
        return
    skip = pytest.mark.skip(reason=ASSETS_HINT)
    for item in items:
        if Path(str(item.fspath)).parent == Path(__file__).parent:
            item.add_marker(skip)


@contextlib.contextmanager
def _cluster(crds: list[dict[str, Any]] | None) -> Iterator[Cluster]:
    """A started cluster in a private folder; stopped and removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="weir-kube-", dir="/tmp"))
    cluster = start_cluster(folder, crds=crds)
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    with _cluster(None) as started:
        yield started


@pytest.fixture
def fresh_cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """A cluster of the test's own (CRDs: the test's ``crds`` marker's, else all)."""
    marker = request.node.get_closest_marker("crds")
    with _cluster(marker.args[0] if marker else None) as started:
        yield started


@pytest.fixture
def objects(cluster: Cluster) -> Iterator[Objects]:
    made = Objects(cluster.admin)
    try:
        yield made
    finally:
        made.delete_all()


@pytest.fixture
def weir_kubeconfig(cluster: Cluster) -> Iterator[Path]:
    """A kubeconfig for weir's service account, which has exactly deploy/'s rights; any request
    RBAC refuses it while the test runs fails the test (the API server's audit log says)."""
    mark = cluster.audit_mark()
    yield cluster.kubeconfig("weir", WEIR_TOKEN, namespace=LEASE_NAMESPACE)
    refused = cluster.refused_since(mark)
    assert not refused, f"RBAC (deploy/) refused requests weir made: {refused}"
