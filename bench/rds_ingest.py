"""How long Envoy takes to take in a change of one virtual host among N, by the way routes reach it.

Envoy alone, no weir: a minimal delta ADS server in this process serves one HTTP listener whose
routes arrive in one of these ways, every virtual host ``hK.example`` answering ``/`` with a
direct response whose body names its generation:

``rds``
    one RouteConfiguration holding all N virtual hosts (what weir sent before); an edit resends it.
``vhds``
    the RouteConfiguration holds none; the N virtual hosts come over VHDS (delta only), named
    ``<route configuration>/<host>``; an edit sends the one virtual host.
``srds``
    scoped routes keyed on the ``:authority`` host (port dropped): one scope and one
    RouteConfiguration per host; an edit resends one small RouteConfiguration.

For each mode and N it reports: start (first push → a sample of hosts served), and for several
edits of one random host, push → Envoy's ACK and push → the new body served (polled over HTTP on
loopback), plus Envoy's RSS. Run: ``python bench/rds_ingest.py --n 1000 10000``. The machine may be
shared; compare modes measured in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import itertools
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
from envoy.config.route.v3 import route_components_pb2, route_pb2, scoped_route_pb2
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2
from google.protobuf import any_pb2

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from weir.envoy_launch import envoy_binary

TYPE = "type.googleapis.com/"
LISTENER = "type.googleapis.com/envoy.config.listener.v3.Listener"
ROUTE = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
VHOST = "type.googleapis.com/envoy.config.route.v3.VirtualHost"
SCOPED = "type.googleapis.com/envoy.config.route.v3.ScopedRouteConfiguration"
CLUSTER = "type.googleapis.com/envoy.config.cluster.v3.Cluster"

RC = "main"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def vhost(k: int, gen: int, name: str) -> Any:
    """One virtual host like weir's host shape: one domain, a prefix route."""
    return route_components_pb2.VirtualHost(
        name=name,
        domains=[f"h{k}.example"],
        routes=[
            route_components_pb2.Route(
                match=route_components_pb2.RouteMatch(prefix="/"),
                direct_response=route_components_pb2.DirectResponseAction(
                    status=200, body={"inline_string": f"h{k} v{gen}"}
                ),
            )
        ],
    )


def pack(message: Any) -> any_pb2.Any:
    out = any_pb2.Any()
    out.Pack(message)
    return out


def listener_json(mode: str, port: int) -> dict[str, Any]:
    router = {
        "name": "envoy.filters.http.router",
        "typed_config": {"@type": TYPE + "envoy.extensions.filters.http.router.v3.Router"},
    }
    hcm: dict[str, Any] = {
        "@type": TYPE + "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
        "stat_prefix": "bench",
        "http_filters": [router],
    }
    ads = {"ads": {}, "resource_api_version": "V3"}
    if mode == "srds":
        hcm["scoped_routes"] = {
            "name": "scopes",
            "scope_key_builder": {
                "fragments": [
                    {"header_value_extractor": {"name": ":authority", "element_separator": ":", "index": 0}}
                ]
            },
            "rds_config_source": ads,
            "scoped_rds": {"scoped_rds_config_source": ads},
        }
    else:
        hcm["rds"] = {"config_source": ads, "route_config_name": RC}
    return {
        "name": "http",
        "address": {"socket_address": {"address": "127.0.0.1", "port_value": port}},
        "filter_chains": [
            {"filters": [{"name": "envoy.filters.network.http_connection_manager", "typed_config": hcm}]}
        ],
    }


