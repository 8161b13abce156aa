"""weir.testkit on real loopback sockets: PKI, recording upstream, DNS stub."""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
from typing import Any

import h2.config
import h2.connection
import h2.events
import h11
import httpx
import pytest
from cryptography import x509
from dnslib import QTYPE, RCODE, DNSRecord

from weir.testkit import (
    CertAuthority,
    DnsStub,
    IssuedCert,
    NonLoopbackAddressError,
    RecordingUpstream,
    SeenRequest,
    UpstreamResponse,
    client_ssl_context,
    free_port,
    loopback_ok,
    make_ca,
    server_ssl_context,
)

pytestmark = pytest.mark.timeout(10)

API_NAME = "api.example.test"


@pytest.fixture(scope="module")
def ca() -> CertAuthority:
    return make_ca()


@pytest.fixture(scope="module")
def server_cert(ca: CertAuthority) -> IssuedCert:
    return ca.issue_server_cert(API_NAME, "127.0.0.2", uri_sans=["spiffe://weir.test/api"])


# -- helpers -------------------------------------------------------------------------


async def h11_exchange(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    conn: h11.Connection,
    path: str,
    host: str,
) -> tuple[int, bytes]:
    """One request/response on an open HTTP/1.1 connection (keep-alive)."""
    if conn.our_state is h11.DONE:
        conn.start_next_cycle()
    request = h11.Request(method="GET", target=path, headers=[("host", host), ("x-test", "1")])
    writer.write(conn.send(request) + conn.send(h11.EndOfMessage()))
    await writer.drain()
    status, body = 0, b""
    while True:
        try:
            event = conn.next_event()
        except h11.RemoteProtocolError as exc:  # e.g. EOF before a response
            raise ConnectionError(str(exc)) from exc
        if event is h11.NEED_DATA:
            conn.receive_data(await reader.read(65536))
        elif isinstance(event, h11.Response):
            status = event.status_code
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage):
            return status, body
        elif isinstance(event, h11.ConnectionClosed):
            raise ConnectionError("closed mid-response")


async def h2_requests(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    requests: list[tuple[str, str, bytes]],
    authority: str,
) -> dict[str, tuple[int, bytes]]:
    """Send (method, path, body) requests concurrently on one HTTP/2 connection."""
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    stream_paths: dict[int, str] = {}
    to_send: dict[int, bytes] = {}
    for method, path, body in requests:
        sid = conn.get_next_available_stream_id()
        headers = [(":method", method), (":path", path), (":scheme", "http")]
        headers += [(":authority", authority), ("x-test", "2")]
        conn.send_headers(sid, headers, end_stream=not body)
        stream_paths[sid] = path
        if body:
            to_send[sid] = body

    def pump() -> None:  # send what the flow-control windows allow
        for sid, rest in list(to_send.items()):
            size = min(conn.local_flow_control_window(sid), conn.max_outbound_frame_size)
            while rest and size > 0:
                conn.send_data(sid, rest[:size], end_stream=len(rest) <= size)
                rest = rest[size:]
                size = min(conn.local_flow_control_window(sid), conn.max_outbound_frame_size)
            to_send[sid] = rest
            if not rest:
                del to_send[sid]

    pump()
    writer.write(conn.data_to_send())
    await writer.drain()
    status: dict[int, int] = {}
    bodies: dict[int, bytes] = {sid: b"" for sid in stream_paths}
    done: set[int] = set()
    while done != set(stream_paths):
        data = await reader.read(65536)
        assert data, "server closed the h2 connection early"
        for event in conn.receive_data(data):
            if isinstance(event, h2.events.ResponseReceived):
                status[event.stream_id] = int(dict(event.headers)[b":status"])
            elif isinstance(event, h2.events.DataReceived):
                bodies[event.stream_id] += event.data
                conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                done.add(event.stream_id)
        pump()
        writer.write(conn.data_to_send())
    conn.close_connection()
    writer.write(conn.data_to_send())
    return {stream_paths[sid]: (status[sid], bodies[sid]) for sid in stream_paths}


async def close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(OSError, TimeoutError):  # includes ssl.SSLError
        await asyncio.wait_for(writer.wait_closed(), 2)


# -- net / loopback ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "ok"),
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("127.255.255.254", True),
        ("::1", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.1", False),
        ("128.0.0.1", False),
        ("localhost", False),
        ("", False),
    ],
)
def test_loopback_ok(host: str, ok: bool) -> None:
    assert loopback_ok(host) is ok


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.10", "localhost", "::"])
def test_refuses_non_loopback_bind(host: str) -> None:
    with pytest.raises(NonLoopbackAddressError, match="loopback"):
        RecordingUpstream("x", host=host)
    with pytest.raises(NonLoopbackAddressError, match="loopback"):
        DnsStub(host=host)
    with pytest.raises(NonLoopbackAddressError):
        free_port(host)
    assert issubclass(NonLoopbackAddressError, ValueError)


