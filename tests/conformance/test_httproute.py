"""HTTPRoute conformance cases, written from the Gateway API specification.

Case names are those of the upstream conformance tests (kubernetes-sigs/gateway-api
``conformance/tests``) that check the same behaviour; manifests and expectations
are this suite's own. Base world: see ``harness.py``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter

import httpx
import pytest

from weir.testkit import WebSocketClient

from .harness import (
    INFRA_NS,
    WEB_NS,
    Case,
    Conformance,
    Exchange,
    Expect,
    GatewayStatus,
    ListenerStatus,
    Redirect,
    Request,
    RouteStatus,
    Seen,
    Step,
    ok,
    params,
    run_case,
    status,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")

V1, V2, V3 = "infra-backend-v1", "infra-backend-v2", "infra-backend-v3"
HI = "httproute-hostname-intersection"
RE = "redirect.example"
HTTPS_GW = "same-namespace-with-https-listener"
LHM = "httproute-listener-hostname-matching"


def sees(
    path: str,
    *,
    sent: tuple[tuple[str, str], ...] = (),
    host: str = "",
    headers: tuple[tuple[str, str], ...] = (),
    absent: tuple[str, ...] = (),
    seen_path: str | None = None,
    seen_host: str | None = None,
) -> Exchange:
    """A request (headers ``sent``) infra-backend-v1 must receive with ``headers``, without ``absent``."""
    return Exchange(
        Request(host=host, path=path, headers=sent),
        Expect(
            backend=V1,
            seen=Seen(path=seen_path, host=seen_host, headers=headers, absent_headers=absent),
        ),
    )


def answers(
    path: str,
    *,
    sent: tuple[tuple[str, str], ...] = (),
    headers: tuple[tuple[str, str], ...] = (),
    absent: tuple[str, ...] = (),
) -> Exchange:
    """A request answered by infra-backend-v1 with response ``headers`` and without ``absent``."""
    return Exchange(
        Request(path=path, headers=sent), Expect(backend=V1, headers=headers, absent_headers=absent)
    )


def preflight(origin: str, headers: str = "", method: str = "GET") -> tuple[tuple[str, str], ...]:
    """The headers of a CORS preflight request from ``origin``."""
    out = [("origin", origin), ("access-control-request-method", method)]
    if headers:
        out.append(("access-control-request-headers", headers))
    return tuple(out)


def https(host: str, backend: str) -> Exchange:
    """An HTTPS request (SNI and Host ``host``) through the HTTPS Gateway, answered by ``backend``."""
    return Exchange(
        Request(host=host, scheme="https", port=443, gateway=HTTPS_GW),
        Expect(backend=backend, seen=Seen(host=host)),
    )


def misdirected_exchange(sni: str, host: str, expect: str | int) -> Exchange:
    """An HTTP/2 request for ``host`` on a connection made for ``sni`` to the HTTPS Gateway: answered
    by backend ``expect``, or with status ``expect``."""
    path = "/detect-misdirected-requests"
    request = Request(host=host, sni=sni, path=path, scheme="https", port=443, gateway=HTTPS_GW, http2=True)
    if isinstance(expect, int):
        return Exchange(request, Expect(expect))
    return Exchange(request, Expect(backend=expect, seen=Seen(host=host, path=path)))


def at(gateway: str, host: str, path: str, expect: Expect) -> Exchange:
    """A request for ``host`` + ``path`` through Gateway ``gateway`` (in the infra namespace)."""
    return Exchange(Request(host=host, path=path, gateway=gateway), expect)


def on_listener_port(host: str, path: str) -> Redirect:
    """A ``Location`` with scheme http on the port of the listener (80) the request came through."""
    return Redirect(host, path, port=80, listener_port=True)


def redirect(path: str, location: Redirect, code: int = 302, host: str = RE) -> Exchange:
    """A request the gateway must redirect (``code``) to ``location``."""
    return Exchange(Request(host=host, path=path), Expect(status=code, redirect=location))


def status_code_redirect(code: int, path: str) -> Case:
    """HTTPRoute303Redirect and its 307, 308 siblings: a POST to ``/path`` redirected with ``code``
    (upstream's manifest; the Host is named so that ``Location`` can be checked)."""
    return Case(
        f"HTTPRoute{code}Redirect",
        f"""
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {code}-redirect, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{{name: same-namespace}}]
  rules:
  - matches: [{{path: {{type: PathPrefix, value: /{path}}}}}]
    filters: [{{type: RequestRedirect, requestRedirect: {{statusCode: {code}}}}}]
""",
        statuses=(RouteStatus(f"{code}-redirect"),),
        exchanges=(
            Exchange(
                Request(host=RE, path=f"/{path}", method="POST", body=b"payload"),
                Expect(status=code, redirect=on_listener_port(RE, f"/{path}")),
            ),
        ),
    )


def headers_case_manifest(filter_type: str, field: str) -> str:
    """Routes /set, /add, /remove, /multiple and /case-insensitivity, each with a header modifier."""
    rules = {
        "/set": "{set: [{name: X-Header-Set, value: set-overwrites-values}]}",
        "/add": "{add: [{name: X-Header-Add, value: add-appends-values}]}",
        "/remove": "{remove: [X-Header-Remove]}",
        "/multiple": (
            "{set: [{name: X-Header-Set-1, value: header-set-1},"
            " {name: X-Header-Set-2, value: header-set-2}],"
            " add: [{name: X-Header-Add-1, value: header-add-1},"
            " {name: X-Header-Add-2, value: header-add-2}],"
            " remove: [X-Header-Remove-1, X-Header-Remove-2]}"
        ),
        "/case-insensitivity": (
            "{set: [{name: X-Lowercase-Set, value: lower-case}],"
            " add: [{name: X-Lowercase-Add, value: lower-add}],"
            " remove: [X-LOWERCASE-REMOVE]}"
        ),
    }
    text = f"""
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {filter_type.lower()}, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{{name: same-namespace}}]
  rules:
"""
    for path, config in rules.items():
        text += f"""\
  - matches: [{{path: {{type: PathPrefix, value: {path}}}}}]
    filters: [{{type: {filter_type}, {field}: {config}}}]
    backendRefs: [{{name: infra-backend-v1, port: 8080}}]
"""
    return text


def headless_service(h: Conformance) -> str:
    """A headless Service whose hand-written EndpointSlice points at infra-backend-v2's pods."""
    pods = h.pods[(INFRA_NS, V2)]
    addresses = ", ".join(p.address for p in pods)
    return f"""
apiVersion: v1
kind: Service
metadata: {{name: infra-backend-v2-headless, namespace: gateway-conformance-infra}}
spec:
  clusterIP: None
  selector: {{app: infra-backend-v2}}
  ports: [{{name: http, port: 8080, targetPort: {pods[0].port}}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: infra-backend-v2-headless-manual
  namespace: gateway-conformance-infra
  labels: {{kubernetes.io/service-name: infra-backend-v2-headless}}
addressType: IPv4
ports: [{{name: http, port: {pods[0].port}}}]
endpoints: [{{addresses: [{addresses}], conditions: {{ready: true}}}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: service-types, namespace: gateway-conformance-infra}}
spec:
  parentRefs: [{{name: same-namespace}}]
  rules:
  - matches: [{{path: {{type: PathPrefix, value: /headless}}}}]
    backendRefs: [{{name: infra-backend-v2-headless, port: 8080}}]
"""


GENERATION_ROUTE = """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: observed-generation-bump, namespace: gateway-conformance-infra, generation: {generation}}}
spec:
  parentRefs: [{{name: same-namespace}}]
  rules:
  - backendRefs: [{{name: {backend}, port: 8080}}]
"""

CASES = [
    Case(
        "HTTPRouteSimpleSameNamespace",
        """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: gateway-conformance-infra-test, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - backendRefs: [{name: infra-backend-v1, port: 8080}]
""",
        statuses=(
            RouteStatus("gateway-conformance-infra-test", generation=1),
            GatewayStatus(
                "same-namespace",
                conditions={"Accepted": "True", "Programmed": "True"},
                listeners={"http": ListenerStatus({"Programmed": "True"}, attached=1, kinds=("HTTPRoute",))},
            ),
        ),
        exchanges=(ok("", "/", V1), ok("any.example", "/any/path", V1)),
    ),
    Case(
        "HTTPRouteExactPathMatching",
        """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: exact-matching, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: Exact, value: /one}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: Exact, value: /two}}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
""",
        statuses=(RouteStatus("exact-matching"),),
        exchanges=(
            ok("", "/one", V1),
            ok("", "/two", V2),
            ok("", "/one?with=query", V1),
            status("", "/", 404),
            status("", "/one/example", 404),
            status("", "/two/", 404),
            status("", "/Two", 404),
        ),
    ),
    Case(
        "HTTPRoutePathMatchOrder",
        # Rules listed broadest first: precedence must come from the matches, not the order.
        """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: path-match-order, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /match}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /match/prefix/one}}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
  - matches: [{path: {type: Exact, value: /match/exact}}]
    backendRefs: [{name: infra-backend-v3, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /match/}, headers: [{name: x-pick, value: two}]}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
""",
        statuses=(RouteStatus("path-match-order"),),
        exchanges=(
            ok("", "/match/exact", V3),
            ok("", "/match/exact/more", V1),
            ok("", "/match/prefix/one", V2),
            ok("", "/match/prefix/one/", V2),
            ok("", "/match/prefix/one/deeper", V2),
            ok("", "/match/prefix/oneandmore", V1),
            ok("", "/match", V1),
            ok("", "/match/anything", V1),
            ok("", "/match/anything", V2, headers=(("x-pick", "two"),)),
            ok("", "/match/exact", V3, headers=(("x-pick", "two"),)),
            status("", "/matchless", 404),
        ),
    ),
    Case(
        "HTTPRouteMatching",
        """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: matching, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches:
    - {path: {type: PathPrefix, value: /v2}}
    - {headers: [{name: version, value: two}]}
    backendRefs: [{name: infra-backend-v2, port: 8080}]
""",
        statuses=(RouteStatus("matching"),),
        exchanges=(
            ok("", "/", V1),
            ok("", "/example", V1),
            ok("", "/v2", V2),
            ok("", "/v2/example", V2),
            ok("", "/v2example", V1),
            ok("", "/", V2, headers=(("version", "two"),)),
            ok("", "/", V1, headers=(("version", "three"),)),
        ),
    ),
    Case(
        "HTTPRouteMatchingAcrossRoutes",
        """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: matching-part1, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  hostnames: [example.com, example.net]
  rules:
  - matches: [{path: {type: PathPrefix, value: /}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /v2}}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: matching-part2, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  hostnames: [example.com]
  rules:
  - matches: [{path: {type: PathPrefix, value: /v2}, headers: [{name: version, value: three}]}]
    backendRefs: [{name: infra-backend-v3, port: 8080}]
  - matches: [{path: {type: Exact, value: /exact}}]
    backendRefs: [{name: infra-backend-v3, port: 8080}]
""",
        statuses=(RouteStatus("matching-part1"), RouteStatus("matching-part2")),
        exchanges=(
            ok("example.com", "/", V1),
            ok("example.net", "/", V1),
            ok("example.com", "/v2", V2),
            ok("example.net", "/v2/more", V2),
            ok("example.com", "/v2", V3, headers=(("version", "three"),)),
            ok("example.net", "/v2", V2, headers=(("version", "three"),)),
            ok("example.com", "/exact", V3),
            ok("example.net", "/exact", V1),
            status("example.org", "/", 404),
        ),
    ),
    Case(
        "HTTPRouteHostnameIntersection",
        """
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: httproute-hostname-intersection, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: gateway-conformance
  listeners:
  - {name: listener-1, port: 80, protocol: HTTP, hostname: very.specific.com}
  - {name: listener-2, port: 80, protocol: HTTP, hostname: "*.wildcard.io"}
  - {name: listener-3, port: 80, protocol: HTTP, hostname: "*.anotherwildcard.io"}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: specific-host-matches-listener-specific-host, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: httproute-hostname-intersection}]
  hostnames: [non.matching.com, "*.nonmatchingwildcard.io", very.specific.com]
  rules:
  - matches: [{path: {type: PathPrefix, value: /s1}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: specific-host-matches-listener-wildcard-host, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: httproute-hostname-intersection}]
  hostnames: [non.matching.com, wildcard.io, foo.wildcard.io, bar.wildcard.io, foo.bar.wildcard.io]
  rules:
  - matches: [{path: {type: PathPrefix, value: /s2}}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: wildcard-host-matches-listener-specific-host, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: httproute-hostname-intersection}]
  hostnames: [non.matching.com, "*.specific.com"]
  rules:
  - matches: [{path: {type: PathPrefix, value: /s3}}]
    backendRefs: [{name: infra-backend-v3, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: wildcard-host-matches-listener-wildcard-host, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: httproute-hostname-intersection}]
  hostnames: ["*.anotherwildcard.io"]
  rules:
  - matches: [{path: {type: PathPrefix, value: /s4}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: no-intersecting-hosts, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: httproute-hostname-intersection}]
  hostnames: [specific.but.wrong.com, wildcard.io]
  rules:
  - matches: [{path: {type: PathPrefix, value: /s5}}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: httproute-hostname-intersection-all, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  hostnames: [first.com, "*.second.com"]
  rules:
  - backendRefs: [{name: infra-backend-v2, port: 8080}]
""",
        statuses=(
            *(
                RouteStatus(name, gateway="httproute-hostname-intersection")
                for name in (
                    "specific-host-matches-listener-specific-host",
                    "specific-host-matches-listener-wildcard-host",
                    "wildcard-host-matches-listener-specific-host",
                    "wildcard-host-matches-listener-wildcard-host",
                )
            ),
            RouteStatus(
                "no-intersecting-hosts",
                {"Accepted": ("False", "NoMatchingListenerHostname")},
                gateway="httproute-hostname-intersection",
            ),
            RouteStatus("httproute-hostname-intersection-all"),
            GatewayStatus(
                "httproute-hostname-intersection",
                conditions={"Accepted": "True", "Programmed": "True"},
                listeners={
                    "listener-1": ListenerStatus({"Accepted": "True", "ResolvedRefs": "True"}, attached=2),
                    "listener-2": ListenerStatus({"Accepted": "True", "ResolvedRefs": "True"}, attached=1),
                    "listener-3": ListenerStatus({"Accepted": "True", "ResolvedRefs": "True"}, attached=1),
                },
            ),
        ),
        exchanges=(
            at(HI, "very.specific.com", "/s1", Expect(backend=V1)),
            # The port is not part of the name, and the backend sees the Host as sent.
            at(
                HI,
                "very.specific.com:1234",
                "/s1",
                Expect(backend=V1, seen=Seen(host="very.specific.com:1234")),
            ),
            at(HI, "non.matching.com", "/s1", Expect(404)),
            at(HI, "foo.nonmatchingwildcard.io", "/s1", Expect(404)),
            at(HI, "foo.wildcard.io", "/s1", Expect(404)),
            at(HI, "very.specific.com", "/non-matching-prefix", Expect(404)),
            at(HI, "foo.wildcard.io", "/s2", Expect(backend=V2)),
            at(HI, "bar.wildcard.io", "/s2", Expect(backend=V2)),
            at(HI, "foo.bar.wildcard.io", "/s2", Expect(backend=V2)),
            at(HI, "wildcard.io", "/s2", Expect(404)),
            at(HI, "non.matching.com", "/s2", Expect(404)),
            at(HI, "very.specific.com", "/s2", Expect(404)),
            at(HI, "very.specific.com", "/s3", Expect(backend=V3)),
            at(HI, "foo.specific.com", "/s3", Expect(404)),
            at(HI, "non.matching.com", "/s3", Expect(404)),
            at(HI, "foo.anotherwildcard.io", "/s4", Expect(backend=V1)),
            at(HI, "foo.bar.anotherwildcard.io", "/s4", Expect(backend=V1)),
            at(HI, "anotherwildcard.io", "/s4", Expect(404)),
            at(HI, "foo.wildcard.io", "/s4", Expect(404)),
            at(HI, "specific.but.wrong.com", "/s5", Expect(404)),
            at(HI, "wildcard.io", "/s5", Expect(404)),
            ok("first.com", "/", V2),
            ok("sub.second.com", "/", V2),
            ok("deep.sub.second.com:8080", "/", V2),
            status("sub.first.com", "/", 404),
            status("second.com", "/", 404),
        ),
    ),
    Case(
        "HTTPRouteListenerHostnameMatching",
        """
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: httproute-listener-hostname-matching, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: gateway-conformance
  listeners:
  - {name: listener-1, port: 80, protocol: HTTP, hostname: bar.com}
  - {name: listener-2, port: 80, protocol: HTTP, hostname: foo.bar.com}
  - {name: listener-3, port: 80, protocol: HTTP, hostname: "*.bar.com"}
  - {name: listener-4, port: 80, protocol: HTTP, hostname: "*.foo.com"}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: backend-v1, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: httproute-listener-hostname-matching, sectionName: listener-1}]
  rules:
  - backendRefs: [{name: infra-backend-v1, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: backend-v2, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: httproute-listener-hostname-matching, sectionName: listener-2}]
  rules:
  - backendRefs: [{name: infra-backend-v2, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: backend-v3, namespace: gateway-conformance-infra}
spec:
  parentRefs:
  - {name: httproute-listener-hostname-matching, sectionName: listener-3}
  - {name: httproute-listener-hostname-matching, sectionName: listener-4}
  rules:
  - backendRefs: [{name: infra-backend-v3, port: 8080}]
""",
        statuses=(
            RouteStatus("backend-v1", gateway="httproute-listener-hostname-matching", section="listener-1"),
            RouteStatus("backend-v2", gateway="httproute-listener-hostname-matching", section="listener-2"),
            RouteStatus("backend-v3", gateway="httproute-listener-hostname-matching", section="listener-3"),
            RouteStatus("backend-v3", gateway="httproute-listener-hostname-matching", section="listener-4"),
        ),
        exchanges=(
            at(LHM, "bar.com", "/", Expect(backend=V1)),
            at(LHM, "foo.bar.com", "/", Expect(backend=V2)),
            at(LHM, "baz.bar.com", "/", Expect(backend=V3)),
            at(LHM, "boo.bar.com", "/", Expect(backend=V3)),
            at(LHM, "multiple.prefixes.bar.com", "/", Expect(backend=V3)),
            at(LHM, "multiple.prefixes.foo.com", "/", Expect(backend=V3)),
            at(LHM, "foo.com", "/", Expect(404)),
            at(LHM, "no.matching.host", "/", Expect(404)),
        ),
    ),
    Case(
        "HTTPRouteListenerPortMatching",
        """
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: httproute-listener-port-matching, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: gateway-conformance
  listeners:
  - {name: http-80, port: 80, protocol: HTTP}
  - {name: http-8080, port: 8080, protocol: HTTP}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: port-8080-only, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: httproute-listener-port-matching, port: 8080}]
  rules:
  - backendRefs: [{name: infra-backend-v2, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: section-and-port, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: httproute-listener-port-matching, sectionName: http-80, port: 80}]
  rules:
  - backendRefs: [{name: infra-backend-v1, port: 8080}]
""",
        statuses=(
            RouteStatus("port-8080-only", gateway="httproute-listener-port-matching"),
            RouteStatus("section-and-port", gateway="httproute-listener-port-matching"),
            GatewayStatus(
                "httproute-listener-port-matching",
                conditions={"Programmed": "True"},
                listeners={"http-80": ListenerStatus(attached=1), "http-8080": ListenerStatus(attached=1)},
            ),
        ),
        exchanges=(
            Exchange(Request(gateway="httproute-listener-port-matching", port=80), Expect(backend=V1)),
            Exchange(Request(gateway="httproute-listener-port-matching", port=8080), Expect(backend=V2)),
        ),
    ),
    Case(
        "HTTPRouteCrossNamespace",
        """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: cross-namespace, namespace: gateway-conformance-web-backend}
spec:
  parentRefs: [{name: backend-namespaces, namespace: gateway-conformance-infra}]
  rules:
  - backendRefs: [{name: web-backend, port: 8080}]
""",
        statuses=(RouteStatus("cross-namespace", namespace=WEB_NS, gateway="backend-namespaces"),),
        exchanges=(ok("", "/", "web-backend", WEB_NS, gateway="backend-namespaces"),),
    ),
    Case(
        "HTTPRouteInvalidCrossNamespaceBackendRef",
        """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: invalid-cross-namespace-backend-ref, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - backendRefs: [{name: web-backend, namespace: gateway-conformance-web-backend, port: 8080}]
""",
        statuses=(
            RouteStatus(
                "invalid-cross-namespace-backend-ref",
                {"Accepted": "True", "ResolvedRefs": ("False", "RefNotPermitted")},
            ),
        ),
        exchanges=(status("", "/", 500),),
    ),
    Case(
        "HTTPRouteInvalidCrossNamespaceParentRef",
        """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: invalid-cross-namespace-parent-ref, namespace: gateway-conformance-web-backend}
spec:
  parentRefs: [{name: same-namespace, namespace: gateway-conformance-infra}]
  rules:
  - backendRefs: [{name: web-backend, port: 8080}]
""",
        statuses=(
            RouteStatus(
                "invalid-cross-namespace-parent-ref",
                {"Accepted": ("False", "NotAllowedByListeners")},
                namespace=WEB_NS,
            ),
            GatewayStatus("same-namespace", listeners={"http": ListenerStatus(attached=0)}),
        ),
        exchanges=(status("", "/", 404),),
    ),
    Case(
        "HTTPRouteInvalidParentRefNotMatchingSectionName",
        """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: httproute-listener-not-matching-section-name, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace, sectionName: unknown-section}]
  rules:
  - backendRefs: [{name: infra-backend-v1, port: 8080}]
""",
        statuses=(
            RouteStatus(
                "httproute-listener-not-matching-section-name", {"Accepted": ("False", "NoMatchingParent")}
            ),
        ),
        exchanges=(status("", "/", 404),),
    ),
    Case(
        "HTTPRouteInvalidParentRefNotMatchingListenerPort",
        """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: httproute-listener-not-matching-route-port, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace, port: 81}]
  rules:
  - backendRefs: [{name: infra-backend-v1, port: 8080}]
""",
        statuses=(
            RouteStatus(
                "httproute-listener-not-matching-route-port", {"Accepted": ("False", "NoMatchingParent")}
            ),
        ),
        exchanges=(status("", "/", 404),),
    ),
    Case(
        "HTTPRouteInvalidBackendRefUnknownKind",
        """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: invalid-backend-ref-unknown-kind, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - backendRefs: [{group: unknown.example.com, kind: UnknownKind, name: infra-backend-v1, port: 8080}]
""",
        statuses=(
            RouteStatus(
                "invalid-backend-ref-unknown-kind",
                {"Accepted": "True", "ResolvedRefs": ("False", "InvalidKind")},
            ),
        ),
        exchanges=(status("", "/", 500),),
    ),
    Case(
        "HTTPRouteInvalidNonExistentBackendRef",
        """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: invalid-nonexistent-backend-ref, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - backendRefs: [{name: nonexistent-backend, port: 8080}]
""",
        statuses=(
            RouteStatus(
                "invalid-nonexistent-backend-ref",
                {"Accepted": "True", "ResolvedRefs": ("False", "BackendNotFound")},
            ),
        ),
        exchanges=(status("", "/", 500),),
    ),
    Case(
        "HTTPRoutePartiallyInvalidBackendRefs",
        # One rule resolves, another does not: the good rule keeps serving (suite's own name;
        # upstream checks the same in HTTPRoutePartiallyInvalidViaInvalidReferenceGrant).
        """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: partially-invalid, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /valid}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /invalid}}]
    backendRefs: [{name: nonexistent-backend, port: 8080}]
""",
        statuses=(
            RouteStatus(
                "partially-invalid", {"Accepted": "True", "ResolvedRefs": ("False", "BackendNotFound")}
            ),
        ),
        exchanges=(ok("", "/valid", V1), status("", "/invalid", 500)),
    ),
    Case(
        "HTTPRouteDisallowedKind",
        """
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: httproute-disallowed-kind, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: gateway-conformance
  listeners:
  - name: http
    port: 80
    protocol: HTTP
    allowedRoutes: {kinds: [{kind: GRPCRoute}]}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: disallowed-kind, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: httproute-disallowed-kind}]
  rules:
  - backendRefs: [{name: infra-backend-v1, port: 8080}]
""",
        statuses=(
            RouteStatus(
                "disallowed-kind",
                {"Accepted": ("False", "NotAllowedByListeners")},
                gateway="httproute-disallowed-kind",
            ),
            GatewayStatus("httproute-disallowed-kind", listeners={"http": ListenerStatus(attached=0)}),
        ),
        exchanges=(Exchange(Request(gateway="httproute-disallowed-kind"), Expect(404)),),
    ),
    Case(
        "HTTPRouteServiceTypes",
        headless_service,
        statuses=(RouteStatus("service-types"),),
        exchanges=(ok("", "/headless", V2),),
    ),
    Case(
        "HTTPRouteNamedRule",
        """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: named-rule, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - name: named-rule-one
    matches: [{path: {type: PathPrefix, value: /named}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - name: named-rule-two
    backendRefs: [{name: infra-backend-v2, port: 8080}]
""",
        statuses=(RouteStatus("named-rule"),),
        exchanges=(ok("", "/named", V1), ok("", "/other", V2)),
    ),
    Case(
        "HTTPRouteHeaderMatching",
        """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: header-matching, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{headers: [{name: version, value: one}]}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{headers: [{name: version, value: two}]}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
  - matches: [{headers: [{name: version, value: two}, {name: color, value: orange}]}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{headers: [{name: color, value: blue}]}, {headers: [{name: color, value: green}]}]
    backendRefs: [{name: infra-backend-v3, port: 8080}]
""",
        statuses=(RouteStatus("header-matching"),),
        exchanges=(
            ok("", "/", V1, headers=(("version", "one"),)),
            ok("", "/", V2, headers=(("version", "two"),)),
            ok("", "/", V1, headers=(("version", "two"), ("color", "orange"))),
            ok("", "/", V2, headers=(("version", "two"), ("color", "blue"))),  # tie: first rule in order
            ok("", "/", V3, headers=(("color", "blue"),)),
            ok("", "/", V3, headers=(("color", "green"),)),
            ok("", "/", V1, headers=(("Version", "one"),)),  # header names are case-insensitive
            status("", "/", 404, headers=(("version", "ONE"),)),  # values are not
            status("", "/", 404, headers=(("version", "three"),)),
            status("", "/", 404),
        ),
    ),
    Case(
        "HTTPRouteQueryParamMatching",
        """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: query-param-matching, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{queryParams: [{name: animal, value: whale}]}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{queryParams: [{name: animal, value: dolphin}]}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
  - matches: [{queryParams: [{name: animal, value: dolphin}, {name: color, value: blue}]}]
    backendRefs: [{name: infra-backend-v3, port: 8080}]
""",
        statuses=(RouteStatus("query-param-matching"),),
        exchanges=(
            ok("", "/?animal=whale", V1),
            ok("", "/?animal=dolphin", V2),
            ok("", "/?animal=dolphin&color=blue", V3),
            ok("", "/?color=blue&animal=dolphin", V3),
            ok("", "/?animal=dolphin&color=red", V2),
            status("", "/?animal=shark", 404),
            status("", "/?ANIMAL=whale", 404),
            status("", "/", 404),
        ),
    ),
    Case(
        "HTTPRouteMethodMatching",
        """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: method-matching, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{method: POST}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{method: GET}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
  - matches: [{method: GET, path: {type: PathPrefix, value: /path}}]
    backendRefs: [{name: infra-backend-v3, port: 8080}]
""",
        statuses=(RouteStatus("method-matching"),),
        exchanges=(
            ok("", "/", V1, method="POST"),
            ok("", "/", V2, method="GET"),
            ok("", "/path/x", V3, method="GET"),
            ok("", "/path/x", V1, method="POST"),
            status("", "/", 404, method="PUT"),
            status("", "/", 404, method="DELETE"),
        ),
    ),
    Case(
        "HTTPRouteRequestHeaderModifier",
        headers_case_manifest("RequestHeaderModifier", "requestHeaderModifier"),
        statuses=(RouteStatus("requestheadermodifier"),),
        exchanges=(
            sees(
                "/set",
                sent=(("X-Header-Set", "some-other-value"),),
                headers=(("x-header-set", "set-overwrites-values"),),
            ),
            sees("/set", headers=(("x-header-set", "set-overwrites-values"),)),
            sees(
                "/add",
                sent=(("X-Header-Add", "some-other-value"),),
                headers=(("x-header-add", "some-other-value,add-appends-values"),),
            ),
            sees("/add", headers=(("x-header-add", "add-appends-values"),)),
            sees(
                "/remove",
                sent=(("X-Header-Remove", "gone"), ("X-Header-Kept", "kept")),
                headers=(("x-header-kept", "kept"),),
                absent=("x-header-remove",),
            ),
            sees(
                "/multiple",
                sent=(
                    ("X-Header-Set-2", "set-val-2"),
                    ("X-Header-Add-2", "add-val-2"),
                    ("X-Header-Remove-2", "remove-val-2"),
                    ("Another-Header", "another-header-val"),
                ),
                headers=(
                    ("x-header-set-1", "header-set-1"),
                    ("x-header-set-2", "header-set-2"),
                    ("x-header-add-1", "header-add-1"),
                    ("x-header-add-2", "add-val-2,header-add-2"),
                    ("another-header", "another-header-val"),
                ),
                absent=("x-header-remove-1", "x-header-remove-2"),
            ),
            sees(
                "/case-insensitivity",
                sent=(
                    ("x-lowercase-set", "original"),
                    ("X-LOWERCASE-ADD", "original"),
                    ("x-lowercase-remove", "x"),
                ),
                headers=(("x-lowercase-set", "lower-case"), ("x-lowercase-add", "original,lower-add")),
                absent=("x-lowercase-remove",),
            ),
        ),
    ),
    Case(
        "HTTPRouteResponseHeaderModifier",
        headers_case_manifest("ResponseHeaderModifier", "responseHeaderModifier"),
        statuses=(RouteStatus("responseheadermodifier"),),
        # The echo server adds the response headers named in X-Echo-Set-Header.
        exchanges=(
            answers(
                "/set",
                sent=(("X-Echo-Set-Header", "X-Header-Set: some-other-value"),),
                headers=(("x-header-set", "set-overwrites-values"),),
            ),
            answers("/set", headers=(("x-header-set", "set-overwrites-values"),)),
            answers(
                "/add",
                sent=(("X-Echo-Set-Header", "X-Header-Add: some-other-value"),),
                headers=(("x-header-add", "some-other-value,add-appends-values"),),
            ),
            answers("/add", headers=(("x-header-add", "add-appends-values"),)),
            answers(
                "/remove",
                sent=(("X-Echo-Set-Header", "X-Header-Remove: gone, X-Header-Kept: kept"),),
                headers=(("x-header-kept", "kept"),),
                absent=("x-header-remove",),
            ),
            answers(
                "/multiple",
                sent=(("X-Echo-Set-Header", "X-Header-Set-2: a, X-Header-Add-2: b, X-Header-Remove-2: c"),),
                headers=(
                    ("x-header-set-1", "header-set-1"),
                    ("x-header-set-2", "header-set-2"),
                    ("x-header-add-1", "header-add-1"),
                    ("x-header-add-2", "b,header-add-2"),
                ),
                absent=("x-header-remove-1", "x-header-remove-2"),
            ),
            answers(
                "/case-insensitivity",
                sent=(
                    ("X-Echo-Set-Header", "x-lowercase-set: a, X-LOWERCASE-ADD: b, X-LowerCase-Remove: c"),
                ),
                headers=(("x-lowercase-set", "lower-case"), ("x-lowercase-add", "b,lower-add")),
                absent=("x-lowercase-remove",),
            ),
        ),
    ),
    Case(
        "HTTPRouteBackendRequestHeaderModifier",
        """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: backend-request-header-modifier, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - backendRefs:
    - name: infra-backend-v1
      port: 8080
      filters:
      - type: RequestHeaderModifier
        requestHeaderModifier:
          set: [{name: X-Backend, value: infra-backend-v1}]
          remove: [X-Remove-Me]
""",
        statuses=(RouteStatus("backend-request-header-modifier"),),
        exchanges=(
            sees(
                "/",
                sent=(("X-Backend", "client-said"), ("X-Remove-Me", "x")),
                headers=(("x-backend", "infra-backend-v1"),),
                absent=("x-remove-me",),
            ),
        ),
    ),
    Case(
        "HTTPRouteRedirectHostAndStatus",
        """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: redirect-host-and-status, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /hostname-redirect}}]
    filters: [{type: RequestRedirect, requestRedirect: {hostname: example.org}}]
  - matches: [{path: {type: PathPrefix, value: /host-and-status}}]
    filters: [{type: RequestRedirect, requestRedirect: {hostname: example.org, statusCode: 301}}]
""",
        statuses=(RouteStatus("redirect-host-and-status"),),
        exchanges=(
            redirect(
                "/hostname-redirect",
                on_listener_port("example.org", "/hostname-redirect"),
            ),
            redirect(
                "/hostname-redirect/deeper?q=1",
                on_listener_port("example.org", "/hostname-redirect/deeper?q=1"),
            ),
            redirect(
                "/host-and-status",
                on_listener_port("example.org", "/host-and-status"),
                301,
            ),
        ),
    ),
    *(
        status_code_redirect(code, path)
        for code, path in ((303, "see-other"), (307, "temporary-redirect"), (308, "permanent-redirect"))
    ),
    Case(
        "HTTPRouteRedirectPath",
        """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: redirect-path, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /original-prefix}}]
    filters:
    - type: RequestRedirect
      requestRedirect: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /replacement-prefix}}
  - matches: [{path: {type: PathPrefix, value: /full}}]
    filters:
    - type: RequestRedirect
      requestRedirect: {path: {type: ReplaceFullPath, replaceFullPath: /full-path-replacement}}
  - matches: [{path: {type: PathPrefix, value: /path-and-host}}]
    filters:
    - type: RequestRedirect
      requestRedirect:
        hostname: example.org
        path: {type: ReplacePrefixMatch, replacePrefixMatch: /replacement-prefix}
  - matches: [{path: {type: PathPrefix, value: /strip-prefix}}]
    filters:
    - type: RequestRedirect
      requestRedirect: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /}}
""",
        statuses=(RouteStatus("redirect-path"),),
        exchanges=tuple(
            redirect(path, on_listener_port(host, location))
            for path, host, location in (
                ("/original-prefix/lemon", RE, "/replacement-prefix/lemon"),
                ("/original-prefix", RE, "/replacement-prefix"),
                ("/full/path/original", RE, "/full-path-replacement"),
                ("/path-and-host", "example.org", "/replacement-prefix"),
                ("/strip-prefix/lemon", RE, "/lemon"),
                ("/original-prefix/lemon?taste=sour", RE, "/replacement-prefix/lemon?taste=sour"),
                ("/strip-prefix", RE, "/"),
            )
        ),
    ),
    Case(
        "HTTPRouteRedirectPort",
        """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: redirect-port, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /port}}]
    filters: [{type: RequestRedirect, requestRedirect: {port: 8083}}]
  - matches: [{path: {type: PathPrefix, value: /port-and-host}}]
    filters: [{type: RequestRedirect, requestRedirect: {hostname: example.org, port: 8083}}]
""",
        statuses=(RouteStatus("redirect-port"),),
        exchanges=(
            redirect("/port", Redirect(RE, "/port", port=8083)),
            redirect("/port-and-host", Redirect("example.org", "/port-and-host", port=8083)),
        ),
    ),
    Case(
        "HTTPRouteRedirectScheme",
        """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: redirect-scheme, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /scheme}}]
    filters: [{type: RequestRedirect, requestRedirect: {scheme: https}}]
  - matches: [{path: {type: PathPrefix, value: /scheme-and-host}}]
    filters: [{type: RequestRedirect, requestRedirect: {hostname: example.org, scheme: https}}]
  - matches: [{path: {type: PathPrefix, value: /scheme-and-status}}]
    filters: [{type: RequestRedirect, requestRedirect: {scheme: https, statusCode: 301}}]
""",
        statuses=(RouteStatus("redirect-scheme"),),
        exchanges=(
            redirect("/scheme", Redirect(RE, "/scheme", scheme="https")),
            redirect("/scheme-and-host", Redirect("example.org", "/scheme-and-host", scheme="https")),
            redirect("/scheme-and-status", Redirect(RE, "/scheme-and-status", scheme="https"), 301),
        ),
    ),
    Case(
        "HTTPRouteRedirectPortAndScheme",
        # On a plain HTTP listener (the HTTPS half of the upstream test needs an HTTPS listener).
        """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: redirect-port-and-scheme, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /scheme-nil-and-port-nil}}]
    filters: [{type: RequestRedirect, requestRedirect: {hostname: example.org}}]
  - matches: [{path: {type: PathPrefix, value: /scheme-nil-and-port-80}}]
    filters: [{type: RequestRedirect, requestRedirect: {port: 80}}]
  - matches: [{path: {type: PathPrefix, value: /scheme-nil-and-port-8080}}]
    filters: [{type: RequestRedirect, requestRedirect: {port: 8080}}]
  - matches: [{path: {type: PathPrefix, value: /scheme-https-and-port-nil}}]
    filters: [{type: RequestRedirect, requestRedirect: {scheme: https}}]
  - matches: [{path: {type: PathPrefix, value: /scheme-https-and-port-443}}]
    filters: [{type: RequestRedirect, requestRedirect: {scheme: https, port: 443}}]
  - matches: [{path: {type: PathPrefix, value: /scheme-https-and-port-8443}}]
    filters: [{type: RequestRedirect, requestRedirect: {scheme: https, port: 8443}}]
""",
        statuses=(RouteStatus("redirect-port-and-scheme"),),
        exchanges=(
            redirect(
                "/scheme-nil-and-port-nil",
                on_listener_port("example.org", "/scheme-nil-and-port-nil"),
            ),
            redirect("/scheme-nil-and-port-80", Redirect(RE, "/scheme-nil-and-port-80", port=80)),
            redirect(
                "/scheme-nil-and-port-8080",
                Redirect(RE, "/scheme-nil-and-port-8080", port=8080),
            ),
            redirect(
                "/scheme-https-and-port-nil",
                Redirect(RE, "/scheme-https-and-port-nil", scheme="https"),
            ),
            redirect(
                "/scheme-https-and-port-443",
                Redirect(RE, "/scheme-https-and-port-443", scheme="https", port=443),
            ),
            redirect(
                "/scheme-https-and-port-8443",
                Redirect(RE, "/scheme-https-and-port-8443", scheme="https", port=8443),
            ),
            # Suite's own: a port in the request's Host never leaks into Location; the
            # redirect's port comes from the rule, the scheme or the listener only.
            redirect(
                "/scheme-nil-and-port-nil",
                on_listener_port("example.org", "/scheme-nil-and-port-nil"),
                host=f"{RE}:1234",
            ),
            redirect(
                "/scheme-nil-and-port-80", Redirect(RE, "/scheme-nil-and-port-80", port=80), host=f"{RE}:1234"
            ),
            redirect(
                "/scheme-https-and-port-nil",
                Redirect(RE, "/scheme-https-and-port-nil", scheme="https"),
                host=f"{RE}:1234",
            ),
            redirect(
                "/scheme-https-and-port-443",
                Redirect(RE, "/scheme-https-and-port-443", scheme="https", port=443),
                host=f"{RE}:1234",
            ),
        ),
    ),
    Case(
        "HTTPRouteRewriteHost",
        """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: rewrite-host, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  hostnames: [rewrite.example]
  rules:
  - matches: [{path: {type: PathPrefix, value: /one}}]
    filters: [{type: URLRewrite, urlRewrite: {hostname: one.example.org}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - filters: [{type: URLRewrite, urlRewrite: {hostname: example.org}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
""",
        statuses=(RouteStatus("rewrite-host"),),
        exchanges=(
            sees("/one", host="rewrite.example", seen_path="/one", seen_host="one.example.org"),
            sees(
                "/one/two?x=y", host="rewrite.example", seen_path="/one/two?x=y", seen_host="one.example.org"
            ),
            sees("/", host="rewrite.example", seen_path="/", seen_host="example.org"),
        ),
    ),
    Case(
        "HTTPRouteRewritePath",
        """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: rewrite-path, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /prefix/one}}]
    filters: [{type: URLRewrite, urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /one}}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /full/one}}]
    filters: [{type: URLRewrite, urlRewrite: {path: {type: ReplaceFullPath, replaceFullPath: /one}}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /strip-prefix}}]
    filters: [{type: URLRewrite, urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /}}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /foo/}}]
    filters: [{type: URLRewrite, urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /xyz/}}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /bar}}]
    filters: [{type: URLRewrite, urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /xyz}}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /rewrite-path-and-modify-headers}}]
    filters:
    - {type: URLRewrite, urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /prefix}}}
    - type: RequestHeaderModifier
      requestHeaderModifier: {set: [{name: X-Header-Set, value: set-overwrites-values}]}
    backendRefs: [{name: infra-backend-v1, port: 8080}]
""",
        statuses=(RouteStatus("rewrite-path"),),
        exchanges=(
            sees("/prefix/one/two", seen_path="/one/two"),
            sees("/prefix/one", seen_path="/one"),
            sees("/prefix/one/", seen_path="/one/"),
            sees("/prefix/one/two?a=b", seen_path="/one/two?a=b"),
            sees("/full/one/two", seen_path="/one"),
            sees("/full/one?a=b", seen_path="/one?a=b"),
            sees("/strip-prefix/three", seen_path="/three"),
            sees("/strip-prefix", seen_path="/"),
            # The examples of HTTPPathModifier.replacePrefixMatch in the specification:
            sees("/foo/bar", seen_path="/xyz/bar"),  # prefix /foo/, replacement /xyz/
            sees("/strip-prefix/", seen_path="/"),
            sees("/bar/baz", seen_path="/xyz/baz"),  # prefix /bar, replacement /xyz
            sees("/bar", seen_path="/xyz"),
            sees("/bar/", seen_path="/xyz/"),
            sees(
                "/rewrite-path-and-modify-headers/some",
                sent=(("X-Header-Set", "original"),),
                seen_path="/prefix/some",
                headers=(("x-header-set", "set-overwrites-values"),),
            ),
        ),
    ),
    Case(
        "HTTPRouteTimeoutRequest",
        """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: request-timeout, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: Exact, value: /request-timeout}}]
    timeouts: {request: 500ms}
    backendRefs: [{name: infra-backend-v1, port: 8080}]
""",
        statuses=(RouteStatus("request-timeout"),),
        exchanges=(
            ok("", "/request-timeout", V1),
            status("", "/request-timeout?delay=1s", 504),
        ),
    ),
    Case(
        "HTTPRouteTimeoutBackendRequest",
        """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: backend-request-timeout, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: Exact, value: /backend-timeout}}]
    timeouts: {request: 2s, backendRequest: 500ms}
    backendRefs: [{name: infra-backend-v1, port: 8080}]
""",
        statuses=(RouteStatus("backend-request-timeout"),),
        exchanges=(
            ok("", "/backend-timeout", V1),
            status("", "/backend-timeout?delay=1s", 504),
        ),
    ),
    Case(
        "HTTPRouteBackendProtocolH2C",
        """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: backend-protocol-h2c, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - backendRefs: [{name: infra-backend-v1, port: 8081}]
""",
        statuses=(RouteStatus("backend-protocol-h2c"),),
        exchanges=(
            Exchange(Request(path="/h2c"), Expect(backend=V1, seen=Seen(proto="HTTP/2.0", path="/h2c"))),
            Exchange(Request(path="/h2c", http2=True), Expect(backend=V1, seen=Seen(proto="HTTP/2.0"))),
        ),
    ),
    Case(
        "HTTPRouteHTTPSListener",
        """
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: same-namespace-with-https-listener, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: gateway-conformance
  listeners:
  - name: https
    port: 443
    protocol: HTTPS
    tls: {certificateRefs: [{kind: Secret, name: tls-validity-checks-certificate}]}
  - name: https-with-hostname
    port: 443
    protocol: HTTPS
    hostname: second-example.org
    tls: {certificateRefs: [{kind: Secret, name: tls-validity-checks-certificate}]}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: https-test-1, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace-with-https-listener}]
  hostnames: [example.org]
  rules:
  - backendRefs: [{name: infra-backend-v1, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: https-test-2, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace-with-https-listener, sectionName: https-with-hostname}]
  rules:
  - backendRefs: [{name: infra-backend-v2, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: https-test-3, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace-with-https-listener, sectionName: https}]
  hostnames: [third.example.org]
  rules:
  - backendRefs: [{name: infra-backend-v3, port: 8080}]
""",
        statuses=(
            GatewayStatus(
                "same-namespace-with-https-listener",
                conditions={"Accepted": "True", "Programmed": "True"},
                listeners={
                    "https": ListenerStatus(
                        {"Accepted": "True", "ResolvedRefs": "True", "Programmed": "True"},
                        attached=2,
                        kinds=("HTTPRoute",),
                    ),
                    "https-with-hostname": ListenerStatus(
                        {"Accepted": "True", "ResolvedRefs": "True", "Programmed": "True"}, attached=1
                    ),
                },
            ),
            RouteStatus("https-test-1", gateway="same-namespace-with-https-listener"),
            RouteStatus("https-test-2", gateway="same-namespace-with-https-listener"),
            RouteStatus("https-test-3", gateway="same-namespace-with-https-listener"),
        ),
        exchanges=(
            https("example.org", V1),
            https("second-example.org", V2),
            https("third.example.org", V3),
            Exchange(
                Request(
                    host="unknown-example.org", sni="example.org", scheme="https", port=443, gateway=HTTPS_GW
                ),
                Expect(404),
            ),
        ),
    ),
    Case(
        "HTTPRouteHTTPSListenerDetectMisdirectedRequests",
        # A request is misdirected (421) when the listener its connection's server name selects is
        # not the one its Host selects (exact, then the longest wildcard, then no hostname); on
        # the right connection a Host no route serves is 404. Over HTTP/2, as upstream sends it.
        """
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: same-namespace-with-https-listener, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: gateway-conformance
  listeners:
  - name: https
    port: 443
    protocol: HTTPS
    tls: {certificateRefs: [{kind: Secret, name: tls-validity-checks-certificate}]}
  - name: https-with-hostname
    port: 443
    protocol: HTTPS
    hostname: second-example.org
    tls: {certificateRefs: [{kind: Secret, name: tls-validity-checks-certificate}]}
  - name: https-with-wildcard-hostname
    port: 443
    protocol: HTTPS
    hostname: "*.wildcard.org"
    tls: {certificateRefs: [{kind: Secret, name: tls-validity-checks-certificate}]}
  - name: https-with-hostname-matching-wildcard
    port: 443
    protocol: HTTPS
    hostname: fourth-example.wildcard.org
    tls: {certificateRefs: [{kind: Secret, name: tls-validity-checks-certificate}]}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: https-listener-detect-misdirected-requests-test-1, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace-with-https-listener, sectionName: https}]
  hostnames: [example.org]
  rules:
  - matches: [{path: {type: PathPrefix, value: /detect-misdirected-requests}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: https-listener-detect-misdirected-requests-test-2, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace-with-https-listener, sectionName: https-with-hostname}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /detect-misdirected-requests}}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: https-listener-detect-misdirected-requests-test-3, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace-with-https-listener, sectionName: https-with-wildcard-hostname}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /detect-misdirected-requests}}]
    backendRefs: [{name: infra-backend-v3, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: https-listener-detect-misdirected-requests-test-4, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace-with-https-listener, sectionName: https-with-hostname-matching-wildcard}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /detect-misdirected-requests}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
""",
        statuses=tuple(
            RouteStatus(f"https-listener-detect-misdirected-requests-test-{i}", gateway=HTTPS_GW)
            for i in range(1, 5)
        ),
        exchanges=tuple(
            misdirected_exchange(sni, host, expect)
            for sni, host, expect in (
                ("example.org", "example.org", V1),
                ("example.org", "second-example.org", 421),
                ("example.org", "unknown-example.org", 404),
                ("second-example.org", "second-example.org", V2),
                ("second-example.org", "example.org", 421),
                ("second-example.org", "unknown-example.org", 421),
                ("third-example.wildcard.org", "third-example.wildcard.org", V3),
                ("third-example.wildcard.org", "fith-example.wildcard.org", V3),
                ("third-example.wildcard.org", "fourth-example.wildcard.org", 421),
                ("third-example.wildcard.org", "second-example.org", 421),
                ("third-example.wildcard.org", "unknown-example.org", 421),
                ("fourth-example.wildcard.org", "fourth-example.wildcard.org", V1),
                ("fourth-example.wildcard.org", "fith-example.wildcard.org", 421),
                ("unknown-example.org", "example.org", V1),
                ("unknown-example.org", "unknown-example.org", 404),
            )
        ),
    ),
    Case(
        "HTTPRouteHostnamePrecedence",
        # A precise hostname takes precedence over a wildcard only among rules that match: a
        # request the precise route has no rule for still goes to the wildcard route (HTTPRoute
        # spec.hostnames: "precedence must be given to rules from the HTTPRoute with the largest
        # number of characters in a matching non-wildcard hostname"). Suite's own name.
        """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: wildcard-host, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  hostnames: ["*.example.org"]
  rules:
  - matches: [{path: {type: PathPrefix, value: /wild}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /both}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: precise-host, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  hostnames: [foo.example.org]
  rules:
  - matches: [{path: {type: PathPrefix, value: /exact}}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /both}}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
""",
        statuses=(RouteStatus("wildcard-host"), RouteStatus("precise-host")),
        exchanges=(
            ok("foo.example.org", "/both", V2),
            ok("foo.example.org", "/exact", V2),
            ok("bar.example.org", "/wild", V1),
            ok("bar.example.org", "/both", V1),
            status("bar.example.org", "/exact", 404),
            ok("foo.example.org", "/wild", V1),
        ),
    ),
    Case(
        "HTTPRouteCORS",
        """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: cors, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /cors-1}}]
    filters:
    - type: CORS
      cors:
        allowOrigins: ["https://www.foo.com", "https://*.bar.com"]
        allowMethods: [GET, OPTIONS]
        allowHeaders: [x-header-1, x-header-2]
        exposeHeaders: [x-header-3, x-header-4]
        maxAge: 3600
        allowCredentials: true
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /cors-2}}]
    filters:
    - type: CORS
      cors: {allowOrigins: ["https://www.foo.com"], allowMethods: ["*"]}
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /cors-wildcard-origin}}]
    filters:
    - type: CORS
      cors: {allowOrigins: ["*"], allowMethods: [PUT]}
    backendRefs: [{name: infra-backend-v1, port: 8080}]
""",
        statuses=(RouteStatus("cors"),),
        exchanges=(
            *(
                Exchange(
                    Request(
                        path="/cors-1", method="OPTIONS", headers=preflight(origin, "x-header-1, x-header-2")
                    ),
                    Expect(
                        statuses=(200, 204),
                        headers=(
                            ("access-control-allow-origin", origin),
                            ("access-control-max-age", "3600"),
                            ("access-control-allow-credentials", "true"),
                        ),
                        header_choices=(
                            ("access-control-allow-methods", ("GET, OPTIONS",)),
                            ("access-control-allow-headers", ("x-header-1, x-header-2",)),
                            ("access-control-expose-headers", ("x-header-3, x-header-4",)),
                        ),
                    ),
                )
                # an exact origin, and two that match https://*.bar.com (any number of labels)
                for origin in ("https://www.foo.com", "https://www.bar.com", "https://xpto.www.bar.com")
            ),
            Exchange(
                Request(path="/cors-1", method="OPTIONS", headers=preflight("https://foobar.com")),
                Expect(statuses=(200, 204, 403), absent_headers=("access-control-allow-origin",)),
            ),
            Exchange(
                Request(path="/cors-1", headers=(("origin", "https://www.foo.com"),)),
                Expect(backend=V1, headers=(("access-control-allow-origin", "https://www.foo.com"),)),
            ),
            Exchange(
                Request(path="/cors-1", headers=(("origin", "https://foobar.com"),)),
                Expect(backend=V1, absent_headers=("access-control-allow-origin",)),
            ),
            Exchange(
                Request(
                    path="/cors-2", method="OPTIONS", headers=preflight("https://www.foo.com", method="POST")
                ),
                Expect(
                    statuses=(200, 204),
                    headers=(("access-control-allow-origin", "https://www.foo.com"),),
                    header_choices=(("access-control-allow-methods", ("POST", "*")),),
                    absent_headers=("access-control-allow-credentials",),
                ),
            ),
            Exchange(
                Request(
                    path="/cors-wildcard-origin",
                    method="OPTIONS",
                    headers=preflight("https://foobar.com:12345", method="PUT"),
                ),
                Expect(
                    statuses=(200, 204),
                    header_choices=(
                        ("access-control-allow-origin", ("https://foobar.com:12345", "*")),
                        ("access-control-allow-methods", ("PUT",)),
                    ),
                    absent_headers=("access-control-allow-credentials",),
                ),
            ),
        ),
    ),
    Case(
        "HTTPRouteObservedGenerationBump",
        # Every condition follows metadata.generation, which standalone files set by hand.
        GENERATION_ROUTE.format(generation=1, backend=V1),
        statuses=(RouteStatus("observed-generation-bump", generation=1),),
        exchanges=(ok("", "/", V1),),
        steps=(
            Step(
                GENERATION_ROUTE.format(generation=2, backend=V2),
                statuses=(RouteStatus("observed-generation-bump", generation=2),),
                exchanges=(ok("", "/", V2),),
            ),
        ),
    ),
    Case(
        "HTTPRouteMatchPrecedenceAcrossRoutes",
        # Equal matches in two routes: the older route wins, then the first by namespace/name
        # (HTTPRouteRule.matches). Suite's own name.
        """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: a-newer-route
  namespace: gateway-conformance-infra
  creationTimestamp: "2024-02-01T00:00:00Z"
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /by-age}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /by-name}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: b-older-route
  namespace: gateway-conformance-infra
  creationTimestamp: "2024-01-01T00:00:00Z"
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /by-age}}]
    backendRefs: [{name: infra-backend-v2, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: c-same-age-later-name
  namespace: gateway-conformance-infra
  creationTimestamp: "2024-02-01T00:00:00Z"
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /by-name}}]
    backendRefs: [{name: infra-backend-v3, port: 8080}]
""",
        statuses=(
            RouteStatus("a-newer-route"),
            RouteStatus("b-older-route"),
            RouteStatus("c-same-age-later-name"),
        ),
        exchanges=(ok("", "/by-age", V2), ok("", "/by-name", V1)),
    ),
    Case(
        "HTTPRouteNoBackendsOrFilters",
        # "If no backendRefs or filters are specified that would result in a response being sent,
        # a HTTP 500 status code MUST be returned" (HTTPRouteRule.backendRefs). Suite's own name.
        """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: no-backends, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /nothing}}]
  - matches: [{path: {type: PathPrefix, value: /only-headers}}]
    filters: [{type: RequestHeaderModifier, requestHeaderModifier: {set: [{name: x-a, value: b}]}}]
  - matches: [{path: {type: PathPrefix, value: /zero-weight}}]
    backendRefs: [{name: infra-backend-v1, port: 8080, weight: 0}]
""",
        statuses=(RouteStatus("no-backends"),),
        exchanges=(
            status("", "/nothing", 500),
            status("", "/only-headers", 500),
            status("", "/zero-weight", 500),
        ),
    ),
    Case(
        "HTTPRouteRepeatedMatchNames",
        # A header named twice in one match (spelled differently: the API server refuses the same
        # spelling twice, headers being a list-map keyed by name): only the first entry counts
        # (HTTPRouteMatch.headers). Query parameter names are case-sensitive, so an exact repeat is
        # the only repeat, and the API server refuses it (tests/loader/test_loader.py). Suite's own name.
        """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: repeated-match-names, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches:
    - path: {type: PathPrefix, value: /headers}
      headers: [{name: version, value: one}, {name: Version, value: two}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
""",
        statuses=(RouteStatus("repeated-match-names"),),
        exchanges=(
            ok("", "/headers", V1, headers=(("version", "one"),)),
            status("", "/headers", 404, headers=(("version", "two"),)),
        ),
    ),
]


@pytest.mark.parametrize("case", params(CASES))
async def test_case(conformance: Conformance, case: Case) -> None:
    await run_case(conformance, case)


WEIGHT_ROUTE = """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: weighted-backends, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /weight}}]
    backendRefs:
    - {name: infra-backend-v1, port: 8080, weight: 70}
    - {name: infra-backend-v2, port: 8080, weight: 30}
    - {name: infra-backend-v3, port: 8080, weight: 0}
  - matches: [{path: {type: PathPrefix, value: /half-invalid}}]
    backendRefs:
    - {name: infra-backend-v1, port: 8080, weight: 1}
    - {name: does-not-exist, port: 8080, weight: 1}
"""


@pytest.mark.parametrize(
    "path,shares",
    [
        pytest.param("/weight", {V1: 0.7, V2: 0.3, V3: 0.0}, id="HTTPRouteWeight"),
        # "the proportion of requests that would otherwise have been routed to an invalid backend
        # MUST receive a 500" (HTTPRouteRule.backendRefs). Suite's own name.
        pytest.param("/half-invalid", {V1: 0.5, "500": 0.5}, id="HTTPRouteWeightWithInvalidBackend"),
    ],
)
async def test_weights(conformance: Conformance, path: str, shares: dict[str, float]) -> None:
    """Requests split by weight (±10 points); weight 0 gets nothing; an invalid backend's share is 500."""
    h = conformance
    await h.apply("case-weight", WEIGHT_ROUTE)
    try:
        h.check(RouteStatus("weighted-backends", {"Accepted": "True"}))
        seen: Counter[str] = Counter()
        total = 400

        async def one(client: httpx.AsyncClient) -> None:
            response = await client.get(h.url(Request(path=path)))
            if response.status_code == 200:
                seen[str(response.json()["service"])] += 1
            else:
                seen[str(response.status_code)] += 1

        limits = httpx.Limits(max_connections=20, max_keepalive_connections=0)
        async with httpx.AsyncClient(limits=limits) as client:
            for _ in range(total // 50):
                await asyncio.gather(*(one(client) for _ in range(50)))
        assert set(seen) <= {k for k, share in shares.items() if share > 0}, f"unexpected answers: {seen}"
        for key, share in shares.items():
            got = seen[key] / total
            assert abs(got - share) <= 0.1, f"{key}: {got:.2f} of requests, want {share}±0.1: {seen}"
    finally:
        await h.delete("case-weight")


MIRROR_ROUTE = """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: request-mirror, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /mirror}}]
    filters:
    - type: RequestMirror
      requestMirror: {backendRef: {name: infra-backend-v2, port: 8080}}
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /multi-mirror}}]
    filters:
    - type: RequestMirror
      requestMirror: {backendRef: {name: infra-backend-v2, port: 8080}}
    - type: RequestMirror
      requestMirror: {backendRef: {name: infra-backend-v3, port: 8080}}
    backendRefs: [{name: infra-backend-v1, port: 8080}]
"""


@pytest.mark.parametrize(
    "path,mirrors",
    [
        pytest.param("/mirror", (V2,), id="HTTPRouteRequestMirror"),
        pytest.param("/multi-mirror", (V2, V3), id="HTTPRouteRequestMultipleMirrors"),
    ],
)
async def test_request_mirror(conformance: Conformance, path: str, mirrors: tuple[str, ...]) -> None:
    """The primary backend answers; every mirror receives a copy (its answer is dropped)."""
    h = conformance
    await h.apply("case-mirror", MIRROR_ROUTE)
    try:
        h.check(RouteStatus("request-mirror"))
        marker = f"{path}/{id(h)}-{asyncio.get_running_loop().time()}"
        await h.expect(Request(path=marker), Expect(backend=V1, seen=Seen(path=marker)), successes=1)

        async def mirrored() -> bool:
            return all(any(r.path == marker for r in h.requests_seen(m)) for m in mirrors)

        deadline = asyncio.get_running_loop().time() + 3
        while not await mirrored():
            assert asyncio.get_running_loop().time() < deadline, (
                f"mirrors {mirrors} did not receive {marker}: "
                + str({m: [r.path for r in h.requests_seen(m)][-5:] for m in mirrors})
            )
            await asyncio.sleep(0.05)
    finally:
        await h.delete("case-mirror")


PERCENTAGE_MIRROR_ROUTE = """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: request-percentage-mirror, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /percent-mirror}}]
    filters:
    - type: RequestMirror
      requestMirror: {backendRef: {name: infra-backend-v2, port: 8080}, percent: 20}
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /percent-mirror-fraction}}]
    filters:
    - type: RequestMirror
      requestMirror:
        backendRef: {name: infra-backend-v2, port: 8080}
        fraction: {numerator: 25, denominator: 50}
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /percent-multi-mirror-and-modify-headers}}]
    filters:
    - type: RequestHeaderModifier
      requestHeaderModifier:
        set: [{name: X-Header-Set, value: set-overwrites-values}]
        add: [{name: X-Header-Add, value: header-val-1}, {name: X-Header-Add-Append, value: header-val-2}]
        remove: [X-Header-Remove]
    - type: RequestMirror
      requestMirror: {backendRef: {name: infra-backend-v2, port: 8080}, percent: 35}
    - type: RequestMirror
      requestMirror: {backendRef: {name: infra-backend-v3, port: 8080}, percent: 50}
    backendRefs: [{name: infra-backend-v1, port: 8080}]
"""


@pytest.mark.parametrize(
    "path,shares",
    [
        pytest.param("/percent-mirror", {V2: 0.2}, id="HTTPRouteRequestPercentageMirror"),
        pytest.param("/percent-mirror-fraction", {V2: 0.5}, id="HTTPRouteRequestPercentageMirror-fraction"),
        pytest.param(
            "/percent-multi-mirror-and-modify-headers",
            {V2: 0.35, V3: 0.5},
            id="HTTPRouteRequestPercentageMirror-multiple-and-headers",
        ),
    ],
)
async def test_request_percentage_mirror(
    conformance: Conformance, path: str, shares: dict[str, float]
) -> None:
    """Every request reaches the primary backend (with the rule's header edits); each mirror
    receives a copy of its share of them. Sampling is random, so a share is checked to within
    4.5 standard deviations of the binomial count (400 requests: 20% is 80 ± 36): a mirror that
    takes every request, or none, still fails by far."""
    h = conformance
    await h.apply("case-percentage-mirror", PERCENTAGE_MIRROR_ROUTE)
    try:
        h.check(RouteStatus("request-percentage-mirror"))
        edits = Seen(
            headers=(
                ("X-Header-Set", "set-overwrites-values"),
                ("X-Header-Add", "header-val-1"),
                ("X-Header-Add-Append", "append-val-1,header-val-2"),
            ),
            absent_headers=("X-Header-Remove",),
        )
        sent = (("X-Header-Remove", "remove-val"), ("X-Header-Add-Append", "append-val-1"))
        if "headers" in path:
            await h.expect(Request(path=path, headers=sent), Expect(backend=V1, seen=edits))
        else:
            await h.expect(Request(path=path), Expect(backend=V1))
        run = f"{path}/run-{id(h)}-{asyncio.get_running_loop().time()}"
        total, answered = 400, Counter[str]()

        async def one(client: httpx.AsyncClient, n: int) -> None:
            response = await client.get(h.url(Request(path=f"{run}/{n}")))
            answered[str(response.json()["service"]) if response.status_code == 200 else "error"] += 1

        limits = httpx.Limits(max_connections=20, max_keepalive_connections=20)
        async with httpx.AsyncClient(limits=limits) as client:
            for start in range(0, total, 50):
                await asyncio.gather(*(one(client, n) for n in range(start, start + 50)))
        assert answered == {V1: total}, f"the primary backend must answer every request: {answered}"

        def mirrored() -> dict[str, int]:
            return {m: sum(r.path.startswith(run) for r in h.requests_seen(m)) for m in shares}

        # Mirrors are sent alongside the primary request and may land after its answer.
        loop, counts = asyncio.get_running_loop(), mirrored()
        quiet_since = loop.time()
        while loop.time() - quiet_since < 0.5:
            await asyncio.sleep(0.1)
            now = mirrored()
            if now != counts:
                counts, quiet_since = now, loop.time()
        for mirror, share in shares.items():
            want, spread = total * share, 4.5 * (total * share * (1 - share)) ** 0.5
            assert abs(counts[mirror] - want) <= spread, (
                f"{mirror}: received {counts[mirror]} of {total} requests, want {want:.0f} ± {spread:.0f}"
            )
    finally:
        await h.delete("case-percentage-mirror")


RETRY_ROUTE = """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: retries, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /retry/code-500-attempts-3}}]
    retry: {codes: [500], attempts: 3}
    backendRefs: [{name: infra-backend-v3, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /retry/code-all-attempts-2}}]
    retry: {codes: [500, 502, 503, 504], attempts: 2}
    backendRefs: [{name: infra-backend-v3, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /retry-on-connection-errors}}]
    retry: {attempts: 2}
    backendRefs: [{name: infra-backend-v3, port: 8080}]
"""

#: (path, the backend's failing status, how many requests fail before one succeeds, the answer).
#: ``attempts`` counts retries: with 3, a request is tried at most 4 times.
RETRY_EXCHANGES = (
    ("/retry/code-500-attempts-3", 500, 2, 200),
    ("/retry/code-500-attempts-3", 500, 4, 500),
    ("/retry/code-500-attempts-3", 503, 2, 503),  # 503 is not a listed code: not retried
    *(
        exchange
        for code in (500, 502, 503, 504)
        for exchange in (
            ("/retry/code-all-attempts-2", code, 1, 200),
            ("/retry/code-all-attempts-2", code, 3, code),
        )
    ),
)

#: Connection errors are retried once ``retry`` is set, codes or not: the backend closes the
#: connection unanswered (``reset``, after the request was sent). Upstream's
#: HTTPRouteRetryConnectionError has a pod that resets next to a healthy one; here one pod resets
#: the first requests of each probe. Envoy answers a request it gave up on with 503.
RETRY_CONNECTION_EXCHANGES = (
    ("/retry-on-connection-errors", "reset", 2, 200),
    ("/retry-on-connection-errors", "reset", 3, 503),
)


RETRY_TIMEOUTS_ROUTE = """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: retries-with-timeouts, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /retry/backend-request-timeout-200ms}}]
    retry: {attempts: 2}
    timeouts: {backendRequest: 200ms}
    backendRefs: [{name: infra-backend-v3, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /retry/request-timeout-200ms}}]
    retry: {codes: [500], attempts: 5}
    timeouts: {backendRequest: 200ms, request: 400ms}
    backendRefs: [{name: infra-backend-v3, port: 8080}]
"""

#: As :data:`RETRY_EXCHANGES`, with the delay of each failing answer: an attempt that outlasts
#: ``backendRequest`` is retried; retries end with ``request`` (504).
RETRY_TIMEOUTS_EXCHANGES = (
    ("/retry/backend-request-timeout-200ms", 500, 2, 200, "300ms"),
    ("/retry/backend-request-timeout-200ms", 500, 3, 504, "300ms"),
    ("/retry/request-timeout-200ms", 500, 1, 200, ""),
    ("/retry/request-timeout-200ms", 500, 4, 504, "100ms"),
)


@pytest.mark.parametrize(
    "route,name,exchanges",
    [
        pytest.param(RETRY_ROUTE, "retries", [(*e, "") for e in RETRY_EXCHANGES], id="HTTPRouteRetry"),
        pytest.param(
            RETRY_ROUTE,
            "retries",
            [(*e, "") for e in RETRY_CONNECTION_EXCHANGES],
            id="HTTPRouteRetryConnectionError",
        ),
        pytest.param(
            RETRY_TIMEOUTS_ROUTE,
            "retries-with-timeouts",
            RETRY_TIMEOUTS_EXCHANGES,
            id="HTTPRouteRetryWithTimeouts",
        ),
    ],
)
async def test_retry(
    conformance: Conformance, route: str, name: str, exchanges: list[tuple[str, int | str, int, int, str]]
) -> None:
    """A rule's ``retry`` retries the listed codes (or, without codes, attempts that outlast
    ``backendRequest``) up to ``attempts`` times, within ``request``, through real Envoy.

    The backend fails on purpose (upstream echo-basic's retry simulation, in
    :func:`weir.testkit.echo_http.retry_simulation_status`): the first ``succeedAfter`` requests
    of one ``uuid`` get ``responseCode`` (after ``delayRetry``). Each probe has a new ``uuid``; an
    answer must hold for two probes in a row (the route may still be on its way to Envoy at first).
    """
    h = conformance
    await h.apply(f"case-{name}", route)
    try:
        h.check(RouteStatus(name))
        async with httpx.AsyncClient(timeout=5) as client:
            for path, code, after, want, delay in exchanges:
                loop = asyncio.get_running_loop()
                deadline, streak, got = loop.time() + 5, 0, None
                while streak < 2:
                    query = f"uuid={uuid.uuid4()}&responseCode={code}&succeedAfter={after}"
                    query += f"&delayRetry={delay}" if delay else ""
                    response = await client.get(h.url(Request(path=f"{path}?{query}")))
                    got = response.status_code
                    served_by_v3 = got != 200 or response.json()["service"] == V3
                    streak = streak + 1 if got == want and served_by_v3 else 0
                    assert loop.time() < deadline, (
                        f"{path} with the backend failing {after} times with {code} (delay {delay or 0}): "
                        f"got {got}, want {want}"
                    )
    finally:
        await h.delete(f"case-{name}")


WEBSOCKET_ROUTE = """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: backend-protocol-websocket, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /ws}}]
    backendRefs: [{name: infra-backend-v1, port: 8082}]
"""


async def test_HTTPRouteBackendProtocolWebSocket(conformance: Conformance) -> None:
    """A WebSocket upgrade through the gateway to a Service port of appProtocol kubernetes.io/ws."""
    h = conformance
    await h.apply("case-websocket", WEBSOCKET_ROUTE)
    try:
        h.check(RouteStatus("backend-protocol-websocket"))
        address = h.gateway_address("same-namespace")
        ws = await WebSocketClient.connect(address, h.listener_port(80), "/ws", host_header="ws.example")
        try:
            for text in ("hello", "x" * 70_000):
                await ws.send_text(text)
                frame = await ws.receive()
                assert frame.text == text
        finally:
            await ws.close()
        upgrades = [r for r in h.requests_seen(V1) if r.websocket]
        assert upgrades and upgrades[-1].path == "/ws"
    finally:
        await h.delete("case-websocket")


SESSION_ROUTE = """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: session-persistence, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /session-persistence}}]
    sessionPersistence: {type: Cookie}
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /permanent-session}}]
    sessionPersistence:
      sessionName: permanent-session
      absoluteTimeout: 1h
      cookieConfig: {lifetimeType: Permanent}
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /header-session}}]
    sessionPersistence: {type: Header, sessionName: X-Session}
    backendRefs: [{name: infra-backend-v1, port: 8080}]
  - matches: [{path: {type: PathPrefix, value: /no-session}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
"""


@pytest.mark.parametrize(
    "path,permanent",
    [
        pytest.param("/session-persistence", False, id="HTTPRouteSessionPersistenceCookie"),
        # Suite's own name: a permanent cookie lives absoluteTimeout (Max-Age), under sessionName.
        pytest.param("/permanent-session", True, id="HTTPRouteSessionPersistencePermanentCookie"),
    ],
)
async def test_session_persistence_cookie(conformance: Conformance, path: str, permanent: bool) -> None:
    """The first response sets a cookie; every request carrying it reaches the same pod of two."""
    h = conformance
    await h.apply("case-session", SESSION_ROUTE)
    try:
        h.check(RouteStatus("session-persistence"))
        response = await h.expect(Request(path=path), Expect(backend=V1), successes=1)
        assert response is not None
        cookie = response.headers.get("set-cookie", "")
        assert cookie, f"no session cookie in {dict(response.headers)}"
        name_value, *attributes = [part.strip() for part in cookie.split(";")]
        names = {a.split("=", 1)[0].lower() for a in attributes}
        if permanent:
            assert name_value.startswith("permanent-session="), cookie
            assert "max-age=3600" in [a.lower() for a in attributes], cookie
        else:
            assert not names & {"max-age", "expires"}, f"a session cookie must not expire: {cookie}"
        first = str(response.json()["pod"])
        assert await h.pods_answering(path, {"cookie": name_value}, 10) == [first] * 10
        # Without the cookie both pods answer: stickiness comes from the session, not from luck.
        assert len(set(await h.pods_answering("/no-session", {}, 10))) == 2
    finally:
        await h.delete("case-session")


async def test_HTTPRouteSessionPersistenceHeader(conformance: Conformance) -> None:
    """Suite's own name: a header session; the response names it, and requests carrying it stick."""
    h = conformance
    await h.apply("case-session", SESSION_ROUTE)
    try:
        response = await h.expect(Request(path="/header-session"), Expect(backend=V1), successes=1)
        assert response is not None
        token = response.headers.get("x-session")
        assert token, f"no X-Session header in {dict(response.headers)}"
        first = str(response.json()["pod"])
        assert await h.pods_answering("/header-session", {"x-session": token}, 10) == [first] * 10
    finally:
        await h.delete("case-session")


async def test_session_persistence_idle_timeout_is_refused(conformance: Conformance) -> None:
    """Suite's own: idleTimeout cannot be honoured by Envoy's sessions, so the route says so."""
    h = conformance
    manifest = """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: session-idle, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - sessionPersistence: {idleTimeout: 5m}
    backendRefs: [{name: infra-backend-v1, port: 8080}]
"""
    await h.apply("case-session-idle", manifest)
    try:
        h.check(RouteStatus("session-idle", {"Accepted": ("False", "UnsupportedValue")}))
    finally:
        await h.delete("case-session-idle")
