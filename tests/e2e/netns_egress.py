"""Egress scenarios that need addresses outside loopback; run by :func:`netns.run_in_netns`.

Not a test module: each coroutine runs inside a private network namespace
and returns what it saw, and tests in test_egress.py judge it.
"""

from __future__ import annotations

import asyncio
import socket
import tempfile
from pathlib import Path
from typing import Any

import httpx
from netns import add_addresses
from weir_harness import Weir, routes

from weir.testkit import DnsStub, free_port

#: A private IPv4 address, and the IPv6 forms that embed it (each reaches it
#: through a translator or tunnel on a network that has one).
EMBEDDED_TARGET = "10.20.30.40"
EMBEDDED_FORMS = {
    "mapped": "::ffff:10.20.30.40",  # IPv4-mapped, RFC 4291: the socket connects to the IPv4 address
    "compatible": "::a14:1e28",  # IPv4-compatible (deprecated), RFC 4291
    "siit": "::ffff:0:a14:1e28",  # IPv4-translated, RFC 2765 (SIIT)
    "nat64": "64:ff9b::a14:1e28",  # well-known NAT64 prefix, RFC 6052
    "nat64-local": "64:ff9b:1::a14:1e28",  # local-use NAT64 prefix, RFC 8215 (/96 layout)
    "nat64-local48": "64:ff9b:1:a14:1e:2800::",  # the same with the RFC 6052 /48 layout
    "6to4": "2002:a14:1e28::1",  # 6to4, RFC 3056
    # Teredo, RFC 4380: server 198.51.100.1, client 10.20.30.40 (obfuscated: every bit inverted)
    "teredo": "2001:0:c633:6401:8000:ffff:f5eb:e1d7",
}
#: Controls: embedded IPv4 addresses the tests' policy allows (TEST-NET-2, 198.51.100.7).
ALLOWED_FORMS = {"nat64-allowed": "64:ff9b::c633:6407", "6to4-allowed": "2002:c633:6407::1"}


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.readuntil(b"\r\n\r\n")
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 7\r\n\r\nallowed")
    await writer.drain()
    writer.close()


async def embedded_forms(denied: list[str]) -> dict[str, Any]:
    """Request each form through weir; say what the client got and whether the address saw a connection."""
    port = free_port()
    add_addresses(
        [EMBEDDED_TARGET, *[a for k, a in EMBEDDED_FORMS.items() if k != "mapped"], *ALLOWED_FORMS.values()]
    )
    listeners: dict[str, socket.socket] = {}
    for label, address in EMBEDDED_FORMS.items():
        if label == "mapped":  # ::ffff:a.b.c.d is the IPv4 address itself to the kernel
            sock = socket.socket(socket.AF_INET)
            sock.bind((EMBEDDED_TARGET, port))
        else:
            sock = socket.socket(socket.AF_INET6)
            sock.bind((address, port))
        sock.listen(16)
        sock.setblocking(False)  # never accepts: a completed handshake waits in the queue
        listeners[label] = sock
    servers = [await asyncio.start_server(_answer, address, port) for address in ALLOWED_FORMS.values()]
    seen: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        async with DnsStub() as dns:
            weir = Weir(folder, dns, free_port(), egress_denied_cidrs=tuple(denied))
            forms = {**EMBEDDED_FORMS, **ALLOWED_FORMS}
            for label, address in forms.items():
                dns.set(f"{label}.example.test", [address])
            xbackends = [(label, f"{label}.example.test") for label in forms]
            weir.write("egress.yaml", routes(port, *xbackends, gateway_port=weir.gateway_port))
            try:
                await weir.start()
                async with httpx.AsyncClient(timeout=3) as client:
                    for label in forms:
                        try:
                            response = await client.get(weir.url(f"/{label}"))
                        except httpx.TimeoutException:
                            seen[label] = {"status": "timeout", "body": ""}
                        else:
                            seen[label] = {"status": response.status_code, "body": response.text[:300]}
            finally:
                await weir.stop()
    for label, sock in listeners.items():
        try:
            conn, _ = sock.accept()
        except BlockingIOError:
            seen[label]["connected"] = False
        else:
            conn.close()
            seen[label]["connected"] = True
        sock.close()
    for server in servers:
        server.close()
    return seen
