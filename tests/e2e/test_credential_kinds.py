"""BackendCredentialPolicy credentials that are not static keys, end to end: one weir + real Envoy.

* **OAuth2 client credentials.** A token endpoint on loopback over TLS (an XBackend verified against
  a test CA) checks the client id and secret of each form post, counts fetches and issues numbered
  tokens with a short lifetime; the LLM upstream (TLS too) answers 200 only to a Bearer token that
  endpoint issued and that has not expired. Other token endpoints fail on purpose: one answers 503,
  one answers 200 with no token, one checks a secret the policy does not have, one is an XBackend
  whose name resolves into a denied network (the egress guard refuses it; a server listening there
  must see nothing).
* **AWS SigV4.** An upstream that verifies the signature (tests/support/sigv4.py, checked here
  against botocore's signer) with the key of the Secret, the payload hash against the body it
  received, and the session token.

What the upstreams recorded is the proof, with the token endpoint's counts and ``/metrics``.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import itertools
import json
import time
import urllib.parse
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import pytest_asyncio
import yaml
from weir_harness import FORBIDDEN_IP, GATEWAY_HEAD, Weir, eventually, pid_alive

import sigv4
from weir.testkit import CertAuthority, DnsStub, RecordingUpstream, free_port, make_ca, server_ssl_context
from weir.testkit.upstream import SeenRequest, UpstreamResponse

pytestmark = pytest.mark.asyncio(loop_scope="module")

XB_GROUP = "gateway.networking.x-k8s.io"
IP = "127.0.0.2"
CLIENT_ID = "weir-egress"
CLIENT_SECRET = "client-s3cret-987"
#: The lifetime of the tokens the good endpoint issues: short, to see refreshes.
TOKEN_LIFETIME_S = 6
AWS_KEY_ID = "AKIDWEIRTEST0001"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYWEIRTEST"
AWS_TOKEN = "FwoGZXIvYXdzEXAMPLE//session"
REGION, SERVICE = "us-east-1", "bedrock"


@dataclass
class TokenEndpoint:
    """The handler of a token endpoint: checks client credentials, issues numbered tokens.

    ``mode``: ``ok``, ``down`` (503), ``garbage`` (200 without a token).
    """

    name: str
    mode: str = "ok"
    secret: str = CLIENT_SECRET
    issued: dict[str, float] = field(default_factory=dict)  # token → expiry (monotonic)
    fetches: list[float] = field(default_factory=list)
    refused: int = 0
    forms: list[dict[str, list[str]]] = field(default_factory=list)

    def __call__(self, seen: SeenRequest) -> UpstreamResponse:
        form = urllib.parse.parse_qs(seen.body.decode())
        self.forms.append(form)
        self.fetches.append(time.monotonic())
        if self.mode == "down":
            return UpstreamResponse(503, b"down for maintenance")
        if self.mode == "garbage":
            return UpstreamResponse(200, b"<html>not json</html>", (("content-type", "text/html"),))
        ok = (
            seen.method == "POST"
            and form.get("grant_type") == ["client_credentials"]
            and form.get("client_id") == [CLIENT_ID]
            and form.get("client_secret") == [self.secret]
        )
        if not ok:
            self.refused += 1
            body = json.dumps({"error": "invalid_client"}).encode()
            return UpstreamResponse(401, body, (("content-type", "application/json"),))
        token = f"{self.name}-token-{len(self.issued) + 1}"
        self.issued[token] = time.monotonic() + TOKEN_LIFETIME_S
        body = json.dumps({"access_token": token, "token_type": "Bearer", "expires_in": TOKEN_LIFETIME_S})
        return UpstreamResponse(200, body.encode(), (("content-type", "application/json"),))


@dataclass
class BearerCheck:
    """An upstream's handler: 200 only for a live token of ``endpoint``, else 401."""

    endpoint: TokenEndpoint
    expired: int = 0

    def __call__(self, seen: SeenRequest) -> UpstreamResponse:
        value = seen.header("authorization") or ""
        token = value.removeprefix("Bearer ")
        expiry = self.endpoint.issued.get(token)
        if not value.startswith("Bearer ") or expiry is None:
            return UpstreamResponse(401, b"unknown token")
        if time.monotonic() > expiry:
            self.expired += 1
            return UpstreamResponse(401, b"expired token")
        return UpstreamResponse(200, b"ok")


def with_host(seen: SeenRequest) -> list[tuple[str, str]]:
    headers = list(seen.headers)
    if seen.host is not None and not any(name == "host" for name, _ in headers):
        headers.append(("host", seen.host))
    return headers


