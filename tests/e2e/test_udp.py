"""UDPRoute end to end: real Envoy, a UDP echo server on loopback behind a Service.

A Gateway listener of protocol UDP relays each client's datagrams to the
Service port of its UDPRoute and the answers back; the listener's status is
settled from Envoy's list of active listeners (a UDP socket takes no
connection to probe).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from weir_harness import Weir, eventually, stopped_after

from weir.testkit import free_port, require_loopback

pytestmark = pytest.mark.timeout(60)

BACKEND_IP = "127.0.0.3"


class _Echo(asyncio.DatagramProtocol):
    """Answers every datagram with ``echo:`` + its payload; remembers who sent what."""

    def __init__(self) -> None:
        self.transport: asyncio.DatagramTransport | None = None
        self.seen: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a datagram endpoint's transport

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.seen.append(data)
        assert self.transport is not None
        self.transport.sendto(b"echo:" + data, addr)


@pytest.fixture
async def echo() -> AsyncIterator[tuple[_Echo, int]]:
    require_loopback(BACKEND_IP, what="UDP echo")
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.create_datagram_endpoint(_Echo, local_addr=(BACKEND_IP, 0))
    port = transport.get_extra_info("sockname")[1]
    try:
        yield protocol, port
    finally:
        transport.close()


@pytest.fixture
async def weir(tmp_path: Path) -> AsyncIterator[Weir]:
    folder = tmp_path / "manifests"
    folder.mkdir()
    async with stopped_after(Weir(folder, None, free_port())) as harness:
        yield harness


def udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def manifests(listener_port: int, backend_port: int, *, service_protocol: str = "UDP") -> str:
    return f"""\
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {{name: weir}}
spec: {{controllerName: weir.dev/gateway-controller}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw, namespace: default}}
spec:
  gatewayClassName: weir
  listeners: [{{name: dns, port: {listener_port}, protocol: UDP}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: UDPRoute
metadata: {{name: dns, namespace: default}}
spec:
  parentRefs: [{{name: gw, sectionName: dns}}]
  rules: [{{backendRefs: [{{name: resolver, port: 53}}]}}]
---
apiVersion: v1
kind: Service
metadata: {{name: resolver, namespace: default}}
spec:
  ports: [{{name: dns, port: 53, protocol: {service_protocol}}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: resolver-1, namespace: default, labels: {{kubernetes.io/service-name: resolver}}}}
addressType: IPv4
ports: [{{name: dns, port: {backend_port}, protocol: {service_protocol}}}]
endpoints: [{{addresses: [{BACKEND_IP}]}}]
"""


async def exchange(port: int, payload: bytes, timeout: float = 1.0) -> bytes | None:
    """Send one datagram to the gateway and wait for one answer (``None``: none came)."""
    loop = asyncio.get_running_loop()
    answers: asyncio.Queue[bytes] = asyncio.Queue()

    class Client(asyncio.DatagramProtocol):
        def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
            answers.put_nowait(data)

    transport, _ = await loop.create_datagram_endpoint(Client, remote_addr=("127.0.0.1", port))
    try:
        transport.sendto(payload)
        with contextlib.suppress(TimeoutError):
            return await asyncio.wait_for(answers.get(), timeout)
        return None
    finally:
        transport.close()


def listener_conditions(weir: Weir) -> dict[str, str]:
    [listener] = weir.status_of("Gateway", "default", "gw")["listeners"]
    return {c["type"]: c["status"] for c in listener["conditions"]}


async def test_datagrams_reach_the_service_and_answers_come_back(weir: Weir, echo: tuple[_Echo, int]) -> None:
    protocol, backend_port = echo
    port = udp_port()
    weir.write("udp.yaml", manifests(port, backend_port))
    await weir.start()
    answer, _ = await eventually(lambda: exchange(port, b"hello", timeout=0.3), timeout=10)
    assert answer == b"echo:hello"
    assert await exchange(port, b"second") == b"echo:second"
    assert b"hello" in protocol.seen
    await eventually(lambda: listener_conditions(weir).get("Programmed") == "True", timeout=5)
    route = weir.status_of("UDPRoute", "default", "dns")["parents"][0]["conditions"]
    assert {c["type"]: c["status"] for c in route} == {"Accepted": "True", "ResolvedRefs": "True"}


async def test_a_tcp_only_service_port_is_not_used_for_udp(weir: Weir, echo: tuple[_Echo, int]) -> None:
    """The Service port of number 53 is TCP: a UDPRoute cannot use it (BackendNotFound) and the
    listener drops every datagram rather than send it anywhere."""
    protocol, backend_port = echo
    port = udp_port()
    weir.write("udp.yaml", manifests(port, backend_port, service_protocol="TCP"))
    await weir.start()
    route = weir.status_of("UDPRoute", "default", "dns")["parents"][0]["conditions"]
    resolved = next(c for c in route if c["type"] == "ResolvedRefs")
    assert (resolved["status"], resolved["reason"]) == ("False", "BackendNotFound")
    assert "no UDP port 53" in resolved["message"]
    assert await exchange(port, b"lost", timeout=0.5) is None
    assert protocol.seen == []
