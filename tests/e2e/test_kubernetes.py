"""weir in Kubernetes mode, end to end: objects through an API server → real Envoy → status back.

The API server is :class:`apiserver_double.ApiServerDouble` on
127.0.0.1, for what a real one cannot be made to do quickly (410 on demand,
Service backends with loopback endpoints, which a real API server refuses);
tests/kube runs weir against a real kube-apiserver (tests/kube/README.md says
which test uses which). It is reached by the real ``lightkube`` client; weir
runs in-process (``Controller`` + ``KubernetesProvider``) with its real Envoy;
upstreams are loopback servers and XBackend hostnames resolve through the DNS
stub.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from weir_harness import TEST_DENIED_CIDRS, eventually, pid_alive

from apiserver_double import ApiServerDouble, kinds_without
from weir.controller import Controller, Options
from weir.providers.kubernetes.provider import KubernetesOptions, KubernetesProvider
from weir.providers.kubernetes.watch import WatchTiming
from weir.testkit import (
    CertAuthority,
    DnsStub,
    RecordingUpstream,
    client_ssl_context,
    free_port,
    make_ca,
    server_ssl_context,
)
from weir.translate import Settings

GW = "gateway.networking.k8s.io/v1"
XB = "gateway.networking.x-k8s.io/v1alpha1"
API_HOST = "api.example.test"
OTHER_CONTROLLER = "example.com/other-controller"

#: Short timings: probing for a missing CRD every 0.3 s, reconnecting within 0.5 s.
TIMING = WatchTiming(reprobe_s=0.3, backoff_initial_s=0.05, backoff_max_s=0.5)


# ---------------------------------------------------------------- objects


def gateway_class() -> dict[str, Any]:
    return {
        "apiVersion": GW,
        "kind": "GatewayClass",
        "metadata": {"name": "weir"},
        "spec": {"controllerName": "weir.dev/gateway-controller"},
    }


def gateway(port: int) -> dict[str, Any]:
    return {
        "apiVersion": GW,
        "kind": "Gateway",
        "metadata": {"name": "gw", "namespace": "default"},
        "spec": {
            "gatewayClassName": "weir",
            "listeners": [{"name": "http", "port": port, "protocol": "HTTP"}],
        },
    }


def service(name: str, ip: str, port: int) -> list[dict[str, Any]]:
    """A Service and its EndpointSlice (one endpoint)."""
    return [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"ports": [{"name": "http", "port": port}]},
        },
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": f"{name}-1",
                "namespace": "default",
                "labels": {"kubernetes.io/service-name": name},
            },
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": port}],
            "endpoints": [{"addresses": [ip]}],
        },
    ]


def route(name: str, path: str, backend: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": GW,
        "kind": "HTTPRoute",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "parentRefs": [{"name": "gw"}],
            "rules": [
                {"matches": [{"path": {"type": "PathPrefix", "value": path}}], "backendRefs": [backend]}
            ],
        },
    }


def to_service(name: str, port: int) -> dict[str, Any]:
    return {"name": name, "port": port}


def to_xbackend(name: str) -> dict[str, Any]:
    return {"group": "gateway.networking.x-k8s.io", "kind": "XBackend", "name": name}


def xbackend(name: str, port: int, ca_pem: str) -> list[dict[str, Any]]:
    """An XBackend for API_HOST over verified TLS, and its CA ConfigMap."""
    return [
        {
            "apiVersion": XB,
            "kind": "XBackend",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "type": "ExternalHostname",
                "externalHostname": {"hostname": API_HOST},
                "port": {"port": port},
                "tls": {
                    "mode": "ServerOnly",
                    "validation": {
                        "hostname": API_HOST,
                        "caCertificateRefs": [{"group": "", "kind": "ConfigMap", "name": f"{name}-ca"}],
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"{name}-ca", "namespace": "default"},
            "data": {"ca.crt": ca_pem},
        },
    ]


def conditions(entry: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in entry.get("conditions", [])}


def status_of(api: ApiServerDouble, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any]:
    obj = api.get(api_version, kind, namespace, name)
    assert obj is not None, f"{kind} {namespace}/{name} is gone"
    status: dict[str, Any] = obj.get("status") or {}
    return status


def our_parent(status: dict[str, Any]) -> dict[str, Any] | None:
    return next(
        (p for p in status.get("parents", []) if p.get("controllerName") == "weir.dev/gateway-controller"),
        None,
    )


def status_writes(api: ApiServerDouble) -> list[str]:
    return [path for method, path in api.requests if method == "PATCH" and "/status" in path]


# ---------------------------------------------------------------- harness


class KubeWeir:
    """weir's controller with the Kubernetes provider, in this event loop."""

    def __init__(self, api: ApiServerDouble, kubeconfig: Path, dns: DnsStub, port: int) -> None:
        self.api = api
        self.gateway_port = port
        self.options = KubernetesOptions(kubeconfig=str(kubeconfig), timing=TIMING)
        self.settings = Settings(dns_resolvers=(dns.address,), egress_denied_cidrs=TEST_DENIED_CIDRS)
        self.provider: KubernetesProvider | None = None
        self.controller: Controller | None = None
        self.envoy_pids: list[int] = []

    def publish(self, namespace: str, name: str) -> None:
        """As ``--publish-service NAMESPACE/NAME``: the provider watches it, translation reads it."""
        self.options = dataclasses.replace(self.options, publish_service=(namespace, name))
        self.settings = dataclasses.replace(self.settings, publish_service=(namespace, name))

    async def start(self) -> Controller:
        self.provider = KubernetesProvider(self.options)
        self.controller = Controller(self.provider, self.settings, Options(admin_port=0))
        await self.controller.start()
        await asyncio.wait_for(self.controller.ready.wait(), 20)
        if self.controller.envoy is not None and self.controller.envoy.pid:
            self.envoy_pids.append(self.controller.envoy.pid)
        return self.controller

    async def stop(self) -> None:
        if self.controller is not None:
            await self.controller.stop()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.gateway_port}{path}"

    async def get(self, path: str) -> httpx.Response:
        async with httpx.AsyncClient(timeout=5) as client:
            return await client.get(self.url(path))

    async def served_by(self, path: str, upstream: str | None) -> bool:
        """Whether ``path`` is answered by ``upstream`` (``None``: 404, no route)."""
        response = await self.get(path)
        if upstream is None:
            return response.status_code == 404
        return response.status_code == 200 and response.json().get("upstream") == upstream


