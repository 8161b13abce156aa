"""AdsServer driven by a real gRPC client playing Envoy's delta ADS client, over a unix socket.

The same protocol against the real Envoy: ``tests/e2e/test_xds_delta.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest
from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.endpoint.v3 import endpoint_pb2
from envoy.config.listener.v3 import listener_pb2
from envoy.config.route.v3 import route_components_pb2, route_pb2
from envoy.extensions.transport_sockets.tls.v3 import secret_pb2
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2

from weir.xds.server import AckStatus, AdsServer, Outcome, ServerState
from weir.xds.snapshot import CLUSTER, ENDPOINT, LISTENER, PUSH_ORDER, ROUTE, SECRET, Resource, Snapshot

pytestmark = pytest.mark.timeout(30)


def snapshot(
    version: str,
    clusters: Sequence[str] | Mapping[str, int] = (),
    listeners: Sequence[str] = (),
    routes: dict[str, str] | None = None,
    secrets: Sequence[str] = (),
) -> Snapshot:
    """``routes`` maps a route configuration name to a virtual host name (its content);
    ``clusters`` may map a name to a connect timeout in seconds (its content)."""
    timeouts = clusters if isinstance(clusters, Mapping) else dict.fromkeys(clusters, 1)
    return Snapshot(
        version,
        {
            SECRET: {n: secret_pb2.Secret(name=n) for n in secrets},
            CLUSTER: {
                n: cluster_pb2.Cluster(name=n, connect_timeout={"seconds": s}) for n, s in timeouts.items()
            },
            LISTENER: {n: listener_pb2.Listener(name=n) for n in listeners},
            ROUTE: {
                n: route_pb2.RouteConfiguration(
                    name=n, virtual_hosts=[route_components_pb2.VirtualHost(name=vh, domains=["*"])]
                )
                for n, vh in (routes or {}).items()
            },
        },
    )


_CLASSES = {
    CLUSTER: cluster_pb2.Cluster,
    LISTENER: listener_pb2.Listener,
    ROUTE: route_pb2.RouteConfiguration,
    SECRET: secret_pb2.Secret,
}


def names(response: Any) -> list[str]:
    """Names of the resources in a response, checking each against its own name and version."""
    result = []
    for item in response.resources:
        message = _CLASSES[response.type_url]()
        assert item.resource.Unpack(message)
        assert item.name == message.name
        assert item.version == Resource.of(message).version  # the content hash
        result.append(message.name)
    return result


def route_hosts(response: Any) -> dict[str, str]:
    """Route configuration name -> its (only) virtual host name, i.e. its content."""
    result = {}
    for item in response.resources:
        config = route_pb2.RouteConfiguration()
        assert item.resource.Unpack(config)
        result[config.name] = config.virtual_hosts[0].name
    return result


class FakeEnvoy:
    """One delta ADS stream, speaking like Envoy's incremental client."""

    def __init__(self, socket_path: str, node_id: str = "node-1") -> None:
        self.node_id = node_id
        self.channel = grpc.aio.insecure_channel(f"unix:{socket_path}")
        stub = ads_pb2_grpc.AggregatedDiscoveryServiceStub(self.channel)
        self.call = stub.DeltaAggregatedResources()
        self._first = True
        # Read continuously: cancelling a read would cancel the whole call.
        self._responses: asyncio.Queue[Any] = asyncio.Queue()
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        while True:
            try:
                response = await self.call.read()
            except BaseException as exc:
                self._responses.put_nowait(exc)
                raise
            if response is grpc.aio.EOF:
                return
            self._responses.put_nowait(response)

    async def request(
        self,
        type_url: str,
        subscribe: Sequence[str] = (),
        unsubscribe: Sequence[str] = (),
        nonce: str = "",
        error: str | None = None,
        initial: Mapping[str, str] | None = None,
    ) -> None:
        request = discovery_pb2.DeltaDiscoveryRequest(
            type_url=type_url,
            resource_names_subscribe=list(subscribe),
            resource_names_unsubscribe=list(unsubscribe),
            initial_resource_versions=dict(initial or {}),
            response_nonce=nonce,
        )
        if self._first:
            request.node.id = self.node_id
            request.node.cluster = "test"
            self._first = False
        if error is not None:
            request.error_detail.code = 3
            request.error_detail.message = error
        await self.call.write(request)

    async def ack(self, response: Any, subscribe: Sequence[str] = ()) -> None:
        await self.request(response.type_url, subscribe, nonce=response.nonce)

    async def nack(self, response: Any, message: str) -> None:
        await self.request(response.type_url, nonce=response.nonce, error=message)

    async def response(self, timeout: float = 2.0) -> Any:
        item = await asyncio.wait_for(self._responses.get(), timeout)
        if isinstance(item, BaseException):
            raise item
        return item

    async def no_response(self, within: float = 0.2) -> None:
        await asyncio.sleep(within)
        assert self._responses.empty(), f"unexpected response: {self._responses.get_nowait()}"

    async def close(self) -> None:
        self.call.cancel()
        self._reader.cancel()
        await asyncio.gather(self._reader, return_exceptions=True)
        await self.channel.close()


