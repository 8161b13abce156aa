"""Two `weir run --kubernetes` processes: both serve, one leader writes status, a kill hands over.

Each replica binds its own loopback address (127.0.0.2, 127.0.0.3) and
publishes it as the Gateway's ``status.addresses`` (``--gateway-address``),
so the status on the API server says which replica wrote it: only the
leader's address ever appears, until the leader is killed and the other
replica, once it holds the Lease, writes its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import httpx
import pytest
from weir_harness import eventually, pid_alive

from apiserver_double import ApiServerDouble
from weir.runfolder import default_run_dir
from weir.testkit import RecordingUpstream, free_port

GW = "gateway.networking.k8s.io/v1"
LEASE_NS = "weir-system"
LEASE_DURATION = 3.0


def objects(port: int, svc_port: int) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": GW,
            "kind": "GatewayClass",
            "metadata": {"name": "weir"},
            "spec": {"controllerName": "weir.dev/gateway-controller"},
        },
        {
            "apiVersion": GW,
            "kind": "Gateway",
            "metadata": {"name": "gw", "namespace": "default"},
            "spec": {
                "gatewayClassName": "weir",
                "listeners": [{"name": "http", "port": port, "protocol": "HTTP"}],
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"ports": [{"name": "http", "port": svc_port}]},
        },
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": "web-1",
                "namespace": "default",
                "labels": {"kubernetes.io/service-name": "web"},
            },
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": svc_port}],
            "endpoints": [{"addresses": ["127.0.0.4"]}],
        },
        route("web", "/"),
    ]


def route(name: str, path: str) -> dict[str, Any]:
    return {
        "apiVersion": GW,
        "kind": "HTTPRoute",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "parentRefs": [{"name": "gw"}],
            "rules": [
                {
                    "matches": [{"path": {"type": "PathPrefix", "value": path}}],
                    "backendRefs": [{"name": "web", "port": 8080}],
                }
            ],
        },
    }


class Replica:
    """One `weir run --kubernetes` process, bound to ``address``."""

    def __init__(self, name: str, address: str, kubeconfig: Path, log_dir: Path) -> None:
        self.name = name
        self.address = address
        self.admin_port = free_port()
        self.log_path = log_dir / f"{name}.log"
        self._log: IO[bytes] | None = None
        self.kubeconfig = kubeconfig
        self.proc: subprocess.Popen[bytes] | None = None
        self.envoy_pid: int | None = None

    def start(self) -> None:
        weir_bin = Path(sys.executable).with_name("weir")
        command = [
            str(weir_bin),
            "run",
            "--kubernetes",
            "--kubeconfig",
            str(self.kubeconfig),
            "--bind-address",
            self.address,
            "--gateway-address",
            self.address,
            "--admin-address",
            f"127.0.0.1:{self.admin_port}",
            "--lease-namespace",
            LEASE_NS,
            "--lease-duration",
            str(LEASE_DURATION),
            "--envoy-concurrency",
            "1",
        ]
        env = {**os.environ, "POD_NAME": self.name, "COLUMNS": "10000"}
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT, env=env)

    async def admin(self, path: str) -> httpx.Response:
        async with httpx.AsyncClient(timeout=2) as client:
            return await client.get(f"http://127.0.0.1:{self.admin_port}{path}")

    async def ready(self) -> bool:
        try:
            response = await self.admin("/ready")
        except httpx.HTTPError:
            return False
        if response.status_code != 200:
            return False
        self.envoy_pid = (await self.admin("/status")).json()["dataPlane"]["envoyPid"]
        return True

    def stop(self) -> None:
        """SIGTERM (a clean stop), then SIGKILL if it does not stop within 15 s."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._log is not None:
            self._log.close()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@pytest.fixture
def api() -> Iterator[ApiServerDouble]:
    server = ApiServerDouble(bookmark_interval_s=0.5)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def lease(api: ApiServerDouble) -> dict[str, Any]:
    obj = api.get("coordination.k8s.io/v1", "Lease", LEASE_NS, "weir-leader")
    return (obj or {}).get("spec") or {}


def gateway_status(api: ApiServerDouble) -> dict[str, Any]:
    obj = api.get(GW, "Gateway", "default", "gw") or {}
    status: dict[str, Any] = obj.get("status") or {}
    return status


def published(api: ApiServerDouble) -> list[str]:
    return [a["value"] for a in gateway_status(api).get("addresses", [])]