def sigv4_problem(seen: SeenRequest) -> str | None:
    return sigv4.verify(
        seen.method,
        seen.path,
        with_host(seen),
        seen.body,
        access_key_id=AWS_KEY_ID,
        secret_access_key=AWS_SECRET,
        region=REGION,
        service=SERVICE,
        session_token=AWS_TOKEN,
    )


def sigv4_check(seen: SeenRequest) -> UpstreamResponse:
    problem = sigv4_problem(seen)
    return UpstreamResponse(200, b"signed ok") if problem is None else UpstreamResponse(403, problem.encode())


def secret(name: str, data: dict[str, str]) -> dict[str, Any]:
    encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": "default"},
        "data": encoded,
    }


def xbackend(name: str, hostname: str, port: int) -> dict[str, Any]:
    return {
        "apiVersion": f"{XB_GROUP}/v1alpha1",
        "kind": "XBackend",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "type": "ExternalHostname",
            "externalHostname": {"hostname": hostname},
            "port": {"port": port},
            "tls": {
                "mode": "ServerOnly",
                "validation": {
                    "hostname": hostname,
                    "caCertificateRefs": [{"group": "", "kind": "ConfigMap", "name": "ca"}],
                },
            },
        },
    }


def policy(name: str, target: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "weir.dev/v1alpha1",
        "kind": "BackendCredentialPolicy",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"targetRefs": [{"group": XB_GROUP, "kind": "XBackend", "name": target}], **spec},
    }


def oauth2(idp: str, secret_name: str = "idp-client") -> dict[str, Any]:
    return {
        "tokenEndpoint": {"backendRef": {"name": idp}, "path": "/oauth2/token"},
        "clientIDRef": {"name": secret_name, "key": "client-id"},
        "clientSecretRef": {"name": secret_name, "key": "client-secret"},
        "scopes": ["models.read", "models.write"],
    }


#: OAuth2 cases: backend name → token endpoint mode (``denied``: its name resolves into a denied network).
OAUTH2_CASES = {"llm": "ok", "down": "down", "garbage": "garbage", "wrong": "ok", "denied": "denied"}