@pytest.fixture
def socket_path() -> Iterator[str]:
    # Short: unix socket paths are limited to 107 bytes.
    directory = tempfile.mkdtemp(prefix="weir-ads-", dir="/tmp")
    yield str(Path(directory) / "ads.sock")
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
async def server(socket_path: str) -> AsyncIterator[AdsServer]:
    ads = AdsServer(socket_path)
    await ads.start()
    try:
        yield ads
    finally:
        await ads.stop(grace=None)


@pytest.fixture
async def envoy(server: AdsServer) -> AsyncIterator[FakeEnvoy]:
    client = FakeEnvoy(server.socket_path)
    try:
        yield client
    finally:
        await client.close()


async def subscribe_all(envoy: FakeEnvoy, routes: Sequence[str] = ()) -> dict[str, Any]:
    """Subscribe like Envoy at startup (CDS, LDS, then RDS by name) and ACK everything."""
    got = {}
    await envoy.request(CLUSTER)
    got[CLUSTER] = await envoy.response()
    await envoy.ack(got[CLUSTER])
    await envoy.request(LISTENER)
    got[LISTENER] = await envoy.response()
    if routes:
        await envoy.request(ROUTE, routes)
        got[ROUTE] = await envoy.response()
        await envoy.ack(got[ROUTE])
    await envoy.ack(got[LISTENER])
    return got


# --------------------------------------------------------------------------


async def test_binds_a_private_unix_socket(server: AdsServer) -> None:
    mode = Path(server.socket_path).stat().st_mode & 0o777
    assert mode == 0o600


def test_rejects_a_socket_path_too_long() -> None:
    with pytest.raises(ValueError, match="longer than"):
        AdsServer("/tmp/" + "x" * 200)


async def test_first_subscription_is_answered_with_zero_resources(
    server: AdsServer, envoy: FakeEnvoy
) -> None:
    server.set_snapshot(snapshot("v1"))
    nonces = set()
    for type_url in (CLUSTER, LISTENER):
        await envoy.request(type_url)
        response = await envoy.response()
        assert response.type_url == type_url
        assert response.system_version_info == "v1"
        assert list(response.resources) == [] and list(response.removed_resources) == []
        nonces.add(response.nonce)
    await envoy.request(ROUTE, ["missing"])
    response = await envoy.response()
    assert (response.type_url, list(response.resources)) == (ROUTE, [])
    nonces.add(response.nonce)
    assert len(nonces) == 3
    state = server.state()
    assert state.connected
    assert state.types[ROUTE].sent_version == "v1"


async def test_subscriptions_before_the_first_snapshot_wait_for_it(
    server: AdsServer, envoy: FakeEnvoy
) -> None:
    await envoy.request(CLUSTER)
    await envoy.no_response()
    await server.wait_for(lambda s: s.connected, timeout=2)
    server.set_snapshot(snapshot("v1", clusters=["c1"]))
    response = await envoy.response()
    assert (response.system_version_info, names(response)) == ("v1", ["c1"])


