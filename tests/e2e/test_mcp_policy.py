"""BackendMCPPolicy end to end: tool allow-lists enforced by Envoy, and per-tool metrics.

Real MCP servers from the ``mcp`` SDK (streamable HTTP under uvicorn, on
loopback IPs reached by external hostnames through the DNS stub) sit behind
weir and real Envoy; the SDK's client talks to them through the gateway.
Every server records what reached it before the SDK sees it (each POST's
JSON-RPC method and tool name) and which tools it ran, so "never reached
the server" is what the server says, not what the gateway claims.

- ``tools``: ``allowedTools: [add, get_*, countdown]``, ``deniedTools: [get_secret]``;
- ``ops``: ``deniedTools: [admin_*, delete_repo]`` only (every other tool allowed);
- ``down``: ``allowedTools: [add]``, a hostname whose server does not listen
  (calls fail with 503: the errors metric), and ``void`` the same with a
  hostname that does not resolve (503 without any upstream host).
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
import pytest_asyncio
import uvicorn
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from weir_harness import GATEWAY_HEAD, Weir, eventually, pid_alive

from weir import metrics
from weir.testkit import DnsStub, free_port, require_loopback
from weir.xds import accesslog, mcp

pytestmark = pytest.mark.asyncio(loop_scope="module")

EVENT_INTERVAL = 0.4
EVENT_COUNT = 5
#: How late a progress notification may reach the client after the server sent it.
PROMPT = 0.25
ALL_TOOLS = {"add", "get_weather", "get_secret", "delete_repo", "admin_reset", "countdown"}
ACCEPT = "application/json, text/event-stream"


@dataclass
class ToolServer:
    """An MCP server on a loopback IP that records what reaches it."""

    name: str
    ip: str
    hostname: str
    port: int = 0
    #: Answer POSTs with one JSON body instead of an SSE stream (the streamable HTTP transport allows both).
    json_response: bool = False
    #: (JSON-RPC method, tool name) of every message POSTed to it, as it arrived.
    posted: list[tuple[str | None, str | None]] = field(default_factory=list)
    #: (HTTP method, Mcp-Session-Id) of every request.
    requests: list[tuple[str, str | None]] = field(default_factory=list)
    #: The tools it ran, in order.
    ran: list[str] = field(default_factory=list)
    #: When it sent each progress notification of ``countdown``.
    emitted: list[float] = field(default_factory=list)

    @property
    def path(self) -> str:
        return f"/{self.name}/mcp"

    def app(self) -> Any:
        server = MCPServer(f"weir-{self.name}", log_level="WARNING")

        def tool(fn: Callable[..., Any]) -> None:
            server.tool()(fn)

        def add(a: int, b: int) -> int:
            """Add two numbers."""
            self.ran.append("add")
            return a + b

        def get_weather(city: str) -> str:
            """Weather of a city."""
            self.ran.append("get_weather")
            return f"sunny in {city}"

        def get_secret() -> str:
            """A secret the agent must not read."""
            self.ran.append("get_secret")
            return "hunter2"

        def delete_repo(repo: str) -> str:
            """Delete a repository."""
            self.ran.append("delete_repo")
            return f"deleted {repo}"

        def admin_reset() -> str:
            """Reset everything."""
            self.ran.append("admin_reset")
            return "reset"

        async def countdown(steps: int, interval: float, ctx: Context) -> str:
            """Report progress ``steps`` times, ``interval`` seconds apart."""
            self.ran.append("countdown")
            for i in range(steps):
                self.emitted.append(time.monotonic())
                await ctx.report_progress(i + 1, steps)
                await asyncio.sleep(interval)
            return "done"

        for fn in (add, get_weather, get_secret, delete_repo, admin_reset, countdown):
            tool(fn)
        security = TransportSecuritySettings(allowed_hosts=[self.hostname])
        inner = server.streamable_http_app(
            streamable_http_path=self.path,
            transport_security=security,
            host=self.ip,
            json_response=self.json_response,
        )

        async def recording(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                await inner(scope, receive, send)
                return
            headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
            self.requests.append((scope["method"], headers.get("mcp-session-id")))
            received: list[Any] = []
            if scope["method"] == "POST":
                body = b""
                while True:
                    message = await receive()
                    received.append(message)
                    body += message.get("body", b"")
                    if message["type"] != "http.request" or not message.get("more_body"):
                        break
                self.posted.extend(_messages(body))

            async def replay() -> Any:
                return received.pop(0) if received else await receive()

            await inner(scope, replay, send)

        return recording

    def forget(self) -> None:
        """Start recording afresh."""
        for record in (self.posted, self.requests, self.ran, self.emitted):
            record.clear()

    def calls(self) -> list[str | None]:
        """Tool names of the ``tools/call`` requests that reached the server."""
        return [tool for method, tool in self.posted if method == "tools/call"]


def _messages(body: bytes) -> list[tuple[str | None, str | None]]:
    try:
        data = json.loads(body)
    except ValueError:
        return [("<unreadable>", None)]
    out = []
    for message in data if isinstance(data, list) else [data]:
        params = message.get("params") if isinstance(message, dict) else None
        name = params.get("name") if isinstance(params, dict) else None
        out.append((message.get("method") if isinstance(message, dict) else None, name))
    return out


@contextlib.asynccontextmanager
async def serve(server: ToolServer) -> AsyncIterator[ToolServer]:
    require_loopback(server.ip, what="MCP test server")
    server.port = free_port(server.ip)
    config = uvicorn.Config(
        server.app(), host=server.ip, port=server.port, log_level="warning", lifespan="on"
    )
    runner = uvicorn.Server(config)
    task = asyncio.create_task(runner.serve())
    try:
        for _ in range(500):
            if runner.started:
                break
            if task.done():
                task.result()
            await asyncio.sleep(0.01)
        assert runner.started, f"MCP server {server.name} did not start"
        yield server
    finally:
        runner.should_exit = True
        await asyncio.wait_for(task, 10)


RAW_IP = "127.0.0.24"
RAW_TOOLS = ["add", "get_weather", "get_secret", "delete_repo"]


def _tools_result(id_: Any, names: list[Any]) -> bytes:
    tools = [{"name": n, "description": f"tool {n}", "inputSchema": {"type": "object"}} for n in names]
    return json.dumps({"jsonrpc": "2.0", "id": id_, "result": {"tools": tools, "nextCursor": "c2"}}).encode()


def raw_answer(kind: str, id_: Any) -> tuple[int, dict[str, str], bytes]:
    """What the raw server answers a ``tools/list`` with, chosen by the request's ``x-answer``."""
    listing = _tools_result(id_, RAW_TOOLS)
    sse = "text/event-stream"
    if kind == "json":
        return 200, {"content-type": "application/json"}, listing
    if kind == "sse":
        # A priming event without data, a progress notification, then the answer over two data lines.
        note = json.dumps({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}})
        text = listing.decode().replace(', "result"', ',\n"result"', 1)
        data = "\r\n".join(f"data: {line}" for line in text.split("\n"))
        body = f"id: 0\r\ndata:\r\n\r\nevent: message\r\ndata: {note}\r\n\r\nevent: message\r\n{data}\r\n\r\n"
        return 200, {"content-type": sse}, body.encode()
    if kind == "escaped":  # "get_s\u0065cret" is get_secret; a duplicate name: the last counts
        body = listing.replace(b'"get_secret"', b'"get_s\\u0065cret"')
        body = body.replace(b'{"name": "add"', b'{"name": "add", "name": "get_secret"')
        return 200, {"content-type": "application/json"}, body
    if kind == "gzip":
        return 200, {"content-type": "application/json", "content-encoding": "gzip"}, gzip.compress(listing)
    if kind == "text":
        return 200, {"content-type": "text/plain"}, listing
    if kind == "truncated":
        return 200, {"content-type": "application/json"}, listing[:-5]
    if kind == "unnamed":
        return 200, {"content-type": "application/json"}, _tools_result(id_, ["add", 7])
    if kind == "sse-broken":
        return 200, {"content-type": sse}, b"event: message\ndata: {not json}\n\n"
    if kind == "error":
        return 503, {"content-type": "text/plain"}, b"overloaded"
    if kind == "rpc-error":
        body = {"jsonrpc": "2.0", "id": id_, "error": {"code": -32601, "message": "no tools here"}}
        return 200, {"content-type": "application/json"}, json.dumps(body).encode()
    raise AssertionError(kind)


