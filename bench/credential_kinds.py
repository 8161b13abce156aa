"""Per-request cost of each kind of BackendCredentialPolicy credential, through real weir and Envoy.

One weir (in this process) and one Envoy; five XBackends over TLS on loopback, each behind its own
path, differing only in their policy: none (the reference, measured in the same run), a static key
(cluster credential injector), an OAuth2 token (connection-manager credential injector, token cached),
SigV4 with a signed payload (the body buffered and hashed) and SigV4 with ``UNSIGNED-PAYLOAD``.
Requests are POSTs of a 1 KiB JSON body, sent one after another on one keep-alive HTTP/1.1
connection, rounds interleaved so that load from elsewhere falls on every kind alike. Prints the
median and 90th percentile latency per kind and the ratio of medians to the reference.

    PYTHONPATH=src:tests/support:tests/e2e python bench/credential_kinds.py [--requests 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "tests" / p) for p in ("e2e", "support")]

from weir_harness import GATEWAY_HEAD, Weir  # noqa: E402

from weir.testkit import DnsStub, RecordingUpstream, free_port, make_ca, server_ssl_context  # noqa: E402
from weir.testkit.upstream import SeenRequest, UpstreamResponse  # noqa: E402

XB = "gateway.networking.x-k8s.io"
IP = "127.0.0.2"
KINDS = ("none", "static", "oauth2", "sigv4-signed", "sigv4-unsigned")


def token(seen: SeenRequest) -> UpstreamResponse:
    body = json.dumps({"access_token": "bench-token", "token_type": "Bearer", "expires_in": 3600})
    return UpstreamResponse(200, body.encode(), (("content-type", "application/json"),))


def secret(name: str, data: dict[str, str]) -> dict[str, Any]:
    encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": "default"},
        "data": encoded,
    }


def xbackend(name: str, port: int) -> dict[str, Any]:
    host = f"{name}.bench.test"
    return {
        "apiVersion": f"{XB}/v1alpha1",
        "kind": "XBackend",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "type": "ExternalHostname",
            "externalHostname": {"hostname": host},
            "port": {"port": port},
            "tls": {
                "mode": "ServerOnly",
                "validation": {
                    "hostname": host,
                    "caCertificateRefs": [{"group": "", "kind": "ConfigMap", "name": "ca"}],
                },
            },
        },
    }


def policy(kind: str) -> dict[str, Any] | None:
    spec: dict[str, Any] = {"targetRefs": [{"group": XB, "kind": "XBackend", "name": kind}]}
    if kind == "none":
        return None
    if kind == "static":
        spec["secretRef"] = {"name": "creds", "key": "api-key"}
    elif kind == "oauth2":
        spec["oauth2"] = {
            "tokenEndpoint": {"backendRef": {"name": "idp"}, "path": "/token"},
            "clientIDRef": {"name": "creds", "key": "client-id"},
            "clientSecretRef": {"name": "creds", "key": "client-secret"},
        }
    else:
        payload = "Signed" if kind == "sigv4-signed" else "Unsigned"
        spec["awsSigV4"] = {
            "region": "us-east-1",
            "service": "bedrock",
            "credentialsRef": {"name": "creds"},
            "payload": payload,
        }
    return {
        "apiVersion": "weir.dev/v1alpha1",
        "kind": "BackendCredentialPolicy",
        "metadata": {"name": kind, "namespace": "default"},
        "spec": spec,
    }


async def main(requests: int) -> None:
    ca = make_ca("bench CA")
    servers: list[RecordingUpstream] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        async with DnsStub() as dns:
            docs: list[dict[str, Any]] = [
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": "ca", "namespace": "default"},
                    "data": {"ca.crt": ca.cert_pem},
                },
                secret(
                    "creds",
                    {
                        "api-key": "sk-bench",
                        "client-id": "c",
                        "client-secret": "s",
                        "AWS_ACCESS_KEY_ID": "AKIDBENCH",
                        "AWS_SECRET_ACCESS_KEY": "secret",
                    },
                ),
            ]
            rules = []
            for name in (*KINDS, "idp"):
                ctx = server_ssl_context(ca.issue_server_cert(f"{name}.bench.test"))
                handler = token if name == "idp" else UpstreamResponse(200, b'{"ok": true}')
                server = await RecordingUpstream(name, host=IP, ssl_context=ctx, handler=handler).start()
                servers.append(server)
                dns.set(f"{name}.bench.test", [IP])
                docs.append(xbackend(name, server.port))
                found = policy(name) if name != "idp" else None
                if found is not None:
                    docs.append(found)
                if name != "idp":
                    rules.append(
                        {
                            "matches": [{"path": {"value": f"/{name}"}}],
                            "backendRefs": [{"group": XB, "kind": "XBackend", "name": name}],
                        }
                    )
            route = {
                "apiVersion": "gateway.networking.k8s.io/v1",
                "kind": "HTTPRoute",
                "metadata": {"name": "bench", "namespace": "default"},
                "spec": {"parentRefs": [{"name": "gw"}], "rules": rules},
            }
            weir = Weir(folder, dns, free_port())
            weir.write(
                "all.yaml",
                GATEWAY_HEAD.format(port=weir.gateway_port) + "---\n" + yaml.safe_dump_all([route, *docs]),
            )
            try:
                await weir.start()
                body = json.dumps({"messages": [{"role": "user", "content": "x" * 980}]}).encode()
                times: dict[str, list[float]] = {k: [] for k in KINDS}
                async with httpx.AsyncClient(timeout=10) as client:
                    for kind in KINDS:  # warm up: connections, the first token
                        for _ in range(50):
                            while (
                                await client.post(weir.url(f"/{kind}/x"), content=body)
                            ).status_code != 200:
                                await asyncio.sleep(0.05)
                    for _ in range(requests):
                        for kind in KINDS:
                            started = time.perf_counter()
                            response = await client.post(weir.url(f"/{kind}/x"), content=body)
                            times[kind].append(time.perf_counter() - started)
                            assert response.status_code == 200, (kind, response.status_code)
            finally:
                await weir.stop()
                for server in servers:
                    await server.stop()
    reference = statistics.median(times["none"])
    print(f"{requests} requests per kind, 1 KiB bodies, one connection, sequential (machine shared)")
    print(f"{'kind':>15} {'median ms':>10} {'p90 ms':>8} {'ratio':>6}")
    for kind in KINDS:
        values = sorted(times[kind])
        median, p90 = statistics.median(values), values[int(len(values) * 0.9)]
        print(f"{kind:>15} {median * 1e3:>10.3f} {p90 * 1e3:>8.3f} {median / reference:>6.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=2000)
    asyncio.run(main(parser.parse_args().requests))