async def test_ack_is_tracked_per_type(server: AdsServer, envoy: FakeEnvoy) -> None:
    server.set_snapshot(snapshot("v1", clusters=["c1"], listeners=["l1"], routes={"r1": "a"}))
    await envoy.request(CLUSTER)
    cds = await envoy.response()
    await envoy.ack(cds)
    state = await server.wait_for(lambda s: s if s.types[CLUSTER].acked_version == "v1" else None, timeout=2)
    assert state.types[LISTENER].acked_version is None
    assert state.nodes["node-1"].types[CLUSTER].outcome is Outcome.ACKED
    # Not every type is acknowledged yet: undecided.
    assert state.ack_result("v1") is None
    assert "Listener" in state.pending_reason("v1")

    await envoy.request(LISTENER)
    lds = await envoy.response()
    await envoy.request(ROUTE, ["r1"])
    rds = await envoy.response()
    assert names(rds) == ["r1"]
    await envoy.ack(rds)
    await envoy.ack(lds)
    result = await server.wait_acked("v1", timeout=2)
    assert result.acked, result
    state = server.state()
    assert {t: state.types[t].acked_version for t in (CLUSTER, LISTENER, ROUTE)} == {
        CLUSTER: "v1",
        LISTENER: "v1",
        ROUTE: "v1",
    }
    assert state.types[SECRET].sent_version is None  # never subscribed


async def test_only_changed_resources_and_removals_are_sent_in_order(
    server: AdsServer, envoy: FakeEnvoy
) -> None:
    server.set_snapshot(
        snapshot("v1", clusters=["c1", "c2", "c3"], listeners=["l1"], routes={"r1": "a"}, secrets=["s1"])
    )
    await subscribe_all(envoy, routes=["r1"])
    await envoy.request(SECRET, ["s1"])
    await envoy.ack(await envoy.response())
    assert (await server.wait_acked("v1", timeout=2)).acked

    # Same content under a new version: nothing to send, and it counts as acked.
    server.set_snapshot(
        snapshot("v2", clusters=["c1", "c2", "c3"], listeners=["l1"], routes={"r1": "a"}, secrets=["s1"])
    )
    assert (await server.wait_acked("v2", timeout=2)).acked
    await envoy.no_response()

    # c2 changes, c3 goes, c4 comes, r1 changes; listeners and secrets do not.
    server.set_snapshot(
        snapshot(
            "v3", clusters={"c1": 1, "c2": 2, "c4": 1}, listeners=["l1"], routes={"r1": "b"}, secrets=["s1"]
        )
    )
    cds = await envoy.response()
    rds = await envoy.response()
    await envoy.no_response()
    assert [cds.type_url, rds.type_url] == [CLUSTER, ROUTE]  # PUSH_ORDER
    assert PUSH_ORDER.index(CLUSTER) < PUSH_ORDER.index(ROUTE)
    assert cds.system_version_info == "v3"
    assert names(cds) == ["c2", "c4"] and list(cds.removed_resources) == ["c3"]
    assert route_hosts(rds) == {"r1": "b"} and list(rds.removed_resources) == []
    await envoy.ack(cds)
    assert server.state().ack_result("v3") is None
    await envoy.ack(rds)
    assert (await server.wait_acked("v3", timeout=2)).acked