@pytest.fixture
def api() -> Iterator[ApiServerDouble]:
    server = ApiServerDouble(bookmark_interval_s=0.5)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def ca() -> CertAuthority:
    return make_ca("kubernetes e2e CA")


@pytest.fixture
async def weir(api: ApiServerDouble, tmp_path: Path, dns: DnsStub) -> AsyncIterator[KubeWeir]:
    harness = KubeWeir(api, api.write_kubeconfig(tmp_path / "kubeconfig"), dns, free_port())
    try:
        yield harness
    finally:
        await harness.stop()
        for pid in harness.envoy_pids:
            assert not pid_alive(pid), f"Envoy {pid} survived stop()"


def create(api: ApiServerDouble, *objects: dict[str, Any] | list[dict[str, Any]]) -> None:
    for item in objects:
        for obj in item if isinstance(item, list) else [item]:
            api.create(copy.deepcopy(obj))


# ---------------------------------------------------------------- tests


async def test_objects_from_the_api_serve_traffic_and_status_is_written_back(
    api: ApiServerDouble, weir: KubeWeir, dns: DnsStub, ca: CertAuthority
) -> None:
    svc_port = free_port("127.0.0.2")
    cert = ca.issue_server_cert(API_HOST)
    async with (
        RecordingUpstream("svc", host="127.0.0.2", port=svc_port),
        RecordingUpstream("api", host="127.0.0.3", ssl_context=server_ssl_context(cert)) as external,
    ):
        dns.set(API_HOST, ["127.0.0.3"])
        create(
            api,
            gateway_class(),
            gateway(weir.gateway_port),
            service("web", "127.0.0.2", svc_port),
            route("web", "/svc", to_service("web", svc_port)),
            route("api", "/v1", to_xbackend("api")),
            xbackend("api", external.port, ca.cert_pem),
        )
        # Another controller already has an entry in the route's status: it must survive weir's writes.
        theirs = {
            "parentRef": {"name": "their-gw"},
            "controllerName": OTHER_CONTROLLER,
            "conditions": [
                {
                    "type": "Accepted",
                    "status": "True",
                    "reason": "Accepted",
                    "message": "theirs",
                    "lastTransitionTime": "2024-01-01T00:00:00Z",
                    "observedGeneration": 1,
                }
            ],
        }
        api.patch_status(GW, "HTTPRoute", "default", "web", {"parents": [theirs]})
        await weir.start()

        assert await weir.served_by("/svc/x", "svc")
        assert await weir.served_by("/v1/models", "api")
        assert external.requests[-1].sni == API_HOST

        def written() -> bool:
            gw = status_of(api, GW, "Gateway", "default", "gw")
            web = status_of(api, GW, "HTTPRoute", "default", "web")
            ours = our_parent(web)
            return (
                conditions(gw).get("Programmed", ("", ""))[0] == "True"
                and ours is not None
                and conditions(ours).get("ResolvedRefs", ("", ""))[0] == "True"
            )

        await eventually(written, timeout=10)
        gw_obj = api.get(GW, "Gateway", "default", "gw")
        assert gw_obj is not None
        gw_status = gw_obj["status"]
        assert conditions(gw_status)["Accepted"] == ("True", "Accepted")
        assert all(
            c["observedGeneration"] == gw_obj["metadata"]["generation"] for c in gw_status["conditions"]
        )
        assert gw_status["listeners"][0]["attachedRoutes"] == 2
        assert conditions(status_of(api, GW, "GatewayClass", "", "weir"))["Accepted"] == ("True", "Accepted")
        web_status = status_of(api, GW, "HTTPRoute", "default", "web")
        assert web_status["parents"][0] == theirs, "another controller's entry was not kept as written"
        xb_status = status_of(api, XB, "XBackend", "default", "api")
        assert conditions(our_parent(xb_status) or {})["ResolvedRefs"] == ("True", "ResolvedRefs")

        # Converged: weir's writes come back as MODIFIED events and change nothing.
        await asyncio.sleep(0.5)
        api.clear_requests()
        await asyncio.sleep(1.5)
        assert status_writes(api) == []

        # An update through the API reroutes; observedGeneration follows.
        obj = api.get(GW, "HTTPRoute", "default", "web")
        assert obj is not None
        obj["spec"]["rules"][0]["matches"][0]["path"]["value"] = "/moved"
        api.replace(obj)
        await eventually(lambda: weir.served_by("/moved/x", "svc"), timeout=5)
        assert await weir.served_by("/svc/x", None)

        def observed_generation_2() -> bool:
            ours = our_parent(status_of(api, GW, "HTTPRoute", "default", "web"))
            return ours is not None and all(c["observedGeneration"] == 2 for c in ours["conditions"])

        await eventually(observed_generation_2, timeout=5)
        assert status_of(api, GW, "HTTPRoute", "default", "web")["parents"][0] == theirs

        # A deletion through the API removes the route.
        api.delete(GW, "HTTPRoute", "default", "api")
        await eventually(lambda: weir.served_by("/v1/models", None), timeout=5)


