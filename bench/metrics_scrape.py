"""What a ``/metrics`` scrape costs at N backends, and whether it stalls weir.

Usage::

    python bench/metrics_scrape.py --n 100 10000 [--scrapes 10] [--json FILE]

For each N: the control-plane benchmark's workload (``bench/controlplane.py``:
N HTTPRoutes, each with its own XBackend, so N clusters, on one Gateway with 4
HTTP listeners) under ``weir run`` in a subprocess, a DNS responder in its own
process, and nothing else. Once Envoy has accepted the configuration and the
machine is quiet, ``--scrapes`` scrapes of weir's ``/metrics``, each more than
the 1 s cache apart (so each one fetches Envoy's stats again), and during each
one a probe of weir's ``/healthz`` every 5 ms: its worst latency is how long
weir's event loop was held up (the control plane answers ADS on that loop),
next to the same probe over as long a window without a scrape (what a busy
machine costs anyway).
Also measured: weir's CPU time per scrape (``/proc``), the page's size and
series count, the fetch of Envoy's stats as weir makes it (the time weir
reports in ``weir_envoy_stats_fetch_duration_seconds``), and, for scale,
Envoy's own full ``/stats/prometheus``.

Everything binds to 127.0.0.1; every process started is stopped by its PID.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from controlplane import (
    DENIED,
    LISTENERS,
    Processes,
    cpu_ticks,
    free_ports,
    generate,
    percentile,
    rss_mib,
    start_dns,
    wait_idle,
)


def get(port: int, path: str, timeout: float = 30.0) -> tuple[int, bytes, float]:
    """``(status, body, seconds)`` of one GET on a new connection (0 when nothing answered)."""
    started = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        body = response.read()
        return response.status, body, time.perf_counter() - started
    except (OSError, http.client.HTTPException):
        return 0, b"", time.perf_counter() - started
    finally:
        conn.close()


class LoopProbe(threading.Thread):
    """GET ``/healthz`` every ``interval`` seconds on one keep-alive connection; record latencies."""

    def __init__(self, port: int, interval: float = 0.005) -> None:
        super().__init__(daemon=True)
        self.port, self.interval = port, interval
        self.latencies: list[float] = []
        self._done = threading.Event()

    def run(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            while not self._done.is_set():
                started = time.perf_counter()
                conn.request("GET", "/healthz")
                conn.getresponse().read()
                self.latencies.append(time.perf_counter() - started)
                time.sleep(self.interval)
        finally:
            conn.close()

    def stop(self) -> list[float]:
        self._done.set()
        self.join(5)
        return self.latencies


def envoy_admin_socket(weir_admin: int) -> str:
    """Path of Envoy's admin socket (weir status: dataPlane.envoyAdmin)."""
    _, body, _ = get(weir_admin, "/status")
    return str(json.loads(body)["dataPlane"]["envoyAdmin"])


def get_envoy(socket_path: str, path: str, timeout: float = 30.0) -> tuple[int, bytes, float]:
    """``(status, body, seconds)`` of one GET from Envoy's admin unix socket."""
    started = time.perf_counter()
    with httpx.Client(transport=httpx.HTTPTransport(uds=socket_path), timeout=timeout) as client:
        response = client.get("http://envoy" + path)
    return response.status_code, response.content, time.perf_counter() - started


def fetch_value(page: str, name: str) -> float:
    for line in page.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return float("nan")


