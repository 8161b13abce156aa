"""``docs/ai-egress.md``, run as written: the walk-through's commands through real weir, Envoy and servers.

The doc marks what it runs and what it shows:

- ``<!-- file: PATH -->`` before a YAML block: the block is that file of
  ``examples/ai-egress`` (without its leading comment lines);
- ``<!-- step: NAME -->`` before a console block: ``$ COMMAND`` lines, each
  followed by its output as the doc shows it (none: not shown; a line
  ``...``: an excerpt, each part between them found in order, line for line);
- ``<!-- upstream-request: NAME -->``: the request the ``api.openai.com``
  server received for step NAME;
- ``<!-- script: NAME -->`` / ``<!-- script-output: NAME -->``: a Python
  script, run as it is, and what it prints;
- ``<!-- translate-message: NAME -->`` and ``<!-- kubernetes -->``: checked
  without running weir (:func:`test_key_missing_message_is_weirs`,
  :func:`test_kubernetes_commands_match_the_manifests`).

:func:`test_walk_through_runs_as_written` runs every step in the doc's
order, through ``bash`` from a folder holding a copy of
``examples/ai-egress`` (``weir run`` in the background), with
everything on loopback: a DNS stub answers ``api.openai.com`` and
``mcp.example.com`` with 127.0.0.x; a recording TLS upstream plays
``api.openai.com`` and the ``mcp`` SDK's server (under hypercorn, TLS)
plays ``mcp.example.com``, both with certificates from a test CA that
``--system-trust-file`` puts in the place of the system trust store. What
the test changes, and asserts it changes nothing else:

- the copy's ``port: {port: 443}`` becomes the test servers' port (tests
  cannot assume they may bind 443);
- ``weir run`` gets ``--dns-resolver``, ``--system-trust-file``,
  ``--egress-denied-cidrs`` (the servers are on loopback, which weir denies by
  default), ``--bind-address`` and ``--admin-address`` on a loopback address
  of its own instead of ``127.0.0.1`` (``127.0.0.1:8080`` and ``:9900`` may be
  taken), which replaces ``127.0.0.1:8080`` and ``127.0.0.1:9900`` in the
  commands; ``weir status`` gets that ``--admin-address``.

The ``mcp`` script's URL gets the same address. Outputs are compared after
mapping that address and port back (and leaving out of the Gateway socket's
request count the requests the test sends itself while the key rotates:
:meth:`Walk.as_the_doc_says`), normalising only what varies between runs
(:func:`normalise`). Each step's
hooks (:class:`Walk`) check what the doc claims beyond its outputs: the key
arrives while the client sent none, rotation fails no request, nothing
leaves while the Secret is missing, the MCP server never sees refused
calls. ``WEIR_UPDATE_DOCS=1`` rewrites the outputs the doc shows in full.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import random
import re
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml
from hypercorn.asyncio import serve as hypercorn_serve
from hypercorn.config import Config as HypercornConfig
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from typer.testing import CliRunner
from weir_harness import eventually, pid_alive

from weir import metrics
from weir.cli import app
from weir.testkit import (
    CertAuthority,
    DnsStub,
    RecordingUpstream,
    SeenRequest,
    free_port,
    make_ca,
    require_loopback,
    server_ssl_context,
)

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "ai-egress.md"
EXAMPLES = REPO / "examples" / "ai-egress"
UPDATE = os.environ.get("WEIR_UPDATE_DOCS") == "1"
WEIR = Path(sys.executable).with_name("weir")

OPENAI, MCP_HOST = "api.openai.com", "mcp.example.com"
OPENAI_IP, MCP_IP = "127.0.0.71", "127.0.0.72"
#: What the doc's commands and outputs say, and the test replaces.
DOC_ADDRESS, DOC_PORT = "127.0.0.1", 443
GATEWAY_PORT, ADMIN_PORT = 8080, 9900
#: What the test gives ``weir run`` so that the loopback test servers are reachable.
TEST_DENIED_CIDRS = "10.0.0.0/8,169.254.0.0/16"

#: The steps of the walk-through, in the doc's order: the test knows what each one is for.
STEPS = (
    "validate",
    "run",
    "call-without-key",
    "call-with-own-key",
    "status-accepted",
    "translate-redacted",
    "rotate",
    "call-after-rotation",
    "remove-secret",
    "refused",
    "status-refused",
    "restore-secret",
    "call-after-restore",
    "mcp-wire",
    "mcp-status",
    "metrics-mcp",
    "metrics-openai",
)

# --------------------------------------------------------------------------- the doc

BLOCK = re.compile(
    r"<!-- (?P<kind>[a-z-]+)(?:: (?P<name>\S+))? -->\n```(?P<lang>\w*)\n(?P<body>.*?)```\n", re.DOTALL
)


@dataclass(frozen=True)
class Block:
    kind: str
    name: str
    body: str
    start: int  # of the body, in the doc's text
    end: int


def blocks(text: str | None = None) -> list[Block]:
    text = DOC.read_text() if text is None else text
    return [
        Block(m["kind"], m["name"] or "", m["body"], m.start("body"), m.end("body"))
        for m in BLOCK.finditer(text)
    ]


def block(kind: str, name: str) -> Block:
    [found] = [b for b in blocks() if (b.kind, b.name) == (kind, name)]
    return found


@dataclass
class Command:
    text: str
    #: The output lines the doc shows (empty: not shown).
    shown: list[str] = field(default_factory=list)

    @property
    def excerpt(self) -> bool:
        return "..." in self.shown


def commands(body: str) -> list[Command]:
    out: list[Command] = []
    for line in body.splitlines():
        if line.startswith("$ "):
            out.append(Command(line[2:]))
        else:
            assert out, f"output before any command: {line!r}"
            out[-1].shown.append(line)
    return out


def without_leading_comments(text: str) -> str:
    lines = text.splitlines(keepends=True)
    while lines and lines[0].startswith("#"):
        lines.pop(0)
    return "".join(lines)


def secret_value(folder: Path) -> str:
    doc = yaml.safe_load((folder / "openai-secret.yaml").read_text())
    value: str = doc["stringData"]["api-key"]
    return value


# --------------------------------------------------------------------------- comparing outputs

_NORMALISE = (
    (re.compile(r"^date: .*$", re.MULTILINE | re.IGNORECASE), "date: <date>"),
    (re.compile(r"lastTransitionTime: '[^']*'"), "lastTransitionTime: <time>"),
    (re.compile(r"curl/[0-9.]+"), "curl/<version>"),
    (re.compile(r"^(\w+_sum\{[^}]*\}) \S+$", re.MULTILINE), r"\1 <seconds>"),
)
#: The count of the Gateway socket's 2xx responses, which includes the test's own requests.
_SOCKET_2XX = re.compile(r'^(weir_downstream_requests_total\{[^}]*code_class="2xx"\}) (\d+)$', re.MULTILINE)


def normalise(text: str) -> str:
    """``text`` with what varies between runs replaced: dates, times, durations, curl's version."""
    text = text.replace("\r\n", "\n")
    for pattern, replacement in _NORMALISE:
        text = pattern.sub(replacement, text)
    return text