@contextlib.asynccontextmanager
async def two_upstreams(port: int) -> AsyncIterator[None]:
    """Recording upstreams ``a`` (127.0.0.2) and ``b`` (127.0.0.3) on ``port``."""
    async with (
        RecordingUpstream("a", host="127.0.0.2", port=port),
        RecordingUpstream("b", host="127.0.0.3", port=port),
    ):
        yield


def create_two_services(api: ApiServerDouble, weir: KubeWeir, port: int, *routes: str) -> None:
    """The class, weir's Gateway, Services ``a`` and ``b``, and a route ``/NAME`` → ``a`` per name."""
    create(
        api,
        gateway_class(),
        gateway(weir.gateway_port),
        service("a", "127.0.0.2", port),
        service("b", "127.0.0.3", port),
        *(route(name, f"/{name}", to_service("a", port)) for name in routes),
    )


async def test_watch_expiry_mid_stream_relists_without_losing_an_update(
    api: ApiServerDouble, weir: KubeWeir
) -> None:
    port = free_port("127.0.0.2")
    async with two_upstreams(port):
        create_two_services(api, weir, port, "one", "two")
        await weir.start()
        assert await weir.served_by("/one", "a") and await weir.served_by("/two", "a")
        assert weir.provider is not None
        lists = {w.kind.kind: w.lists for w in weir.provider.watchers}

        # Compaction cuts every open watch with 410 Gone; changes keep coming meanwhile.
        api.compact()
        obj = api.get(GW, "HTTPRoute", "default", "one")
        assert obj is not None
        obj["spec"]["rules"][0]["backendRefs"][0]["name"] = "b"
        api.replace(obj)
        api.delete(GW, "HTTPRoute", "default", "two")
        create(api, route("three", "/three", to_service("b", port)))

        await eventually(lambda: weir.served_by("/one", "b"), timeout=5)
        assert await weir.served_by("/two", None)
        assert await weir.served_by("/three", "b")
        relisted = {w.kind.kind: w.lists for w in weir.provider.watchers}
        assert relisted["HTTPRoute"] > lists["HTTPRoute"], "the 410 did not cause a relist"


