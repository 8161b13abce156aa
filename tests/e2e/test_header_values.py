"""CR, LF and NUL in values Envoy takes as header values, through real Envoy.

Upstream's standard-channel CRDs accept an HTTPRoute or GRPCRoute header edit
whose value holds CR or LF, and a rewritten or redirected path holding them
(only the experimental channel puts a pattern on header values), so weir's
loader accepts them too. Envoy does not: it refuses the whole route
configuration of the listener (measured: "Proto constraint validation failed"
for a ``request_headers_to_add`` value, a ``regex_rewrite`` substitution and a
``prefix_rewrite``), and every good route beside the bad one would stop
getting updates. So the route is not accepted (``UnsupportedValue``, naming
the field) and never reaches Envoy, and the rest of the listener keeps
changing. A header *match* on such a value is different: Envoy accepts it (it
can never match), and so does weir; that is pinned here too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from weir_harness import GATEWAY_HEAD, Weir, eventually, stopped_after

from weir.testkit import RecordingUpstream, free_port

pytestmark = pytest.mark.timeout(120)

UPSTREAM = "127.0.0.2"

SERVICE = """\
apiVersion: v1
kind: Service
metadata: {{name: up, namespace: default}}
spec: {{ports: [{{name: http, port: {port}}}]}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: up-1, namespace: default, labels: {{kubernetes.io/service-name: up}}}}
addressType: IPv4
ports: [{{name: http, port: {port}}}]
endpoints: [{{addresses: [{ip}]}}]
"""


def http_route(
    name: str, port: int, *, match: str = "", filters: str = "[]", backend_filters: str = "[]"
) -> str:
    return f"""\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}, namespace: default}}
spec:
  parentRefs: [{{name: gw}}]
  rules:
  - matches: [{{path: {{type: PathPrefix, value: /{name}}}{match}}}]
    filters: {filters}
    backendRefs: [{{name: up, port: {port}, filters: {backend_filters}}}]
"""


def grpc_route(name: str, port: int, filters: str) -> str:
    return f"""\
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {{name: {name}, namespace: default}}
spec:
  parentRefs: [{{name: gw}}]
  rules:
  - matches: [{{method: {{service: echo.v1.Echo}}}}]
    filters: {filters}
    backendRefs: [{{name: up, port: {port}}}]
