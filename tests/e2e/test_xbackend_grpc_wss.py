"""XBackend protocols ``GRPC`` and ``WSS`` (upstream main's shape), end to end through real Envoy.

- ``GRPC``: a real gRPC server (``grpcio``, TLS with ALPN ``h2``, as gRPC
  requires) behind an XBackend, called by a real gRPC client through the
  gateway (h2c to Envoy): messages, initial metadata and trailers pass; the
  server's error status and message reach the client; a call's deadline
  (``grpc-timeout``) is enforced by Envoy towards the upstream; a streaming
  call outlives the request timeout (set to one second here); an upstream
  that does not answer is ``UNAVAILABLE``, a gRPC status, not an HTTP error.
- ``WSS``: WebSocket over TLS to the upstream: the upgrade passes through
  Envoy, frames flow both ways, a session outlives the request timeout;
  ``WSS`` with ``tls.mode: None`` (which main's schema lets through) is
  refused in status and never sent in plaintext.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import httpx
import pytest
import pytest_asyncio
import yaml
from hypercorn.asyncio import serve as hypercorn_serve
from hypercorn.config import Config as HypercornConfig
from weir_harness import GATEWAY_HEAD, Weir, pid_alive

from weir.testkit import (
    CertAuthority,
    DnsStub,
    EchoHttpServer,
    EchoIdentity,
    WebSocketClient,
    free_port,
    make_ca,
    require_loopback,
    server_ssl_context,
)
from weir.testkit.websocket import OP_TEXT

pytestmark = pytest.mark.asyncio(loop_scope="module")

UPSTREAM_IP = "127.0.0.7"
GRPC_HOST = "grpc.upstream.test"
WSS_HOST = "wss.upstream.test"
DEAD_HOST = "dead.upstream.test"
SLUGGISH_HOST = "sluggish.upstream.test"
SERVICE = "weir.test.Widgets"
REQUEST_TIMEOUT_MS = 1000
TICK_S = 0.6


class GrpcUpstream:
    """A gRPC server over TLS on a loopback address, bytes in and out (no protobuf needed).

    ``Echo`` replies with the call's metadata (JSON) and sends initial
    metadata and a trailer; ``Fail`` ends with ``NOT_FOUND``; ``Slow`` takes
    five seconds and records when it was cancelled; ``Ticks`` streams three
    messages :data:`TICK_S` apart.
    """

    def __init__(self, host: str, cert_pem: str, key_pem: str) -> None:
        self.host = require_loopback(host, what="GrpcUpstream")
        self._credentials = grpc.ssl_server_credentials([(key_pem.encode(), cert_pem.encode())])
        self.port = 0
        self.cancelled: list[float] = []
        self._server: grpc.aio.Server | None = None

    async def start(self) -> GrpcUpstream:
        server = grpc.aio.server()
        handlers = {
            "Echo": grpc.unary_unary_rpc_method_handler(self._echo),
            "Fail": grpc.unary_unary_rpc_method_handler(self._fail),
            "Slow": grpc.unary_unary_rpc_method_handler(self._slow),
            "Ticks": grpc.unary_stream_rpc_method_handler(self._ticks),
        }
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
        self.port = server.add_secure_port(f"{self.host}:0", self._credentials)
        await server.start()
        self._server = server
        return self

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(grace=None)
            self._server = None

    async def _echo(self, request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
        await context.send_initial_metadata((("x-initial", "hello"),))
        context.set_trailing_metadata((("x-trailer", "goodbye"),))
        metadata = {k: v for k, v in context.invocation_metadata() or () if isinstance(v, str)}
        return json.dumps({"metadata": metadata, "request": request.decode()}).encode()

    async def _fail(self, request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
        await context.abort(grpc.StatusCode.NOT_FOUND, "no widget named " + request.decode())
        raise AssertionError("abort returns no more")

    async def _slow(self, request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            self.cancelled.append(time.monotonic())
            raise
        return b"late"

    async def _ticks(
        self, request: bytes, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[bytes]:
        for i in range(3):
            await asyncio.sleep(TICK_S)
            yield f"tick {i}".encode()


async def sluggish_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """An HTTP/2 "gRPC server" that ignores ``grpc-timeout``: every call takes five seconds."""
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    await asyncio.sleep(5)
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/grpc")]}
    )
    await send({"type": "http.response.body", "body": b"\x00\x00\x00\x00\x00"})


@contextlib.asynccontextmanager
async def sluggish_server(ca: CertAuthority, folder: Path) -> AsyncIterator[int]:
    """:func:`sluggish_app` over TLS (ALPN h2) on :data:`UPSTREAM_IP`; yields its port."""
    port = free_port(UPSTREAM_IP)
    files = ca.issue_server_cert(SLUGGISH_HOST).write(folder, "sluggish")
    config = HypercornConfig()
    config.bind = [f"{UPSTREAM_IP}:{port}"]
    config.certfile, config.keyfile = str(files.cert), str(files.key)
    config.alpn_protocols = ["h2"]
    config.accesslog = None
    config.graceful_timeout = 1
    stop = asyncio.Event()
    task = asyncio.create_task(hypercorn_serve(sluggish_app, config, shutdown_trigger=stop.wait))  # type: ignore[arg-type]
    try:
        for _ in range(100):
            with contextlib.suppress(OSError):
                _, writer = await asyncio.open_connection(UPSTREAM_IP, port)
                writer.close()
                break
            await asyncio.sleep(0.05)
        yield port
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


def xbackend(name: str, hostname: str, port: int, protocol: str, tls: dict[str, Any]) -> dict[str, Any]:
    """An XBackend in upstream main's shape (``port.number``)."""
    return {
        "apiVersion": "gateway.networking.x-k8s.io/v1alpha1",
        "kind": "XBackend",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "type": "ExternalHostname",
            "externalHostname": {"hostname": hostname},
            "port": {"number": port},
            "protocol": protocol,
            "tls": tls,
        },
    }