async def test_api_server_restart_resumes_or_relists_and_traffic_never_stops(
    api: ApiServerDouble, weir: KubeWeir
) -> None:
    port = free_port("127.0.0.2")
    async with two_upstreams(port):
        create_two_services(api, weir, port, "one", "two", "three")
        await weir.start()
        assert weir.provider is not None
        http_routes = next(w for w in weir.provider.watchers if w.kind.kind == "HTTPRoute")
        before = http_routes.lists

        # 1. Down, changed behind weir's back, up again: the watch resumes from its version and the
        #    server replays what happened meanwhile (no relist).
        api.stop()
        assert await weir.served_by("/one", "a"), "Envoy stopped serving while the API server was down"
        obj = api.get(GW, "HTTPRoute", "default", "one")
        assert obj is not None
        obj["spec"]["rules"][0]["backendRefs"][0]["name"] = "b"
        api.replace(obj)
        api.delete(GW, "HTTPRoute", "default", "two")
        await asyncio.sleep(0.3)  # weir notices, backs off
        api.start()
        await eventually(lambda: weir.served_by("/one", "b"), timeout=5)
        assert await weir.served_by("/two", None)
        assert http_routes.lists == before

        # 2. The same with history compacted while down: resuming answers 410 Gone, the relist
        #    replaces the cache, so the deletion in the gap is seen.
        api.stop()
        api.delete(GW, "HTTPRoute", "default", "three")
        create(api, route("four", "/four", to_service("b", port)))
        api.compact()
        api.start()
        await eventually(lambda: weir.served_by("/three", None), timeout=5)
        assert await weir.served_by("/four", "b")
        assert http_routes.lists > before