async def test_nack_is_reported_and_the_resources_stay_suspect(server: AdsServer, envoy: FakeEnvoy) -> None:
    server.set_snapshot(snapshot("v1", clusters=["c1"], listeners=["l1"]))
    await subscribe_all(envoy)
    assert (await server.wait_acked("v1", timeout=2)).acked

    server.set_snapshot(snapshot("v2", clusters=["c1"], listeners=["l1", "bad"]))
    lds = await envoy.response()
    assert (lds.type_url, names(lds)) == (LISTENER, ["bad"])  # clusters and l1 did not change
    await envoy.nack(lds, "invalid listener 'bad': boom")
    result = await server.wait_acked("v2", timeout=2)
    assert result.status is AckStatus.NACKED
    assert (result.type_url, result.message, result.node_id) == (
        LISTENER,
        "invalid listener 'bad': boom",
        "node-1",
    )
    listeners = server.state().types[LISTENER]
    assert listeners.acked_version == "v1"
    assert listeners.nack is not None
    assert (listeners.nack.version, listeners.nack.message) == ("v2", "invalid listener 'bad': boom")
    # The server does not loop on the rejected resource...
    await envoy.no_response(within=0.3)

    # ...and a change elsewhere, accepted, does not make the rejected listener accepted.
    server.set_snapshot(snapshot("v3", clusters=["c1", "c2"], listeners=["l1", "bad"]))
    cds = await envoy.response()
    assert names(cds) == ["c2"]
    # A new snapshot gives the rejected listener another chance (a rejection may be transient).
    again = await envoy.response()
    assert (again.type_url, again.system_version_info, names(again)) == (LISTENER, "v3", ["bad"])
    await envoy.ack(cds)
    await envoy.nack(again, "still bad")
    result = await server.wait_acked("v3", timeout=2)
    assert result.status is AckStatus.NACKED and result.message == "still bad"

    # Removing it: accepted.
    server.set_snapshot(snapshot("v4", clusters=["c1", "c2"], listeners=["l1"]))
    lds = await envoy.response()
    assert names(lds) == [] and list(lds.removed_resources) == ["bad"]
    await envoy.ack(lds)
    assert (await server.wait_acked("v4", timeout=2)).acked
    assert server.state().types[LISTENER].nack is None


async def test_a_nack_of_several_resources_is_cleared_by_an_ack_of_them(
    server: AdsServer, envoy: FakeEnvoy
) -> None:
    server.set_snapshot(snapshot("v1", clusters=["c1"], listeners=["l1"]))
    await subscribe_all(envoy)
    # Two new clusters, one of them bad: Envoy adds the good one and NACKs the response.
    server.set_snapshot(snapshot("v2", clusters=["c1", "good", "bad"], listeners=["l1"]))
    cds = await envoy.response()
    assert sorted(names(cds)) == ["bad", "good"]
    await envoy.nack(cds, "cluster 'bad': nope")
    assert (await server.wait_acked("v2", timeout=2)).status is AckStatus.NACKED
    # The bad one is fixed: both are sent again (which of them failed is not knowable).
    server.set_snapshot(snapshot("v3", clusters={"c1": 1, "good": 1, "bad": 2}, listeners=["l1"]))
    cds = await envoy.response()
    assert sorted(names(cds)) == ["bad", "good"]
    await envoy.ack(cds)
    assert (await server.wait_acked("v3", timeout=2)).acked


async def test_named_subscriptions_for_routes(server: AdsServer, envoy: FakeEnvoy) -> None:
    server.set_snapshot(snapshot("v1", listeners=["l1"], routes={"r1": "a", "r2": "a", "r3": "a"}))
    await subscribe_all(envoy)
    await envoy.request(ROUTE, ["r1"])
    rds = await envoy.response()
    assert names(rds) == ["r1"]  # only what was asked for
    # The subscription grows in the ACK: answered at once with the new name only.
    await envoy.ack(rds, subscribe=["r2"])
    rds = await envoy.response()
    assert names(rds) == ["r2"]
    await envoy.ack(rds)
    assert (await server.wait_acked("v1", timeout=2)).acked
    # A change to a route nobody asked for is not pushed.
    server.set_snapshot(snapshot("v2", listeners=["l1"], routes={"r1": "a", "r2": "a", "r3": "changed"}))
    await envoy.no_response()
    assert (await server.wait_acked("v2", timeout=2)).acked
    # A change to one that was asked for is, alone.
    server.set_snapshot(
        snapshot("v3", listeners=["l1"], routes={"r1": "changed", "r2": "a", "r3": "changed"})
    )
    rds = await envoy.response()
    assert (rds.system_version_info, route_hosts(rds)) == ("v3", {"r1": "changed"})
    await envoy.ack(rds)
    # A route configuration that disappears is never "removed": Envoy drops it when unused.
    server.set_snapshot(snapshot("v4", listeners=["l1"], routes={"r1": "changed"}))
    await envoy.no_response()
    # Unsubscribing everything is not answered.
    await envoy.request(ROUTE, unsubscribe=["r1", "r2"])
    await envoy.no_response()
    state = server.state()
    assert not state.nodes["node-1"].types[ROUTE].subscribed
    assert state.ack_result("v4") is not None and state.ack_result("v4").acked  # type: ignore[union-attr]
    # Asking again gets it again.
    await envoy.request(ROUTE, ["r1"])
    assert route_hosts(await envoy.response()) == {"r1": "changed"}