def verified(hostname: str) -> dict[str, Any]:
    return {
        "mode": "ServerOnly",
        "validation": {
            "hostname": hostname,
            "caCertificateRefs": [{"group": "", "kind": "ConfigMap", "name": "ca"}],
        },
    }


def http_route(name: str, hostname: str, rules: list[tuple[str, str]]) -> dict[str, Any]:
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "parentRefs": [{"name": "gw"}],
            "hostnames": [hostname],
            "rules": [
                {
                    "matches": [{"path": {"type": "PathPrefix", "value": prefix}}],
                    "backendRefs": [
                        {"group": "gateway.networking.x-k8s.io", "kind": "XBackend", "name": backend}
                    ],
                }
                for prefix, backend in rules
            ],
        },
    }


@dataclass
class World:
    weir: Weir
    ca: CertAuthority
    grpc_server: GrpcUpstream
    wss_server: EchoHttpServer
    closed: list[Any] = field(default_factory=list)

    def channel(self, authority: str) -> grpc.aio.Channel:
        return grpc.aio.insecure_channel(
            f"127.0.0.1:{self.weir.gateway_port}", options=[("grpc.default_authority", authority)]
        )

    async def connect(self, path: str) -> WebSocketClient:
        return await WebSocketClient.connect(
            "127.0.0.1", self.weir.gateway_port, path, host_header="chat.test"
        )


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    folder = tmp_path_factory.mktemp("grpc-wss") / "manifests"
    folder.mkdir()
    ca = make_ca("grpc and wss CA")
    async with DnsStub() as dns, sluggish_server(ca, folder.parent) as sluggish_port:
        harness = Weir(folder, dns, free_port())
        harness.settings = dataclasses.replace(harness.settings, request_timeout_ms=REQUEST_TIMEOUT_MS)
        cert = ca.issue_server_cert(GRPC_HOST)
        grpc_server = await GrpcUpstream(UPSTREAM_IP, cert.chain_pem, cert.key_pem).start()
        context = server_ssl_context(ca.issue_server_cert(WSS_HOST), alpn=["http/1.1"])
        wss_server = await EchoHttpServer(
            EchoIdentity("default", "wss"), host=UPSTREAM_IP, ssl_context=context
        ).start()
        w = World(harness, ca, grpc_server, wss_server)
        try:
            for host in (GRPC_HOST, WSS_HOST, DEAD_HOST, SLUGGISH_HOST):
                dns.set(host, [UPSTREAM_IP])
            docs: list[dict[str, Any]] = [
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": "ca", "namespace": "default"},
                    "data": {"ca.crt": ca.cert_pem},
                },
                xbackend("widgets", GRPC_HOST, grpc_server.port, "GRPC", verified(GRPC_HOST)),
                # Nothing listens on this port: calls to it must end with a gRPC status.
                xbackend("dead", DEAD_HOST, free_port(UPSTREAM_IP), "GRPC", {"mode": "None"}),
                xbackend("sluggish", SLUGGISH_HOST, sluggish_port, "GRPC", verified(SLUGGISH_HOST)),
                xbackend("chat", WSS_HOST, wss_server.port, "WSS", verified(WSS_HOST)),
                xbackend("chat-plain", WSS_HOST, wss_server.port, "WSS", {"mode": "None"}),
                http_route("widgets", "widgets.test", [("/", "widgets")]),
                http_route("dead", "dead.test", [("/", "dead")]),
                http_route("sluggish", "sluggish.test", [("/", "sluggish")]),
                http_route("chat", "chat.test", [("/secure", "chat"), ("/plain", "chat-plain")]),
            ]
            text = GATEWAY_HEAD.format(port=harness.gateway_port) + "---\n" + yaml.safe_dump_all(docs)
            harness.write("world.yaml", text)
            await harness.start()
            yield w
        finally:
            await harness.stop()
            await grpc_server.stop()
            await wss_server.stop()
            for pid in harness.envoy_pids:
                assert not pid_alive(pid), f"Envoy {pid} survived stop()"


