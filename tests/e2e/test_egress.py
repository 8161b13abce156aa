"""The egress guard-rails, end to end: real Envoy, a DNS stub, upstreams and raw sockets on loopback.

The harness denies 127.0.0.66/32 (``TEST_DENIED_CIDRS``) so that test upstreams
on the rest of 127.0.0.0/8 stay reachable; one test runs weir's real default.
A "forbidden" address is a raw listening socket that never accepts: after the
requests, a non-blocking ``accept()`` proves that no TCP connection ever
reached it (the kernel queues a completed handshake even when nobody accepts).
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import ssl
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from netns import run_in_netns
from netns_egress import ALLOWED_FORMS, EMBEDDED_FORMS
from weir_harness import (
    FORBIDDEN_IP,
    GATEWAY_HEAD,
    XB,
    Weir,
    eventually,
    pid_alive,
    route_to,
    routes,
    xbackend,
)

from weir.envoy_stats import EGRESS_REFUSED_STAT
from weir.testkit import DnsStub, RecordingUpstream, UpstreamResponse, free_port

API_HOST = "api.example.test"
ALLOWED_IP = "127.0.0.2"
#: What the 403 of a name whose every address is denied names (weir.xds.endpoints.denied_reason).
DENIED_REASON = f"{FORBIDDEN_IP}/32"


@pytest.fixture
async def weir(folder: Path, dns: DnsStub) -> AsyncIterator[Weir]:
    harness = Weir(folder, dns, free_port())
    try:
        yield harness
    finally:
        await _stop(harness)


async def _stop(harness: Weir) -> None:
    await harness.stop()
    for pid in harness.envoy_pids:
        assert not pid_alive(pid), f"Envoy {pid} survived stop()"


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


async def denied_count(weir: Weir) -> int:
    """Requests and TCP connections refused: those sent to the endpoint that stands for a name whose
    every address is denied (the internal listener ``weir-egress-denied``, weir.xds.endpoints)."""
    assert weir.controller is not None and weir.controller.envoy is not None
    _, stats = await weir.controller.envoy.admin.get("/stats?filter=weir-egress-denied")
    stat = f"{EGRESS_REFUSED_STAT}: "
    values = [int(ln.removeprefix(stat)) for ln in stats.splitlines() if ln.startswith(stat)]
    return values[0] if values else 0


def counting_translations(weir: Weir) -> list[int]:
    """A list that grows by one at each translation the controller makes from now on."""
    assert weir.controller is not None
    translator = weir.controller._translator
    calls: list[int] = []
    translate = translator.translate

    def counted(resources: Any) -> Any:
        calls.append(1)
        return translate(resources)

    translator.translate = counted  # type: ignore[method-assign]
    return calls


def xbackend_accepted(weir: Weir, name: str) -> dict[str, str]:
    [parent] = weir.status_of("XBackend", "default", name)["parents"]
    return next(c for c in parent["conditions"] if c["type"] == "Accepted")


# --------------------------------------------------------------------------
# The resolved-address guard
# --------------------------------------------------------------------------


async def test_forbidden_address_gets_403_with_reason_and_no_connection(
    weir: Weir, dns: DnsStub, port: int, forbidden: socket.socket, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="weir.envoy.access")
    dns.set(API_HOST, [FORBIDDEN_IP])
    weir.write("egress.yaml", routes(port, ("api", API_HOST), gateway_port=weir.gateway_port))
    await weir.start()
    async with httpx.AsyncClient() as client:
        responses = [await client.get(weir.url("/api/secrets")) for _ in range(3)]
    for response in responses:
        assert response.status_code == 403, response.text
        assert "is in a denied network; no connection was made" in response.text
        assert f"{FORBIDDEN_IP}:{port} in {DENIED_REASON}" in response.text
        assert "xbackend/default/api" in response.text
    assert_never_connected(forbidden)
    # The XBackend itself is fine: the guard acts on the address, not on the object; its status says.
    accepted = xbackend_accepted(weir, "api")
    assert accepted["status"] == "True"
    assert (
        f"every address {API_HOST} resolves to is denied: {FORBIDDEN_IP} (in denied network"
        in (accepted["message"])
    )

    assert await denied_count(weir) == 3

    def logged() -> list[dict[str, object]]:
        lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "weir.envoy.access"]
        return [
            line
            for line in lines
            if line.get("path") == "/api/secrets" and line.get("route_name") != "weir-egress-denied"
        ]

    # Envoy flushes access logs every 10 s, when its buffer fills, and when it exits.
    await weir.stop()
    entries = logged()
    assert len(entries) == 3, entries
    for entry in entries:
        assert entry["response_code"] == 403
        assert (
            entry["upstream_host"] == f"envoy://weir-egress-denied/{FORBIDDEN_IP}:{port} in {DENIED_REASON}"
        )


async def test_mixed_answer_never_reaches_the_forbidden_address(
    weir: Weir, dns: DnsStub, port: int, forbidden: socket.socket
) -> None:
    """A mixed answer is served by its allowed addresses alone, and the XBackend's status says so.

    The denied address never reaches Envoy (its assignment holds the allowed
    one only), so every request succeeds and none is refused.
    """
    async with RecordingUpstream("allowed", host=ALLOWED_IP, port=port) as allowed:
        dns.set(API_HOST, [ALLOWED_IP, FORBIDDEN_IP])
        weir.write("egress.yaml", routes(port, ("api", API_HOST), gateway_port=weir.gateway_port))
        await weir.start()
        codes: Counter[int] = Counter()
        async with httpx.AsyncClient() as client:
            for _ in range(40):
                codes[(await client.get(weir.url("/api/x"))).status_code] += 1
        assert codes == {200: 40}, codes
        assert len(allowed.requests) == 40
        assert {r.remote[0] for r in allowed.requests} == {"127.0.0.1"}  # Envoy, from loopback
        assert await denied_count(weir) == 0
        assert_never_connected(forbidden)
        message = xbackend_accepted(weir, "api")["message"]
        assert f"{API_HOST} resolves to {ALLOWED_IP} and also to {FORBIDDEN_IP} (in denied network" in message
        assert "requests go to the allowed addresses only" in message


async def test_name_that_rebinds_to_a_forbidden_address_is_refused(
    weir: Weir, dns: DnsStub, port: int, forbidden: socket.socket
) -> None:
    """DNS rebinding: the name was fine when weir first resolved it, then moves into a denied network.

    weir follows the TTL and replaces only that cluster's assignment: no
    translation happens for it (the answer is data, not configuration).
    """
    async with RecordingUpstream("allowed", host=ALLOWED_IP, port=port) as allowed:
        dns.set(API_HOST, [ALLOWED_IP])
        weir.write("egress.yaml", routes(port, ("api", API_HOST), gateway_port=weir.gateway_port))
        await weir.start()
        translations = counting_translations(weir)
        async with httpx.AsyncClient() as client:
            assert (await client.get(weir.url("/api/x"))).status_code == 200
            dns.set(API_HOST, [FORBIDDEN_IP])  # TTL 1 s; weir follows the TTL

            async def refused() -> bool:
                return (await client.get(weir.url("/api/x"))).status_code == 403

            await eventually(refused, timeout=10, interval=0.1)
            served = len(allowed.requests)
            for _ in range(5):  # once refused, always refused
                assert (await client.get(weir.url("/api/x"))).status_code == 403
        assert len(allowed.requests) == served >= 1
        assert_never_connected(forbidden)
        assert translations == []
        assert "every address" in xbackend_accepted(weir, "api")["message"]


async def test_ipv4_mapped_ipv6_answer_is_refused_as_the_ipv4_address(
    weir: Weir, dns: DnsStub, port: int, forbidden: socket.socket
) -> None:
    """``::ffff:127.0.0.66`` reaches 127.0.0.66; the guard must see through it."""
    dns.set(API_HOST, [f"::ffff:{FORBIDDEN_IP}"])  # AAAA only: V4_PREFERRED falls back to it
    weir.write("egress.yaml", routes(port, ("api", API_HOST), gateway_port=weir.gateway_port))
    await weir.start()
    async with httpx.AsyncClient() as client:
        response = await client.get(weir.url("/api/x"))
    assert response.status_code == 403, response.text
    # However the address is written (dnslib writes ``::ffff:7f00:42``), it is judged as 127.0.0.66.
    written = (f"[::ffff:{FORBIDDEN_IP}]", "[::ffff:7f00:42]")
    assert any(f"{form}:{port} in {DENIED_REASON}" in response.text for form in written), response.text
    assert_never_connected(forbidden)


async def test_weir_default_policy_denies_loopback(folder: Path, dns: DnsStub, port: int) -> None:
    """Without the tests' narrowing, weir's own defaults apply: all of 127.0.0.0/8 is denied."""
    harness = Weir(folder, dns, free_port(), egress_denied_cidrs=None)
    try:
        async with RecordingUpstream("loopback", host=ALLOWED_IP, port=port) as upstream:
            dns.set(API_HOST, [ALLOWED_IP])
            harness.write("egress.yaml", routes(port, ("api", API_HOST), gateway_port=harness.gateway_port))
            await harness.start()
            async with httpx.AsyncClient() as client:
                response = await client.get(harness.url("/api/x"))
            assert response.status_code == 403, response.text
            assert f"{ALLOWED_IP}:{port} in 127.0.0.0/8" in response.text
            assert upstream.requests == []
    finally:
        await _stop(harness)


# --------------------------------------------------------------------------
# Hostname refusals, allow-list and parameters, through status
# --------------------------------------------------------------------------

CLASS_WITH_PARAMETERS = """\
apiVersion: weir.dev/v1alpha1
kind: GatewayClassConfig
metadata: {{name: egress}}
spec:
  egress:
    allowedHostnames: ["*.allowed.test"]
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {{name: weir}}
spec:
  controllerName: weir.dev/gateway-controller
  parametersRef: {{group: weir.dev, kind: GatewayClassConfig, name: {config}}}
