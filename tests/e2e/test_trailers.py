"""Trailers on the way to and from an external hostname, with real HTTP/2 peers.

Headers leaving for an external hostname lose weir's internal names
(``x-envoy-*``, ``x-forwarded-*``, ``forwarded``, ``x-request-id``); HTTP/2
trailers can carry the same names and must lose them too. Both peers here
speak HTTP/2 with the ``h2`` library directly (httpx cannot send trailers):
the client sends request trailers to the gateway (h2c prior knowledge), and
the upstream, an XBackend spoken to over h2c, records them and answers with
trailers of its own.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

import h2.config
import h2.connection
import h2.events
from weir_harness import GATEWAY_HEAD, Weir, route_to, xbackend

from weir.testkit import DnsStub, free_port

API_HOST = "api.example.test"
ALLOWED_IP = "127.0.0.2"
INTERNAL = {
    "x-forwarded-for": "10.1.2.3",
    "x-envoy-internal": "true",
    "x-envoy-original-path": "/admin",
    "x-request-id": "client-chosen",
    "forwarded": "for=10.1.2.3",
    "x-forwarded-host": "internal.corp",
}


def internal_names(pairs: list[tuple[str, str]]) -> list[str]:
    return [
        k
        for k, _ in pairs
        if k.startswith(("x-envoy-", "x-forwarded-")) or k in ("forwarded", "x-request-id")
    ]


@dataclass
class H2Upstream:
    """An h2c server recording each request's headers and trailers; it answers with trailers."""

    response_trailers: list[tuple[str, str]]
    requests: list[dict[str, list[tuple[str, str]]]] = field(default_factory=list)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding="utf-8")
        )
        conn.initiate_connection()
        writer.write(conn.data_to_send())
        seen: dict[int, dict[str, list[tuple[str, str]]]] = {}
        try:
            while data := await reader.read(65536):
                for event in conn.receive_data(data):
                    sid = getattr(event, "stream_id", 0)
                    if isinstance(event, h2.events.RequestReceived):
                        seen[sid] = {
                            "headers": [(str(k), str(v)) for k, v in event.headers or []],
                            "trailers": [],
                        }
                    elif isinstance(event, h2.events.TrailersReceived):
                        seen[sid]["trailers"] = [(str(k), str(v)) for k, v in event.headers or []]
                    elif isinstance(event, h2.events.DataReceived):
                        conn.acknowledge_received_data(event.flow_controlled_length or 0, sid)
                    elif isinstance(event, h2.events.StreamEnded):
                        self.requests.append(seen.pop(sid))
                        conn.send_headers(sid, [(":status", "200"), ("content-type", "text/plain")])
                        conn.send_data(sid, b"answer")
                        conn.send_headers(sid, self.response_trailers, end_stream=True)
                writer.write(conn.data_to_send())
                await writer.drain()
        finally:
            writer.close()


async def h2_request_with_trailers(
    port: int, path: str, trailers: list[tuple[str, str]]
) -> tuple[int, list[tuple[str, str]]]:
    """POST ``path`` over h2c, the request ending with ``trailers``; (status, response trailers)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
    conn.initiate_connection()
    head = [
        (":method", "POST"),
        (":scheme", "http"),
        (":authority", "egress"),
        (":path", path),
        ("te", "trailers"),
    ]
    conn.send_headers(1, head)
    conn.send_data(1, b"body")
    conn.send_headers(1, trailers, end_stream=True)
    writer.write(conn.data_to_send())
    status, response_trailers, ended = 0, [], False
    try:
        while not ended:
            data = await asyncio.wait_for(reader.read(65536), 10)
            assert data, "the gateway closed the connection"
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived):
                    status = int(dict(event.headers or [])[":status"])
                elif isinstance(event, h2.events.TrailersReceived):
                    response_trailers = [(str(k), str(v)) for k, v in event.headers or []]
                elif isinstance(event, h2.events.DataReceived):
                    conn.acknowledge_received_data(event.flow_controlled_length or 0, 1)
                elif isinstance(event, h2.events.StreamEnded | h2.events.StreamReset):
                    ended = True
            writer.write(conn.data_to_send())
    finally:
        writer.close()
    return status, response_trailers


async def test_internal_names_in_trailers_never_cross_the_gateway(tmp_path: Path, dns: DnsStub) -> None:
    upstream = H2Upstream(
        response_trailers=[
            ("x-envoy-upstream-canary", "true"),
            ("x-envoy-internal", "true"),
            ("grpc-status", "0"),
            ("x-app-trailer", "kept"),
        ]
    )
    server = await asyncio.start_server(upstream.handle, ALLOWED_IP, 0)
    port = server.sockets[0].getsockname()[1]
    dns.set(API_HOST, [ALLOWED_IP])
    weir = Weir(tmp_path, dns, free_port())
    weir.write(
        "egress.yaml",
        GATEWAY_HEAD.format(port=weir.gateway_port)
        + route_to("HTTPRoute", "api")
        + xbackend("api", API_HOST, port, protocol="H2C"),
    )
    try:
        await weir.start()
        status, response_trailers = await h2_request_with_trailers(
            weir.gateway_port, "/call", [*INTERNAL.items(), ("x-app-trailer", "kept")]
        )
    finally:
        await weir.stop()
        server.close()
        await server.wait_closed()
    assert status == 200
    [seen] = upstream.requests
    assert internal_names(seen["trailers"]) == [], seen["trailers"]
    assert ("x-app-trailer", "kept") in seen["trailers"]  # trailers themselves still pass
    assert internal_names(seen["headers"]) == [], seen["headers"]
    assert internal_names(response_trailers) == [], response_trailers
    assert ("x-app-trailer", "kept") in response_trailers and ("grpc-status", "0") in response_trailers
