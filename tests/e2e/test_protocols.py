"""XBackend ``protocol``, end to end: every value, checked by what the upstream saw.

One weir + real Envoy serves a matrix of XBackends, one per cell
``protocol x tls.mode x server``, each with its own route ``/<cell>``:

- protocol: unset, ``HTTP``, ``HTTP11``, ``HTTP2``, ``H2C``, ``MCP``;
- tls.mode: ``None`` (plaintext) or ``ServerOnly``;
- server: ``h2``, a server that speaks HTTP/2 and HTTP/1.1 (over TLS it
  offers ALPN ``h2, http/1.1``; in plaintext it takes HTTP/1.1 or h2c prior
  knowledge), or ``h1``, an HTTP/1.1-only server (ALPN ``http/1.1`` only, and
  an HTTP/2 preface is just garbage to it).

Each cell asserts the upstream's own record of the exchange: the HTTP version
it parsed and the ALPN protocol its TLS stack selected. Where the protocol
and the server cannot agree, the request must fail: weir never downgrades
HTTP2 to HTTP/1.1 behind the user's back.

The MCP part (below the matrix) runs a real MCP server from the ``mcp`` SDK
behind weir and talks to it with the SDK's client.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
import pytest_asyncio
import uvicorn
from hypercorn.asyncio import serve as hypercorn_serve
from hypercorn.config import Config as HypercornConfig
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from weir_harness import GATEWAY_HEAD, Weir, indent_pem, pid_alive

from weir.testkit import (
    CertAuthority,
    DnsStub,
    RecordingUpstream,
    free_port,
    make_ca,
    require_loopback,
    server_ssl_context,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")

PROTOCOLS: tuple[str | None, ...] = (None, "HTTP", "HTTP11", "HTTP2", "H2C", "MCP")
TLS_MODES = ("None", "ServerOnly")
SERVERS = ("h2", "h1")


@dataclass(frozen=True)
class Server:
    """One upstream of the matrix: where it listens and what it can speak."""

    key: str  # "<tls>-<server>", e.g. "tls-h1"
    ip: str
    hostname: str
    tls: bool
    http2: bool


SERVER_SPECS = {
    "plain-h2": Server("plain-h2", "127.0.0.2", "h2.plain.protocols.test", tls=False, http2=True),
    "plain-h1": Server("plain-h1", "127.0.0.3", "h1.plain.protocols.test", tls=False, http2=False),
    "tls-h2": Server("tls-h2", "127.0.0.4", "h2.tls.protocols.test", tls=True, http2=True),
    "tls-h1": Server("tls-h1", "127.0.0.5", "h1.tls.protocols.test", tls=True, http2=False),
}


def cell_name(protocol: str | None, tls: str, server: str) -> str:
    return f"{(protocol or 'unset').lower()}-{'tls' if tls == 'ServerOnly' else 'plain'}-{server}"


def server_of(tls: str, server: str) -> Server:
    return SERVER_SPECS[f"{'tls' if tls == 'ServerOnly' else 'plain'}-{server}"]


@dataclass(frozen=True)
class Saw:
    """What the upstream recorded: HTTP version and selected ALPN protocol (None: no ALPN)."""

    http_version: str
    alpn: str | None


@dataclass(frozen=True)
class Fails:
    """The gateway answers ``status``; ``upstream`` is what the upstream parsed, if anything.

    ``upstream`` holds one ``(method, http_version, alpn)`` per request the
    upstream recorded during the exchange.
    """

    status: int
    upstream: tuple[tuple[str, str, str | None], ...] = ()
    why: str = ""


Expected = Saw | Fails

H1_PLAIN = Saw("1.1", None)
H2C = Saw("2", None)
ALPN_H2 = Saw("2", "h2")
ALPN_H1 = Saw("1.1", "http/1.1")
#: HTTP/2 towards an HTTP/1.1-only server: Envoy sends the HTTP/2 connection
#: preface ("PRI * HTTP/2.0"), which such a server parses as a strange
#: HTTP/1.x request and answers in HTTP/1.1; Envoy's HTTP/2 codec cannot read
#: that (reset reason "protocol error"), and the client gets 502. No request
#: ever reaches the server as HTTP/1.1. Over TLS, Envoy offers only ALPN
#: ``h2``, the server only ``http/1.1``: no protocol is selected, and Envoy
#: still speaks HTTP/2 rather than fall back.
NO_DOWNGRADE = Fails(502, (("PRI", "2.0", None),), "HTTP/2 is never downgraded")
H2C_WITH_TLS = Fails(500, why="H2C with TLS is refused by translation (Accepted=False, Invalid)")

EXPECTED: dict[tuple[str | None, str, str], Expected] = {
    # plaintext, server takes HTTP/1.1 and h2c prior knowledge
    (None, "None", "h2"): H1_PLAIN,
    ("HTTP", "None", "h2"): H1_PLAIN,
    ("HTTP11", "None", "h2"): H1_PLAIN,
    ("HTTP2", "None", "h2"): H2C,
    ("H2C", "None", "h2"): H2C,
    ("MCP", "None", "h2"): H1_PLAIN,
    # plaintext, HTTP/1.1-only server
    (None, "None", "h1"): H1_PLAIN,
    ("HTTP", "None", "h1"): H1_PLAIN,
    ("HTTP11", "None", "h1"): H1_PLAIN,
    ("HTTP2", "None", "h1"): NO_DOWNGRADE,
    ("H2C", "None", "h1"): NO_DOWNGRADE,
    ("MCP", "None", "h1"): H1_PLAIN,
    # TLS, server offers ALPN h2, http/1.1
    (None, "ServerOnly", "h2"): ALPN_H2,
    ("HTTP", "ServerOnly", "h2"): ALPN_H2,
    ("HTTP11", "ServerOnly", "h2"): ALPN_H1,
    ("HTTP2", "ServerOnly", "h2"): ALPN_H2,
    ("H2C", "ServerOnly", "h2"): H2C_WITH_TLS,
    ("MCP", "ServerOnly", "h2"): ALPN_H2,
    # TLS, server offers ALPN http/1.1 only
    (None, "ServerOnly", "h1"): ALPN_H1,
    ("HTTP", "ServerOnly", "h1"): ALPN_H1,
    ("HTTP11", "ServerOnly", "h1"): ALPN_H1,
    ("HTTP2", "ServerOnly", "h1"): NO_DOWNGRADE,
    ("H2C", "ServerOnly", "h1"): H2C_WITH_TLS,
    ("MCP", "ServerOnly", "h1"): ALPN_H1,
}
CELLS = [(p, t, s) for p in PROTOCOLS for t in TLS_MODES for s in SERVERS]
assert set(CELLS) == set(EXPECTED)


def xbackend(name: str, server: Server, port: int, protocol: str | None) -> str:
    proto = f"  protocol: {protocol}\n" if protocol else ""
    if server.tls:
        tls = f"""\
  tls:
    mode: ServerOnly
    validation:
      hostname: {server.hostname}
      caCertificateRefs: [{{group: "", kind: ConfigMap, name: protocols-ca}}]
