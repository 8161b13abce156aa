"""A credential's value never shows on any surface weir has: proven by grepping every one of them.

The real commands run over manifests holding distinctive random values (one credential in use,
one a policy refuses for its trailing newline, one in a Secret that does not validate):
``weir run`` with weir's and Envoy's debug logs (which print the client's request headers),
its admin endpoint (``/status``, ``/metrics``), ``weir status``, ``weir translate`` and ``weir
validate``. Every output is searched for each value and for its base64 form (as the manifests
hold it), also across the line breaks a log handler puts in long lines. So that the search
cannot pass by looking in the wrong place, the test first proves the value in use does travel:
the upstream records it in the request's header.
"""

from __future__ import annotations

import base64
import json
import secrets
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from weir_harness import FORBIDDEN_IP, GATEWAY_HEAD, eventually, pid_alive

from weir.testkit import DnsStub, RecordingUpstream, free_port, make_ca, server_ssl_context

XB_GROUP = "gateway.networking.x-k8s.io"
UPSTREAM_IP = "127.0.0.2"
IN_USE = "wr-in-use-" + secrets.token_hex(12)
REFUSED = "wr-refused-" + secrets.token_hex(12)
UNREADABLE = "wr-unreadable-" + secrets.token_hex(12)
WEIR = Path(sys.executable).with_name("weir")


def needles() -> dict[str, str]:
    """What must not be found: each value, and its base64 form as the manifests hold it."""
    out = {}
    for value, stored in ((IN_USE, IN_USE), (REFUSED, REFUSED + "\n"), (UNREADABLE, UNREADABLE)):
        out[value] = value
        out[f"base64 of {value}"] = base64.b64encode(stored.encode()).decode()
    return out


def leaks(where: str, text: str) -> list[str]:
    """The needles in ``text``, also where a log handler wrapped a long value across lines."""
    joined = "".join(text.split())
    return [f"{where}: {name}" for name, needle in needles().items() if needle in text or needle in joined]


def manifests(gateway_port: int, upstream_port: int, ca_pem: str) -> str:
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "ca", "namespace": "default"},
            "data": {"ca.crt": ca_pem},
        },
        {
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "HTTPRoute",
            "metadata": {"name": "llm", "namespace": "default"},
            "spec": {
                "parentRefs": [{"name": "gw"}],
                "rules": [
                    {
                        "matches": [{"path": {"type": "PathPrefix", "value": f"/{name}"}}],
                        "backendRefs": [{"group": XB_GROUP, "kind": "XBackend", "name": name}],
                    }
                    for name in ("llm", "refused")
                ],
            },
        },
    ]
    for name, value in (("llm", IN_USE), ("refused", REFUSED + "\n")):
        docs += [
            {
                "apiVersion": f"{XB_GROUP}/v1alpha1",
                "kind": "XBackend",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {
                    "type": "ExternalHostname",
                    "externalHostname": {"hostname": "llm.redaction.test"},
                    "port": {"port": upstream_port},
                    "tls": {
                        "mode": "ServerOnly",
                        "validation": {
                            "hostname": "llm.redaction.test",
                            "caCertificateRefs": [{"group": "", "kind": "ConfigMap", "name": "ca"}],
                        },
                    },
                },
            },
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": name, "namespace": "default"},
                "data": {"api-key": base64.b64encode(value.encode()).decode()},
            },
            {
                "apiVersion": "weir.dev/v1alpha1",
                "kind": "BackendCredentialPolicy",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {
                    "targetRefs": [{"group": XB_GROUP, "kind": "XBackend", "name": name}],
                    "secretRef": {"name": name, "key": "api-key"},
                    "header": {"valuePrefix": "Bearer "},
                },
            },
        ]
    # A Secret that does not validate (a stringData value that is not a string) next to the value.
    docs.append(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "unreadable", "namespace": "default"},
            "stringData": {"api-key": UNREADABLE, "count": 3},
        }
    )
    return GATEWAY_HEAD.format(port=gateway_port) + "---\n" + yaml.safe_dump_all(docs)


