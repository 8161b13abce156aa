"""apiserver_double.ApiServerDouble, driven over loopback HTTP by the real lightkube client.

Each test talks to the double as weir's Kubernetes provider does: lightkube's
AsyncClient with generic resources (the Gateway API kinds) and its built-in
models (ConfigMap, Service, Lease), plus raw httpx where lightkube has no
call for it (bookmarks, raw list bodies).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from lightkube import ApiError, AsyncClient, KubeConfig, operators
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.core_v1 import ServicePort, ServiceSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import ConfigMap, Service
from lightkube.types import OnErrorAction, OnErrorResult, PatchType

from apiserver_double import (
    DEFAULT_KINDS,
    XBACKEND,
    ApiServerDouble,
    ApiStatusError,
    kinds_without,
)
from weir.testkit.net import NonLoopbackAddressError

pytestmark = pytest.mark.timeout(20)

GW = "gateway.networking.k8s.io"
Gateway = create_namespaced_resource(GW, "v1", "Gateway", "gateways")
GatewayClass = create_global_resource(GW, "v1", "GatewayClass", "gatewayclasses")
XBackend = create_namespaced_resource("gateway.networking.x-k8s.io", "v1alpha1", "XBackend", "xbackends")


def _socket_fds() -> set[str]:
    """Targets of this process's open socket file descriptors."""
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:"):
            found.add(target)
    return found


def _double_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("apiserver-double")]


