"""Faults of the process around the data path, through real Envoy (issue 13, items 6-10).

A port that is busy when a listener is added, a local process draining
Envoy's listeners, SIGTERM under load, SIGKILL of weir or of Envoy under
load: each must cost as little traffic as the design allows, and status
must say what is going on meanwhile. Traffic goes to 127.0.0.0/8 only.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from weir_harness import Weir, eventually, pid_alive

from weir.testkit import EchoHttpServer, EchoIdentity, free_port

pytestmark = pytest.mark.timeout(90)


def gateway_manifests(port: int, backend_port: int, *, name: str = "gw") -> str:
    """A Gateway on ``port`` with one HTTPRoute to one Service endpoint on 127.0.0.1:``backend_port``."""
    return f"""\
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {{name: weir}}
spec: {{controllerName: weir.dev/gateway-controller}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: {name}, namespace: default}}
spec:
  gatewayClassName: weir
  listeners: [{{name: http, port: {port}, protocol: HTTP}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: web, namespace: default}}
spec:
  parentRefs: [{{name: {name}}}]
  rules:
  - backendRefs: [{{name: echo, port: {backend_port}}}]
---
apiVersion: v1
kind: Service
metadata: {{name: echo, namespace: default}}
spec: {{ports: [{{name: http, port: {backend_port}}}]}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: echo-1, namespace: default, labels: {{kubernetes.io/service-name: echo}}}}
addressType: IPv4
ports: [{{name: http, port: {backend_port}}}]
endpoints: [{{addresses: [127.0.0.1]}}]
"""


@pytest.fixture
async def echo() -> AsyncIterator[EchoHttpServer]:
    async with EchoHttpServer(EchoIdentity("default", "echo-0", "echo")) as server:
        yield server


@pytest.fixture
async def weir(tmp_path: Path) -> AsyncIterator[Weir]:
    folder = tmp_path / "manifests"
    folder.mkdir()
    harness = Weir(folder, None, free_port())
    try:
        yield harness
    finally:
        await harness.stop()
        for pid in harness.envoy_pids:
            assert not pid_alive(pid), f"Envoy {pid} survived stop()"


def programmed(weir: Weir, name: str = "gw") -> dict[str, Any]:
    status = weir.status_of("Gateway", "default", name)
    return next(c for c in status["conditions"] if c["type"] == "Programmed")


async def answers(url: str) -> bool:
    try:
        async with httpx.AsyncClient(timeout=1) as client:
            return (await client.get(url)).status_code == 200
    except httpx.HTTPError:
        return False


# --------------------------------------------------------------------------
# Item 6: a listener rejected because its port was busy
# --------------------------------------------------------------------------


async def test_a_listener_refused_for_a_busy_port_recovers_once_the_port_is_free(
    weir: Weir, echo: EchoHttpServer
) -> None:
    """Before: the rejected listener was never tried again (20 s after the port was free it was
    still down, until an unrelated edit). Now Envoy is asked again with back-off, the Gateway says
    Programmed=False meanwhile with Envoy's reason, and True once it serves."""
    blocker = socket.socket()
    blocker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    blocker.bind(("127.0.0.1", weir.gateway_port))
    blocker.listen()
    try:
        weir.write("web.yaml", gateway_manifests(weir.gateway_port, echo.port))
        await weir.start(wait_ready=False)

        def refused() -> dict[str, Any] | None:
            try:
                cond = programmed(weir)
            except KeyError:
                return None
            return cond if cond["status"] == "False" and cond["reason"] == "Invalid" else None

        cond, _ = await eventually(refused, timeout=15)
        assert f"cannot bind '127.0.0.1:{weir.gateway_port}'" in cond["message"]
        assert "Address already in use" in cond["message"]
        assert "tries again" in cond["message"]
    finally:
        blocker.close()
    _, took = await eventually(lambda: answers(weir.url("/")), timeout=15, interval=0.1)
    print(f"busy port freed -> served: {took * 1000:.0f} ms")
    cond, _ = await eventually(lambda: programmed(weir)["status"] == "True" and programmed(weir), timeout=5)
    assert cond["reason"] == "Programmed"
