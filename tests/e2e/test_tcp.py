"""TCPRoute end to end: real Envoy, a DNS stub, TCP echo servers (plain and TLS) on loopback.

A TCP listener relays each connection to an XBackend of protocol ``TCP``.
The harness's guard denies ``127.0.0.66/32``: weir resolves each XBackend's
name and hands Envoy only the allowed addresses (``weir.xds.endpoints``); a
name with none leads to an internal listener that closes the connection. A "forbidden" address is a
raw listening socket that never accepts: a non-blocking ``accept()`` after
the fact proves that no TCP connection reached it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from weir_harness import FORBIDDEN_IP, Weir, eventually, indent_pem, pid_alive

from echo_tcp import EchoServer
from weir.testkit import DnsStub, free_port, make_ca, server_ssl_context

HOST = "db.example.test"
ALLOWED_IP = "127.0.0.2"
XB = "gateway.networking.x-k8s.io"
#: Where a connection to a name whose every address is denied goes (weir.xds.endpoints).
REFUSED_HOST = "envoy://weir-egress-denied/{address}:{port} in {network}"

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def port() -> int:
    """A port free on the allowed and the forbidden address alike (DNS names carry no port)."""
    for _ in range(20):
        candidate = free_port(ALLOWED_IP)
        try:
            with socket.socket() as probe:
                probe.bind((FORBIDDEN_IP, candidate))
        except OSError:
            continue
        return candidate
    raise RuntimeError("no port free on both addresses")


@pytest.fixture
def forbidden(port: int) -> Iterator[socket.socket]:
    """A socket listening on the forbidden address that never accepts."""
    sock = socket.socket()
    sock.bind((FORBIDDEN_IP, port))
    sock.listen(16)
    sock.setblocking(False)
    try:
        yield sock
    finally:
        sock.close()


def assert_never_connected(sock: socket.socket) -> None:
    with pytest.raises(BlockingIOError):
        conn, peer = sock.accept()
        conn.close()
        pytest.fail(f"{peer} connected to the forbidden address")


async def _stop(harness: Weir) -> None:
    await harness.stop()
    for pid in harness.envoy_pids:
        assert not pid_alive(pid), f"Envoy {pid} survived stop()"


@pytest.fixture
async def weir(folder: Path, dns: DnsStub) -> AsyncIterator[Weir]:
    harness = Weir(folder, dns, free_port())
    try:
        yield harness
    finally:
        await _stop(harness)


@pytest.fixture
async def unguarded(folder: Path, dns: DnsStub) -> AsyncIterator[Weir]:
    """weir with no denied networks: TCP listeners connect to their upstreams directly."""
    harness = Weir(folder, dns, free_port(), egress_denied_cidrs=())
    try:
        yield harness
    finally:
        await _stop(harness)


def manifests(
    listener_port: int,
    backends: list[tuple[str, str, int, int]],
    *,
    tls: str = "",
    extra: str = "",
) -> str:
    """A Gateway with a TCP listener, one TCPRoute to ``backends`` ``(name, hostname, port, weight)``.

    ``tls`` is appended to every XBackend's spec (indented YAML). A backend
    whose hostname is empty is a reference to an XBackend that does not exist.
    """
    refs = "".join(
        f"    - {{group: {XB}, kind: XBackend, name: {name}, weight: {weight}}}\n"
        for name, _, _, weight in backends
    )
    text = f"""\
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
  listeners: [{{name: tcp, port: {listener_port}, protocol: TCP}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: TCPRoute
metadata: {{name: db, namespace: default}}
spec:
  parentRefs: [{{name: gw, sectionName: tcp}}]
  rules:
  - backendRefs:
{refs}"""
    for name, hostname, port, _ in backends:
        if not hostname:
            continue
        text += f"""\
---
apiVersion: {XB}/v1alpha1
kind: XBackend
metadata: {{name: {name}, namespace: default}}
spec:
  type: ExternalHostname
  externalHostname: {{hostname: {hostname}}}
  port: {{port: {port}}}
  protocol: TCP
{tls}"""
    return text + extra


def tls_spec(hostname: str) -> str:
    return f"""\
  tls:
    mode: ServerOnly
    validation:
      hostname: {hostname}
      caCertificateRefs: [{{group: "", kind: ConfigMap, name: db-ca}}]
"""


def ca_config_map(pem: str) -> str:
    return f"""\
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: db-ca, namespace: default}}
data:
  ca.crt: |
{indent_pem(pem, 4)}"""


async def exchange(port: int, payload: bytes, *, timeout: float = 10) -> bytes:
    """Send ``payload`` while reading; return what came back once as many bytes arrived, or EOF."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    received = bytearray()

    async def send() -> None:
        for start in range(0, len(payload), 16_384):
            writer.write(payload[start : start + 16_384])
            await writer.drain()

    async def receive() -> None:
        while len(received) < len(payload):
            chunk = await reader.read(65_536)
            if not chunk:
                return
            received.extend(chunk)

    try:
        sender = asyncio.create_task(send())
        await asyncio.wait_for(receive(), timeout)
        sender.cancel()
        await asyncio.gather(sender, return_exceptions=True)
    except ConnectionError:
        pass
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    return bytes(received)