@contextlib.asynccontextmanager
async def serve_raw(port: int) -> AsyncIterator[None]:
    """A server that answers every POST as ``x-answer`` says (and records Accept-Encoding)."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode(): v.decode() for k, v in scope["headers"]}
        RAW_SEEN.append(headers.get("accept-encoding"))
        status, extra, answer = raw_answer(headers.get("x-answer", "json"), json.loads(body).get("id"))
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(k.encode(), v.encode()) for k, v in extra.items()],
            }
        )
        await send({"type": "http.response.body", "body": answer})

    require_loopback(RAW_IP, what="raw MCP server")
    config = uvicorn.Config(app, host=RAW_IP, port=port, log_level="warning", lifespan="off")
    runner = uvicorn.Server(config)
    task = asyncio.create_task(runner.serve())
    try:
        await eventually(lambda: runner.started, timeout=5)
        yield
    finally:
        runner.should_exit = True
        await asyncio.wait_for(task, 10)


#: The Accept-Encoding of each request the raw server received.
RAW_SEEN: list[str | None] = []


def manifests(port: int, servers: dict[str, tuple[str, int]]) -> str:
    text = GATEWAY_HEAD.format(port=port)
    rules = ""
    for name, (hostname, server_port) in servers.items():
        text += f"""\
