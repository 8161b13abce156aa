"""What a crash of Envoy costs the traffic, and what a standby Envoy would save (issue 13, item 10).

One ``weir run`` (its own process) serves one route to an echo server; a
steady load (``--workers`` loops, each a new connection every
``--per-connection`` requests) runs while Envoy is killed with SIGKILL.
Counted per round: requests that failed (connection refused or reset, or
not 200), and the gap (first to last failure).

Two variants, interleaved round by round in one run so that the machine's
noise hits both alike:

* ``restart``: what weir does: its supervisor starts a new Envoy at once,
  which reconnects to weir's ADS server and binds the listeners again.
* ``standby``: ``weir run --envoy-standby``: a second Envoy on the same
  configuration (another node id and admin socket, the same ADS server),
  listening on the same ports (Envoy sets SO_REUSEPORT on Linux): the
  kernel spreads new connections over both, and when one dies the other is
  already serving.

Each round starts a fresh ``weir run`` (so weir's crash-loop back-off, which
applies to an Envoy crashing again within 30 s, does not blur the figures)
and kills its primary Envoy once.

Everything binds 127.0.0.1. Usage::

    python bench/envoy_crash.py [--rounds 3] [--workers 8] [--per-connection 20]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from controlplane import gateway_yaml

from weir.testkit import EchoHttpServer, EchoIdentity, free_port


def manifests(port: int, backend: int) -> str:
    """The benchmark's Gateway (``bench``, one listener on ``port``) and one route to a Service."""
    return (
        gateway_yaml([port])
        + f"""\
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: web, namespace: default}}
spec:
  parentRefs: [{{name: bench}}]
  rules: [{{backendRefs: [{{name: echo, port: {backend}}}]}}]
---
apiVersion: v1
kind: Service
metadata: {{name: echo, namespace: default}}
spec: {{ports: [{{name: http, port: {backend}}}]}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: echo-1, namespace: default, labels: {{kubernetes.io/service-name: echo}}}}
addressType: IPv4
ports: [{{name: http, port: {backend}}}]
endpoints: [{{addresses: [127.0.0.1]}}]
"""
    )


class Load:
    def __init__(self, url: str, workers: int, per_connection: int) -> None:
        self.url, self.workers, self.per_connection = url, workers, per_connection
        self.outcomes: Counter[str] = Counter()
        self.failures: list[float] = []
        self._stop = asyncio.Event()

    async def _loop(self) -> None:
        while not self._stop.is_set():
            async with httpx.AsyncClient(timeout=2) as client:
                for _ in range(self.per_connection):
                    try:
                        response = await client.get(self.url)
                        outcome = str(response.status_code)
                    except httpx.HTTPError as exc:
                        outcome = type(exc).__name__
                    self.outcomes[outcome] += 1
                    if outcome != "200":
                        self.failures.append(time.monotonic())
                        await asyncio.sleep(0.001)

    async def run(self, seconds: float, at: float, action: Any) -> None:
        tasks = [asyncio.create_task(self._loop()) for _ in range(self.workers)]
        await asyncio.sleep(at)
        await action()
        await asyncio.sleep(seconds - at)
        self._stop.set()
        await asyncio.gather(*tasks)


async def admin(port: int, path: str) -> Any:
    async with httpx.AsyncClient(timeout=2) as client:
        return (await client.get(f"http://127.0.0.1:{port}{path}")).json()


async def wait_ready(port: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError, ValueError):
            if (await admin(port, "/ready")).get("ready"):
                return
        await asyncio.sleep(0.1)
    raise RuntimeError("weir did not become ready")


def start_weir(work: Path, admin_port: int, standby: bool) -> subprocess.Popen[bytes]:
    command = [
        sys.executable, "-c", "from weir.cli import main; main()", "run", "-f", str(work / "m"),
        "--admin-address", f"127.0.0.1:{admin_port}", "--log-level", "warning",
    ]  # fmt: skip
    if standby:
        command.append("--envoy-standby")
    with open(work / "weir.log", "ab") as log:
        return subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        proc.send_signal(signal.SIGINT)  # a second signal: no drain
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def round_(variant: str, work: Path, url: str, args: argparse.Namespace) -> dict[str, Any]:
    weir_admin = free_port()
    weir = start_weir(work, weir_admin, standby=variant == "standby")
    try:
        await wait_ready(weir_admin)
        status = (await admin(weir_admin, "/status"))["dataPlane"]
        envoy = int(status["envoyPid"])
        if variant == "standby":
            assert status["standbyEnvoyPid"], status
        load = Load(url, args.workers, args.per_connection)
        killed: list[float] = []

        async def kill() -> None:
            killed.append(time.monotonic())
            os.kill(envoy, signal.SIGKILL)

        await load.run(args.seconds, args.seconds / 3, kill)
        failed = sum(n for k, n in load.outcomes.items() if k != "200")
        gap = (load.failures[-1] - killed[0]) if load.failures else 0.0
        return {
            "variant": variant,
            "requests": sum(load.outcomes.values()),
            "failed": failed,
            "gap_ms": round(gap * 1000, 1),
            "outcomes": dict(load.outcomes),
        }
    finally:
        stop(weir)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--per-connection", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="weir-crash-", dir="/tmp"))
    gateway_port = free_port()
    try:
        async with EchoHttpServer(EchoIdentity("default", "echo-0", "echo")) as echo:
            (work / "m").mkdir()
            (work / "m" / "web.yaml").write_text(manifests(gateway_port, echo.port))
            url = f"http://127.0.0.1:{gateway_port}/"
            rows = []
            for i in range(args.rounds):
                for variant in ("restart", "standby") if i % 2 == 0 else ("standby", "restart"):
                    row = await round_(variant, work, url, args)
                    rows.append(row)
                    print(json.dumps(row), flush=True)
            for variant in ("restart", "standby"):
                mine = [r for r in rows if r["variant"] == variant]
                failed = sorted(r["failed"] for r in mine)
                print(
                    f"{variant:8} failed per kill {failed} of ~{mine[0]['requests']} requests; "
                    f"gap ms {sorted(r['gap_ms'] for r in mine)}"
                )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
