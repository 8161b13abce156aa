"""BackendMCPPolicy rules end to end: the tools a caller may use depend on who calls.

Real parts: the ``mcp`` SDK's server (recording what reaches it) behind weir
and real Envoy, the SDK's client through the gateway, bearer tokens signed
here with PyJWT (ES256) against a JSON Web Key Set in a ConfigMap, and client
certificates made by ``trustme`` on an HTTPS listener whose Gateway validates
them (``spec.tls.frontend``, AllowValidOnly).

The policy (``team``): anyone may use ``add``; ``get_secret`` is denied to
all; a token whose ``groups`` holds ``weather`` is granted ``get_*``; the
subject ``alice`` with ``repo.admin`` among the words of her ``scope`` is
granted ``delete_repo``; a client certificate with the DNS SAN
``agent.ci.test`` is granted ``countdown`` and ``get_weather``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import ssl
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import httpx2
import jwt
import pytest
import pytest_asyncio
import trustme
from cryptography.hazmat.primitives.asymmetric import ec
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from test_mcp_policy import ToolServer, serve
from weir_harness import Weir, eventually, indent_pem, pid_alive

from weir.testkit import DnsStub, free_port

pytestmark = pytest.mark.asyncio(loop_scope="module")

ISSUER = "https://idp.per-caller.test"
AUDIENCE = "weir-mcp"
KID = "k1"
CLIENT_SAN = "agent.ci.test"
ACCEPT = "application/json, text/event-stream"


def manifests(
    http_port: int, https_port: int, fallback_port: int, server: ToolServer, jwks: str, ca: trustme.CA
) -> str:
    cert = ca.issue_cert("127.0.0.1")
    crt = base64.b64encode(cert.cert_chain_pems[0].bytes()).decode()
    key = base64.b64encode(cert.private_key_pem.bytes()).decode()
    client_ca = ca.cert_pem.bytes().decode()
    return f"""\
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {{name: weir}}
spec: {{controllerName: weir.dev/gateway-controller}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw, namespace: default}}
spec:
  gatewayClassName: weir
  tls:
    frontend:
      default:
        validation:
          caCertificateRefs: [{{group: "", kind: ConfigMap, name: client-ca}}]
          mode: AllowValidOnly
  listeners:
  - {{name: http, port: {http_port}, protocol: HTTP}}
  - name: https
    port: {https_port}
    protocol: HTTPS
    tls: {{certificateRefs: [{{name: gw-cert}}]}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: fallback, namespace: default}}
spec:
  gatewayClassName: weir
  tls:
    frontend:
      default:
        validation:
          caCertificateRefs: [{{group: "", kind: ConfigMap, name: client-ca}}]
          mode: AllowInsecureFallback
  listeners:
  - name: https
    port: {fallback_port}
    protocol: HTTPS
    tls: {{certificateRefs: [{{name: gw-cert}}]}}
---
apiVersion: v1
kind: Secret
metadata: {{name: gw-cert, namespace: default}}
type: kubernetes.io/tls
data: {{tls.crt: {crt}, tls.key: {key}}}
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: client-ca, namespace: default}}
data:
  ca.crt: |
{indent_pem(client_ca, 4)}
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: idp-jwks, namespace: default}}
data:
  jwks.json: '{jwks}'
---
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackend
metadata: {{name: team, namespace: default}}
spec:
  type: ExternalHostname
  externalHostname: {{hostname: {server.hostname}}}
  port: {{port: {server.port}}}
  protocol: MCP
  tls: {{mode: None}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: mcp, namespace: default}}
spec:
  parentRefs: [{{name: gw}}, {{name: fallback}}]
  rules:
  - matches: [{{path: {{value: /team}}}}]
    backendRefs: [{{group: gateway.networking.x-k8s.io, kind: XBackend, name: team}}]