class Ads(ads_pb2_grpc.AggregatedDiscoveryServiceServicer):  # type: ignore[misc]
    """Delta ADS with one stream: sends what it is told, records when nonces are ACKed."""

    def __init__(self, resources: dict[str, dict[str, Any]]) -> None:
        self.resources = resources  # type -> name -> message (Any-packable)
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self.acked: dict[str, float] = {}
        self.nacks: list[str] = []
        self.nonces = itertools.count(1)

    def response(self, type_url: str, names: list[str]) -> Any:
        nonce = str(next(self.nonces))
        out = discovery_pb2.DeltaDiscoveryResponse(type_url=type_url, nonce=nonce, system_version_info=nonce)
        for name in names:
            msg = self.resources[type_url][name]
            out.resources.add(name=name, version=nonce, resource=pack(msg))
        return out

    async def DeltaAggregatedResources(
        self, requests: AsyncIterator[Any], context: Any
    ) -> AsyncIterator[Any]:
        async def read() -> None:
            async for req in requests:
                if req.response_nonce:
                    if req.HasField("error_detail"):
                        self.nacks.append(req.error_detail.message)
                    self.acked[req.response_nonce] = time.perf_counter()
                    if not req.resource_names_subscribe:
                        continue
                known = self.resources.get(req.type_url, {})
                subscribed = list(req.resource_names_subscribe)
                if req.type_url in (LISTENER, CLUSTER) or req.type_url == SCOPED:
                    names = sorted(known)
                elif req.type_url == VHOST:
                    # Envoy 1.40 opens VHDS with no names (namespace matching): each virtual host
                    # reaches the route configuration its name's prefix names.
                    names = sorted(known) if not subscribed else [n for n in subscribed if n in known]
                else:
                    names = [n for n in subscribed if n in known]
                await self.queue.put(self.response(req.type_url, names))

        reader = asyncio.ensure_future(read())
        try:
            while True:
                yield await self.queue.get()
        finally:
            reader.cancel()


def bootstrap(ads_port: int, admin_port: int) -> dict[str, Any]:
    ads = {"ads": {}, "resource_api_version": "V3"}
    return {
        "node": {"id": "bench", "cluster": "bench"},
        "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": admin_port}}},
        "dynamic_resources": {
            "ads_config": {
                "api_type": "DELTA_GRPC",
                "transport_api_version": "V3",
                "grpc_services": [{"envoy_grpc": {"cluster_name": "xds"}}],
            },
            "lds_config": ads,
            "cds_config": ads,
        },
        "static_resources": {
            "clusters": [
                {
                    "name": "xds",
                    "type": "STATIC",
                    "typed_extension_protocol_options": {
                        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                            "@type": TYPE + "envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                            "explicit_http_config": {"http2_protocol_options": {}},
                        }
                    },
                    "load_assignment": {
                        "cluster_name": "xds",
                        "endpoints": [
                            {
                                "lb_endpoints": [
                                    {
                                        "endpoint": {
                                            "address": {
                                                "socket_address": {
                                                    "address": "127.0.0.1",
                                                    "port_value": ads_port,
                                                }
                                            }
                                        }
                                    }
                                ]
                            }
                        ],
                    },
                }
            ]
        },
    }


