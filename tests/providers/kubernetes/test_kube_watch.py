"""The provider's list/watch loop against the API-server double (no Envoy): bookmarks, gaps, scopes."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from apiserver_double import ApiServerDouble
from weir.providers.kubernetes.provider import KubernetesOptions, KubernetesProvider
from weir.providers.kubernetes.watch import WatchTiming
from weir.resources import Resources

GW = "gateway.networking.k8s.io/v1"
TIMING = WatchTiming(reprobe_s=0.3, backoff_initial_s=0.02, backoff_max_s=0.2)


def route(name: str, namespace: str = "default", path: str = "/") -> dict[str, Any]:
    return {
        "apiVersion": GW,
        "kind": "HTTPRoute",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"parentRefs": [{"name": "gw"}], "rules": [{"matches": [{"path": {"value": path}}]}]},
    }


def config_map(name: str, namespace: str = "default") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}}


@pytest.fixture
def api() -> Iterator[ApiServerDouble]:
    server = ApiServerDouble(bookmark_interval_s=0.2, history_limit=10)
    server.start()
    try:
        yield server
    finally:
        server.stop()


class Running:
    """A started provider whose snapshots are consumed in the background."""

    def __init__(self, provider: KubernetesProvider) -> None:
        self.provider = provider
        self.latest: Resources | None = None
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Running:
        await self.provider.start()
        self.latest = self.provider.load().resources
        self._task = asyncio.create_task(self._consume())
        return self

    async def _consume(self) -> None:
        async for snapshot in self.provider.watch():
            self.latest = snapshot.resources

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self.provider.stop()

    def names(self, kind: str) -> set[str]:
        assert self.latest is not None
        return {f"{k.namespace}/{k.name}" for k in self.latest.objects if k.kind == kind}

    async def until(self, check: Any, timeout: float = 5.0) -> None:
        started = time.monotonic()
        while not check():
            assert time.monotonic() - started < timeout, f"not reached; have {self.names('HTTPRoute')}"
            await asyncio.sleep(0.02)

    def lists(self, kind: str) -> int:
        return sum(w.lists for w in self.provider.watchers if w.kind.kind == kind)


def provider(api: ApiServerDouble, tmp_path: Path, **options: Any) -> Running:
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    return Running(
        KubernetesProvider(KubernetesOptions(kubeconfig=str(kubeconfig), timing=TIMING, **options))
    )


async def test_bookmarks_keep_a_quiet_watch_resumable(api: ApiServerDouble, tmp_path: Path) -> None:
    """HTTPRoutes are quiet while 30 ConfigMaps change: far beyond the 10 events of history. Thanks
    to bookmarks, after an API server restart the HTTPRoute watch resumes without a 410 and a relist."""
    api.create(route("web"))
    async with provider(api, tmp_path) as running:
        for i in range(30):
            api.create(config_map(f"cm-{i}"))
        await asyncio.sleep(0.6)  # a few bookmarks
        before = running.lists("HTTPRoute")
        api.stop()
        api.start()
        api.create(route("after"))
        await running.until(lambda: running.names("HTTPRoute") == {"default/web", "default/after"})
        assert running.lists("HTTPRoute") == before


async def test_no_event_is_lost_through_compactions_and_restarts(
    api: ApiServerDouble, tmp_path: Path
) -> None:
    rng = random.Random(5)
    async with provider(api, tmp_path) as running:
        present: set[str] = set()
        for step in range(120):
            name = f"r{rng.randrange(15)}"
            if name in present and rng.random() < 0.5:
                api.delete(GW, "HTTPRoute", "default", name)
                present.discard(name)
            elif name in present:
                obj = api.get(GW, "HTTPRoute", "default", name)
                assert obj is not None
                obj["spec"]["rules"][0]["matches"][0]["path"]["value"] = f"/{step}"
                api.replace(obj)
            else:
                api.create(route(name))
                present.add(name)
            if step % 30 == 10:
                api.compact()
            if step % 40 == 25:
                api.stop()
                await asyncio.sleep(0.05)
                api.start()
            if step % 7 == 0:
                await asyncio.sleep(0.01)
        # Every object there, each at its last version; nothing else.
        expected = {
            obj["metadata"]["name"]: obj["metadata"]["resourceVersion"] for obj in api.list(GW, "HTTPRoute")
        }
        assert set(expected) == present

        def served() -> dict[str, str | None]:
            assert running.latest is not None
            return {r.name: r.metadata.resource_version for r in running.latest.http_routes}

        await running.until(lambda: served() == expected)


async def test_namespaces_limit_namespaced_kinds_only(api: ApiServerDouble, tmp_path: Path) -> None:
    api.create(route("mine", "apps"))
    api.create(route("theirs", "other"))
    api.create(
        {
            "apiVersion": GW,
            "kind": "GatewayClass",
            "metadata": {"name": "weir"},
            "spec": {"controllerName": "weir.dev/gateway-controller"},
        }
    )
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "weir", "namespace": "weir-system"}}
    api.create(svc)
    running = provider(api, tmp_path, namespaces=("apps",), publish_service=("weir-system", "weir"))
    async with running:
        assert running.names("HTTPRoute") == {"apps/mine"}
        assert running.names("GatewayClass") == {"/weir"}
        assert running.names("Service") == {"weir-system/weir"}  # the publish Service's namespace too
        api.create(route("new", "other"))
        api.create(route("new", "apps"))
        await running.until(lambda: running.names("HTTPRoute") == {"apps/mine", "apps/new"})
        assert "namespaces/other" not in " ".join(p for _, p in api.requests if "httproutes" in p)


async def test_a_forbidden_kind_is_logged_and_does_not_hold_up_the_rest(
    api: ApiServerDouble, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    api.create(route("web"))
    api.fail_next("GET", "/apis/gateway.networking.k8s.io/v1/tlsroutes", status=403, count=1000)
    started = time.monotonic()
    async with provider(api, tmp_path) as running:
        assert time.monotonic() - started < 3
        assert running.names("HTTPRoute") == {"default/web"}
        errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
        assert len(errors) == 1 and errors[0].startswith("TLSRoute (gateway.networking.k8s.io/v1): 403"), (
            errors
        )


class _HalfOpen:
    """An API whose watch streams never send a byte nor end: a connection that died without a FIN."""

    def __init__(self) -> None:
        self.watches = 0

    async def list(self, kind: Any, namespace: str | None) -> tuple[list[dict[str, Any]], str]:
        return [], "10"

    async def current_version(self, kind: Any, namespace: str | None) -> str:
        return "10"

    async def _silent(self) -> Any:
        await asyncio.sleep(3600)
        yield "never", {}

    def watch(self, kind: Any, namespace: str | None, version: str, timeout_s: int) -> Any:
        self.watches += 1
        return self._silent()


async def test_a_watch_silent_past_the_servers_timeout_is_replaced_and_said_once_each(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The server ends every watch after its timeout; one still open and silent past it (plus the
    margin) is a dead connection: weir says so and watches again on a new one. (A quiet kind is not
    that: tests/kube/test_envtest_watch.py, against a real API server.)"""
    from weir.providers.kubernetes.cache import ObjectCache
    from weir.providers.kubernetes.provider import WATCHED
    from weir.providers.kubernetes.watch import KindWatcher

    api = _HalfOpen()
    kind = next(k for k in WATCHED if k.kind == "Service")
    watcher = KindWatcher(
        api, ObjectCache(), kind, None, WatchTiming(server_timeout_s=0, silence_margin_s=0.3)
    )  # type: ignore[arg-type]
    task = asyncio.create_task(watcher.run())
    try:
        await asyncio.sleep(1.2)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert api.watches >= 3
    silent = [r.getMessage() for r in caplog.records if "went silent" in r.getMessage()]
    assert len(silent) >= 2 and all(
        r.startswith("Service (v1): the watch connection went silent") for r in silent
    )


async def test_relist_drops_the_open_watch_and_lists_again_and_stop_still_stops(
    api: ApiServerDouble, tmp_path: Path
) -> None:
    """``relist()`` (XBackend's CRD replaced: a watch opened before decodes with the old schema)
    ends the watch in progress and lists the kind again; events keep arriving after it, and
    stopping the provider afterwards still ends the watcher (``async with`` returns)."""
    api.create(route("web"))
    async with provider(api, tmp_path) as running:
        [watcher] = [w for w in running.provider.watchers if w.kind.kind == "HTTPRoute"]
        await asyncio.sleep(0.2)  # watching now
        before = watcher.lists
        watches = api.open_watches
        watcher.relist()
        await running.until(lambda: watcher.lists == before + 1)
        api.create(route("after"))
        await running.until(lambda: running.names("HTTPRoute") == {"default/web", "default/after"})
        await running.until(lambda: api.open_watches == watches)  # the old one closed, one new
        assert watcher.lists == before + 1