async def test_wait_acked_superseded_and_timeout(server: AdsServer, envoy: FakeEnvoy) -> None:
    result = await server.wait_acked("v1", timeout=0.1)
    assert result.status is AckStatus.SUPERSEDED
    server.set_snapshot(snapshot("v1"))
    result = await server.wait_acked("v1", timeout=0.1)
    assert result.status is AckStatus.TIMEOUT
    assert result.message == "no Envoy is connected"
    await envoy.request(CLUSTER)
    await envoy.response()  # not acknowledged
    result = await server.wait_acked("v1", timeout=0.2)
    assert result.status is AckStatus.TIMEOUT and "Cluster" in result.message
    waiter = asyncio.create_task(server.wait_acked("v1", timeout=2))
    await asyncio.sleep(0.05)
    server.set_snapshot(snapshot("v2"))
    assert (await waiter).status is AckStatus.SUPERSEDED


async def test_answers_may_lag_behind_pushes(server: AdsServer, envoy: FakeEnvoy) -> None:
    server.set_snapshot(snapshot("v1", clusters={"c1": 1}, listeners=["l1"]))
    await subscribe_all(envoy)
    server.set_snapshot(snapshot("v2", clusters={"c1": 2}, listeners=["l1"]))
    first = await envoy.response()
    server.set_snapshot(snapshot("v3", clusters={"c1": 3}, listeners=["l1"]))
    second = await envoy.response()
    assert (first.system_version_info, second.system_version_info) == ("v2", "v3")
    await envoy.ack(first)
    await asyncio.sleep(0.05)
    assert server.state().ack_result("v3") is None  # the newest push is still unanswered
    await envoy.ack(second)
    assert (await server.wait_acked("v3", timeout=2)).acked
    # An answer to a nonce the server never sent is ignored.
    await envoy.request(CLUSTER, nonce="no-such-nonce", error="what?")
    await envoy.no_response()
    assert server.state().ack_result("v3").acked  # type: ignore[union-attr]


async def test_listeners_are_called_on_changes(server: AdsServer, envoy: FakeEnvoy) -> None:
    seen: list[ServerState] = []
    remove = server.add_listener(seen.append)
    server.set_snapshot(snapshot("v1", clusters=["c1"]))
    await envoy.request(CLUSTER)
    await envoy.nack(await envoy.response(), "no")
    await server.wait_for(lambda s: s.types[CLUSTER].nack is not None, timeout=2)
    assert seen[0].snapshot_version == "v1"
    assert any(s.types[CLUSTER].nack is not None for s in seen)
    remove()
    count = len(seen)
    server.set_snapshot(snapshot("v2"))
    assert len(seen) == count


async def test_reconnecting_envoy_gets_only_what_it_lacks(server: AdsServer) -> None:
    server.set_snapshot(snapshot("v1", clusters=["c1", "c2", "c3"], listeners=["l1"], routes={"r1": "a"}))
    first = FakeEnvoy(server.socket_path)
    try:
        got = await subscribe_all(first, routes=["r1"])
        assert (await server.wait_acked("v1", timeout=2)).acked
    finally:
        await first.close()
    await server.wait_for(lambda s: not s.connected, timeout=2)
    held = {
        type_url: {item.name: item.version for item in response.resources}
        for type_url, response in got.items()
    }
    server.set_snapshot(
        snapshot("v2", clusters={"c1": 1, "c2": 2, "c4": 1}, listeners=["l1"], routes={"r1": "a"})
    )

    second = FakeEnvoy(server.socket_path)
    try:
        # Envoy comes back declaring the versions it holds.
        await second.request(CLUSTER, initial=held[CLUSTER])
        cds = await second.response()
        assert (cds.system_version_info, names(cds)) == ("v2", ["c2", "c4"])
        assert list(cds.removed_resources) == ["c3"]
        await second.ack(cds)
        await second.request(LISTENER, initial=held[LISTENER])
        lds = await second.response()
        assert names(lds) == [] and list(lds.removed_resources) == []  # answered all the same
        await second.request(ROUTE, ["r1"], initial=held[ROUTE])
        rds = await second.response()
        assert names(rds) == []
        await second.ack(rds)
        await second.ack(lds)
        assert (await server.wait_acked("v2", timeout=2)).acked
        state = server.state()
        assert list(state.nodes) == ["node-1"] and state.streams_opened == 2
    finally:
        await second.close()


