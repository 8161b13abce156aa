"""XBackend type ``EndpointSelector`` (upstream main's shape) through real Envoy, with Pods from files.

Four "Pods" (echo servers over TLS on loopback addresses): two ready ones in
the XBackend's namespace with its labels, one of them on the address the
egress guard denies (the guard is for external hostnames, not for Pods); a
ready one with the same labels in another namespace and an unready one in
the same namespace, which must never get a request. The XBackend speaks
HTTP/1.1 over TLS, verified against a private CA with
``tls.validation.hostname`` as SNI. A Pod that stops being ready leaves the
rotation when its file changes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import pytest_asyncio
import yaml
from weir_harness import FORBIDDEN_IP, GATEWAY_HEAD, Weir, eventually, pid_alive

from weir.testkit import EchoHttpServer, EchoIdentity, free_port, make_ca, server_ssl_context

pytestmark = pytest.mark.asyncio(loop_scope="module")

POD_NAME = "web.pods.test"  # the name the Pods' certificate carries: validation.hostname
PODS = {  # name: (namespace, address, ready)
    "web-1": ("default", "127.0.0.8", True),
    "web-2": ("default", FORBIDDEN_IP, True),
    "web-elsewhere": ("other", "127.0.0.9", True),
    "web-starting": ("default", "127.0.0.10", False),
}


def pod(name: str, namespace: str, address: str, ready: bool) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "web", "tier": "front"}},
        "status": {
            "phase": "Running",
            "podIP": address,
            "podIPs": [{"ip": address}],
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


@dataclass
class World:
    weir: Weir
    servers: dict[str, EchoHttpServer]
    port: int

    async def answers(self, count: int) -> Counter[str]:
        seen: Counter[str] = Counter()
        async with httpx.AsyncClient(timeout=5) as client:
            for i in range(count):
                response = await client.get(
                    self.weir.url(f"/pods/{i}"), headers={"host": "pods.example.test"}
                )
                assert response.status_code == 200, response.text
                seen[response.json()["pod"]] += 1
        return seen

    def write_pods(self, pods: dict[str, tuple[str, str, bool]]) -> None:
        self.weir.write("pods.yaml", yaml.safe_dump_all([pod(n, *spec) for n, spec in pods.items()]))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    folder = tmp_path_factory.mktemp("endpoint-selector") / "manifests"
    folder.mkdir()
    ca = make_ca("pods CA")
    context = server_ssl_context(ca.issue_server_cert(POD_NAME), alpn=["http/1.1"])
    port = free_port(PODS["web-1"][1])
    harness = Weir(folder, None, free_port())
    servers: dict[str, EchoHttpServer] = {}
    w = World(harness, servers, port)
    try:
        for name, (namespace, address, _) in PODS.items():
            servers[name] = await EchoHttpServer(
                EchoIdentity(namespace, name), host=address, port=port, ssl_context=context
            ).start()
        docs: list[dict[str, Any]] = [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "pods-ca", "namespace": "default"},
                "data": {"ca.crt": ca.cert_pem},
            },
            {
                "apiVersion": "gateway.networking.x-k8s.io/v1alpha1",
                "kind": "XBackend",
                "metadata": {"name": "web", "namespace": "default"},
                "spec": {
                    "type": "EndpointSelector",
                    "endpointSelector": {"matchLabels": {"app": "web", "tier": "front"}},
                    "port": {"number": port},
                    "protocol": "HTTP11",
                    "tls": {
                        "mode": "ServerOnly",
                        "validation": {
                            "hostname": POD_NAME,
                            "caCertificateRefs": [{"group": "", "kind": "ConfigMap", "name": "pods-ca"}],
                        },
                    },
                },
            },
            {
                "apiVersion": "gateway.networking.k8s.io/v1",
                "kind": "HTTPRoute",
                "metadata": {"name": "pods", "namespace": "default"},
                "spec": {
                    "parentRefs": [{"name": "gw"}],
                    "hostnames": ["pods.example.test"],
                    "rules": [
                        {
                            "matches": [{"path": {"type": "PathPrefix", "value": "/pods"}}],
                            "backendRefs": [
                                {"group": "gateway.networking.x-k8s.io", "kind": "XBackend", "name": "web"}
                            ],
                        }
                    ],
                },
            },
        ]
        harness.write(
            "world.yaml", GATEWAY_HEAD.format(port=harness.gateway_port) + "---\n" + yaml.safe_dump_all(docs)
        )
        w.write_pods(PODS)
        await harness.start()
        yield w
    finally:
        await harness.stop()
        for server in servers.values():
            await server.stop()
        for pid in harness.envoy_pids:
            assert not pid_alive(pid), f"Envoy {pid} survived stop()"


async def test_the_ready_pods_of_the_namespace_with_the_labels_answer(world: World) -> None:
    seen = await world.answers(40)
    assert set(seen) == {"web-1", "web-2"}, seen  # web-2 is on the guard's denied address: no guard
    for name in ("web-elsewhere", "web-starting"):
        assert world.servers[name].requests == [], name
    request = world.servers["web-1"].requests[-1]
    assert request.tls is not None and request.tls.server_name == POD_NAME
    assert request.host == "pods.example.test"  # no external hostname: the client's Host is kept
    assert request.proto == "HTTP/1.1"


async def test_status_is_written_as_ancestors(world: World) -> None:
    status = world.weir.status_of("XBackend", "default", "web")
    assert "parents" not in status
    [entry] = status["ancestors"]
    accepted = next(c for c in entry["conditions"] if c["type"] == "Accepted")
    assert (accepted["status"], accepted["reason"]) == ("True", "Accepted"), accepted
    assert f"uses TLS with SNI {POD_NAME}" in accepted["message"]


async def test_a_pod_that_stops_being_ready_leaves(world: World) -> None:
    changed = {**PODS, "web-2": (*PODS["web-2"][:2], False)}
    world.write_pods(changed)

    async def only_web_1() -> bool:
        return set(await world.answers(10)) == {"web-1"}

    await eventually(only_web_1, timeout=10, interval=0.2)
    world.write_pods(PODS)

    async def both_again() -> bool:
        return set(await world.answers(20)) == {"web-1", "web-2"}

    await eventually(both_again, timeout=10, interval=0.2)
