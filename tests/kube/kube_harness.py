"""Helpers for tests/kube: objects to apply, waiting for a condition, weir in-process with Envoy,
its admin endpoint and metrics."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx

from weir.controller import Controller, Options
from weir.metrics import parse
from weir.providers.kubernetes.provider import WATCHED, KubernetesOptions, KubernetesProvider
from weir.providers.kubernetes.watch import WatchTiming
from weir.testkit import DnsStub
from weir.translate import Settings

GW = "gateway.networking.k8s.io/v1"
XB = "gateway.networking.x-k8s.io/v1alpha1"
CONTROLLER = "weir.dev/gateway-controller"
#: The external hostname of test XBackends (a DNS stub resolves it to a loopback address).
API_HOST = "api.example.test"


async def eventually(check: Callable[[], Any], timeout: float = 10.0, every: float = 0.1) -> Any:
    """``check()`` until it returns something true (which is returned) or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"not true after {timeout} s: {check}")
        await asyncio.sleep(every)


def conditions(entry: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in entry.get("conditions", [])}


def gateway_class(name: str) -> dict[str, Any]:
    return {
        "apiVersion": GW,
        "kind": "GatewayClass",
        "metadata": {"name": name},
        "spec": {"controllerName": CONTROLLER},
    }


def gateway(namespace: str, class_name: str, port: int, name: str = "gw") -> dict[str, Any]:
    return {
        "apiVersion": GW,
        "kind": "Gateway",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "gatewayClassName": class_name,
            "listeners": [{"name": "http", "port": port, "protocol": "HTTP"}],
        },
    }


def service(namespace: str, name: str, ip: str, port: int) -> list[dict[str, Any]]:
    """A Service and its EndpointSlice (one endpoint): no controller makes the slice here."""
    return [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"ports": [{"name": "http", "port": port}]},
        },
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": f"{name}-1",
                "namespace": namespace,
                "labels": {"kubernetes.io/service-name": name},
            },
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": port}],
            "endpoints": [{"addresses": [ip]}],
        },
    ]


def route(
    namespace: str, name: str, path: str, backend: dict[str, Any], parent: str = "gw"
) -> dict[str, Any]:
    return {
        "apiVersion": GW,
        "kind": "HTTPRoute",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "parentRefs": [{"name": parent}],
            "rules": [
                {"matches": [{"path": {"type": "PathPrefix", "value": path}}], "backendRefs": [backend]}
            ],
        },
    }


def our_parent(status: dict[str, Any]) -> dict[str, Any] | None:
    return next((p for p in status.get("parents", []) if p.get("controllerName") == CONTROLLER), None)


def xbackend(namespace: str, name: str, hostname: str, port: int) -> dict[str, Any]:
    """An XBackend for ``hostname:port`` over plain HTTP."""
    return {
        "apiVersion": XB,
        "kind": "XBackend",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "type": "ExternalHostname",
            "externalHostname": {"hostname": hostname},
            "port": {"port": port},
        },
    }


def to_xbackend(name: str) -> dict[str, Any]:
    return {"group": "gateway.networking.x-k8s.io", "kind": "XBackend", "name": name}


KINDS = {k.kind: k for k in WATCHED}
TIMING = WatchTiming(reprobe_s=0.5, backoff_initial_s=0.1, backoff_max_s=1.0)
OTHER = "example.com/other-controller"


@contextlib.asynccontextmanager
async def running_weir(
    options: KubernetesOptions, dns: DnsStub | None = None
) -> AsyncIterator[tuple[Controller, KubernetesProvider]]:
    settings = Settings(
        egress_denied_cidrs=(),
        dns_resolvers=(dns.address,) if dns else (),
        gateway_services=options.gateway_services,  # one flag sets both, as in `weir run`
    )
    provider = KubernetesProvider(options)
    controller = Controller(provider, settings, Options(admin_port=0))
    await controller.start()
    try:
        yield controller, provider
    finally:
        await controller.stop()


async def admin_get(controller: Controller, path: str) -> httpx.Response:
    async with httpx.AsyncClient(timeout=5) as client:
        return await client.get(f"http://127.0.0.1:{controller.admin_port}{path}")


def metric(text: str, name: str, **labels: str) -> float:
    for family in parse(text):
        for sample in family.samples:
            if family.name + sample.name_suffix == name and all(
                sample.labels.get(k) == v for k, v in labels.items()
            ):
                return sample.value
    raise KeyError(name, labels)