---
apiVersion: weir.dev/v1alpha1
kind: BackendMCPPolicy
metadata: {{name: team, namespace: default}}
spec:
  targetRefs: [{{group: gateway.networking.x-k8s.io, kind: XBackend, name: team}}]
  jwt:
    issuer: {ISSUER}
    audiences: [{AUDIENCE}]
    jwks: {{configMapRef: {{name: idp-jwks, key: jwks.json}}}}
  allowedTools: [add]
  deniedTools: [get_secret]
  rules:
  - from: {{jwt: {{claims: [{{name: groups, values: [weather]}}]}}}}
    allowedTools: ["get_*"]
  - from: {{jwt: {{subjects: [alice], claims: [{{name: scope, values: [repo.admin]}}]}}}}
    allowedTools: [delete_repo]
  - from: {{clientCertificate: {{subjectAltNames: [{CLIENT_SAN}]}}}}
    allowedTools: [countdown, get_weather]
"""


@dataclass
class World:
    weir: Weir
    server: ToolServer
    key: ec.EllipticCurvePrivateKey
    https_port: int
    fallback_port: int
    ca: trustme.CA

    def url(self) -> str:
        return self.weir.url("/team/mcp")

    def https_url(self, port: int | None = None) -> str:
        return f"https://127.0.0.1:{port or self.https_port}/team/mcp"

    def token(self, key: ec.EllipticCurvePrivateKey | None = None, **claims: Any) -> str:
        now = int(time.time())
        payload = {"iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + 300, **claims}
        return jwt.encode(payload, key or self.key, algorithm="ES256", headers={"kid": KID})

    def client_context(self, cert: trustme.LeafCert | None) -> ssl.SSLContext:
        context = ssl.create_default_context()
        self.ca.configure_trust(context)
        if cert is not None:
            cert.configure_cert(context)
        return context

    async def scrape(self) -> str:
        controller = self.weir.controller
        assert controller is not None and controller.admin_port
        async with httpx.AsyncClient() as client:
            response = await client.get(f"http://127.0.0.1:{controller.admin_port}/metrics")
        assert response.status_code == 200, response.text
        return response.text


def jwks_of(key: ec.EllipticCurvePrivateKey) -> str:
    public = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(key.public_key()))
    return json.dumps({"keys": [{**public, "kid": KID, "alg": "ES256", "use": "sig"}]}, separators=(",", ":"))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    folder: Path = tmp_path_factory.mktemp("mcp-per-caller")
    server = ToolServer("team", "127.0.0.31", "team.per-caller.test")
    key = ec.generate_private_key(ec.SECP256R1())
    ca = trustme.CA()
    async with DnsStub() as dns, contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(serve(server))
        dns.set(server.hostname, [server.ip])
        harness = Weir(folder, dns, free_port(), egress_denied_cidrs=())
        https_port, fallback_port = free_port(), free_port()
        try:
            text = manifests(harness.gateway_port, https_port, fallback_port, server, jwks_of(key), ca)
            harness.write("mcp.yaml", text)
            await harness.start()
            yield World(harness, server, key, https_port, fallback_port, ca)
        finally:
            await harness.stop()
            for pid in harness.envoy_pids:
                assert not pid_alive(pid), f"Envoy {pid} survived stop()"


@contextlib.asynccontextmanager
async def sdk_client(
    url: str, token: str | None = None, verify: ssl.SSLContext | bool = True
) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    http = httpx2.AsyncClient(headers=headers, verify=verify, timeout=httpx2.Timeout(10, read=30))
    async with http, Client(streamable_http_client(url, http_client=http), mode="legacy") as client:
        yield client


async def listed(client: Client) -> set[str]:
    return {tool.name for tool in (await client.list_tools()).tools}


async def refused(client: Client, tool: str, **arguments: Any) -> MCPError:
    with pytest.raises(MCPError) as caught:
        await client.call_tool(tool, arguments)
    return caught.value


async def test_policy_is_accepted(world: World) -> None:
    status = world.weir.status_of("BackendMCPPolicy", "default", "team")
    found = [c for a in status["ancestors"] for c in a["conditions"] if c["type"] == "Accepted"]
    assert len(found) == 2 and all(c["status"] == "True" for c in found), status  # one per Gateway
    accepted = found[0]
    assert "whose groups has weather may also name get_*" in accepted["message"], accepted["message"]


async def test_callers_see_and_call_different_tools(world: World) -> None:
    world.server.forget()
    # No token: only what needs no identity.
    async with sdk_client(world.url()) as anonymous:
        assert await listed(anonymous) == {"add"}
        assert (await anonymous.call_tool("add", {"a": 1, "b": 2})).structured_content == {"result": 3}
        error = await refused(anonymous, "get_weather", city="Oslo")
        assert error.error.code == -32602 and "not allowed for this caller" in error.error.message
        assert error.error.data["refusedBy"] == "rbac_access_denied_matched_policy[weir-mcp-tool-not-granted]"
        # Granted to no one: the policy's allow-lists do not name it.
        error = await refused(anonymous, "admin_reset")
        assert "allowedTools" in error.error.message, error.error.message

    # A token whose groups claim (a list) holds "weather": get_*, except the denied get_secret.
    bob = world.token(sub="bob", groups=["dev", "weather"])
    async with sdk_client(world.url(), bob) as client:
        assert await listed(client) == {"add", "get_weather"}
        assert not (await client.call_tool("get_weather", {"city": "Oslo"})).is_error
        assert "deniedTools" in (await refused(client, "get_secret")).error.message
        assert "not allowed for this caller" in (await refused(client, "delete_repo", repo="r")).error.message

    # alice with repo.admin among the words of her scope (a space-separated string).
    alice = world.token(sub="alice", scope="openid repo.admin")
    async with sdk_client(world.url(), alice) as client:
        assert await listed(client) == {"add", "delete_repo"}
        assert not (await client.call_tool("delete_repo", {"repo": "r"})).is_error
        assert "not allowed for this caller" in (await refused(client, "get_weather", city="x")).error.message

    # A word is a word: "repo.admin.read" is not "repo.admin"; and bob is not alice.
    for token in (
        world.token(sub="alice", scope="repo.admin.read"),
        world.token(sub="bob", scope="repo.admin"),
    ):
        async with sdk_client(world.url(), token) as client:
            assert await listed(client) == {"add"}
            assert (
                "not allowed for this caller"
                in (await refused(client, "delete_repo", repo="r")).error.message
            )

    # What reached the server: only the calls granted to their caller.
    assert world.server.calls() == ["add", "get_weather", "delete_repo"]
    assert world.server.ran == ["add", "get_weather", "delete_repo"]


async def _post(url: str, body: dict[str, Any], token: str) -> httpx.Response:
    headers = {"Accept": ACCEPT, "Content-Type": "application/json", "Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient() as client:
        return await client.post(url, content=json.dumps(body), headers=headers)


async def test_invalid_tokens_are_refused_with_the_request_id(world: World) -> None:
    world.server.forget()
    now = int(time.time())
    other = ec.generate_private_key(ec.SECP256R1())
    bad = {
        "expired": world.token(sub="bob", groups=["weather"], iat=now - 600, exp=now - 300),
        "forged": world.token(other, sub="bob", groups=["weather"]),
        "audience": world.token(sub="bob", aud="someone-else"),
        "issuer": world.token(sub="bob", iss="https://evil.test"),
    }
    call = {
        "jsonrpc": "2.0",
        "id": "call-7",
        "method": "tools/call",
        "params": {"name": "add", "arguments": {}},
    }
    for why, token in bad.items():
        response = await _post(world.url(), call, token)
        assert response.status_code == 401, (why, response.status_code, response.text)
        assert response.headers["content-type"] == "application/json", why
        body = response.json()
        assert body["id"] == "call-7" and body["error"]["code"] == -32600, (why, body)
        assert "bearer token is not valid" in body["error"]["message"], (why, body)
        assert body["error"]["data"]["refusedBy"].startswith("jwt_authn_access_denied"), (why, body)
    # The SDK client reports the refusal; nothing reached the server.
    with pytest.raises(Exception):  # noqa: B017 - the SDK's error for a 401 differs between versions
        async with sdk_client(world.url(), bad["expired"]) as client:
            await client.list_tools()
    assert world.server.posted == []


async def test_a_client_certificate_is_matched_by_its_san(world: World) -> None:
    world.server.forget()
    agent = world.ca.issue_cert(CLIENT_SAN)
    async with sdk_client(world.https_url(), verify=world.client_context(agent)) as client:
        assert await listed(client) == {"add", "countdown", "get_weather"}
        result = await client.call_tool("countdown", {"steps": 1, "interval": 0.01})
        assert not result.is_error, result
        assert "not allowed for this caller" in (await refused(client, "delete_repo", repo="r")).error.message
    # Another certificate of the same CA: a verified caller, but no rule names it.
    other = world.ca.issue_cert("other.ci.test")
    async with sdk_client(world.https_url(), verify=world.client_context(other)) as client:
        assert await listed(client) == {"add"}
        assert "not allowed for this caller" in (await refused(client, "get_weather", city="x")).error.message
    # Certificate and token together: both identities' grants.
    alice = world.token(sub="alice", scope="repo.admin")
    async with sdk_client(world.https_url(), alice, verify=world.client_context(agent)) as client:
        assert await listed(client) == {"add", "countdown", "delete_repo", "get_weather"}
    assert world.server.calls() == ["countdown"]


async def test_certificates_prove_nothing_where_unverified_ones_are_let_in(world: World) -> None:
    """AllowInsecureFallback: Envoy lets any certificate in; its SANs grant nothing (the RBAC
    principal Envoy offers reads SANs whether or not the certificate was verified)."""
    world.server.forget()
    forger = trustme.CA().issue_cert(CLIENT_SAN)  # the right SAN, from a CA nobody trusts
    genuine = world.ca.issue_cert(CLIENT_SAN)
    for cert in (forger, genuine):
        async with sdk_client(
            world.https_url(world.fallback_port), verify=world.client_context(cert)
        ) as client:
            assert await listed(client) == {"add"}
            error = await refused(client, "countdown", steps=1, interval=0.01)
            assert "not allowed for this caller" in error.error.message
    # Tokens still count there.
    bob = world.token(sub="bob", groups=["weather"])
    async with sdk_client(
        world.https_url(world.fallback_port), bob, verify=world.client_context(forger)
    ) as c:
        assert await listed(c) == {"add", "get_weather"}
    assert world.server.calls() == []


async def test_identity_denials_are_counted(world: World) -> None:
    lines = [
        f'weir_mcp_identity_denied_total{{namespace="default",xbackend="team",reason="{reason}"}}'
        for reason in ("not_granted", "invalid_token")
    ]
    lines.append('weir_mcp_tool_denied_total{namespace="default",xbackend="team",tool="get_weather"}')

    async def counted() -> bool:
        text = await world.scrape()
        return all(line in text for line in lines)

    found, _ = await eventually(counted, timeout=10)
    assert found, [t for t in (await world.scrape()).splitlines() if "identity" in t or "denied" in t]


async def test_requests_without_a_body_pass_the_token_check_too(world: World) -> None:
    """A GET (the SSE stream) with an invalid token is refused as well: the token, not the body, decides."""
    token = world.token(sub="bob", exp=int(time.time()) - 100, iat=int(time.time()) - 200)
    async with httpx.AsyncClient() as client:
        response = await client.get(
            world.url(), headers={"Accept": ACCEPT, "Authorization": f"Bearer {token}"}
        )
    assert response.status_code == 401, response.text
    await asyncio.sleep(0)