"""


def _modifier(kind: str, action: str, value: str) -> str:
    field = kind[0].lower() + kind[1:]
    return f'[{{type: {kind}, {field}: {{{action}: [{{name: x-a, value: "{value}"}}]}}}}]'


def _path(kind: str, path_type: str, value: str) -> str:
    field = "urlRewrite" if kind == "URLRewrite" else "requestRedirect"
    key = path_type[0].lower() + path_type[1:]
    return f'[{{type: {kind}, {field}: {{path: {{type: {path_type}, {key}: "{value}"}}}}}}]'


#: case → (the bad route's kind, its manifest given the upstream port, the field its status names).
BAD = {
    "request-set-crlf": (
        "HTTPRoute",
        lambda port: http_route("bad", port, filters=_modifier("RequestHeaderModifier", "set", r"a\r\nb")),
        "spec.rules[0].filters[0].requestHeaderModifier.set: the value of header 'x-a'",
    ),
    "response-add-lf": (
        "HTTPRoute",
        lambda port: http_route("bad", port, filters=_modifier("ResponseHeaderModifier", "add", r"a\nb")),
        "spec.rules[0].filters[0].responseHeaderModifier.add: the value of header 'x-a'",
    ),
    "backend-request-set-cr": (
        "HTTPRoute",
        lambda port: http_route(
            "bad", port, backend_filters=_modifier("RequestHeaderModifier", "set", r"a\rb")
        ),
        "spec.rules[0].backendRefs[0].filters[0].requestHeaderModifier.set: the value of header 'x-a'",
    ),
    "rewrite-full-path-crlf": (
        "HTTPRoute",
        lambda port: http_route("bad", port, filters=_path("URLRewrite", "ReplaceFullPath", r"/a\r\nb")),
        "spec.rules[0].filters[0].urlRewrite.path.replaceFullPath: the path",
    ),
    "rewrite-prefix-lf": (
        "HTTPRoute",
        lambda port: http_route("bad", port, filters=_path("URLRewrite", "ReplacePrefixMatch", r"/a\nb")),
        "spec.rules[0].filters[0].urlRewrite.path.replacePrefixMatch: the path",
    ),
    "redirect-full-path-lf": (
        "HTTPRoute",
        lambda port: http_route(
            "bad", port, filters=_path("RequestRedirect", "ReplaceFullPath", r"/a\nb")
        ).replace(f"    backendRefs: [{{name: up, port: {port}, filters: []}}]\n", ""),
        "spec.rules[0].filters[0].requestRedirect.path.replaceFullPath: the path",
    ),
    "grpc-request-set-crlf": (
        "GRPCRoute",
        lambda port: grpc_route("bad", port, _modifier("RequestHeaderModifier", "set", r"a\r\nb")),
        "spec.rules[0].filters[0].requestHeaderModifier.set: the value of header 'x-a'",
    ),
}


@pytest.fixture
async def weir(tmp_path: Path) -> AsyncIterator[Weir]:
    folder = tmp_path / "manifests"
    folder.mkdir()
    async with stopped_after(Weir(folder, None, free_port())) as harness:
        yield harness


async def _status(client: httpx.AsyncClient, url: str) -> int:
    try:
        return (await client.get(url)).status_code
    except httpx.HTTPError:
        return 0


async def _serves(client: httpx.AsyncClient, url: str) -> None:
    async def ok() -> bool:
        return await _status(client, url) == 200

    await eventually(ok, timeout=10)


def _accepted(weir: Weir, kind: str) -> dict[str, str]:
    [parent] = weir.status_of(kind, "default", "bad")["parents"]
    return next(c for c in parent["conditions"] if c["type"] == "Accepted")


def _programmed(weir: Weir) -> str:
    gateway = weir.status_of("Gateway", "default", "gw")
    return str(next(c for c in gateway["conditions"] if c["type"] == "Programmed")["status"])


@pytest.mark.parametrize("case", list(BAD))
async def test_a_value_envoy_refuses_costs_only_its_route(weir: Weir, case: str) -> None:
    kind, manifest, field = BAD[case]
    port = free_port(UPSTREAM)
    async with RecordingUpstream("a", host=UPSTREAM, port=port), httpx.AsyncClient(timeout=5) as client:
        weir.write("gw.yaml", GATEWAY_HEAD.format(port=weir.gateway_port))
        weir.write("up.yaml", SERVICE.format(port=port, ip=UPSTREAM))
        weir.write("good.yaml", http_route("good", port))
        weir.write("bad.yaml", manifest(port))
        await weir.start()
        await _serves(client, weir.url("/good"))

        accepted = _accepted(weir, kind)
        assert (accepted["status"], accepted["reason"]) == ("False", "UnsupportedValue")
        assert field in accepted["message"], accepted["message"]
        assert "contains CR, LF or NUL" in accepted["message"] and "on one line" in accepted["message"]

        # The listener's other routes keep getting updates: Envoy took every configuration.
        weir.write("second.yaml", http_route("second", port))
        await _serves(client, weir.url("/second"))
        # Programmed follows Envoy's ACK, which the status loop may take in just after the route
        # answers: a NACK would leave it False.
        await eventually(lambda: _programmed(weir) == "True", timeout=5)
        assert await _status(client, weir.url("/bad")) == 404


async def test_a_header_match_on_such_a_value_is_served_and_never_matches(weir: Weir) -> None:
    """Envoy accepts an exact header match on a value with CR and LF (no request can carry one)."""
    port = free_port(UPSTREAM)
    async with RecordingUpstream("a", host=UPSTREAM, port=port), httpx.AsyncClient(timeout=5) as client:
        weir.write("gw.yaml", GATEWAY_HEAD.format(port=weir.gateway_port))
        weir.write("up.yaml", SERVICE.format(port=port, ip=UPSTREAM))
        weir.write("good.yaml", http_route("good", port))
        weir.write("bad.yaml", http_route("bad", port, match=r', headers: [{name: x-a, value: "a\r\nb"}]'))
        await weir.start()
        await _serves(client, weir.url("/good"))
        accepted = _accepted(weir, "HTTPRoute")
        assert accepted["status"] == "True", accepted

        weir.write("second.yaml", http_route("second", port))
        await _serves(client, weir.url("/second"))
        # Programmed follows Envoy's ACK, which the status loop may take in just after the route
        # answers: a NACK would leave it False.
        await eventually(lambda: _programmed(weir) == "True", timeout=5)
        assert await _status(client, weir.url("/bad")) == 404
