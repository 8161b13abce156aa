"""``docs/ai-egress.md``, section "Credentials that are not static keys", run as written.

The section marks its blocks with kinds of its own (the walk-through's test,
``test_ai_egress_doc.py``, leaves them alone):

- ``<!-- credentials-file: PATH -->`` before a YAML block: that file of ``examples/ai-credentials``
  (without its leading comment lines);
- ``<!-- credentials-output: NAME -->``: what :func:`test_the_examples_run_as_the_doc_says`
  observes for NAME (:data:`OUTPUTS`), after :func:`normalise`.

The examples run with ``examples/ai-egress/gateway.yaml`` through real weir and Envoy, everything
on loopback: a DNS stub answers the three hostnames with 127.0.0.x; recording TLS servers with
certificates of a test CA (which the test makes weir's system trust store) play
``login.microsoftonline.com`` (a token endpoint that checks the example's client id and secret and
issues one token), ``contoso.openai.azure.com`` and ``bedrock-runtime.us-east-1.amazonaws.com``
(which verifies the SigV4 signature with the example's key, ``tests/support/sigv4.py``). What the
test changes: the ports (443 becomes the servers' port, 8080 the harness's gateway port).
``WEIR_UPDATE_DOCS=1`` rewrites the outputs.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import time
import urllib.parse
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from weir_harness import Weir, pid_alive

import sigv4
from weir.loader import load_text
from weir.resources import Resources
from weir.testkit import DnsStub, RecordingUpstream, SeenRequest, free_port, make_ca, server_ssl_context
from weir.testkit.upstream import UpstreamResponse
from weir.translate import translate
from weir.translate.settings import Settings

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "ai-egress.md"
EXAMPLES = REPO / "examples" / "ai-credentials"
GATEWAY = REPO / "examples" / "ai-egress" / "gateway.yaml"
UPDATE = os.environ.get("WEIR_UPDATE_DOCS") == "1"

ENTRA, AZURE, BEDROCK = (
    "login.microsoftonline.com",
    "contoso.openai.azure.com",
    "bedrock-runtime.us-east-1.amazonaws.com",
)
IPS = {ENTRA: "127.0.0.81", AZURE: "127.0.0.82", BEDROCK: "127.0.0.83"}
TOKEN = "eyJ0eXAiOiJKV1QiLCJhbGciOiJSUzI1NiJ9.example-access-token"
DOC_GATEWAY = "127.0.0.1:8080"

BLOCK = re.compile(
    r"<!-- (?P<kind>credentials-[a-z]+): (?P<name>\S+) -->\n```\w*\n(?P<body>.*?)```\n", re.DOTALL
)


def doc_blocks(text: str | None = None) -> list[re.Match[str]]:
    return list(BLOCK.finditer(DOC.read_text() if text is None else text))


def without_leading_comments(text: str) -> str:
    lines = text.splitlines(keepends=True)
    while lines and lines[0].startswith("#"):
        lines.pop(0)
    return "".join(lines)


def test_doc_yaml_is_the_examples() -> None:
    shown = {m["name"]: m["body"] for m in doc_blocks() if m["kind"] == "credentials-file"}
    assert set(shown) == {f"examples/ai-credentials/{p.name}" for p in EXAMPLES.iterdir()}
    for name, body in shown.items():
        assert body == without_leading_comments((REPO / name).read_text()), (
            f"{name} is not what the doc shows"
        )


def normalise(text: str, gateway: str, port: int) -> str:
    """What varies between runs: the gateway's address, the servers' port (443 in the doc: not
    written), SigV4 dates and signatures."""
    text = text.replace(gateway, DOC_GATEWAY)
    for host in IPS:
        text = text.replace(f"{host}:{port}", host)
    text = re.sub(r"\d{8}T\d{6}Z", "20260101T000000Z", text)
    text = re.sub(r"Credential=(\w+)/\d{8}/", r"Credential=\1/20260101/", text)
    return re.sub(r"Signature=[0-9a-f]{64}", "Signature=<64 hex digits>", text)


def render_request(seen: SeenRequest, *, body: bool = False, only: tuple[str, ...] = ()) -> str:
    lines = [f"{seen.method} {seen.path}", f"host: {seen.host}"]
    lines += [f"{name}: {value}" for name, value in seen.headers if name in only]
    if body:
        lines += ["", seen.body.decode()]
    return "\n".join(lines) + "\n"


def accepted_message(statuses: dict[Any, Any], name: str) -> str:
    for key, status in statuses.items():
        if (key.kind, key.name) == ("BackendCredentialPolicy", name):
            conditions = {c["type"]: c for c in status["ancestors"][0]["conditions"]}
            accepted = conditions["Accepted"]
            return f"Accepted={accepted['status']} ({accepted['reason']}): {accepted['message']}\n"
    raise KeyError(name)


def token_endpoint(seen: SeenRequest) -> UpstreamResponse:
    form = urllib.parse.parse_qs(seen.body.decode())
    if form.get("client_id") != ["6f1c2a0e-replace-me"] or form.get("client_secret") != ["replace-me"]:
        return UpstreamResponse(401, b'{"error": "invalid_client"}', (("content-type", "application/json"),))
    body = json.dumps({"token_type": "Bearer", "expires_in": 3599, "access_token": TOKEN})
    return UpstreamResponse(200, body.encode(), (("content-type", "application/json"),))


def azure(seen: SeenRequest) -> UpstreamResponse:
    ok = seen.header("authorization") == f"Bearer {TOKEN}"
    return UpstreamResponse(200 if ok else 401, b'{"choices": []}' if ok else b"unauthorized")


def bedrock(seen: SeenRequest) -> UpstreamResponse:
    headers = [*seen.headers, ("host", seen.host or "")]
    problem = sigv4.verify(
        seen.method,
        seen.path,
        headers,
        seen.body,
        access_key_id="AKIAREPLACEME0000000",
        secret_access_key="replace-me",
        region="us-east-1",
        service="bedrock",
    )
    return (
        UpstreamResponse(200, b'{"results": []}')
        if problem is None
        else UpstreamResponse(403, problem.encode())
    )


def manifests(port: int, gateway_port: int) -> str:
    texts = [GATEWAY.read_text().replace("port: 8080", f"port: {gateway_port}")]
    texts += [p.read_text().replace("port: 443", f"port: {port}") for p in sorted(EXAMPLES.iterdir())]
    return "---\n".join(texts)


@pytest.mark.asyncio
async def test_the_examples_run_as_the_doc_says(tmp_path: Path) -> None:
    ca = make_ca("ai credentials doc CA")
    trust = tmp_path / "ca.pem"
    trust.write_text(ca.cert_pem)
    folder = tmp_path / "manifests"
    folder.mkdir()
    outputs: dict[str, str] = {}
    servers: dict[str, RecordingUpstream] = {}
    async with DnsStub() as dns:
        port = 0
        for host, handler in ((ENTRA, token_endpoint), (AZURE, azure), (BEDROCK, bedrock)):
            ctx = server_ssl_context(ca.issue_server_cert(host))
            server = await RecordingUpstream(
                host, host=IPS[host], port=port, ssl_context=ctx, handler=handler
            ).start()
            port = server.port  # one port for all, as the examples have one (443)
            servers[host] = server
            dns.set(host, [IPS[host]])
        harness = Weir(folder, dns, free_port())
        harness.settings = dataclasses.replace(harness.settings, system_trust_file=str(trust))
        harness.write("all.yaml", manifests(port, harness.gateway_port))
        try:
            await harness.start()
            gateway = f"127.0.0.1:{harness.gateway_port}"
            async with httpx.AsyncClient(timeout=10) as client:
                url = f"http://{gateway}/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21"
                chat = {"messages": [{"role": "user", "content": "Say hello"}]}
                deadline = time.monotonic() + 10
                while (response := await client.post(url, json=chat)).status_code != 200:
                    assert time.monotonic() < deadline, response.text  # the first token is on its way
                outputs["azure-response"] = f"HTTP {response.status_code}\n"
                token_request = servers[ENTRA].requests[0]
                # The gateway's own headers are removed from the token request too.
                assert not [n for n, _ in token_request.headers if n.startswith(("x-envoy-", "x-forwarded-"))]
                outputs["azure-token-request"] = render_request(
                    token_request, body=True, only=("content-type",)
                )
                outputs["azure-request"] = render_request(
                    servers[AZURE].requests[-1], only=("authorization",)
                )
                invoke = f"http://{gateway}/model/amazon.titan-text-lite-v1/invoke"
                response = await client.post(invoke, json={"inputText": "Say hello"})
                assert response.status_code == 200, response.text  # the server verified the signature
                signed = ("authorization", "x-amz-date", "x-amz-content-sha256")
                outputs["bedrock-request"] = render_request(servers[BEDROCK].requests[-1], only=signed)
            assert harness.controller is not None
            statuses = harness.controller.statuses()
            outputs["azure-status"] = accepted_message(statuses, "azure-openai-token")
            outputs["bedrock-status"] = accepted_message(statuses, "bedrock-sigv4")
            async with httpx.AsyncClient(timeout=10) as client:
                page = (await client.get(f"http://127.0.0.1:{harness.controller.admin_port}/metrics")).text
            wanted = ("weir_oauth2_token_fetches_total", 'weir_backend_sigv4_signed_total{kind="XBackend",')
            outputs["credentials-metrics"] = "".join(
                line + "\n"
                for line in page.splitlines()
                if line.startswith(wanted) and not line.endswith(" 0")
            )
            assert len(servers[ENTRA].requests) == 1  # one token for every request so far
        finally:
            await harness.stop()
            for server in servers.values():
                await server.stop()
            for pid in harness.envoy_pids:
                assert not pid_alive(pid)
    # Without the Secret: what the policy's status says (translation alone).
    text = manifests(443, 8080)
    docs = [
        d
        for d in yaml.safe_load_all(text)
        if not (d["kind"] == "Secret" and d["metadata"]["name"] == "entra-client")
    ]
    loaded, problems = load_text(yaml.safe_dump_all(docs), "all.yaml")
    assert problems == []
    result = translate(Resources.from_objects(i.object for i in loaded), Settings())
    outputs["azure-status-no-secret"] = accepted_message(result.statuses, "azure-openai-token")

    text = DOC.read_text()
    shown = {m["name"]: m for m in doc_blocks(text) if m["kind"] == "credentials-output"}
    assert set(shown) == set(outputs), set(shown) ^ set(outputs)
    actual = {name: normalise(value, gateway, port) for name, value in outputs.items()}
    if UPDATE:
        for name in sorted(shown, key=lambda n: shown[n].start("body"), reverse=True):
            m = shown[name]
            text = text[: m.start("body")] + actual[name] + text[m.end("body") :]
        DOC.write_text(text)
        return
    for name, m in shown.items():
        assert m["body"] == actual[name], f"{name}: the doc shows\n{m['body']}\nweir does\n{actual[name]}"