async def refused(port: int) -> bool:
    """True when the listener closes a connection without relaying anything back."""
    return await exchange(port, b"ping\n") == b""


async def stat(weir: Weir, name: str) -> int:
    assert weir.controller is not None and weir.controller.envoy is not None
    _, stats = await weir.controller.envoy.admin.get(f"/stats?filter={name}")
    prefix = f"{name}: "
    values = [int(ln.removeprefix(prefix)) for ln in stats.splitlines() if ln.startswith(prefix)]
    return values[0] if values else 0


def listener_programmed(weir: Weir) -> bool:
    [listener] = weir.status_of("Gateway", "default", "gw")["listeners"]
    return any(c["type"] == "Programmed" and c["status"] == "True" for c in listener["conditions"])


# --------------------------------------------------------------------------
# Bytes, both ways
# --------------------------------------------------------------------------


@pytest.mark.parametrize("guarded", [True, False], ids=["through-egress-path", "direct"])
async def test_bytes_round_trip_both_ways(
    guarded: bool, weir: Weir, unguarded: Weir, dns: DnsStub, port: int
) -> None:
    harness = weir if guarded else unguarded
    listen = free_port()
    async with EchoServer("db", host=ALLOWED_IP, port=port) as echo:
        dns.set(HOST, [ALLOWED_IP])
        harness.write("tcp.yaml", manifests(listen, [("db", HOST, port, 1)]))
        await harness.start()
        assert listener_programmed(harness)

        assert await exchange(listen, b"hello\n") == b"hello\n"
        big = bytes(range(256)) * 1024 + b"tail"  # > 256 KiB, every byte value
        assert await exchange(listen, big) == big
        # Several connections at once, each gets its own bytes back.
        payloads = [f"conn-{i}:".encode() * 5000 for i in range(8)]
        results = await asyncio.gather(*(exchange(listen, p) for p in payloads))
        assert results == payloads
        assert echo.received == len(b"hello\n") + len(big) + sum(map(len, payloads))
        assert {c.remote[0] for c in echo.connections} == {"127.0.0.1"}  # Envoy, from loopback
        # One upstream connection per client connection: weir's check that the listener is
        # bound (Programmed) never connected through it to the backend.
        assert len(echo.connections) == 2 + len(payloads)


async def test_client_half_close_is_passed_on(weir: Weir, dns: DnsStub, port: int) -> None:
    """The client shuts its sending side; the echo server sees the end, answers everything and closes."""
    listen = free_port()
    async with EchoServer("db", host=ALLOWED_IP, port=port) as echo:
        dns.set(HOST, [ALLOWED_IP])
        weir.write("tcp.yaml", manifests(listen, [("db", HOST, port, 1)]))
        await weir.start()
        reader, writer = await asyncio.open_connection("127.0.0.1", listen)
        payload = b"x" * 100_000
        writer.write(payload)
        await writer.drain()
        writer.write_eof()
        echoed = await asyncio.wait_for(reader.read(), 10)  # until EOF
        writer.close()
        assert echoed == payload
        await eventually(lambda: all(c.closed for c in echo.connections))


async def test_weights_and_a_missing_backend_share(
    weir: Weir, unguarded: Weir, dns: DnsStub, port: int
) -> None:
    """Two XBackends and a reference to a missing one, equal weights: a third of connections closed."""
    listen = free_port()
    async with (
        EchoServer("a", host=ALLOWED_IP, port=port) as first,
        EchoServer("b", host="127.0.0.3", port=port) as second,
    ):
        dns.set("a.example.test", [ALLOWED_IP])
        dns.set("b.example.test", ["127.0.0.3"])
        backends = [("a", "a.example.test", port, 1), ("b", "b.example.test", port, 1), ("gone", "", 0, 1)]
        weir.write("tcp.yaml", manifests(listen, backends))
        await weir.start()
        outcomes: Counter[bool] = Counter()
        for _ in range(60):
            outcomes[await exchange(listen, b"hi\n") == b"hi\n"] += 1
        assert outcomes[True] >= 1 and outcomes[False] >= 1, outcomes
        assert first.connections and second.connections
        assert len(first.connections) + len(second.connections) == outcomes[True]
        [parent] = weir.status_of("TCPRoute", "default", "db")["parents"]
        resolved = next(c for c in parent["conditions"] if c["type"] == "ResolvedRefs")
        assert (resolved["status"], resolved["reason"]) == ("False", "BackendNotFound")