"""
    else:
        tls = "  tls: {mode: None}\n"
    return f"""\
---
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackend
metadata: {{name: {name}, namespace: default}}
spec:
  type: ExternalHostname
  externalHostname: {{hostname: {server.hostname}}}
  port: {{port: {port}}}
{proto}{tls}"""


def route(name: str, rules: list[tuple[str, str]]) -> str:
    """An HTTPRoute with one rule per (path prefix, XBackend name)."""
    text = f"""\
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}, namespace: default}}
spec:
  parentRefs: [{{name: gw}}]
  rules:
"""
    for prefix, backend in rules:
        text += (
            f"  - matches: [{{path: {{type: PathPrefix, value: {prefix}}}}}]\n"
            f"    backendRefs: [{{group: gateway.networking.x-k8s.io, kind: XBackend, name: {backend}}}]\n"
        )
    return text


def config_map(name: str, pem: str) -> str:
    return f"""\
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: {name}, namespace: default}}
data:
  ca.crt: |
{indent_pem(pem, 4)}"""


# --------------------------------------------------------------------------- the shared world


@dataclass
class Matrix:
    weir: Weir
    dns: DnsStub
    ca: CertAuthority
    upstreams: dict[str, RecordingUpstream]

    async def get(self, path: str, *, http2: bool = False) -> httpx.Response:
        async with httpx.AsyncClient(timeout=10, http1=not http2, http2=http2) as client:
            return await client.get(self.weir.url(path))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def matrix(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Matrix]:
    folder = tmp_path_factory.mktemp("protocols") / "manifests"
    folder.mkdir()
    ca = make_ca("protocols CA")
    async with DnsStub() as dns:
        harness = Weir(folder, dns, free_port(), egress_denied_cidrs=())  # upstreams are on loopback
        upstreams: dict[str, RecordingUpstream] = {}
        try:
            for spec in SERVER_SPECS.values():
                ctx = None
                if spec.tls:
                    alpn = ("h2", "http/1.1") if spec.http2 else ("http/1.1",)
                    ctx = server_ssl_context(ca.issue_server_cert(spec.hostname), alpn=alpn)
                upstream = RecordingUpstream(spec.key, host=spec.ip, ssl_context=ctx, http2=spec.http2)
                upstreams[spec.key] = await upstream.start()
                dns.set(spec.hostname, [spec.ip])
            text = GATEWAY_HEAD.format(port=harness.gateway_port) + config_map("protocols-ca", ca.cert_pem)
            names = []
            for protocol, tls, server in CELLS:
                name = cell_name(protocol, tls, server)
                spec = server_of(tls, server)
                text += xbackend(name, spec, upstreams[spec.key].port, protocol)
                names.append(name)
            for protocol in PROTOCOLS:  # one route per protocol: a route has at most 16 rules
                mine = [n for n in names if n.startswith(f"{(protocol or 'unset').lower()}-")]
                text += route(f"matrix-{(protocol or 'unset').lower()}", [(f"/{n}", n) for n in mine])
            harness.write("matrix.yaml", text)
            await harness.start()
            yield Matrix(harness, dns, ca, upstreams)
        finally:
            await harness.stop()
            for upstream in upstreams.values():
                await upstream.stop()
            for pid in harness.envoy_pids:
                assert not pid_alive(pid), f"Envoy {pid} survived stop()"


# --------------------------------------------------------------------------- the matrix


@pytest.mark.parametrize(("protocol", "tls", "server"), CELLS, ids=[cell_name(p, t, s) for p, t, s in CELLS])
async def test_protocol_matrix(matrix: Matrix, protocol: str | None, tls: str, server: str) -> None:
    name = cell_name(protocol, tls, server)
    expected = EXPECTED[(protocol, tls, server)]
    upstream = matrix.upstreams[server_of(tls, server).key]
    before = len(upstream.requests)
    response = await matrix.get(f"/{name}/x")
    new = upstream.requests[before:]
    if isinstance(expected, Saw):
        assert response.status_code == 200, (response.status_code, response.text)
        seen = response.json()
        assert (seen["http_version"], seen["alpn"]) == (expected.http_version, expected.alpn), seen
        assert seen["host"] == server_of(tls, server).hostname
        assert seen["path"] == f"/{name}/x"
    else:
        assert response.status_code == expected.status, (response.status_code, response.text)
        assert tuple((r.method, r.http_version, r.alpn) for r in new) == expected.upstream, expected.why


async def test_h2c_with_tls_is_reported_in_status(matrix: Matrix) -> None:
    for server in SERVERS:
        status = matrix.weir.status_of("XBackend", "default", cell_name("H2C", "ServerOnly", server))
        [parent] = status["parents"]
        accepted = next(c for c in parent["conditions"] if c["type"] == "Accepted")
        assert (accepted["status"], accepted["reason"]) == ("False", "Invalid"), accepted
        assert "HTTP2" in accepted["message"]


@pytest.mark.parametrize("tls", TLS_MODES)
async def test_http2_client_to_http11_backend(matrix: Matrix, tls: str) -> None:
    """A client speaking HTTP/2 (h2c prior knowledge) to the gateway; the backend still gets HTTP/1.1."""
    name = cell_name("HTTP11", tls, "h2")  # a server that would gladly speak HTTP/2
    response = await matrix.get(f"/{name}/from-h2-client", http2=True)
    assert response.http_version == "HTTP/2"
    assert response.status_code == 200, response.text
    seen = response.json()
    assert seen["http_version"] == "1.1"
    assert seen["alpn"] == ("http/1.1" if tls == "ServerOnly" else None)
    assert seen["host"] == server_of(tls, "h2").hostname


# --------------------------------------------------------------------------- MCP
#
# A real MCP server (the ``mcp`` SDK's MCPServer, streamable HTTP) behind an
# XBackend with ``protocol: MCP``, once over TLS (hypercorn, which offers ALPN
# h2: the exchange upstream is HTTP/2) and once in plaintext (uvicorn,
# HTTP/1.1). The SDK's client talks to it through weir in the handshake-era
# mode, which is the one with sessions (``Mcp-Session-Id``).
#
# What "no timeout, no buffering" means is proven against a request timeout
# that this weir instance sets low (``Settings.request_timeout_ms`` =
# MCP_REQUEST_TIMEOUT_MS) rather than by waiting out Envoy's default 15 s:
# - the same server's event stream, reached through a second XBackend with
#   protocol ``HTTP`` (same host, same port), is cut at that timeout;
# - through the MCP XBackend a stream twice as long completes, and each event
#   (MCP progress notifications, and a plain text/event-stream) reaches the
#   client within a fraction of the interval after the server produced it:
#   nothing is held back until the end.
# The default itself (15 s for ordinary routes, none for MCP) is pinned by the
# translate and xDS golden files.

MCP_REQUEST_TIMEOUT_MS = 1000
EVENT_INTERVAL = 0.5
EVENT_COUNT = 6  # events over 2.5 s: a stream well over twice the request timeout
#: How late an event may reach the client after the server produced it.
PROMPT = 0.25


@dataclass(frozen=True)
class HttpSeen:
    """One request as the MCP server's ASGI stack saw it."""

    method: str
    path: str
    http_version: str
    host: str | None
    session_id: str | None
    via_envoy: bool  # any x-envoy-* or x-forwarded-* header present


