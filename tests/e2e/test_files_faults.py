"""Hostile files through real Envoy: nothing a folder can hold takes down good routes or the watcher.

Each test reproduces a fault of issue 13 (the files provider) against a real
weir and a real Envoy, and sends requests only to loopback addresses.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
from weir_harness import GATEWAY_HEAD, Weir, eventually, pid_alive, stopped_after

from weir.controller import Controller, Options
from weir.providers.base import ProviderSnapshot
from weir.providers.files.provider import FilesProvider
from weir.testkit import RecordingUpstream, free_port
from weir.translate import Settings

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def weir(tmp_path: Path) -> AsyncIterator[Weir]:
    folder = tmp_path / "manifests"
    folder.mkdir()
    async with stopped_after(Weir(folder, None, free_port())) as harness:
        yield harness


@asynccontextmanager
async def serving(weir: Weir, name: str) -> AsyncIterator[tuple[tuple[str, int], httpx.AsyncClient, Path]]:
    """weir started with a Gateway and the route ``/NAME`` (in NAME.yaml) answering 200.

    Yields the upstream's address, a client and the route's file.
    """
    upstream = ("127.0.0.2", free_port("127.0.0.2"))
    async with (
        RecordingUpstream("a", host=upstream[0], port=upstream[1]),
        httpx.AsyncClient(timeout=5) as client,
    ):
        weir.write("gw.yaml", GATEWAY_HEAD.format(port=weir.gateway_port))
        path = weir.write(f"{name}.yaml", route(name, upstream))
        await weir.start()
        await serves(client, weir.url(f"/{name}"))
        yield upstream, client, path


async def errors(weir: Weir) -> list[dict[str, object]]:
    """The errors /status lists now."""
    return [p for p in (await weir.admin_status())["problems"] if p["severity"] == "error"]


def route(name: str, upstream: tuple[str, int], *, extra: str = "") -> str:
    """An HTTPRoute ``/NAME`` to a Service NAME with one endpoint at ``upstream``."""
    ip, port = upstream
    return f"""\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}, namespace: default}}
spec:
  parentRefs: [{{name: gw}}]
  rules:
  - matches: [{{path: {{type: PathPrefix, value: /{name}}}}}]
    backendRefs: [{{name: {name}, port: {port}}}]
