"""The conformance harness's own parts, without weir: echo servers, WebSocket, gRPC echo, comparisons.

Not counted in the conformance summary: these check the instrument, not weir.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from echo_grpc import GrpcEchoServer, grpc_echo
from weir.api.core_v1 import ConfigMap
from weir.api.meta import ObjectKey
from weir.providers.files.provider import FilesProvider, Snapshot
from weir.resources import Resources
from weir.testkit import (
    EchoHttpServer,
    EchoIdentity,
    NonLoopbackAddressError,
    WebSocketClient,
    WebSocketHandshakeError,
    client_ssl_context,
    make_ca,
    server_ssl_context,
)
from weir.testkit.echo_http import parse_delay
from weir.testkit.websocket import OP_CLOSE, accept_key

from .harness import INFRA_NS, MARKER, Conformance, Expect, Redirect, Seen, _items, _TrackedProvider

POD = EchoIdentity("gateway-conformance-infra", "infra-backend-v1-0", "infra-backend-v1")


async def test_echo_describes_http11_and_h2c_requests() -> None:
    async with EchoHttpServer(POD, host="127.0.2.250") as echo:
        base = f"http://127.0.2.250:{echo.port}"
        async with httpx.AsyncClient() as client:
            response = await client.get(f"{base}/a/b?x=1", headers={"host": "h.example", "x-multi": "1"})
        data = response.json()
        assert response.status_code == 200
        assert data["path"] == "/a/b?x=1" and data["host"] == "h.example" and data["method"] == "GET"
        assert data["proto"] == "HTTP/1.1" and data["tls"] is None and data["sni"] == ""
        assert (data["namespace"], data["pod"], data["service"]) == (POD.namespace, POD.pod, POD.service)
        assert data["headers"]["x-multi"] == ["1"]
        async with httpx.AsyncClient(http1=False, http2=True) as client:
            response = await client.post(f"{base}/h2", content=b"body", headers={"host": "h2.example"})
        data = response.json()
        assert (data["proto"], data["host"], data["method"], data["body"]) == (
            "HTTP/2.0",
            "h2.example",
            "POST",
            "body",
        )
        assert [r.proto for r in echo.requests] == ["HTTP/1.1", "HTTP/2.0"]


async def test_echo_status_delay_and_response_headers() -> None:
    async with EchoHttpServer(POD, host="127.0.2.250") as echo, httpx.AsyncClient() as client:
        url = f"http://127.0.2.250:{echo.port}"
        response = await client.get(f"{url}/status/503")
        assert response.status_code == 503
        started = asyncio.get_running_loop().time()
        response = await client.get(
            f"{url}/slow?delay=300ms", headers={"x-echo-set-header": "X-A: 1, x-b: two"}
        )
        assert asyncio.get_running_loop().time() - started >= 0.29
        assert (response.headers["x-a"], response.headers["x-b"]) == ("1", "two")
    assert parse_delay("/?delay=1.5s") == 1.5
    assert parse_delay("/?delay=250ms") == 0.25
    assert parse_delay("/?delay=nonsense") == 0.0
    assert parse_delay("/?delay=1h") == 0.0
    assert parse_delay("/x") == 0.0


async def test_echo_over_tls_reports_sni_and_alpn() -> None:
    ca = make_ca()
    context = server_ssl_context(ca.issue_server_cert("abc.example.com"))
    async with EchoHttpServer(POD, host="127.0.2.250", ssl_context=context) as echo:
        url = f"https://127.0.2.250:{echo.port}/tls"
        trust = client_ssl_context(ca, alpn=["h2", "http/1.1"])
        async with httpx.AsyncClient(verify=trust, http2=True) as client:
            data = (await client.get(url, extensions={"sni_hostname": "abc.example.com"})).json()
        assert data["sni"] == "abc.example.com"
        assert data["tls"]["serverName"] == "abc.example.com"
        assert data["tls"]["negotiatedProtocol"] == "h2" and data["proto"] == "HTTP/2.0"
        assert data["tls"]["version"] in ("TLSv1.2", "TLSv1.3") and data["tls"]["cipherSuite"]
        # WebSocket over TLS (HTTP/1.1 by ALPN).
        ws = await WebSocketClient.connect(
            "127.0.2.250",
            echo.port,
            "/ws",
            host_header="abc.example.com",
            ssl_context=client_ssl_context(ca, alpn=["http/1.1"]),
            server_hostname="abc.example.com",
        )
        await ws.send_binary(b"\x00\x01")
        assert (await ws.receive()).payload == b"\x00\x01"
        await ws.close()


async def test_websocket_echo_and_refused_upgrade() -> None:
    async with EchoHttpServer(POD, host="127.0.2.250") as echo:
        ws = await WebSocketClient.connect("127.0.2.250", echo.port, "/ws", host_header="ws.example")
        for text in ("short", "m" * 300, "l" * 70_000):  # the three WebSocket length encodings
            await ws.send_text(text)
            assert (await ws.receive()).text == text
        await ws.close()
        [upgrade] = [r for r in echo.requests if r.websocket]
        assert (upgrade.path, upgrade.host) == ("/ws", "ws.example")
        assert echo.websocket_frames == 3
    # A server that answers with anything but 101 is reported with its status and body.

    async def refuse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 403 Forbidden\r\ncontent-length: 2\r\n\r\nno")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(refuse, "127.0.2.250", 0)
    async with server:
        port = server.sockets[0].getsockname()[1]
        with pytest.raises(WebSocketHandshakeError) as refused:
            await WebSocketClient.connect("127.0.2.250", port, "/ws")
    assert refused.value.status == 403 and refused.value.body == b"no"
    assert accept_key("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="  # RFC 6455 example
    assert OP_CLOSE == 8


async def test_grpc_echo_names_the_pod_and_the_metadata() -> None:
    async with GrpcEchoServer(POD, host="127.0.2.250") as server:
        reply = await grpc_echo(f"127.0.2.250:{server.port}", "EchoTwo", metadata=(("version", "two"),))
    assert reply.method.endswith("/EchoTwo") and reply.pod == POD.pod and reply.service == POD.service
    assert reply.headers["version"] == ["two"]
    assert [c.method for c in server.calls] == [reply.method]


def test_testkit_servers_refuse_non_loopback_addresses() -> None:
    with pytest.raises(NonLoopbackAddressError):
        EchoHttpServer(POD, host="0.0.0.0")
    with pytest.raises(NonLoopbackAddressError):
        GrpcEchoServer(POD, host="10.0.0.1")


def test_compare_says_what_differs(tmp_path: Path) -> None:
    h = Conformance(tmp_path)
    body = {
        "pod": "infra-backend-v2-1",
        "namespace": INFRA_NS,
        "path": "/x",
        "headers": {"x-seen": ["1", "2"]},
    }
    response = httpx.Response(200, json=body, headers=[("x-h", "a"), ("x-h", "b"), ("x-list", "GET,PUT")])
    good = Expect(
        backend="infra-backend-v2",
        seen=Seen(path="/x", headers=(("x-seen", "1,2"),), absent_headers=("x-gone",)),
        headers=(("x-h", "a,b"),),
        header_choices=(("x-list", ("PUT, GET",)),),
        absent_headers=("x-other",),
    )
    assert h.compare(response, good) is None
    assert "want a pod of gateway-conformance-infra/infra-backend-v1" in str(
        h.compare(response, Expect(backend="infra-backend-v1"))
    )
    assert "status 200, want 404" in str(h.compare(response, Expect(404)))
    assert "backend saw path '/x', want '/y'" in str(h.compare(response, Expect(seen=Seen(path="/y"))))
    assert "want it absent" in str(h.compare(response, Expect(seen=Seen(absent_headers=("x-seen",)))))
    assert h.compare(response, Expect(statuses=(200, 204))) is None
    assert "want 5xx" in str(h.compare(response, Expect(server_error=True)))
    assert "expected the request to fail" in str(h.compare(response, Expect(error=True)))
    redirect = httpx.Response(302, headers={"location": "https://example.org:8443/p"})
    assert h.compare(redirect, Expect(302, redirect=Redirect("example.org", "/p", "https", 8443))) is None
    assert h.redirect_url(Redirect("example.org", "/p", "https", 443)) == "https://example.org/p"
    assert h.redirect_url(Redirect("example.org", "/p", port=8080)) == "http://example.org:8080/p"
    assert _items("GET, OPTIONS") == _items("OPTIONS,GET")


def _snapshot(seq: int, marker_files: str, read: list[str]) -> Snapshot:
    """A files snapshot holding the marker (naming ``marker_files``) and one object per file of ``read``."""
    marker = ConfigMap.model_validate(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": MARKER, "namespace": INFRA_NS},
            "data": {"seq": str(seq), "files": marker_files},
        }
    )
    origins = {ObjectKey("ConfigMap", INFRA_NS, MARKER): ("/m/zz-marker.yaml", 1)}
    for n, file in enumerate(read):
        origins[ObjectKey("Gateway", INFRA_NS, f"gw{n}")] = (f"/m/{file}", 1)
    return Snapshot(Resources.from_objects([marker]), (), origins)


def test_a_marker_counts_only_with_the_files_it_names() -> None:
    """The watcher may hand over the marker's new version before a file written just before it:
    that snapshot must not count as settled (it used to, and a case then found no status)."""
    tracked = _TrackedProvider(FilesProvider(["/nonexistent"]))
    tracked._note(_snapshot(2, "case-a.yaml", ["00-base.yaml"]))
    assert tracked.handed_seq == -1
    tracked._note(_snapshot(2, "case-a.yaml", ["00-base.yaml", "case-a.yaml"]))
    assert tracked.handed_seq == 2
    # A file deleted since must be gone from what is served too.
    tracked._note(_snapshot(3, "", ["00-base.yaml", "case-a.yaml"]))
    assert tracked.handed_seq == 2
    tracked._note(_snapshot(3, "", ["00-base.yaml"]))
    assert tracked.handed_seq == 3