def mismatch(shown: list[str], actual: str) -> str | None:
    """Why the output the doc shows is not ``actual`` (``None``: it is)."""
    got = normalise(actual).rstrip("\n").split("\n")
    want = normalise("\n".join(shown)).rstrip("\n").split("\n")
    if "..." not in want:
        if got == want:
            return None
        return "shown:\n" + "\n".join(want) + "\n\nactual:\n" + "\n".join(got)
    parts: list[list[str]] = [[]]
    for line in want:
        if line == "...":
            parts.append([])
        else:
            parts[-1].append(line)
    at = 0
    for part in (p for p in parts if p):
        found = next((i for i in range(at, len(got) - len(part) + 1) if got[i : i + len(part)] == part), None)
        if found is None:
            return "not found in order:\n" + "\n".join(part) + "\n\nactual:\n" + "\n".join(got)
        at = found + len(part)
    return None


def render_request(seen: SeenRequest) -> str:
    """A request as the doc shows it: HTTP/1.1-style text, ``:authority`` as ``host``."""
    lines = [f"{seen.method} {seen.path} HTTP/{seen.http_version}", f"host: {seen.host}"]
    lines += [f"{name}: {value}" for name, value in seen.headers]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- the stand-ins


@dataclass
class ToolServer:
    """The MCP server of the walk-through: five tools, and a record of what reached it."""

    ip: str
    port: int
    #: (JSON-RPC method, tool name) of every message POSTed to it, as it arrived.
    posted: list[tuple[str | None, str | None]] = field(default_factory=list)
    ran: list[str] = field(default_factory=list)

    def app(self) -> Any:
        server = MCPServer("code-tools", log_level="WARNING")

        @server.tool()
        def list_files(path: str = "/") -> str:
            """List the files under a path."""
            self.ran.append("list_files")
            return "README.md\nsrc/"

        @server.tool()
        def get_file(path: str) -> str:
            """Read a file."""
            self.ran.append("get_file")
            return f"contents of {path}"

        @server.tool()
        def search_code(query: str) -> str:
            """Search the code."""
            self.ran.append("search_code")
            return f"3 matches for {query!r}"

        @server.tool()
        def get_secret(name: str) -> str:
            """Read a secret: agents must not."""
            self.ran.append("get_secret")
            return "hunter2"

        @server.tool()
        def delete_file(path: str) -> str:
            """Delete a file: agents must not."""
            self.ran.append("delete_file")
            return f"deleted {path}"

        security = TransportSecuritySettings(allowed_hosts=[MCP_HOST])
        inner = server.streamable_http_app(
            streamable_http_path="/mcp", transport_security=security, host=self.ip
        )

        async def recording(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] != "http" or scope["method"] != "POST":
                await inner(scope, receive, send)
                return
            received: list[Any] = []
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

    def calls(self) -> list[str | None]:
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
async def serve_tools(server: ToolServer, ca: CertAuthority, tmp: Path) -> AsyncIterator[ToolServer]:
    """The MCP server under hypercorn, TLS with a certificate for mcp.example.com (ALPN h2, http/1.1)."""
    require_loopback(server.ip, what="MCP test server")
    files = ca.issue_server_cert(MCP_HOST).write(tmp, "mcp")
    config = HypercornConfig()
    config.bind = [f"{server.ip}:{server.port}"]
    config.certfile, config.keyfile = str(files.cert), str(files.key)
    config.alpn_protocols = ["h2", "http/1.1"]
    config.accesslog = None
    config.graceful_timeout = 1
    stop = asyncio.Event()
    task = asyncio.create_task(hypercorn_serve(server.app(), config, shutdown_trigger=stop.wait))
    try:
        for _ in range(500):
            if task.done():
                task.result()
                raise AssertionError("the MCP test server stopped at once")
            try:
                _, writer = await asyncio.open_connection(server.ip, server.port)
            except OSError:
                await asyncio.sleep(0.01)
                continue
            writer.close()
            await writer.wait_closed()
            break
        yield server
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


