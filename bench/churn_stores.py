"""Where bench/churn.py writes its routes: a folder for ``weir run -f`` or a real API server.

The manifests (a Gateway from controlplane.py, Service ``echo``, one
HTTPRoute per route answering ``X-Version``), what the benchmark remembers of
each churned route, and the two stores that write them: :class:`FilesStore`
(atomic or in-place rewrites) and :class:`KubeStore` (server-side apply
through tests/kube's envtest).
"""

from __future__ import annotations

import asyncio
import random
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from controlplane import write_atomically
from controlplane_shapes import GATEWAY_CLASS, gateway_yaml

REPO = Path(__file__).resolve().parent.parent
ECHO_IP = "127.0.0.2"
NAMESPACE = "default"
#: The XBackend's hostname in Kubernetes mode (the API server refuses loopback EndpointSlices).
ECHO_HOST = "echo.churn.test"


# ----------------------------------------------------------------------------- manifests


def base_yaml(gateway_port: int, echo_port: int) -> str:
    """controlplane's GatewayClass and Gateway ``bench`` (one listener), and Service ``echo`` at 127.0.0.2."""
    return (
        GATEWAY_CLASS
        + "---\n"
        + gateway_yaml("bench", [f"{{name: l0, port: {gateway_port}, protocol: HTTP}}"])
        + f"""\
---
apiVersion: v1
kind: Service
metadata: {{name: echo, namespace: {NAMESPACE}}}
spec: {{ports: [{{name: http, port: {echo_port}}}]}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: echo-1, namespace: {NAMESPACE}, labels: {{kubernetes.io/service-name: echo}}}}
addressType: IPv4
ports: [{{name: http, port: {echo_port}}}]
endpoints: [{{addresses: [{ECHO_IP}]}}]
"""
    )


def route_doc(name: str, prefix: str, version: int, backend: dict[str, Any]) -> dict[str, Any]:
    """HTTPRoute ``name`` for ``/<prefix>/`` answering ``X-Version: <version>`` from ``backend``."""
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "parentRefs": [{"name": "bench"}],
            "rules": [
                {
                    "matches": [{"path": {"type": "PathPrefix", "value": f"/{prefix}/"}}],
                    "filters": [
                        {
                            "type": "ResponseHeaderModifier",
                            "responseHeaderModifier": {"set": [{"name": "X-Version", "value": str(version)}]},
                        }
                    ],
                    "backendRefs": [backend],
                }
            ],
        },
    }


def start_cluster(folder: Path) -> tuple[Any, Path]:
    """A real kube-apiserver and etcd (tests/kube's envtest) with weir's CRDs and deploy/'s RBAC;
    the cluster and a kubeconfig with weir's service account's rights."""
    sys.path.insert(0, str(REPO / "tests" / "kube"))
    from envtest import ASSETS_HINT, WEIR_TOKEN, assets
    from kube_world import LEASE_NAMESPACE
    from kube_world import start_cluster as start

    if assets() is None:
        raise SystemExit(ASSETS_HINT)
    folder.mkdir(parents=True)
    cluster = start(folder, crds=None)
    return cluster, cluster.kubeconfig("weir", WEIR_TOKEN, namespace=LEASE_NAMESPACE)


@dataclass
class Route:
    """What the benchmark wrote for one churned route and what weir reported served."""

    name: str  # also the path prefix, /<name>/
    obj: str = ""  # the HTTPRoute's name (Kubernetes mode: a new one after each deletion)
    version: int = 0  # the last version written (a deletion too)
    present: bool = False  # whether the last write defines the route
    busy: bool = False  # a write in flight
    written_at: dict[int, float] = field(default_factory=dict)  # version -> write finished
    #: (object name, metadata.generation) -> version, to read observedGeneration back
    generations: dict[tuple[str, int], int] = field(default_factory=dict)
    served: int = 0  # the newest version reported served (0: none yet)
    served_present: bool = False
    last_delete: int = 0  # the newest version that was a deletion


@dataclass
class Ops:
    """The churn's operations, by kind and by way of writing."""

    adds: int = 0
    edits: int = 0
    deletes: int = 0
    atomic: int = 0
    in_place: int = 0
    served_latency: list[float] = field(default_factory=list)  # write finished -> reported served


# ----------------------------------------------------------------------------- where routes are written


