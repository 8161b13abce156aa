"""weir's admin endpoint refuses requests whose Host is not this machine (DNS rebinding)."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from weir.admin import AdminServer, host_allowed


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1", "127.0.0.1:9901", "localhost", "LOCALHOST:9901", "localhost.", "[::1]:9901", "[::1]", "::1",
     "10.1.2.3:9901"],
)  # fmt: skip
def test_addresses_and_localhost_are_allowed(host: str) -> None:
    assert host_allowed(host)


@pytest.mark.parametrize(
    "host",
    ["evil.example", "evil.example:9901", "localhost.evil.example", "127.0.0.1.nip.io",
     "weir-admin.default.svc", "[::1]evil", "127.0.0.1:x", "", "[evil]:80"],
)  # fmt: skip
def test_other_names_are_refused(host: str) -> None:
    assert not host_allowed(host)


async def test_a_rebound_name_gets_421_and_no_status() -> None:
    admin = AdminServer("127.0.0.1", 0, {"/status": lambda: (200, {"secret": "internal-object-names"})})
    await admin.start()
    try:
        base = f"http://127.0.0.1:{admin.port}/status"
        async with httpx.AsyncClient() as client:
            rebound = await client.get(base, headers={"host": f"evil.example:{admin.port}"})
            by_ip = await client.get(base)
            by_name = await client.get(base, headers={"host": f"localhost:{admin.port}"})
        # HTTP/1.0 without Host: not a browser
        reader, writer = await asyncio.open_connection("127.0.0.1", admin.port)
        writer.write(b"GET /status HTTP/1.0\r\n\r\n")
        raw = await reader.read()
        writer.close()
    finally:
        await admin.stop()
    assert rebound.status_code == 421
    assert "internal-object-names" not in rebound.text and "evil.example" in rebound.text
    assert by_ip.status_code == by_name.status_code == 200
    assert raw.startswith(b"HTTP/1.1 200") and b"internal-object-names" in raw
