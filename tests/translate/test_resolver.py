"""weir's resolver for external hostnames, against a real DNS stub on loopback."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from weir.ir import DnsSettings
from weir.resolver import Answer, DnsLookupError, Resolver, lookup, system_nameservers
from weir.testkit import DnsStub

NAME = "api.example.test"


@pytest.fixture
async def dns() -> AsyncIterator[DnsStub]:
    async with DnsStub() as stub:
        yield stub


def settings(stub: DnsStub, timeout_ms: int = 1000) -> DnsSettings:
    return DnsSettings(resolvers=(stub.address,), lookup_timeout_ms=timeout_ms)


async def until(check: Callable[[], object], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not met"
        await asyncio.sleep(0.02)


async def test_ipv4_first_then_ipv6_with_the_records_ttl(dns: DnsStub) -> None:
    dns.ttl = 7
    dns.set(NAME, ["192.0.2.1", "192.0.2.2", "2001:db8::1"])
    assert await lookup(NAME, settings(dns)) == (("192.0.2.1", "192.0.2.2"), 7.0)
    dns.set(NAME, ["2001:db8::1"])
    assert await lookup(NAME, settings(dns)) == (("2001:db8::1",), 7.0)


async def test_nxdomain_and_empty_answers_are_answers(dns: DnsStub) -> None:
    assert await lookup("missing.example.test", settings(dns)) == ((), 0.0)
    dns.set(NAME, [])
    assert (await lookup(NAME, settings(dns)))[0] == ()


async def test_truncated_udp_answer_is_asked_again_over_tcp() -> None:
    async with DnsStub(truncate_udp=True, records={NAME: ["192.0.2.9"]}) as stub:
        assert (await lookup(NAME, settings(stub)))[0] == ("192.0.2.9",)
        assert {q.qtype for q in stub.queries} == {"A"}


async def test_a_silent_server_fails_within_the_lookup_timeout() -> None:
    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    silent.bind(("127.0.0.1", 0))
    try:
        started = time.monotonic()
        with pytest.raises(DnsLookupError, match=r"no answer within 0\.3 s"):
            await lookup(NAME, DnsSettings(resolvers=(silent.getsockname(),), lookup_timeout_ms=300))
        assert time.monotonic() - started < 1.0
    finally:
        silent.close()


async def test_the_configured_resolver_is_the_one_asked(dns: DnsStub) -> None:
    async with DnsStub(records={NAME: ["198.51.100.1"]}) as other:
        dns.set(NAME, ["192.0.2.1"])
        assert (await lookup(NAME, settings(other)))[0] == ("198.51.100.1",)
        assert dns.queries == []


def test_system_nameservers_from_resolv_conf(tmp_path: Path) -> None:
    conf = tmp_path / "resolv.conf"
    conf.write_text(
        "search svc.cluster.local\nnameserver 10.96.0.10\nnameserver fe80::1%eth0\noptions ndots:5\n"
    )
    assert system_nameservers(conf) == (("10.96.0.10", 53), ("fe80::1", 53))
    assert system_nameservers(tmp_path / "none") == (("127.0.0.1", 53),)


async def test_ttl_is_followed_and_failures_keep_the_last_good_answer(dns: DnsStub) -> None:
    """The name moves (followed within its 1 s TTL); the server dies (the answer stays, with the error)."""
    dns.set(NAME, ["192.0.2.1"])
    seen: list[Answer] = []
    resolver = Resolver(seen.append, min_ttl=0.2)
    key = settings(dns, timeout_ms=200)
    try:
        resolver.track(NAME, key)
        await until(lambda: seen)
        assert seen[-1] == Answer(NAME, ("192.0.2.1",), 1.0, None, True)
        dns.set(NAME, ["192.0.2.2"])
        started = time.monotonic()
        await until(lambda: seen[-1].addresses == ("192.0.2.2",), timeout=3)
        assert time.monotonic() - started < 1.5  # TTL 1 s (and a little jitter)
        await dns.stop()
        await until(lambda: seen[-1].error is not None, timeout=3)
        failed = resolver.answer(NAME, key)
        assert failed is not None and failed.addresses == ("192.0.2.2",) and failed.resolved
        assert f"127.0.0.1:{dns.port}" in (failed.error or "")
    finally:
        await resolver.close()


async def test_changes_only_are_reported_and_untrack_stops(dns: DnsStub) -> None:
    dns.set(NAME, ["192.0.2.1"])
    seen: list[Answer] = []
    resolver = Resolver(seen.append, min_ttl=0.1, max_ttl=0.1)
    try:
        resolver.track(NAME, settings(dns))
        resolver.track(NAME, settings(dns))  # once
        await asyncio.sleep(0.6)
        assert len(seen) == 1 and len(resolver.tracked()) == 1
        asked = len(dns.queries)
        assert asked >= 3  # re-resolved every 0.1 s
        resolver.untrack(NAME, settings(dns))
        await asyncio.sleep(0.3)
        assert len(dns.queries) <= asked + 1 and resolver.answer(NAME, settings(dns)) is None
    finally:
        await resolver.close()


def test_split_by_policy_names_each_denied_address_and_its_network() -> None:
    answer = Answer(NAME, ("192.0.2.1", "8.8.8.8", "64:ff9b::a9fe:a9fe"), resolved=True)
    allowed, denied = answer.split(["192.0.2.0/24", "169.254.0.0/16"])
    assert allowed == ("8.8.8.8",)
    assert denied == (("192.0.2.1", "192.0.2.0/24"), ("64:ff9b::a9fe:a9fe", "169.254.0.0/16"))