def run_one(n: int, scrapes: int, workdir: Path) -> dict[str, Any]:
    procs = Processes()
    folder = workdir / f"n{n}"
    ports = free_ports(LISTENERS + 2)
    listener_ports, upstream_port, admin_port = ports[:LISTENERS], ports[LISTENERS], ports[LISTENERS + 1]
    generate(folder, n, listener_ports, upstream_port)
    try:
        dns_port = start_dns(procs)
        log = open(workdir / f"weir-{n}.log", "wb")  # noqa: SIM115 - closed below
        weir = procs.add(
            "weir",
            subprocess.Popen(
                [
                    sys.executable, "-c", "from weir.cli import main; main()", "run", "-f", str(folder),
                    "--dns-resolver", f"127.0.0.1:{dns_port}",
                    "--egress-denied-cidrs", DENIED,
                    "--admin-address", f"127.0.0.1:{admin_port}",
                    "--log-level", "warning",
                ],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            ),
        )  # fmt: skip
        started = time.monotonic()
        while get(admin_port, "/ready", timeout=2)[0] != 200:
            if weir.poll() is not None or time.monotonic() - started > 300:
                raise RuntimeError(f"weir did not become ready (see {workdir}/weir-{n}.log)")
            time.sleep(0.2)
        ready_s = time.monotonic() - started
        envoy_socket = envoy_admin_socket(admin_port)
        envoy_pid = int(json.loads(get(admin_port, "/status")[1])["dataPlane"]["envoyPid"])
        wait_idle([weir.pid, envoy_pid], timeout=120)

        hz = os.sysconf("SC_CLK_TCK")
        rows: list[dict[str, float]] = []
        page = ""
        for _ in range(scrapes):
            time.sleep(1.2)  # past the cache: every scrape fetches Envoy's stats
            probe = LoopProbe(admin_port)
            probe.start()
            time.sleep(0.05)
            before = cpu_ticks([weir.pid])
            status, body, seconds = get(admin_port, "/metrics")
            cpu = (cpu_ticks([weir.pid]) - before) / hz
            time.sleep(0.05)
            latencies = probe.stop()
            if status != 200:
                raise RuntimeError(f"/metrics answered {status}")
            # The same window without a scrape: how late /healthz answers anyway on this machine.
            idle = LoopProbe(admin_port)
            idle.start()
            time.sleep(seconds + 0.1)
            idle_latencies = idle.stop()
            page = body.decode()
            rows.append(
                {
                    "scrape_s": seconds,
                    "weir_cpu_s": cpu,
                    "loop_worst_s": max(latencies) if latencies else float("nan"),
                    "loop_probes": len(latencies),
                    "idle_worst_s": max(idle_latencies) if idle_latencies else float("nan"),
                    "fetch_s": fetch_value(page, "weir_envoy_stats_fetch_duration_seconds"),
                }
            )
        envoy_full = get_envoy(envoy_socket, "/stats/prometheus")
        samples = sum(1 for line in page.splitlines() if line and not line.startswith("#"))

        def p(key: str, q: float) -> float:
            return percentile([r[key] for r in rows], q)

        return {
            "n": n,
            "ready_s": ready_s,
            "page_bytes": len(page.encode()),
            "page_samples": samples,
            "envoy_stats_up": fetch_value(page, "weir_envoy_stats_up"),
            "scrape_p50_s": p("scrape_s", 50),
            "scrape_max_s": p("scrape_s", 100),
            "fetch_p50_s": p("fetch_s", 50),
            "weir_cpu_per_scrape_s": p("weir_cpu_s", 50),
            "loop_worst_p50_s": p("loop_worst_s", 50),
            "loop_worst_max_s": p("loop_worst_s", 100),
            "idle_worst_p50_s": p("idle_worst_s", 50),
            "idle_worst_max_s": p("idle_worst_s", 100),
            "envoy_prometheus_s": envoy_full[2],
            "envoy_prometheus_bytes": len(envoy_full[1]),
            "weir_rss_mib": rss_mib(weir.pid)[0],
            "envoy_rss_mib": rss_mib(envoy_pid)[0],
            "scrapes": rows,
        }
    finally:
        procs.stop_all()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, nargs="+", default=[100, 10_000])
    parser.add_argument("--scrapes", type=int, default=10)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--keep", action="store_true", help="keep the work folder (manifests, weir's log)")
    args = parser.parse_args(argv)
    with socket.socket() as probe:  # loopback only, as everything here
        probe.bind(("127.0.0.1", 0))
    workdir = Path(tempfile.mkdtemp(prefix="weir-metrics-bench-"))
    results = []
    try:
        for n in args.n:
            result = run_one(n, args.scrapes, workdir)
            results.append(result)
            print(
                f"N={n}: page {result['page_bytes'] / 1024:.0f} KiB, {result['page_samples']} series; "
                f"scrape p50 {result['scrape_p50_s'] * 1000:.0f} ms "
                f"(max {result['scrape_max_s'] * 1000:.0f}), "
                f"of which Envoy's stats {result['fetch_p50_s'] * 1000:.0f} ms; "
                f"weir CPU {result['weir_cpu_per_scrape_s'] * 1000:.0f} ms/scrape; "
                f"weir's loop held up at worst {result['loop_worst_max_s'] * 1000:.1f} ms "
                f"(p50 of scrapes {result['loop_worst_p50_s'] * 1000:.1f} ms; without a scrape "
                f"{result['idle_worst_max_s'] * 1000:.1f} / {result['idle_worst_p50_s'] * 1000:.1f} ms); "
                f"Envoy's own /stats/prometheus {result['envoy_prometheus_s'] * 1000:.0f} ms, "
                f"{result['envoy_prometheus_bytes'] / 1024:.0f} KiB",
                flush=True,
            )
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"kept {workdir}")
    if args.json:
        load = os.getloadavg()
        args.json.write_text(
            json.dumps(
                {"when": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "load": load, "results": results}, indent=2
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