async def test_direct_path_closes_the_missing_backend_share(unguarded: Weir, dns: DnsStub, port: int) -> None:
    listen = free_port()
    async with EchoServer("a", host=ALLOWED_IP, port=port) as echo:
        dns.set("a.example.test", [ALLOWED_IP])
        unguarded.write("tcp.yaml", manifests(listen, [("a", "a.example.test", port, 1), ("gone", "", 0, 1)]))
        await unguarded.start()
        outcomes: Counter[bool] = Counter()
        for _ in range(40):
            outcomes[await exchange(listen, b"hi\n") == b"hi\n"] += 1
        assert outcomes[True] >= 1 and outcomes[False] >= 1, outcomes
        assert len(echo.connections) == outcomes[True]


# --------------------------------------------------------------------------
# TLS origination
# --------------------------------------------------------------------------


async def test_tls_origination_with_sni_and_verified_certificate(weir: Weir, dns: DnsStub, port: int) -> None:
    ca = make_ca()
    server = server_ssl_context(ca.issue_server_cert(HOST), alpn=None)
    listen = free_port()
    async with EchoServer("db", host=ALLOWED_IP, port=port, ssl_context=server) as echo:
        dns.set(HOST, [ALLOWED_IP])
        text = manifests(
            listen, [("db", HOST, port, 1)], tls=tls_spec(HOST), extra=ca_config_map(ca.cert_pem)
        )
        weir.write("tcp.yaml", text)
        await weir.start()
        payload = b"over TLS " * 20_000
        assert await exchange(listen, payload) == payload
        [conn] = echo.connections
        assert conn.sni == HOST
        assert conn.tls_version == "TLSv1.3"
        assert conn.received == len(payload)


async def test_tls_with_the_wrong_ca_closes_before_any_byte_is_delivered(
    weir: Weir, dns: DnsStub, port: int
) -> None:
    """Envoy starts the handshake (the server sees the SNI), refuses the certificate, and relays nothing."""
    real, other = make_ca(), make_ca()
    server = server_ssl_context(real.issue_server_cert(HOST), alpn=None)
    listen = free_port()
    async with EchoServer("db", host=ALLOWED_IP, port=port, ssl_context=server) as echo:
        dns.set(HOST, [ALLOWED_IP])
        text = manifests(
            listen, [("db", HOST, port, 1)], tls=tls_spec(HOST), extra=ca_config_map(other.cert_pem)
        )
        weir.write("tcp.yaml", text)
        await weir.start()
        for _ in range(3):
            assert await refused(listen)
        assert echo.hellos and set(echo.hellos) == {HOST}
        assert echo.connections == []  # no handshake completed
        assert echo.received == 0
        assert await stat(weir, "cluster.xbackend/default/db.ssl.fail_verify_error") >= 1


# --------------------------------------------------------------------------
# The egress guard
# --------------------------------------------------------------------------


async def test_guard_refuses_a_denied_address_before_connecting(
    weir: Weir, dns: DnsStub, port: int, forbidden: socket.socket, caplog: pytest.LogCaptureFixture
) -> None:
    """A name resolving into a denied network: the connection is closed and nothing connects there.

    weir resolves the name and hands Envoy only allowed addresses (EDS); with
    none, the cluster's one endpoint is the internal listener
    ``weir-egress-denied``, which closes each connection at once. This
    test proves the result on the real binary: the client's connection is
    closed with no byte relayed, the forbidden socket never saw a TCP
    handshake, and the access log names the refused address and its network.
    """
    caplog.set_level(logging.INFO, logger="weir.envoy.access")
    listen = free_port()
    dns.set(HOST, [FORBIDDEN_IP])
    weir.write("tcp.yaml", manifests(listen, [("db", HOST, port, 1)]))
    await weir.start()
    for _ in range(3):
        assert await refused(listen)
    assert_never_connected(forbidden)
    # Each connection went to the refusal endpoint, none anywhere else.
    assert await stat(weir, "cluster.xbackend/default/db.upstream_cx_total") == 3

    await weir.stop()  # Envoy flushes its access logs when it exits
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "weir.envoy.access"]
    relayed = [ln for ln in lines if "listener" in ln]
    assert len(relayed) == 3 and all(ln["bytes_sent"] == 0 for ln in relayed), relayed
    refused_host = REFUSED_HOST.format(address=FORBIDDEN_IP, port=port, network=f"{FORBIDDEN_IP}/32")
    assert {ln["upstream_host"] for ln in relayed} == {refused_host}, relayed


async def test_mixed_answer_never_reaches_the_denied_address(
    weir: Weir, dns: DnsStub, port: int, forbidden: socket.socket
) -> None:
    """Only the allowed address reaches Envoy's load balancer: every connection gets through to it."""
    listen = free_port()
    async with EchoServer("db", host=ALLOWED_IP, port=port) as echo:
        dns.set(HOST, [ALLOWED_IP, FORBIDDEN_IP])
        weir.write("tcp.yaml", manifests(listen, [("db", HOST, port, 1)]))
        await weir.start()
        outcomes: Counter[bool] = Counter()
        for _ in range(30):
            outcomes[await exchange(listen, b"hi\n") == b"hi\n"] += 1
        assert outcomes == {True: 30}, outcomes
        assert len(echo.connections) == 30
        assert_never_connected(forbidden)