@dataclass
class World:
    weir: Weir
    ca: CertAuthority
    upstreams: dict[str, RecordingUpstream] = field(default_factory=dict)
    endpoints: dict[str, TokenEndpoint] = field(default_factory=dict)
    checks: dict[str, BearerCheck] = field(default_factory=dict)

    async def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        async with httpx.AsyncClient(timeout=10) as client:
            return await client.request(method, self.weir.url(path), **kwargs)

    def conditions(self, name: str) -> dict[str, dict[str, Any]]:
        [ancestor] = self.weir.status_of("BackendCredentialPolicy", "default", name)["ancestors"]
        return {c["type"]: c for c in ancestor["conditions"]}

    async def metrics(self) -> str:
        assert self.weir.controller is not None
        async with httpx.AsyncClient(timeout=10) as client:
            response = await client.get(f"http://127.0.0.1:{self.weir.controller.admin_port}/metrics")
            response.raise_for_status()
            return response.text


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    folder = tmp_path_factory.mktemp("credential-kinds") / "manifests"
    folder.mkdir()
    ca = make_ca("credential kinds CA")
    async with DnsStub() as dns:
        harness = Weir(folder, dns, free_port())
        w = World(harness, ca)
        docs: list[dict[str, Any]] = [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "ca", "namespace": "default"},
                "data": {"ca.crt": ca.cert_pem},
            },
            secret("idp-client", {"client-id": CLIENT_ID, "client-secret": CLIENT_SECRET}),
            secret("idp-other", {"client-id": CLIENT_ID, "client-secret": "not-the-one"}),
            secret(
                "aws",
                {
                    "AWS_ACCESS_KEY_ID": AWS_KEY_ID,
                    "AWS_SECRET_ACCESS_KEY": AWS_SECRET,
                    "AWS_SESSION_TOKEN": AWS_TOKEN,
                },
            ),
        ]
        rules: list[str] = []
        try:
            for name, mode in OAUTH2_CASES.items():
                endpoint = TokenEndpoint(name, "ok" if mode == "denied" else mode)
                w.endpoints[name] = endpoint
                idp_host = f"idp-{name}.creds.test"
                idp_ip = FORBIDDEN_IP if mode == "denied" else IP
                ctx = server_ssl_context(ca.issue_server_cert(idp_host))
                idp = await RecordingUpstream(
                    f"idp-{name}", host=idp_ip, ssl_context=ctx, handler=endpoint
                ).start()
                w.upstreams[f"idp-{name}"] = idp
                dns.set(idp_host, [idp_ip])
                host = f"{name}.creds.test"
                check = BearerCheck(endpoint)
                w.checks[name] = check
                ctx = server_ssl_context(ca.issue_server_cert(host))
                upstream = await RecordingUpstream(name, host=IP, ssl_context=ctx, handler=check).start()
                w.upstreams[name] = upstream
                dns.set(host, [IP])
                docs += [
                    xbackend(f"idp-{name}", idp_host, idp.port),
                    xbackend(name, host, upstream.port),
                    policy(
                        f"{name}-token",
                        name,
                        oauth2=oauth2(f"idp-{name}", "idp-other" if name == "wrong" else "idp-client"),
                    ),
                ]
                rules.append(name)
            for name, payload in (("bedrock", "Signed"), ("unsigned", "Unsigned")):
                host = f"{name}.creds.test"
                ctx = server_ssl_context(ca.issue_server_cert(host))
                upstream = await RecordingUpstream(
                    name, host=IP, ssl_context=ctx, handler=sigv4_check
                ).start()
                w.upstreams[name] = upstream
                dns.set(host, [IP])
                sign = {
                    "region": REGION,
                    "service": SERVICE,
                    "credentialsRef": {"name": "aws"},
                    "payload": payload,
                }
                docs += [xbackend(name, host, upstream.port), policy(f"{name}-sigv4", name, awsSigV4=sign)]
                rules.append(name)
            # A policy whose Secret lacks the secret key: refused, its backend never reached.
            host = "half.creds.test"
            ctx = server_ssl_context(ca.issue_server_cert(host))
            upstream = await RecordingUpstream("half", host=IP, ssl_context=ctx).start()
            w.upstreams["half"] = upstream
            dns.set(host, [IP])
            half = {"region": REGION, "service": SERVICE, "credentialsRef": {"name": "aws-half"}}
            docs += [
                secret("aws-half", {"AWS_ACCESS_KEY_ID": AWS_KEY_ID}),
                xbackend("half", host, upstream.port),
                policy("half-sigv4", "half", awsSigV4=half),
            ]
            rules.append("half")
            route = {
                "apiVersion": "gateway.networking.k8s.io/v1",
                "kind": "HTTPRoute",
                "metadata": {"name": "credentials", "namespace": "default"},
                "spec": {
                    "parentRefs": [{"name": "gw"}],
                    "rules": [
                        {
                            "matches": [{"path": {"type": "PathPrefix", "value": f"/{name}"}}],
                            "backendRefs": [{"group": XB_GROUP, "kind": "XBackend", "name": name}],
                        }
                        for name in rules
                    ],
                },
            }
            text = (
                GATEWAY_HEAD.format(port=harness.gateway_port) + "---\n" + yaml.safe_dump_all([route, *docs])
            )
            harness.write("world.yaml", text)
            await harness.start()
            yield w
        finally:
            await harness.stop()
            for upstream in w.upstreams.values():
                await upstream.stop()
            for pid in harness.envoy_pids:
                assert not pid_alive(pid), f"Envoy {pid} survived stop()"


async def eventually_ok(world: World, path: str, timeout: float = 10.0) -> httpx.Response:
    """The first 200 for ``path`` (Envoy fetches the token as it loads the listener)."""
    deadline = time.monotonic() + timeout
    while True:
        response = await world.request("GET", path)
        if response.status_code == 200 or time.monotonic() > deadline:
            return response
        await asyncio.sleep(0.1)


# ------------------------------------------------------------------ OAuth2


async def test_the_upstream_gets_a_token_the_endpoint_issued_for_the_clients_credentials(
    world: World,
) -> None:
    response = await eventually_ok(world, "/llm/warm-up")
    assert response.status_code == 200, response.text
    endpoint = world.endpoints["llm"]
    fetches_before = len(endpoint.fetches)
    for i in range(20):
        response = await world.request(
            "POST", f"/llm/v1/chat/{i}", json={"i": i}, headers={"Authorization": "Bearer the-client-s-own"}
        )
        assert response.status_code == 200, response.text
    seen = world.upstreams["llm"].requests[-1]
    assert seen.header_values("authorization")[0].startswith("Bearer llm-token-")
    # Cached: 20 requests, within one token's lifetime, cost no fetch.
    assert len(endpoint.fetches) - fetches_before <= 1
    # What the token endpoint saw: the grant over TLS to its own name, the client's credentials and scopes.
    idp = world.upstreams["idp-llm"].requests[0]
    assert (idp.sni, idp.method, idp.path) == ("idp-llm.creds.test", "POST", "/oauth2/token")
    assert idp.header("content-type") == "application/x-www-form-urlencoded"
    form = endpoint.forms[0]
    assert form["scope"] == ["models.read models.write"]
    assert (form["client_id"], form["client_secret"]) == ([CLIENT_ID], [CLIENT_SECRET])
    conditions = world.conditions("llm-token")
    assert (conditions["Accepted"]["status"], conditions["ResolvedRefs"]["status"]) == ("True", "True")
    assert CLIENT_SECRET not in json.dumps(
        world.weir.status_of("BackendCredentialPolicy", "default", "llm-token")
    )


