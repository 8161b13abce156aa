"""weir standalone, end to end: manifests in a folder → real Envoy → real upstreams on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import yaml
from weir_harness import (
    GATEWAY_HEAD,
    Weir,
    eventually,
    indent_pem,
    pid_alive,
    services_manifests,
)

from weir.controller import Controller, Options
from weir.providers.base import ProviderSnapshot
from weir.providers.files.provider import FilesProvider
from weir.testkit import (
    CertAuthority,
    DnsStub,
    RecordingUpstream,
    free_port,
    make_ca,
    server_ssl_context,
)
from weir.translate import Settings

API_HOST = "api.example.test"


@pytest.fixture
def ca() -> CertAuthority:
    return make_ca("e2e CA")


def xbackend_manifests(port: int, upstream_port: int, ca_pem: str, *, name: str = "api") -> str:
    return (
        GATEWAY_HEAD.format(port=port)
        + f"""\
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}, namespace: default}}
spec:
  parentRefs: [{{name: gw}}]
  rules:
  - matches: [{{path: {{type: PathPrefix, value: /v1}}}}]
    backendRefs: [{{group: gateway.networking.x-k8s.io, kind: XBackend, name: {name}}}]
---
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackend
metadata: {{name: {name}, namespace: default}}
spec:
  type: ExternalHostname
  externalHostname: {{hostname: {API_HOST}}}
  port: {{port: {upstream_port}}}
  tls:
    mode: ServerOnly
    validation:
      hostname: {API_HOST}
      caCertificateRefs: [{{group: "", kind: ConfigMap, name: {name}-ca}}]
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: {name}-ca, namespace: default}}
data:
  ca.crt: |
{indent_pem(ca_pem, 4)}"""
    )


async def test_xbackend_server_only_verifies_tls_with_sni_and_host(
    weir: Weir, dns: DnsStub, ca: CertAuthority
) -> None:
    cert = ca.issue_server_cert(API_HOST)
    async with RecordingUpstream("api", host="127.0.0.2", ssl_context=server_ssl_context(cert)) as api:
        dns.set(API_HOST, ["127.0.0.2"])
        weir.write("egress.yaml", xbackend_manifests(weir.gateway_port, api.port, ca.cert_pem))
        await weir.start()
        async with httpx.AsyncClient() as client:
            response = await client.get(weir.url("/v1/models"), headers={"x-request-id": "client-id"})
        assert response.status_code == 200, response.text
        seen = api.requests[-1]
        assert seen.sni == API_HOST
        assert seen.host == API_HOST
        assert seen.path == "/v1/models"
        assert seen.tls_version in ("TLSv1.2", "TLSv1.3")
        # Nothing of the gateway's internals leaks to the external API.
        assert not [name for name, _ in seen.headers if name.startswith("x-envoy-")]
        assert seen.header("x-forwarded-proto") is None

        gateway = weir.status_of("Gateway", "default", "gw")
        programmed = next(c for c in gateway["conditions"] if c["type"] == "Programmed")
        assert programmed["status"] == "True", programmed
        assert gateway["addresses"] == [{"type": "IPAddress", "value": "127.0.0.1"}]
        assert gateway["listeners"][0]["attachedRoutes"] == 1
        xbackend = weir.status_of("XBackend", "default", "api")
        [parent] = xbackend["parents"]
        assert parent["parentRef"]["name"] == "gw"
        assert {c["type"]: c["status"] for c in parent["conditions"]} == {
            "Accepted": "True",
            "ResolvedRefs": "True",
        }
        assert all("lastTransitionTime" in c for c in parent["conditions"])


async def test_wrong_ca_gives_5xx_and_never_plaintext(weir: Weir, dns: DnsStub, ca: CertAuthority) -> None:
    impostor = make_ca("impostor CA").issue_server_cert(API_HOST)
    async with RecordingUpstream("api", host="127.0.0.2", ssl_context=server_ssl_context(impostor)) as api:
        dns.set(API_HOST, ["127.0.0.2"])
        weir.write("egress.yaml", xbackend_manifests(weir.gateway_port, api.port, ca.cert_pem))
        controller = await weir.start()
        async with httpx.AsyncClient() as client:
            response = await client.get(weir.url("/v1/models"))
        assert 500 <= response.status_code < 600
        assert api.requests == [], "a request reached the upstream despite a failed verification"
        assert controller.envoy is not None
        _, stats = await controller.envoy.admin.get("/stats?filter=ssl.fail_verify_error")
        failures = [int(line.rsplit(":", 1)[1]) for line in stats.splitlines() if "xbackend" in line]
        assert failures and max(failures) >= 1, stats


async def test_weighted_services_on_two_loopback_ips(weir: Weir) -> None:
    port = free_port("127.0.0.2")
    async with (
        RecordingUpstream("a", host="127.0.0.2", port=port) as a,
        RecordingUpstream("b", host="127.0.0.3", port=port) as b,
    ):
        weir.write(
            "web.yaml",
            services_manifests(
                weir.gateway_port,
                {"svc-a": ("127.0.0.2", port, 80), "svc-b": ("127.0.0.3", port, 20)},
            ),
        )
        await weir.start()
        seen: Counter[str] = Counter()
        limits = httpx.Limits(max_connections=20)
        async with httpx.AsyncClient(limits=limits) as client:

            async def one() -> None:
                response = await client.get(weir.url("/"))
                assert response.status_code == 200
                seen[response.json()["upstream"]] += 1

            for _ in range(10):
                await asyncio.gather(*(one() for _ in range(100)))
        assert sum(seen.values()) == 1000
        share = seen["a"] / 1000
        assert 0.75 <= share <= 0.85, seen
        assert len(a.requests) == seen["a"] and len(b.requests) == seen["b"]


async def test_file_edit_reroutes_without_restarting_envoy(weir: Weir) -> None:
    port = free_port("127.0.0.2")
    async with (
        RecordingUpstream("a", host="127.0.0.2", port=port),
        RecordingUpstream("b", host="127.0.0.3", port=port),
    ):
        weir.write("web.yaml", services_manifests(weir.gateway_port, {"svc-a": ("127.0.0.2", port, 1)}))
        controller = await weir.start()
        pid = weir.envoy_pid
        async with httpx.AsyncClient() as client:
            assert (await client.get(weir.url("/"))).json()["upstream"] == "a"
            weir.write("web.yaml", services_manifests(weir.gateway_port, {"svc-b": ("127.0.0.3", port, 1)}))

            failures: list[int] = []

            async def routed_to_b() -> bool:
                response = await client.get(weir.url("/"))
                if response.status_code != 200:
                    failures.append(response.status_code)
                    return False
                return bool(response.json()["upstream"] == "b")

            _, elapsed = await eventually(routed_to_b, timeout=3, interval=0.005)
        print(f"reload latency: {elapsed * 1000:.0f} ms")
        assert elapsed < 1.0
        assert failures == [], "requests failed while routing moved (make-before-break broken)"
        assert weir.envoy_pid == pid
        # A route, its Service and its slice changed: the controller patched the last translation.
        assert controller._translator.last == "patched", controller._translator.counts


async def test_invalid_edit_is_reported_and_previous_routing_keeps_serving(weir: Weir) -> None:
    port = free_port("127.0.0.2")
    async with RecordingUpstream("a", host="127.0.0.2", port=port):
        good = services_manifests(weir.gateway_port, {"svc-a": ("127.0.0.2", port, 1)})
        path = weir.write("web.yaml", good)
        await weir.start()
        bad = good.replace("weight: 1}", "weight: -5}")
        assert bad != good
        weir.write("web.yaml", bad)

        async def reported() -> list[dict[str, object]]:
            problems: list[dict[str, object]] = (await weir.admin_status())["problems"]
            return [p for p in problems if p["severity"] == "error"]

        [problem], _ = await eventually(reported, timeout=3)
        assert problem["file"] == str(path)
        # The line of the offending field, not of its document.
        assert problem["line"] == 1 + next(i for i, ln in enumerate(bad.splitlines()) if "weight: -5" in ln)
        assert problem["object"] == "HTTPRoute default/web"
        assert problem["field"] == "spec.rules[0].backendRefs[0].weight"
        assert "greater than or equal to 0" in str(problem["message"])
        async with httpx.AsyncClient() as client:
            for _ in range(5):
                response = await client.get(weir.url("/"))
                assert response.status_code == 200 and response.json()["upstream"] == "a"


async def test_killed_envoy_is_restarted_and_serves_within_2s(weir: Weir) -> None:
    port = free_port("127.0.0.2")
    async with RecordingUpstream("a", host="127.0.0.2", port=port):
        weir.write("web.yaml", services_manifests(weir.gateway_port, {"svc-a": ("127.0.0.2", port, 1)}))
        await weir.start()
        pid = weir.envoy_pid
        async with httpx.AsyncClient() as client:
            assert (await client.get(weir.url("/"))).status_code == 200
        os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()

        async def serving() -> bool:
            try:
                async with httpx.AsyncClient(timeout=0.5) as fresh:
                    return (await fresh.get(weir.url("/"))).status_code == 200
            except httpx.HTTPError:
                return False

        await eventually(serving, timeout=5, interval=0.02)
        recovered = time.monotonic() - killed
        print(f"restart recovery: {recovered * 1000:.0f} ms")
        assert recovered < 2.0
        assert weir.envoy_pid != pid
        assert not pid_alive(pid)


async def test_listener_that_cannot_bind_is_reported_and_others_keep_serving(weir: Weir) -> None:
    port = free_port("127.0.0.2")
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen()
    taken = blocker.getsockname()[1]
    try:
        async with RecordingUpstream("a", host="127.0.0.2", port=port):
            weir.write("web.yaml", services_manifests(weir.gateway_port, {"svc-a": ("127.0.0.2", port, 1)}))
            await weir.start()
            weir.write(
                "blocked.yaml",
                f"""\
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: blocked, namespace: default}}
spec:
  gatewayClassName: weir
  listeners: [{{name: http, port: {taken}, protocol: HTTP}}]
