"""References to XBackends from routes, end to end: real Envoy, a DNS stub, upstreams on loopback.

Weights across an XBackend and a Service in one rule; rules whose backends all or partly failed
(500 for the failed share, and the upstreams never see those requests); a ``backendRef.port``
that differs from the XBackend's port; a cross-namespace reference that a ReferenceGrant file
allows and then no longer allows, applied by the running Envoy without a restart.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import yaml
from weir_harness import GATEWAY_HEAD, Weir, eventually

from weir.testkit import DnsStub, RecordingUpstream

API_HOST = "api.example.test"
EXTERNAL_IP = "127.0.0.2"
SERVICE_IP = "127.0.0.3"
XB = "gateway.networking.x-k8s.io"
REQUESTS = 400
TOLERANCE = 0.07


@pytest.fixture
async def dns() -> AsyncIterator[DnsStub]:
    async with DnsStub() as stub:
        stub.set(API_HOST, [EXTERNAL_IP])
        yield stub


@pytest.fixture
async def external() -> AsyncIterator[RecordingUpstream]:
    """The "external API" an XBackend names (plaintext: TLS is test_tls_modes.py's subject)."""
    async with RecordingUpstream("external", host=EXTERNAL_IP) as upstream:
        yield upstream


@pytest.fixture
async def service() -> AsyncIterator[RecordingUpstream]:
    """The one endpoint of Service ``web``."""
    async with RecordingUpstream("service", host=SERVICE_IP) as upstream:
        yield upstream


def xbackend_ref(name: str, **extra: Any) -> dict[str, Any]:
    return {"group": XB, "kind": "XBackend", "name": name, **extra}


def manifests(
    gateway_port: int,
    rules: dict[str, list[dict[str, Any]]],
    *,
    external_port: int,
    service_port: int | None = None,
    xbackend_namespace: str = "default",
) -> str:
    """The harness's Gateway, HTTPRoute ``api`` with a rule per path in ``rules`` (path → backendRefs),
    XBackend ``api`` (in ``xbackend_namespace``) for :data:`API_HOST` on ``external_port``, and with
    ``service_port`` Service ``web`` whose one endpoint listens on :data:`SERVICE_IP`."""
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "HTTPRoute",
            "metadata": {"name": "api", "namespace": "default"},
            "spec": {
                "parentRefs": [{"name": "gw"}],
                "rules": [
                    {"matches": [{"path": {"type": "PathPrefix", "value": path}}], "backendRefs": refs}
                    for path, refs in rules.items()
                ],
            },
        },
        {
            "apiVersion": f"{XB}/v1alpha1",
            "kind": "XBackend",
            "metadata": {"name": "api", "namespace": xbackend_namespace},
            "spec": {
                "type": "ExternalHostname",
                "externalHostname": {"hostname": API_HOST},
                "port": {"port": external_port},
                "tls": {"mode": "None"},
            },
        },
    ]
    if service_port is not None:
        docs += [
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "web", "namespace": "default"},
                "spec": {"ports": [{"name": "http", "port": 80}]},
            },
            {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {
                    "name": "web-1",
                    "namespace": "default",
                    "labels": {"kubernetes.io/service-name": "web"},
                },
                "addressType": "IPv4",
                "ports": [{"name": "http", "port": service_port}],
                "endpoints": [{"addresses": [SERVICE_IP]}],
            },
        ]
    return GATEWAY_HEAD.format(port=gateway_port) + "---\n" + yaml.safe_dump_all(docs, sort_keys=False)


