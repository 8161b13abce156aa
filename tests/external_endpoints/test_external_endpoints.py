"""External hostnames' assignments: weir resolves (a real DNS stub) and serves only allowed addresses."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Callable

import pytest

from weir import ir
from weir.api.meta import ObjectKey
from weir.external_endpoints import ExternalEndpoints, Split, amend_statuses
from weir.resolver import Resolver
from weir.testkit import DnsStub
from weir.xds import endpoints

NAME = "api.example.test"
DENIED = ("10.0.0.0/8", "127.0.0.0/8")


@pytest.fixture
async def dns() -> AsyncIterator[DnsStub]:
    async with DnsStub() as stub:
        yield stub


async def until(check: Callable[[], object], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not met"
        await asyncio.sleep(0.02)


def the_ir(
    stub: DnsStub, *hosts: tuple[str, str], protocol: ir.UpstreamProtocol = ir.UpstreamProtocol.HTTP1
) -> ir.IR:
    """XBackends ``(name, hostname)`` denying :data:`DENIED`, resolved by ``stub`` (200 ms per query)."""
    upstreams = tuple(
        ir.Upstream(
            f"xbackend/default/{name}",
            ir.DnsName(host, 443),
            protocol,
            egress_guard=ir.EgressGuard(DENIED),
        )
        for name, host in hosts
    )
    return ir.IR(upstreams=upstreams, dns=ir.DnsSettings(resolvers=(stub.address,), lookup_timeout_ms=200))


def addresses(resource: object) -> list[str]:
    message = resource.message()  # type: ignore[attr-defined]
    out = []
    for locality in message.endpoints:
        for lb in locality.lb_endpoints:
            address = lb.endpoint.address
            if address.HasField("envoy_internal_address"):
                internal = address.envoy_internal_address
                out.append(f"{internal.server_listener_name}/{internal.endpoint_id}")
            else:
                out.append(address.socket_address.address)
            assert lb.endpoint.hostname  # auto_host_rewrite and logs, as with DNS clusters
    return out


async def test_only_allowed_addresses_are_served_and_a_change_is_one_assignment(dns: DnsStub) -> None:
    changes: list[int] = []
    keeper = ExternalEndpoints(lambda: changes.append(1), Resolver(lambda a: None, min_ttl=0.05))
    dns.ttl = 0
    try:
        dns.set(NAME, ["192.0.2.1", "10.1.2.3"])
        dns.set("other.example.test", ["192.0.2.7"])
        first = keeper.update(the_ir(dns, ("api", NAME), ("other", "other.example.test")))
        assert first == {}  # nothing answered yet: the clusters wait (warming) for the first answer
        await until(lambda: len(keeper.resources) == 2)
        assert addresses(keeper.resources["xbackend/default/api"]) == ["192.0.2.1"]
        split = keeper.answers()["xbackend/default/api"]
        assert split.denied == (("10.1.2.3", "10.0.0.0/8"),)
        assert "requests go to the allowed addresses only" in (split.note() or "")

        # The name moves into a denied network: only its assignment changes.
        other = keeper.resources["xbackend/default/other"]
        dns.set(NAME, ["127.0.0.5"])
        await until(lambda: addresses(keeper.resources["xbackend/default/api"])[0].startswith("weir-egress"))
        assert addresses(keeper.resources["xbackend/default/api"]) == [
            f"{endpoints.EGRESS_DENIED}/127.0.0.5:443 in 127.0.0.0/8"
        ]
        assert keeper.resources["xbackend/default/other"] is other
        assert changes
    finally:
        await keeper.close()


async def test_failure_keeps_the_last_good_answer_and_says_so(dns: DnsStub) -> None:
    keeper = ExternalEndpoints(lambda: None, Resolver(lambda a: None, min_ttl=0.05))
    dns.ttl = 0
    try:
        dns.set(NAME, ["192.0.2.1"])
        keeper.update(the_ir(dns, ("api", NAME)))
        await until(lambda: keeper.resources)
        served = keeper.resources["xbackend/default/api"]
        await dns.stop()
        await until(lambda: keeper.answers()["xbackend/default/api"].error is not None)
        assert keeper.resources["xbackend/default/api"].version == served.version
        assert "the last good answer is kept" in (keeper.answers()["xbackend/default/api"].note() or "")
    finally:
        await keeper.close()


async def test_forgotten_names_are_no_longer_resolved(dns: DnsStub) -> None:
    keeper = ExternalEndpoints(lambda: None, Resolver(lambda a: None, min_ttl=0.05))
    try:
        dns.set(NAME, ["192.0.2.1"])
        keeper.update(the_ir(dns, ("api", NAME)))
        await until(lambda: keeper.resources)
        assert keeper.update(the_ir(dns)) == {}
        assert keeper.answers() == {}
    finally:
        await keeper.close()


def test_an_empty_answer_has_no_endpoint_and_udp_is_never_refused_by_an_endpoint() -> None:
    assert not endpoints.load_assignment("c", NAME, 443, []).endpoints
    denied = [("10.0.0.1", "10.0.0.0/8")]
    assert not endpoints.load_assignment(
        "c", NAME, 53, [], denied, protocol=ir.UpstreamProtocol.UDP
    ).endpoints
    tcp = endpoints.load_assignment("c", NAME, 5432, [], denied, protocol=ir.UpstreamProtocol.TCP)
    internal = tcp.endpoints[0].lb_endpoints[0].endpoint.address.envoy_internal_address
    assert (internal.server_listener_name, internal.endpoint_id) == (
        endpoints.EGRESS_DENIED,
        "10.0.0.1:5432 in 10.0.0.0/8",
    )
    v6 = endpoints.load_assignment("c", NAME, 443, [], [("::ffff:10.0.0.1", "10.0.0.0/8")])
    assert (
        v6.endpoints[0]
        .lb_endpoints[0]
        .endpoint.address.envoy_internal_address.endpoint_id.startswith("[::ffff:")
    )
    # Order of the answer does not matter: same resource.
    assert endpoints.load_assignment("c", NAME, 443, ["192.0.2.2", "192.0.2.1"]) == endpoints.load_assignment(
        "c", NAME, 443, ["192.0.2.1", "192.0.2.2"]
    )


def test_statuses_get_the_note_in_accepted_for_both_crd_shapes() -> None:
    condition = {"type": "Accepted", "status": "True", "reason": "Accepted", "message": "Accepted."}
    statuses = {
        ObjectKey("XBackend", "default", "api"): {"parents": [{"conditions": [condition]}]},
        ObjectKey("XBackend", "default", "new"): {"ancestors": [{"conditions": [condition]}]},
        ObjectKey("XBackend", "default", "quiet"): {"parents": [{"conditions": [condition]}]},
    }
    split = Split(NAME, ("192.0.2.1",), (("10.0.0.1", "10.0.0.0/8"),), None)
    quiet = Split(NAME, ("192.0.2.1",), (), None)
    out = amend_statuses(
        statuses,
        {"xbackend/default/api": split, "xbackend/default/new": split, "xbackend/default/quiet": quiet},
    )
    for key, list_key in (("api", "parents"), ("new", "ancestors")):
        [entry] = out[ObjectKey("XBackend", "default", key)][list_key]
        message = entry["conditions"][0]["message"]
        assert message.startswith("Accepted. ") and "10.0.0.1 (in denied network 10.0.0.0/8)" in message
    quiet_key = ObjectKey("XBackend", "default", "quiet")
    assert out[quiet_key] is statuses[quiet_key]
    assert condition["message"] == "Accepted."  # the given statuses are values: never changed


async def test_a_first_lookup_that_fails_is_an_empty_assignment_not_a_warming_cluster(dns: DnsStub) -> None:
    keeper = ExternalEndpoints(lambda: None, Resolver(lambda a: None, min_ttl=0.05))
    the = the_ir(dns, ("api", NAME))
    await dns.stop()
    try:
        keeper.update(the)
        await until(lambda: keeper.resources)
        assert addresses(keeper.resources["xbackend/default/api"]) == []
        assert "no address yet" in (keeper.answers()["xbackend/default/api"].note() or "")
    finally:
        await keeper.close()


class NoWalk(dict):  # type: ignore[type-arg]
    """A mapping that may be looked up but not walked (what an answer may cost: its own clusters)."""

    def __iter__(self):  # type: ignore[no-untyped-def]
        raise AssertionError("an answer walked every tracked name")

    def keys(self):  # type: ignore[no-untyped-def]
        raise AssertionError("an answer walked every tracked name")


async def test_an_answer_costs_its_own_clusters_not_every_tracked_name(dns: DnsStub) -> None:
    """Before: each answer compared its hostname with every tracked name (10,000 first answers at
    10,000 clusters: 10^8 comparisons, most of a 15 s start)."""
    keeper = ExternalEndpoints(lambda: None, Resolver(lambda a: None, min_ttl=60))
    try:
        hosts = [(f"x{i}", f"h{i}.example.test") for i in range(50)]
        for _, host in hosts:
            dns.set(host, ["192.0.2.1"])
        keeper.update(the_ir(dns, *hosts))
        keeper._clusters = NoWalk(keeper._clusters)
        await until(lambda: len(keeper.resources) == 50)
    finally:
        await keeper.close()


async def test_pushes_are_spaced_by_what_the_last_one_cost(dns: DnsStub) -> None:
    """A push that cost weir 100 ms is followed by none for 300 ms (FLUSH_SPACING): thousands of
    first answers must not keep weir busy pushing while the lookups wait."""
    pushes: list[float] = []

    def push() -> None:
        pushes.append(time.monotonic())
        time.sleep(0.1)  # what serving 10,000 assignments costs the controller

    keeper = ExternalEndpoints(push, Resolver(lambda a: None, min_ttl=60))
    try:
        hosts = [(f"x{i}", f"h{i}.example.test") for i in range(20)]
        for _, host in hosts:
            dns.set(host, ["192.0.2.1"])
        keeper.update(the_ir(dns, *hosts[:1]))
        await until(lambda: len(pushes) == 1)
        keeper.update(the_ir(dns, *hosts))  # 19 more names answer one after the other
        await until(lambda: len(keeper.resources) == 20)
        gaps = [b - a for a, b in itertools.pairwise(pushes)]
        assert gaps and min(gaps) >= 0.1 + 0.3 - 0.02, gaps
    finally:
        await keeper.close()
