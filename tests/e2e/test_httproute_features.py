"""HTTPRoute matches, precedence, filters, timeouts and retries through real Envoy.

One weir (and Envoy) serves every case of the module: each feature has its
own hostname, and rules name themselves in a response header (``x-rule``,
set by a ResponseHeaderModifier) so that a test sees which rule answered.
Upstreams are :class:`RecordingUpstream` s on loopback addresses, one per
Service, all on one port.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
from weir_harness import GATEWAY_HEAD, Weir, pid_alive

from weir.testkit import RecordingUpstream, SeenRequest, UpstreamResponse, free_port

pytestmark = pytest.mark.asyncio(loop_scope="module")

#: Service name -> loopback address of its upstream.
SERVICES = {
    "web": "127.0.0.2",
    "other": "127.0.0.3",
    "mirror": "127.0.0.4",
    "slow": "127.0.0.5",
    "flaky": "127.0.0.6",
}


def _service(name: str, ip: str, port: int) -> str:
    return f"""\
---
apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: default}}
spec: {{ports: [{{name: http, port: 80}}]}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: {name}-1, namespace: default, labels: {{kubernetes.io/service-name: {name}}}}}
addressType: IPv4
ports: [{{name: http, port: {port}}}]
endpoints: [{{addresses: [{ip}]}}]
"""


def _tag(rule: str) -> str:
    """A filter naming the rule in the response (``x-rule``)."""
    return (
        "{type: ResponseHeaderModifier, responseHeaderModifier: "
        f"{{set: [{{name: x-rule, value: {rule}}}]}}}}"
    )


ROUTES = f"""\
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: matches, namespace: default, creationTimestamp: "2024-01-01T00:00:00Z"}}
spec:
  parentRefs: [{{name: gw}}]
  hostnames: [matches.example.test]
  rules:
  - matches: [{{path: {{type: PathPrefix, value: /}}}}]
    filters: [{_tag("root")}]
    backendRefs: [{{name: web, port: 80}}]
  - matches: [{{path: {{type: Exact, value: /exact}}}}]
    filters: [{_tag("exact")}]
    backendRefs: [{{name: web, port: 80}}]
  - matches: [{{path: {{type: RegularExpression, value: '/items/[0-9]+'}}}}]
    filters: [{_tag("regex")}]
    backendRefs: [{{name: web, port: 80}}]
  - matches: [{{path: {{type: PathPrefix, value: /api}}}}]
    filters: [{_tag("prefix")}]
    backendRefs: [{{name: web, port: 80}}]
  - matches: [{{path: {{type: PathPrefix, value: /api/v1}}}}]
    filters: [{_tag("longer-prefix")}]
    backendRefs: [{{name: web, port: 80}}]
  - matches: [{{path: {{value: /api}}, method: POST}}]
    filters: [{_tag("method")}]
    backendRefs: [{{name: web, port: 80}}]
  - matches: [{{path: {{value: /api}}, headers: [{{name: X-Team, value: blue}}]}}]
    filters: [{_tag("header")}]
    backendRefs: [{{name: web, port: 80}}]
  - matches:
    - path: {{value: /api}}
      headers: [{{name: x-version, type: RegularExpression, value: 'v[12]'}}]
    filters: [{_tag("header-regex")}]
    backendRefs: [{{name: web, port: 80}}]
  - matches: [{{path: {{value: /api}}, queryParams: [{{name: debug, value: "1"}}]}}]
    filters: [{_tag("query")}]
    backendRefs: [{{name: web, port: 80}}]
  - matches:
    - path: {{value: /api}}
      queryParams: [{{name: mode, type: RegularExpression, value: 'fast|slow'}}]
    filters: [{_tag("query-regex")}]
    backendRefs: [{{name: web, port: 80}}]
  - matches:
    - path: {{value: /either}}
      headers: [{{name: x-a, value: "1"}}]
    - path: {{value: /either}}
      queryParams: [{{name: b, value: "1"}}]
    filters: [{_tag("either")}]
    backendRefs: [{{name: web, port: 80}}]