async def spread(weir: Weir, path: str, count: int = REQUESTS) -> Counter[str]:
    """Send ``count`` requests to ``path``; count who answered: an upstream's name, or the status code."""
    seen: Counter[str] = Counter()
    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=20)) as client:

        async def one() -> None:
            response = await client.get(weir.url(path))
            if response.status_code == 200:
                seen[response.json()["upstream"]] += 1
            else:
                seen[str(response.status_code)] += 1

        for _ in range(count // 100):
            await asyncio.gather(*(one() for _ in range(100)))
    assert sum(seen.values()) == count
    return seen


def route_resolved_refs(weir: Weir) -> tuple[str, str, str]:
    [parent] = weir.status_of("HTTPRoute", "default", "api")["parents"]
    cond = next(c for c in parent["conditions"] if c["type"] == "ResolvedRefs")
    return cond["status"], cond["reason"], cond["message"]


def weir_entries(weir: Weir, kind: str, namespace: str, name: str) -> list[dict[str, Any]]:
    """weir's entries in the ``status.parents`` of an object (none when it has no status)."""
    try:
        parents = weir.status_of(kind, namespace, name).get("parents", [])
    except KeyError:
        return []
    return [p for p in parents if p["controllerName"] == weir.settings.controller_name]


async def test_weights_across_an_xbackend_and_a_service(
    weir: Weir, external: RecordingUpstream, service: RecordingUpstream
) -> None:
    rules = {"/": [xbackend_ref("api", weight=3), {"name": "web", "port": 80, "weight": 1}]}
    weir.write(
        "api.yaml",
        manifests(weir.gateway_port, rules, external_port=external.port, service_port=service.port),
    )
    await weir.start()
    seen = await spread(weir, "/")
    assert set(seen) == {"external", "service"}, seen
    assert abs(seen["external"] / REQUESTS - 0.75) <= TOLERANCE, seen
    assert len(external.requests) == seen["external"] and len(service.requests) == seen["service"]
    # The external share went out as a request for the external hostname; the Service's did not.
    assert {r.host for r in external.requests} == {API_HOST}
    assert API_HOST not in {r.host for r in service.requests}
    assert route_resolved_refs(weir)[:2] == ("True", "ResolvedRefs")


async def test_a_rule_whose_backends_all_failed_answers_500(
    weir: Weir, external: RecordingUpstream, service: RecordingUpstream
) -> None:
    rules = {
        "/failed": [xbackend_ref("ghost", weight=1), {"name": "ghost-svc", "port": 80, "weight": 1}],
        "/ok": [xbackend_ref("api")],
    }
    weir.write(
        "api.yaml",
        manifests(weir.gateway_port, rules, external_port=external.port, service_port=service.port),
    )
    await weir.start()
    async with httpx.AsyncClient() as client:
        statuses = [(await client.get(weir.url("/failed"))).status_code for _ in range(20)]
        assert (await client.get(weir.url("/ok"))).status_code == 200
    assert set(statuses) == {500}
    assert len(external.requests) == 1 and service.requests == []
    assert route_resolved_refs(weir) == ("False", "BackendNotFound", "XBackend default/ghost does not exist")


async def test_a_rule_with_a_missing_backend_answers_500_for_its_share(
    weir: Weir, external: RecordingUpstream
) -> None:
    rules = {"/": [xbackend_ref("api", weight=3), {"name": "ghost-svc", "port": 80, "weight": 1}]}
    weir.write("api.yaml", manifests(weir.gateway_port, rules, external_port=external.port))
    await weir.start()
    seen = await spread(weir, "/")
    assert set(seen) == {"external", "500"}, seen
    assert abs(seen["500"] / REQUESTS - 0.25) <= TOLERANCE, seen
    assert len(external.requests) == seen["external"]
    assert route_resolved_refs(weir) == (
        "False",
        "BackendNotFound",
        "Service default/ghost-svc does not exist",
    )


async def test_backend_ref_port_must_equal_the_xbackend_port(weir: Weir, external: RecordingUpstream) -> None:
    other = external.port + 1 if external.port < 65535 else external.port - 1
    rules = {
        "/same": [xbackend_ref("api", port=external.port)],
        "/other": [xbackend_ref("api", port=other)],
    }
    weir.write("api.yaml", manifests(weir.gateway_port, rules, external_port=external.port))
    await weir.start()
    async with httpx.AsyncClient() as client:
        assert (await client.get(weir.url("/same"))).status_code == 200
        assert (await client.get(weir.url("/other"))).status_code == 500
    assert len(external.requests) == 1
    status, reason, message = route_resolved_refs(weir)
    assert (status, reason) == ("False", "BackendNotFound")
    assert f"backendRef port {other} does not match XBackend default/api port {external.port}" in message


GRANT = f"""\
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {{name: default-to-egress, namespace: egress}}
spec:
  from: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: default}}]
  to: [{{group: {XB}, kind: XBackend, name: api}}]
"""


async def test_cross_namespace_reference_follows_the_reference_grant_without_restarting_envoy(
    weir: Weir, external: RecordingUpstream
) -> None:
    rules = {"/": [xbackend_ref("api", namespace="egress")]}
    weir.write(
        "api.yaml",
        manifests(weir.gateway_port, rules, external_port=external.port, xbackend_namespace="egress"),
    )
    await weir.start()
    pid = weir.envoy_pid
    async with httpx.AsyncClient() as client:

        async def answers(code: int) -> bool:
            return (await client.get(weir.url("/"))).status_code == code

        assert await answers(500)
        status, reason, message = route_resolved_refs(weir)
        assert (status, reason) == ("False", "RefNotPermitted")
        assert "XBackend egress/api is in another namespace" in message
        assert external.requests == []

        grant = weir.write("grant.yaml", GRANT)
        _, elapsed = await eventually(lambda: answers(200), timeout=5, interval=0.02)
        print(f"grant applied in {elapsed * 1000:.0f} ms")
        assert weir.envoy_pid == pid, "Envoy was restarted to apply a ReferenceGrant"
        await eventually(lambda: route_resolved_refs(weir)[:2] == ("True", "ResolvedRefs"), timeout=5)
        [parent] = weir_entries(weir, "XBackend", "egress", "api")
        assert parent["parentRef"] == {"group": "gateway.networking.k8s.io", "kind": "Gateway",
                                       "namespace": "default", "name": "gw"}  # fmt: skip
        assert external.requests and {r.host for r in external.requests} == {API_HOST}

        grant.unlink()
        await eventually(lambda: answers(500), timeout=5, interval=0.02)
        assert weir.envoy_pid == pid, "Envoy was restarted to apply a removed ReferenceGrant"
        await eventually(lambda: route_resolved_refs(weir)[1] == "RefNotPermitted", timeout=5)
        # No Gateway of weir's uses the XBackend any more: weir has no entry in its status. (From
        # files, whose objects never carry weir's status, there is then no status at all.)
        assert weir_entries(weir, "XBackend", "egress", "api") == []
        served = len(external.requests)
        assert all([await answers(500) for _ in range(10)])
        assert len(external.requests) == served
