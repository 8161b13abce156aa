"""Listing and watching on a real API server: quiet kinds, bookmarks, events in order."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from envtest import Cluster
from kube_harness import eventually, service
from kube_world import Objects

from weir.providers.kubernetes.api import KubeApi, load_config
from weir.providers.kubernetes.cache import ObjectCache
from weir.providers.kubernetes.provider import WATCHED
from weir.providers.kubernetes.watch import KindWatcher, WatchTiming

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


async def test_added_modified_deleted_reach_the_cache(objects: Objects, weir_kubeconfig: Path) -> None:
    """(Bookmarks are tested against the double: this API server sent none within 80 s on an idle
    kind; tests/kube/README.md.)"""
    api = KubeApi(load_config(weir_kubeconfig))
    cache = ObjectCache()
    watcher = KindWatcher(api, cache, KINDS["Service"], None, WatchTiming(server_timeout_s=3))
    task = asyncio.create_task(watcher.run())
    try:
        await asyncio.wait_for(watcher.synced.wait(), 10)
        ns = objects.namespace
        web = service(ns, "web", "127.0.0.2", 8080)[0]
        objects.apply(web)
        await eventually(lambda: cache.live(key("Service", ns, "web")) is not None)
        first = cache.live(key("Service", ns, "web"))
        objects.apply({**web, "metadata": {**web["metadata"], "labels": {"tier": "front"}}})
        await eventually(lambda: cache.live(key("Service", ns, "web")) != first)
        objects.api.delete("v1", "Service", ns, "web")
        await eventually(lambda: cache.live(key("Service", ns, "web")) is None)
        assert watcher.lists == 1  # one list, then events only
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await api.close()


def key(kind: str, namespace: str, name: str):  # type: ignore[no-untyped-def]
    from weir.api.meta import ObjectKey

    return ObjectKey(kind, namespace, name)