def _refused(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


@pytest.fixture
def double() -> Iterator[ApiServerDouble]:
    server = ApiServerDouble(bookmark_interval_s=0.2)
    server.start()
    yield server
    server.stop()
    assert not _double_threads(), "the double's thread outlived stop()"
    assert _refused(server.port), "the double still listens after stop()"


def _client(server: ApiServerDouble, tmp_path: Path, token: str | None = None) -> AsyncClient:
    config = server.write_kubeconfig(tmp_path / f"kubeconfig-{token}", token=token)
    return AsyncClient(KubeConfig.from_file(config), trust_env=False)


@pytest.fixture
async def client(double: ApiServerDouble, tmp_path: Path) -> AsyncIterator[AsyncClient]:
    kube = _client(double, tmp_path)
    yield kube
    await kube.close()


def gateway(name: str, namespace: str = "default", **labels: str) -> Any:
    meta = ObjectMeta(name=name, namespace=namespace, labels=labels or None)
    return Gateway(metadata=meta, spec={"gatewayClassName": "weir", "listeners": []})


def gateway_dict(name: str, namespace: str = "default") -> dict[str, Any]:
    """A Gateway as a plain dict, for the double's direct-manipulation methods."""
    return {"apiVersion": f"{GW}/v1", "kind": "Gateway", **gateway(name, namespace).to_dict()}


async def take(events: AsyncIterator[tuple[str, Any]], count: int) -> list[tuple[str, str]]:
    """The next ``count`` watch events as (type, name); fails after 3 s."""
    got = []
    for _ in range(count):
        kind, obj = await asyncio.wait_for(anext(events), 3.0)
        got.append((kind, obj.metadata.name))
    return got


# -- CRUD -------------------------------------------------------------------------------


async def test_generic_resource_crud_and_status_subresource(
    client: AsyncClient, double: ApiServerDouble
) -> None:
    created = await client.create(gateway("edge"))
    meta = created.metadata
    assert (meta.generation, meta.namespace) == (1, "default")
    assert meta.uid and meta.creationTimestamp and int(meta.resourceVersion) > 0

    got = await client.get(Gateway, "edge", namespace="default")
    assert got["spec"]["gatewayClassName"] == "weir" and got.apiVersion == f"{GW}/v1"

    # Status through /status: status changes, generation does not.
    patched = await client.patch(
        Gateway.Status,
        "edge",
        {"status": {"conditions": [{"type": "Accepted", "status": "True"}]}},
        namespace="default",
        patch_type=PatchType.MERGE,
    )
    assert patched["status"]["conditions"][0]["type"] == "Accepted"
    assert patched.metadata.generation == 1
    assert int(patched.metadata.resourceVersion) > int(meta.resourceVersion)

    # Replace through the main endpoint: spec changes (generation 2), status sent is ignored.
    body = dict(patched)
    body["spec"] = {"gatewayClassName": "other", "listeners": []}
    body["status"] = {"conditions": []}
    replaced = await client.replace(Gateway(body))
    assert replaced.metadata.generation == 2
    assert replaced["status"]["conditions"][0]["type"] == "Accepted"

    # A label change is metadata only: new resourceVersion, same generation.
    labelled = await client.patch(
        Gateway, "edge", {"metadata": {"labels": {"a": "b"}}}, namespace="default", patch_type=PatchType.MERGE
    )
    assert labelled.metadata.generation == 2
    assert int(labelled.metadata.resourceVersion) > int(replaced.metadata.resourceVersion)

    assert [g.metadata.name async for g in client.list(Gateway, namespace="*")] == ["edge"]
    await client.delete(Gateway, "edge", namespace="default")
    with pytest.raises(ApiError) as missing:
        await client.get(Gateway, "edge", namespace="default")
    assert missing.value.status.code == 404 and missing.value.status.reason == "NotFound"
    assert missing.value.status.message == f'gateways.{GW} "edge" not found'

    status_writes = [r for r in double.requests if r[0] == "PATCH" and r[1].endswith("/edge/status")]
    assert status_writes == [("PATCH", f"/apis/{GW}/v1/namespaces/default/gateways/edge/status")]


async def test_cluster_scoped_and_builtin_kinds(client: AsyncClient, double: ApiServerDouble) -> None:
    await client.create(GatewayClass(metadata=ObjectMeta(name="weir"), spec={"controllerName": "weir.dev/x"}))
    assert [c.metadata.name async for c in client.list(GatewayClass)] == ["weir"]
    assert double.get(f"{GW}/v1", "GatewayClass", None, "weir") is not None

    for ns, name, app in [("a", "one", "x"), ("a", "two", "y"), ("b", "three", "x")]:
        await client.create(ConfigMap(metadata=ObjectMeta(name=name, namespace=ns, labels={"app": app})))
    everywhere = [
        (c.metadata.namespace, c.metadata.name) async for c in client.list(ConfigMap, namespace="*")
    ]
    assert everywhere == [("a", "one"), ("a", "two"), ("b", "three")]
    in_a = [c.metadata.name async for c in client.list(ConfigMap, namespace="a", labels={"app": "x"})]
    assert in_a == ["one"]
    by_field = [
        c.metadata.name
        async for c in client.list(ConfigMap, namespace="*", fields={"metadata.name": "three"})
    ]
    assert by_field == ["three"]

    # As from a real API server: built-in list items carry no apiVersion/kind; CRD items do.
    raw = httpx.get(f"{double.url}/api/v1/namespaces/a/configmaps").json()
    assert raw["kind"] == "ConfigMapList" and "kind" not in raw["items"][0]
    raw = httpx.get(f"{double.url}/apis/{GW}/v1/gatewayclasses").json()
    assert raw["items"][0]["kind"] == "GatewayClass"

    bad = httpx.get(f"{double.url}/api/v1/configmaps", params={"fieldSelector": "data.x=1"})
    assert bad.status_code == 400 and bad.json()["message"] == "field label not supported: data.x"


async def test_resource_version_is_global_and_noop_writes_change_nothing(
    client: AsyncClient, double: ApiServerDouble
) -> None:
    versions = []
    for i in range(3):
        versions.append(int((await client.create(gateway(f"g{i}"))).metadata.resourceVersion))
        cm = await client.create(ConfigMap(metadata=ObjectMeta(name=f"c{i}", namespace="default")))
        versions.append(int(cm.metadata.resourceVersion))
    assert versions == sorted(versions) and len(set(versions)) == 6
    assert double.resource_version == str(versions[-1])

    # The same status twice: the second write is a no-op (same resourceVersion, no event).
    status = {"status": {"conditions": [{"type": "Accepted", "status": "True"}]}}
    first = await client.patch(Gateway.Status, "g0", status, namespace="default", patch_type=PatchType.MERGE)
    again = await client.patch(Gateway.Status, "g0", status, namespace="default", patch_type=PatchType.MERGE)
    assert first.metadata.resourceVersion == again.metadata.resourceVersion == double.resource_version


async def test_create_errors(client: AsyncClient) -> None:
    await client.create(gateway("twice"))
    with pytest.raises(ApiError) as exists:
        await client.create(gateway("twice"))
    assert (exists.value.status.code, exists.value.status.reason) == (409, "AlreadyExists")
    assert exists.value.status.message == f'gateways.{GW} "twice" already exists'

    with pytest.raises(ApiError) as unnamed:
        await client.create(Gateway(metadata=ObjectMeta(namespace="default"), spec={}))
    assert (unnamed.value.status.code, unnamed.value.status.reason) == (422, "Invalid")
    assert "metadata.name: Required value" in unnamed.value.status.message

    named = await client.create(
        Gateway(metadata=ObjectMeta(generateName="gen-", namespace="default"), spec={})
    )
    assert named.metadata.name.startswith("gen-") and len(named.metadata.name) == 9


async def test_label_selector_operators(client: AsyncClient) -> None:
    for name, labels in [
        ("web", {"app": "web", "tier": "front"}),
        ("api", {"app": "api", "tier": "back", "canary": "yes"}),
        ("db", {"app": "db", "tier": "back"}),
        ("bare", {}),
    ]:
        await client.create(
            ConfigMap(metadata=ObjectMeta(name=name, namespace="default", labels=labels or None))
        )

    async def names(labels: dict[str, Any]) -> list[str]:
        return [c.metadata.name async for c in client.list(ConfigMap, labels=labels)]

    assert await names({"app": operators.in_(["web", "api"])}) == ["api", "web"]
    assert await names({"app": operators.not_in(["web", "api"])}) == ["bare", "db"]
    assert await names({"tier": operators.not_equal("back")}) == ["bare", "web"]
    assert await names({"canary": operators.exists()}) == ["api"]
    assert await names({"tier": "back", "canary": operators.not_exists()}) == ["db"]
    bad = httpx.get(f"{client.config.cluster.server}/api/v1/configmaps", params={"labelSelector": "a in (b"})
    assert (bad.status_code, bad.json()["reason"]) == (400, "BadRequest")


def test_json_patch_operations() -> None:
    server = ApiServerDouble()
    server.create(gateway_dict("g"))
    ops = [
        {"op": "add", "path": "/spec/listeners/0", "value": {"name": "a"}},
        {"op": "add", "path": "/spec/listeners/-", "value": {"name": "b"}},
        {"op": "copy", "from": "/spec/listeners/0", "path": "/spec/first"},
        {"op": "move", "from": "/spec/listeners/1", "path": "/spec/second"},
        {"op": "replace", "path": "/spec/gatewayClassName", "value": "z"},
        {"op": "remove", "path": "/spec/first/name"},
        {"op": "test", "path": "/spec/second/name", "value": "b"},
        {"op": "add", "path": "/metadata/annotations", "value": {"a~/b": "1"}},
        {"op": "replace", "path": "/metadata/annotations/a~0~1b", "value": "2"},
    ]
    patched = server.patch(
        f"{GW}/v1", "Gateway", "default", "g", ops, patch_type="application/json-patch+json"
    )
    assert patched["spec"] == {
        "gatewayClassName": "z",
        "listeners": [{"name": "a"}],
        "first": {},
        "second": {"name": "b"},
    }
    assert patched["metadata"]["annotations"] == {"a~/b": "2"}
    with pytest.raises(ApiStatusError) as missing:
        server.patch(
            f"{GW}/v1",
            "Gateway",
            "default",
            "g",
            [{"op": "remove", "path": "/spec/nope"}],
            patch_type="application/json-patch+json",
        )
    assert missing.value.code == 422


# -- optimistic concurrency -----------------------------------------------------------------


async def test_stale_status_patch_is_a_conflict(client: AsyncClient) -> None:
    created = await client.create(gateway("edge"))
    stale = created.metadata.resourceVersion
    await client.patch(Gateway, "edge", {"spec": {"listeners": [{"name": "x"}]}}, patch_type=PatchType.MERGE)
    with pytest.raises(ApiError) as conflict:
        await client.patch(
            Gateway.Status,
            "edge",
            {"metadata": {"resourceVersion": stale}, "status": {"conditions": []}},
            patch_type=PatchType.MERGE,
        )
    status = conflict.value.status
    assert (status.code, status.reason) == (409, "Conflict")
    assert status.message == (
        f'Operation cannot be fulfilled on gateways.{GW} "edge": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )

    # PUT /status: a stale resourceVersion conflicts, the current one succeeds.
    current = await client.get(Gateway, "edge")
    body = dict(current)
    body["status"] = {"conditions": [{"type": "Programmed", "status": "True"}]}
    body["metadata"] = {**current["metadata"], "resourceVersion": stale}
    with pytest.raises(ApiError) as put_conflict:
        await client.replace(Gateway.Status(body), "edge")
    assert put_conflict.value.status.code == 409
    body["metadata"]["resourceVersion"] = current.metadata.resourceVersion
    written = await client.replace(Gateway.Status(body), "edge")
    assert written["status"]["conditions"][0]["type"] == "Programmed"

    # A CRD PUT must carry a resourceVersion (AllowUnconditionalUpdate is false for CRDs).
    del body["metadata"]["resourceVersion"]
    with pytest.raises(ApiError) as unconditional:
        await client.replace(Gateway(body))
    assert (unconditional.value.status.code, unconditional.value.status.reason) == (422, "Invalid")


async def test_lease_semantics_for_leader_election(client: AsyncClient) -> None:
    def lease(holder: str, rv: str | None = None) -> Lease:
        spec = LeaseSpec(holderIdentity=holder, leaseDurationSeconds=2, renewTime=datetime.now(UTC))
        return Lease(metadata=ObjectMeta(name="weir-leader", namespace="weir", resourceVersion=rv), spec=spec)

    mine = await client.create(lease("a"))
    with pytest.raises(ApiError) as taken:
        await client.create(lease("b"))
    assert (taken.value.status.code, taken.value.status.reason) == (409, "AlreadyExists")

    renewed = await client.replace(lease("a", mine.metadata.resourceVersion))
    assert renewed.spec.holderIdentity == "a"
    with pytest.raises(ApiError) as stale:  # b read the lease before a renewed it
        await client.replace(lease("b", mine.metadata.resourceVersion))
    assert (stale.value.status.code, stale.value.status.reason) == (409, "Conflict")
    got = await client.get(Lease, "weir-leader", namespace="weir")
    assert got.spec.holderIdentity == "a" and got.metadata.resourceVersion == renewed.metadata.resourceVersion
    # Leases are built in: a PUT without a resourceVersion is unconditional.
    assert (await client.replace(lease("c"))).spec.holderIdentity == "c"


# -- patch types ---------------------------------------------------------------------------


async def test_patch_types(client: AsyncClient, double: ApiServerDouble) -> None:
    await client.create(gateway("edge"))
    ops = [{"op": "add", "path": "/spec/listeners/-", "value": {"name": "http", "port": 80}}]
    json_patched = await client.patch(Gateway, "edge", ops, patch_type=PatchType.JSON)
    assert json_patched["spec"]["listeners"] == [{"name": "http", "port": 80}]
    with pytest.raises(ApiError) as failed_test:
        await client.patch(
            Gateway,
            "edge",
            [{"op": "test", "path": "/spec/gatewayClassName", "value": "x"}],
            patch_type=PatchType.JSON,
        )
    assert failed_test.value.status.code == 422

    # Server-side apply of status, with a field manager and force.
    applied = await client.patch(
        Gateway.Status,
        "edge",
        {
            "apiVersion": f"{GW}/v1",
            "kind": "Gateway",
            "metadata": {"name": "edge"},
            "status": {"addresses": []},
        },
        patch_type=PatchType.APPLY,
        field_manager="weir",
        force=True,
    )
    assert applied["status"] == {"addresses": []}
    managers = {
        (m["manager"], m["operation"], m.get("subresource")) for m in applied["metadata"]["managedFields"]
    }
    assert ("weir", "Apply", "status") in managers
    assert any("force=true" in path and "fieldManager=weir" in path for _, path in double.requests)

    # Apply bodies are YAML (lightkube sends JSON, which is YAML too); a field manager is required.
    url = f"{double.url}/apis/{GW}/v1/namespaces/default/gateways/edge"
    yaml_body = f"apiVersion: {GW}/v1\nkind: Gateway\nmetadata:\n  name: edge\nspec:\n  gatewayClassName: y\n"
    headers = {"content-type": "application/apply-patch+yaml"}
    unmanaged = httpx.patch(url, content=yaml_body, headers=headers)
    assert (unmanaged.status_code, unmanaged.json()["reason"]) == (422, "Invalid")
    managed = httpx.patch(url, content=yaml_body, headers=headers, params={"fieldManager": "me"})
    assert managed.status_code == 200 and managed.json()["spec"]["gatewayClassName"] == "y"

    # Apply to an object that does not exist creates it.
    new = await client.apply(gateway("fresh"), field_manager="weir")
    assert new.metadata.name == "fresh" and new.metadata.generation == 1

    # Strategic merge patch: refused for a CRD (as Kubernetes does), taken for a built-in kind.
    with pytest.raises(ApiError) as unsupported:
        await client.patch(Gateway, "edge", {"spec": {"gatewayClassName": "x"}})
    assert (unsupported.value.status.code, unsupported.value.status.reason) == (415, "UnsupportedMediaType")
    spec = ServiceSpec(ports=[ServicePort(port=80)])
    await client.create(Service(metadata=ObjectMeta(name="svc", namespace="default"), spec=spec))
    patched = await client.patch(Service, "svc", {"metadata": {"labels": {"x": "y"}}})
    assert patched.metadata.labels == {"x": "y"}
    status = {"status": {"loadBalancer": {"ingress": [{"ip": "127.0.0.9"}]}}}
    with_status = await client.patch(Service.Status, "svc", status, patch_type=PatchType.MERGE)
    assert with_status.status.loadBalancer.ingress[0].ip == "127.0.0.9"


# -- watch -----------------------------------------------------------------------------------


async def watching(double: ApiServerDouble, count: int = 1) -> None:
    """Wait until the double has ``count`` open watch streams."""
    for _ in range(300):
        if double.open_watches == count:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{double.open_watches} open watches, not {count}")


async def test_watch_sees_live_changes_in_order(client: AsyncClient, double: ApiServerDouble) -> None:
    await client.create(gateway("before"))
    listed = client.list(Gateway, namespace="default")
    assert [g.metadata.name async for g in listed] == ["before"]
    events = client.watch(Gateway, namespace="default", resource_version=listed.resourceVersion)
    seen = asyncio.create_task(take(events, 3))
    try:
        await watching(double)
        await client.create(gateway("a"))
        double.patch(f"{GW}/v1", "Gateway", "default", "a", {"spec": {"gatewayClassName": "b"}})
        await client.create(gateway("elsewhere", namespace="other"))  # another namespace: not seen
        double.delete(f"{GW}/v1", "Gateway", "default", "a")
        assert await seen == [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]
    finally:
        await events.aclose()


async def test_watch_without_resource_version_starts_with_current_state(client: AsyncClient) -> None:
    for name in ("x", "y"):
        await client.create(gateway(name))
    events = client.watch(Gateway, namespace="*")
    try:
        assert await take(events, 2) == [("ADDED", "x"), ("ADDED", "y")]
        await client.delete(Gateway, "x")
        assert await take(events, 1) == [("DELETED", "x")]
    finally:
        await events.aclose()


async def test_watch_resumes_from_a_resource_version_and_replays_missed_events(
    client: AsyncClient, double: ApiServerDouble
) -> None:
    await client.create(gateway("kept"))
    since = double.resource_version
    # Changes while nobody watches, some straight into the store from another thread.
    worker = threading.Thread(target=lambda: double.create(gateway_dict("from-thread")))
    worker.start()
    worker.join()
    await client.patch(Gateway, "kept", {"spec": {"listeners": [{"name": "l"}]}}, patch_type=PatchType.MERGE)
    await client.delete(Gateway, "from-thread")
    events = client.watch(Gateway, namespace="default", resource_version=since)
    try:
        assert await take(events, 3) == [
            ("ADDED", "from-thread"),
            ("MODIFIED", "kept"),
            ("DELETED", "from-thread"),
        ]
    finally:
        await events.aclose()


async def test_label_selected_watch_sees_objects_enter_and_leave(client: AsyncClient) -> None:
    await client.create(gateway("g", app="web"))
    events = client.watch(Gateway, namespace="default", labels={"app": "web"})
    try:
        assert await take(events, 1) == [("ADDED", "g")]
        await client.patch(Gateway, "g", {"metadata": {"labels": {"app": "db"}}}, patch_type=PatchType.MERGE)
        assert await take(events, 1) == [("DELETED", "g")]
        await client.patch(Gateway, "g", {"metadata": {"labels": {"app": "web"}}}, patch_type=PatchType.MERGE)
        assert await take(events, 1) == [("ADDED", "g")]
    finally:
        await events.aclose()


async def test_compact_expires_open_and_resuming_watches(
    client: AsyncClient, double: ApiServerDouble
) -> None:
    await client.create(gateway("a"))
    old = double.resource_version
    events = client.watch(Gateway, namespace="default", resource_version=old)
    try:
        await client.create(gateway("b"))
        assert await take(events, 1) == [("ADDED", "b")]
        double.compact()
        with pytest.raises(ApiError) as open_watch:
            await asyncio.wait_for(anext(events), 3.0)
        assert (open_watch.value.status.code, open_watch.value.status.reason) == (410, "Expired")
    finally:
        await events.aclose()

    resumed = client.watch(Gateway, namespace="default", resource_version=old)
    try:
        with pytest.raises(ApiError) as too_old:
            await asyncio.wait_for(anext(resumed), 3.0)
        assert too_old.value.status.code == 410
        assert too_old.value.status.message.startswith(f"too old resource version: {old}")
    finally:
        await resumed.aclose()

    # lightkube's retry handler restarts without a resourceVersion after a 410: current state as ADDED.
    def retry(exc: Exception, count: int) -> OnErrorResult:
        return OnErrorResult(OnErrorAction.RETRY if count < 3 else OnErrorAction.RAISE)

    relisted = client.watch(Gateway, namespace="default", resource_version=old, on_error=retry)
    try:
        assert await take(relisted, 2) == [("ADDED", "a"), ("ADDED", "b")]
    finally:
        await relisted.aclose()


async def test_history_limit_expires_old_resource_versions(tmp_path: Path) -> None:
    server = ApiServerDouble(history_limit=3)
    server.start()
    kube = _client(server, tmp_path)
    try:
        server.create(gateway_dict("seed"))  # so that the resourceVersion before g0 is not "0" ("any")
        first = server.create(gateway_dict("g0"))["metadata"]["resourceVersion"]
        for i in range(1, 4):
            server.create(gateway_dict(f"g{i}"))
        # Events after `first` are g1..g3: still held. Before it (g0's own creation): gone.
        kept = kube.watch(Gateway, namespace="default", resource_version=first)
        assert await take(kept, 3) == [("ADDED", "g1"), ("ADDED", "g2"), ("ADDED", "g3")]
        await kept.aclose()
        gone = kube.watch(Gateway, namespace="default", resource_version=str(int(first) - 1))
        with pytest.raises(ApiError) as expired:
            await asyncio.wait_for(anext(gone), 3.0)
        assert expired.value.status.code == 410
        await gone.aclose()
    finally:
        await kube.close()
        server.stop()


async def test_bookmarks_and_timeout_seconds(double: ApiServerDouble) -> None:
    double.create(gateway_dict("a"))
    since = double.resource_version
    params = {"watch": "true", "resourceVersion": since, "allowWatchBookmarks": "true", "timeoutSeconds": "1"}
    url = f"{double.url}/apis/{GW}/v1/namespaces/default/gateways"
    lines: list[dict[str, Any]] = []
    async with httpx.AsyncClient() as raw, raw.stream("GET", url, params=params) as response:
        assert response.headers["content-type"] == "application/json"
        assert response.headers["transfer-encoding"] == "chunked"
        async for line in response.aiter_lines():
            lines.append(json.loads(line))
            if len(lines) == 1:
                double.create(gateway_dict("b"))
    # The stream ended by itself after timeoutSeconds, cleanly (no exception above).
    types = [e["type"] for e in lines]
    assert "ADDED" in types and types.count("BOOKMARK") >= 3
    added = next(e for e in lines if e["type"] == "ADDED")
    assert added["object"]["metadata"]["name"] == "b"
    last_bookmark = [e for e in lines if e["type"] == "BOOKMARK"][-1]["object"]
    assert last_bookmark == {
        "kind": "Gateway",
        "apiVersion": f"{GW}/v1",
        "metadata": {"resourceVersion": double.resource_version, "creationTimestamp": None},
    }
    # A bookmark's resourceVersion covers every event before it and none after it.
    versions = [(e["type"], int(e["object"]["metadata"]["resourceVersion"])) for e in lines]
    for i, (kind, rv) in enumerate(versions):
        if kind == "BOOKMARK":
            assert all(v <= rv for _, v in versions[:i]) and all(
                v > rv for k, v in versions[i + 1 :] if k != "BOOKMARK"
            )


async def test_lightkube_reconnects_after_server_timeout_from_last_version(
    client: AsyncClient, double: ApiServerDouble
) -> None:
    events = client.watch(Gateway, namespace="default", server_timeout=1)
    try:
        await client.create(gateway("a"))
        assert await take(events, 1) == [("ADDED", "a")]
        seen_rv = double.resource_version
        await watching(double, 0)  # the server ended the stream after 1 s; lightkube will ask again
        await client.create(gateway("b"))
        assert await take(events, 1) == [("ADDED", "b")]
    finally:
        await events.aclose()
    watches = [path for method, path in double.requests if "watch=true" in path]
    assert len(watches) == 2 and f"resourceVersion={seen_rv}" in watches[1]


# -- CRDs ----------------------------------------------------------------------------------


async def test_crd_absent_then_installed_then_removed(tmp_path: Path) -> None:
    server = ApiServerDouble(kinds=kinds_without("XBackend"))
    server.start()
    kube = _client(server, tmp_path)
    try:
        with pytest.raises(ApiError) as absent:
            _ = [x async for x in kube.list(XBackend, namespace="*")]
        assert (absent.value.status.code, absent.value.status.message) == (
            404,
            "the server could not find the requested resource",
        )
        # lightkube's watch raises a failed response as it is (httpx2.HTTPStatusError, not ApiError).
        events = kube.watch(XBackend, namespace="default")
        with pytest.raises(httpx2.HTTPStatusError) as absent_watch:
            await asyncio.wait_for(anext(events), 3.0)
        assert absent_watch.value.response.status_code == 404
        await events.aclose()
        raw_watch = httpx.get(f"{server.url}/apis/{XBACKEND.group}/{XBACKEND.version}/xbackends?watch=1")
        assert (raw_watch.status_code, raw_watch.json()["reason"]) == (404, "NotFound")
        with pytest.raises(ApiStatusError):
            server.create({"apiVersion": XBACKEND.api_version, "kind": "XBackend", "metadata": {"name": "x"}})

        server.install_crd(XBACKEND.group, XBACKEND.version, XBACKEND.plural, XBACKEND.kind)
        await kube.create(XBackend(metadata=ObjectMeta(name="api", namespace="default"), spec={}))
        assert [x.metadata.name async for x in kube.list(XBackend, namespace="*")] == ["api"]
        discovery = httpx.get(f"{server.url}/apis/{XBACKEND.group}/{XBACKEND.version}").json()
        # The group's other kind (XBackendTrafficPolicy) was served all along.
        assert {r["name"] for r in discovery["resources"]} == {
            "xbackends",
            "xbackends/status",
            "xbackendtrafficpolicies",
            "xbackendtrafficpolicies/status",
        }

        # Deleting the CRD deletes its objects (watchers see it), then the resource is gone.
        events = kube.watch(XBackend, namespace="default")
        assert await take(events, 1) == [("ADDED", "api")]
        server.uninstall_crd(XBACKEND.group, XBACKEND.version, XBACKEND.plural)
        assert await take(events, 1) == [("DELETED", "api")]
        with pytest.raises(httpx2.HTTPStatusError) as after:  # lightkube reconnects after the stream ends
            await asyncio.wait_for(anext(events), 3.0)
        assert after.value.response.status_code == 404
        await events.aclose()
    finally:
        await kube.close()
        server.stop()


def test_default_kinds_cover_what_weir_reads() -> None:
    from weir.api.registry import MODELS

    served = {(k.api_version, k.kind) for k in DEFAULT_KINDS}
    for model in MODELS:
        for version in (model.API_VERSION, *model.ALSO_SERVED):
            assert (version, model.KIND) in served
    assert ("coordination.k8s.io/v1", "Lease") in served
    assert XBACKEND in DEFAULT_KINDS and XBACKEND not in kinds_without("XBackend")


async def test_versions_of_a_resource_share_objects(client: AsyncClient) -> None:
    v1beta1 = create_namespaced_resource(GW, "v1beta1", "ReferenceGrant", "referencegrants")
    v1 = create_namespaced_resource(GW, "v1", "ReferenceGrant", "referencegrants")
    await client.create(
        v1beta1(metadata=ObjectMeta(name="rg", namespace="default"), spec={"from": [], "to": []})
    )
    got = await client.get(v1, "rg")
    assert got.apiVersion == f"{GW}/v1" and got.metadata.name == "rg"


# -- restart, auth, faults ---------------------------------------------------------------------


async def test_restart_keeps_objects_versions_and_port_and_cuts_watches(
    client: AsyncClient, double: ApiServerDouble
) -> None:
    await client.create(gateway("a"))
    port, url = double.port, double.url
    events = client.watch(Gateway, namespace="default")
    assert await take(events, 1) == [("ADDED", "a")]
    before = double.resource_version

    double.stop()
    with pytest.raises(httpx2.TransportError):
        await asyncio.wait_for(anext(events), 3.0)
    await events.aclose()
    assert not _double_threads()
    # While it is down the data can still be changed, as a test changes etcd.
    double.create(gateway_dict("made-while-down"))

    double.start()
    assert (double.port, double.url) == (port, url)
    names = [g.metadata.name async for g in client.list(Gateway, namespace="default")]
    assert names == ["a", "made-while-down"]
    resumed = client.watch(Gateway, namespace="default", resource_version=before)
    try:
        assert await take(resumed, 1) == [("ADDED", "made-while-down")]
    finally:
        await resumed.aclose()
    assert int(double.resource_version) == int(before) + 1


async def test_bearer_token_is_required_once_known(double: ApiServerDouble, tmp_path: Path) -> None:
    anonymous = _client(double, tmp_path)
    authorized = _client(double, tmp_path, token="s3cret")  # from now on a token is required
    try:
        await authorized.create(gateway("a"))
        assert [g.metadata.name async for g in authorized.list(Gateway)] == ["a"]
        with pytest.raises(ApiError) as denied:
            await anonymous.get(Gateway, "a")
        assert (denied.value.status.code, denied.value.status.reason) == (401, "Unauthorized")
        wrong = httpx.get(f"{double.url}/api/v1/namespaces", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
    finally:
        await anonymous.close()
        await authorized.close()


async def test_fail_next_injects_errors(client: AsyncClient, double: ApiServerDouble) -> None:
    await client.create(gateway("a"))
    double.fail_next("PATCH", f"/apis/{GW}/v1/namespaces/default/gateways/a/status", status=503, count=2)
    for _ in range(2):
        with pytest.raises(ApiError) as failed:
            await client.patch(Gateway.Status, "a", {"status": {}}, patch_type=PatchType.MERGE)
        assert (failed.value.status.code, failed.value.status.reason) == (503, "ServiceUnavailable")
    await client.patch(Gateway.Status, "a", {"status": {"x": 1}}, patch_type=PatchType.MERGE)


async def test_list_pagination(client: AsyncClient, double: ApiServerDouble) -> None:
    for i in range(5):
        await client.create(ConfigMap(metadata=ObjectMeta(name=f"c{i}", namespace="default")))
    listed = client.list(ConfigMap, chunk_size=2)
    names = [c.metadata.name async for c in listed]
    assert names == [f"c{i}" for i in range(5)]
    pages = [
        path for method, path in double.requests if path.startswith("/api/v1/namespaces/default/configmaps?")
    ]
    assert len(pages) == 3 and all("limit=2" in p for p in pages) and "continue=" in pages[1]


def test_direct_manipulation_and_loopback_only() -> None:
    server = ApiServerDouble()  # never started: the store works all the same
    server.create(gateway_dict("a"))
    assert server.get(f"{GW}/v1", "Gateway", "default", "a") is not None
    assert [o["metadata"]["name"] for o in server.list(f"{GW}/v1", "Gateway")] == ["a"]
    server.patch_status(f"{GW}/v1", "Gateway", "default", "a", {"conditions": []})
    server.delete(f"{GW}/v1", "Gateway", "default", "a")
    assert server.get(f"{GW}/v1", "Gateway", "default", "a") is None
    with pytest.raises(ApiStatusError) as missing:
        server.delete(f"{GW}/v1", "Gateway", "default", "a")
    assert missing.value.code == 404
    with pytest.raises(NonLoopbackAddressError):
        ApiServerDouble(host="0.0.0.0")


def test_stop_leaks_no_threads_or_sockets() -> None:
    sockets_before, threads_before = _socket_fds(), set(threading.enumerate())
    server = ApiServerDouble(bookmark_interval_s=0.1)
    server.start()
    with httpx.Client() as raw:
        assert raw.get(f"{server.url}/api/v1/namespaces").status_code == 200
        with raw.stream("GET", f"{server.url}/api/v1/namespaces?watch=1&allowWatchBookmarks=true") as watch:
            first = json.loads(next(watch.iter_lines()))
            assert first["type"] == "BOOKMARK"
            server.stop()
    assert set(threading.enumerate()) == threads_before
    assert _socket_fds() == sockets_before
    assert _refused(server.port)
