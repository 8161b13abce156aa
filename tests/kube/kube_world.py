"""The world of tests/kube: weir's CRDs and deploy/'s RBAC on a :class:`~envtest.Cluster`, and
the objects a test writes (deleted again after it)."""

from __future__ import annotations

import itertools
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from envtest import ASSETS_HINT, Api, Cluster, assets, documents

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
#: deploy/'s manifests that make weir's identity and its rights (not the Deployment: no Pods run).
RBAC_FILES = ("namespace.yaml", "serviceaccount.yaml", "clusterrole.yaml", "leader-election.yaml")
#: The namespace and Lease deploy/ grants weir.
LEASE_NAMESPACE = "weir-system"
LEASE_NAME = "weir-leader"

_names = itertools.count(1)


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


def xbackend_crd(shape: str) -> dict[str, Any]:
    """XBackend's CRD from ``weir crds --xbackend SHAPE`` (``v1.6`` or ``main``), run as a user would."""
    out = subprocess.run(
        [sys.executable, "-c", "from weir.cli import main; main()", "crds", "--xbackend", shape],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    found = [doc for doc in yaml.safe_load_all(out) if doc and doc["spec"]["names"]["kind"] == "XBackend"]
    assert len(found) == 1, f"weir crds --xbackend {shape} printed {len(found)} XBackend CRDs"
    return found[0]


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