def _bindable(ip: str, port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((ip, port))
        except OSError:
            return False
    return True


def upstream_port() -> int:
    """A port free on both test servers' addresses: the one ``port: {port: 443}`` becomes."""
    for _ in range(50):
        port = free_port(OPENAI_IP)
        if _bindable(MCP_IP, port):
            return port
    raise AssertionError("no port free on both test server addresses")


def gateway_address() -> str:
    """A loopback address where the doc's ports (8080, 9900) are free."""
    candidates = [f"127.0.0.{n}" for n in range(100, 200)]
    random.shuffle(candidates)
    for ip in candidates:
        if _bindable(ip, GATEWAY_PORT) and _bindable(ip, ADMIN_PORT):
            return ip
    raise AssertionError("no loopback address with ports 8080 and 9900 free")


# --------------------------------------------------------------------------- the walk


@dataclass
class Load:
    """An application without a key, sending requests in a loop (while the key rotates)."""

    stop: asyncio.Event
    tasks: list[asyncio.Task[None]]
    #: The status of every response, in the order they came.
    statuses: list[int]
    envoy_pid: int


@dataclass
class Walk:
    """One run of the walk-through: the stand-ins, the running weir, what each step saw."""

    work: Path
    address: str
    port: int
    dns: DnsStub
    trust: Path
    openai: RecordingUpstream
    tools: ToolServer
    key: str
    weir: asyncio.subprocess.Process | None = None
    envoy_pid: int = 0
    #: Outputs of weir's own commands (status, translate, metrics), searched for the key at the end.
    outputs: list[str] = field(default_factory=list)
    #: Fresh outputs for the doc (WEIR_UPDATE_DOCS): block start → body.
    fresh: dict[int, str] = field(default_factory=dict)
    #: How many requests api.openai.com had received before the step (for hooks that count).
    seen_before: int = 0
    load: Load | None = None
    #: The key after the rotation step.
    new_key: str = ""
    refused_version: str | None = None

    # ------------------------------------------------------------ running the doc's text

    def rewrite(self, command: str) -> str:
        """The doc's command as the test runs it (see the module's docstring)."""
        text = command.replace(f"{DOC_ADDRESS}:{GATEWAY_PORT}", f"{self.address}:{GATEWAY_PORT}")
        text = text.replace(f"{DOC_ADDRESS}:{ADMIN_PORT}", f"{self.address}:{ADMIN_PORT}")
        named = re.search(rf"\b{re.escape(DOC_ADDRESS)}\b", text)
        assert named is None, f"the doc's command names {DOC_ADDRESS} another way: {command}"
        if text.startswith("weir run"):
            text += (
                f" --dns-resolver {self.dns.host}:{self.dns.port} --system-trust-file {self.trust}"
                f" --egress-denied-cidrs {TEST_DENIED_CIDRS} --bind-address {self.address}"
                f" --admin-address {self.address}:{ADMIN_PORT}"
            )
        elif text.startswith("weir status"):
            text += f" --admin-address {self.address}:{ADMIN_PORT}"
        return text

    def as_the_doc_says(self, output: str) -> str:
        """``output`` as a reader running the walk-through sees it.

        The test's address and port become the doc's, and the Gateway
        socket's count of 2xx responses loses the requests the test sent
        itself (during the rotation): all answered 200, as
        :meth:`check_rotate` asserts.
        """
        output = re.sub(rf"\b{re.escape(self.address)}\b", DOC_ADDRESS, output)
        output = re.sub(rf"\b{self.port}\b", str(DOC_PORT), output)
        own = len(self.load.statuses) if self.load is not None else 0
        return _SOCKET_2XX.sub(lambda m: f"{m[1]} {int(m[2]) - own}", output)

    def env(self) -> dict[str, str]:
        return {**os.environ, "PATH": f"{WEIR.parent}{os.pathsep}{os.environ.get('PATH', '')}"}

    async def shell(self, command: str) -> str:
        proc = await asyncio.create_subprocess_exec(
            "bash",
            "-c",
            command,
            cwd=self.work,
            env=self.env(),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), 60)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        text = out.decode()
        assert proc.returncode == 0, f"`{command}` exited {proc.returncode}:\n{text}"
        return text

    async def step(self, name: str, b: Block) -> None:
        hooks = getattr(self, "before_" + name.replace("-", "_"), None)
        if hooks is not None:
            await hooks()
        fresh = ""
        for cmd in commands(b.body):
            if cmd.text.startswith("weir run"):
                await self.start_weir(self.rewrite(cmd.text))
                fresh += f"$ {cmd.text}\n"
                continue
            output = await self.run_until_shown(name, cmd)
            fresh += f"$ {cmd.text}\n" + (output.replace("\r\n", "\n") if cmd.shown else "")
            if not fresh.endswith("\n"):
                fresh += "\n"
        if not any(c.excerpt for c in commands(b.body)):
            self.fresh[b.start] = fresh
        check = getattr(self, "check_" + name.replace("-", "_"), None)
        if check is not None:
            await check()

    async def run_until_shown(self, name: str, cmd: Command) -> str:
        """Run ``cmd``; metrics are retried until they show what the doc shows (Envoy flushes them)."""
        retry = name.startswith("metrics-") and not UPDATE
        if name.startswith("metrics-") and UPDATE:
            await asyncio.sleep(2)  # what the doc shows has arrived (Envoy flushes every 0.5 s)
        deadline = time.monotonic() + 5
        while True:
            output = self.as_the_doc_says(await self.shell(self.rewrite(cmd.text)))
            why = mismatch(cmd.shown, output) if cmd.shown else None
            if why is None or not retry or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.25)
        if cmd.text.startswith(("weir", "curl -s 127.0.0.1:9900")):
            self.outputs.append(output)
        if why is not None and not (UPDATE and not cmd.excerpt):
            raise AssertionError(f"step {name}: `{cmd.text}` does not print what the doc shows.\n{why}")
        return output

    async def start_weir(self, command: str) -> None:
        with (
            (self.work / "weir.stdout").open("wb") as stdout,
            (self.work / "weir.stderr").open("wb") as stderr,
        ):
            self.weir = await asyncio.create_subprocess_exec(
                "bash", "-c", "exec " + command, cwd=self.work, env=self.env(), stdout=stdout, stderr=stderr
            )

        async def ready() -> bool:
            assert self.weir is not None and self.weir.returncode is None, (
                self.work / "weir.stderr"
            ).read_text()
            try:
                async with httpx.AsyncClient(timeout=1) as client:
                    return (await client.get(self.admin("/ready"))).status_code == 200
            except httpx.HTTPError:
                return False

        await eventually(ready, timeout=30, interval=0.1)
        self.envoy_pid = (await self.status())["dataPlane"]["envoyPid"]

    async def stop_weir(self) -> None:
        if self.weir is None or self.weir.returncode is not None:
            return
        self.weir.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(self.weir.wait(), 20)
        finally:
            if self.weir.returncode is None:
                self.weir.kill()
                await self.weir.wait()
        assert self.weir.returncode == 0, (self.work / "weir.stderr").read_text()[-3000:]

    def admin(self, path: str) -> str:
        return f"http://{self.address}:{ADMIN_PORT}{path}"

    def gateway(self, path: str) -> str:
        return f"http://{self.address}:{GATEWAY_PORT}{path}"

    async def status(self) -> dict[str, Any]:
        async with httpx.AsyncClient(timeout=5) as client:
            response = await client.get(self.admin("/status"))
        response.raise_for_status()
        data: dict[str, Any] = response.json()
        return data

    async def policy_accepted(self) -> str | None:
        for obj in (await self.status())["objects"]:
            if (obj["kind"], obj["name"]) == ("BackendCredentialPolicy", "openai-key"):
                [ancestor] = obj["status"]["ancestors"]
                return str(next(c["status"] for c in ancestor["conditions"] if c["type"] == "Accepted"))
        return None

    def last_request(self) -> SeenRequest:
        assert self.openai.requests, f"{OPENAI} received nothing"
        return self.openai.requests[-1]

    def compare_request(self, name: str) -> None:
        b = block("upstream-request", name)
        actual = render_request(self.last_request())
        if UPDATE:
            self.fresh[b.start] = actual
            return
        why = mismatch(b.body.splitlines(), actual)
        assert why is None, f"upstream-request {name}: {OPENAI} did not receive what the doc shows.\n{why}"

    # ------------------------------------------------------------ what each step claims

    async def before_call_without_key(self) -> None:
        self.seen_before = len(self.openai.requests)

    async def check_call_without_key(self) -> None:
        [cmd] = commands(block("step", "call-without-key").body)
        assert "authorization" not in cmd.text.lower(), "the application must send no key"
        assert len(self.openai.requests) == self.seen_before + 1
        seen = self.last_request()
        assert (seen.sni, seen.host, seen.path) == (OPENAI, OPENAI, "/v1/models")
        assert seen.header_values("authorization") == [f"Bearer {self.key}"]
        self.compare_request("call-without-key")

    async def check_call_with_own_key(self) -> None:
        [cmd] = commands(block("step", "call-with-own-key").body)
        own = re.search(r'-H "Authorization: (Bearer [^"]+)"', cmd.text)
        assert own is not None, cmd.text
        seen = self.last_request()
        assert seen.header_values("authorization") == [f"Bearer {self.key}"]
        assert own[1] not in str(seen.headers), "the client's own Authorization reached the upstream"
        self.compare_request("call-with-own-key")

    async def before_rotate(self) -> None:
        """Keep requests going (an application without a key) while the Secret is edited."""
        self.seen_before = len(self.openai.requests)
        stop = asyncio.Event()
        statuses: list[int] = []

        async def client() -> None:
            async with httpx.AsyncClient(timeout=5) as http:
                while not stop.is_set():
                    statuses.append((await http.get(self.gateway("/v1/chat/completions"))).status_code)
                    await asyncio.sleep(0.005)

        pid = (await self.status())["dataPlane"]["envoyPid"]
        self.load = Load(stop, [asyncio.create_task(client()) for _ in range(2)], statuses, pid)
        await asyncio.sleep(0.3)

    async def check_rotate(self) -> None:
        new = secret_value(self.work / "examples" / "ai-egress")
        assert new != self.key, "the rotation step did not change the key"
        assert self.load is not None
        try:

            def rotated() -> bool:
                return any(
                    r.header("authorization") == f"Bearer {new}"
                    for r in self.openai.requests[self.seen_before :]
                )

            await eventually(rotated, timeout=10)
            await asyncio.sleep(0.3)
        finally:
            self.load.stop.set()
            await asyncio.gather(*self.load.tasks)
        statuses = self.load.statuses
        assert statuses and set(statuses) == {200}, sorted(set(statuses))
        values = [tuple(r.header_values("authorization")) for r in self.openai.requests[self.seen_before :]]
        assert len(values) == len(statuses)
        assert set(values) <= {(f"Bearer {self.key}",), (f"Bearer {new}",)}, set(values)
        assert values[0] == (f"Bearer {self.key}",) and values[-1] == (f"Bearer {new}",)
        assert (await self.status())["dataPlane"]["envoyPid"] == self.load.envoy_pid, "Envoy was restarted"
        self.new_key = new

    async def check_call_after_rotation(self) -> None:
        assert self.last_request().header_values("authorization") == [f"Bearer {self.new_key}"]
        self.compare_request("call-after-rotation")

    async def check_remove_secret(self) -> None:
        async def refused() -> bool:
            status = await self.status()
            return await self.policy_accepted() == "False" and bool(status["dataPlane"]["accepted"])

        await eventually(refused, timeout=10, interval=0.05)
        status = await self.status()
        self.refused_version = status["dataPlane"]["configVersion"]
        # The XBackend stays accepted, and says why its requests are refused.
        [xbackend] = [o for o in status["objects"] if (o["kind"], o["name"]) == ("XBackend", "openai")]
        [parent] = xbackend["status"]["parents"]
        accepted = next(c for c in parent["conditions"] if c["type"] == "Accepted")
        assert accepted["status"] == "True", accepted
        why = "refused (500) until BackendCredentialPolicy default/openai-key can be used"
        assert why in accepted["message"], accepted
        self.seen_before = len(self.openai.requests)

    async def check_refused(self) -> None:
        assert len(self.openai.requests) == self.seen_before, "a request left without its credential"

    async def check_restore_secret(self) -> None:
        async def restored() -> bool:
            status = await self.status()
            data_plane = status["dataPlane"]
            return (
                await self.policy_accepted() == "True"
                and bool(data_plane["accepted"])
                and data_plane["configVersion"] != self.refused_version
            )

        await eventually(restored, timeout=10, interval=0.05)
        self.seen_before = len(self.openai.requests)

    async def check_call_after_restore(self) -> None:
        assert len(self.openai.requests) == self.seen_before + 1
        assert self.last_request().header_values("authorization") == [f"Bearer {self.new_key}"]

    async def check_mcp_wire(self) -> None:
        assert "get_secret" not in self.tools.calls(), self.tools.posted

    async def agent(self) -> None:
        """The doc's ``mcp`` SDK script, run as it is (with the test's address), and what it prints."""
        script = block("script", "agent")
        text = self.rewrite(script.body)
        path = self.work / "agent.py"
        path.write_text(text)
        before = list(self.tools.posted)
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(path),
            cwd=self.work,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), 60)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        assert proc.returncode == 0, err.decode()
        shown = block("script-output", "agent")
        if UPDATE:
            self.fresh[shown.start] = out.decode()
        else:
            why = mismatch(shown.body.splitlines(), out.decode())
            assert why is None, f"the agent script does not print what the doc shows.\n{why}"
        arrived = self.tools.posted[len(before) :]
        methods = [method for method, _ in arrived]
        # tools/list reached the server, which listed five tools; the agent printed the three it may call.
        assert "tools/list" in methods, arrived
        assert self.tools.calls() == ["search_code"], arrived  # the refused calls never arrived
        assert self.tools.ran == ["search_code"]


