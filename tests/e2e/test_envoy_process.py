"""The real Envoy binary, supervised by EnvoyProcess, configured by AdsServer.

Resources are built by hand here (not by weir.xds.build) so that these tests
only depend on the server and the process manager. Traffic goes to 127.0.0.1
only. Timings are printed (run with ``-s`` to see them).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from envoy.config.accesslog.v3 import accesslog_pb2
from envoy.config.core.v3 import config_source_pb2
from envoy.config.listener.v3 import listener_pb2
from envoy.config.route.v3 import route_pb2
from envoy.extensions.access_loggers.stream.v3 import stream_pb2
from envoy.extensions.filters.http.router.v3 import router_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm_pb2,
)

from weir.bootstrap import with_admin_socket
from weir.envoy import (
    EnvoyError,
    EnvoyProcess,
    ExitInfo,
    bootstrap,
    envoy_binary,
    listener_bound,
)
from weir.testkit.net import free_port
from weir.xds.server import AckStatus, AdsServer
from weir.xds.snapshot import CLUSTER, LISTENER, ROUTE, SECRET, Snapshot

pytestmark = pytest.mark.timeout(60)

ROUTE_NAME = "local"


# --------------------------------------------------------------------------
# Hand-built resources
# --------------------------------------------------------------------------


def http_listener(port: int) -> Any:
    manager = hcm_pb2.HttpConnectionManager(stat_prefix="e2e")
    manager.rds.route_config_name = ROUTE_NAME
    manager.rds.config_source.ads.SetInParent()
    manager.rds.config_source.resource_api_version = config_source_pb2.V3
    router = manager.http_filters.add(name="envoy.filters.http.router")
    router.typed_config.Pack(router_pb2.Router())
    access = accesslog_pb2.AccessLog(name="envoy.access_loggers.stdout")
    access.typed_config.Pack(stream_pb2.StdoutAccessLog())
    manager.access_log.append(access)

    listener = listener_pb2.Listener(name="e2e")
    listener.address.socket_address.address = "127.0.0.1"
    listener.address.socket_address.port_value = port
    network_filter = listener.filter_chains.add().filters.add(
        name="envoy.filters.network.http_connection_manager"
    )
    network_filter.typed_config.Pack(manager)
    return listener


def direct_route(body: str, regex: str | None = None) -> Any:
    config = route_pb2.RouteConfiguration(name=ROUTE_NAME)
    host = config.virtual_hosts.add(name="any", domains=["*"])
    route = host.routes.add()
    if regex is None:
        route.match.prefix = "/"
    else:
        route.match.safe_regex.regex = regex
    route.direct_response.status = 200
    route.direct_response.body.inline_string = body
    return config


def snapshot(version: str, port: int, body: str, regex: str | None = None) -> Snapshot:
    return Snapshot(
        version,
        {
            SECRET: {},
            CLUSTER: {},
            LISTENER: {"e2e": http_listener(port)},
            ROUTE: {ROUTE_NAME: direct_route(body, regex)},
        },
    )


# --------------------------------------------------------------------------
# Process checks
# --------------------------------------------------------------------------


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not count)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def envoy_children() -> list[int]:
    """Envoy processes whose parent is this test process."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat.rsplit(")", 1)[1].split()
        if name == "envoy" and int(fields[1]) == os.getpid() and fields[0] != "Z":
            found.append(int(entry.name))
    return found


_client: httpx.AsyncClient | None = None


async def get(port: int, timeout: float = 1.0) -> tuple[int, str] | None:
    """GET / on the listener; ``None`` when nothing answers.

    One client is kept for the test (making one costs milliseconds, which
    would blur the timings); a dead pooled connection is just one ``None``.
    """
    global _client
    if _client is None:
        _client = httpx.AsyncClient()
    try:
        response = await _client.get(f"http://127.0.0.1:{port}/", timeout=timeout)
    except httpx.TransportError:
        return None
    return response.status_code, response.text


async def wait_until_served(port: int, body: str, timeout: float) -> float:
    """Seconds until GET / answers 200 ``body``; fails after ``timeout``."""
    start = time.monotonic()
    last = None
    while time.monotonic() - start < timeout:
        last = await get(port, timeout=0.5)
        if last == (200, body):
            return time.monotonic() - start
        await asyncio.sleep(0.001)
    pytest.fail(f"not served {body!r} within {timeout} s; last answer: {last}")