---
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackend
metadata: {{name: {name}, namespace: default}}
spec:
  type: ExternalHostname
  externalHostname: {{hostname: {hostname}}}
  port: {{port: {server_port}}}
  protocol: MCP
  tls: {{mode: None}}
"""
        rules += f"""\
  - matches: [{{path: {{value: /{name}}}}}]
    backendRefs: [{{group: gateway.networking.x-k8s.io, kind: XBackend, name: {name}}}]
"""
    text += f"""\
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: mcp, namespace: default}}
spec:
  parentRefs: [{{name: gw}}]
  rules:
{rules}"""
    return text + POLICIES


POLICIES = """\
---
apiVersion: weir.dev/v1alpha1
kind: BackendMCPPolicy
metadata: {name: tools, namespace: default}
spec:
  targetRefs: [{group: gateway.networking.x-k8s.io, kind: XBackend, name: tools}]
  allowedTools: [add, "get_*", countdown]
  deniedTools: [get_secret]
---
apiVersion: weir.dev/v1alpha1
kind: BackendMCPPolicy
metadata: {name: ops, namespace: default}
spec:
  targetRefs: [{group: gateway.networking.x-k8s.io, kind: XBackend, name: ops}]
  deniedTools: ["admin_*", delete_repo]
---
apiVersion: weir.dev/v1alpha1
kind: BackendMCPPolicy
metadata: {name: down, namespace: default}
spec:
  targetRefs:
  - {group: gateway.networking.x-k8s.io, kind: XBackend, name: down}
  - {group: gateway.networking.x-k8s.io, kind: XBackend, name: void}
  allowedTools: [add]
---
apiVersion: weir.dev/v1alpha1
kind: BackendMCPPolicy
metadata: {name: raw, namespace: default}
spec:
  targetRefs: [{group: gateway.networking.x-k8s.io, kind: XBackend, name: raw}]
  allowedTools: [add, "get_*"]
  deniedTools: [get_secret]