async def test_the_token_is_renewed_before_it_expires(world: World, caplog: pytest.LogCaptureFixture) -> None:
    """Requests every 100 ms for two token lifetimes: every one succeeds (the upstream refuses an
    expired token), and the endpoint saw a fetch per half lifetime, not per request."""
    endpoint, check = world.endpoints["llm"], world.checks["llm"]
    await eventually_ok(world, "/llm/warm-up")
    started, first = time.monotonic(), len(endpoint.fetches)
    statuses: list[int] = []
    while time.monotonic() - started < TOKEN_LIFETIME_S * 2:
        statuses.append((await world.request("GET", "/llm/v1/models")).status_code)
        await asyncio.sleep(0.1)
    assert set(statuses) == {200}, statuses
    assert check.expired == 0
    # Never logged: no token, no client secret in what weir and Envoy logged meanwhile.
    assert caplog.records and not any(t in caplog.text for t in (*endpoint.issued, CLIENT_SECRET))
    fetched = endpoint.fetches[first:]
    gaps = [round(b - a, 2) for a, b in itertools.pairwise(fetched)]
    # Envoy asks for the next token at half the lifetime (measured: 3.0 s for expires_in 6).
    assert len(fetched) >= 3 and all(0.3 * TOKEN_LIFETIME_S < gap < 0.8 * TOKEN_LIFETIME_S for gap in gaps), (
        gaps
    )
    print(f"token lifetime {TOKEN_LIFETIME_S} s: {len(statuses)} requests, fetches every {gaps} s")


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("down", "bad_response_code"),
        ("garbage", "bad_token"),
        ("wrong", "bad_response_code"),
        ("denied", "bad_response_code"),
    ],
)
async def test_without_a_token_requests_are_refused_never_sent(world: World, name: str, reason: str) -> None:
    for _ in range(3):
        response = await world.request("GET", f"/{name}/v1/models", headers={"Authorization": "Bearer mine"})
        assert response.status_code == 401, response.text
        assert response.text == "Failed to inject credential.", response.text
    assert world.upstreams[name].requests == []
    if name == "denied":
        # The egress guard refused the token endpoint's address: nothing reached it.
        assert world.upstreams["idp-denied"].requests == []
    elif name == "wrong":
        assert world.endpoints["wrong"].refused >= 1
    text = await world.metrics()
    assert (
        f'weir_oauth2_token_fetch_failures_total{{reason="{reason}",socket="127.0.0.1:'
        in text.replace(", ", ",")
        or f'reason="{reason}"' in text
    ), text
    # The other backends of the route are served meanwhile.
    assert (await world.request("GET", "/llm/still-fine")).status_code == 200


# ------------------------------------------------------------------ SigV4


def test_the_verifier_accepts_botocores_signature_and_refuses_a_tampered_request() -> None:
    botocore = pytest.importorskip("botocore")
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    assert botocore is not None
    body = b'{"prompt": "hello"}'
    request = AWSRequest("POST", "https://bedrock.creds.test/model/m-1/invoke?b=2&a=1", data=body)
    request.headers["content-type"] = "application/json"
    SigV4Auth(Credentials(AWS_KEY_ID, AWS_SECRET, AWS_TOKEN), SERVICE, REGION).add_auth(request)
    headers = [*request.headers.items(), ("host", "bedrock.creds.test")]

    def check(method: str, target: str, hdrs: list[tuple[str, str]], data: bytes) -> str | None:
        return sigv4.verify(
            method,
            target,
            hdrs,
            data,
            access_key_id=AWS_KEY_ID,
            secret_access_key=AWS_SECRET,
            region=REGION,
            service=SERVICE,
            session_token=AWS_TOKEN,
        )

    target = "/model/m-1/invoke?b=2&a=1"
    assert check("POST", target, headers, body) is None
    # botocore sends no x-amz-content-sha256 for this service: the body's hash is only in the signature.
    assert check("POST", target, headers, b'{"prompt": "HELLO"}') == "signature mismatch"
    assert check("PUT", target, headers, body) == "signature mismatch"
    assert check("POST", "/model/m-2/invoke?b=2&a=1", headers, body) == "signature mismatch"
    other_host = [(k, "evil.creds.test" if k == "host" else v) for k, v in headers]
    assert check("POST", target, other_host, body) == "signature mismatch"
    late = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
    assert "too far" in (
        sigv4.verify(
            "POST",
            target,
            headers,
            body,
            access_key_id=AWS_KEY_ID,
            secret_access_key=AWS_SECRET,
            region=REGION,
            service=SERVICE,
            now=late,
        )
        or ""
    )


