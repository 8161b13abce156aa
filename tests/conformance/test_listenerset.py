"""ListenerSet cases: listeners added to a Gateway by another object, through real Envoy.

Names are the suite's own (ListenerSet is standard since Gateway API v1.5;
the behaviour follows its API reference: the Gateway must allow the set,
routes attach to a set's listeners by naming the set, the Gateway's own
listeners take precedence in a conflict).
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
)

pytestmark = pytest.mark.asyncio(loop_scope="module")

LISTENER_OK = {"Accepted": "True", "ResolvedRefs": "True", "Programmed": "True"}
GW = "listenerset-gateway"

GATEWAY = f"""
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: {GW}, namespace: gateway-conformance-infra}}
spec:
  gatewayClassName: gateway-conformance
  allowedListeners: {{namespaces: {{from: Same}}}}
  listeners: [{{name: http, port: 80, protocol: HTTP}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: on-gateway, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{{name: {GW}}}]
  hostnames: [gateway.example]
  rules: [{{backendRefs: [{{name: infra-backend-v2, port: 8080}}]}}]
"""


def at(host: str, port: int, expect: Expect) -> Exchange:
    return Exchange(Request(host=host, port=port, gateway=GW), expect)


CASES = [
    Case(
        "ListenerSetListenersServed",
        GATEWAY
        + """
---
apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata: {name: team-listeners, namespace: gateway-conformance-infra}
spec:
  parentRef: {name: listenerset-gateway}
  listeners:
  - {name: http, port: 8081, protocol: HTTP, hostname: listenerset.example}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: on-listenerset, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{kind: ListenerSet, name: team-listeners, sectionName: http}]
  rules: [{backendRefs: [{name: infra-backend-v1, port: 8080}]}]
""",
        statuses=(
            GatewayStatus(
                GW,
                conditions={"Accepted": "True", "Programmed": "True"},
                listeners={"http": ListenerStatus(LISTENER_OK, attached=1)},
                only_listeners=("http",),
                attached_listener_sets=1,
            ),
            GatewayStatus(
                "team-listeners",
                kind="ListenerSet",
                conditions={"Accepted": ("True", "Accepted"), "Programmed": ("True", "Programmed")},
                listeners={"http": ListenerStatus(LISTENER_OK, attached=1, kinds=("HTTPRoute",))},
            ),
            RouteStatus("on-listenerset", gateway="team-listeners", section="http"),
            RouteStatus("on-gateway", gateway=GW),
        ),
        exchanges=(
            at("listenerset.example", 8081, Expect(backend="infra-backend-v1")),
            at("other.example", 8081, Expect(404)),  # the set's listener has a hostname
            # A route naming the Gateway attaches to its own listeners only, and the other way round.
            at("gateway.example", 80, Expect(backend="infra-backend-v2")),
            at("gateway.example", 8081, Expect(404)),
            at("listenerset.example", 80, Expect(404)),
        ),
    ),
    Case(
        "ListenerSetNotAllowed",
        GATEWAY
        + f"""
---
apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata: {{name: other-team, namespace: {APP_NS}}}
spec:
  parentRef: {{name: listenerset-gateway, namespace: gateway-conformance-infra}}
  listeners: [{{name: http, port: 8082, protocol: HTTP}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: on-refused-set, namespace: {APP_NS}}}
spec:
  parentRefs: [{{kind: ListenerSet, name: other-team}}]
  rules: [{{backendRefs: [{{name: app-backend-v1, port: 8080}}]}}]
""",
        statuses=(
            GatewayStatus(
                GW, conditions={"Accepted": "True", "Programmed": "True"}, attached_listener_sets=0
            ),
            GatewayStatus(
                "other-team",
                namespace=APP_NS,
                kind="ListenerSet",
                conditions={"Accepted": ("False", "NotAllowed"), "Programmed": "False"},
            ),
            RouteStatus(
                "on-refused-set",
                namespace=APP_NS,
                gateway="other-team",
                gateway_namespace=APP_NS,
                conditions={"Accepted": ("False", "NoMatchingParent")},
            ),
        ),
        exchanges=(Exchange(Request(port=8082, gateway=GW), Expect(error=True)),),
    ),
    Case(
        "ListenerSetConflictWithGatewayListener",
        GATEWAY
        + """
---
apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata: {name: conflicting, namespace: gateway-conformance-infra}
spec:
  parentRef: {name: listenerset-gateway}
  listeners:
  - {name: raw, port: 80, protocol: TCP}
  - {name: http, port: 8083, protocol: HTTP}
""",
        statuses=(
            # The Gateway's own listener keeps its port and keeps serving.
            GatewayStatus(
                GW,
                conditions={"Accepted": "True", "Programmed": "True"},
                listeners={"http": ListenerStatus(LISTENER_OK)},
                attached_listener_sets=1,
            ),
            GatewayStatus(
                "conflicting",
                kind="ListenerSet",
                conditions={"Accepted": ("True", "ListenersNotValid"), "Programmed": "True"},
                listeners={
                    "raw": ListenerStatus({"Accepted": "False", "Conflicted": ("True", "ProtocolConflict")}),
                    "http": ListenerStatus(LISTENER_OK),
                },
            ),
        ),
        exchanges=(at("gateway.example", 80, Expect(backend="infra-backend-v2")),),
    ),
]


@pytest.mark.parametrize("case", params(CASES))
async def test_case(conformance: Conformance, case: Case) -> None:
    await run_case(conformance, case)