# --------------------------------------------------------------------------- GRPC


async def test_grpc_call_with_metadata_and_trailers(world: World) -> None:
    async with world.channel("widgets.test") as channel:
        call = channel.unary_unary(f"/{SERVICE}/Echo")(
            b"widget-1", metadata=(("x-caller", "e2e"),), timeout=5
        )
        reply = json.loads(await call)
        initial = dict(await call.initial_metadata())
        trailing = dict(await call.trailing_metadata())
        assert await call.code() == grpc.StatusCode.OK
    assert reply["request"] == "widget-1"
    assert reply["metadata"]["x-caller"] == "e2e"
    assert initial["x-initial"] == "hello"
    assert trailing["x-trailer"] == "goodbye"


async def test_grpc_error_status_and_message_reach_the_client(world: World) -> None:
    async with world.channel("widgets.test") as channel:
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            await channel.unary_unary(f"/{SERVICE}/Fail")(b"sprocket", timeout=5)
    assert failed.value.code() == grpc.StatusCode.NOT_FOUND
    assert failed.value.details() == "no widget named sprocket"


async def grpc_call_with_deadline(world: World, host: str, timeout: str) -> httpx.Response:
    """A unary call to ``Slow`` carrying ``grpc-timeout`` and no client-side deadline (raw HTTP/2)."""
    async with httpx.AsyncClient(http1=False, http2=True, timeout=10) as client:
        return await client.post(
            world.weir.url(f"/{SERVICE}/Slow"),
            headers={
                "host": host,
                "content-type": "application/grpc",
                "te": "trailers",
                "grpc-timeout": timeout,
            },
            content=b"\x00\x00\x00\x00\x00",  # one empty, uncompressed message
        )


DEADLINE_EXCEEDED = str(grpc.StatusCode.DEADLINE_EXCEEDED.value[0])