""",
            )

            def not_programmed() -> dict[str, object] | None:
                try:
                    status = weir.status_of("Gateway", "default", "blocked")
                except KeyError:
                    return None
                cond = next(c for c in status["conditions"] if c["type"] == "Programmed")
                return cond if cond["reason"] == "Invalid" else None

            cond, _ = await eventually(not_programmed, timeout=10)
            assert cond["status"] == "False"
            assert f"cannot bind '127.0.0.1:{taken}'" in str(cond["message"])
            # The Gateway that Envoy did not reject is still programmed, and says so.
            good = weir.status_of("Gateway", "default", "gw")
            assert {c["type"]: c["status"] for c in good["conditions"]}["Programmed"] == "True"
            async with httpx.AsyncClient() as client:
                assert (await client.get(weir.url("/"))).json()["upstream"] == "a"
    finally:
        blocker.close()


async def test_weir_run_status_and_sigterm_leave_nothing_behind(tmp_path: Path) -> None:
    """The real command: `weir run`, `weir status`, SIGTERM; Envoy must be gone afterwards."""
    port = free_port("127.0.0.2")
    gateway_port, admin_port = free_port(), free_port()
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "web.yaml").write_text(services_manifests(gateway_port, {"svc-a": ("127.0.0.2", port, 1)}))
    weir_bin = Path(sys.executable).with_name("weir")
    command = [
        str(weir_bin),
        "run",
        "-f",
        str(folder),
        "--admin-address",
        f"127.0.0.1:{admin_port}",
    ]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    envoy_pid = None
    try:
        async with RecordingUpstream("a", host="127.0.0.2", port=port):

            async def ready() -> bool:
                try:
                    async with httpx.AsyncClient(timeout=0.5) as client:
                        r = await client.get(f"http://127.0.0.1:{admin_port}/ready")
                        return r.status_code == 200
                except httpx.HTTPError:
                    return False

            await eventually(ready, timeout=20, interval=0.1)
            async with httpx.AsyncClient() as client:
                assert (await client.get(f"http://127.0.0.1:{gateway_port}/")).status_code == 200
            shown = subprocess.run(
                [str(weir_bin), "status", "--admin-address", f"127.0.0.1:{admin_port}"],
                capture_output=True,
                text=True,
                timeout=30,
                check=True,
            ).stdout
            data = yaml.safe_load(shown)
            envoy_pid = data["dataPlane"]["envoyPid"]
            gateway = next(o for o in data["objects"] if o["kind"] == "Gateway")
            assert {c["type"]: c["status"] for c in gateway["status"]["conditions"]}["Programmed"] == "True"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert envoy_pid and not pid_alive(envoy_pid), "Envoy outlived weir"


class _HeldStart:
    """A files provider whose connection opens only when the test says so (as an API server might)."""

    def __init__(self, folder: Path) -> None:
        self.inner = FilesProvider([str(folder)])
        self.release = asyncio.Event()

    async def start(self) -> None:
        await self.release.wait()

    async def stop(self) -> None:
        pass

    def load(self) -> ProviderSnapshot:
        return self.inner.load()

    def watch(self) -> AsyncIterator[ProviderSnapshot]:
        return self.inner.watch()


async def test_admin_answers_before_anything_is_served(tmp_path: Path) -> None:
    """/healthz and /status answer and /ready says 503 while weir starts; /ready turns 200 once it serves.

    Whoever sees a route answer must be able to ask weir about it: the admin
    endpoint is up before Envoy is started, not after.
    """
    gateway_port = free_port()
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "gw.yaml").write_text(GATEWAY_HEAD.format(port=gateway_port))
    provider = _HeldStart(folder)
    controller = Controller(provider, Settings(), Options(admin_port=0))
    starting = asyncio.create_task(controller.start())
    try:
        await eventually(lambda: controller.admin_port is not None, timeout=10, interval=0.01)
        base = f"http://127.0.0.1:{controller.admin_port}"
        async with httpx.AsyncClient(timeout=5) as client:
            assert (await client.get(base + "/healthz")).status_code == 200
            assert (await client.get(base + "/ready")).status_code == 503
            status = (await client.get(base + "/status")).json()
            assert status["dataPlane"]["envoyPid"] is None
            assert status["dataPlane"]["configVersion"] is None
            provider.release.set()
            await asyncio.wait_for(starting, 30)
            await asyncio.wait_for(controller.ready.wait(), 20)
            assert (await client.get(base + "/ready")).status_code == 200
            envoy = controller.envoy
            assert envoy is not None and envoy.pid
            assert (await client.get(base + "/status")).json()["dataPlane"]["envoyPid"] == envoy.pid
    finally:
        provider.release.set()
        if not starting.done():
            starting.cancel()
        with contextlib.suppress(BaseException):
            await starting
        envoy_pid = controller.envoy.pid if controller.envoy is not None else None
        await controller.stop()
    assert envoy_pid is None or not pid_alive(envoy_pid), "Envoy outlived the controller"


async def test_gateway_addresses_choose_where_listeners_bind(weir: Weir) -> None:
    port = free_port("127.0.0.2")
    async with RecordingUpstream("a", host="127.0.0.2", port=port):
        text = services_manifests(weir.gateway_port, {"svc-a": ("127.0.0.2", port, 1)})
        text = text.replace(
            "  gatewayClassName: weir\n",
            "  gatewayClassName: weir\n  addresses: [{type: IPAddress, value: 127.0.0.7}]\n",
        )
        weir.write("web.yaml", text)
        await weir.start()
        async with httpx.AsyncClient() as client:
            response = await client.get(f"http://127.0.0.7:{weir.gateway_port}/")
            assert response.status_code == 200 and response.json()["upstream"] == "a"
            with pytest.raises(httpx.ConnectError):
                await client.get(weir.url("/"))  # nothing listens on 127.0.0.1 for this Gateway
        gateway = weir.status_of("Gateway", "default", "gw")
        assert gateway["addresses"] == [{"type": "IPAddress", "value": "127.0.0.7"}]
