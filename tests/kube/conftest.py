"""Fixtures of the real-API-server layer (tests/kube/README.md).

One API server per session (``cluster``), with every CRD of ``weir crds
--test-cluster`` and deploy/'s RBAC applied; tests that break a cluster
(etcd wiped, a CRD missing at start) get their own (``fresh_cluster``).
Without ``$KUBEBUILDER_ASSETS`` every test here is skipped with the hint.
"""

from __future__ import annotations

import itertools
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from envtest import ASSETS_HINT, WEIR_TOKEN, Api, Cluster, assets, documents

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
#: deploy/'s manifests that make weir's identity and its rights (not the Deployment: no Pods run).
RBAC_FILES = ("namespace.yaml", "serviceaccount.yaml", "clusterrole.yaml", "leader-election.yaml")
#: The namespace and Lease deploy/ grants weir.
LEASE_NAMESPACE = "weir-system"
LEASE_NAME = "weir-leader"

_names = itertools.count(1)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if assets() is not None:
        return
    skip = pytest.mark.skip(reason=ASSETS_HINT)
    for item in items:
        if Path(str(item.fspath)).parent == Path(__file__).parent:
            item.add_marker(skip)


def crds_for_tests() -> list[dict[str, Any]]:
    """``weir crds --test-cluster``, run as a user would."""
    out = subprocess.run(
        [sys.executable, "-c", "from weir.cli import main; main()", "crds", "--test-cluster"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    crds = [doc for doc in yaml.safe_load_all(out) if doc]
    assert crds, "weir crds --test-cluster printed nothing"
    return crds


def install_crds(api: Api, crds: list[dict[str, Any]]) -> None:
    for crd in crds:
        api.apply(crd)
    api.wait_established(crd["metadata"]["name"] for crd in crds)


def install_rbac(api: Api) -> None:
    for name in RBAC_FILES:
        api.apply_all(documents(DEPLOY / name))


def start_cluster(folder: Path, *, crds: list[dict[str, Any]] | None) -> Cluster:
    binaries = assets()
    assert binaries is not None, ASSETS_HINT
    cluster = Cluster(folder, binaries)
    cluster.start()
    try:
        install_crds(cluster.admin, crds if crds is not None else crds_for_tests())
        install_rbac(cluster.admin)
    except BaseException:
        cluster.stop()
        raise
    return cluster


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    folder = Path(tempfile.mkdtemp(prefix="weir-kube-", dir="/tmp"))
    cluster = start_cluster(folder, crds=None)
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def fresh_cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """A cluster of the test's own (CRDs: the test's ``crds`` marker's, else all)."""
    marker = request.node.get_closest_marker("crds")
    folder = Path(tempfile.mkdtemp(prefix="weir-kube-", dir="/tmp"))
    cluster = start_cluster(folder, crds=marker.args[0] if marker else None)
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(folder, ignore_errors=True)


class Objects:
    """Objects a test writes with the admin's rights; deleted again at the end of the test."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.namespace = f"t{next(_names)}-{secrets.token_hex(3)}"
        self._made: list[tuple[str, str, str | None, str]] = []
        self.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace}})

    def apply(self, *objects: dict[str, Any]) -> None:
        for obj in objects:
            result = self.api.apply(obj)
            key = (
                obj["apiVersion"],
                obj["kind"],
                result["metadata"].get("namespace"),
                obj["metadata"]["name"],
            )
            if key not in self._made:
                self._made.append(key)

    def delete_all(self) -> None:
        for key in reversed(self._made):
            if key[1] != "Namespace":  # nothing finalises a namespace here: it would stay Terminating
                self.api.delete(*key)


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
