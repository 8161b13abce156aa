"""GRPCRoute conformance cases, written from the Gateway API specification.

Calls go through the Gateways' HTTP listeners (gRPC over h2c) to gRPC echo
servers (``grpc-infra-backend-v1/v2/v3``, Service ports of appProtocol
``kubernetes.io/h2c``) that say which pod answered.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import grpc
import pytest

from echo_grpc import grpc_echo

from .harness import Case, Conformance, GatewayStatus, ListenerStatus, RouteStatus, ok

pytestmark = pytest.mark.asyncio(loop_scope="module")

HARNESS = {"grpc_backends": True}

G1, G2, G3 = "grpc-infra-backend-v1", "grpc-infra-backend-v2", "grpc-infra-backend-v3"
SERVICE = "gateway_api_conformance.echo_basic.grpcecho.GrpcEcho"


@dataclass(frozen=True)
class Call:
    """A unary call through a Gateway; ``backend`` must answer, or the call fails with ``code``."""

    method: str
    backend: str | None = None
    code: str | None = None
    authority: str = "grpc.example.com"
    metadata: tuple[tuple[str, str], ...] = ()
    gateway: str = "same-namespace"
    service: str = SERVICE


@dataclass(frozen=True)
class GrpcCase:
    case: Case
    calls: tuple[Call, ...]

    def param(self) -> object:
        return pytest.param(self, id=self.case.name, marks=self.case.param().marks)


async def expect_call(h: Conformance, call: Call, *, timeout: float = 3.0, successes: int = 2) -> None:
    target = f"{h.gateway_address(call.gateway)}:{h.listener_port(80)}"
    deadline, streak, last = time.monotonic() + timeout, 0, ""
    while True:
        problem: str | None = None
        try:
            reply = await grpc_echo(
                target,
                call.method,
                authority=call.authority,
                metadata=call.metadata,
                service=call.service,
                timeout=2.0,
            )
            if call.backend is None:
                problem = f"answered by {reply.pod}, want failure {call.code}"
            elif reply.service != call.backend:
                problem = f"answered by pod {reply.pod}, want a pod of {call.backend}"
        except grpc.aio.AioRpcError as exc:
            if call.backend is not None or (call.code and exc.code().name != call.code):
                problem = f"call failed: {exc.code().name}: {exc.details()}"
        if problem is None:
            streak += 1
            if streak >= successes:
                return
        else:
            streak, last = 0, problem
        if time.monotonic() > deadline:
            raise AssertionError(f"/{call.service}/{call.method} (authority {call.authority}): {last}")
        await asyncio.sleep(0.02 if problem else 0)


def grpc_route(name: str, rules: str, *, parent: str = "{name: same-namespace}", hostnames: str = "") -> str:
    return f"""
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {{name: {name}, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{parent}]
  {hostnames}
  rules:
{rules}
"""


HTTP_ROUTE = """---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{{name: same-namespace}}]
  {hostnames}
  rules:
  - matches: [{{path: {{type: PathPrefix, value: /http}}}}]
    backendRefs: [{{name: infra-backend-v1, port: 8080}}]
"""

CASES = [
    GrpcCase(
        Case(
            "GRPCExactMethodMatching",
            grpc_route(
                "exact-matching",
                f"""\
  - matches: [{{method: {{service: {SERVICE}, method: Echo}}}}]
    backendRefs: [{{name: grpc-infra-backend-v1, port: 8080}}]
  - matches: [{{method: {{service: {SERVICE}, method: EchoTwo}}}}]
    backendRefs: [{{name: grpc-infra-backend-v2, port: 8080}}]
""",
            ),
            statuses=(RouteStatus("exact-matching", kind="GRPCRoute"),),
        ),
        calls=(
            Call("Echo", G1),
            Call("EchoTwo", G2),
            Call("EchoThree", code="UNIMPLEMENTED"),
            Call("Echo", code="UNIMPLEMENTED", service="other.package.Service"),
        ),
    ),
    GrpcCase(
        Case(
            "GRPCRouteNamedRule",
            # Rules carry names (GEP-995); routing is as without them.
            grpc_route(
                "grpc-named-rules",
                f"""\
  - name: echo-rule
    matches: [{{method: {{service: {SERVICE}, method: Echo}}}}]
    backendRefs: [{{name: grpc-infra-backend-v1, port: 8080}}]
  - name: echo-two-rule
    matches: [{{method: {{service: {SERVICE}, method: EchoTwo}}}}]
    backendRefs: [{{name: grpc-infra-backend-v2, port: 8080}}]
