"""WebSocket through the gateway, end to end: real Envoy, echo servers on loopback.

A Service port with ``appProtocol: kubernetes.io/ws`` takes WebSocket upgrades; frames then flow
both ways unchanged, for as long as the session lasts: longer than the request timeout, which
this test sets to one second (Envoy does not apply a route's timeout to an upgraded exchange;
the idle limit, one hour for such ports, still ends sessions of vanished peers). A port without
it does not: Envoy refuses the upgrade, and the backend never sees one. ``kubernetes.io/wss``
with a BackendTLSPolicy is WebSocket over TLS.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import pytest_asyncio
import yaml
from weir_harness import GATEWAY_HEAD, Weir, pid_alive

from weir.testkit import (
    CertAuthority,
    EchoHttpServer,
    EchoIdentity,
    WebSocketClient,
    WebSocketHandshakeError,
    free_port,
    make_ca,
    server_ssl_context,
)
from weir.testkit.websocket import OP_BINARY, OP_TEXT

pytestmark = pytest.mark.asyncio(loop_scope="module")

UPSTREAM_IP = "127.0.0.3"
REQUEST_TIMEOUT_MS = 1000


def service(name: str, port: dict[str, Any], target: int) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"ports": [port]},
        },
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": name,
                "namespace": "default",
                "labels": {"kubernetes.io/service-name": name},
            },
            "addressType": "IPv4",
            "ports": [{"name": port["name"], "port": target}],
            "endpoints": [{"addresses": [UPSTREAM_IP]}],
        },
    ]


@dataclass
class World:
    weir: Weir
    ca: CertAuthority
    servers: dict[str, EchoHttpServer] = field(default_factory=dict)

    async def connect(self, path: str) -> WebSocketClient:
        return await WebSocketClient.connect(
            "127.0.0.1", self.weir.gateway_port, path, host_header="chat.example.test"
        )


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    folder = tmp_path_factory.mktemp("websocket")
    harness = Weir(folder, None, free_port())
    harness.settings = dataclasses.replace(harness.settings, request_timeout_ms=REQUEST_TIMEOUT_MS)
    w = World(harness, make_ca("websocket CA"))
    try:
        for name in ("ws", "plain"):
            w.servers[name] = await EchoHttpServer(EchoIdentity("default", name), host=UPSTREAM_IP).start()
        context = server_ssl_context(w.ca.issue_server_cert("wss.svc.test"), alpn=["http/1.1"])
        w.servers["wss"] = await EchoHttpServer(
            EchoIdentity("default", "wss"), host=UPSTREAM_IP, ssl_context=context
        ).start()
        docs: list[dict[str, Any]] = [
            *service(
                "ws", {"name": "ws", "port": 80, "appProtocol": "kubernetes.io/ws"}, w.servers["ws"].port
            ),
            *service("plain", {"name": "http", "port": 80}, w.servers["plain"].port),
            *service(
                "wss", {"name": "wss", "port": 443, "appProtocol": "kubernetes.io/wss"}, w.servers["wss"].port
            ),
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "ca", "namespace": "default"},
                "data": {"ca.crt": w.ca.cert_pem},
            },
            {
                "apiVersion": "gateway.networking.k8s.io/v1",
                "kind": "BackendTLSPolicy",
                "metadata": {"name": "wss", "namespace": "default"},
                "spec": {
                    "targetRefs": [{"group": "", "kind": "Service", "name": "wss"}],
                    "validation": {
                        "hostname": "wss.svc.test",
                        "caCertificateRefs": [{"group": "", "kind": "ConfigMap", "name": "ca"}],
                    },
                },
            },
            {
                "apiVersion": "gateway.networking.k8s.io/v1",
                "kind": "HTTPRoute",
                "metadata": {"name": "chat", "namespace": "default"},
                "spec": {
                    "parentRefs": [{"name": "gw"}],
                    "hostnames": ["chat.example.test"],
                    "rules": [
                        {
                            "matches": [{"path": {"type": "PathPrefix", "value": f"/{name}"}}],
                            "backendRefs": [{"name": name, "port": port}],
                        }
                        for name, port in (("ws", 80), ("plain", 80), ("wss", 443))
                    ],
                },
            },
        ]
        text = GATEWAY_HEAD.format(port=harness.gateway_port) + "---\n" + yaml.safe_dump_all(docs)
        harness.write("world.yaml", text)
        await harness.start()
        yield w
    finally:
        await harness.stop()
        for server in w.servers.values():
            await server.stop()
        for pid in harness.envoy_pids:
            assert not pid_alive(pid), f"Envoy {pid} survived stop()"


async def test_frames_flow_both_ways_through_the_gateway(world: World) -> None:
    ws = await world.connect("/ws/chat")
    try:
        await ws.send_text("hello")
        frame = await ws.receive()
        assert (frame.opcode, frame.text) == (OP_TEXT, "hello")
        payload = bytes(range(256)) * 300  # 76 800 bytes: several TCP segments, a 64-bit length
        await ws.send_binary(payload)
        frame = await ws.receive()
        assert (frame.opcode, frame.payload) == (OP_BINARY, payload)
    finally:
        await ws.close()
    upgraded = [r for r in world.servers["ws"].requests if r.websocket]
    assert upgraded and upgraded[-1].path == "/ws/chat"


async def test_a_session_outlives_the_request_timeout(world: World) -> None:
    ws = await world.connect("/ws/long")
    try:
        for i in range(3):
            await asyncio.sleep(REQUEST_TIMEOUT_MS / 1000 + 0.2)
            await ws.send_text(f"still here {i}")
            frame = await ws.receive()
            assert (frame.opcode, frame.text) == (OP_TEXT, f"still here {i}"), frame
    finally:
        await ws.close()


async def test_the_client_closing_reaches_the_backend(world: World) -> None:
    ws = await world.connect("/ws/close")
    await ws.send_text("bye")
    assert (await ws.receive()).text == "bye"
    await ws.close()  # waits for the backend's close frame, relayed back by Envoy


async def test_a_port_without_the_app_protocol_refuses_upgrades(world: World) -> None:
    before = len(world.servers["plain"].requests)
    with pytest.raises(WebSocketHandshakeError) as refused:
        await world.connect("/plain/chat")
    assert refused.value.status == 403  # Envoy: upgrade_failed
    assert not any(r.websocket for r in world.servers["plain"].requests[before:])


async def test_plain_requests_to_a_websocket_port_still_work(world: World) -> None:
    async with httpx.AsyncClient(timeout=5) as client:
        response = await client.get(world.weir.url("/ws/plain"), headers={"host": "chat.example.test"})
    assert response.status_code == 200, response.text
    assert response.json()["pod"] == "ws"


async def test_websocket_over_tls_with_a_backend_tls_policy(world: World) -> None:
    ws = await world.connect("/wss/secure")
    try:
        await ws.send_text("secret")
        frame = await ws.receive()
        assert (frame.opcode, frame.text) == (OP_TEXT, "secret")
    finally:
        await ws.close()
    [upgrade] = [r for r in world.servers["wss"].requests if r.websocket]
    assert upgrade.tls is not None and upgrade.tls.server_name == "wss.svc.test"
