"""ListenerSet cases: listeners added to a Gateway by another object, through real Envoy.

ListenerSet is standard since Gateway API v1.5. ListenerSetDefaultNotAllowed,
ListenerSetAllowedNamespaceSelector, ListenerSetParentNotAccepted and
ListenerSetUpdateListenerHostname are upstream's names
(conformance/tests/listenerset-*.go); ListenerSetListenersServed,
ListenerSetNotAllowed and ListenerSetConflictWithGatewayListener are the
suite's own names (the behaviour follows the API reference: the Gateway must
allow the set, routes attach to a set's listeners by naming the set, the
Gateway's own listeners take precedence in a conflict).
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
    Step,
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


UPDATE_HOSTNAME = """
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: listenerset-hostname-gateway, namespace: gateway-conformance-infra}}
spec:
  gatewayClassName: gateway-conformance
  allowedListeners: {{namespaces: {{from: Same}}}}
  listeners: [{{name: http, port: 80, protocol: HTTP}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata: {{name: listenerset-hostname, namespace: gateway-conformance-infra}}
spec:
  parentRef: {{name: listenerset-hostname-gateway}}
  listeners: [{{name: http, port: 8086, protocol: HTTP, hostname: {hostname}}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: listenerset-hostname-route, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{{kind: ListenerSet, name: listenerset-hostname}}]
  hostnames: [listenerset.example.com]
  rules: [{{backendRefs: [{{name: infra-backend-v1, port: 8080}}]}}]
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
    Case(
        "ListenerSetParentNotAccepted",
        """
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gateway-with-listenerset-not-accepted, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: gateway-conformance
  allowedListeners: {namespaces: {from: Same}}
  listeners: [{name: http, port: 80, protocol: HTTP}]
  infrastructure:
    parametersRef: {group: invalid.io, kind: InvalidParameters, name: invalid}
---
apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata: {name: listenerset-parent-not-accepted, namespace: gateway-conformance-infra}
spec:
  parentRef: {group: gateway.networking.k8s.io, kind: Gateway, name: gateway-with-listenerset-not-accepted}
  listeners: [{name: http, port: 8085, protocol: HTTP}]
""",
        statuses=(
            GatewayStatus(
                "gateway-with-listenerset-not-accepted",
                conditions={"Accepted": ("False", "InvalidParameters")},
                attached_listener_sets=0,
            ),
            GatewayStatus(
                "listenerset-parent-not-accepted",
                kind="ListenerSet",
                conditions={"Accepted": ("False", "ParentNotAccepted"), "Programmed": "False"},
            ),
        ),
        exchanges=(
            Exchange(Request(port=8085, gateway="gateway-with-listenerset-not-accepted"), Expect(error=True)),
        ),
    ),
    Case(
        "ListenerSetUpdateListenerHostname",
        UPDATE_HOSTNAME.format(hostname="other.example.com"),
        statuses=(
            RouteStatus(
                "listenerset-hostname-route",
                gateway="listenerset-hostname",
                conditions={"Accepted": ("False", "NoMatchingListenerHostname")},
            ),
        ),
        steps=(
            Step(
                UPDATE_HOSTNAME.format(hostname="listenerset.example.com"),
                statuses=(RouteStatus("listenerset-hostname-route", gateway="listenerset-hostname"),),
                exchanges=(
                    Exchange(
                        Request(
                            host="listenerset.example.com", port=8086, gateway="listenerset-hostname-gateway"
                        ),
                        Expect(backend="infra-backend-v1"),
                    ),
                ),
            ),
        ),
    ),
    Case(
        "ListenerSetDefaultNotAllowed",
        """
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gateway-default-does-not-allow-listenerset, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: gateway-conformance
  listeners: [{name: http, port: 80, protocol: HTTP, hostname: gateway-listener-1.com}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata: {name: listenerset-default-not-allowed, namespace: gateway-conformance-infra}
spec:
  parentRef: {name: gateway-default-does-not-allow-listenerset}
  listeners:
  - {name: listener-1, port: 80, protocol: HTTP, hostname: listener-set-1-listener-1.com}
  - {name: listener-2, port: 8084, protocol: HTTP, hostname: listener-set-1-listener-2.com}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: attaches-to-all-listeners, namespace: gateway-conformance-infra}
spec:
  parentRefs:
  - {name: gateway-default-does-not-allow-listenerset}
  - {kind: ListenerSet, name: listenerset-default-not-allowed}
  rules:
  - matches: [{path: {type: PathPrefix, value: /route}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
""",
        statuses=(
            GatewayStatus(
                "gateway-default-does-not-allow-listenerset",
                conditions={"Accepted": "True", "Programmed": "True"},
                listeners={"http": ListenerStatus(LISTENER_OK, attached=1)},
                only_listeners=("http",),
                attached_listener_sets=0,
            ),
            GatewayStatus(
                "listenerset-default-not-allowed",
                kind="ListenerSet",
                conditions={"Accepted": ("False", "NotAllowed"), "Programmed": ("False", "NotAllowed")},
            ),
            RouteStatus("attaches-to-all-listeners", gateway="gateway-default-does-not-allow-listenerset"),
            RouteStatus(
                "attaches-to-all-listeners",
                gateway="listenerset-default-not-allowed",
                conditions={"Accepted": ("False", "NoMatchingParent")},
            ),
        ),
        exchanges=(
            Exchange(
                Request(
                    host="gateway-listener-1.com",
                    path="/route",
                    gateway="gateway-default-does-not-allow-listenerset",
                ),
                Expect(backend="infra-backend-v1"),
            ),
            Exchange(
                Request(
                    host="listener-set-1-listener-1.com",
                    path="/route",
                    gateway="gateway-default-does-not-allow-listenerset",
                ),
                Expect(404),
            ),
            # The set's own port is never opened.
            Exchange(
                Request(
                    host="listener-set-1-listener-2.com",
                    path="/route",
                    port=8084,
                    gateway="gateway-default-does-not-allow-listenerset",
                ),
                Expect(error=True),
            ),
        ),
    ),
    Case(
        "ListenerSetAllowedNamespaceSelector",
        f"""
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gateway-allows-listenerset-by-selector, namespace: gateway-conformance-infra}}
spec:
  gatewayClassName: gateway-conformance
  allowedListeners:
    namespaces:
      from: Selector
      selector: {{matchLabels: {{gateway-conformance: backend}}}}
  listeners: [{{name: http, port: 80, protocol: HTTP, hostname: gateway-listener.com}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata: {{name: listenerset-with-matching-labels, namespace: {APP_NS}}}
spec:
  parentRef: {{name: gateway-allows-listenerset-by-selector, namespace: gateway-conformance-infra}}
  listeners: [{{name: http, port: 80, protocol: HTTP, hostname: allowed-listenerset.com}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata: {{name: listenerset-without-matching-labels, namespace: gateway-conformance-infra}}
spec:
  parentRef: {{name: gateway-allows-listenerset-by-selector}}
  listeners: [{{name: http, port: 80, protocol: HTTP, hostname: disallowed-listenerset.com}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: on-allowed-set, namespace: {APP_NS}}}
spec:
  parentRefs: [{{kind: ListenerSet, name: listenerset-with-matching-labels}}]
  rules: [{{backendRefs: [{{name: app-backend-v1, port: 8080}}]}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: on-disallowed-set, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{{kind: ListenerSet, name: listenerset-without-matching-labels}}]
  rules: [{{backendRefs: [{{name: infra-backend-v1, port: 8080}}]}}]
""",
        statuses=(
            GatewayStatus(
                "gateway-allows-listenerset-by-selector",
                conditions={"Accepted": "True", "Programmed": "True"},
                attached_listener_sets=1,
            ),
            GatewayStatus(
                "listenerset-with-matching-labels",
                namespace=APP_NS,
                kind="ListenerSet",
                conditions={"Accepted": ("True", "Accepted"), "Programmed": ("True", "Programmed")},
                listeners={"http": ListenerStatus(LISTENER_OK, attached=1)},
            ),
            GatewayStatus(
                "listenerset-without-matching-labels",
                kind="ListenerSet",
                conditions={"Accepted": ("False", "NotAllowed"), "Programmed": ("False", "NotAllowed")},
            ),
            RouteStatus(
                "on-allowed-set",
                namespace=APP_NS,
                gateway="listenerset-with-matching-labels",
                gateway_namespace=APP_NS,
            ),
            RouteStatus(
                "on-disallowed-set",
                gateway="listenerset-without-matching-labels",
                conditions={"Accepted": ("False", "NoMatchingParent")},
            ),
        ),
        exchanges=(
            Exchange(
                Request(host="allowed-listenerset.com", gateway="gateway-allows-listenerset-by-selector"),
                Expect(backend="app-backend-v1", namespace=APP_NS),
            ),
            Exchange(
                Request(host="disallowed-listenerset.com", gateway="gateway-allows-listenerset-by-selector"),
                Expect(404),
            ),
        ),
    ),
]


@pytest.mark.parametrize("case", params(CASES))
async def test_case(conformance: Conformance, case: Case) -> None:
    await run_case(conformance, case)