---
apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: default}}
spec: {{ports: [{{name: http, port: {port}}}]{extra}}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: {name}-1, namespace: default, labels: {{kubernetes.io/service-name: {name}}}}}
addressType: IPv4
ports: [{{name: http, port: {port}}}]
endpoints: [{{addresses: [{ip}]}}]
"""


async def get(client: httpx.AsyncClient, url: str) -> int:
    try:
        return (await client.get(url)).status_code
    except httpx.HTTPError:
        return 0


async def serves(client: httpx.AsyncClient, url: str, timeout: float = 5) -> None:
    """Wait until ``url`` answers 200."""

    async def ok() -> bool:
        return await get(client, url) == 200

    await eventually(ok, timeout=timeout)


async def test_a_value_yaml_cannot_build_is_reported_and_later_edits_are_served(weir: Weir) -> None:
    """``!!bool maybe`` killed the watcher silently: every later edit, even the fix, was ignored."""
    async with serving(weir, "good") as (upstream, client, path):
        good = route("good", upstream)
        bad = route("good", upstream, extra=", publishNotReadyAddresses: !!bool maybe")
        weir.write("good.yaml", bad)
        [problem], _ = await eventually(lambda: errors(weir), timeout=5)
        assert problem["file"] == str(path)
        assert problem["line"] == next(i for i, line in enumerate(bad.splitlines(), 1) if "maybe" in line)
        assert problem["object"] == "Service default/good"
        assert problem["field"] == "spec.publishNotReadyAddresses"
        assert str(problem["message"]).startswith('invalid YAML: "maybe" is not a valid !!bool')
        assert await get(client, weir.url("/good")) == 200  # the file's last good objects serve
        # The watcher is alive: a new route is served, and so is the fix.
        weir.write("more.yaml", route("more", upstream))
        await serves(client, weir.url("/more"))
        weir.write("good.yaml", good.replace("value: /good", "value: /fixed"))
        await serves(client, weir.url("/fixed"))
        assert await errors(weir) == []
        assert await get(client, weir.url("/good")) == 404


class _FailsOnce:
    """The files provider, but its watch raises once (as a bug would), after the first change."""

    def __init__(self, folder: Path) -> None:
        self.inner = FilesProvider([str(folder)])
        self.failures = 1

    def load(self) -> ProviderSnapshot:
        return self.inner.load()

    async def watch(self) -> AsyncIterator[ProviderSnapshot]:
        async for snapshot in self.inner.watch():
            if self.failures:
                self.failures -= 1
                raise RuntimeError("a bug in the provider")
            yield snapshot


async def test_a_provider_that_raises_is_reported_and_read_again(tmp_path: Path) -> None:
    """A provider loop exception is logged, shown in /status, and the loop goes on."""
    upstream = ("127.0.0.2", free_port("127.0.0.2"))
    gateway_port = free_port()
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "gw.yaml").write_text(GATEWAY_HEAD.format(port=gateway_port))
    (folder / "a.yaml").write_text(route("a", upstream))
    controller = Controller(_FailsOnce(folder), Settings(), Options(admin_port=0))
    envoy_pid = None
    try:
        async with RecordingUpstream("a", host=upstream[0], port=upstream[1]):
            await controller.start()
            await asyncio.wait_for(controller.ready.wait(), 20)
            envoy_pid = controller.envoy.pid if controller.envoy else None
            base = f"http://127.0.0.1:{gateway_port}"
            admin = f"http://127.0.0.1:{controller.admin_port}/status"
            async with httpx.AsyncClient(timeout=5) as client:
                assert await get(client, base + "/a") == 200
                (folder / "b.yaml").write_text(route("b", upstream))

                async def provider_error() -> object:
                    return (await client.get(admin)).json()["dataPlane"]["providerError"]

                error, _ = await eventually(provider_error, timeout=5)
                assert error == "RuntimeError: a bug in the provider"
                assert await get(client, base + "/a") == 200
                # Read again (1 s later) and watched again: b is served, the error is gone.
                await serves(client, base + "/b")
                assert await provider_error() is None
                (folder / "c.yaml").write_text(route("c", upstream))
                await serves(client, base + "/c")
    finally:
        await controller.stop()
    assert envoy_pid is None or not pid_alive(envoy_pid), "Envoy outlived the controller"


async def test_a_served_file_rewritten_in_place_keeps_serving_throughout(weir: Weir) -> None:
    """``cp``/``>`` truncate, then write: 42 of 356 requests failed during three such rewrites."""
    async with serving(weir, "web") as (_, client, path):
        text = path.read_text()
        answers: list[int] = []
        writing = True

        async def load() -> None:
            while writing:
                answers.append(await get(client, weir.url("/web")))
                await asyncio.sleep(0.005)

        requests = asyncio.create_task(load())
        try:
            for pause in (0.3, 0.05, 0.2, 0.1, 0.3, 0.05):
                with path.open("w"):  # truncated, as cp and > do first
                    pass
                await asyncio.sleep(pause)
                with path.open("w") as file:  # then written (in two parts, as a slow writer)
                    file.write(text[: len(text) // 2])
                    file.flush()
                    await asyncio.sleep(0.05)
                    file.write(text[len(text) // 2 :])
                await asyncio.sleep(0.1)
            await asyncio.sleep(1.5)  # past the grace: nothing withdrawn late either
        finally:
            writing = False
            await requests
        failed = [code for code in answers if code != 200]
        print(f"{len(answers)} requests, {len(failed)} failed")
        assert len(answers) > 100
        assert failed == []
        assert await errors(weir) == []


async def test_a_new_file_redefining_a_served_route_does_not_take_it_over(weir: Weir) -> None:
    """``a-dup.yaml`` redefining HTTPRoute ``good`` took it over (``/good`` went 200 to 404)."""
    async with serving(weir, "good") as (upstream, client, good):
        dup = route("good", upstream).replace("value: /good", "value: /taken")
        path = weir.write("a-dup.yaml", dup.split("---\n")[0])
        [problem], _ = await eventually(lambda: errors(weir), timeout=5)
        assert problem["file"] == str(path)
        assert problem["object"] == "HTTPRoute default/good"
        assert str(problem["message"]).startswith(f"Duplicate value: already defined at {good}:1")
        for _ in range(5):
            assert await get(client, weir.url("/good")) == 200
            assert await get(client, weir.url("/taken")) == 404


async def test_weir_run_starts_past_a_named_pipe_and_a_bad_value_and_sigterm_stops_it(tmp_path: Path) -> None:
    """`weir run` hung at start on a FIFO named *.yaml (SIGTERM did not stop it), and exited on
    ``!!int abc`` with ``invalid literal for int()`` naming no file. Now both are problems in /status."""
    upstream = ("127.0.0.2", free_port("127.0.0.2"))
    gateway_port, admin_port = free_port(), free_port()
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "gw.yaml").write_text(GATEWAY_HEAD.format(port=gateway_port))
    (folder / "web.yaml").write_text(route("web", upstream))
    bad = (
        route("bad", upstream)
        + "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {n: !!int abc}\n"
    )
    (folder / "bad.yaml").write_text(bad)
    os.mkfifo(folder / "pipe.yaml")
    weir_bin = Path(sys.executable).with_name("weir")
    command = [str(weir_bin), "run", "-f", str(folder), "--admin-address", f"127.0.0.1:{admin_port}"]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        async with RecordingUpstream("a", host=upstream[0], port=upstream[1]), httpx.AsyncClient() as client:

            async def ready() -> bool:
                return await get(client, f"http://127.0.0.1:{admin_port}/ready") == 200

            await eventually(ready, timeout=30, interval=0.1)
            await serves(client, f"http://127.0.0.1:{gateway_port}/web")
            problems = (await client.get(f"http://127.0.0.1:{admin_port}/status")).json()["problems"]
            assert sorted((p["file"], p["message"]) for p in problems) == [
                (
                    str(folder / "bad.yaml"),
                    'invalid YAML: "abc" is not a valid !!int '
                    "(invalid literal for int() with base 10: 'abc')",
                ),
                (str(folder / "pipe.yaml"), "cannot read: a named pipe, not a regular file; skipped"),
            ]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
        assert proc.stderr is not None and "Traceback" not in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


async def test_a_malformed_status_in_a_manifest_is_ignored(weir: Weir) -> None:
    """``status: {parents: 5}`` passed validation and made translation raise; no change applied after."""
    async with serving(weir, "web") as (upstream, client, _):
        text = route("odd", upstream).replace("---\n", "status: {parents: 5}\n---\n", 1)
        weir.write("odd.yaml", text)
        await serves(client, weir.url("/odd"))
        weir.write("more.yaml", route("more", upstream))
        await serves(client, weir.url("/more"))
        data = await weir.admin_status()
        assert data["dataPlane"]["translationError"] is None
        assert data["problems"] == []
        odd = weir.status_of("HTTPRoute", "default", "odd")
        assert [p["controllerName"] for p in odd["parents"]] == ["weir.dev/gateway-controller"]