async def test_a_new_envoy_gets_everything(server: AdsServer) -> None:
    server.set_snapshot(snapshot("v1", clusters=["c1", "c2"], listeners=["l1"]))
    one = FakeEnvoy(server.socket_path, "one")
    two = FakeEnvoy(server.socket_path, "two")
    try:
        await subscribe_all(one)
        server.set_snapshot(snapshot("v2", clusters=["c1", "c2", "c3"], listeners=["l1"]))
        assert names(await one.response()) == ["c3"]
        got = await subscribe_all(two)
        assert names(got[CLUSTER]) == ["c1", "c2", "c3"] and names(got[LISTENER]) == ["l1"]
    finally:
        await one.close()
        await two.close()


async def test_every_envoy_must_ack(server: AdsServer) -> None:
    server.set_snapshot(snapshot("v1", clusters=["c1"]))
    one, two = FakeEnvoy(server.socket_path, "one"), FakeEnvoy(server.socket_path, "two")
    try:
        await subscribe_all(one)
        await two.request(CLUSTER)
        await two.ack(await two.response())
        await two.request(LISTENER)
        await two.response()
        result = await server.wait_acked("v1", timeout=0.3)
        assert result.status is AckStatus.TIMEOUT and "two" in result.message
    finally:
        await one.close()
        await two.close()


async def test_state_of_the_world_ads_is_refused(server: AdsServer) -> None:
    channel = grpc.aio.insecure_channel(f"unix:{server.socket_path}")
    try:
        call = ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel).StreamAggregatedResources()
        # The server may end the call before or after the request is written; either way the
        # call's final status is what counts.
        with contextlib.suppress(grpc.aio.AioRpcError):
            await call.write(discovery_pb2.DiscoveryRequest(type_url=CLUSTER))
            await call.read()
        assert await call.code() is grpc.StatusCode.UNIMPLEMENTED
        assert "DELTA_GRPC" in (await call.details() or "")
    finally:
        await channel.close()


async def test_stop_removes_the_socket(socket_path: str) -> None:
    Path(socket_path).parent.mkdir(exist_ok=True)
    ads = AdsServer(socket_path)
    await ads.start()
    client = FakeEnvoy(socket_path)
    ads.set_snapshot(snapshot("v1"))
    await client.request(CLUSTER)
    await client.response()
    await ads.stop()
    await client.close()
    assert not Path(socket_path).exists()
    assert not ads.state().connected


async def test_restarted_envoy_gets_the_last_accepted_version_of_rejected_resources(
    server: AdsServer,
) -> None:
    server.set_snapshot(snapshot("v1", listeners=["l1"], routes={"r1": "good", "r2": "good"}))
    first = FakeEnvoy(server.socket_path)
    try:
        await subscribe_all(first, routes=["r1", "r2"])
        assert (await server.wait_acked("v1", timeout=2)).acked
        # r1 breaks, r3 is new and broken too; r2 is fine.
        server.set_snapshot(snapshot("v2", listeners=["l1"], routes={"r1": "bad", "r2": "good", "r3": "bad"}))
        rds = await first.response()
        assert route_hosts(rds) == {"r1": "bad"}
        # Rejected; meanwhile a listener wants r3 too.
        await first.nack(rds, "bad route")
        await first.request(ROUTE, ["r3"])
        rds = await first.response()
        assert route_hosts(rds) == {"r3": "bad"}
        await first.nack(rds, "bad route")
        await first.no_response()
        assert (await server.wait_acked("v2", timeout=2)).status is AckStatus.NACKED
    finally:
        await first.close()

    # Envoy restarts: it must not lose r1, which the previous Envoy kept.
    second = FakeEnvoy(server.socket_path)
    try:
        await subscribe_all(second)
        await second.request(ROUTE, ["r1", "r2", "r3"])
        rds = await second.response()
        assert rds.system_version_info == "v2"
        # r3 never worked: it is sent as it is (Envoy rejects it again).
        assert route_hosts(rds) == {"r1": "good", "r2": "good", "r3": "bad"}
        await second.ack(rds)
        # Accepting the old r1 does not make v2 accepted.
        result = await server.wait_acked("v2", timeout=2)
        assert result.status is AckStatus.NACKED and result.message == "bad route"
        assert server.state().types[ROUTE].acked_version == "v1"
        await second.no_response()  # and the rejected version is not pushed by itself

        # A fix is sent as usual: what changed, and the suspects.
        server.set_snapshot(
            snapshot("v3", listeners=["l1"], routes={"r1": "fixed", "r2": "good", "r3": "fixed"})
        )
        rds = await second.response()
        assert route_hosts(rds) == {"r1": "fixed", "r3": "fixed"}
        await second.ack(rds)
        assert (await server.wait_acked("v3", timeout=2)).acked
        assert server.state().types[ROUTE].nack is None
    finally:
        await second.close()