@dataclass
class McpUpstream:
    """An MCP server on a loopback IP, recording requests and when it produced each event."""

    tls: str  # "ServerOnly" or "None"
    ip: str
    hostname: str
    prefix: str  # every path it serves starts with this
    port: int = 0
    requests: list[HttpSeen] = dataclasses.field(default_factory=list)
    #: When each event was produced, per stream: "countdown" (the tool), or the ``id`` of /events.
    emitted: dict[str, list[float]] = dataclasses.field(default_factory=dict)

    def app(self) -> Any:
        server = MCPServer("weir-e2e", log_level="WARNING")

        @server.tool()
        def add(a: int, b: int) -> int:
            """Add two numbers."""
            return a + b

        @server.tool()
        async def countdown(steps: int, interval: float, ctx: Context) -> str:
            """Report progress ``steps`` times, ``interval`` seconds apart."""
            for i in range(steps):
                self.emitted.setdefault("countdown", []).append(time.monotonic())
                await ctx.report_progress(i + 1, steps)
                await asyncio.sleep(interval)
            return "done"

        @server.custom_route(f"{self.prefix}/events", methods=["GET"])
        async def events(request: Request) -> Response:
            """A plain text/event-stream: EVENT_COUNT events, EVENT_INTERVAL apart."""
            emitted = self.emitted.setdefault(request.query_params["id"], [])

            async def produce() -> AsyncIterator[bytes]:
                for i in range(EVENT_COUNT):
                    if i:
                        await asyncio.sleep(EVENT_INTERVAL)
                    emitted.append(time.monotonic())
                    yield f"data: {i}\n\n".encode()

            return StreamingResponse(produce(), media_type="text/event-stream")

        security = TransportSecuritySettings(allowed_hosts=[self.hostname])
        inner = server.streamable_http_app(
            streamable_http_path=f"{self.prefix}/mcp", transport_security=security, host=self.ip
        )

        async def recording(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
                self.requests.append(
                    HttpSeen(
                        method=scope["method"],
                        path=scope["path"],
                        http_version=scope["http_version"],
                        host=headers.get("host"),
                        session_id=headers.get("mcp-session-id"),
                        via_envoy=any(k.startswith(("x-envoy-", "x-forwarded-")) for k in headers),
                    )
                )
            await inner(scope, receive, send)

        return recording


@contextlib.asynccontextmanager
async def serve_mcp(upstream: McpUpstream, ca: CertAuthority, tmp: Path) -> AsyncIterator[McpUpstream]:
    """Run ``upstream`` until the block ends.

    With TLS: hypercorn, offering ALPN h2 and http/1.1. In plaintext: uvicorn (HTTP/1.1).
    """
    require_loopback(upstream.ip, what="MCP test server")
    upstream.port = free_port(upstream.ip)
    app = upstream.app()
    if upstream.tls == "ServerOnly":
        files = ca.issue_server_cert(upstream.hostname).write(tmp, "mcp")
        config = HypercornConfig()
        config.bind = [f"{upstream.ip}:{upstream.port}"]
        config.certfile, config.keyfile = str(files.cert), str(files.key)
        config.alpn_protocols = ["h2", "http/1.1"]
        config.accesslog = None
        config.graceful_timeout = 1
        stop = asyncio.Event()
        task = asyncio.create_task(hypercorn_serve(app, config, shutdown_trigger=stop.wait))
        try:
            await _wait_listening(upstream.ip, upstream.port, task)
            yield upstream
        finally:
            stop.set()
            await asyncio.wait_for(task, 10)
    else:
        server = uvicorn.Server(
            uvicorn.Config(app, host=upstream.ip, port=upstream.port, log_level="warning", lifespan="on")
        )
        task = asyncio.create_task(server.serve())
        try:
            await _wait_listening(upstream.ip, upstream.port, task)
            yield upstream
        finally:
            server.should_exit = True
            await asyncio.wait_for(task, 10)


async def _wait_listening(ip: str, port: int, task: asyncio.Task[Any]) -> None:
    for _ in range(500):
        if task.done():
            task.result()  # raises what made the server stop
            raise AssertionError("MCP test server stopped at once")
        try:
            _, writer = await asyncio.open_connection(ip, port)
        except OSError:
            await asyncio.sleep(0.01)
            continue
        writer.close()
        await writer.wait_closed()
        return
    raise AssertionError(f"MCP test server did not listen on {ip}:{port}")


def mcp_manifests(port: int, ca_pem: str, upstreams: list[McpUpstream]) -> str:
    """Per server: XBackend ``mcp-<tls>`` (protocol MCP) and ``http-<tls>`` (protocol HTTP), same host.

    Everything under the server's prefix goes to the MCP XBackend, unless the
    request carries ``x-via: http``: then it goes to the HTTP one.
    """
    text = GATEWAY_HEAD.format(port=port) + config_map("protocols-ca", ca_pem)
    rules = ""
    for up in upstreams:
        slug = "tls" if up.tls == "ServerOnly" else "plain"
        server = Server(f"mcp-{slug}", up.ip, up.hostname, tls=up.tls == "ServerOnly", http2=True)
        text += xbackend(f"mcp-{slug}", server, up.port, "MCP")
        text += xbackend(f"http-{slug}", server, up.port, "HTTP")
        rules += f"""\
  - matches: [{{path: {{value: {up.prefix}}}, headers: [{{name: x-via, value: http}}]}}]
    backendRefs: [{{group: gateway.networking.x-k8s.io, kind: XBackend, name: http-{slug}}}]
  - matches: [{{path: {{value: {up.prefix}}}}}]
    backendRefs: [{{group: gateway.networking.x-k8s.io, kind: XBackend, name: mcp-{slug}}}]
"""
    return (
        text
        + """\
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: mcp, namespace: default}
spec:
  parentRefs: [{name: gw}]
  rules:
"""
        + rules
    )


@dataclass
class McpWorld:
    weir: Weir
    upstreams: dict[str, McpUpstream]

    async def stat(self, cluster: str, name: str) -> int:
        controller = self.weir.controller
        assert controller is not None and controller.envoy is not None
        code, body = await controller.envoy.admin.get(f"/stats?filter={name}")
        assert code == 200, body
        prefix = f"cluster.{cluster}.{name}: "
        values = [int(line[len(prefix) :]) for line in body.splitlines() if line.startswith(prefix)]
        return values[0] if values else 0


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def mcp_world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[McpWorld]:
    base = tmp_path_factory.mktemp("mcp")
    folder = base / "manifests"
    folder.mkdir()
    ca = make_ca("MCP CA")
    upstreams = {
        "ServerOnly": McpUpstream("ServerOnly", "127.0.0.6", "mcp.tls.protocols.test", "/tls"),
        "None": McpUpstream("None", "127.0.0.7", "mcp.plain.protocols.test", "/plain"),
    }
    async with DnsStub() as dns, contextlib.AsyncExitStack() as stack:
        for up in upstreams.values():
            await stack.enter_async_context(serve_mcp(up, ca, base))
            dns.set(up.hostname, [up.ip])
        harness = Weir(folder, dns, free_port(), egress_denied_cidrs=())  # upstreams are on loopback
        harness.settings = dataclasses.replace(harness.settings, request_timeout_ms=MCP_REQUEST_TIMEOUT_MS)
        try:
            harness.write(
                "mcp.yaml", mcp_manifests(harness.gateway_port, ca.cert_pem, list(upstreams.values()))
            )
            await harness.start()
            yield McpWorld(harness, upstreams)
        finally:
            await harness.stop()
            for pid in harness.envoy_pids:
                assert not pid_alive(pid), f"Envoy {pid} survived stop()"


def _assert_prompt(arrived: list[float], emitted: list[float]) -> None:
    """Every event reached the client soon after it was produced (nothing buffered until the end)."""
    assert len(arrived) == len(emitted) == EVENT_COUNT, (arrived, emitted)
    delays = [round(a - e, 3) for a, e in zip(arrived, emitted, strict=True)]
    assert all(0 <= d < PROMPT for d in delays), f"event delays {delays} s (interval {EVENT_INTERVAL} s)"


@pytest.mark.parametrize("tls", TLS_MODES)
async def test_mcp_session_through_weir(mcp_world: McpWorld, tls: str) -> None:
    upstream = mcp_world.upstreams[tls]
    upstream.requests.clear()
    upstream.emitted.pop("countdown", None)
    responses: list[tuple[str, int, str | None, str | None]] = []

    async def on_response(response: httpx2.Response) -> None:
        headers = response.headers
        responses.append(
            (
                response.request.method,
                response.status_code,
                headers.get("mcp-session-id"),
                headers.get("content-type"),
            )
        )

    url = mcp_world.weir.url(f"{upstream.prefix}/mcp")
    arrived: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        arrived.append(time.monotonic())

    http = httpx2.AsyncClient(event_hooks={"response": [on_response]}, timeout=httpx2.Timeout(10, read=30))
    async with http, Client(streamable_http_client(url, http_client=http), mode="legacy") as client:
        assert client.server_info is not None and client.server_info.name == "weir-e2e"
        tools = await client.list_tools()
        assert {tool.name for tool in tools.tools} == {"add", "countdown"}
        added = await client.call_tool("add", {"a": 2, "b": 3})
        assert not added.is_error and added.structured_content == {"result": 5}, added

        started = time.monotonic()
        counted = await client.call_tool(
            "countdown", {"steps": EVENT_COUNT, "interval": EVENT_INTERVAL}, progress_callback=on_progress
        )
        took = time.monotonic() - started
    assert not counted.is_error, counted
    # Longer than the request timeout every other route of this weir has ...
    assert took > 2 * MCP_REQUEST_TIMEOUT_MS / 1000, took
    # ... and streamed: each progress notification arrived as it was sent.
    _assert_prompt(arrived, upstream.emitted["countdown"])

    # Mcp-Session-Id, server → client: the SDK's initialize response carried it through Envoy.
    initialize = responses[0]
    assert initialize[:2] == ("POST", 200), responses
    session = initialize[2]
    assert session, responses
    assert any(ctype == "text/event-stream" for *_, ctype in responses), responses
    # ... client → server: every later request, the GET stream and the closing DELETE included.
    seen = upstream.requests
    assert seen[0].method == "POST" and seen[0].session_id is None
    assert [r.session_id for r in seen[1:]] == [session] * (len(seen) - 1), seen
    assert {"GET", "DELETE"} <= {r.method for r in seen}
    # Host is the external hostname (the SDK refuses anything else: DNS rebinding protection).
    assert {r.host for r in seen} == {upstream.hostname}
    # HTTP as for protocol HTTP: ALPN picked h2 with hypercorn over TLS; HTTP/1.1 in plaintext.
    assert {r.http_version for r in seen} == {"2" if tls == "ServerOnly" else "1.1"}
    assert not any(r.via_envoy for r in seen), seen


@pytest.mark.parametrize("tls", TLS_MODES)
async def test_mcp_route_streams_without_timeout_where_http_route_times_out(
    mcp_world: McpWorld, tls: str
) -> None:
    upstream = mcp_world.upstreams[tls]
    slug = "tls" if tls == "ServerOnly" else "plain"
    url = mcp_world.weir.url(f"{upstream.prefix}/events")

    async def read_events(
        stream: str, headers: dict[str, str]
    ) -> tuple[list[float], float, Exception | None]:
        """Arrival times of the events, the time the stream took, and how it ended."""
        arrived: list[float] = []
        started = time.monotonic()
        error: Exception | None = None
        async with httpx.AsyncClient(timeout=10) as client:
            try:
                async with client.stream("GET", url, params={"id": stream}, headers=headers) as response:
                    assert response.status_code == 200
                    assert response.headers["content-type"].startswith("text/event-stream")
                    async for line in response.aiter_lines():
                        if line.startswith("data:"):
                            arrived.append(time.monotonic())
            except httpx.HTTPError as exc:
                error = exc
        return arrived, time.monotonic() - started, error

    http_cluster, mcp_cluster = f"xbackend/default/http-{slug}", f"xbackend/default/mcp-{slug}"
    timeouts_before = await mcp_world.stat(http_cluster, "upstream_rq_timeout")
    limit = MCP_REQUEST_TIMEOUT_MS / 1000
    started = time.monotonic()
    (cut, cut_took, cut_error), (whole, whole_took, whole_error) = await asyncio.gather(
        read_events(f"http-{slug}", {"x-via": "http"}), read_events(f"mcp-{slug}", {})
    )

    # Through the HTTP XBackend: cut when the request timeout expires. (Over
    # HTTP/1.1 Envoy then waits up to its delayed-close timeout, 1 s, before
    # the client sees the connection end.)
    assert cut_error is not None, "the stream through the HTTP route was not cut"
    assert cut and all(t - started < limit + 0.1 for t in cut), [t - started for t in cut]
    assert len(cut) < EVENT_COUNT
    assert limit < cut_took < limit + 1.5, cut_took
    assert await mcp_world.stat(http_cluster, "upstream_rq_timeout") == timeouts_before + 1

    # Through the MCP XBackend: the whole stream, each event as it is produced.
    assert whole_error is None, repr(whole_error)
    assert whole_took > 2 * limit, whole_took
    _assert_prompt(whole, upstream.emitted[f"mcp-{slug}"])
    assert await mcp_world.stat(mcp_cluster, "upstream_rq_timeout") == 0
