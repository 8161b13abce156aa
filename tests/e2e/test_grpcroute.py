"""GRPCRoute end to end: real gRPC servers and clients (``grpcio``) through weir and Envoy.

Three gRPC echo "pods" on loopback, each the one endpoint of its Service (two of them without
``appProtocol``: weir speaks HTTP/2 to them because a GRPCRoute uses them). Calls go through the
gateway over h2c with prior knowledge, as gRPC clients do, and the echo's reply says which pod
answered and which metadata it received.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import grpc.aio
import pytest
import pytest_asyncio
import yaml
from weir_harness import GATEWAY_HEAD, Weir, eventually, pid_alive

from echo_grpc import SERVICE, GrpcEchoServer, grpc_echo
from weir.testkit import EchoIdentity, free_port

pytestmark = pytest.mark.asyncio(loop_scope="module")

UPSTREAM_IP = "127.0.0.4"
HOST = "grpc.example.test"
CALLS = 200
TOLERANCE = 0.1


def service(name: str, port: int, app_protocol: str | None = None) -> list[dict[str, Any]]:
    service_port: dict[str, Any] = {"name": "grpc", "port": 50051}
    if app_protocol:
        service_port["appProtocol"] = app_protocol
    return [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"ports": [service_port]},
        },
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": name,
                "namespace": "default",
                "labels": {"kubernetes.io/service-name": name},
            },
            "addressType": "IPv4",
            "ports": [{"name": "grpc", "port": port}],
            "endpoints": [{"addresses": [UPSTREAM_IP]}],
        },
    ]


def ref(name: str, weight: int = 1) -> dict[str, Any]:
    return {"name": name, "port": 50051, "weight": weight}


def method(name: str, **extra: Any) -> dict[str, Any]:
    return {"method": {"service": SERVICE, "method": name}, **extra}


def grpc_route(name: str, hostname: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "GRPCRoute",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"parentRefs": [{"name": "gw"}], "hostnames": [hostname], "rules": rules},
    }


ROUTES = [
    grpc_route(
        "echo",
        HOST,
        [
            {"matches": [method("Echo")], "backendRefs": [ref("v1")]},
            {"matches": [method("EchoTwo")], "backendRefs": [ref("v2")]},
            # More header conditions win over fewer for the same method.
            {
                "matches": [method("EchoThree", headers=[{"name": "x-canary", "value": "yes"}])],
                "backendRefs": [ref("v3")],
            },
            {"matches": [method("EchoThree")], "backendRefs": [ref("v2")]},
            {
                "matches": [
                    method(
                        "Echo",
                        headers=[{"type": "RegularExpression", "name": "x-tenant", "value": "blue|green"}],
                    )
                ],
                "filters": [
                    {
                        "type": "RequestHeaderModifier",
                        "requestHeaderModifier": {"add": [{"name": "x-added", "value": "weir"}]},
                    },
                    {
                        "type": "ResponseHeaderModifier",
                        "responseHeaderModifier": {"set": [{"name": "x-answered-by", "value": "weir"}]},
                    },
                ],
                "backendRefs": [ref("v3")],
            },
        ],
    ),
    grpc_route(
        "regex",
        "regex.example.test",
        [
            {
                "matches": [
                    {
                        "method": {
                            "type": "RegularExpression",
                            "service": r".*\.GrpcEcho",
                            "method": "Echo(Two)?",
                        }
                    }
                ],
                "backendRefs": [ref("v2")],
            }
        ],
    ),
    grpc_route("weights", "weights.example.test", [{"backendRefs": [ref("v1", 3), ref("v2", 1)]}]),
    grpc_route(
        "mirror",
        "mirror.example.test",
        [
            {
                "filters": [
                    {"type": "RequestMirror", "requestMirror": {"backendRef": {"name": "v3", "port": 50051}}}
                ],
                "backendRefs": [ref("v1")],
            }
        ],
    ),
    grpc_route("broken", "broken.example.test", [{"backendRefs": [ref("does-not-exist")]}]),
    grpc_route("half", "half.example.test", [{"backendRefs": [ref("v1"), ref("does-not-exist")]}]),
]


@dataclass
class World:
    weir: Weir
    servers: dict[str, GrpcEchoServer] = field(default_factory=dict)

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.weir.gateway_port}"

    async def pod(
        self, method_name: str, host: str = HOST, metadata: tuple[tuple[str, str], ...] = ()
    ) -> str:
        reply = await grpc_echo(self.target, method_name, authority=host, metadata=metadata)
        return reply.pod

    async def raw_call(
        self, path: str, host: str = HOST, metadata: tuple[tuple[str, str], ...] = ()
    ) -> tuple[dict[str, Any], dict[str, str]]:
        """Call ``path``; the echo's JSON and the response's initial metadata."""
        async with grpc.aio.insecure_channel(self.target, options=[("grpc.default_authority", host)]) as ch:
            call = ch.unary_unary(path)(b"", metadata=metadata, timeout=3)
            raw = await call
            initial = {k: v for k, v in (await call.initial_metadata() or ()) if isinstance(v, str)}
        return json.loads(bytes(raw)), initial

    async def code(self, method_name: str, host: str) -> grpc.StatusCode:
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            await grpc_echo(self.target, method_name, authority=host)
        code: grpc.StatusCode = failed.value.code()
        return code


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    folder = tmp_path_factory.mktemp("grpcroute")
    harness = Weir(folder, None, free_port())
    w = World(harness)
    try:
        docs: list[dict[str, Any]] = list(ROUTES)
        for name, app_protocol in (("v1", None), ("v2", "kubernetes.io/h2c"), ("v3", None)):
            server = GrpcEchoServer(EchoIdentity("default", f"{name}-pod", name), host=UPSTREAM_IP)
            w.servers[name] = await server.start()
            docs += service(name, server.port, app_protocol)
        harness.write(
            "world.yaml", GATEWAY_HEAD.format(port=harness.gateway_port) + "---\n" + yaml.safe_dump_all(docs)
        )
        await harness.start()
        yield w
    finally:
        await harness.stop()
        for server in w.servers.values():
            await server.stop()
        for pid in harness.envoy_pids:
            assert not pid_alive(pid), f"Envoy {pid} survived stop()"


async def test_routes_by_method(world: World) -> None:
    assert await world.pod("Echo") == "v1-pod"
    assert await world.pod("EchoTwo") == "v2-pod"
    assert await world.pod("EchoThree") == "v2-pod"


async def test_header_matches_take_precedence(world: World) -> None:
    assert await world.pod("EchoThree", metadata=(("x-canary", "yes"),)) == "v3-pod"
    assert await world.pod("EchoThree", metadata=(("x-canary", "no"),)) == "v2-pod"
    assert await world.pod("Echo", metadata=(("x-tenant", "green"),)) == "v3-pod"
    assert await world.pod("Echo", metadata=(("x-tenant", "red"),)) == "v1-pod"


async def test_header_filters(world: World) -> None:
    reply, initial = await world.raw_call(f"/{SERVICE}/Echo", metadata=(("x-tenant", "blue"),))
    assert reply["pod"] == "v3-pod"
    assert reply["headers"]["x-added"] == ["weir"]
    assert initial.get("x-answered-by") == "weir"


async def test_regular_expression_method_match(world: World) -> None:
    assert await world.pod("Echo", host="regex.example.test") == "v2-pod"
    assert await world.pod("EchoTwo", host="regex.example.test") == "v2-pod"
    assert await world.code("EchoThree", "regex.example.test") == grpc.StatusCode.UNIMPLEMENTED


async def test_weights(world: World) -> None:
    seen: Counter[str] = Counter()
    async with grpc.aio.insecure_channel(
        world.target, options=[("grpc.default_authority", "weights.example.test")]
    ) as ch:
        call = ch.unary_unary(f"/{SERVICE}/Echo")
        for _ in range(CALLS):
            seen[json.loads(bytes(await call(b"", timeout=3)))["pod"]] += 1
    assert set(seen) == {"v1-pod", "v2-pod"}, seen
    assert abs(seen["v1-pod"] / CALLS - 0.75) < TOLERANCE, seen


async def test_mirror_gets_a_copy(world: World) -> None:
    before = len(world.servers["v3"].calls)
    assert await world.pod("Echo", host="mirror.example.test") == "v1-pod"

    def mirrored() -> bool:
        return len(world.servers["v3"].calls) > before

    await eventually(mirrored, timeout=5)


async def test_unknown_method_is_unimplemented(world: World) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await world.raw_call("/other.Service/Call")
    assert failed.value.code() == grpc.StatusCode.UNIMPLEMENTED


async def test_backends_that_do_not_resolve_are_unavailable(world: World) -> None:
    assert await world.code("Echo", "broken.example.test") == grpc.StatusCode.UNAVAILABLE
    codes: Counter[str] = Counter()
    for _ in range(40):
        try:
            codes[await world.pod("Echo", host="half.example.test")] += 1
        except grpc.aio.AioRpcError as exc:
            codes[exc.code().name] += 1
    assert set(codes) == {"v1-pod", "UNAVAILABLE"}, codes
    conditions = world.weir.status_of("GRPCRoute", "default", "broken")["parents"][0]["conditions"]
    resolved = next(c for c in conditions if c["type"] == "ResolvedRefs")
    assert (resolved["status"], resolved["reason"]) == ("False", "BackendNotFound")


async def test_status_and_supported_kinds(world: World) -> None:
    for route in ("echo", "regex", "weights", "mirror"):
        [parent] = world.weir.status_of("GRPCRoute", "default", route)["parents"]
        assert {c["type"]: c["status"] for c in parent["conditions"]} == {
            "Accepted": "True",
            "ResolvedRefs": "True",
        }
    [listener] = world.weir.status_of("Gateway", "default", "gw")["listeners"]
    assert {"group": "gateway.networking.k8s.io", "kind": "GRPCRoute"} in listener["supportedKinds"]
    assert listener["attachedRoutes"] == len(ROUTES)