async def test_pushes_acks_and_nacks_are_counted_per_type(server: AdsServer, envoy: FakeEnvoy) -> None:
    server.set_snapshot(snapshot("v1", clusters=["c1"], listeners=["l1"]))
    await subscribe_all(envoy)
    server.set_snapshot(snapshot("v2", clusters=["c1"], listeners=["l2"]))
    await envoy.nack(await envoy.response(), "no")
    await server.wait_for(lambda s: s.types[LISTENER].nack is not None, timeout=2)
    for counter, type_name, value in (
        ("pushes", "Cluster", 1),
        ("pushes", "Listener", 2),
        ("acks", "Cluster", 1),
        ("acks", "Listener", 1),
        ("nacks", "Listener", 1),
    ):
        metric = getattr(server.counters, counter)
        assert metric.value(type_name) == value, (counter, type_name)


def with_assignments(snap: Snapshot, assignments: Mapping[str, int]) -> Snapshot:
    """``snap`` plus an assignment per cluster (its one endpoint's port: its content)."""
    resources = {t: dict(snap.of_type(t)) for t in PUSH_ORDER}
    for name, port in assignments.items():
        message = endpoint_pb2.ClusterLoadAssignment(cluster_name=name)
        lb = message.endpoints.add().lb_endpoints.add()
        lb.endpoint.address.socket_address.address = "192.0.2.1"
        lb.endpoint.address.socket_address.port_value = port
        resources[ENDPOINT][name] = Resource.of(message, name)
    return Snapshot(snap.version, resources)


async def test_a_replaced_cluster_gets_its_assignment_again(server: AdsServer, envoy: FakeEnvoy) -> None:
    """Envoy's replacement of an EDS cluster waits for its assignment and does not ask: it is sent
    again, unchanged, right after the cluster; an assignment alone changes alone."""
    server.set_snapshot(with_assignments(snapshot("v1", clusters={"a": 1, "b": 1}), {"a": 443, "b": 443}))
    await subscribe_all(envoy)
    await envoy.request(ENDPOINT, ["a", "b"])
    eds = await envoy.response()
    assert sorted(item.name for item in eds.resources) == ["a", "b"]
    await envoy.ack(eds)
    # Cluster a changes (a rotated secret, say), its assignment does not.
    server.set_snapshot(with_assignments(snapshot("v2", clusters={"a": 2, "b": 1}), {"a": 443, "b": 443}))
    cds = await envoy.response()
    assert names(cds) == ["a"]
    eds = await envoy.response()
    assert (eds.type_url, [item.name for item in eds.resources]) == (ENDPOINT, ["a"])
    await envoy.ack(cds)
    await envoy.ack(eds)
    # A new answer for b: its assignment alone, no cluster.
    server.set_snapshot(with_assignments(snapshot("v3", clusters={"a": 2, "b": 1}), {"a": 443, "b": 8443}))
    eds = await envoy.response()
    assert (eds.type_url, [item.name for item in eds.resources]) == (ENDPOINT, ["b"])
    await envoy.no_response()
