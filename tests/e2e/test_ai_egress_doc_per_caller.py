"""``docs/ai-egress.md``, section "Tools per caller", run as written.

The section marks its parts ``<!-- caller/manifest -->`` (the manifests),
``<!-- caller/script -->`` (an ``mcp`` SDK script) and ``<!-- caller/output
-->`` (what it prints); markers of their own, so that the page's
walk-through test (``test_ai_egress_doc.py``) leaves them alone. Through
real weir and Envoy, on loopback: the ``mcp`` SDK's server plays
``tools.internal.example`` (a DNS stub answers it), and the test changes only
what it must, asserting each change: the ConfigMap's JWKS becomes the
public key of a key made here (which signs the three tokens the script reads
from its environment), the XBackend's port becomes the server's, and the
Gateway's port 8080 (in the manifest and the script's URL) a free one.
``WEIR_UPDATE_DOCS=1`` rewrites the output shown.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import sys
import time
from pathlib import Path

import jwt
import pytest
import yaml
from cryptography.hazmat.primitives.asymmetric import ec
from test_mcp_policy import ToolServer, serve
from weir_harness import Weir, pid_alive

from weir.testkit import DnsStub, free_port

pytestmark = pytest.mark.asyncio(loop_scope="function")

DOC = Path(__file__).resolve().parents[2] / "docs" / "ai-egress.md"
BLOCK = re.compile(r"<!-- caller/(?P<kind>[a-z]+) -->\n```(?P<lang>\w*)\n(?P<body>.*?)```\n", re.DOTALL)


def blocks() -> dict[str, re.Match[str]]:
    found = {m["kind"]: m for m in BLOCK.finditer(DOC.read_text())}
    assert set(found) == {"manifest", "script", "output"}, set(found)
    return found


def jwks_of(key: ec.EllipticCurvePrivateKey) -> str:
    public = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(key.public_key()))
    return json.dumps(
        {"keys": [{**public, "kid": "k1", "alg": "ES256", "use": "sig"}]}, separators=(",", ":")
    )


def adapted_manifest(text: str, jwks: str, server_port: int, gateway_port: int) -> str:
    docs = list(yaml.safe_load_all(text))
    changed = 0
    for doc in docs:
        if doc["kind"] == "ConfigMap" and doc["metadata"]["name"] == "idp-keys":
            json.loads(doc["data"]["jwks.json"])  # the doc shows a real JWKS
            doc["data"]["jwks.json"] = jwks
            changed += 1
        if doc["kind"] == "XBackend":
            assert doc["spec"]["port"] == {"port": 8000}
            doc["spec"]["port"] = {"port": server_port}
            changed += 1
        if doc["kind"] == "Gateway":
            assert doc["spec"]["listeners"][0]["port"] == 8080
            doc["spec"]["listeners"][0]["port"] = gateway_port
            changed += 1
    assert changed == 3
    return yaml.safe_dump_all(docs)


def token(key: ec.EllipticCurvePrivateKey, **claims: object) -> str:
    now = int(time.time())
    payload = {"iss": "https://idp.example", "aud": "team-tools", "iat": now, "exp": now + 300, **claims}
    return jwt.encode(payload, key, algorithm="ES256", headers={"kid": "k1"})


async def test_the_per_caller_section_runs_as_written(tmp_path: Path) -> None:
    parts = blocks()
    key = ec.generate_private_key(ec.SECP256R1())
    server = ToolServer("team", "127.0.0.41", "tools.internal.example")
    server_path = "/team/mcp"
    assert server.path == server_path  # the doc's route path reaches the server's endpoint
    async with DnsStub() as dns, contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(serve(server))
        dns.set(server.hostname, [server.ip])
        gateway_port = free_port()
        harness = Weir(tmp_path, dns, gateway_port, egress_denied_cidrs=())
        harness.write(
            "per-caller.yaml",
            adapted_manifest(parts["manifest"]["body"], jwks_of(key), server.port, gateway_port),
        )
        try:
            await harness.start()
            status = harness.status_of("BackendMCPPolicy", "default", "team-tools")
            accepted = [c for a in status["ancestors"] for c in a["conditions"] if c["type"] == "Accepted"]
            assert [c["status"] for c in accepted] == ["True"], status
            script = parts["script"]["body"]
            assert script.count("127.0.0.1:8080") == 1
            script = script.replace("127.0.0.1:8080", f"127.0.0.1:{gateway_port}")
            now = int(time.time())
            env = {
                **os.environ,
                "BOB_TOKEN": token(key, sub="bob", groups=["dev", "weather"]),
                "ALICE_TOKEN": token(key, sub="alice", scope="openid repo.admin"),
                "EXPIRED_TOKEN": token(key, sub="bob", iat=now - 600, exp=now - 300),
            }
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                script,
                env=env,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            try:
                out, err = await asyncio.wait_for(process.communicate(), 60)
            finally:
                if process.returncode is None:
                    process.kill()
                    await process.wait()
            assert process.returncode == 0, err.decode()
        finally:
            await harness.stop()
            for pid in harness.envoy_pids:
                assert not pid_alive(pid), f"Envoy {pid} survived stop()"
    printed = out.decode().replace(f"127.0.0.1:{gateway_port}", "127.0.0.1:8080")
    # Only alice's delete_repo reached the server; bob's and the anonymous caller's were refused.
    assert server.calls() == ["delete_repo"], server.posted
    shown = parts["output"]
    if os.environ.get("WEIR_UPDATE_DOCS"):
        text = DOC.read_text()
        DOC.write_text(text[: shown.start("body")] + printed + text[shown.end("body") :])
        return
    assert printed == shown["body"], printed
