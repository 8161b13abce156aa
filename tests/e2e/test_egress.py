"""The egress guard-rails, end to end: real Envoy, a DNS stub, upstreams and raw sockets on loopback.

The harness denies 127.0.0.66/32 (``TEST_DENIED_CIDRS``) so that test upstreams
on the rest of 127.0.0.0/8 stay reachable; one test runs weir's real default.
A "forbidden" address is a raw listening socket that never accepts: after the
requests, a non-blocking ``accept()`` proves that no TCP connection ever
reached it (the kernel queues a completed handshake even when nobody accepts).
"""

from __future__ import annotations

import json
import logging
import socket
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from weir_harness import FORBIDDEN_IP, GATEWAY_HEAD, Weir, eventually, pid_alive

from weir.testkit import DnsStub, RecordingUpstream, free_port

API_HOST = "api.example.test"
ALLOWED_IP = "127.0.0.2"
GUARD_POLICY = f"rbac_access_denied_matched_policy[weir-denied-network:{FORBIDDEN_IP}/32]"
XB = "gateway.networking.x-k8s.io"


@pytest.fixture
async def dns() -> AsyncIterator[DnsStub]:
    async with DnsStub() as stub:
        yield stub


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    path = tmp_path / "manifests"
    path.mkdir()
    return path


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


def routes(port: int, *xbackends: tuple[str, str], gateway_port: int) -> str:
    """A Gateway, one HTTPRoute with a rule ``/NAME`` per XBackend, and the XBackends (plaintext)."""
    text = GATEWAY_HEAD.format(port=gateway_port) + (
        "---\napiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\n"
        "metadata: {name: egress, namespace: default}\nspec:\n  parentRefs: [{name: gw}]\n  rules:\n"
    )
    for name, _ in xbackends:
        text += (
            f"  - matches: [{{path: {{value: /{name}}}}}]\n"
            f"    backendRefs: [{{group: {XB}, kind: XBackend, name: {name}}}]\n"
        )
    for name, hostname in xbackends:
        text += (
            f"---\napiVersion: {XB}/v1alpha1\nkind: XBackend\n"
            f"metadata: {{name: {name}, namespace: default}}\n"
            f"spec:\n  type: ExternalHostname\n  externalHostname: {{hostname: {hostname}}}\n"
            f"  port: {{port: {port}}}\n"
        )
    return text


async def denied_count(weir: Weir, cluster: str = "xbackend/default/api") -> int:
    assert weir.controller is not None and weir.controller.envoy is not None
    _, stats = await weir.controller.envoy.admin.get("/stats?filter=rbac.denied")
    stat = f"cluster.{cluster}.rbac.denied: "
    values = [int(ln.removeprefix(stat)) for ln in stats.splitlines() if ln.startswith(stat)]
    return values[0] if values else 0


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
        assert f"resolved to {FORBIDDEN_IP}:{port}, which is in a denied network" in response.text
        assert "xbackend/default/api" in response.text and GUARD_POLICY in response.text
    assert_never_connected(forbidden)
    # The XBackend itself is fine: the guard acts on the address, not on the object.
    assert xbackend_accepted(weir, "api")["status"] == "True"

    assert await denied_count(weir) == 3

    def logged() -> list[dict[str, object]]:
        lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "weir.envoy.access"]
        return [line for line in lines if line.get("path") == "/api/secrets"]

    # Envoy flushes access logs every 10 s, when its buffer fills, and when it exits.
    await weir.stop()
    entries = logged()
    assert len(entries) == 3, entries
    for entry in entries:
        assert entry["response_code"] == 403
        assert entry["response_code_details"] == GUARD_POLICY
        assert entry["upstream_host"] == f"{FORBIDDEN_IP}:{port}"


async def test_mixed_answer_never_reaches_the_forbidden_address(
    weir: Weir, dns: DnsStub, port: int, forbidden: socket.socket
) -> None:
    """Both addresses stay in Envoy's load balancer; only requests sent to the allowed one get through."""
    async with RecordingUpstream("allowed", host=ALLOWED_IP, port=port) as allowed:
        dns.set(API_HOST, [ALLOWED_IP, FORBIDDEN_IP])
        weir.write("egress.yaml", routes(port, ("api", API_HOST), gateway_port=weir.gateway_port))
        await weir.start()
        codes: Counter[int] = Counter()
        async with httpx.AsyncClient() as client:
            for _ in range(40):
                codes[(await client.get(weir.url("/api/x"))).status_code] += 1
        assert set(codes) <= {200, 403}, codes
        assert codes[200] >= 1 and codes[403] >= 1, codes  # round robin over both addresses
        assert len(allowed.requests) == codes[200]
        assert {r.remote[0] for r in allowed.requests} == {"127.0.0.1"}  # Envoy, from loopback
        assert await denied_count(weir) == codes[403]
        assert_never_connected(forbidden)


async def test_name_that_rebinds_to_a_forbidden_address_is_refused(
    weir: Weir, dns: DnsStub, port: int, forbidden: socket.socket
) -> None:
    """DNS rebinding: the name was fine when Envoy first resolved it, then moves into a denied network."""
    async with RecordingUpstream("allowed", host=ALLOWED_IP, port=port) as allowed:
        dns.set(API_HOST, [ALLOWED_IP])
        weir.write("egress.yaml", routes(port, ("api", API_HOST), gateway_port=weir.gateway_port))
        await weir.start()
        async with httpx.AsyncClient() as client:
            assert (await client.get(weir.url("/api/x"))).status_code == 200
            dns.set(API_HOST, [FORBIDDEN_IP])  # TTL 1 s; Envoy follows the TTL

            async def refused() -> bool:
                return (await client.get(weir.url("/api/x"))).status_code == 403

            await eventually(refused, timeout=10, interval=0.1)
        served = len(allowed.requests)
        assert_never_connected(forbidden)
        assert served >= 1


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
    assert f"[::ffff:{FORBIDDEN_IP}]:{port}" in response.text and GUARD_POLICY in response.text
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
            assert "weir-denied-network:127.0.0.0/8" in response.text
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
