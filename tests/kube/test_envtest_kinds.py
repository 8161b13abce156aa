"""ListenerSet, TCPRoute v1 and UDPRoute v1 on a real API server, with exactly deploy/'s RBAC:
weir lists and watches them, writes their status through the status subresource, and serves
them through real Envoy.

HTTP and TCP traffic go to XBackends that a DNS stub resolves to loopback upstreams. UDPRoutes
accept Services only, and the API server refuses loopback addresses in EndpointSlices, so the
UDPRoute here is shown by its status and by Envoy binding its UDP listener (a datagram is
never sent: its backend address is not on this machine); tests/e2e/test_udp.py sends real
datagrams through Envoy from files.
"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import httpx
from envtest import Cluster
from kube_harness import (
    API_HOST,
    GW,
    TIMING,
    admin_get,
    conditions,
    eventually,
    gateway_class,
    metric,
    our_parent,
    route,
    running_weir,
    to_xbackend,
    xbackend,
)
from kube_world import Objects

from echo_tcp import EchoServer
from weir.providers.kubernetes.provider import KubernetesOptions
from weir.testkit import DnsStub, RecordingUpstream, free_port

DB_HOST = "db.example.test"
#: An EndpointSlice address the API server accepts (not loopback); nothing is sent to it.
UDP_BACKEND_IP = "192.0.2.53"
#: The routes of :func:`manifests`, by kind and name.
ROUTES = (("HTTPRoute", "web"), ("HTTPRoute", "on-set"), ("TCPRoute", "db"), ("UDPRoute", "dns"))


def udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def udp_bound(port: int) -> bool:
    """Whether something (Envoy) holds UDP ``127.0.0.1:port`` on the wildcard or loopback."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return True
        return False


def manifests(ns: str, ports: dict[str, int], upstream: int, echo: int) -> list[dict[str, Any]]:
    """A Gateway (one HTTP listener, ListenerSets allowed from its namespace), a ListenerSet in
    the same namespace adding HTTP, TCP and UDP listeners, and one route of each kind on it."""
    tcp_backend = xbackend(ns, "db", DB_HOST, echo)
    tcp_backend["spec"]["protocol"] = "TCP"
    return [
        gateway_class(ns),
        {
            "apiVersion": GW,
            "kind": "Gateway",
            "metadata": {"name": "gw", "namespace": ns},
            "spec": {
                "gatewayClassName": ns,
                "allowedListeners": {"namespaces": {"from": "Same"}},
                "listeners": [{"name": "http", "port": ports["gateway"], "protocol": "HTTP"}],
            },
        },
        {
            "apiVersion": GW,
            "kind": "ListenerSet",
            "metadata": {"name": "team", "namespace": ns},
            "spec": {
                "parentRef": {"name": "gw"},
                "listeners": [
                    {"name": "web", "port": ports["web"], "protocol": "HTTP"},
                    {"name": "db", "port": ports["db"], "protocol": "TCP"},
                    {"name": "dns", "port": ports["dns"], "protocol": "UDP"},
                ],
            },
        },
        xbackend(ns, "api", API_HOST, upstream),
        tcp_backend,
        route(ns, "web", "/", to_xbackend("api")),
        {
            **route(ns, "on-set", "/", to_xbackend("api")),
            "spec": {
                "parentRefs": [{"kind": "ListenerSet", "name": "team", "sectionName": "web"}],
                "rules": [{"backendRefs": [to_xbackend("api")]}],
            },
        },
        {
            "apiVersion": GW,
            "kind": "TCPRoute",
            "metadata": {"name": "db", "namespace": ns},
            "spec": {
                "parentRefs": [{"kind": "ListenerSet", "name": "team", "sectionName": "db"}],
                "rules": [{"backendRefs": [to_xbackend("db")]}],
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "resolver", "namespace": ns},
            "spec": {"ports": [{"name": "dns", "port": 53, "protocol": "UDP"}]},
        },
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": "resolver-1",
                "namespace": ns,
                "labels": {"kubernetes.io/service-name": "resolver"},
            },
            "addressType": "IPv4",
            "ports": [{"name": "dns", "port": 5353, "protocol": "UDP"}],
            "endpoints": [{"addresses": [UDP_BACKEND_IP]}],
        },
        {
            "apiVersion": GW,
            "kind": "UDPRoute",
            "metadata": {"name": "dns", "namespace": ns},
            "spec": {
                "parentRefs": [{"kind": "ListenerSet", "name": "team", "sectionName": "dns"}],
                "rules": [{"backendRefs": [{"name": "resolver", "port": 53}]}],
            },
        },
    ]