---
"""


async def test_refused_hostnames_and_allow_list_show_in_status_and_send_nothing(
    weir: Weir, dns: DnsStub, port: int
) -> None:
    async with RecordingUpstream("allowed", host=ALLOWED_IP, port=port) as upstream:
        for name in ("api.allowed.test", "api.other.test", "metadata.google.internal", "localhost"):
            dns.set(name, [ALLOWED_IP])  # were anything sent, it would arrive here
        text = routes(
            port,
            ("ok", "api.allowed.test"),
            ("other", "api.other.test"),
            ("metadata", "metadata.google.internal"),
            ("local", "localhost"),
            gateway_port=weir.gateway_port,
        )
        # Replace the plain GatewayClass by one with parameters.
        text = CLASS_WITH_PARAMETERS.format(config="egress") + text.split("---\n", 1)[1]
        weir.write("egress.yaml", text)
        await weir.start()

        gateway_class = weir.status_of("GatewayClass", "", "weir")["conditions"][0]
        assert (gateway_class["status"], gateway_class["reason"]) == ("True", "Accepted")
        assert "GatewayClassConfig egress" in gateway_class["message"]
        expected = {
            "ok": ("True", "Accepted"),
            "other": ("False", "NotAllowed"),
            "metadata": ("False", "UnsupportedValue"),
            "local": ("False", "UnsupportedValue"),
        }
        for name, (status, reason) in expected.items():
            cond = xbackend_accepted(weir, name)
            assert (cond["status"], cond["reason"]) == (status, reason), cond
        assert "*.allowed.test" in xbackend_accepted(weir, "other")["message"]
        assert "cloud metadata" in xbackend_accepted(weir, "metadata")["message"]

        async with httpx.AsyncClient() as client:
            assert (await client.get(weir.url("/ok"))).status_code == 200
            for name in ("other", "metadata", "local"):
                assert (await client.get(weir.url(f"/{name}"))).status_code == 500
        assert [r.host for r in upstream.requests] == ["api.allowed.test"]


async def test_invalid_parameters_ref_refuses_egress_but_keeps_services(
    weir: Weir, dns: DnsStub, port: int
) -> None:
    async with RecordingUpstream("api", host=ALLOWED_IP, port=port) as upstream:
        dns.set(API_HOST, [ALLOWED_IP])
        text = routes(port, ("api", API_HOST), gateway_port=weir.gateway_port)
        text = CLASS_WITH_PARAMETERS.format(config="missing") + text.split("---\n", 1)[1]
        text += f"""\
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: web, namespace: default}}
spec:
  parentRefs: [{{name: gw}}]
  rules:
  - matches: [{{path: {{value: /web}}}}]
    backendRefs: [{{name: web, port: {port}}}]
