"""XBackendTrafficPolicy (Gateway API v1.6 experimental): session persistence and retry budgets of
the backends it targets, shown through real Envoy. Names are the suite's own; upstream's
BackendTrafficPolicy conformance tests are provisional."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from .harness import Conformance, PolicyStatus, Request, RouteStatus

pytestmark = pytest.mark.asyncio(loop_scope="module")

V1, V2 = "infra-backend-v1", "infra-backend-v2"

SESSION = """
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackendTrafficPolicy
metadata: {name: sticky-v1, namespace: gateway-conformance-infra}
spec:
  targetRefs: [{group: "", kind: Service, name: infra-backend-v1}]
  sessionPersistence: {sessionName: backend-session}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: policy-session, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /policy-session}}]
    backendRefs: [{name: infra-backend-v1, port: 8080}]
"""


async def test_XBackendTrafficPolicySessionPersistence(conformance: Conformance) -> None:
    """A policy's session persistence applies to the routes whose backend it targets."""
    h = conformance
    await h.apply("case-traffic-session", SESSION)
    try:
        h.check(RouteStatus("policy-session"))
        h.check(PolicyStatus("XBackendTrafficPolicy", "sticky-v1", {"Accepted": ("True", "Accepted")}))
        async with httpx.AsyncClient(timeout=5) as client:
            response = await client.get(h.url(Request(path="/policy-session")))
        cookie = response.headers.get("set-cookie", "")
        assert cookie.startswith("backend-session="), f"no session cookie: {dict(response.headers)}"
        first = str(response.json()["pod"])
        name_value = cookie.split(";", 1)[0]
        assert await h.pods_answering("/policy-session", {"cookie": name_value}, 10) == [first] * 10
    finally:
        await h.delete("case-traffic-session")


RETRY = """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: retried, namespace: gateway-conformance-infra}
spec:
  parentRefs: [{name: same-namespace}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /status/500}}]
    retry: {codes: [500], attempts: 3}
    backendRefs: [{name: infra-backend-v2, port: 8080}]
"""

BUDGET = """
---
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackendTrafficPolicy
metadata: {name: no-retries-left, namespace: gateway-conformance-infra}
spec:
  targetRefs: [{group: "", kind: Service, name: infra-backend-v2}]
  retryConstraint:
    budget: {percent: 0}
    minRetryRate: {count: 0, interval: 1s}
"""


async def _attempts(h: Conformance, marker: str) -> int:
    """How many times the backend received the request ``/status/500?m=marker``."""
    async with httpx.AsyncClient(timeout=5) as client:
        response = await client.get(h.url(Request(path=f"/status/500?m={marker}")))
    assert response.status_code == 500, response.text
    await asyncio.sleep(0.2)
    return sum(1 for r in h.requests_seen(V2) if r.path.endswith(f"m={marker}"))


async def test_XBackendTrafficPolicyRetryBudget(conformance: Conformance) -> None:
    """Without a budget a failing request is tried 1 + 3 times; a budget of 0 % with no minimum
    leaves no retry: the backend sees it once."""
    h = conformance
    await h.apply("case-traffic-retry", RETRY)
    try:
        h.check(RouteStatus("retried"))
        assert await _attempts(h, "no-policy") == 4
        await h.apply("case-traffic-retry", RETRY + BUDGET)
        h.check(PolicyStatus("XBackendTrafficPolicy", "no-retries-left", {"Accepted": "True"}))
        assert await _attempts(h, "with-budget") == 1
    finally:
        await h.delete("case-traffic-retry")