"""


@dataclass
class World:
    weir: Weir
    servers: dict[str, ToolServer]

    def url(self, name: str) -> str:
        return self.weir.url(f"/{name}/mcp")

    async def scrape(self) -> str:
        controller = self.weir.controller
        assert controller is not None and controller.admin_port
        async with httpx.AsyncClient() as client:
            response = await client.get(f"http://127.0.0.1:{controller.admin_port}/metrics")
        assert response.status_code == 200, response.text
        return response.text


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    folder: Path = tmp_path_factory.mktemp("mcp-policy")
    servers = {
        "tools": ToolServer("tools", "127.0.0.21", "tools.mcp-policy.test"),
        "ops": ToolServer("ops", "127.0.0.22", "ops.mcp-policy.test", json_response=True),
    }
    down_ip, down_port = "127.0.0.23", free_port("127.0.0.23")  # nothing listens there
    async with DnsStub() as dns, contextlib.AsyncExitStack() as stack:
        for server in servers.values():
            await stack.enter_async_context(serve(server))
            dns.set(server.hostname, [server.ip])
        dns.set("down.mcp-policy.test", [down_ip])  # void.mcp-policy.test: no record
        harness = Weir(folder, dns, free_port(), egress_denied_cidrs=())  # the servers are on loopback
        backends = {name: (s.hostname, s.port) for name, s in servers.items()}
        raw_port = free_port(RAW_IP)
        await stack.enter_async_context(serve_raw(raw_port))
        dns.set("raw.mcp-policy.test", [RAW_IP])
        backends["raw"] = ("raw.mcp-policy.test", raw_port)
        backends["down"] = ("down.mcp-policy.test", down_port)
        backends["void"] = ("void.mcp-policy.test", 80)
        try:
            harness.write("mcp.yaml", manifests(harness.gateway_port, backends))
            await harness.start()
            yield World(harness, servers)
        finally:
            await harness.stop()
            for pid in harness.envoy_pids:
                assert not pid_alive(pid), f"Envoy {pid} survived stop()"


@contextlib.asynccontextmanager
async def sdk_client(
    url: str, mode: str, on_response: Callable[[httpx2.Response], Awaitable[None]] | None = None
) -> AsyncIterator[Client]:
    hooks = {"response": [on_response]} if on_response else {}
    http = httpx2.AsyncClient(event_hooks=hooks, timeout=httpx2.Timeout(10, read=30))
    async with http, Client(streamable_http_client(url, http_client=http), mode=mode) as client:
        yield client


async def test_policy_is_accepted(world: World) -> None:
    for name in ("tools", "ops", "down"):
        status = world.weir.status_of("BackendMCPPolicy", "default", name)
        conditions = {c["type"]: c for a in status["ancestors"] for c in a["conditions"]}
        assert conditions["Accepted"]["status"] == "True", status


async def test_allow_list_through_the_sdk_client(world: World) -> None:
    server = world.servers["tools"]
    server.forget()
    refusals: list[tuple[int, str | None]] = []

    async def on_response(response: httpx2.Response) -> None:
        if response.request.method == "POST":
            refusals.append((response.status_code, response.headers.get("content-type")))

    arrived: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        arrived.append(time.monotonic())

    async with sdk_client(world.url("tools"), "legacy", on_response) as client:
        # tools/list shows only what tools/call may name (the server's answer: JSON in legacy mode).
        listed = await client.list_tools()
        assert [tool.name for tool in listed.tools] == ["add", "get_weather", "countdown"]
        added = await client.call_tool("add", {"a": 2, "b": 3})
        assert not added.is_error and added.structured_content == {"result": 5}, added
        weather = await client.call_tool("get_weather", {"city": "Oslo"})  # allowed by get_*
        assert not weather.is_error, weather

        # Denied by name although get_* allows it: deniedTools wins.
        with pytest.raises(MCPError) as denied:
            await client.call_tool("get_secret", {})
        assert denied.value.error.code == -32602
        assert "get_secret" in denied.value.error.message and "deniedTools" in denied.value.error.message
        assert "xbackend/default/tools" in denied.value.error.message
        # Not in allowedTools.
        with pytest.raises(MCPError) as missing:
            await client.call_tool("delete_repo", {"repo": "weir"})
        assert missing.value.error.code == -32602 and "allowedTools" in missing.value.error.message
        assert missing.value.error.data["tool"] == "delete_repo"

        # The session goes on after refusals, and a streamed call flows as produced.
        counted = await client.call_tool(
            "countdown", {"steps": EVENT_COUNT, "interval": EVENT_INTERVAL}, progress_callback=on_progress
        )
        assert not counted.is_error, counted

    assert server.ran == ["add", "get_weather", "countdown"]
    assert server.calls() == ["add", "get_weather", "countdown"]  # refused calls never arrived
    # Each refusal was an HTTP 200 JSON-RPC error, as the server itself answers an unknown tool.
    assert refusals.count((200, "application/json")) >= 2, refusals
    delays = [round(a - e, 3) for a, e in zip(arrived, server.emitted, strict=True)]
    assert len(delays) == EVENT_COUNT and all(0 <= d < PROMPT for d in delays), delays
    # Mcp-Session-Id: set by the server on initialize, carried on every later request.
    sessions = [session for _, session in server.requests]
    assert sessions[0] is None and sessions[1] and set(sessions[1:]) == {sessions[1]}, server.requests
    assert {"GET", "DELETE"} <= {method for method, _ in server.requests}


async def test_deny_list_with_patterns_modern_client(world: World) -> None:
    """``deniedTools`` alone: exact names and ``*`` patterns refused, every other tool allowed."""
    server = world.servers["ops"]
    server.forget()
    answers: list[str | None] = []

    async def on_response(response: httpx2.Response) -> None:
        if response.request.method == "POST":
            answers.append(response.headers.get("content-type"))

    async with sdk_client(world.url("ops"), "auto", on_response) as client:
        listed = {tool.name for tool in (await client.list_tools()).tools}
        assert listed == ALL_TOOLS - {"admin_reset", "delete_repo"}
        for tool, args in (("admin_reset", {}), ("delete_repo", {"repo": "weir"})):
            with pytest.raises(MCPError) as refused:
                await client.call_tool(tool, args)
            assert refused.value.error.code == -32602 and tool in refused.value.error.message
        assert (await client.call_tool("add", {"a": 1, "b": 1})).structured_content == {"result": 2}
        secret = await client.call_tool("get_secret", {})  # not denied here, and no allow-list
        assert not secret.is_error
    assert server.ran == ["add", "get_secret"]
    assert "admin_reset" not in server.calls() and "delete_repo" not in server.calls()
    assert set(answers) == {"application/json"}, answers  # this server answers in JSON, the list included


async def _post(
    world: World, name: str, body: bytes, headers: dict[str, str] | None = None
) -> httpx.Response:
    async with httpx.AsyncClient(timeout=10) as client:
        return await client.post(
            world.url(name),
            content=body,
            headers={"content-type": "application/json", "accept": ACCEPT, **(headers or {})},
        )


def _call(tool: Any, id_: Any = 1, **extra: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": id_,
        "method": "tools/call",
        "params": {"name": tool, "arguments": {}},
        **extra,
    }


async def test_refusals_on_the_wire(world: World) -> None:
    """What a client gets for each kind of refusal, and that the server saw none of them."""
    server = world.servers["tools"]
    server.forget()

    # A string id comes back as it was sent, in a JSON-RPC error naming tool and backend.
    response = await _post(world, "tools", json.dumps(_call("get_secret", "call-7")).encode())
    assert response.status_code == 200 and response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["jsonrpc"] == "2.0" and body["id"] == "call-7", body
    assert body["error"]["code"] == -32602
    assert body["error"]["data"] == {
        "tool": "get_secret",
        "backend": "xbackend/default/tools",
        "refusedBy": "rbac_access_denied_matched_policy[weir-mcp-tool-denied]",
    }

    # Escapes are decoded before matching: "get_s\u0065cret" is get_secret.
    escaped = b'{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"get_s\\u0065cret"}}'
    assert (await _post(world, "tools", escaped)).json()["error"]["data"]["tool"] == "get_secret"

    # Duplicate keys: the last counts, for the gateway as for the server.
    twice = b'{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"add"},'
    twice += b'"params":{"name":"get_secret"}}'
    assert (await _post(world, "tools", twice)).json()["error"]["code"] == -32602

    # A name that is not a string.
    unnamed = (await _post(world, "tools", json.dumps(_call(7, 10)).encode())).json()
    assert unnamed["id"] == 10 and "params.name" in unnamed["error"]["message"], unnamed

    # Larger than the gateway reads: a second "params" past the limit could name another tool.
    filler = "x" * (1 << 20)
    big = json.dumps(_call("add", 11))[:-1] + f', "pad": "{filler}", "params": {{"name": "get_secret"}}}}'
    too_large = await _post(world, "tools", big.encode())
    assert too_large.status_code == 200 and too_large.json()["error"]["code"] == -32600, too_large.text[:300]
    assert "1048576 bytes" in too_large.json()["error"]["message"]

    # Bodies the gateway cannot read as one JSON-RPC message: 400, id null.
    for unreadable, headers in (
        (json.dumps([_call("add", 12)]).encode(), {}),  # a batch
        (b'{"jsonrpc":"2.0","id":13,"method":', {}),  # not JSON
        (json.dumps(_call("add", 14)).encode(), {"accept": "application/json"}),  # not an MCP POST
    ):
        refused = await _post(world, "tools", unreadable, headers)
        assert refused.status_code == 400, (unreadable[:40], refused.status_code, refused.text)
        assert refused.json()["id"] is None and refused.json()["error"]["code"] == -32600
        assert "JSON-RPC" in refused.json()["error"]["message"]

    assert server.posted == [], server.posted

    # Methods other than tools/call, and requests without a body, reach the server.
    await _post(world, "tools", json.dumps({"jsonrpc": "2.0", "id": 15, "method": "ping"}).encode())
    async with httpx.AsyncClient(timeout=10) as client:
        await client.get(world.url("tools"), headers={"accept": "text/event-stream"})
        await client.delete(world.url("tools"))
    assert server.posted == [("ping", None)]
    assert [method for method, _ in server.requests[-3:]] == ["POST", "GET", "DELETE"]


def _values(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Sample name and labels → value, from the text format (parsed strictly)."""
    out = {}
    for family in metrics.parse(text):
        if family.name.startswith("weir_mcp_tool_"):
            for sample in family.samples:
                out[(family.name + sample.name_suffix, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def _key(name: str, backend: str, tool: str, **extra: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    labels = {"namespace": "default", "xbackend": backend, "tool": tool, **extra}
    return (name, tuple(sorted(labels.items())))


async def test_metrics_per_backend_and_tool(world: World) -> None:
    flush = mcp.ACCESS_LOG_FLUSH_MS / 1000  # how long Envoy gathers access log entries before sending
    await asyncio.sleep(2 * flush)  # the earlier tests' entries have arrived
    before = _values(metrics.render(accesslog.collect()))
    async with sdk_client(world.url("tools"), "legacy") as client:
        for _ in range(2):
            assert not (await client.call_tool("add", {"a": 1, "b": 2})).is_error
        with pytest.raises(MCPError):
            await client.call_tool("get_secret", {})
        with pytest.raises(MCPError):
            await client.call_tool("delete_repo", {"repo": "x"})
    await _post(world, "tools", json.dumps([_call("add")]).encode())  # a batch: refused, unreadable
    down = await _post(world, "down", json.dumps(_call("add")).encode())
    assert down.status_code == 503, down.text  # allowed, forwarded, nobody listening
    refused = await _post(world, "down", json.dumps(_call("rm")).encode())
    assert refused.json()["error"]["code"] == -32602
    void = await _post(world, "void", json.dumps(_call("add")).encode())
    assert void.status_code == 503, void.text  # no address: no upstream host at all

    calls, denied, errors = (
        "weir_mcp_tool_calls_total",
        "weir_mcp_tool_denied_total",
        "weir_mcp_tool_errors_total",
    )
    durations = "weir_mcp_tool_call_duration_seconds_count"
    expected = {
        _key(calls, "tools", "add"): 2,
        _key(durations, "tools", "add"): 2,
        _key(calls, "tools", "get_secret"): 1,
        _key(denied, "tools", "get_secret"): 1,
        _key(calls, "tools", "delete_repo"): 1,
        _key(denied, "tools", "delete_repo"): 1,
        _key(calls, "tools", accesslog.UNREADABLE): 1,
        _key(denied, "tools", accesslog.UNREADABLE): 1,
        _key(calls, "down", "add"): 1,
        _key(errors, "down", "add"): 1,
        _key(durations, "down", "add"): 1,
        _key(calls, "down", "rm"): 1,
        _key(denied, "down", "rm"): 1,
        _key(calls, "void", "add"): 1,
        _key(errors, "void", "add"): 1,
    }
    unchanged = [
        _key(errors, "tools", "add"),
        _key(denied, "tools", "add"),
        _key(durations, "tools", "get_secret"),
        _key(errors, "tools", "get_secret"),
    ]

    def moved() -> dict[Any, float]:
        now = _values(metrics.render(accesslog.collect()))
        return {key: now.get(key, 0) - before.get(key, 0) for key in [*expected, *unchanged]}

    with contextlib.suppress(AssertionError):  # the exact comparison below says what is missing
        await eventually(lambda: all(moved()[k] >= v for k, v in expected.items()), timeout=5)
    await asyncio.sleep(2 * flush)  # nothing else may arrive
    assert moved() == {**expected, **dict.fromkeys(unchanged, 0)}

    # The same families on weir's Prometheus endpoint.
    exposed = _values(await world.scrape())
    assert (
        exposed[_key(denied, "tools", "get_secret")]
        == _values(metrics.render(accesslog.collect()))[_key(denied, "tools", "get_secret")]
    )
    assert _key("weir_mcp_tool_call_duration_seconds_bucket", "tools", "add", le="+Inf") in exposed


def _list_request(id_: Any = 1) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": id_, "method": "tools/list", "params": {}}).encode()


def _names(text: str) -> list[Any]:
    return [tool["name"] for tool in json.loads(text)["result"]["tools"]]


async def test_tools_list_answers_on_the_wire(world: World) -> None:
    """Each form of answer: filtered, or passed unchanged, or refused as the fail-closed rule says."""
    allowed = ["add", "get_weather"]
    RAW_SEEN.clear()
    json_answer = await _post(
        world, "raw", _list_request("l-1"), {"x-answer": "json", "accept-encoding": "gzip"}
    )
    assert json_answer.status_code == 200, json_answer.text
    assert _names(json_answer.text) == allowed
    body = json_answer.json()
    assert body["id"] == "l-1" and body["result"]["nextCursor"] == "c2"  # the rest is kept
    assert body["result"]["tools"][0] == {
        "name": "add",
        "description": "tool add",
        "inputSchema": {"type": "object"},
    }
    assert RAW_SEEN == [None]  # the gateway asked for an answer it can read

    sse = await _post(world, "raw", _list_request(2), {"x-answer": "sse"})
    assert sse.status_code == 200 and sse.headers["content-type"] == "text/event-stream"
    events = [e for e in sse.text.replace("\r\n", "\n").split("\n\n") if e]
    assert events[0] == "id: 0\ndata:" and "notifications/progress" in events[1], events
    data = "\n".join(line.removeprefix("data: ") for line in events[2].split("\n")[1:])
    assert events[2].startswith("event: message\n") and _names(data) == allowed

    escaped = await _post(world, "raw", _list_request(3), {"x-answer": "escaped"})
    assert _names(escaped.text) == ["get_weather"], escaped.text  # get_s\u0065cret and add-named-get_secret

    error = await _post(world, "raw", _list_request(4), {"x-answer": "rpc-error"})
    assert error.status_code == 200 and error.json()["error"]["code"] == -32601  # nothing to filter

    passed = await _post(world, "raw", _list_request(5), {"x-answer": "error"})
    assert passed.status_code == 503 and passed.text == "overloaded"  # no tools come of an error status

    for kind, reason in (
        ("gzip", "Content-Encoding gzip"),
        ("text", "text/plain"),
        ("truncated", "not valid JSON"),
        ("unnamed", "string name"),
        ("sse-broken", "not valid JSON"),
    ):
        refused = await _post(world, "raw", _list_request(f"r-{kind}"), {"x-answer": kind})
        assert refused.status_code == 502, (kind, refused.status_code, refused.text)
        assert refused.headers["content-type"] == "application/json"
        error_body = refused.json()
        assert error_body["id"] == f"r-{kind}" and error_body["error"]["code"] == -32603, error_body
        assert reason in error_body["error"]["data"]["reason"], (kind, error_body)
        assert "xbackend/default/raw" in error_body["error"]["message"]


async def test_tools_list_metrics(world: World) -> None:
    flush = mcp.ACCESS_LOG_FLUSH_MS / 1000
    await asyncio.sleep(2 * flush)

    def values() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        out = {}
        for family in metrics.parse(metrics.render(accesslog.collect())):
            if family.name in ("weir_mcp_tool_lists_total", "weir_mcp_tools_filtered_total"):
                for sample in family.samples:
                    out[(family.name, tuple(sorted(sample.labels.items())))] = sample.value
        return out

    before = values()
    for kind in ("json", "json", "rpc-error", "text", "error"):
        await _post(world, "raw", _list_request(), {"x-answer": kind})

    def key(name: str, **labels: str) -> tuple[str, tuple[tuple[str, str], ...]]:
        return (name, tuple(sorted({"namespace": "default", "xbackend": "raw", **labels}.items())))

    expected = {
        key("weir_mcp_tool_lists_total", outcome="filtered"): 2,
        key("weir_mcp_tool_lists_total", outcome="refused"): 1,
        key("weir_mcp_tool_lists_total", outcome="passed"): 1,
        key("weir_mcp_tools_filtered_total", tool="get_secret"): 2,
        key("weir_mcp_tools_filtered_total", tool="delete_repo"): 2,
    }

    def moved() -> dict[Any, float]:
        now = values()
        return {k: now.get(k, 0) - before.get(k, 0) for k in expected}

    with contextlib.suppress(AssertionError):
        await eventually(lambda: moved() == expected, timeout=5)
    assert moved() == expected
    exposed = await world.scrape()
    assert 'weir_mcp_tools_filtered_total{namespace="default",xbackend="raw",tool="get_secret"}' in exposed
