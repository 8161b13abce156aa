"""UDPRoute conformance cases (``gateway.networking.k8s.io/v1``), named after upstream's.

The UDP backends (``l4-backend``, UDP port 53, two pods in the infra and in
the app-backend namespace) answer every datagram with JSON naming the pod
that received it, so each exchange shows which Service answered.
"""

from __future__ import annotations

import pytest

from .harness import (
    APP_NS,
    Case,
    Conformance,
    Exchange,
    Expect,
    GatewayStatus,
    ListenerStatus,
    Request,
    RouteStatus,
    params,
    run_case,
    single_rule_route,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")

HARNESS = {"udp_backends": True}

LISTENER_OK = {"Accepted": "True", "ResolvedRefs": "True", "Programmed": "True"}
MULTI = "udp-multi-listener-gateway"


def datagram(gateway: str, port: int, expect: Expect) -> Exchange:
    return Exchange(Request(gateway=gateway, port=port, datagram=b"ping"), expect)


def udp_route(name: str, parent: str, backend: str = "name: l4-backend, port: 53") -> str:
    return single_rule_route("UDPRoute", name, parent, backend)


CASES = [
    Case(
        "UDPRoute",
        """
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: udp-gateway, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: gateway-conformance
  listeners: [{name: l4-echo, protocol: UDP, port: 5300, allowedRoutes: {kinds: [{kind: UDPRoute}]}}]
"""
        + udp_route("udp-l4-backend", "name: udp-gateway, sectionName: l4-echo"),
        statuses=(
            GatewayStatus(
                "udp-gateway",
                conditions={"Accepted": "True", "Programmed": "True"},
                listeners={"l4-echo": ListenerStatus(LISTENER_OK, attached=1, kinds=("UDPRoute",))},
            ),
            RouteStatus("udp-l4-backend", kind="UDPRoute", gateway="udp-gateway", section="l4-echo"),
        ),
        exchanges=(datagram("udp-gateway", 5300, Expect(backend="l4-backend")),),
    ),
    Case(
        "UDPRouteParentRefPortAndSectionName",
        f"""
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: {MULTI}, namespace: gateway-conformance-infra}}
spec:
  gatewayClassName: gateway-conformance
  listeners:
  - {{name: by-port, protocol: UDP, port: 5301}}
  - {{name: by-section, protocol: UDP, port: 5302}}
  - {{name: by-both, protocol: UDP, port: 5303}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: udp-attach-all-gateway, namespace: gateway-conformance-infra}}
spec:
  gatewayClassName: gateway-conformance
  listeners:
  - {{name: first, protocol: UDP, port: 5304}}
  - {{name: second, protocol: UDP, port: 5305}}
"""
        + udp_route("udp-route-by-port", f"name: {MULTI}, port: 5301")
        + udp_route("udp-route-by-section", f"name: {MULTI}, sectionName: by-section")
        + udp_route("udp-route-by-both", f"name: {MULTI}, sectionName: by-both, port: 5303")
        + udp_route("udp-route-attach-all", "name: udp-attach-all-gateway"),
        statuses=(
            GatewayStatus(
                MULTI,
                conditions={"Accepted": "True", "Programmed": "True"},
                listeners={
                    name: ListenerStatus(LISTENER_OK, attached=1)
                    for name in ("by-port", "by-section", "by-both")
                },
            ),
            GatewayStatus(
                "udp-attach-all-gateway",
                listeners={name: ListenerStatus(LISTENER_OK, attached=1) for name in ("first", "second")},
            ),
            RouteStatus("udp-route-by-port", kind="UDPRoute", gateway=MULTI),
            RouteStatus("udp-route-by-section", kind="UDPRoute", gateway=MULTI, section="by-section"),
            RouteStatus("udp-route-by-both", kind="UDPRoute", gateway=MULTI, section="by-both"),
            RouteStatus("udp-route-attach-all", kind="UDPRoute", gateway="udp-attach-all-gateway"),
        ),
        exchanges=(
            *(datagram(MULTI, port, Expect(backend="l4-backend")) for port in (5301, 5302, 5303)),
            *(
                datagram("udp-attach-all-gateway", port, Expect(backend="l4-backend"))
                for port in (5304, 5305)
            ),
        ),
    ),
    Case(
        "UDPRouteInvalidCrossNamespaceBackendRef",
        """
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: udp-cross-namespace, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: gateway-conformance
  listeners: [{name: dns, protocol: UDP, port: 5306}]
"""
        + udp_route(
            "udp-to-app-backend",
            "name: udp-cross-namespace",
            f"name: l4-backend, namespace: {APP_NS}, port: 53",
        ),
        statuses=(
            RouteStatus(
                "udp-to-app-backend",
                kind="UDPRoute",
                gateway="udp-cross-namespace",
                conditions={"Accepted": ("True", "Accepted"), "ResolvedRefs": ("False", "RefNotPermitted")},
            ),
        ),
        # No ReferenceGrant: nothing reaches the other namespace's pods, no answer comes back.
        exchanges=(datagram("udp-cross-namespace", 5306, Expect(error=True)),),
    ),
]


@pytest.mark.parametrize("case", params(CASES))
async def test_case(conformance: Conformance, case: Case) -> None:
    await run_case(conformance, case)