def get(port: int, host: str) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", "/", headers={"Host": host})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def wait_served(port: int, host: str, body: bytes, deadline: float) -> float:
    while time.perf_counter() < deadline:
        try:
            status, got = get(port, host)
            if status == 200 and got == body:
                return time.perf_counter()
        except OSError:
            pass
        time.sleep(0.0005)
    raise TimeoutError(f"{host} never served {body!r}")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def resources_for(mode: str, n: int, gens: list[int]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {LISTENER: {}, ROUTE: {}, VHOST: {}, SCOPED: {}, CLUSTER: {}}
    if mode == "rds":
        out[ROUTE][RC] = route_pb2.RouteConfiguration(
            name=RC, virtual_hosts=[vhost(k, gens[k], f"h{k}") for k in range(n)]
        )
    elif mode == "vhds":
        out[ROUTE][RC] = route_pb2.RouteConfiguration(
            name=RC, vhds=route_pb2.Vhds(config_source={"ads": {}, "resource_api_version": "V3"})
        )
        for k in range(n):
            name = f"{RC}/h{k}.example"
            out[VHOST][name] = vhost(k, gens[k], name)
    else:
        for k in range(n):
            out[SCOPED][f"s{k}"] = scoped_route_pb2.ScopedRouteConfiguration(
                name=f"s{k}",
                route_configuration_name=f"rc{k}",
                key=scoped_route_pb2.ScopedRouteConfiguration.Key(
                    fragments=[
                        scoped_route_pb2.ScopedRouteConfiguration.Key.Fragment(string_key=f"h{k}.example")
                    ]
                ),
            )
            out[ROUTE][f"rc{k}"] = route_pb2.RouteConfiguration(
                name=f"rc{k}", virtual_hosts=[vhost(k, gens[k], "v")]
            )
    return out


def run(mode: str, n: int, edits: int, seed: int) -> dict[str, Any]:
    from envoy.config.listener.v3 import listener_pb2
    from envoy.extensions.filters.http.router.v3 import router_pb2  # noqa: F401  (registers the type)
    from envoy.extensions.filters.network.http_connection_manager.v3 import (  # noqa: F401
        http_connection_manager_pb2,
    )
    from google.protobuf import json_format

    rng = random.Random(seed)
    gens = [1] * n
    resources = resources_for(mode, n, gens)
    port, ads_port, admin_port = free_port(), free_port(), free_port()
    resources[LISTENER]["http"] = json_format.ParseDict(listener_json(mode, port), listener_pb2.Listener())
    loop = asyncio.new_event_loop()
    servicer = Ads(resources)
    started = threading.Event()

    async def serve() -> None:
        server = grpc.aio.server(options=[("grpc.max_receive_message_length", 1 << 28)])
        ads_pb2_grpc.add_AggregatedDiscoveryServiceServicer_to_server(servicer, server)
        server.add_insecure_port(f"127.0.0.1:{ads_port}")
        await server.start()
        started.set()
        await server.wait_for_termination()

    def run_loop() -> None:
        with contextlib.suppress(RuntimeError):  # loop.stop() below ends it before serve() returns
            loop.run_until_complete(serve())

    thread = threading.Thread(target=run_loop, daemon=True)
    thread.start()
    started.wait()
    with tempfile.TemporaryDirectory() as tmp:
        boot = Path(tmp, "b.json")
        boot.write_text(json.dumps(bootstrap(ads_port, admin_port)))
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            [envoy_binary(), "-c", str(boot), "--disable-hot-restart", "--concurrency", "1", "-l", "error"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            sample = rng.sample(range(n), min(20, n))
            deadline = time.perf_counter() + 120
            for k in sample:
                wait_served(port, f"h{k}.example", f"h{k} v1".encode(), deadline)
            start = time.perf_counter() - t0
            status, _ = get(port, "unknown.example")
            rss_start = rss_mib(proc.pid)
            acks, served = [], []
            for _ in range(edits):
                k = rng.randrange(n)
                gens[k] += 1
                if mode == "rds":
                    resources[ROUTE][RC] = resources_for(mode, n, gens)[ROUTE][RC]
                    push = (ROUTE, [RC])
                elif mode == "vhds":
                    name = f"{RC}/h{k}.example"
                    resources[VHOST][name] = vhost(k, gens[k], name)
                    push = (VHOST, [name])
                else:
                    resources[ROUTE][f"rc{k}"] = route_pb2.RouteConfiguration(
                        name=f"rc{k}", virtual_hosts=[vhost(k, gens[k], "v")]
                    )
                    push = (ROUTE, [f"rc{k}"])
                box: dict[str, Any] = {}

                def send(push: tuple[str, list[str]] = push, box: dict[str, Any] = box) -> None:
                    response = servicer.response(*push)
                    box["nonce"] = response.nonce
                    box["t"] = time.perf_counter()
                    servicer.queue.put_nowait(response)

                loop.call_soon_threadsafe(send)
                while "t" not in box:
                    time.sleep(0.0001)
                done = wait_served(
                    port, f"h{k}.example", f"h{k} v{gens[k]}".encode(), time.perf_counter() + 30
                )
                served.append((done - box["t"]) * 1000)
                while box["nonce"] not in servicer.acked:
                    time.sleep(0.0005)
                acks.append((servicer.acked[box["nonce"]] - box["t"]) * 1000)
            return {
                "mode": mode,
                "n": n,
                "start_s": round(start, 3),
                "unknown_host_status": status,
                "edit_ack_ms_p50": round(statistics.median(acks), 1),
                "edit_served_ms_p50": round(statistics.median(served), 1),
                "edit_served_ms_p99": round(sorted(served)[max(0, int(len(served) * 0.99) - 1)], 1),
                "envoy_rss_mib": round(max(rss_start, rss_mib(proc.pid)), 1),
                "nacks": servicer.nacks[:3],
            }
        finally:
            proc.terminate()
            proc.wait(10)
            loop.call_soon_threadsafe(loop.stop)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--modes", nargs="+", default=["rds", "vhds", "srds"])
    parser.add_argument("--edits", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    os.environ.setdefault("PYTHONHASHSEED", "0")
    for n in args.n:
        for mode in args.modes:
            print(json.dumps(run(mode, n, args.edits, args.seed)), flush=True)


if __name__ == "__main__":
    main()