---
# Same Exact path as "matches" but newer: "matches" wins.
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: aaa-newer, namespace: default, creationTimestamp: "2024-06-01T00:00:00Z"}}
spec:
  parentRefs: [{{name: gw}}]
  hostnames: [matches.example.test]
  rules:
  - matches: [{{path: {{type: Exact, value: /exact}}}}]
    filters: [{_tag("newer-route")}]
    backendRefs: [{{name: other, port: 80}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: headers, namespace: default}}
spec:
  parentRefs: [{{name: gw}}]
  hostnames: [headers.example.test]
  rules:
  - matches: [{{path: {{value: /split}}}}]
    filters:
    - type: RequestHeaderModifier
      requestHeaderModifier: {{set: [{{name: X-Rule-Level, value: rule}}]}}
    backendRefs:
    - name: web
      port: 80
      filters:
      - type: RequestHeaderModifier
        requestHeaderModifier:
          set: [{{name: X-Backend, value: web}}, {{name: X-Rule-Level, value: backend}}]
      - type: ResponseHeaderModifier
        responseHeaderModifier: {{add: [{{name: X-Served-By, value: web}}]}}
    - name: other
      port: 80
  - filters:
    - type: RequestHeaderModifier
      requestHeaderModifier:
        set: [{{name: X-Set, value: "100%"}}]
        add: [{{name: X-Add, value: added}}]
        remove: [X-Remove]
    - type: ResponseHeaderModifier
      responseHeaderModifier:
        set: [{{name: Cache-Control, value: no-store}}]
        add: [{{name: X-Resp-Add, value: added}}]
        remove: [X-Upstream-Secret]
    backendRefs: [{{name: web, port: 80}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: redirects, namespace: default}}
spec:
  parentRefs: [{{name: gw}}]
  hostnames: [redirect.example.test]
  rules:
  - matches: [{{path: {{value: /host}}}}]
    filters: [{{type: RequestRedirect, requestRedirect: {{hostname: elsewhere.example.test}}}}]
  - matches: [{{path: {{value: /secure}}}}]
    filters: [{{type: RequestRedirect, requestRedirect: {{scheme: https, statusCode: 301}}}}]
  - matches: [{{path: {{value: /port}}}}]
    filters: [{{type: RequestRedirect, requestRedirect: {{port: 8443, statusCode: 308}}}}]
  - matches: [{{path: {{value: /full}}}}]
    filters:
    - type: RequestRedirect
      requestRedirect: {{path: {{type: ReplaceFullPath, replaceFullPath: /new}}, statusCode: 303}}
  - matches: [{{path: {{value: /prefix}}}}]
    filters:
    - type: RequestRedirect
      requestRedirect: {{path: {{type: ReplacePrefixMatch, replacePrefixMatch: /moved}}, statusCode: 307}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: rewrites, namespace: default}}
spec:
  parentRefs: [{{name: gw}}]
  hostnames: [rewrite.example.test]
  rules:
  - matches: [{{path: {{value: /host}}}}]
    filters: [{{type: URLRewrite, urlRewrite: {{hostname: internal.example.test}}}}]
    backendRefs: [{{name: web, port: 80}}]
  - matches: [{{path: {{value: /full}}}}]
    filters: [{{type: URLRewrite, urlRewrite: {{path: {{type: ReplaceFullPath, replaceFullPath: /one}}}}}}]
    backendRefs: [{{name: web, port: 80}}]
  - matches: [{{path: {{value: /prefix}}}}]
    filters:
    - type: URLRewrite
      urlRewrite: {{path: {{type: ReplacePrefixMatch, replacePrefixMatch: /xyz/}}}}
    backendRefs: [{{name: web, port: 80}}]
  - matches: [{{path: {{value: /strip}}}}]
    filters: [{{type: URLRewrite, urlRewrite: {{path: {{type: ReplacePrefixMatch, replacePrefixMatch: /}}}}}}]
    backendRefs: [{{name: web, port: 80}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: mirrors, namespace: default}}
spec:
  parentRefs: [{{name: gw}}]
  hostnames: [mirror.example.test]
  rules:
  - matches: [{{path: {{value: /all}}}}]
    filters: [{{type: RequestMirror, requestMirror: {{backendRef: {{name: mirror, port: 80}}}}}}]
    backendRefs: [{{name: web, port: 80}}]
  - matches: [{{path: {{value: /none}}}}]
    filters: [{{type: RequestMirror, requestMirror: {{backendRef: {{name: mirror, port: 80}}, percent: 0}}}}]
    backendRefs: [{{name: web, port: 80}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: cors, namespace: default}}