""",
            ),
            statuses=(RouteStatus("grpc-named-rules", kind="GRPCRoute"),),
        ),
        calls=(Call("Echo", G1), Call("EchoTwo", G2)),
    ),
    GrpcCase(
        Case(
            "GRPCRouteServiceMatching",
            # A match naming only the service takes every method of it (suite's own name).
            grpc_route(
                "service-matching",
                f"""\
  - matches: [{{method: {{service: {SERVICE}}}}}]
    backendRefs: [{{name: grpc-infra-backend-v3, port: 8080}}]
  - matches: [{{method: {{service: {SERVICE}, method: EchoTwo}}}}]
    backendRefs: [{{name: grpc-infra-backend-v2, port: 8080}}]
""",
            ),
            statuses=(RouteStatus("service-matching", kind="GRPCRoute"),),
        ),
        calls=(Call("Echo", G3), Call("EchoThree", G3), Call("EchoTwo", G2)),
    ),
    GrpcCase(
        Case(
            "GRPCRouteHeaderMatching",
            grpc_route(
                "grpc-header-matching",
                """\
  - matches: [{headers: [{name: version, value: one}]}]
    backendRefs: [{name: grpc-infra-backend-v1, port: 8080}]
  - matches: [{headers: [{name: version, value: two}]}]
    backendRefs: [{name: grpc-infra-backend-v2, port: 8080}]
  - matches: [{headers: [{name: version, value: two}, {name: color, value: orange}]}]
    backendRefs: [{name: grpc-infra-backend-v3, port: 8080}]
""",
            ),
            statuses=(RouteStatus("grpc-header-matching", kind="GRPCRoute"),),
        ),
        calls=(
            Call("Echo", G1, metadata=(("version", "one"),)),
            Call("Echo", G2, metadata=(("version", "two"),)),
            Call("Echo", G3, metadata=(("version", "two"), ("color", "orange"))),
            Call("Echo", code="UNIMPLEMENTED", metadata=(("version", "three"),)),
            Call("Echo", code="UNIMPLEMENTED"),
        ),
    ),
    GrpcCase(
        Case(
            "GRPCRouteListenerHostnameMatching",
            """
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: grpcroute-listener-hostname-matching, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: gateway-conformance
  listeners:
  - {name: listener-1, port: 80, protocol: HTTP, hostname: bar.com}
  - {name: listener-2, port: 80, protocol: HTTP, hostname: foo.bar.com}
  - {name: listener-3, port: 80, protocol: HTTP, hostname: "*.bar.com"}
