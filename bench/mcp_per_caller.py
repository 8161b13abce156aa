"""Per-request cost of a per-caller BackendMCPPolicy (JWT verification, identity principals).

Runs weir (in process) and its Envoy with one echo upstream behind two MCP
XBackends on loopback: ``plain`` under a tool allow-list (the reference,
today's policy) and ``caller`` under a per-caller policy (JWT filter with a
local ES256 key set, rules on subject and claims). A client sends the same
``tools/call`` sequentially over one keep-alive connection to

- ``plain``: the reference;
- ``caller`` without a token (the JWT filter passes, the principals run);
- ``caller`` with a valid token (signature verified on each request: Envoy's
  JWT cache is off by default).

Variants are interleaved within each round; each prints the median latency
per request (client-side, loopback, one request in flight) and its ratio to
the reference of the same round, and Envoy's CPU per request from
``/proc/PID/stat`` over each variant's window. On a shared machine take the
ratios, not the absolute figures.

    PYTHONPATH=src python bench/mcp_per_caller.py --requests 2000 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import httpx
import jwt
from cryptography.hazmat.primitives.asymmetric import ec

from weir.controller import Controller, Options
from weir.providers.files.provider import FilesProvider
from weir.testkit import DnsStub, EchoHttpServer, free_port
from weir.testkit.echo_http import EchoIdentity
from weir.translate import Settings

ISSUER = "https://idp.bench.test"


def manifests(gateway_port: int, upstream_port: int, jwks: str) -> str:
    backends = ""
    for name in ("plain", "caller"):
        backends += f"""\
---
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackend
metadata: {{name: {name}, namespace: default}}
spec:
  type: ExternalHostname
  externalHostname: {{hostname: echo.bench.test}}
  port: {{port: {upstream_port}}}
  protocol: MCP
  tls: {{mode: None}}
"""
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
  listeners: [{{name: http, port: {gateway_port}, protocol: HTTP}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: mcp, namespace: default}}
spec:
  parentRefs: [{{name: gw}}]
  rules:
  - matches: [{{path: {{value: /plain}}}}]
    backendRefs: [{{group: gateway.networking.x-k8s.io, kind: XBackend, name: plain}}]
  - matches: [{{path: {{value: /caller}}}}]
    backendRefs: [{{group: gateway.networking.x-k8s.io, kind: XBackend, name: caller}}]
{backends}---
apiVersion: v1
kind: ConfigMap
metadata: {{name: keys, namespace: default}}
data:
  jwks.json: '{jwks}'
---
apiVersion: weir.dev/v1alpha1
kind: BackendMCPPolicy
metadata: {{name: plain, namespace: default}}
spec:
  targetRefs: [{{group: gateway.networking.x-k8s.io, kind: XBackend, name: plain}}]
  allowedTools: [add, "get_*"]
---
apiVersion: weir.dev/v1alpha1
kind: BackendMCPPolicy
metadata: {{name: caller, namespace: default}}
spec:
  targetRefs: [{{group: gateway.networking.x-k8s.io, kind: XBackend, name: caller}}]
  jwt:
    issuer: {ISSUER}
    audiences: [bench]
    jwks: {{configMapRef: {{name: keys, key: jwks.json}}}}
  allowedTools: [add]
  rules:
  - from: {{jwt: {{claims: [{{name: groups, values: [ops]}}, {{name: scope, values: [tools.read]}}]}}}}
    allowedTools: ["get_*"]
  - from: {{jwt: {{subjects: [alice]}}}}
    allowedTools: [delete_repo]
"""


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def run(requests: int, rounds: int) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    public = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(key.public_key()))
    jwks = json.dumps({"keys": [{**public, "kid": "k1", "alg": "ES256"}]}, separators=(",", ":"))
    now = int(time.time())
    claims = {"iss": ISSUER, "aud": "bench", "sub": "bob", "groups": ["ops"], "scope": "openid tools.read"}
    token = jwt.encode(
        {**claims, "iat": now, "exp": now + 3600}, key, algorithm="ES256", headers={"kid": "k1"}
    )
    call = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "get_weather"}})
    base = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    upstream = await EchoHttpServer(EchoIdentity("bench", "echo"), host="127.0.0.52").start()
    with tempfile.TemporaryDirectory() as folder:
        gateway_port = free_port()
        async with DnsStub() as dns:
            dns.set("echo.bench.test", ["127.0.0.52"])
            Path(folder, "bench.yaml").write_text(manifests(gateway_port, upstream.port, jwks))
            settings = dataclasses.replace(
                Settings(dns_resolvers=(dns.address,)), egress_denied_cidrs=("127.0.0.66/32",)
            )
            controller = Controller(FilesProvider([folder]), settings, Options(admin_port=0))
            await controller.start()
            try:
                await asyncio.wait_for(controller.ready.wait(), 30)
                assert controller.envoy is not None and controller.envoy.pid
                pid = controller.envoy.pid
                variants = {
                    "plain (allow-list)": ("/plain/mcp", base),
                    "per-caller, no token": ("/caller/mcp", base),
                    "per-caller, ES256 token": ("/caller/mcp", {**base, "Authorization": f"Bearer {token}"}),
                }
                url = f"http://127.0.0.1:{gateway_port}"
                results: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
                async with httpx.AsyncClient(base_url=url) as client:
                    for path, headers in variants.values():  # warm up, and check each answers 200
                        response = await client.post(path, content=call, headers=headers)
                        assert response.status_code == 200, (path, response.status_code, response.text)
                    for _ in range(rounds):
                        for name, (path, headers) in variants.items():
                            latencies = []
                            cpu = cpu_seconds(pid)
                            for _ in range(requests):
                                start = time.perf_counter()
                                response = await client.post(path, content=call, headers=headers)
                                latencies.append(time.perf_counter() - start)
                                assert response.status_code == 200
                            results[name].append(
                                (statistics.median(latencies), (cpu_seconds(pid) - cpu) / requests)
                            )
            finally:
                await controller.stop()
    await upstream.stop()
    reference = results["plain (allow-list)"]
    print(f"{requests} requests x {rounds} rounds, one in flight; median latency, Envoy CPU per request")
    print(f"{'variant':28} {'latency':>10} {'ratio':>7} {'Envoy CPU':>10} {'ratio':>7}")
    for name, samples in results.items():
        latency = statistics.median(s[0] for s in samples)
        cpu = statistics.median(s[1] for s in samples)
        lat_ratio = statistics.median(s[0] / r[0] for s, r in zip(samples, reference, strict=True))
        cpu_ratio = statistics.median(s[1] / r[1] for s, r in zip(samples, reference, strict=True) if r[1])
        print(f"{name:28} {latency * 1e6:8.0f}µs {lat_ratio:7.2f} {cpu * 1e6:8.0f}µs {cpu_ratio:7.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(run(args.requests, args.rounds))


if __name__ == "__main__":
    main()
