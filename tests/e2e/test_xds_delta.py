"""Incremental (delta) ADS between weir's AdsServer and the real Envoy.

Resources are built by hand (as in ``test_envoy_process.py``) so that these
tests depend on the server, the bootstrap and the process manager only:
a listener with one route per cluster (``/cN`` → cluster ``cN``), static
clusters to a recording upstream on 127.0.0.1. What Envoy holds is read from
its admin ``/config_dump`` (each dynamic resource there carries the version
weir gave it: its content hash); what weir sent, from its ``weir.xds`` log.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest
from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.core.v3 import config_source_pb2
from envoy.config.listener.v3 import listener_pb2
from envoy.config.route.v3 import route_pb2
from envoy.extensions.filters.http.router.v3 import router_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm_pb2,
)

from weir.envoy import EnvoyProcess, bootstrap
from weir.testkit import RecordingUpstream
from weir.xds.server import AckStatus, AdsServer
from weir.xds.snapshot import CLUSTER, LISTENER, ROUTE, SECRET, Resource, Snapshot

pytestmark = pytest.mark.timeout(90)

ROUTES = "routes"


def listener(port: int) -> Any:
    manager = hcm_pb2.HttpConnectionManager(stat_prefix="delta")
    manager.rds.route_config_name = ROUTES
    manager.rds.config_source.ads.SetInParent()
    manager.rds.config_source.resource_api_version = config_source_pb2.V3
    manager.http_filters.add(name="envoy.filters.http.router").typed_config.Pack(router_pb2.Router())
    out = listener_pb2.Listener(name="delta")
    out.address.socket_address.address = "127.0.0.1"
    out.address.socket_address.port_value = port  # 0: each Envoy picks its own
    out.filter_chains.add().filters.add(
        name="envoy.filters.network.http_connection_manager"
    ).typed_config.Pack(manager)
    return out


def cluster(name: str, port: int, timeout_s: int = 1, address: str = "127.0.0.1") -> Any:
    out = cluster_pb2.Cluster(name=name, type=cluster_pb2.Cluster.STATIC)
    out.connect_timeout.seconds = timeout_s
    out.load_assignment.cluster_name = name
    endpoint = out.load_assignment.endpoints.add().lb_endpoints.add().endpoint
    endpoint.address.socket_address.address = address
    endpoint.address.socket_address.port_value = port
    return out


def routes(clusters: list[str]) -> Any:
    config = route_pb2.RouteConfiguration(name=ROUTES)
    host = config.virtual_hosts.add(name="any", domains=["*"])
    for name in clusters:
        route = host.routes.add()
        route.match.path = f"/{name}"
        route.route.cluster = name
    return config


def snapshot(version: str, port: int, clusters: Mapping[str, Any], listener_port: int = 0) -> Snapshot:
    return Snapshot(
        version,
        {
            SECRET: {},
            CLUSTER: dict(clusters),
            LISTENER: {"delta": listener(listener_port)},
            ROUTE: {ROUTES: routes(sorted(clusters))},
        },
    )


class Envoy:
    """One Envoy process configured by ``ads``, and what it holds."""

    def __init__(self, ads: AdsServer, run_dir: Path, node_id: str) -> None:
        self.process = EnvoyProcess(
            bootstrap(node_id=node_id, ads_socket=ads.socket_path), run_dir=run_dir, concurrency=1
        )
        self.client = httpx.AsyncClient(timeout=2)

    async def admin(self, path: str) -> Any:
        status, body = await self.process.admin.get(path)
        assert status == 200, body
        return json.loads(body)

    async def clusters(self) -> dict[str, tuple[str, str]]:
        """Dynamic clusters Envoy holds: name → (version, last updated)."""
        dump = await self.admin("/config_dump?resource=dynamic_active_clusters")
        return {
            entry["cluster"]["name"]: (entry["version_info"], entry["last_updated"])
            for entry in dump.get("configs", [])
        }

    async def port(self) -> int:
        data = await self.admin("/listeners?format=json")
        (status,) = [s for s in data["listener_statuses"] if s["name"] == "delta"]
        return int(status["local_address"]["socket_address"]["port_value"])

    async def get(self, path: str) -> int:
        try:
            response = await self.client.get(f"http://127.0.0.1:{await self.port()}{path}")
        except httpx.HTTPError:
            return 0
        return response.status_code

    async def close(self) -> None:
        await self.process.stop()
        await self.client.aclose()


@pytest.fixture
async def upstream() -> AsyncIterator[RecordingUpstream]:
    server = RecordingUpstream("delta", http2=False)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def ads(unix_socket_path: str) -> AsyncIterator[AdsServer]:
    server = AdsServer(unix_socket_path)
    await server.start()
    try:
        yield server
    finally:
        await server.stop(grace=None)


@pytest.fixture
async def envoy(ads: AdsServer, short_tmp: Path) -> AsyncIterator[Envoy]:
    proxy = Envoy(ads, short_tmp / "envoy", "delta-1")
    try:
        yield proxy
    finally:
        await proxy.close()


def pushes(caplog: pytest.LogCaptureFixture, since: int) -> list[tuple[str, int, int]]:
    """(type, resources, removed) of each response weir sent, from its log."""
    out = []
    for record in caplog.records[since:]:
        match = re.match(
            r"push (\w+) version=\S+ nonce=\S+ resources=(\d+) removed=(\d+)", record.getMessage()
        )
        if record.name == "weir.xds" and match:
            out.append((match[1], int(match[2]), int(match[3])))
    return out


async def served(envoy: Envoy, path: str, status: int = 200, timeout: float = 5) -> None:
    deadline = time.monotonic() + timeout
    while (got := await envoy.get(path)) != status:
        assert time.monotonic() < deadline, f"{path}: {got}, not {status}"
        await asyncio.sleep(0.02)


async def test_an_edit_sends_only_what_changed_and_removals(
    ads: AdsServer, envoy: Envoy, upstream: RecordingUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="weir.xds")
    clusters = {f"c{i}": cluster(f"c{i}", upstream.port) for i in range(1, 4)}
    first = snapshot("v1", upstream.port, clusters)
    ads.set_snapshot(first)
    await envoy.process.start()
    assert (await ads.wait_acked("v1", timeout=10)).acked
    before = await envoy.clusters()
    # Each resource's version in Envoy is weir's content hash of it.
    assert {n: v for n, (v, _) in before.items()} == {n: r.version for n, r in first.of_type(CLUSTER).items()}
    for name in clusters:
        await served(envoy, f"/{name}")

    mark = len(caplog.records)
    edited = {
        "c1": clusters["c1"],
        "c2": cluster("c2", upstream.port, timeout_s=2),  # changed
        "c4": cluster("c4", upstream.port),  # new; c3 is gone
    }
    second = snapshot("v2", upstream.port, edited)
    ads.set_snapshot(second)
    assert (await ads.wait_acked("v2", timeout=10)).acked
    # Clusters: the changed and the new one, and one removal; listeners: nothing; routes: one.
    assert pushes(caplog, mark) == [("Cluster", 2, 1), ("RouteConfiguration", 1, 0)]
    after = await envoy.clusters()
    assert sorted(after) == ["c1", "c2", "c4"]
    assert after["c1"] == before["c1"]  # untouched: same version, not updated again
    assert after["c2"][0] == second.of_type(CLUSTER)["c2"].version != before["c2"][0]
    await served(envoy, "/c4")
    await served(envoy, "/c3", 404)
    assert await envoy.get("/c1") == 200


async def test_a_rejected_cluster_is_reported_and_the_rest_is_served(
    ads: AdsServer, envoy: Envoy, upstream: RecordingUpstream
) -> None:
    good = {"c1": cluster("c1", upstream.port)}
    ads.set_snapshot(snapshot("v1", upstream.port, good))
    await envoy.process.start()
    assert (await ads.wait_acked("v1", timeout=10)).acked

    # One good and one bad new cluster in the same push.
    broken = {**good, "c2": cluster("c2", upstream.port), "bad": cluster("bad", 80, address="not-an-ip")}
    ads.set_snapshot(snapshot("v2", upstream.port, broken))
    result = await ads.wait_acked("v2", timeout=10)
    assert result.status is AckStatus.NACKED
    assert result.type_url == CLUSTER and result.node_id == "delta-1"
    assert "not-an-ip" in result.message, result.message  # Envoy's own words
    # Envoy added the good cluster all the same, and the routes went through.
    await served(envoy, "/c2")
    assert await envoy.get("/c1") == 200
    assert "bad" not in await envoy.clusters()
    assert ads.state().types[CLUSTER].nack is not None

    fixed = {**broken, "bad": cluster("bad", upstream.port)}
    ads.set_snapshot(snapshot("v3", upstream.port, fixed))
    assert (await ads.wait_acked("v3", timeout=10)).acked
    await served(envoy, "/bad")
    assert ads.state().types[CLUSTER].nack is None


async def test_a_fresh_envoy_gets_everything_and_both_get_each_edit(
    ads: AdsServer, envoy: Envoy, upstream: RecordingUpstream, short_tmp: Path
) -> None:
    clusters = {f"c{i}": cluster(f"c{i}", upstream.port) for i in range(1, 4)}
    ads.set_snapshot(snapshot("v1", upstream.port, clusters))
    await envoy.process.start()
    assert (await ads.wait_acked("v1", timeout=10)).acked
    ads.set_snapshot(snapshot("v2", upstream.port, {**clusters, "c4": cluster("c4", upstream.port)}))
    assert (await ads.wait_acked("v2", timeout=10)).acked

    fresh = Envoy(ads, short_tmp / "fresh", "delta-2")
    try:
        await fresh.process.start()
        assert (await ads.wait_acked("v2", timeout=10)).acked
        assert sorted(await fresh.clusters()) == ["c1", "c2", "c3", "c4"]
        assert await fresh.port() != await envoy.port()
        for path in ("/c1", "/c4"):
            await served(fresh, path)
        # The next edit reaches both, and counts as accepted only once both took it.
        ads.set_snapshot(
            snapshot("v3", upstream.port, {"c1": clusters["c1"], "c5": cluster("c5", upstream.port)})
        )
        assert (await ads.wait_acked("v3", timeout=10)).acked
        assert set(ads.state().nodes) == {"delta-1", "delta-2"}
        for proxy in (envoy, fresh):
            assert sorted(await proxy.clusters()) == ["c1", "c5"]
            await served(proxy, "/c5")
            await served(proxy, "/c2", 404)
    finally:
        await fresh.close()


async def test_envoy_reconnects_to_a_new_server_with_what_it_holds(
    ads: AdsServer, envoy: Envoy, upstream: RecordingUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="weir.xds")
    clusters = {f"c{i}": cluster(f"c{i}", upstream.port) for i in range(1, 4)}
    ads.set_snapshot(snapshot("v1", upstream.port, clusters))
    await envoy.process.start()
    assert (await ads.wait_acked("v1", timeout=10)).acked
    before = await envoy.clusters()
    await ads.stop(grace=None)
    assert await envoy.get("/c1") == 200  # Envoy keeps serving without its control plane

    mark = len(caplog.records)
    replacement = AdsServer(ads.socket_path)
    replacement.set_snapshot(snapshot("v2", upstream.port, {"c1": clusters["c1"], "c2": clusters["c2"]}))
    await replacement.start()
    try:
        await replacement.wait_for(lambda s: s.connected, timeout=10)
        assert (await replacement.wait_acked("v2", timeout=10)).acked
        # Envoy declared what it holds: c3 is removed, the routes (without /c3) sent, nothing else.
        assert pushes(caplog, mark) == [("Cluster", 0, 1), ("Listener", 0, 0), ("RouteConfiguration", 1, 0)]
        after = await envoy.clusters()
        assert sorted(after) == ["c1", "c2"] and after["c1"] == before["c1"]
        await served(envoy, "/c3", 404)
        assert envoy.process.restarts == 0
    finally:
        await replacement.stop(grace=None)


async def test_a_restarted_envoy_gets_the_whole_configuration(
    ads: AdsServer, envoy: Envoy, upstream: RecordingUpstream
) -> None:
    clusters = {f"c{i}": cluster(f"c{i}", upstream.port) for i in range(1, 4)}
    current = snapshot("v1", upstream.port, clusters)
    ads.set_snapshot(current)
    await envoy.process.start()
    assert (await ads.wait_acked("v1", timeout=10)).acked
    old = envoy.process.pid
    assert old is not None
    os.kill(old, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while envoy.process.pid in (None, old) or not envoy.process.ready:
        assert time.monotonic() < deadline, "Envoy was not restarted"
        await asyncio.sleep(0.02)
    await ads.wait_for(lambda s: s.streams_opened >= 2, timeout=10)
    assert (await ads.wait_acked("v1", timeout=10)).acked
    held = await envoy.clusters()
    assert {n: v for n, (v, _) in held.items()} == {n: r.version for n, r in current.of_type(CLUSTER).items()}
    for name in clusters:
        await served(envoy, f"/{name}")


def test_resource_versions_are_content_hashes() -> None:
    one, same, other = cluster("c", 1), cluster("c", 1), cluster("c", 2)
    assert Resource.of(one).version == Resource.of(same).version != Resource.of(other).version
    assert json.dumps(Resource.of(one).message().name) == '"c"'


def held_versions(envoy: Envoy) -> tuple[dict[str, str], dict[str, str]]:
    """(cluster → version, route configuration → version) Envoy holds, read without the event loop."""
    socket = envoy.process.admin_socket
    assert socket is not None
    with httpx.Client(transport=httpx.HTTPTransport(uds=socket), timeout=2) as client:
        url = "http://envoy/config_dump?resource="
        clusters = client.get(url + "dynamic_active_clusters").json().get("configs", [])
        routes = client.get(url + "dynamic_route_configs").json().get("configs", [])
    return (
        {c["cluster"]["name"]: c["version_info"] for c in clusters},
        {r["route_config"]["name"]: r["version_info"] for r in routes},
    )


async def test_once_flushed_the_whole_push_reaches_envoy_without_the_event_loop(
    ads: AdsServer, envoy: Envoy, upstream: RecordingUpstream
) -> None:
    """``AdsServer.flushed``: what the controller awaits before status work, so as not to hold up a push.

    A push of a new cluster and the routes to it is two responses, the second
    sent only once the event loop has resumed the stream after the first.
    Once ``flushed()`` returns, both are gRPC's: Envoy gets the whole push
    while the event loop does nothing else at all (here: a blocking sleep).
    """
    ads.set_snapshot(snapshot("v1", upstream.port, {"c1": cluster("c1", upstream.port)}))
    await envoy.process.start()
    assert (await ads.wait_acked("v1", timeout=10)).acked
    await asyncio.wait_for(ads.flushed(), 5)
    assert await envoy.get("/c1") == 200

    both = {name: cluster(name, upstream.port) for name in ("c1", "c2")}
    second = snapshot("v2", upstream.port, both)
    wanted = (
        {name: r.version for name, r in second.of_type(CLUSTER).items()},
        {name: r.version for name, r in second.of_type(ROUTE).items()},
    )
    ads.set_snapshot(second)
    async with asyncio.timeout(5):
        await ads.flushed()
    deadline = time.monotonic() + 5
    while (held := held_versions(envoy)) != wanted:
        assert time.monotonic() < deadline, f"Envoy holds {held}, not {wanted}"
        time.sleep(0.05)  # blocking on purpose: weir's event loop must not be needed any more
    assert (await ads.wait_acked("v2", timeout=10)).acked
    await served(envoy, "/c2")