async def test_xbackend_crd_absent_then_installed(
    tmp_path: Path, dns: DnsStub, ca: CertAuthority, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="weir.kubernetes")
    api = ApiServerDouble(kinds=kinds_without("XBackend"), bookmark_interval_s=0.5)
    api.start()
    harness = KubeWeir(api, api.write_kubeconfig(tmp_path / "kubeconfig"), dns, free_port())
    cert = ca.issue_server_cert(API_HOST)
    try:
        async with RecordingUpstream(
            "api", host="127.0.0.3", ssl_context=server_ssl_context(cert)
        ) as external:
            dns.set(API_HOST, ["127.0.0.3"])
            create(
                api, gateway_class(), gateway(harness.gateway_port), route("api", "/v1", to_xbackend("api"))
            )
            await harness.start()
            response = await harness.get("/v1/models")
            assert response.status_code == 500

            def refused() -> bool:
                ours = our_parent(status_of(api, GW, "HTTPRoute", "default", "api"))
                return ours is not None and conditions(ours).get("ResolvedRefs") == ("False", "InvalidKind")

            await eventually(refused, timeout=5)
            await asyncio.sleep(1.0)  # several probes: still one log line, and weir does not spin
            lines = [r.getMessage() for r in caplog.records if "is not installed" in r.getMessage()]
            assert lines == [
                "XBackend (gateway.networking.x-k8s.io/v1alpha1) is not installed; routes that reference "
                "it get ResolvedRefs=False/InvalidKind; install the experimental Gateway API CRDs to use it"
            ]
            probes = [
                p for m, p in api.requests if m == "GET" and "/xbackends" in p and "definitions/" not in p
            ]
            assert 2 <= len(probes) <= 10, probes

            api.install_crd("gateway.networking.x-k8s.io", "v1alpha1", "xbackends", "XBackend")
            create(api, xbackend("api", external.port, ca.cert_pem))
            started = time.monotonic()
            await eventually(lambda: harness.served_by("/v1/models", "api"), timeout=5)
            assert time.monotonic() - started < 3

            def resolved() -> bool:
                ours = our_parent(status_of(api, GW, "HTTPRoute", "default", "api"))
                return ours is not None and conditions(ours).get("ResolvedRefs") == ("True", "ResolvedRefs")

            await eventually(resolved, timeout=5)
    finally:
        await harness.stop()
        api.stop()
        for pid in harness.envoy_pids:
            assert not pid_alive(pid)


async def test_secret_data_is_fetched_when_a_reference_appears(
    api: ApiServerDouble, weir: KubeWeir, ca: CertAuthority
) -> None:
    """Memory: Secrets nobody references are held without data; an HTTPS listener added later
    brings its certificate's data in, and Envoy serves it."""
    port = free_port("127.0.0.2")
    tls_port = free_port()
    cert = ca.issue_server_cert("gw.example.test")
    filler = base64.b64encode(b"x" * 32768).decode()
    async with RecordingUpstream("svc", host="127.0.0.2", port=port):
        create(api, gateway_class(), gateway(weir.gateway_port), service("web", "127.0.0.2", port))
        create(api, route("web", "/", to_service("web", port)))
        for i in range(20):
            create(api, secret(f"unused-{i}", {"blob": filler}))
        create(api, secret("gw-tls", {"tls.crt": _b64(cert.chain_pem), "tls.key": _b64(cert.key_pem)}))
        await weir.start()
        assert weir.provider is not None
        stats = weir.provider.cache_stats()
        assert (stats.elided, stats.data_bytes) == (21, 0), stats

        obj = api.get(GW, "Gateway", "default", "gw")
        assert obj is not None
        obj["spec"]["listeners"].append(
            {
                "name": "https",
                "port": tls_port,
                "protocol": "HTTPS",
                "hostname": "gw.example.test",
                "tls": {"certificateRefs": [{"name": "gw-tls"}]},
            }
        )
        api.replace(obj)

        async def https_ok() -> bool:
            try:
                async with httpx.AsyncClient(verify=client_ssl_context(ca), timeout=5) as client:
                    response = await client.get(
                        f"https://127.0.0.1:{tls_port}/",
                        headers={"host": "gw.example.test"},
                        extensions={"sni_hostname": "gw.example.test"},
                    )
                    return response.status_code == 200 and response.json()["upstream"] == "svc"
            except httpx.HTTPError:
                return False

        await eventually(https_ok, timeout=5)
        stats = weir.provider.cache_stats()
        assert stats.elided == 20
        assert 0 < stats.data_bytes < 16384, stats  # one certificate and key, none of the 640 KiB of filler


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def secret(name: str, data: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": "default"},
        "type": "Opaque",
        "data": data,
    }