async def test_requests_are_signed_for_the_external_host_after_header_cleaning(world: World) -> None:
    body = json.dumps({"prompt": "hello", "max_tokens": 5}).encode()
    response = await world.request(
        "POST",
        "/bedrock/model/anthropic.claude-v2/invoke?trace=1",
        content=body,
        headers={
            "content-type": "application/json",
            "Authorization": "Bearer forged",
            "X-Forwarded-For": "1.2.3.4",
        },
    )
    assert response.status_code == 200, response.text  # the upstream verified the signature
    seen = world.upstreams["bedrock"].requests[-1]
    assert seen.body == body and seen.host == "bedrock.creds.test"
    assert sigv4_problem(seen) is None
    auth = seen.header("authorization") or ""
    assert auth.startswith(f"AWS4-HMAC-SHA256 Credential={AWS_KEY_ID}/")
    signed = auth.split("SignedHeaders=")[1].split(",")[0].split(";")
    assert not [h for h in signed if h.startswith(("x-envoy-", "x-forwarded-"))], signed
    assert seen.header("x-amz-content-sha256") == sigv4._sha256(body)
    # Proof the upstream would notice: the same request with its body or path changed fails.
    tampered = SeenRequest(**{**seen.__dict__, "body": body.replace(b"hello", b"HELLO")})
    assert sigv4_problem(tampered) == "x-amz-content-sha256 is not the body's hash"
    moved = SeenRequest(**{**seen.__dict__, "path": "/model/other/invoke?trace=1"})
    assert sigv4_problem(moved) == "signature mismatch"
    assert AWS_SECRET not in json.dumps(
        world.weir.status_of("BackendCredentialPolicy", "default", "bedrock-sigv4")
    )


async def test_an_unsigned_payload_is_declared_and_accepted(world: World) -> None:
    response = await world.request("POST", "/unsigned/model/m/invoke", content=b"x" * 10_000)
    assert response.status_code == 200, response.text
    seen = world.upstreams["unsigned"].requests[-1]
    assert seen.header("x-amz-content-sha256") == sigv4.UNSIGNED and sigv4_problem(seen) is None


async def test_a_sigv4_policy_without_its_secret_key_refuses_its_backend(world: World) -> None:
    response = await world.request("GET", "/half/x")
    assert response.status_code == 500
    assert world.upstreams["half"].requests == []
    conditions = world.conditions("half-sigv4")
    assert (conditions["Accepted"]["status"], conditions["Accepted"]["reason"]) == ("False", "Invalid")
    assert conditions["ResolvedRefs"]["reason"] == "InvalidCertificateRef"
    assert "AWS_SECRET_ACCESS_KEY" in conditions["ResolvedRefs"]["message"]


async def test_metrics_count_fetches_refusals_and_signatures(world: World) -> None:
    await eventually_ok(world, "/llm/metrics")
    assert (await world.request("GET", "/bedrock/metrics")).status_code == 200
    socket = f"127.0.0.1:{world.weir.gateway_port}"
    signed = (
        'weir_backend_sigv4_signed_total{kind="XBackend",namespace="default",name="bedrock",result="signed"}'
    )

    # /metrics may answer from a scrape of Envoy's stats up to ENVOY_STATS_TTL_S old (an earlier
    # test's): read until the signed request shows.
    async def counted() -> dict[str, float] | None:
        text = await world.metrics()
        lines = {
            line.split(" ")[0]: float(line.split(" ")[1])
            for line in text.splitlines()
            if line and line[0] != "#"
        }
        return lines if lines.get(signed, 0) >= 1 else None

    lines, _ = await eventually(counted, timeout=10, interval=0.25)
    assert lines[f'weir_oauth2_token_fetches_total{{socket="{socket}"}}'] >= 1
    assert lines[f'weir_credential_refusals_total{{socket="{socket}"}}'] >= 1
    assert lines[signed] >= 1