spec:
  parentRefs: [{{name: gw}}]
  hostnames: [cors.example.test]
  rules:
  - matches: [{{path: {{value: /exact}}}}]
    filters:
    - type: CORS
      cors:
        allowOrigins: ["https://www.foo.com", "https://*.bar.com"]
        allowMethods: [GET, OPTIONS]
        allowHeaders: [x-header-1, x-header-2]
        exposeHeaders: [x-header-3]
        maxAge: 3600
        allowCredentials: true
    backendRefs: [{{name: web, port: 80}}]
  - matches: [{{path: {{value: /wildcard}}}}]
    filters:
    - type: CORS
      cors: {{allowOrigins: ["*"], allowMethods: ["*"], allowHeaders: ["*"], allowCredentials: true}}
    backendRefs: [{{name: web, port: 80}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: timing, namespace: default}}
spec:
  parentRefs: [{{name: gw}}]
  hostnames: [timing.example.test]
  rules:
  - matches: [{{path: {{value: /request}}}}]
    timeouts: {{request: 300ms}}
    backendRefs: [{{name: slow, port: 80}}]
  - matches: [{{path: {{value: /backend}}}}]
    timeouts: {{request: 5s, backendRequest: 300ms}}
    backendRefs: [{{name: slow, port: 80}}]
  - matches: [{{path: {{value: /retry}}}}]
    retry: {{codes: [503], attempts: 3, backoff: 10ms}}
    backendRefs: [{{name: flaky, port: 80}}]
  - matches: [{{path: {{value: /no-retry-code}}}}]
    retry: {{codes: [502], attempts: 3, backoff: 10ms}}
    backendRefs: [{{name: flaky, port: 80}}]
