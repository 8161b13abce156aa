"""Status writes over HTTP to the API-server double: diffed, 409-safe, others' entries kept, leader only."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from apiserver_double import ApiServerDouble
from weir.api.meta import ObjectKey
from weir.providers.kubernetes.api import KubeApi, load_config
from weir.providers.kubernetes.cache import ObjectCache
from weir.providers.kubernetes.provider import WATCHED
from weir.providers.kubernetes.status import StatusWriter, merged_status
from weir.providers.kubernetes.watch import Backoff

GW = "gateway.networking.k8s.io/v1"
OURS = "weir.dev/gateway-controller"
THEIRS = "example.com/other"
KINDS = {k.kind: k for k in WATCHED}
KEY = ObjectKey("HTTPRoute", "default", "web")


def cond(kind: str, status: str, reason: str, when: str | None = None) -> dict[str, Any]:
    out = {"type": kind, "status": status, "reason": reason, "message": "m", "observedGeneration": 1}
    if when is not None:
        out["lastTransitionTime"] = when
    return out


def parent(controller: str, gateway: str, *conds: dict[str, Any]) -> dict[str, Any]:
    return {"parentRef": {"name": gateway}, "controllerName": controller, "conditions": list(conds)}


def desired(when: str = "2025-06-01T00:00:00Z") -> dict[str, Any]:
    """What weir publishes for the route: translation saw no other entry."""
    return {"parents": [parent(OURS, "gw", cond("Accepted", "True", "Accepted", when))]}


def test_merge_keeps_other_controllers_as_they_are_now_and_unchanged_transition_times() -> None:
    current = {
        "parents": [
            parent(THEIRS, "theirs", cond("Accepted", "True", "Accepted", "2020-01-01T00:00:00Z")),
            parent(OURS, "gw", cond("Accepted", "True", "Accepted", "2024-01-01T00:00:00Z")),
        ]
    }
    out = merged_status(desired(), current, OURS, "HTTPRoute")
    assert out == current, "same status and reason: the object's time stays, nothing to write"
    changed = merged_status(
        {
            "parents": [
                parent(OURS, "gw", cond("Accepted", "False", "NotAllowedByListeners", "2025-06-01T00:00:00Z"))
            ]
        },
        current,
        OURS,
        "HTTPRoute",
    )
    assert changed["parents"][0] == current["parents"][0]
    assert changed["parents"][1]["conditions"][0]["lastTransitionTime"] == "2025-06-01T00:00:00Z"
    # The cap of the Gateway API: 32 parents.
    many = {"parents": [parent(THEIRS, f"g{i}") for i in range(40)]}
    assert len(merged_status(desired(), many, OURS, "HTTPRoute")["parents"]) == 32


def ancestor(controller: str, gateway: str) -> dict[str, Any]:
    return {"ancestorRef": {"name": gateway}, "controllerName": controller, "conditions": []}


def test_an_xbackends_ancestors_are_capped_at_32_and_a_policys_at_16() -> None:
    """An XBackend of upstream main's shape keeps ``status.parents``' cap (32) under its new name
    ``ancestors``; a policy's ``ancestors`` (``PolicyStatus``) hold 16. Every ``ancestors`` list
    used to be cut at 16, which dropped weir's own entries behind 16 of other controllers'."""
    theirs = {"ancestors": [ancestor(THEIRS, f"g{i}") for i in range(20)]}
    ours = {"ancestors": [ancestor(OURS, "gw")]}
    xbackend = merged_status(ours, theirs, OURS, "XBackend")["ancestors"]
    assert len(xbackend) == 21 and xbackend[-1] == ours["ancestors"][0]
    many = {"ancestors": [ancestor(THEIRS, f"g{i}") for i in range(40)]}
    assert len(merged_status(ours, many, OURS, "XBackend")["ancestors"]) == 32
    assert len(merged_status(ours, theirs, OURS, "XBackendTrafficPolicy")["ancestors"]) == 16


@pytest.fixture
def api() -> Iterator[ApiServerDouble]:
    server = ApiServerDouble()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def kube(api: ApiServerDouble, tmp_path: Path) -> AsyncIterator[KubeApi]:
    client = KubeApi(load_config(api.write_kubeconfig(tmp_path / "kubeconfig")))
    try:
        yield client
    finally:
        await client.close()


def create_route(api: ApiServerDouble) -> dict[str, Any]:
    return api.create(
        {
            "apiVersion": GW,
            "kind": "HTTPRoute",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"parentRefs": [{"name": "gw"}]},
        }
    )


class Writer:
    def __init__(self, kube: KubeApi, cache: ObjectCache) -> None:
        self.leading = True
        self.writer = StatusWriter(kube, cache, KINDS, OURS, lambda: self.leading, Backoff(0.01, 0.05))
        self.task = asyncio.create_task(self.writer.run())

    async def settle(self) -> None:
        """Let the writer work (each step is one local HTTP round trip, well under 0.3 s)."""
        await asyncio.sleep(0.3)

    async def close(self) -> None:
        self.task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await self.task


def writes(api: ApiServerDouble) -> int:
    return sum(1 for m, p in api.requests if m == "PATCH" and p.split("?")[0].endswith("/status"))


async def test_a_stale_version_gets_409_and_the_write_merges_what_another_controller_wrote(
    api: ApiServerDouble, kube: KubeApi
) -> None:
    cache = ObjectCache()
    cache.replace(KINDS["HTTPRoute"], None, [create_route(api)])  # weir's view, then someone writes
    api.patch_status(GW, "HTTPRoute", "default", "web", {"parents": [parent(THEIRS, "theirs")]})
    w = Writer(kube, cache)
    try:
        w.writer.submit({KEY: desired()})
        await w.settle()
        assert (w.writer.conflicts, w.writer.writes) == (1, 1)
        status = (api.get(GW, "HTTPRoute", "default", "web") or {})["status"]
        assert [p["controllerName"] for p in status["parents"]] == [THEIRS, OURS]

        # Injected conflicts: re-read, re-applied.
        api.clear_requests()
        w.writer.submit({KEY: {"parents": [parent(OURS, "gw", cond("Accepted", "False", "Invalid", "t"))]}})
        api.fail_next("PATCH", "/apis/gateway.networking.k8s.io/v1/namespaces/default/httproutes/web", 409)
        await w.settle()
        assert writes(api) == 2 and w.writer.conflicts == 2
        status = (api.get(GW, "HTTPRoute", "default", "web") or {})["status"]
        assert status["parents"][1]["conditions"][0]["reason"] == "Invalid"
    finally:
        await w.close()


async def test_nothing_is_written_when_nothing_changed_nor_by_a_follower(
    api: ApiServerDouble, kube: KubeApi
) -> None:
    cache = ObjectCache()
    cache.replace(KINDS["HTTPRoute"], None, [create_route(api)])
    w = Writer(kube, cache)
    try:
        w.leading = False
        w.writer.submit({KEY: desired()})
        await w.settle()
        assert writes(api) == 0
        w.leading = True
        w.writer.resync()  # what the provider does on becoming leader
        await w.settle()
        assert writes(api) == 1
        # The same statuses again (a later time from a new leader's store): nothing to write, even
        # before the watch brings weir's own write back.
        for _ in range(3):
            w.writer.submit({KEY: copy.deepcopy(desired("2030-01-01T00:00:00Z"))})
            await w.settle()
        assert writes(api) == 1
        # The object is deleted: nothing is written, nothing fails.
        api.delete(GW, "HTTPRoute", "default", "web")
        w.writer.submit({KEY: {"parents": [parent(OURS, "gw", cond("Accepted", "False", "Invalid"))]}})
        await w.settle()
        assert writes(api) == 2 and w.writer.writes == 1
    finally:
        await w.close()