def test_free_port() -> None:
    port = free_port("127.0.0.2")
    assert 0 < port < 65536


# -- pki ---------------------------------------------------------------------------


def test_pki_certificates(ca: CertAuthority, server_cert: IssuedCert, tmp_path: Any) -> None:
    cert = server_cert.x509()
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == [API_NAME]
    assert san.get_values_for_type(x509.UniformResourceIdentifier) == ["spiffe://weir.test/api"]
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.2"]
    assert server_cert.dns_names == (API_NAME,)
    assert server_cert.ip_addresses == ("127.0.0.2",)
    assert server_cert.ca_pem == ca.cert_pem
    assert "BEGIN PRIVATE KEY" in server_cert.key_pem

    client = ca.issue_client_cert("client-a")
    subject = client.x509().subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)
    assert subject[0].value == "client-a"
    with pytest.raises(x509.ExtensionNotFound):
        client.x509().extensions.get_extension_for_class(x509.SubjectAlternativeName)

    files = server_cert.write(tmp_path / "pem", "api")
    assert files.cert.read_text() == server_cert.chain_pem
    assert files.key.stat().st_mode & 0o077 == 0
    assert files.ca.read_text() == ca.cert_pem
    assert ca.write(tmp_path).read_text() == ca.cert_pem
    with pytest.raises(ValueError):
        ca.issue_server_cert()


# -- upstream over TLS -----------------------------------------------------------------


async def test_tls_h2_records_sni_and_alpn(ca: CertAuthority, server_cert: IssuedCert) -> None:
    ctx = server_ssl_context(server_cert)
    async with RecordingUpstream("api", host="127.0.0.2", ssl_context=ctx) as up:
        assert up.url == f"https://127.0.0.2:{up.port}"
        async with httpx.AsyncClient(verify=client_ssl_context(ca), http2=True) as client:
            resp = await client.get(
                f"{up.url}/v1/things?x=1",
                headers={"host": "front.example"},  # SNI is recorded from the ClientHello
                extensions={"sni_hostname": API_NAME},
            )
        async with httpx.AsyncClient(verify=client_ssl_context(ca), http2=True) as client:
            no_sni = await client.get(f"{up.url}/by-ip")  # an IP literal sends no SNI
    assert resp.status_code == 200
    assert resp.headers["content-type"] == "application/json"
    facts = resp.json()
    assert facts["upstream"] == "api"
    assert facts["sni"] == API_NAME
    assert facts["alpn"] == "h2"
    assert facts["http_version"] == "2"
    assert facts["tls_version"] == "TLSv1.3"
    assert facts["path"] == "/v1/things?x=1"
    assert facts["host"] == "front.example"
    assert no_sni.json()["sni"] is None
    seen, _ = up.requests
    assert isinstance(seen, SeenRequest)
    assert (seen.sni, seen.alpn, seen.http_version, seen.method) == (API_NAME, "h2", "2", "GET")
    assert seen.remote[0].startswith("127.")
    assert all(k == k.lower() and not k.startswith(":") for k, _ in seen.headers)


async def test_tls_http11_keepalive_and_tls12(ca: CertAuthority, server_cert: IssuedCert) -> None:
    ctx = server_ssl_context(server_cert, maximum_version=ssl.TLSVersion.TLSv1_2)
    async with RecordingUpstream("api12", host="127.0.0.2", ssl_context=ctx) as up:
        client_ctx = client_ssl_context(ca, alpn=["http/1.1"])
        reader, writer = await asyncio.open_connection(
            up.host, up.port, ssl=client_ctx, server_hostname=API_NAME
        )
        conn = h11.Connection(h11.CLIENT)
        for path in ("/one", "/two"):
            status, body = await h11_exchange(reader, writer, conn, path, "h.example")
            assert status == 200
            assert json.loads(body)["path"] == path
        await close(writer)
    first, second = up.requests
    assert first.sni == API_NAME
    assert first.alpn == "http/1.1"
    assert first.http_version == "1.1"
    assert first.tls_version == "TLSv1.2"
    assert first.host == "h.example"
    assert first.header("X-Test") == "1"
    assert first.remote == second.remote  # one connection, kept alive


