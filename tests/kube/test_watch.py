"""Listing and watching on a real API server: quiet kinds, bookmarks, events in order."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from conftest import Objects
from envtest import Cluster
from harness import eventually, service

from weir.providers.kube_api import KubeApi, load_config
from weir.providers.kube_cache import ObjectCache
from weir.providers.kube_watch import KindWatcher, WatchTiming
from weir.providers.kubernetes import WATCHED

KINDS = {k.kind: k for k in WATCHED}


async def test_a_quiet_kind_is_watched_again_without_a_warning(
    cluster: Cluster, weir_kubeconfig: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A real API server sends no bookmark on a kind that had no event since it started, and ends
    each watch after its timeout: weir watches again, and says nothing (it used to warn that the
    watch was "silent" every 5 to 10 minutes per quiet kind)."""
    caplog.set_level(logging.INFO, logger="weir")
    timing = WatchTiming(server_timeout_s=1, silence_margin_s=1.0)
    api = KubeApi(load_config(weir_kubeconfig))
    mark = cluster.audit_mark()
    watcher = KindWatcher(api, ObjectCache(), KINDS["GatewayClassConfig"], None, timing)
    task = asyncio.create_task(watcher.run())
    try:
        await asyncio.sleep(6.0)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await api.close()
    watches = [uri for _, verb, uri in cluster.requests_since(mark) if verb == "watch"]
    assert len(watches) >= 2, f"the watch was not renewed after the server ended it: {watches}"
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not warnings, warnings


async def test_bookmarks_and_events_arrive_in_order(objects: Objects, weir_kubeconfig: Path) -> None:
    api = KubeApi(load_config(weir_kubeconfig))
    cache = ObjectCache()
    watcher = KindWatcher(api, cache, KINDS["Service"], None, WatchTiming(server_timeout_s=3))
    task = asyncio.create_task(watcher.run())
    try:
        await asyncio.wait_for(watcher.synced.wait(), 10)
        ns = objects.namespace
        objects.apply(*service(ns, "web", "127.0.0.2", 8080)[:1])
        await eventually(lambda: cache.live(key("Service", ns, "web")) is not None)
        events: list[str] = []
        async with asyncio.timeout(10):
            async for event_type, _obj in api.watch(KINDS["Service"], ns, watcher.version, 3):
                events.append(event_type)
        assert "BOOKMARK" in events, events
        objects.api.delete("v1", "Service", ns, "web")
        await eventually(lambda: cache.live(key("Service", ns, "web")) is None)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await api.close()


def key(kind: str, namespace: str, name: str):  # type: ignore[no-untyped-def]
    from weir.api.meta import ObjectKey

    return ObjectKey(kind, namespace, name)