---
apiVersion: v1
kind: Service
metadata: {{name: web, namespace: default}}
spec: {{ports: [{{name: http, port: {port}}}]}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: web-1, namespace: default, labels: {{kubernetes.io/service-name: web}}}}
addressType: IPv4
ports: [{{name: http, port: {port}}}]
endpoints: [{{addresses: [{ALLOWED_IP}]}}]
"""
        weir.write("egress.yaml", text)
        await weir.start()
        gateway_class = weir.status_of("GatewayClass", "", "weir")["conditions"][0]
        assert (gateway_class["status"], gateway_class["reason"]) == ("False", "InvalidParameters")
        assert "'missing'" in gateway_class["message"] and "does not exist" in gateway_class["message"]
        cond = xbackend_accepted(weir, "api")
        assert (cond["status"], cond["reason"]) == ("False", "NotAllowed")
        async with httpx.AsyncClient() as client:
            assert (await client.get(weir.url("/api"))).status_code == 500
            web = await client.get(weir.url("/web"))
        assert web.status_code == 200
        assert [r.path for r in upstream.requests] == ["/web"]


# --------------------------------------------------------------------------
# Headers
# --------------------------------------------------------------------------

CLIENT_HEADERS = {
    "x-request-id": "client-request-id",
    "x-envoy-original-path": "/internal/admin",
    "x-envoy-made-up": "1",
    "x-envoy-attempt-count": "3",
    "x-forwarded-for": "10.1.2.3",
    "x-forwarded-host": "internal.corp",
    "x-forwarded-port": "8443",
    "x-forwarded-proto": "https",
    "x-forwarded-prefix": "/internal",
    "forwarded": "for=10.1.2.3;host=internal.corp",
    "x-app-header": "kept",
}


def leaked(headers: tuple[tuple[str, str], ...]) -> list[str]:
    return [
        name
        for name, _ in headers
        if name.startswith(("x-envoy-", "x-forwarded-")) or name in ("x-request-id", "forwarded")
    ]


async def test_internal_headers_never_reach_external_hostnames(weir: Weir, dns: DnsStub, port: int) -> None:
    async with RecordingUpstream("api", host=ALLOWED_IP, port=port) as upstream:
        dns.set(API_HOST, [ALLOWED_IP])
        text = routes(port, ("api", API_HOST), gateway_port=weir.gateway_port)
        text += f"""\
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: split, namespace: default}}
spec:
  parentRefs: [{{name: gw}}]
  rules:
  - matches: [{{path: {{value: /split}}}}]
    backendRefs:
    - {{group: {XB}, kind: XBackend, name: api, weight: 1}}
    - {{group: {XB}, kind: XBackend, name: api2, weight: 1}}