async def test_gateway_addresses_follow_the_service_in_front_of_weir(
    api: ApiServerDouble, weir: KubeWeir
) -> None:
    create(
        api,
        gateway_class(),
        gateway(weir.gateway_port),
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "weir", "namespace": "weir-system"},
            "spec": {
                "type": "LoadBalancer",
                "clusterIP": "10.96.0.10",
                "ports": [{"name": "http", "port": 80}],
            },
        },
    )
    weir.publish("weir-system", "weir")
    await weir.start()

    def addresses() -> list[dict[str, str]]:
        found: list[dict[str, str]] = status_of(api, GW, "Gateway", "default", "gw").get("addresses", [])
        return found

    # No load balancer yet: the cluster IP; then the load balancer's address when it is provisioned.
    await eventually(lambda: addresses() == [{"type": "IPAddress", "value": "10.96.0.10"}], timeout=5)
    api.patch_status(
        "v1", "Service", "weir-system", "weir", {"loadBalancer": {"ingress": [{"ip": "192.0.2.10"}]}}
    )
    await eventually(lambda: addresses() == [{"type": "IPAddress", "value": "192.0.2.10"}], timeout=5)
    api.patch_status(
        "v1",
        "Service",
        "weir-system",
        "weir",
        {"loadBalancer": {"ingress": [{"hostname": "lb.example.com"}]}},
    )
    await eventually(lambda: addresses() == [{"type": "Hostname", "value": "lb.example.com"}], timeout=5)
    # Listeners still bind where weir runs: the load balancer forwards there.
    assert (await weir.get("/")).status_code == 404


async def test_an_endpoint_selector_xbackend_is_served_through_the_service_weir_makes(
    api: ApiServerDouble, weir: KubeWeir
) -> None:
    """Upstream main's EndpointSelector on Kubernetes: weir creates the XBackend's headless Service;
    its EndpointSlice (written here, as Kubernetes' EndpointSlice controller would, with a loopback
    address a real API server refuses) is where requests go, through real Envoy; status is in the
    main shape. A Pod that stops being ready leaves the slice, and the rotation."""
    port = free_port("127.0.0.2")
    async with two_upstreams(port):
        create(
            api,
            gateway_class(),
            gateway(weir.gateway_port),
            route("pods", "/pods", to_xbackend("pods")),
            {
                "apiVersion": XB,
                "kind": "XBackend",
                "metadata": {"name": "pods", "namespace": "default"},
                "spec": {
                    "type": "EndpointSelector",
                    "endpointSelector": {"matchLabels": {"app": "web"}},
                    "port": {"number": port},
                },
            },
        )
        await weir.start()

        def made() -> list[dict[str, Any]]:
            return [
                s for s in api.list("v1", "Service", "default") if s["metadata"]["name"].startswith("pods-")
            ]

        (svc,), _ = await eventually(made, timeout=5)
        assert svc["metadata"]["labels"] == {"weir.dev/xbackend": "pods"}
        assert svc["spec"]["selector"] == {"app": "web"} and svc["spec"]["clusterIP"] == "None"
        name = svc["metadata"]["name"]

        def endpoint_slice(*ready: tuple[str, bool]) -> dict[str, Any]:
            return {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {
                    "name": f"{name}-abcde",
                    "namespace": "default",
                    "labels": {"kubernetes.io/service-name": name, "weir.dev/xbackend": "pods"},
                },
                "addressType": "IPv4",
                "ports": [{"name": "backend", "port": port, "protocol": "TCP"}],
                "endpoints": [{"addresses": [ip], "conditions": {"ready": ok}} for ip, ok in ready],
            }

        api.create(endpoint_slice(("127.0.0.2", True), ("127.0.0.3", True)))

        async def both() -> bool:
            seen = set()
            for _ in range(12):
                response = await weir.get("/pods/x")
                if response.status_code == 200:
                    seen.add(response.json().get("upstream"))
            return seen == {"a", "b"}

        await eventually(both, timeout=10)
        xb_status = status_of(api, XB, "XBackend", "default", "pods")
        assert "parents" not in xb_status
        [ours] = [a for a in xb_status["ancestors"] if a["controllerName"] == "weir.dev/gateway-controller"]
        assert conditions(ours)["Accepted"] == ("True", "Accepted")

        obj = api.get("discovery.k8s.io/v1", "EndpointSlice", "default", f"{name}-abcde")
        assert obj is not None
        obj["endpoints"][1]["conditions"]["ready"] = False
        api.replace(obj)

        async def only_a() -> bool:
            return all([await weir.served_by("/pods/x", "a") for _ in range(8)])

        await eventually(only_a, timeout=5)
