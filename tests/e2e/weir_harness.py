"""A weir controller running in the test's event loop, over a folder of manifests.

Everything binds to 127.0.0.0/8. ``stop()`` stops Envoy by PID (through the
controller) and the test checks that the PID is gone.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import textwrap
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx

from weir.controller import Controller, Options
from weir.providers.files.provider import FilesProvider
from weir.testkit import DnsStub
from weir.translate import Settings

GATEWAY_HEAD = """\
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
  listeners: [{{name: http, port: {port}, protocol: HTTP}}]
"""


#: What tests deny by default: one loopback address, so that the guard is in
#: place (and testable, see test_egress.py) while test upstreams on the rest of
#: 127.0.0.0/8 stay reachable. weir's real default denies all of loopback.
TEST_DENIED_CIDRS = ("127.0.0.66/32",)
FORBIDDEN_IP = "127.0.0.66"

XB = "gateway.networking.x-k8s.io"


def xbackend(name: str, hostname: str, port: int, protocol: str | None = None) -> str:
    """An XBackend document in namespace default (plaintext), ``---`` first."""
    text = (
        f"---\napiVersion: {XB}/v1alpha1\nkind: XBackend\n"
        f"metadata: {{name: {name}, namespace: default}}\n"
        f"spec:\n  type: ExternalHostname\n  externalHostname: {{hostname: {hostname}}}\n"
        f"  port: {{port: {port}}}\n"
    )
    return text + (f"  protocol: {protocol}\n" if protocol else "")


def route_to(kind: str, backend: str, *, rule: str = "", spec: str = "") -> str:
    """A ``kind`` route (``gateway.networking.k8s.io/v1``) on Gateway gw, one rule to XBackend ``backend``.

    ``rule`` and ``spec`` are more YAML lines for the rule (indented 4) and the spec (indented 2).
    """
    return (
        f"---\napiVersion: gateway.networking.k8s.io/v1\nkind: {kind}\n"
        f"metadata: {{name: {kind.lower()}, namespace: default}}\n"
        f"spec:\n  parentRefs: [{{name: gw}}]\n{spec}  rules:\n"
        f"  - backendRefs: [{{group: {XB}, kind: XBackend, name: {backend}}}]\n{rule}"
    )


def routes(port: int, *xbackends: tuple[str, str], gateway_port: int) -> str:
    """A Gateway, one HTTPRoute with a rule ``/NAME`` per XBackend, and the XBackends (plaintext)."""
    text = GATEWAY_HEAD.format(port=gateway_port) + (
        "---\napiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\n"
        "metadata: {name: egress, namespace: default}\nspec:\n  parentRefs: [{name: gw}]\n  rules:\n"
    )
    for name, _ in xbackends:
        text += (
            f"  - matches: [{{path: {{value: /{name}}}}}]\n"
            f"    backendRefs: [{{group: {XB}, kind: XBackend, name: {name}}}]\n"
        )
    return text + "".join(xbackend(name, hostname, port) for name, hostname in xbackends)


def services_manifests(port: int, backends: dict[str, tuple[str, int, int]], path: str = "/") -> str:
    """One route to Services; ``backends`` maps a Service name to (ip, port, weight)."""
    text = (
        GATEWAY_HEAD.format(port=port)
        + f"""\
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: web, namespace: default}}
spec:
  parentRefs: [{{name: gw}}]
  rules:
  - matches: [{{path: {{type: PathPrefix, value: {path}}}}}]
    backendRefs:
"""
    )
    for svc, (_, svc_port, weight) in backends.items():
        text += f"    - {{name: {svc}, port: {svc_port}, weight: {weight}}}\n"
    for svc, (ip, svc_port, _) in backends.items():
        text += f"""\