"""
            + "---"
            + grpc_route(
                "backend-v1",
                "  - backendRefs: [{name: grpc-infra-backend-v1, port: 8080}]",
                parent="{name: grpcroute-listener-hostname-matching, sectionName: listener-1}",
            )
            + "---"
            + grpc_route(
                "backend-v2",
                "  - backendRefs: [{name: grpc-infra-backend-v2, port: 8080}]",
                parent="{name: grpcroute-listener-hostname-matching, sectionName: listener-2}",
            )
            + "---"
            + grpc_route(
                "backend-v3",
                "  - backendRefs: [{name: grpc-infra-backend-v3, port: 8080}]",
                parent="{name: grpcroute-listener-hostname-matching, sectionName: listener-3}",
            ),
            statuses=(
                *(
                    RouteStatus(name, kind="GRPCRoute", gateway="grpcroute-listener-hostname-matching")
                    for name in ("backend-v1", "backend-v2", "backend-v3")
                ),
                GatewayStatus(
                    "grpcroute-listener-hostname-matching",
                    listeners={
                        name: ListenerStatus(attached=1, kinds=("GRPCRoute",))
                        for name in ("listener-1", "listener-2", "listener-3")
                    },
                ),
            ),
        ),
        calls=tuple(
            Call("Echo", backend, code, authority=authority, gateway="grpcroute-listener-hostname-matching")
            for authority, backend, code in (
                ("bar.com", G1, None),
                ("foo.bar.com", G2, None),
                ("baz.bar.com", G3, None),
                ("multiple.prefixes.bar.com", G3, None),
                ("foo.com", None, "UNIMPLEMENTED"),
            )
        ),
    ),
    GrpcCase(
        Case(
            "GRPCRouteInvalidNonExistentBackendRef",
            grpc_route("grpc-invalid-backend", "  - backendRefs: [{name: grpc-does-not-exist, port: 8080}]"),
            statuses=(
                RouteStatus(
                    "grpc-invalid-backend",
                    {"Accepted": "True", "ResolvedRefs": ("False", "BackendNotFound")},
                    kind="GRPCRoute",
                ),
            ),
        ),
        # "If all entries in BackendRefs are invalid, ... all traffic which matches this rule MUST
        # receive an UNAVAILABLE status" (GRPCRouteRule.backendRefs).
        calls=(Call("Echo", code="UNAVAILABLE"),),
    ),
    GrpcCase(
        Case(
            "GRPCRouteNextToHTTPRoute",
            # A GRPCRoute and an HTTPRoute on one listener, hostnames apart: both serve (suite's own name).
            grpc_route(
                "grpc-next-to-http",
                "  - backendRefs: [{name: grpc-infra-backend-v2, port: 8080}]",
                hostnames="hostnames: [grpc.example.com]",
            )
            + HTTP_ROUTE.format(name="http-next-to-grpc", hostnames="hostnames: [http.example.com]"),
            statuses=(
                RouteStatus("grpc-next-to-http", kind="GRPCRoute"),
                RouteStatus("http-next-to-grpc"),
                GatewayStatus("same-namespace", listeners={"http": ListenerStatus(attached=2)}),
            ),
            exchanges=(ok("http.example.com", "/http", "infra-backend-v1"),),
        ),
        calls=(
            Call("Echo", G2, authority="grpc.example.com"),
            Call("EchoTwo", G2, authority="grpc.example.com"),
        ),
    ),
    GrpcCase(
        Case(
            "GRPCRouteHTTPRouteHostnameConflict",
            # Intersecting hostnames on one listener: exactly one of the two routes is accepted,
            # the older, then the first by namespace/name (GRPCRouteSpec.hostnames).
            grpc_route("a-grpc-route", "  - backendRefs: [{name: grpc-infra-backend-v3, port: 8080}]")
            + HTTP_ROUTE.format(name="b-http-route", hostnames=""),
            statuses=(
                RouteStatus("a-grpc-route", kind="GRPCRoute"),
                RouteStatus("b-http-route", {"Accepted": "False"}),
            ),
        ),
        calls=(Call("Echo", G3),),
    ),
]


@pytest.mark.parametrize("grpc_case", [c.param() for c in CASES])
async def test_case(conformance: Conformance, grpc_case: GrpcCase) -> None:
    h, case = conformance, grpc_case.case
    await h.apply(case.file, case.manifests if isinstance(case.manifests, str) else case.manifests(h))
    try:
        for check in case.statuses:
            h.check(check)
        for exchange in case.exchanges:
            await h.expect(exchange.request, exchange.expect)
        for call in grpc_case.calls:
            await expect_call(h, call)
    finally:
        await h.delete(case.file)


PERMANENT_SESSION = """
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata:
  name: grpcroute-session-persistence-cookie-permanent-lifetime
  namespace: gateway-conformance-infra
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - sessionPersistence: {type: Cookie, absoluteTimeout: 1h, cookieConfig: {lifetimeType: Permanent}}
    backendRefs: [{name: grpc-infra-backend-v1, port: 8080}]
"""


async def test_GRPCRouteSessionPersistenceCookiePermanentLifetime(conformance: Conformance) -> None:
    """A permanent session cookie on a GRPCRoute: the answer's metadata sets a cookie that expires
    (``Max-Age``: absoluteTimeout, 3600 s), and a call carrying it reaches the same backend."""
    h = conformance
    name = "grpcroute-session-persistence-cookie-permanent-lifetime"
    await h.apply("case-grpc-permanent-session", PERMANENT_SESSION)
    try:
        h.check(RouteStatus(name, kind="GRPCRoute"))
        target = f"{h.gateway_address('same-namespace')}:{h.listener_port(80)}"
        deadline, cookie = time.monotonic() + 5, ""
        while not cookie:
            async with grpc.aio.insecure_channel(target) as channel:
                call = channel.unary_unary(f"/{SERVICE}/Echo")(b"", timeout=2.0)
                try:
                    await call
                    cookie = dict(await call.initial_metadata() or ()).get("set-cookie", "")
                except grpc.aio.AioRpcError as exc:
                    cookie, last = "", f"call failed: {exc.code().name}"
                else:
                    last = "no set-cookie in the answer's metadata"
            assert cookie or time.monotonic() < deadline, last
            if not cookie:
                await asyncio.sleep(0.05)
        attributes = [part.strip().lower() for part in str(cookie).split(";")[1:]]
        assert "max-age=3600" in attributes, f"a permanent cookie must expire after absoluteTimeout: {cookie}"
        name_value = str(cookie).split(";", 1)[0].strip()
        reply = await grpc_echo(target, "Echo", metadata=(("cookie", name_value),))
        assert reply.service == G1, reply
    finally:
        await h.delete("case-grpc-permanent-session")