async def test_grpc_deadline_reaches_the_upstream(world: World) -> None:
    """The gRPC server gets the call's deadline (``grpc-timeout``), ends it there, and says so."""
    before = len(world.grpc_server.cancelled)
    started = time.monotonic()
    response = await grpc_call_with_deadline(world, "widgets.test", "300m")
    assert time.monotonic() - started < 2
    assert response.headers["grpc-status"] == DEADLINE_EXCEEDED
    for _ in range(50):  # the upstream call is cancelled, not left running
        if len(world.grpc_server.cancelled) > before:
            break
        await asyncio.sleep(0.1)
    assert len(world.grpc_server.cancelled) > before


async def test_grpc_deadline_is_enforced_by_the_gateway(world: World) -> None:
    """Against an upstream that ignores ``grpc-timeout`` (five seconds a call), Envoy ends the call at
    its deadline with ``DEADLINE_EXCEEDED``: routes to gRPC backends have no request timeout, so
    without honouring the header the call would wait the five seconds."""
    started = time.monotonic()
    response = await grpc_call_with_deadline(world, "sluggish.test", "300m")
    elapsed = time.monotonic() - started
    assert elapsed < 2, elapsed
    assert response.status_code == 200  # gRPC: the status is in grpc-status
    assert response.headers["grpc-status"] == DEADLINE_EXCEEDED


async def test_grpc_stream_outlives_the_request_timeout(world: World) -> None:
    async with world.channel("widgets.test") as channel:
        call = channel.unary_stream(f"/{SERVICE}/Ticks")(b"", timeout=10)
        ticks = [bytes(message).decode() async for message in call]
    assert ticks == ["tick 0", "tick 1", "tick 2"]  # 1.8 s, past the 1 s request timeout


async def test_grpc_upstream_down_is_unavailable(world: World) -> None:
    async with world.channel("dead.test") as channel:
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            await channel.unary_unary(f"/{SERVICE}/Echo")(b"", timeout=5)
    assert failed.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_grpc_xbackend_status_is_written_as_ancestors(world: World) -> None:
    status = world.weir.status_of("XBackend", "default", "widgets")
    assert "parents" not in status
    [entry] = status["ancestors"]
    assert entry["ancestorRef"]["name"] == "gw"
    accepted = next(c for c in entry["conditions"] if c["type"] == "Accepted")
    assert accepted["status"] == "True", accepted


# --------------------------------------------------------------------------- WSS


async def test_wss_frames_flow_over_tls(world: World) -> None:
    ws = await world.connect("/secure/room")
    try:
        for i in range(3):
            await asyncio.sleep(REQUEST_TIMEOUT_MS / 1000 * 0.6)  # 1.8 s in all, past the request timeout
            await ws.send_text(f"hello {i}")
            frame = await ws.receive()
            assert (frame.opcode, frame.text) == (OP_TEXT, f"hello {i}")
    finally:
        await ws.close()
    [upgrade] = [r for r in world.wss_server.requests if r.websocket]
    assert upgrade.path == "/secure/room"
    assert upgrade.tls is not None and upgrade.tls.server_name == WSS_HOST
    assert upgrade.host == WSS_HOST


async def test_wss_with_tls_mode_none_is_refused_not_sent_in_plaintext(world: World) -> None:
    status = world.weir.status_of("XBackend", "default", "chat-plain")
    [entry] = status["ancestors"]
    accepted = next(c for c in entry["conditions"] if c["type"] == "Accepted")
    assert (accepted["status"], accepted["reason"]) == ("False", "Invalid"), accepted
    assert "WebSocket over TLS" in accepted["message"]
    before = len(world.wss_server.requests)
    async with httpx.AsyncClient(timeout=5) as client:
        response = await client.get(world.weir.url("/plain/room"), headers={"host": "chat.test"})
    assert response.status_code == 500
    assert len(world.wss_server.requests) == before