class FilesStore:
    """A folder ``weir run -f`` serves: one file per churned route, written atomically or in place.

    ``metadata.generation`` is the version: files have no API server to count generations.
    """

    kind = "files"

    def __init__(self, folder: Path, echo_port: int, rng: random.Random, in_place: float, gap: float) -> None:
        self.folder, self.rng, self.in_place, self.gap = folder, rng, in_place, gap
        self.backend = {"name": "echo", "port": echo_port}
        self.echo_port = echo_port

    def path(self, route: Route) -> Path:
        return self.folder / "churn" / f"{route.name}.yaml"

    def doc(self, name: str, prefix: str, version: int) -> dict[str, Any]:
        doc = route_doc(name, prefix, version, self.backend)
        doc["metadata"]["generation"] = version
        return doc

    def setup(self, gateway_port: int, stable: int, initial: list[Route]) -> None:
        (self.folder / "churn").mkdir(parents=True)
        (self.folder / "base.yaml").write_text(base_yaml(gateway_port, self.echo_port))
        docs = [self.doc(f"s{i}", f"s{i}", 1) for i in range(stable)]
        (self.folder / "stable.yaml").write_text(yaml.safe_dump_all(docs))
        for route in initial:
            self.path(route).write_text(yaml.safe_dump(self.doc(route.name, route.name, 1)))
            route.obj = route.name
            route.generations[(route.name, 1)] = 1

    async def write(self, route: Route, version: int, ops: Ops) -> None:
        route.obj = route.name
        text = yaml.safe_dump(self.doc(route.name, route.name, version))
        path = self.path(route)
        if self.rng.random() < self.in_place:
            ops.in_place += 1
            with path.open("w") as fh:  # truncates, as cp and > do
                fh.flush()
                await asyncio.sleep(self.gap)
                fh.write(text)
        else:
            ops.atomic += 1
            write_atomically(path, text)
        route.generations[(route.name, version)] = version

    async def delete(self, route: Route) -> None:
        self.path(route).unlink()


class KubeStore:
    """A namespace of a real API server (tests/kube's envtest) that ``weir run --kubernetes`` watches.

    Writes are server-side applies, one at a time, made in a thread. A route
    deleted and added again gets a new object name (a new object starts at
    generation 1 again), so that ``observedGeneration`` names one write.
    """

    kind = "kubernetes"

    def __init__(self, api: Any, echo_port: int) -> None:
        self.api, self.echo_port = api, echo_port
        self.backend = {"group": "gateway.networking.x-k8s.io", "kind": "XBackend", "name": "echo"}
        self.incarnations: Counter[str] = Counter()
        self.lock = asyncio.Lock()

    def setup(self, gateway_port: int, stable: int, initial: list[Route]) -> None:
        for doc in yaml.safe_load_all(base_yaml(gateway_port, self.echo_port)):
            if doc["kind"] in ("GatewayClass", "Gateway"):  # the Service's loopback slice would be refused
                self.api.apply(doc)
        self.api.apply(
            {
                "apiVersion": "gateway.networking.x-k8s.io/v1alpha1",
                "kind": "XBackend",
                "metadata": {"name": "echo", "namespace": NAMESPACE},
                "spec": {
                    "type": "ExternalHostname",
                    "externalHostname": {"hostname": ECHO_HOST},
                    "port": {"port": self.echo_port},
                },
            }
        )
        for i in range(stable):
            self.api.apply(route_doc(f"s{i}", f"s{i}", 1, self.backend))
        for route in initial:
            self._apply(route, 1)

    def _apply(self, route: Route, version: int) -> None:
        if not route.present:
            self.incarnations[route.name] += 1
        route.obj = f"{route.name}-{self.incarnations[route.name]}"
        result = self.api.apply(route_doc(route.obj, route.name, version, self.backend))
        route.generations[(route.obj, int(result["metadata"]["generation"]))] = version

    async def write(self, route: Route, version: int, ops: Ops) -> None:
        ops.atomic += 1
        async with self.lock:
            await asyncio.to_thread(self._apply, route, version)

    async def delete(self, route: Route) -> None:
        async with self.lock:
            await asyncio.to_thread(
                self.api.delete, "gateway.networking.k8s.io/v1", "HTTPRoute", NAMESPACE, route.obj
            )