# --------------------------------------------------------------------------
# Fixtures
# --------------------------------------------------------------------------


@pytest.fixture(autouse=True)
async def _http_client() -> AsyncIterator[None]:
    global _client
    try:
        yield
    finally:
        client, _client = _client, None
        if client is not None:
            await client.aclose()


@pytest.fixture
def port() -> int:
    return free_port()


@pytest.fixture
async def ads(unix_socket_path: str, port: int) -> AsyncIterator[AdsServer]:
    server = AdsServer(unix_socket_path)
    await server.start()
    server.set_snapshot(snapshot("v1", port, "hello"))
    try:
        yield server
    finally:
        await server.stop(grace=None)


class Supervised:
    """An EnvoyProcess and every PID it ever had."""

    def __init__(self, ads: AdsServer, short_tmp: Path) -> None:
        self.pids: list[int] = []
        self.exits: list[ExitInfo] = []
        self.process = EnvoyProcess(
            bootstrap(node_id="e2e", ads_socket=ads.socket_path),
            run_dir=short_tmp / "envoy",
            log_level="info",
            concurrency=1,
            on_ready=self.pids.append,
            on_exit=self.exits.append,
        )


@pytest.fixture
async def envoy(ads: AdsServer, short_tmp: Path) -> AsyncIterator[Supervised]:
    supervised = Supervised(ads, short_tmp)
    started = time.monotonic()
    try:
        await supervised.process.start()
        print(f"\nTIMING Envoy start -> ready: {(time.monotonic() - started) * 1000:.0f} ms")
        yield supervised
    finally:
        await supervised.process.stop()
        for pid in supervised.pids:  # last resort: nothing may survive a test
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
                pytest.fail(f"Envoy pid {pid} survived stop()")
        assert envoy_children() == []


# --------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------


def test_binary_is_found() -> None:
    assert Path(envoy_binary()).name == "envoy"
    assert os.access(envoy_binary(), os.X_OK)


def test_bootstrap_has_no_tcp_admin() -> None:
    config = bootstrap(node_id="n", ads_socket="/tmp/x.sock")
    assert "admin" not in config  # EnvoyProcess adds it, on a unix socket
    with pytest.raises(ValueError, match="longer than 107 bytes"):
        with_admin_socket(config, "/tmp/" + "x" * 200)


async def test_serves_and_updates_without_restart(
    ads: AdsServer, envoy: Supervised, port: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="weir.envoy.access")
    assert (await ads.wait_acked("v1", timeout=5)).acked
    assert await get(port) == (200, "hello")
    assert await listener_bound("127.0.0.1", port)
    pid = envoy.process.pid
    assert pid is not None and envoy.pids == [pid]
    assert envoy.process.admin_socket == str(envoy.process.run_dir / "admin.sock")
    status, _ = await envoy.process.admin.get("/ready")
    assert status == 200

    pushed = time.monotonic()
    ads.set_snapshot(snapshot("v2", port, "world"))
    served = await wait_until_served(port, "world", timeout=5)
    print(f"TIMING route push -> served: {served * 1000:.1f} ms")
    acked = await ads.wait_acked("v2", timeout=5)
    assert acked.acked, acked
    print(f"TIMING route push -> ACKed: {(time.monotonic() - pushed) * 1000:.1f} ms")
    assert envoy.process.pid == pid
    assert envoy.process.restarts == 0

    # Access-log lines (Envoy's stdout) reach the weir.envoy.access logger.
    deadline = time.monotonic() + 5
    while not any("GET / " in r.getMessage() for r in caplog.records):
        assert time.monotonic() < deadline, "no access-log line forwarded"
        await asyncio.sleep(0.05)
    assert all(r.name == "weir.envoy.access" for r in caplog.records if "GET / " in r.message)


