"""TCPRoute conformance cases (``gateway.networking.k8s.io/v1``), named after upstream's.

A TCP listener relays bytes; the backends are the HTTP echo pods, so an HTTP
request sent through the relay is answered by a pod that says who it is.
"""

from __future__ import annotations

import pytest

from .harness import (
    WEB_NS,
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

LISTENER_OK = {"Accepted": "True", "ResolvedRefs": "True", "Programmed": "True"}
MULTI = "tcp-multi-listener-gateway"


def relayed(gateway: str, port: int, backend: str, namespace: str = "gateway-conformance-infra") -> Exchange:
    """An HTTP request through TCP listener ``port``: the pod at the other end answers."""
    return Exchange(Request(gateway=gateway, port=port), Expect(backend=backend, namespace=namespace))


def tcp_route(name: str, parent: str, backend: str = "name: infra-backend-v1, port: 8080") -> str:
    return single_rule_route("TCPRoute", name, parent, backend)


CASES = [
    Case(
        "TCPRouteParentRefPortAndSectionName",
        f"""
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: {MULTI}, namespace: gateway-conformance-infra}}
spec:
  gatewayClassName: gateway-conformance
  listeners:
  - {{name: primary, protocol: TCP, port: 9300, allowedRoutes: {{kinds: [{{kind: TCPRoute}}]}}}}
  - {{name: secondary, protocol: TCP, port: 9301, allowedRoutes: {{kinds: [{{kind: TCPRoute}}]}}}}
"""
        + tcp_route("tcp-route-by-port", f"name: {MULTI}, port: 9300")
        + tcp_route("tcp-route-by-section-and-port", f"name: {MULTI}, sectionName: primary, port: 9300")
        + tcp_route("tcp-route-attach-all", f"name: {MULTI}"),
        statuses=(
            GatewayStatus(
                MULTI,
                conditions={"Accepted": "True", "Programmed": "True"},
                # primary: all three routes; secondary: the one that names no listener.
                listeners={
                    "primary": ListenerStatus(LISTENER_OK, attached=3, kinds=("TCPRoute",)),
                    "secondary": ListenerStatus(LISTENER_OK, attached=1, kinds=("TCPRoute",)),
                },
            ),
            RouteStatus("tcp-route-by-port", kind="TCPRoute", gateway=MULTI),
            RouteStatus("tcp-route-by-section-and-port", kind="TCPRoute", gateway=MULTI, section="primary"),
            RouteStatus("tcp-route-attach-all", kind="TCPRoute", gateway=MULTI),
        ),
        exchanges=(
            relayed(MULTI, 9300, "infra-backend-v1"),
            relayed(MULTI, 9301, "infra-backend-v1"),
        ),
    ),
    Case(
        "TCPRouteReferenceGrant",
        """
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: tcp-reference-grant, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: gateway-conformance
  listeners:
  - {name: granted, protocol: TCP, port: 9302}
  - {name: refused, protocol: TCP, port: 9303}
"""
        + tcp_route(
            "tcp-to-web-backend",
            "name: tcp-reference-grant, sectionName: granted",
            f"name: web-backend, namespace: {WEB_NS}, port: 8080",
        )
        + tcp_route(
            "tcp-to-app-backend",
            "name: tcp-reference-grant, sectionName: refused",
            "name: app-backend-v1, namespace: gateway-conformance-app-backend, port: 8080",
        )
        + f"""
---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {{name: tcp-to-web-backend, namespace: {WEB_NS}}}
spec:
  from: [{{group: gateway.networking.k8s.io, kind: TCPRoute, namespace: gateway-conformance-infra}}]
  to: [{{group: "", kind: Service, name: web-backend}}]
""",
        statuses=(
            RouteStatus(
                "tcp-to-web-backend", kind="TCPRoute", gateway="tcp-reference-grant", section="granted"
            ),
            # No grant in the app-backend namespace: the reference is refused.
            RouteStatus(
                "tcp-to-app-backend",
                kind="TCPRoute",
                gateway="tcp-reference-grant",
                section="refused",
                conditions={"ResolvedRefs": ("False", "RefNotPermitted")},
            ),
        ),
        exchanges=(
            relayed("tcp-reference-grant", 9302, "web-backend", WEB_NS),
            # The refused reference leaves no backend: the connection is closed unanswered.
            Exchange(Request(gateway="tcp-reference-grant", port=9303), Expect(error=True)),
        ),
    ),
]


@pytest.mark.parametrize("case", params(CASES))
async def test_case(conformance: Conformance, case: Case) -> None:
    await run_case(conformance, case)