async def end_orphan(run_dir: Path, recorded: int | None) -> None:
    """End the Envoy a killed weir left serving in ``run_dir`` (no weir adopted it), and the folder."""
    pids = {recorded} if recorded else set()
    with contextlib.suppress(OSError, ValueError):
        pids.add(int((run_dir / "envoy" / "envoy.pid").read_text().split()[0]))
    for pid in pids:
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)  # not our child: init reaps it
            await eventually(lambda pid=pid: not pid_alive(pid), timeout=5)
    shutil.rmtree(run_dir, ignore_errors=True)


async def test_one_leader_writes_status_and_a_killed_leader_is_replaced_within_the_lease(
    api: ApiServerDouble, tmp_path: Path
) -> None:
    port = free_port("127.0.0.2")
    async with RecordingUpstream("web", host="127.0.0.4", port=8080):
        for obj in objects(port, 8080):
            api.create(obj)
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        replicas = {
            "weir-a": Replica("weir-a", "127.0.0.2", kubeconfig, tmp_path),
            "weir-b": Replica("weir-b", "127.0.0.3", kubeconfig, tmp_path),
        }
        leader: Replica | None = None
        try:
            for replica in replicas.values():
                replica.start()
            for replica in replicas.values():
                await eventually(replica.ready, timeout=30, interval=0.1)

            # Every replica translates and serves with its own Envoy.
            async with httpx.AsyncClient(timeout=5) as client:
                for replica in replicas.values():
                    response = await client.get(f"http://{replica.address}:{port}/")
                    assert response.status_code == 200 and response.json()["upstream"] == "web"

            holder, _ = await eventually(lambda: lease(api).get("holderIdentity"), timeout=10)
            leader = replicas[holder.rsplit("-", 1)[0]]
            follower = next(r for r in replicas.values() if r is not leader)
            await eventually(lambda: published(api) == [leader.address], timeout=10)
            conds = {c["type"]: c["status"] for c in gateway_status(api)["conditions"]}
            assert conds["Programmed"] == "True"

            # Only the leader writes: the follower's status (its own address) never appears.
            await asyncio.sleep(0.5)
            api.clear_requests()
            await asyncio.sleep(1.5)
            assert [p for m, p in api.requests if m == "PATCH" and "/status" in p] == []
            assert published(api) == [leader.address]
            assert lease(api)["holderIdentity"] == holder

            # Kill the leader: the follower takes over within the lease duration and writes.
            transitions = lease(api)["leaseTransitions"]
            assert leader.proc is not None
            leader.proc.send_signal(signal.SIGKILL)
            killed = time.monotonic()
            leader.proc.wait(timeout=10)
            took_lease = took_status = 0.0
            while not (took_lease and took_status):
                elapsed = time.monotonic() - killed
                assert elapsed < 10, "the follower did not take over"
                if not took_lease and lease(api).get("holderIdentity", "").startswith(follower.name + "-"):
                    took_lease = elapsed
                if not took_status and published(api) == [follower.address]:
                    took_status = elapsed
                await asyncio.sleep(0.02)
            print(f"after the kill: Lease taken in {took_lease:.2f} s, status written in {took_status:.2f} s")
            # The follower counts the lease from when it saw the last renewal: it reads the Lease every
            # retry period (0.4 s), up to 0.4 s after the leader's last renewal, itself up to 0.4 s
            # before the kill.
            assert took_lease < LEASE_DURATION + 0.4 + 0.2, f"takeover took {took_lease:.1f} s"
            assert took_status - took_lease < 2.0, "the new leader was slow to write the status"
            new = lease(api)
            assert new["holderIdentity"].startswith(follower.name + "-")
            assert new["leaseTransitions"] == transitions + 1
            # The killed weir's Envoy outlives it (a lasting run folder: the next weir started on the
            # same folder would adopt it) and keeps serving its last configuration meanwhile.
            assert leader.envoy_pid is not None and pid_alive(leader.envoy_pid)

            # The new leader writes status for what appears from now on.
            api.create(route("later", "/later"))

            def later_written() -> bool:
                obj = api.get(GW, "HTTPRoute", "default", "later") or {}
                return bool((obj.get("status") or {}).get("parents"))

            await eventually(later_written, timeout=5)
            assert "is the leader" in follower.log()
        finally:
            for replica in replicas.values():
                replica.stop()
            if leader is not None:
                await end_orphan(default_run_dir("127.0.0.1", leader.admin_port), leader.envoy_pid)
        for replica in replicas.values():
            assert replica.envoy_pid is None or not pid_alive(replica.envoy_pid)
        # The survivor stopped cleanly and handed the Lease back.
        survivor = follower.proc
        assert survivor is not None and survivor.returncode == 0, follower.log()[-3000:]
        assert not lease(api).get("holderIdentity")