"""


@dataclass
class Env:
    weir: Weir
    upstreams: dict[str, RecordingUpstream]

    async def request(
        self, method: str, host: str, path: str, headers: dict[str, str] | None = None
    ) -> httpx.Response:
        async with httpx.AsyncClient(timeout=10) as client:
            return await client.request(
                method, self.weir.url(path), headers={"host": host, **(headers or {})}
            )

    def clear(self) -> None:
        for upstream in self.upstreams.values():
            upstream.clear()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def env(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Env]:
    folder: Path = tmp_path_factory.mktemp("features") / "manifests"
    folder.mkdir()
    port = free_port("127.0.0.2")
    harness = Weir(folder, None, free_port())
    upstreams: dict[str, RecordingUpstream] = {}
    try:
        for name, ip in SERVICES.items():
            upstreams[name] = await RecordingUpstream(name, host=ip, port=port).start()
        upstreams["slow"].handler = UpstreamResponse(body="late", delay=2.0)
        text = GATEWAY_HEAD.format(port=harness.gateway_port) + ROUTES
        text += "".join(_service(name, ip, port) for name, ip in SERVICES.items())
        harness.write("features.yaml", text)
        await harness.start()
        yield Env(harness, upstreams)
    finally:
        await harness.stop()
        for upstream in upstreams.values():
            await upstream.stop()
        for pid in harness.envoy_pids:
            assert not pid_alive(pid), f"Envoy {pid} survived stop()"


async def test_all_routes_accepted(env: Env) -> None:
    for name in ("matches", "aaa-newer", "headers", "redirects", "rewrites", "mirrors", "cors", "timing"):
        [parent] = env.weir.status_of("HTTPRoute", "default", name)["parents"]
        accepted = {c["type"]: c for c in parent["conditions"]}["Accepted"]
        assert accepted["status"] == "True", (name, accepted)


# ----------------------------------------------------------------------------- matches


@pytest.mark.parametrize(
    ("method", "path", "headers", "rule"),
    [
        ("GET", "/exact", {}, "exact"),
        ("GET", "/exact/more", {}, "root"),
        ("GET", "/items/42", {}, "regex"),
        ("GET", "/items/42/x", {}, "root"),  # the expression must match the whole path
        ("GET", "/items/abc", {}, "root"),
        ("GET", "/api", {}, "prefix"),
        ("GET", "/api/", {}, "prefix"),
        ("GET", "/apix", {}, "root"),  # whole segments
        ("GET", "/api/v1/x", {}, "longer-prefix"),
        ("POST", "/api", {}, "method"),
        ("GET", "/api", {"X-TEAM": "blue"}, "header"),  # header names are case-insensitive
        ("GET", "/api", {"x-team": "red"}, "prefix"),
        ("GET", "/api", {"x-version": "v2"}, "header-regex"),
        ("GET", "/api", {"x-version": "v3"}, "prefix"),
        ("GET", "/api?debug=1", {}, "query"),
        ("GET", "/api?debug=2", {}, "prefix"),
        ("GET", "/api?mode=slow", {}, "query-regex"),
        ("GET", "/api?mode=slowest", {}, "prefix"),
        ("GET", "/either", {"x-a": "1"}, "either"),  # OR across matches
        ("GET", "/either?b=1", {}, "either"),
        ("GET", "/either", {}, "root"),
        # Precedence: method > headers > query parameters; a longer prefix > all of them.
        ("POST", "/api?debug=1", {"x-team": "blue"}, "method"),
        ("GET", "/api?debug=1", {"x-team": "blue"}, "header"),
        ("POST", "/api/v1", {"x-team": "blue"}, "longer-prefix"),
    ],
)
async def test_match(env: Env, method: str, path: str, headers: dict[str, str], rule: str) -> None:
    response = await env.request(method, "matches.example.test", path, headers)
    assert response.status_code == 200, response.text
    assert response.headers["x-rule"] == rule


async def test_older_route_wins_a_tie(env: Env) -> None:
    response = await env.request("GET", "matches.example.test", "/exact")
    assert response.headers["x-rule"] == "exact"
    assert response.json()["upstream"] == "web"


async def test_host_with_a_port_matches(env: Env) -> None:
    response = await env.request("GET", "matches.example.test:12345", "/exact")
    assert response.status_code == 200
    assert response.headers["x-rule"] == "exact"


async def test_unknown_host_is_404(env: Env) -> None:
    response = await env.request("GET", "nobody.example.test", "/")
    assert response.status_code == 404


# ----------------------------------------------------------------------------- header filters


async def test_request_and_response_header_modifiers(env: Env) -> None:
    env.upstreams["web"].handler = UpstreamResponse(
        body="ok", headers=(("x-upstream-secret", "s3cret"), ("cache-control", "public"))
    )
    try:
        response = await env.request(
            "GET", "headers.example.test", "/", {"x-set": "client", "x-add": "client", "x-remove": "gone"}
        )
    finally:
        env.upstreams["web"].handler = None
    assert response.status_code == 200
    seen = env.upstreams["web"].requests[-1]
    assert seen.header_values("x-set") == ["100%"]
    assert seen.header_values("x-add") == ["client", "added"]
    assert seen.header("x-remove") is None
    assert response.headers["cache-control"] == "no-store"
    assert response.headers["x-resp-add"] == "added"
    assert "x-upstream-secret" not in response.headers


async def test_header_modifiers_per_backend(env: Env) -> None:
    seen: dict[str, httpx.Response] = {}
    for _ in range(40):
        response = await env.request("GET", "headers.example.test", "/split")
        assert response.status_code == 200
        seen.setdefault(response.json()["upstream"], response)
        if len(seen) == 2:
            break
    assert set(seen) == {"web", "other"}
    web, other = seen["web"].json(), seen["other"].json()
    assert dict(map(tuple, web["headers"]))["x-backend"] == "web"
    # Where the rule and the backend set the same header, the backend wins.
    assert dict(map(tuple, web["headers"]))["x-rule-level"] == "backend"
    assert seen["web"].headers["x-served-by"] == "web"
    assert "x-backend" not in dict(map(tuple, other["headers"]))
    assert dict(map(tuple, other["headers"]))["x-rule-level"] == "rule"
    assert "x-served-by" not in seen["other"].headers


# ----------------------------------------------------------------------------- redirects


@pytest.mark.parametrize(
    ("path", "status", "location"),
    [
        # No scheme, no port: the listener's port (not 80, so it is written).
        ("/host/a?q=1", 302, "http://elsewhere.example.test:{port}/host/a?q=1"),
        # A scheme without a port: its well-known port, left out.
        ("/secure/a", 301, "https://redirect.example.test/secure/a"),
        ("/port/a", 308, "http://redirect.example.test:8443/port/a"),
        ("/full/a?q=1", 303, "http://redirect.example.test:{port}/new?q=1"),
        ("/prefix/a/b", 307, "http://redirect.example.test:{port}/moved/a/b"),
        ("/prefix", 307, "http://redirect.example.test:{port}/moved"),
    ],
)
async def test_redirect(env: Env, path: str, status: int, location: str) -> None:
    env.clear()
    response = await env.request("GET", "redirect.example.test", path)
    assert response.status_code == status
    assert response.headers["location"] == location.format(port=env.weir.gateway_port)
    assert all(not u.requests for u in env.upstreams.values())


# ----------------------------------------------------------------------------- rewrites


@pytest.mark.parametrize(
    ("path", "host", "upstream_path"),
    [
        ("/host/a?q=1", "internal.example.test", "/host/a?q=1"),
        ("/full/a/b?q=1", "rewrite.example.test", "/one?q=1"),
        ("/prefix/a", "rewrite.example.test", "/xyz/a"),
        ("/prefix", "rewrite.example.test", "/xyz"),
        ("/prefix/", "rewrite.example.test", "/xyz/"),
        ("/strip/a/b", "rewrite.example.test", "/a/b"),
        ("/strip", "rewrite.example.test", "/"),
        ("/strip/", "rewrite.example.test", "/"),
    ],
)
async def test_url_rewrite(env: Env, path: str, host: str, upstream_path: str) -> None:
    response = await env.request("GET", "rewrite.example.test", path)
    assert response.status_code == 200
    seen = response.json()
    assert (seen["host"], seen["path"]) == (host, upstream_path)


# ----------------------------------------------------------------------------- mirrors


async def _eventually_seen(upstream: RecordingUpstream, path: str, timeout: float = 5.0) -> SeenRequest:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        found = [r for r in upstream.requests if r.path == path]
        if found:
            return found[-1]
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{upstream.name} never saw {path}")
        await asyncio.sleep(0.02)


async def test_mirror_receives_a_copy(env: Env) -> None:
    env.upstreams["mirror"].handler = UpstreamResponse(status=500, body="ignored")
    try:
        response = await env.request("GET", "mirror.example.test", "/all/x", {"x-trace": "t1"})
        assert response.status_code == 200
        assert response.json()["upstream"] == "web"
        copy = await _eventually_seen(env.upstreams["mirror"], "/all/x")
    finally:
        env.upstreams["mirror"].handler = None
    assert copy.header("x-trace") == "t1"
    assert copy.host == "mirror.example.test"  # no "-shadow" suffix


async def test_mirror_percent_zero_sends_nothing(env: Env) -> None:
    env.clear()
    for _ in range(20):
        response = await env.request("GET", "mirror.example.test", "/none/x")
        assert response.status_code == 200
    await env.request("GET", "mirror.example.test", "/all/marker")
    await _eventually_seen(env.upstreams["mirror"], "/all/marker")
    assert [r.path for r in env.upstreams["mirror"].requests] == ["/all/marker"]


# ----------------------------------------------------------------------------- CORS


async def test_cors_preflight_allowed_origin(env: Env) -> None:
    env.clear()
    response = await env.request(
        "OPTIONS",
        "cors.example.test",
        "/exact",
        {
            "origin": "https://a.b.bar.com",
            "access-control-request-method": "GET",
            "access-control-request-headers": "x-header-1",
        },
    )
    assert response.status_code in (200, 204)
    assert response.headers["access-control-allow-origin"] == "https://a.b.bar.com"
    assert response.headers["access-control-allow-methods"].replace(" ", "") == "GET,OPTIONS"
    assert response.headers["access-control-allow-headers"].replace(" ", "") == "x-header-1,x-header-2"
    assert response.headers["access-control-max-age"] == "3600"
    assert response.headers["access-control-allow-credentials"] == "true"
    assert not env.upstreams["web"].requests, "a preflight was forwarded"


async def test_cors_preflight_other_origin_gets_no_cors_headers(env: Env) -> None:
    env.clear()
    response = await env.request(
        "OPTIONS",
        "cors.example.test",
        "/exact",
        {"origin": "https://www.evil.com", "access-control-request-method": "GET"},
    )
    assert response.status_code in (200, 204, 403)
    assert "access-control-allow-origin" not in response.headers
    assert not env.upstreams["web"].requests, "a preflight was forwarded"


async def test_cors_actual_request(env: Env) -> None:
    allowed = await env.request("GET", "cors.example.test", "/exact", {"origin": "https://www.foo.com"})
    assert allowed.status_code == 200
    assert allowed.headers["access-control-allow-origin"] == "https://www.foo.com"
    assert allowed.headers["access-control-expose-headers"] == "x-header-3"
    assert allowed.headers["access-control-allow-credentials"] == "true"
    other = await env.request("GET", "cors.example.test", "/exact", {"origin": "https://foo.com"})
    assert other.status_code == 200
    assert "access-control-allow-origin" not in other.headers


async def test_cors_wildcards_with_credentials_name_the_request(env: Env) -> None:
    response = await env.request(
        "OPTIONS",
        "cors.example.test",
        "/wildcard",
        {
            "origin": "https://other.foo.com:8443",
            "access-control-request-method": "PUT",
            "access-control-request-headers": "x-header-1, x-header-2",
        },
    )
    assert response.status_code in (200, 204)
    assert response.headers["access-control-allow-origin"] == "https://other.foo.com:8443"
    assert response.headers["access-control-allow-credentials"] == "true"
    methods = [m.strip() for m in response.headers["access-control-allow-methods"].split(",")]
    assert "*" not in methods and "PUT" in methods
    allowed = [h.strip() for h in response.headers["access-control-allow-headers"].split(",")]
    assert "*" not in allowed and {"x-header-1", "x-header-2"} <= set(allowed)


# ----------------------------------------------------------------------------- timeouts and retries


async def test_request_timeout_is_504(env: Env) -> None:
    started = asyncio.get_running_loop().time()
    response = await env.request("GET", "timing.example.test", "/request")
    elapsed = asyncio.get_running_loop().time() - started
    assert response.status_code == 504
    assert elapsed < 1.5


async def test_backend_request_timeout_is_504(env: Env) -> None:
    started = asyncio.get_running_loop().time()
    response = await env.request("GET", "timing.example.test", "/backend")
    elapsed = asyncio.get_running_loop().time() - started
    assert response.status_code == 504
    assert elapsed < 1.5


def _fail_first(times: int, status: int) -> object:
    calls = {"n": 0}

    def handler(seen: SeenRequest) -> UpstreamResponse | None:
        calls["n"] += 1
        return UpstreamResponse(status=status, body="try again") if calls["n"] <= times else None

    return handler


async def test_retry_until_success(env: Env) -> None:
    flaky = env.upstreams["flaky"]
    flaky.clear()
    flaky.handler = _fail_first(2, 503)  # type: ignore[assignment]
    try:
        response = await env.request("GET", "timing.example.test", "/retry")
    finally:
        flaky.handler = None
    assert response.status_code == 200
    assert len(flaky.requests) == 3


async def test_retry_gives_up_after_attempts(env: Env) -> None:
    flaky = env.upstreams["flaky"]
    flaky.clear()
    flaky.handler = UpstreamResponse(status=503, body="down")
    try:
        response = await env.request("GET", "timing.example.test", "/retry")
    finally:
        flaky.handler = None
    assert response.status_code == 503
    assert len(flaky.requests) == 4  # the first attempt and 3 retries


async def test_no_retry_for_other_codes(env: Env) -> None:
    flaky = env.upstreams["flaky"]
    flaky.clear()
    flaky.handler = UpstreamResponse(status=503, body="down")
    try:
        response = await env.request("GET", "timing.example.test", "/no-retry-code")
    finally:
        flaky.handler = None
    assert response.status_code == 503
    assert len(flaky.requests) == 1