async def test_nack_keeps_the_previous_configuration(ads: AdsServer, envoy: Supervised, port: int) -> None:
    assert (await ads.wait_acked("v1", timeout=5)).acked
    assert await get(port) == (200, "hello")

    ads.set_snapshot(snapshot("v2", port, "broken", regex="(("))
    result = await ads.wait_acked("v2", timeout=5)
    assert result.status is AckStatus.NACKED
    assert result.type_url == ROUTE
    assert "missing )" in result.message
    routes = ads.state().types[ROUTE]
    assert routes.nack is not None
    assert "missing )" in routes.nack.message and routes.nack.version == "v2"
    assert routes.acked_version == "v1"
    assert await get(port) == (200, "hello")  # the old answer still serves
    assert ads.state().types[ROUTE].sent_version == "v2"  # and no re-send loop

    ads.set_snapshot(snapshot("v3", port, "fixed"))
    assert (await ads.wait_acked("v3", timeout=5)).acked
    assert await get(port) == (200, "fixed")
    assert ads.state().types[ROUTE].nack is None


async def test_kill_9_is_recovered_within_2_seconds(ads: AdsServer, envoy: Supervised, port: int) -> None:
    assert (await ads.wait_acked("v1", timeout=5)).acked
    assert await get(port) == (200, "hello")
    old = envoy.process.pid
    assert old is not None

    killed = time.monotonic()
    os.kill(old, signal.SIGKILL)
    recovered = await wait_until_served(port, "hello", timeout=2)
    print(f"TIMING kill -9 -> served again: {recovered * 1000:.0f} ms")
    assert time.monotonic() - killed < 2.0
    assert not alive(old)
    deadline = time.monotonic() + 2  # /ready may be noticed just after traffic flows
    while not envoy.process.ready:
        assert time.monotonic() < deadline, "restarted Envoy never reported ready"
        await asyncio.sleep(0.01)
    new = envoy.process.pid
    assert new is not None and new != old
    assert envoy.pids == [old, new]
    assert envoy.process.restarts == 1
    assert [e.pid for e in envoy.exits] == [old]
    assert envoy.exits[0].returncode == -signal.SIGKILL
    assert envoy.exits[0].description == "killed by SIGKILL"
    # The new Envoy got the current snapshot over a new stream.
    result = await ads.wait_acked("v1", timeout=5)
    assert result.acked, result
    assert ads.state().streams_opened == 2


async def test_a_restart_after_a_nack_keeps_the_last_good_route(
    ads: AdsServer, envoy: Supervised, port: int
) -> None:
    assert (await ads.wait_acked("v1", timeout=5)).acked
    ads.set_snapshot(snapshot("v2", port, "broken", regex="(("))
    assert (await ads.wait_acked("v2", timeout=5)).status is AckStatus.NACKED
    old = envoy.process.pid
    assert old is not None

    os.kill(old, signal.SIGKILL)
    recovered = await wait_until_served(port, "hello", timeout=2)
    print(f"TIMING kill -9 (with a rejected route) -> served again: {recovered * 1000:.0f} ms")
    assert envoy.process.pid != old
    # Still reported as rejected, with Envoy's message.
    result = await ads.wait_acked("v2", timeout=5)
    assert result.status is AckStatus.NACKED and "missing )" in result.message