---
apiVersion: v1
kind: Service
metadata: {{name: {svc}, namespace: default}}
spec: {{ports: [{{name: http, port: {svc_port}}}]}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: {svc}-1, namespace: default, labels: {{kubernetes.io/service-name: {svc}}}}}
addressType: IPv4
ports: [{{name: http, port: {svc_port}}}]
endpoints: [{{addresses: [{ip}]}}]
"""
    return text


def indent_pem(pem: str, spaces: int) -> str:
    return textwrap.indent(pem, " " * spaces)


class Weir:
    def __init__(
        self,
        folder: Path,
        dns: DnsStub | None,
        gateway_port: int,
        *,
        egress_denied_cidrs: tuple[str, ...] | None = TEST_DENIED_CIDRS,
    ) -> None:
        """``egress_denied_cidrs``: the egress guard's denied networks. The default,
        :data:`TEST_DENIED_CIDRS`, lets external hostnames resolve to the loopback
        test upstreams except 127.0.0.66; ``()`` denies nothing; ``None`` keeps
        weir's default denied networks (loopback included) and lets GatewayClass
        parameters decide."""
        self.folder = folder
        self.gateway_port = gateway_port
        self.settings = Settings(dns_resolvers=(dns.address,) if dns else ())
        if egress_denied_cidrs is not None:
            self.settings = dataclasses.replace(self.settings, egress_denied_cidrs=egress_denied_cidrs)
        self.controller: Controller | None = None
        self.envoy_pids: list[int] = []

    def write(self, name: str, text: str) -> Path:
        path = self.folder / name
        tmp = path.with_name("." + path.name + ".tmp")
        tmp.write_text(text)
        os.replace(tmp, path)  # atomic, as editors and kubectl-like tools do
        return path

    async def start(self, *, wait_ready: bool = True) -> Controller:
        """Start the controller; with ``wait_ready``, wait until every listener is programmed."""
        self.controller = Controller(FilesProvider([str(self.folder)]), self.settings, Options(admin_port=0))
        await self.controller.start()
        if wait_ready:
            await asyncio.wait_for(self.controller.ready.wait(), 20)
        return self.controller

    @property
    def envoy_pid(self) -> int:
        assert self.controller is not None and self.controller.envoy is not None
        pid = self.controller.envoy.pid
        assert pid is not None
        if pid not in self.envoy_pids:
            self.envoy_pids.append(pid)
        return pid

    async def stop(self) -> None:
        if self.controller is not None:
            if self.controller.envoy is not None and self.controller.envoy.pid:
                self.envoy_pids.append(self.controller.envoy.pid)
            await self.controller.stop()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.gateway_port}{path}"

    def status_of(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
        assert self.controller is not None
        for key, status in self.controller.statuses().items():
            if (key.kind, key.namespace, key.name) == (kind, namespace, name):
                return status
        raise KeyError(f"{kind} {namespace}/{name} has no status")

    async def admin_status(self) -> dict[str, Any]:
        assert self.controller is not None and self.controller.admin_port
        async with httpx.AsyncClient() as client:
            response = await client.get(f"http://127.0.0.1:{self.controller.admin_port}/status")
            response.raise_for_status()
            data: dict[str, Any] = response.json()
            return data


@asynccontextmanager
async def stopped_after(harness: Weir) -> AsyncIterator[Weir]:
    """``harness`` for a test's fixture; afterwards stopped, and every Envoy it ran checked gone."""
    try:
        yield harness
    finally:
        await harness.stop()
        for pid in harness.envoy_pids:
            assert not pid_alive(pid), f"Envoy {pid} survived stop()"


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is gone for our purposes once reaped,
    # and the controller reaps its children.
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


async def eventually(
    check: Callable[[], Any], timeout: float = 5.0, interval: float = 0.02
) -> tuple[Any, float]:
    """Call ``check`` (sync or async) until it returns a truthy value; return it and the time taken."""
    start = time.monotonic()
    last: Any = None
    while True:
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return result, time.monotonic() - start
        last = result
        if time.monotonic() - start > timeout:
            raise AssertionError(f"condition not met within {timeout} s (last: {last!r})")
        await asyncio.sleep(interval)