def command(*args: str) -> str:
    result = subprocess.run([str(WEIR), *args], capture_output=True, text=True, timeout=60, check=False)
    return result.stdout + result.stderr


@pytest.mark.asyncio
async def test_no_surface_shows_a_credential(tmp_path: Path) -> None:
    ca = make_ca("redaction CA")
    folder = tmp_path / "manifests"
    folder.mkdir()
    gateway_port, admin_port = free_port(), free_port()
    found: list[str] = []
    async with DnsStub() as dns:
        ctx = server_ssl_context(ca.issue_server_cert("llm.redaction.test"))
        async with RecordingUpstream("llm", host=UPSTREAM_IP, ssl_context=ctx) as upstream:
            dns.set("llm.redaction.test", [UPSTREAM_IP])
            (folder / "world.yaml").write_text(manifests(gateway_port, upstream.port, ca.cert_pem))
            settings = ["--dns-resolver", f"{dns.address[0]}:{dns.address[1]}"]
            settings += ["--egress-denied-cidrs", f"{FORBIDDEN_IP}/32"]
            log_out, log_err = tmp_path / "weir.out", tmp_path / "weir.err"
            with log_out.open("w") as out, log_err.open("w") as err:
                proc = subprocess.Popen(
                    [
                        str(WEIR),
                        "run",
                        "-f",
                        str(folder),
                        "--admin-address",
                        f"127.0.0.1:{admin_port}",
                        "--log-level",
                        "debug",
                        "--envoy-log-level",
                        "debug",
                        *settings,
                    ],
                    stdout=out,
                    stderr=err,
                )
            envoy_pid = None
            try:
                admin = f"http://127.0.0.1:{admin_port}"

                async def ready() -> bool:
                    try:
                        async with httpx.AsyncClient(timeout=0.5) as client:
                            return (await client.get(f"{admin}/ready")).status_code == 200
                    except httpx.HTTPError:
                        return False

                await eventually(ready, timeout=30, interval=0.1)
                async with httpx.AsyncClient(timeout=5) as client:
                    gateway = f"http://127.0.0.1:{gateway_port}"
                    served = await client.get(f"{gateway}/llm/v1/chat", headers={"Authorization": "client"})
                    refused = await client.get(f"{gateway}/refused/v1/chat")
                    surfaces = {
                        f"admin {path}": (await client.get(f"{admin}{path}")).text
                        for path in ("/status", "/metrics", "/ready", "/healthz")
                    }
                # The value in use really travels: a search that finds nothing is meaningful.
                assert served.status_code == 200, served.text
                assert upstream.requests[-1].header_values("authorization") == [f"Bearer {IN_USE}"]
                assert leaks("the upstream", str(upstream.requests[-1].headers)) == [
                    "the upstream: " + IN_USE
                ]
                # The refused policy fails closed and says why, without the value.
                assert refused.status_code == 500, refused.text
                assert upstream.requests[-1].path == "/llm/v1/chat"
                assert "contains a line break" in surfaces["admin /status"]
                assert "stringData[count]" in surfaces["admin /status"]

                for output in ("yaml", "json"):
                    status = command("status", "--admin-address", f"127.0.0.1:{admin_port}", "-o", output)
                    surfaces[f"weir status -o {output}"] = status
                    text = command("translate", "-f", str(folder), "-o", output, *settings)
                    surfaces[f"weir translate -o {output}"] = text
                envoy_pid = json.loads(surfaces["weir status -o json"])["dataPlane"]["envoyPid"]
                surfaces["weir validate"] = command("validate", "-f", str(folder))
                assert "GenericSecret" in surfaces["weir translate -o yaml"]  # the credential is in the IR
                assert "stringData[count]" in surfaces["weir validate"]
            finally:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            assert envoy_pid and not pid_alive(envoy_pid), "Envoy outlived weir"
            surfaces["weir run stdout"] = log_out.read_text()
            surfaces["weir run stderr"] = log_err.read_text()
            assert "admin endpoint on" in surfaces["weir run stdout"] + surfaces["weir run stderr"]
            for where, text in surfaces.items():
                assert text, f"{where}: empty, nothing was searched"
                found += leaks(where, text)
    assert found == [], found