async def test_tls_without_alpn_is_http11(ca: CertAuthority, server_cert: IssuedCert) -> None:
    async with RecordingUpstream("noalpn", ssl_context=server_ssl_context(server_cert)) as up:
        reader, writer = await asyncio.open_connection(
            up.host, up.port, ssl=client_ssl_context(ca), server_hostname=API_NAME
        )
        status, body = await h11_exchange(reader, writer, h11.Connection(h11.CLIENT), "/", "h")
        await close(writer)
    assert status == 200
    facts = json.loads(body)
    assert (facts["alpn"], facts["http_version"], facts["sni"]) == (None, "1.1", API_NAME)


async def test_client_certificate_required(ca: CertAuthority, server_cert: IssuedCert) -> None:
    ctx = server_ssl_context(server_cert, verify_client=ca)
    async with RecordingUpstream("mtls", host="127.0.0.2", ssl_context=ctx) as up:
        anonymous = client_ssl_context(ca, alpn=["http/1.1"])
        with pytest.raises((ssl.SSLError, ConnectionError)):
            reader, writer = await asyncio.open_connection(
                up.host, up.port, ssl=anonymous, server_hostname=API_NAME
            )
            try:  # TLS 1.3: the refusal arrives after the client's handshake completes
                await h11_exchange(reader, writer, h11.Connection(h11.CLIENT), "/", "x")
            finally:
                await close(writer)
        assert up.requests == []

        with_cert = client_ssl_context(ca, cert=ca.issue_client_cert("client-a"))
        async with httpx.AsyncClient(verify=with_cert) as client:
            resp = await client.get(f"{up.url}/", extensions={"sni_hostname": API_NAME})
    assert resp.json()["client_cn"] == "client-a"
    [seen] = up.requests
    assert seen.client_cn == "client-a"
    assert seen.alpn == "http/1.1"


# -- upstream plaintext ------------------------------------------------------------------


async def test_plaintext_http11_two_loopback_ips() -> None:
    async with (
        RecordingUpstream("a", host="127.0.0.2") as a,
        RecordingUpstream("b", host="127.0.0.3", port=a.port) as b,  # same port, other IP
        httpx.AsyncClient() as client,
    ):
        assert a.port == b.port
        ra = await client.post(f"{a.url}/p", content=b"hello", headers={"x-Mixed": "V"})
        rb = await client.get(f"{b.url}/q")
    assert ra.json()["upstream"] == "a"
    assert rb.json()["upstream"] == "b"
    [seen_a] = a.requests
    assert (seen_a.method, seen_a.path, seen_a.body) == ("POST", "/p", b"hello")
    assert (seen_a.sni, seen_a.alpn, seen_a.tls_version, seen_a.client_cn) == (None,) * 4
    assert seen_a.http_version == "1.1"
    assert seen_a.header("x-mixed") == "V"
    assert seen_a.host == f"127.0.0.2:{a.port}"
    assert [r.upstream for r in b.requests] == ["b"]


async def test_h2c_prior_knowledge_multiple_streams() -> None:
    big = b"x" * 200_000  # more than the initial flow-control window, both ways

    def handler(seen: SeenRequest) -> UpstreamResponse | None:
        return UpstreamResponse(body=big) if seen.path == "/big" else None

    async with RecordingUpstream("h2c", host="127.0.0.4", handler=handler) as up:
        reader, writer = await asyncio.open_connection(up.host, up.port)
        answers = await h2_requests(
            reader,
            writer,
            [("GET", "/a", b""), ("POST", "/b", big), ("GET", "/big", b"")],
            "svc.test",
        )
        await close(writer)
    assert answers["/a"][0] == 200
    assert answers["/big"] == (200, big)
    facts = json.loads(answers["/a"][1])
    assert (facts["http_version"], facts["alpn"], facts["host"]) == ("2", None, "svc.test")
    assert ["x-test", "2"] in facts["headers"]
    by_path = {r.path: r for r in up.requests}
    assert by_path["/b"].body == big
    assert by_path["/b"].method == "POST"


async def test_handler_override_and_errors() -> None:
    def handler(seen: SeenRequest) -> UpstreamResponse | None:
        if seen.path == "/boom":
            raise RuntimeError("boom")
        if seen.path == "/teapot":
            return UpstreamResponse(status=418, body="short and stout")
        return None

    async with (
        RecordingUpstream("h", handler=UpstreamResponse(503, b"down")) as up,
        httpx.AsyncClient() as client,
    ):
        resp = await client.get(f"{up.url}/")
        assert (resp.status_code, resp.text) == (503, "down")
        up.handler = handler
        assert (await client.get(f"{up.url}/teapot")).status_code == 418
        assert (await client.get(f"{up.url}/boom")).status_code == 500
        assert (await client.get(f"{up.url}/x")).json()["path"] == "/x"
    assert [r.path for r in up.requests] == ["/", "/teapot", "/boom", "/x"]
    up.clear()
    assert up.requests == []


