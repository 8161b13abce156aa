"""Leader election over a real Lease on the API-server double, with short timings."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from apiserver_double import ApiServerDouble
from weir.providers.kubernetes.api import KubeApi, load_config
from weir.providers.kubernetes.leader import LeaderElector, LeaseSettings

DURATION = 1.0  # renew deadline 0.67 s, retry period 0.13 s


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


class Candidate:
    def __init__(self, kube: KubeApi, name: str) -> None:
        self.changes: list[bool] = []
        settings = LeaseSettings.scaled("weir-system", "weir-leader", name, DURATION)
        self.elector = LeaderElector(kube, settings, on_change=self.changes.append)
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.create_task(self.elector.run())

    async def crash(self) -> None:
        """Stop renewing without handing the Lease back (a killed process)."""
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
            self.task = None


def lease(api: ApiServerDouble) -> dict[str, Any]:
    obj = api.get("coordination.k8s.io/v1", "Lease", "weir-system", "weir-leader") or {}
    spec: dict[str, Any] = obj.get("spec") or {}
    return spec


async def until(check: Any, timeout: float = 5.0) -> float:
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < timeout, "condition not met in time"
        await asyncio.sleep(0.01)
    return time.monotonic() - started


async def test_one_leader_then_a_takeover_after_the_lease_expires(
    api: ApiServerDouble, kube: KubeApi
) -> None:
    a, b = Candidate(kube, "a"), Candidate(kube, "b")
    try:
        a.start()
        await until(lambda: a.elector.is_leader)
        b.start()
        await asyncio.sleep(DURATION * 1.5)  # a renews: b never takes over
        assert a.elector.is_leader and not b.elector.is_leader
        spec = lease(api)
        assert spec["holderIdentity"] == "a" and spec["leaseDurationSeconds"] == 1
        assert spec["acquireTime"] < spec["renewTime"] and spec["renewTime"].endswith("Z")
        assert spec["leaseTransitions"] == 0

        await a.crash()
        took = await until(lambda: b.elector.is_leader)
        assert DURATION - 0.5 < took < DURATION + 0.5, took
        assert lease(api)["holderIdentity"] == "b" and lease(api)["leaseTransitions"] == 1
        assert b.changes == [True]
    finally:
        await a.crash()
        await b.crash()


async def test_a_clean_release_hands_over_at_once(api: ApiServerDouble, kube: KubeApi) -> None:
    a, b = Candidate(kube, "a"), Candidate(kube, "b")
    try:
        a.start()
        await until(lambda: a.elector.is_leader)
        b.start()
        await asyncio.sleep(0.3)
        await a.crash()
        await a.elector.release()
        assert a.changes == [True, False] and not lease(api).get("holderIdentity")
        took = await until(lambda: b.elector.is_leader)
        assert took < 0.5, took
    finally:
        await b.crash()


async def test_leadership_ends_at_the_renew_deadline_when_the_api_server_is_gone(
    api: ApiServerDouble, kube: KubeApi
) -> None:
    a = Candidate(kube, "a")
    try:
        a.start()
        await until(lambda: a.elector.is_leader)
        api.stop()
        lost = await until(lambda: not a.elector.is_leader)
        # At the deadline, not at the lease duration: nobody else may lead before it runs out.
        assert lost < a.elector.settings.renew_deadline_s + 0.2 < DURATION
        assert a.changes == [True, False]
        api.start()
        await until(lambda: a.elector.is_leader)  # and back once the API server is
    finally:
        await a.crash()


async def test_another_holder_seen_ends_leadership_at_once(api: ApiServerDouble, kube: KubeApi) -> None:
    a = Candidate(kube, "a")
    try:
        a.start()
        await until(lambda: a.elector.is_leader)
        obj = api.get("coordination.k8s.io/v1", "Lease", "weir-system", "weir-leader")
        assert obj is not None
        obj["spec"]["holderIdentity"] = "intruder"
        api.replace(obj)
        took = await until(lambda: not a.elector.is_leader)
        assert took < 0.5
    finally:
        await a.crash()


def test_timings_must_let_the_leader_give_up_before_others_take_over() -> None:
    with pytest.raises(ValueError, match="renew deadline < lease duration"):
        LeaseSettings("ns", "l", "me", lease_duration_s=5, renew_deadline_s=5, retry_period_s=1)