def mcp_agent_position() -> int:
    """Where the agent script is in the doc, among the steps: it runs between them in that order."""
    return block("script", "agent").start


# --------------------------------------------------------------------------- tests


def test_doc_steps_are_the_walk_through() -> None:
    names = [b.name for b in blocks() if b.kind == "step"]
    assert tuple(names) == STEPS, "the doc's steps changed: say in this test what each new one claims"
    hooks = {m.split("_", 1)[1].replace("_", "-") for m in dir(Walk) if m.startswith(("before_", "check_"))}
    assert hooks <= set(STEPS), hooks - set(STEPS)
    kinds = {b.kind for b in blocks()}
    assert kinds == {
        "file",
        "step",
        "upstream-request",
        "script",
        "script-output",
        "translate-message",
        "kubernetes",
        # The credentials section's own, run by test_ai_credentials_doc.py.
        "credentials-file",
        "credentials-output",
    }


def test_doc_yaml_is_the_examples() -> None:
    shown = {b.name: b.body for b in blocks() if b.kind == "file"}
    files = {f"examples/ai-egress/{p.name}" for p in EXAMPLES.iterdir()}
    assert set(shown) == files, "the doc must show every manifest it runs"
    for name, body in shown.items():
        assert body == without_leading_comments((REPO / name).read_text()), (
            f"{name} is not what the doc shows"
        )