async def test_bad_clients_do_not_break_server_and_stop_closes(
    ca: CertAuthority, server_cert: IssuedCert
) -> None:
    async with RecordingUpstream("sturdy", ssl_context=server_ssl_context(server_cert)) as tls_up:
        # plaintext to a TLS port, then an abrupt reset
        _, w = await asyncio.open_connection(tls_up.host, tls_up.port)
        w.write(b"GET / HTTP/1.1\r\n\r\n")
        await close(w)
        async with httpx.AsyncClient(verify=client_ssl_context(ca)) as client:
            resp = await client.get(tls_up.url, extensions={"sni_hostname": API_NAME})
            assert resp.status_code == 200

    up = RecordingUpstream("plain")
    await up.start()
    r, w = await asyncio.open_connection(up.host, up.port)
    w.write(b"NOT HTTP AT ALL\r\n\r\n")
    assert b"400" in await r.read(65536)
    await close(w)
    # an idle keep-alive connection is closed by stop()
    r, w = await asyncio.open_connection(up.host, up.port)
    status, _ = await h11_exchange(r, w, h11.Connection(h11.CLIENT), "/", "x")
    assert status == 200
    await up.stop()
    assert await asyncio.wait_for(r.read(), 2) == b""
    await close(w)
    with pytest.raises(OSError):
        await asyncio.open_connection(up.host, up.port)
    await up.stop()  # idempotent


# -- DNS stub ----------------------------------------------------------------------------


async def dns_query(stub: DnsStub, name: str, qtype: str, *, tcp: bool) -> DNSRecord:
    host, port = stub.address
    raw = await asyncio.to_thread(DNSRecord.question(name, qtype).send, host, port, tcp=tcp, timeout=2)
    return DNSRecord.parse(raw)


@pytest.mark.parametrize("tcp", [False, True], ids=["udp", "tcp"])
async def test_dns_stub_answers(tcp: bool) -> None:
    async with DnsStub(records={"API.Example.Test.": ["127.0.0.2", "127.0.0.3"]}) as stub:
        assert stub.address[0] == "127.0.0.1"
        a = await dns_query(stub, "api.example.test", "A", tcp=tcp)
        assert a.header.rcode == RCODE.NOERROR
        assert sorted(str(rr.rdata) for rr in a.rr) == ["127.0.0.2", "127.0.0.3"]
        assert {rr.ttl for rr in a.rr} == {1}

        aaaa = await dns_query(stub, "api.example.test", "AAAA", tcp=tcp)
        assert (aaaa.header.rcode, aaaa.rr) == (RCODE.NOERROR, [])

        nx = await dns_query(stub, "nope.example.test", "A", tcp=tcp)
        assert (nx.header.rcode, nx.rr) == (RCODE.NXDOMAIN, [])

        stub.ttl = 30
        stub.set("api.example.test", ["10.1.2.3", "::1"])
        a = await dns_query(stub, "api.example.test", "A", tcp=tcp)
        assert [(str(rr.rdata), rr.ttl) for rr in a.rr] == [("10.1.2.3", 30)]
        aaaa = await dns_query(stub, "api.example.test", "AAAA", tcp=tcp)
        assert [(QTYPE[rr.rtype], str(rr.rdata)) for rr in aaaa.rr] == [("AAAA", "::1")]

        stub.remove("api.example.test")
        gone = await dns_query(stub, "api.example.test", "A", tcp=tcp)
        assert gone.header.rcode == RCODE.NXDOMAIN
    assert stub.queries[:3] == [
        ("api.example.test", "A"),
        ("api.example.test", "AAAA"),
        ("nope.example.test", "A"),
    ]
    assert len(stub.queries) == 6


async def test_dns_stub_truncates_udp_and_ignores_garbage() -> None:
    async with DnsStub(truncate_udp=True) as stub:
        stub.set("t.test", ["127.0.0.9"])
        udp = await dns_query(stub, "t.test", "A", tcp=False)
        assert udp.header.tc == 1
        assert udp.rr == []
        assert str(udp.q.qname) == "t.test."
        tcp = await dns_query(stub, "t.test", "A", tcp=True)
        assert (tcp.header.tc, [str(rr.rdata) for rr in tcp.rr]) == (0, ["127.0.0.9"])
        assert stub.answer(b"\x00garbage") is None
        with pytest.raises(ValueError):
            stub.set("bad.test", ["not-an-ip"])


def test_free_port_does_not_hand_out_a_port_twice() -> None:
    """Two ports asked for before either is bound must differ (the kernel may return a closed
    port again at once: a Gateway's HTTP and HTTPS listeners once got the same port)."""
    from weir.testkit import free_port

    ports = [free_port() for _ in range(2000)]
    assert len(set(ports)) == len(ports)