---
apiVersion: {XB}/v1alpha1
kind: XBackend
metadata: {{name: api2, namespace: default}}
spec:
  type: ExternalHostname
  externalHostname: {{hostname: {API_HOST}}}
  port: {{port: {port}}}
"""
        weir.write("egress.yaml", text)
        await weir.start()
        async with httpx.AsyncClient() as client:
            for path in ("/api/x", "/split/a", "/split/b", "/split/c", "/split/d"):
                response = await client.get(weir.url(path), headers=CLIENT_HEADERS)
                assert response.status_code == 200, response.text
            # Without client headers too: nothing Envoy adds by itself leaks either.
            assert (await client.get(weir.url("/api/y"))).status_code == 200
        assert len(upstream.requests) == 6
        for seen in upstream.requests:
            assert leaked(seen.headers) == [], seen.headers
            assert seen.host == API_HOST
        assert upstream.requests[0].header("x-app-header") == "kept"


# --------------------------------------------------------------------------
# Every path out: request mirrors
# --------------------------------------------------------------------------


async def test_request_mirror_to_a_denied_address_sends_nothing(
    weir: Weir, dns: DnsStub, port: int, forbidden: socket.socket
) -> None:
    """A mirror target is an upstream like any other: its copy must never reach a denied address.

    The copy carries the client's ``Authorization``; a route author who could
    mirror to the metadata service or a private network would have a blind
    request forgery primitive. A second mirror, to an allowed address, still
    gets its copies, cleaned like any request to an external hostname.
    """
    async with RecordingUpstream("api", host=ALLOWED_IP, port=port) as upstream:
        dns.set(API_HOST, [ALLOWED_IP])
        dns.set("meta.example.test", [FORBIDDEN_IP])
        dns.set("copy.example.test", [ALLOWED_IP])
        mirrors = "".join(
            "    - type: RequestMirror\n"
            f"      requestMirror: {{backendRef: {{group: {XB}, kind: XBackend, name: {name}}}}}\n"
            for name in ("meta", "copy")
        )
        text = (
            GATEWAY_HEAD.format(port=weir.gateway_port)
            + route_to("HTTPRoute", "api", rule="    filters:\n" + mirrors)
            + xbackend("api", API_HOST, port)
            + xbackend("meta", "meta.example.test", port)
            + xbackend("copy", "copy.example.test", port)
        )
        weir.write("egress.yaml", text)
        await weir.start()
        async with httpx.AsyncClient() as client:
            for _ in range(5):
                response = await client.get(
                    weir.url("/x"), headers={"authorization": "Bearer secret", **CLIENT_HEADERS}
                )
                assert response.status_code == 200, response.text

        # The shadow copies are sent alongside the request; wait for the allowed ones to arrive.
        await eventually(lambda: len([r for r in upstream.requests if r.host == "copy.example.test"]) == 5)
        assert sorted(r.host or "" for r in upstream.requests) == [API_HOST] * 5 + ["copy.example.test"] * 5
        for seen in upstream.requests:
            assert leaked(seen.headers) == [] and seen.header("x-weir-mirror-cluster") is None, seen.headers
            assert seen.header("authorization") == "Bearer secret"

        # The denied endpoint refused every copy, and nothing reached the denied address.
        async def refused() -> bool:
            return await denied_count(weir) == 5

        await eventually(refused)
        assert_never_connected(forbidden)


# --------------------------------------------------------------------------
# IPv6 forms that embed an IPv4 address (private network namespace)
# --------------------------------------------------------------------------


async def test_every_ipv6_form_embedding_a_denied_ipv4_is_refused() -> None:
    """Behind a NAT64 gateway or a 6to4/Teredo relay these reach the IPv4 address they embed.

    Only 10.0.0.0/8 is denied, so each form is refused because of the IPv4
    address inside it, not because its own prefix is on a list (Teredo and
    the local-use NAT64 prefix, whose IPv4 address cannot be read reliably,
    are denied whole because an IPv4 network is); two forms embedding an
    allowed address show that the rest of IPv6 still works.
    """
    seen = await run_in_netns("netns_egress", "embedded_forms", denied=["10.0.0.0/8"])
    refused = {"status": 403, "connected": False}
    wrong = {
        label: seen[label]
        for label in EMBEDDED_FORMS
        if {k: seen[label][k] for k in refused} != refused or "denied network" not in seen[label]["body"]
    }
    wrong.update(
        (label, seen[label])
        for label in ALLOWED_FORMS
        if (seen[label]["status"], seen[label]["body"]) != (200, "allowed")
    )
    assert wrong == {}, wrong


# --------------------------------------------------------------------------
# Every path out: retries, GRPCRoute, TLSRoute passthrough
# --------------------------------------------------------------------------


async def test_retries_are_guarded_attempt_by_attempt(
    weir: Weir, dns: DnsStub, port: int, forbidden: socket.socket
) -> None:
    """A retry picks an address again, among the allowed ones only: the denied one is never tried."""
    failing = UpstreamResponse(status=503, body="busy")
    async with RecordingUpstream("api", host=ALLOWED_IP, port=port, handler=failing) as upstream:
        dns.set(API_HOST, [ALLOWED_IP, FORBIDDEN_IP])
        text = routes(port, ("api", API_HOST), gateway_port=weir.gateway_port).replace(
            "    backendRefs: [{group: gateway.networking.x-k8s.io, kind: XBackend, name: api}]\n",
            "    backendRefs: [{group: gateway.networking.x-k8s.io, kind: XBackend, name: api}]\n"
            "    retry: {codes: [503], attempts: 3, backoff: 10ms}\n",
        )
        assert "retry:" in text
        weir.write("egress.yaml", text)
        await weir.start()
        async with httpx.AsyncClient() as client:
            codes = Counter([(await client.get(weir.url("/api/x"))).status_code for _ in range(20)])
        assert codes == {503: 20}, codes
        # Every attempt reached the allowed upstream: retries happened, none went elsewhere.
        assert len(upstream.requests) == 20 * 4, len(upstream.requests)
        assert await denied_count(weir) == 0
        assert_never_connected(forbidden)


async def test_grpcroute_to_a_denied_address_is_refused(
    weir: Weir, dns: DnsStub, port: int, forbidden: socket.socket
) -> None:
    dns.set(API_HOST, [FORBIDDEN_IP])
    weir.write(
        "egress.yaml",
        GATEWAY_HEAD.format(port=weir.gateway_port)
        + route_to("GRPCRoute", "api")
        + xbackend("api", API_HOST, port, protocol="H2C"),
    )
    await weir.start()
    async with httpx.AsyncClient(http1=False, http2=True) as client:
        response = await client.post(
            weir.url("/echo.Echo/Say"), content=b"\0\0\0\0\0", headers={"content-type": "application/grpc"}
        )
    # Envoy answers a gRPC client's refusal as a gRPC status: 7, PERMISSION_DENIED, with the reason.
    assert response.headers.get("grpc-status") == "7", response.headers
    assert "is in a denied network" in response.headers.get("grpc-message", "")
    assert await denied_count(weir) == 1
    assert_never_connected(forbidden)


async def test_tls_passthrough_to_a_denied_address_is_closed(
    weir: Weir, dns: DnsStub, port: int, forbidden: socket.socket
) -> None:
    dns.set(API_HOST, [FORBIDDEN_IP])
    head = GATEWAY_HEAD.format(port=weir.gateway_port).replace(
        "protocol: HTTP}]", "protocol: TLS, tls: {mode: Passthrough}}]"
    )
    weir.write(
        "egress.yaml",
        head
        + route_to("TLSRoute", "api", spec=f"  hostnames: [{API_HOST}]\n")
        + xbackend("api", API_HOST, port, protocol="TCP"),
    )
    await weir.start()
    context = ssl.create_default_context()
    for _ in range(2):
        with pytest.raises((ssl.SSLError, ConnectionError, asyncio.IncompleteReadError)):
            _reader, writer = await asyncio.wait_for(
                asyncio.open_connection(
                    "127.0.0.1", weir.gateway_port, ssl=context, server_hostname=API_HOST
                ),
                10,
            )
            writer.close()
    assert_never_connected(forbidden)
    assert await denied_count(weir) == 2
    assert "every address" in xbackend_accepted(weir, "api")["message"]