def translate(folder: Path) -> dict[str, Any]:
    result = CliRunner().invoke(app, ["translate", "-f", str(folder)])
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = yaml.safe_load(result.stdout)
    return data


def credential_conditions(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    [policy] = [r for r in data["resources"] if r["kind"] == "BackendCredentialPolicy"]
    [ancestor] = policy["status"]["ancestors"]
    return {c["type"]: c for c in ancestor["conditions"]}


def test_key_missing_message_is_weirs(tmp_path: Path) -> None:
    """The message the doc quotes for a Secret without the key: the Secret's key misspelt."""
    folder = tmp_path / "ai-egress"
    folder.mkdir()
    for path in EXAMPLES.iterdir():
        (folder / path.name).write_text(path.read_text())
    secret = folder / "openai-secret.yaml"
    text = secret.read_text()
    assert text.count("\n  api-key: ") == 1
    secret.write_text(text.replace("\n  api-key: ", "\n  apikey: "))
    conditions = credential_conditions(translate(folder))
    [message] = block("translate-message", "key-missing").body.splitlines()
    assert (conditions["ResolvedRefs"]["status"], conditions["ResolvedRefs"]["reason"]) == (
        "False",
        "InvalidCertificateRef",
    )
    assert conditions["ResolvedRefs"]["message"] == message
    assert conditions["Accepted"]["message"].startswith(message.rstrip("."))
    assert secret_value(EXAMPLES) not in json.dumps(conditions)


def test_kubernetes_commands_match_the_manifests(tmp_path: Path) -> None:
    """The doc's kubectl commands create the Secret the policy reads and apply every other manifest."""
    body = block("kubernetes", "").body
    created = re.search(r"kubectl create secret generic (\S+) --from-literal=([^=]+)=", body)
    assert created is not None, body
    name, key = created[1], created[2]
    secret = yaml.safe_load((EXAMPLES / "openai-secret.yaml").read_text())
    assert (name, key) == (secret["metadata"]["name"], *secret["stringData"])
    policies = [
        d
        for d in yaml.safe_load_all((EXAMPLES / "openai.yaml").read_text())
        if d["kind"] == "BackendCredentialPolicy"
    ]
    assert [p["spec"]["secretRef"] for p in policies] == [{"name": name, "key": key}]
    applied = re.search(r"kubectl apply((?: -f \S+)+)", body)
    assert applied is not None, body
    files = {Path(f).name for f in applied[1].split(" -f ") if f.strip()}
    assert files == {p.name for p in EXAMPLES.iterdir()} - {"openai-secret.yaml"}
    # The Secret as `kubectl create secret generic` writes it (base64 under data): the policy reads it.
    folder = tmp_path / "cluster"
    folder.mkdir()
    for file in files:
        (folder / file).write_text((EXAMPLES / file).read_text())
    value = "sk-from-kubectl"
    created_secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": "default"},
        "data": {key: base64.b64encode(value.encode()).decode()},
    }
    (folder / "secret.yaml").write_text(yaml.safe_dump(created_secret))
    conditions = credential_conditions(translate(folder))
    assert conditions["Accepted"]["status"] == "True", conditions


