"""BackendCredentialPolicy end to end: one weir + real Envoy, TLS upstreams on loopback that record headers.

Each case is an XBackend (a hostname the DNS stub resolves to 127.0.0.2, TLS verified against a
test CA, its own recording upstream) or a Service (plaintext, on 127.0.0.3) behind its own path,
with its own policy and Secret, each Secret in a file of its own so that a test can edit it.
What the upstream recorded is the proof: the header it received, and that nothing arrived at all
when the policy cannot be used.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import pytest_asyncio
import yaml
from weir_harness import GATEWAY_HEAD, Weir, eventually, pid_alive

from weir.testkit import CertAuthority, DnsStub, RecordingUpstream, free_port, make_ca, server_ssl_context

pytestmark = pytest.mark.asyncio(loop_scope="module")

XB_GROUP = "gateway.networking.x-k8s.io"
TLS_IP = "127.0.0.2"
SERVICE_IP = "127.0.0.3"
#: XBackend name → (Secret key value, policy spec beyond targetRefs/secretRef).
XBACKENDS: dict[str, tuple[str, dict[str, Any]]] = {
    "llm": ("sk-llm-0123456789", {"header": {"valuePrefix": "Bearer "}}),
    "keep": ("keep-abcdef", {"header": {"name": "X-Api-Key"}, "overwrite": False}),
    "rotate": ("rotate-old-111", {"header": {"valuePrefix": "Bearer "}}),
    "broken": ("broken-fixed-222", {}),
}
INTERNAL_KEY = "internal-token-333"
ROTATED = "rotate-new-444"


def secret(name: str, data: dict[str, str]) -> dict[str, Any]:
    """A Secret with ``data`` base64-encoded, as kubectl writes it."""
    encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": "default"},
        "data": encoded,
    }


def policy(name: str, target: dict[str, Any], secret_name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "weir.dev/v1alpha1",
        "kind": "BackendCredentialPolicy",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"targetRefs": [target], "secretRef": {"name": secret_name, "key": "api-key"}, **spec},
    }


@dataclass
class World:
    weir: Weir
    ca: CertAuthority
    upstreams: dict[str, RecordingUpstream] = field(default_factory=dict)

    async def get(self, path: str, headers: dict[str, str] | None = None) -> httpx.Response:
        async with httpx.AsyncClient(timeout=5) as client:
            return await client.get(self.weir.url(path), headers=headers)

    def write_secret(self, name: str, data: dict[str, str] | None) -> None:
        if data is None:
            (self.weir.folder / f"secret-{name}.yaml").unlink(missing_ok=True)
        else:
            self.weir.write(f"secret-{name}.yaml", yaml.safe_dump(secret(name, data)))

    def conditions(self, name: str) -> dict[str, dict[str, Any]]:
        [ancestor] = self.weir.status_of("BackendCredentialPolicy", "default", name)["ancestors"]
        assert ancestor["ancestorRef"]["kind"] == "Gateway"
        return {c["type"]: c for c in ancestor["conditions"]}

    async def stat(self, name: str) -> int:
        assert self.weir.controller is not None and self.weir.controller.envoy is not None
        _, text = await self.weir.controller.envoy.admin.get(f"/stats?filter=^{name}$")
        values = [int(line.split(": ")[1]) for line in text.splitlines() if line.startswith(f"{name}: ")]
        return values[0] if values else 0


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    folder = tmp_path_factory.mktemp("credentials") / "manifests"
    folder.mkdir()
    ca = make_ca("credentials CA")
    async with DnsStub() as dns:
        harness = Weir(folder, dns, free_port())
        w = World(harness, ca)
        try:
            docs: list[dict[str, Any]] = [
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": "ca", "namespace": "default"},
                    "data": {"ca.crt": ca.cert_pem},
                }
            ]
            rules = []
            for name, (value, spec) in XBACKENDS.items():
                hostname = f"{name}.credentials.test"
                ctx = server_ssl_context(ca.issue_server_cert(hostname))
                upstream = await RecordingUpstream(name, host=TLS_IP, ssl_context=ctx).start()
                w.upstreams[name] = upstream
                dns.set(hostname, [TLS_IP])
                docs.append(
                    {
                        "apiVersion": f"{XB_GROUP}/v1alpha1",
                        "kind": "XBackend",
                        "metadata": {"name": name, "namespace": "default"},
                        "spec": {
                            "type": "ExternalHostname",
                            "externalHostname": {"hostname": hostname},
                            "port": {"port": upstream.port},
                            "tls": {
                                "mode": "ServerOnly",
                                "validation": {
                                    "hostname": hostname,
                                    "caCertificateRefs": [{"group": "", "kind": "ConfigMap", "name": "ca"}],
                                },
                            },
                        },
                    }
                )
                target = {"group": XB_GROUP, "kind": "XBackend", "name": name}
                docs.append(policy(f"{name}-key", target, name, **spec))
                rules.append((f"/{name}", {"group": XB_GROUP, "kind": "XBackend", "name": name}))
                if name != "broken":  # its Secret is missing until a test writes it
                    w.write_secret(name, {"api-key": value})
            internal = await RecordingUpstream("internal", host=SERVICE_IP).start()
            w.upstreams["internal"] = internal
            docs += [
                {
                    "apiVersion": "v1",
                    "kind": "Service",
                    "metadata": {"name": "internal", "namespace": "default"},
                    "spec": {"ports": [{"name": "http", "port": 80}]},
                },
                {
                    "apiVersion": "discovery.k8s.io/v1",
                    "kind": "EndpointSlice",
                    "metadata": {
                        "name": "internal",
                        "namespace": "default",
                        "labels": {"kubernetes.io/service-name": "internal"},
                    },
                    "addressType": "IPv4",
                    "ports": [{"name": "http", "port": internal.port}],
                    "endpoints": [{"addresses": [SERVICE_IP], "conditions": {"ready": True}}],
                },
                policy(
                    "internal-key",
                    {"group": "", "kind": "Service", "name": "internal", "sectionName": "http"},
                    "internal",
                    header={"name": "X-Internal-Token"},
                ),
            ]
            w.write_secret("internal", {"api-key": INTERNAL_KEY})
            rules.append(("/internal", {"name": "internal", "port": 80}))
            route = {
                "apiVersion": "gateway.networking.k8s.io/v1",
                "kind": "HTTPRoute",
                "metadata": {"name": "credentials", "namespace": "default"},
                "spec": {
                    "parentRefs": [{"name": "gw"}],
                    "rules": [
                        {"matches": [{"path": {"type": "PathPrefix", "value": path}}], "backendRefs": [ref]}
                        for path, ref in rules
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


async def test_the_credential_arrives_with_its_prefix_and_replaces_the_clients(world: World) -> None:
    key = XBACKENDS["llm"][0]
    response = await world.get("/llm/v1/chat", headers={"Authorization": "Bearer the-client-s-own"})
    assert response.status_code == 200, response.text
    seen = world.upstreams["llm"].requests[-1]
    assert seen.sni == "llm.credentials.test"
    assert seen.header_values("authorization") == [f"Bearer {key}"]
    response = await world.get("/llm/v1/models")
    assert response.status_code == 200, response.text
    assert world.upstreams["llm"].requests[-1].header_values("authorization") == [f"Bearer {key}"]
    conditions = world.conditions("llm-key")
    assert (conditions["Accepted"]["status"], conditions["ResolvedRefs"]["status"]) == ("True", "True")
    assert key not in str(world.weir.status_of("BackendCredentialPolicy", "default", "llm-key"))


async def test_overwrite_false_keeps_the_clients_header(world: World) -> None:
    key = XBACKENDS["keep"][0]
    response = await world.get("/keep/a", headers={"X-Api-Key": "the-client-s-own"})
    assert response.status_code == 200, response.text
    assert world.upstreams["keep"].requests[-1].header_values("x-api-key") == ["the-client-s-own"]
    response = await world.get("/keep/b")
    assert response.status_code == 200, response.text
    seen = world.upstreams["keep"].requests[-1]
    assert seen.header_values("x-api-key") == [key]
    assert seen.header("authorization") is None  # the header is the policy's, not Authorization


async def test_a_service_port_gets_the_credential(world: World) -> None:
    response = await world.get("/internal/x", headers={"X-Internal-Token": "forged"})
    assert response.status_code == 200, response.text
    assert world.upstreams["internal"].requests[-1].header_values("x-internal-token") == [INTERNAL_KEY]


async def test_rotating_the_secret_changes_the_next_requests_without_failing_any(world: World) -> None:
    old = XBACKENDS["rotate"][0]
    upstream = world.upstreams["rotate"]
    response = await world.get("/rotate/warm-up")
    assert response.status_code == 200, response.text
    assert upstream.requests[-1].header_values("authorization") == [f"Bearer {old}"]
    modified = await world.stat("cluster_manager.cluster_modified")
    upstream.clear()
    statuses: list[int] = []
    stop = asyncio.Event()

    async def client() -> None:
        async with httpx.AsyncClient(timeout=5) as http:
            while not stop.is_set():
                statuses.append((await http.get(world.weir.url("/rotate/during"))).status_code)
                await asyncio.sleep(0.002)

    clients = [asyncio.create_task(client()) for _ in range(2)]
    try:
        await asyncio.sleep(0.3)
        rotated_at = time.monotonic()
        world.write_secret("rotate", {"api-key": ROTATED})

        def new_value_seen() -> bool:
            return any(r.header("authorization") == f"Bearer {ROTATED}" for r in upstream.requests)

        await eventually(new_value_seen, timeout=10)
        took = time.monotonic() - rotated_at
        await asyncio.sleep(0.3)
    finally:
        stop.set()
        await asyncio.gather(*clients)
    seen = upstream.requests
    assert statuses and all(code == 200 for code in statuses), sorted(set(statuses))
    assert len(seen) == len(statuses)
    values = [tuple(r.header_values("authorization")) for r in seen]
    assert set(values) <= {(f"Bearer {old}",), (f"Bearer {ROTATED}",)}, set(values)
    assert values[0] == (f"Bearer {old}",) and values[-1] == (f"Bearer {ROTATED}",)
    # Over SDS: the cluster was not replaced.
    assert await world.stat("cluster_manager.cluster_modified") == modified
    response = await world.get("/rotate/after")
    assert response.status_code == 200
    assert upstream.requests[-1].header_values("authorization") == [f"Bearer {ROTATED}"]
    print(f"rotation: {len(statuses)} requests, new value upstream {took:.2f} s after the file was written")


async def test_a_missing_secret_or_key_fails_closed_until_fixed(world: World) -> None:
    upstream = world.upstreams["broken"]
    response = await world.get("/broken/x")
    assert response.status_code == 500, response.text
    conditions = world.conditions("broken-key")
    assert (conditions["Accepted"]["status"], conditions["Accepted"]["reason"]) == ("False", "Invalid")
    assert (conditions["ResolvedRefs"]["status"], conditions["ResolvedRefs"]["reason"]) == (
        "False",
        "InvalidCertificateRef",
    )
    assert "Secret default/broken does not exist" in conditions["ResolvedRefs"]["message"]

    world.write_secret("broken", {"other-key": "whatever"})

    def no_key() -> bool:
        return (
            "has no key api-key (its keys: other-key)"
            in world.conditions("broken-key")["Accepted"]["message"]
        )

    await eventually(no_key, timeout=10)
    response = await world.get("/broken/y")
    assert response.status_code == 500, response.text
    assert upstream.requests == [], "a request reached the upstream without its credential"

    key = XBACKENDS["broken"][0]
    world.write_secret("broken", {"api-key": key})

    async def served() -> bool:
        return (await world.get("/broken/z")).status_code == 200

    await eventually(served, timeout=10, interval=0.1)
    assert all(r.header_values("authorization") == [key] for r in upstream.requests)
    assert world.conditions("broken-key")["Accepted"]["status"] == "True"