def listener_entries(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {entry["name"]: entry for entry in status.get("listeners", [])}


async def test_listenerset_tcproute_udproute_served_and_reported_with_deploys_rbac(
    cluster: Cluster, objects: Objects, weir_kubeconfig: Path
) -> None:
    ns = objects.namespace
    ports = {"gateway": free_port(), "web": free_port(), "db": free_port(), "dns": udp_port()}
    async with (
        DnsStub() as dns,
        RecordingUpstream("api", host="127.0.0.2") as upstream,
        EchoServer("db", host="127.0.0.3") as echo,
    ):
        dns.set(API_HOST, ["127.0.0.2"])
        dns.set(DB_HOST, ["127.0.0.3"])
        objects.apply(*manifests(ns, ports, upstream.port, echo.port))
        options = KubernetesOptions(kubeconfig=str(weir_kubeconfig), timing=TIMING)
        async with running_weir(options, dns) as (controller, _provider):

            def admin(kind: str, name: str) -> dict[str, Any]:
                return cluster.admin.status(GW, kind, ns, name)

            def programmed() -> bool:
                ls = admin("ListenerSet", "team")
                parents = [our_parent(admin(kind, name)) or {} for kind, name in ROUTES]
                return conditions(ls).get("Programmed", ("", ""))[0] == "True" and all(
                    conditions(p).get("ResolvedRefs", ("", ""))[0] == "True" for p in parents
                )

            await eventually(programmed, timeout=20)

            # The ListenerSet's own conditions and one entry per listener, with its routes.
            ls = admin("ListenerSet", "team")
            assert conditions(ls)["Accepted"] == ("True", "Accepted")
            assert conditions(ls)["Programmed"] == ("True", "Programmed")
            entries = listener_entries(ls)
            assert set(entries) == {"web", "db", "dns"}
            expected_kinds = {"web": ["HTTPRoute", "GRPCRoute"], "db": ["TCPRoute"], "dns": ["UDPRoute"]}
            for name, entry in entries.items():
                assert entry["attachedRoutes"] == 1, entry
                got = conditions(entry)
                assert got["Accepted"][0] == got["ResolvedRefs"][0] == got["Programmed"][0] == "True"
                assert [k["kind"] for k in entry["supportedKinds"]] == expected_kinds[name]
            # The Gateway counts the set; its own listener keeps its own route only.
            gw = admin("Gateway", "gw")
            assert gw["attachedListenerSets"] == 1
            assert conditions(gw)["Programmed"] == ("True", "Programmed")
            assert {e["name"]: e["attachedRoutes"] for e in gw["listeners"]} == {"http": 1}
            # Every route reports the parent it named, ListenerSet included.
            for kind, name in ROUTES:
                parent = our_parent(admin(kind, name))
                assert parent is not None, (kind, name)
                assert conditions(parent)["Accepted"] == ("True", "Accepted"), (kind, parent)
                assert conditions(parent)["ResolvedRefs"] == ("True", "ResolvedRefs"), (kind, parent)
                expected = {"gw"} if name == "web" else {"team"}
                assert {parent["parentRef"]["name"]} == expected

            # Traffic: HTTP on the Gateway's and the set's listener, bytes through the TCP listener.
            async with httpx.AsyncClient(timeout=5) as client:
                on_gateway = await client.get(f"http://127.0.0.1:{ports['gateway']}/a")
                on_set = await client.get(f"http://127.0.0.1:{ports['web']}/b")
            assert on_gateway.status_code == on_set.status_code == 200
            assert [r.path for r in upstream.requests][-2:] == ["/a", "/b"]
            reader, writer = await asyncio.open_connection("127.0.0.1", ports["db"])
            try:
                writer.write(b"ping over the listener set")
                await writer.drain()
                answer = await asyncio.wait_for(reader.readexactly(26), 10)
            finally:
                writer.close()
            assert answer == b"ping over the listener set"
            assert udp_bound(ports["dns"]), "Envoy did not bind the ListenerSet's UDP listener"

            text = (await admin_get(controller, "/metrics")).text
            for kind in ("ListenerSet", "TCPRoute", "UDPRoute"):
                assert metric(text, "weir_kubernetes_lists_total", kind=kind) >= 1
                assert metric(text, "weir_kubernetes_status_writes_total", kind=kind, result="written") >= 1

            # A watch event (not a relist) takes the TCPRoute away: the set's listener says so.
            objects.api.delete(GW, "TCPRoute", ns, "db")

            def detached() -> bool:
                return listener_entries(admin("ListenerSet", "team"))["db"]["attachedRoutes"] == 0

            await eventually(detached, timeout=15)


async def test_a_listenerset_from_another_namespace_waits_for_the_gateway_to_allow_it(
    cluster: Cluster, objects: Objects, weir_kubeconfig: Path
) -> None:
    """The Gateway allows sets from its own namespace only: the other team's set is refused
    (``NotAllowed``) and its route has no parent; the Gateway's owner edits ``allowedListeners``
    and the watch alone brings the set in, with traffic through its listener."""
    ns = objects.namespace
    team = f"{ns}-team"
    objects.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": team}})
    ports = {"gateway": free_port(), "web": free_port()}
    async with DnsStub() as dns, RecordingUpstream("api", host="127.0.0.2") as upstream:
        dns.set(API_HOST, ["127.0.0.2"])
        gw = {
            "apiVersion": GW,
            "kind": "Gateway",
            "metadata": {"name": "gw", "namespace": ns},
            "spec": {
                "gatewayClassName": ns,
                "allowedListeners": {"namespaces": {"from": "Same"}},
                "listeners": [{"name": "http", "port": ports["gateway"], "protocol": "HTTP"}],
            },
        }
        objects.apply(
            gateway_class(ns),
            gw,
            {
                "apiVersion": GW,
                "kind": "ListenerSet",
                "metadata": {"name": "team", "namespace": team},
                "spec": {
                    "parentRef": {"name": "gw", "namespace": ns},
                    "listeners": [{"name": "web", "port": ports["web"], "protocol": "HTTP"}],
                },
            },
            xbackend(team, "api", API_HOST, upstream.port),
            {
                "apiVersion": GW,
                "kind": "HTTPRoute",
                "metadata": {"name": "web", "namespace": team},
                "spec": {
                    "parentRefs": [{"kind": "ListenerSet", "name": "team"}],
                    "rules": [{"backendRefs": [to_xbackend("api")]}],
                },
            },
        )
        options = KubernetesOptions(kubeconfig=str(weir_kubeconfig), timing=TIMING)
        async with running_weir(options, dns):

            def set_condition(kind: str) -> tuple[str, str]:
                status = cluster.admin.status(GW, "ListenerSet", team, "team")
                return conditions(status).get(kind, ("", ""))

            await eventually(lambda: set_condition("Accepted") == ("False", "NotAllowed"), timeout=20)
            route_parent = our_parent(cluster.admin.status(GW, "HTTPRoute", team, "web")) or {}
            assert conditions(route_parent)["Accepted"] == ("False", "NoMatchingParent")
            assert cluster.admin.status(GW, "Gateway", ns, "gw").get("attachedListenerSets", 0) == 0

            gw["spec"]["allowedListeners"] = {"namespaces": {"from": "All"}}
            objects.apply(gw)
            await eventually(lambda: set_condition("Programmed") == ("True", "Programmed"), timeout=20)
            assert set_condition("Accepted") == ("True", "Accepted")
            assert cluster.admin.status(GW, "Gateway", ns, "gw")["attachedListenerSets"] == 1

            def route_accepted() -> bool:
                parent = our_parent(cluster.admin.status(GW, "HTTPRoute", team, "web")) or {}
                return conditions(parent).get("Accepted") == ("True", "Accepted")

            await eventually(route_accepted, timeout=15)
            async with httpx.AsyncClient(timeout=5) as client:
                response = await client.get(f"http://127.0.0.1:{ports['web']}/team")
            assert response.status_code == 200 and upstream.requests[-1].path == "/team"