async def test_a_crash_loop_backs_off_and_recovers(ads: AdsServer, envoy: Supervised, port: int) -> None:
    assert (await ads.wait_acked("v1", timeout=5)).acked
    good = envoy.process.config
    # The bootstrap is written again at each start: make the next ones fail.
    envoy.process.config = {**good, "not_a_bootstrap_field": True}
    first = envoy.process.pid
    assert first is not None
    os.kill(first, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while envoy.process.restarts < 3:
        assert time.monotonic() < deadline, f"only {envoy.process.restarts} restarts"
        await asyncio.sleep(0.01)
    assert [e.returncode for e in envoy.exits][:1] == [-signal.SIGKILL]
    assert all(e.returncode > 0 for e in envoy.exits[1:]) and len(envoy.exits) >= 2
    assert any("not_a_bootstrap_field" in line for line in envoy.exits[-1].log_tail)
    gaps = [b.at - a.at for a, b in zip(envoy.exits[1:], envoy.exits[2:], strict=False)]
    assert all(gap > 0.2 for gap in gaps), gaps  # backing off, not spinning
    assert len(envoy_children()) <= 1  # never two at once

    envoy.process.config = good
    await wait_until_served(port, "hello", timeout=5)
    assert envoy.process.pid not in (None, first)


async def test_stop_leaves_no_process(ads: AdsServer, short_tmp: Path, port: int) -> None:
    supervised = Supervised(ads, short_tmp)
    try:
        await supervised.process.start()
        pid = supervised.process.pid
        assert pid is not None and alive(pid)
        assert (await ads.wait_acked("v1", timeout=5)).acked
    finally:
        await supervised.process.stop()
    assert supervised.pids == [pid]
    assert not alive(pid)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # reaped, not a zombie
    assert supervised.process.pid is None
    assert not supervised.process.ready
    assert not await listener_bound("127.0.0.1", port)
    assert envoy_children() == []
    await supervised.process.stop()  # idempotent


async def test_control_plane_restart(ads: AdsServer, envoy: Supervised, port: int) -> None:
    assert (await ads.wait_acked("v1", timeout=5)).acked
    await ads.stop(grace=None)
    assert await get(port) == (200, "hello")  # Envoy keeps its configuration

    replacement = AdsServer(ads.socket_path)
    replacement.set_snapshot(snapshot("v2", port, "again"))
    await replacement.start()
    try:
        reconnected = await wait_until_served(port, "again", timeout=10)
        print(f"TIMING control plane back -> served: {reconnected * 1000:.0f} ms")
        assert (await replacement.wait_acked("v2", timeout=5)).acked
        assert envoy.process.restarts == 0
    finally:
        await replacement.stop(grace=None)


async def test_a_failed_start_reports_envoy_log(ads: AdsServer, short_tmp: Path) -> None:
    config = bootstrap(node_id="bad", ads_socket=ads.socket_path)
    config["not_a_bootstrap_field"] = True
    process = EnvoyProcess(config, run_dir=short_tmp / "bad", concurrency=1)
    with pytest.raises(EnvoyError) as error:
        await process.start()
    assert "before it was ready" in str(error.value)
    assert any("not_a_bootstrap_field" in line for line in error.value.log_tail)
    assert process.pid is None
    assert envoy_children() == []


async def test_a_start_that_is_not_ready_in_time_is_stopped(short_tmp: Path) -> None:
    # No ADS server: Envoy waits for its first configuration.
    config = bootstrap(node_id="late", ads_socket=str(short_tmp / "nobody.sock"))
    process = EnvoyProcess(config, run_dir=short_tmp / "late", concurrency=1, ready_timeout=0.5)
    with pytest.raises(EnvoyError, match="not ready within"):
        await process.start()
    assert process.pid is None
    assert envoy_children() == []


async def test_envoy_dies_with_its_parent(unix_socket_path: str, short_tmp: Path) -> None:
    """Even SIGKILL of the Python parent leaves no Envoy behind."""
    script = textwrap.dedent(
        f"""
        import asyncio, sys
        from weir.envoy import EnvoyProcess, bootstrap

        async def main():
            config = bootstrap(node_id="orphan", ads_socket={unix_socket_path!r})
            process = EnvoyProcess(
                config, run_dir={str(short_tmp / "orphan")!r}, concurrency=1, ready_timeout=30
            )
            task = asyncio.create_task(process.start())
            while process.pid is None:
                await asyncio.sleep(0.01)
            print(process.pid, flush=True)
            await asyncio.sleep(60)

        asyncio.run(main())
        """
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    envoy_pid = None
    try:
        assert parent.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(parent.stdout.readline), 20)
        envoy_pid = int(line)
        assert alive(envoy_pid)
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 5
        while alive(envoy_pid):
            assert time.monotonic() < deadline, "Envoy outlived its killed parent"
            await asyncio.sleep(0.02)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if envoy_pid is not None and alive(envoy_pid):
            os.kill(envoy_pid, signal.SIGKILL)


async def test_admin_get_decodes_chunked_replies(envoy: Supervised) -> None:
    """Envoy's admin sends large replies chunked; ``admin.get`` must return the decoded body."""
    status, body = await envoy.process.admin.get("/config_dump")
    assert status == 200
    dump = json.loads(body)
    assert "configs" in dump
    status, body = await envoy.process.admin.get("/ready")
    assert (status, body.strip()) == (200, "LIVE")