def metric_table() -> dict[str, tuple[str, tuple[str, ...]]]:
    """The doc's table of metric families: name → (type, labels)."""
    text = DOC.read_text()
    table = text[text.index("| family | type | labels |") :]
    rows: dict[str, tuple[str, tuple[str, ...]]] = {}
    for line in table.splitlines()[2:]:
        if not line.startswith("| `"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        labels = tuple(sorted(re.findall(r"`(\w+)`", cells[2])))
        rows[cells[0].strip("`")] = (cells[1], labels)
    return rows


async def test_walk_through_runs_as_written(tmp_path: Path) -> None:
    work = tmp_path / "walk"
    copy = work / "examples" / "ai-egress"
    copy.mkdir(parents=True)
    port = upstream_port()
    for path in EXAMPLES.iterdir():
        original = path.read_text()
        rewritten = original.replace(f"port: {{port: {DOC_PORT}}}", f"port: {{port: {port}}}")
        assert rewritten.replace(f"port: {{port: {port}}}", f"port: {{port: {DOC_PORT}}}") == original
        assert rewritten.count(f"port: {{port: {port}}}") == original.count("kind: XBackend\n")
        (copy / path.name).write_text(rewritten)
    key = secret_value(copy)
    ca = make_ca("ai-egress walk-through CA")
    trust = ca.write(tmp_path, "system-trust.pem")  # stands in for the system trust store
    openai_tls = server_ssl_context(ca.issue_server_cert(OPENAI))
    tools = ToolServer(MCP_IP, port)
    async with (
        DnsStub() as dns,
        RecordingUpstream("openai", host=OPENAI_IP, port=port, ssl_context=openai_tls) as openai,
        serve_tools(tools, ca, tmp_path),
    ):
        dns.set(OPENAI, [OPENAI_IP])
        dns.set(MCP_HOST, [MCP_IP])
        walk = Walk(work, gateway_address(), port, dns, trust, openai, tools, key)
        try:
            agent_at = mcp_agent_position()
            ran_agent = False
            for b in blocks():
                if b.kind == "step":
                    if not ran_agent and b.start > agent_at:
                        await walk.agent()
                        ran_agent = True
                    await walk.step(b.name, b)
            assert ran_agent
            async with httpx.AsyncClient(timeout=5) as client:
                scraped = (await client.get(walk.admin("/metrics"))).text
        finally:
            await walk.stop_weir()
        assert walk.envoy_pid and not pid_alive(walk.envoy_pid), "Envoy outlived weir"

    # The table lists exactly the families /metrics serves, with their types and labels.
    families = {f.name: f for f in metrics.parse(scraped)}
    table = metric_table()
    assert set(table) == set(families), set(table) ^ set(families)
    for name, family in families.items():
        assert table[name][0] == family.type, name
        labels = {k for s in family.samples for k in s.labels if k != "le"}
        if family.samples:
            assert set(table[name][1]) == labels, name

    # The key never shows in what weir prints: logs, Envoy's access log, status, translate, metrics.
    logs = (work / "weir.stdout").read_text() + (work / "weir.stderr").read_text()
    assert "weir.controller" in logs and '"response_code":200' in logs  # weir's log, Envoy's access log
    for value in (key, walk.new_key):
        for where, text in (("weir run's output", logs), ("weir's commands", "\n".join(walk.outputs))):
            assert value not in "".join(text.split()), f"the key {value} shows in {where}"

    if UPDATE:
        text = DOC.read_text()
        new, last = "", 0
        for start in sorted(walk.fresh):
            end = next(b.end for b in blocks(text) if b.start == start)
            new += text[last:start] + walk.fresh[start]
            last = end
        DOC.write_text(new + text[last:])
