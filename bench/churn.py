"""Churn under load: constant traffic on stable HTTPRoutes while other HTTPRoutes come and go.

Usage::

    python bench/churn.py                         # 100 stable, 1,000 churned, 60 s; writes results
    python bench/churn.py --kubernetes            # the same through a real API server (KUBEBUILDER_ASSETS)
    python bench/churn.py --duration 120 --ops-rate 60
    python bench/churn.py smoke                   # 10 stable, 40 churned, 5 s; writes nothing

``weir run -f FOLDER`` serves a folder holding one Gateway (one HTTP
listener), a Service whose EndpointSlice points at an echo server
(``weir.testkit.EchoHttpServer`` on 127.0.0.2, in a child process), the
``--stable`` routes (``/s<i>/``, one file, never touched) and, one file each,
the churned routes ``/c<i>/``. Half the churned routes exist at start; then
for ``--duration`` seconds ``--ops-rate`` operations a second each pick a
churned route at random and add it (when absent), or edit it (3 in 4) or
delete it. Files are written the way tools write them: a share
``--in-place`` rewritten in place (open with truncation, ``--in-place-gap``
seconds with the file empty, then the text, as ``cp`` and shell ``>`` do), the
rest atomically (a hidden temporary file renamed over the target, as editors
and ``kubectl``-like tools do).

Every write of churned route ``i`` carries a version ``v`` that only grows: the
route sets ``X-Version: v`` on its responses (ResponseHeaderModifier) and
``metadata.generation: v``; a deletion takes a version number too.

**Reported served** is what a user of files mode can see on weir's admin
``/status``: ``dataPlane.accepted`` (Envoy ACKed the configuration being
served) and the HTTPRoute's conditions ``Accepted``/``ResolvedRefs`` True with
``observedGeneration: v``; for a deletion, the route gone from ``objects``
while ``dataPlane.accepted``. A poller reads ``/status`` every
``--poll-interval`` seconds and notes when each version was first reported
served.

``--clients`` connections (HTTP/1.1, keep-alive) send requests back to back,
alternately to a stable route and to a churned route (half the time one of
the :data:`RECENT` routes written last, so that many answers come right after
an edit is reported served), until the deadline. It counts:

* **stable errors**: a stable route answered anything but 2xx (or the
  connection failed);
* **stale answers**: a churned route answered with a version older than the
  one reported served before the request was sent (or answered at all after
  its deletion was reported served);
* **lost answers**: a churned route answered 404 although a version of it was
  reported served before the request was sent and no deletion was written
  since (what an emptied file does if it withdraws routes at once);
* **churned errors**: any other non-2xx answer or failed connection on a
  churned route.

After the deadline the benchmark waits until ``/status`` reports the final
state and checks every route once more. Target: 0 stable errors, 0 stale
answers. Everything binds to 127.0.0.0/8; every process started (weir, which
stops its Envoy, and the echo server) is stopped by its PID.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter, deque
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from churn_stores import ECHO_HOST, ECHO_IP, NAMESPACE, REPO, FilesStore, KubeStore, Ops, Route, start_cluster
from controlplane import Processes, free_ports

RESULTS = REPO / "bench" / "results" / "churn.json"
#: How many of the routes written last get half the churned requests.
RECENT = 32

# ----------------------------------------------------------------------------- processes


def serve_echo() -> None:
    """``_echo``: an EchoHttpServer on 127.0.0.2 and a DNS stub on 127.0.0.1 (``echo.churn.test``
    is 127.0.0.2) until SIGTERM; prints their ports first."""
    from weir.testkit import DnsStub, EchoHttpServer, EchoIdentity

    async def main() -> None:
        server = await EchoHttpServer(EchoIdentity(NAMESPACE, "echo-1", "echo"), host=ECHO_IP).start()
        dns = await DnsStub(records={ECHO_HOST: [ECHO_IP]}, ttl=3600).start()
        print(server.port, dns.port, flush=True)
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        while not stop.is_set():
            server.clear()  # nothing to keep: memory stays flat
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)
        await dns.stop()
        await server.stop()

    asyncio.run(main())


# ----------------------------------------------------------------------------- bookkeeping


@dataclass
class Tally:
    """What the clients counted (see the module doc); ``examples``: the first problems, in words."""

    stable_requests: int = 0
    stable_errors: int = 0
    churned_requests: int = 0
    stale: int = 0
    lost: int = 0
    churned_errors: int = 0
    status_codes: Counter[str] = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)

    def note(self, what: str) -> None:
        if len(self.examples) < 20:
            self.examples.append(what)


# ----------------------------------------------------------------------------- HTTP/1.1 client


class Client:
    """One keep-alive HTTP/1.1 connection to the gateway (reconnects after a failure)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def get(self, path: str, timeout: float = 5.0) -> tuple[int, str | None]:
        """(status, X-Version); status 0 when the exchange failed."""
        try:
            async with asyncio.timeout(timeout):
                return await self._get(path)
        except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError, asyncio.LimitOverrunError):
            self.close()
            return 0, None

    async def _get(self, path: str) -> tuple[int, str | None]:
        if self._writer is None:
            self._reader, self._writer = await asyncio.open_connection("127.0.0.1", self.port)
        assert self._reader is not None
        self._writer.write(f"GET {path} HTTP/1.1\r\nHost: churn.bench\r\n\r\n".encode())
        head = (await self._reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        status = int(head[0].split()[1])
        headers = {}
        for line in head[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if headers.get("transfer-encoding", "").lower() == "chunked":
            while True:
                size = int((await self._reader.readuntil(b"\r\n")).split(b";")[0], 16)
                await self._reader.readexactly(size + 2)
                if size == 0:
                    break
        else:
            await self._reader.readexactly(int(headers.get("content-length", "0")))
        if headers.get("connection", "").lower() == "close":
            self.close()
        return status, headers.get("x-version")

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None


# ----------------------------------------------------------------------------- the run


@dataclass
class Config:
    stable: int
    churned: int
    duration: float
    clients: int
    ops_rate: float
    in_place: float
    in_place_gap: float
    poll_interval: float
    seed: int
    kubernetes: bool = False


class Bench:
    def __init__(
        self,
        cfg: Config,
        store: FilesStore | KubeStore,
        rng: random.Random,
        gateway_port: int,
        admin_port: int,
    ) -> None:
        self.cfg = cfg
        self.store = store
        self.gateway_port = gateway_port
        self.admin_url = f"http://127.0.0.1:{admin_port}/status"
        self.rng = rng
        self.routes = [Route(f"c{i:04d}") for i in range(cfg.churned)]
        self.tally = Tally()
        self.ops = Ops()
        self.polls = 0
        self.poll_seconds = 0.0
        self.stop_load = asyncio.Event()
        self.stop_churn = asyncio.Event()
        self.stop_poll = asyncio.Event()
        self.churning = False  # edit -> served latencies are noted only for the churn's writes
        #: Routes written lately: half the churned requests go to them, so that answers right
        #: after an edit is reported served (where a stale one would show) are many.
        self.recent: deque[Route] = deque(maxlen=RECENT)

    # -- writes ----------------------------------------------------------------

    def setup(self) -> None:
        """The Gateway, the stable routes and half the churned ones (version 1)."""
        initial = self.routes[: self.cfg.churned // 2]
        self.store.setup(self.gateway_port, self.cfg.stable, initial)
        now = time.monotonic()
        for route in initial:
            route.version, route.present = 1, True
            route.written_at[1] = now

    async def operate(self, route: Route) -> None:
        """One operation on ``route``: add it, or edit (3 in 4) or delete it."""
        route.busy = True
        try:
            version = route.version + 1
            delete = route.present and self.rng.random() < 0.25
            if delete:
                self.ops.deletes += 1
                await self.store.delete(route)
                route.last_delete = version
            else:
                if route.present:
                    self.ops.edits += 1
                else:
                    self.ops.adds += 1
                await self.store.write(route, version, self.ops)
            route.version, route.present = version, not delete
            route.written_at[version] = time.monotonic()
            self.recent.append(route)
        finally:
            route.busy = False

    async def churn(self) -> None:
        interval = 1 / self.cfg.ops_rate
        next_at = time.monotonic()
        pending: set[asyncio.Task[None]] = set()
        while not self.stop_churn.is_set():
            route = self.rng.choice(self.routes)
            if not route.busy:
                task = asyncio.create_task(self.operate(route))
                pending.add(task)
                task.add_done_callback(pending.discard)
            next_at += interval
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop_churn.wait(), max(0.0, next_at - time.monotonic()))
        if pending:
            await asyncio.gather(*pending)

    # -- what weir reports -----------------------------------------------------

    def _fetch_status(self) -> dict[str, Any]:
        with urllib.request.urlopen(self.admin_url, timeout=10) as response:
            data: dict[str, Any] = json.loads(response.read())
            return data

    async def poll_once(self) -> bool:
        """Read /status once and note newly served versions; whether Envoy had accepted it."""
        started = time.monotonic()
        try:
            data = await asyncio.to_thread(self._fetch_status)
        except (OSError, ValueError):
            return False
        self.polls += 1
        self.poll_seconds += time.monotonic() - started
        if not data.get("dataPlane", {}).get("accepted"):
            return False
        seen: dict[str, int] = {}
        for obj in data.get("objects", []):
            if obj.get("kind") != "HTTPRoute" or obj.get("namespace") != NAMESPACE:
                continue
            gens = set()
            ok = True
            for parent in (obj.get("status") or {}).get("parents", []):
                conds = {c["type"]: c for c in parent.get("conditions", [])}
                for kind in ("Accepted", "ResolvedRefs"):
                    cond = conds.get(kind)
                    ok = ok and cond is not None and cond.get("status") == "True"
                gens |= {int(c.get("observedGeneration", 0)) for c in conds.values()}
            if ok and len(gens) == 1:
                seen[obj["name"]] = gens.pop()
        for route in self.routes:
            generation = seen.get(route.obj)
            if generation is not None:
                version = route.generations.get((route.obj, generation), 0)
                if version > route.served or (
                    version and version == route.served and not route.served_present
                ):
                    self._served(route, version, present=True)
                continue
            # Absent: the deletion is served if it was the last write and finished before this poll.
            if (
                not route.present
                and route.last_delete == route.version
                and route.version > route.served
                and route.written_at.get(route.version, started) < started
            ):
                self._served(route, route.version, present=False)
        return True

    def _served(self, route: Route, version: int, *, present: bool) -> None:
        route.served, route.served_present = version, present
        written = route.written_at.get(version)
        if written is not None and self.churning:
            self.ops.served_latency.append(time.monotonic() - written)

    async def poll(self) -> None:
        while not self.stop_poll.is_set():
            await self.poll_once()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop_poll.wait(), self.cfg.poll_interval)

    # -- load ------------------------------------------------------------------

    def judge_churned(
        self, route: Route, served: int, present: bool, delete_before: int, status: int, got: str | None
    ) -> None:
        """Judge an answer of ``route`` against what was reported served when the request left."""
        t = self.tally
        t.churned_requests += 1
        if 200 <= status < 300:
            version = int(got) if got and got.isdigit() else -1
            if version < served:
                t.stale += 1
                gone = "" if present else " (deleted)"
                t.note(f"stale: {route.name} answered v{version}, v{served}{gone} reported served")
            return
        if status == 404:
            # Legitimate unless a version was reported served and no deletion was written since.
            if served and present and route.last_delete <= served and delete_before <= served:
                t.lost += 1
                t.note(f"lost: {route.name} answered 404, v{served} reported served")
            return
        t.churned_errors += 1
        t.status_codes[f"churned {status}"] += 1
        t.note(f"churned error: {route.name} answered {status}")

    async def client(self, k: int) -> None:
        conn = Client(self.gateway_port)
        stable_index = k
        try:
            while not self.stop_load.is_set():
                stable_index = (stable_index + 1) % self.cfg.stable
                status, _ = await conn.get(f"/s{stable_index}/")
                self.tally.stable_requests += 1
                if not 200 <= status < 300:
                    self.tally.stable_errors += 1
                    self.tally.status_codes[f"stable {status}"] += 1
                    self.tally.note(f"stable error: s{stable_index} answered {status}")
                recent = bool(self.recent) and self.rng.random() < 0.5
                route = self.rng.choice(self.recent if recent else self.routes)
                served, present, delete_before = route.served, route.served_present, route.last_delete
                status, got = await conn.get(f"/{route.name}/")
                self.judge_churned(route, served, present, delete_before, status, got)
        finally:
            conn.close()

    # -- phases ----------------------------------------------------------------

    async def wait_settled(self, timeout: float) -> bool:
        """Until /status reports every churned route's last write served (and Envoy accepted it)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if await self.poll_once() and all(r.served == r.version for r in self.routes):
                return True
            await asyncio.sleep(0.2)
        return False

    async def check_final(self) -> dict[str, int]:
        """Every route once more after the final state is reported served."""
        conn, wrong = Client(self.gateway_port), Counter[str]()
        try:
            for i in range(self.cfg.stable):
                status, _ = await conn.get(f"/s{i}/")
                wrong["stable"] += not 200 <= status < 300
            for route in self.routes:
                status, got = await conn.get(f"/{route.name}/")
                expected = (200, str(route.version)) if route.present else (404, None)
                wrong["churned"] += (status, got) != expected
        finally:
            conn.close()
        return {"stable": wrong["stable"], "churned": wrong["churned"]}

    async def run(self) -> dict[str, Any]:
        if not await self.wait_settled(120):
            raise RuntimeError("weir did not report the initial configuration served within 120 s")
        for i in range(self.cfg.stable):  # every stable route answers before the clock starts
            conn = Client(self.gateway_port)
            status, _ = await conn.get(f"/s{i}/")
            conn.close()
            if status != 200:
                raise RuntimeError(f"stable route s{i} answered {status} before the churn")
        poller = asyncio.create_task(self.poll())
        clients = [asyncio.create_task(self.client(k)) for k in range(self.cfg.clients)]
        self.churning = True
        churner = asyncio.create_task(self.churn())
        started = time.monotonic()
        await asyncio.sleep(self.cfg.duration)
        self.stop_churn.set()
        await churner
        self.churning = False
        self.stop_load.set()
        await asyncio.gather(*clients)
        elapsed = time.monotonic() - started
        self.stop_poll.set()
        await poller
        settled_started = time.monotonic()
        settled = await self.wait_settled(60)
        settle_s = time.monotonic() - settled_started
        final = await self.check_final()
        return self.summary(elapsed, settled, settle_s, final)

    def summary(
        self, elapsed: float, settled: bool, settle_s: float, final: dict[str, int]
    ) -> dict[str, Any]:
        t, ops = self.tally, self.ops
        lat = sorted(ops.served_latency)

        def pct(q: float) -> float | None:
            return round(lat[min(len(lat) - 1, int(q / 100 * len(lat)))], 3) if lat else None

        requests = t.stable_requests + t.churned_requests
        return {
            "config": asdict(self.cfg),
            "elapsed_s": round(elapsed, 1),
            "requests": requests,
            "requests_per_s": round(requests / elapsed, 1),
            "stable_requests": t.stable_requests,
            "stable_errors": t.stable_errors,
            "churned_requests": t.churned_requests,
            "stale_answers": t.stale,
            "lost_answers": t.lost,
            "churned_errors": t.churned_errors,
            "status_codes": dict(t.status_codes),
            "examples": t.examples,
            "operations": {
                "adds": ops.adds,
                "edits": ops.edits,
                "deletes": ops.deletes,
                "atomic": ops.atomic,
                "in_place": ops.in_place,
                "per_s": round((ops.adds + ops.edits + ops.deletes) / elapsed, 1),
            },
            "write_to_reported_served_s": {
                "p50": pct(50),
                "p99": pct(99),
                "max": lat[-1] if lat else None,
                "count": len(lat),
            },
            "status_polls": self.polls,
            "status_poll_mean_s": round(self.poll_seconds / self.polls, 3) if self.polls else None,
            "settled_after_s": round(settle_s, 2) if settled else None,
            "final_check_wrong": final,
            "loadavg": os.getloadavg(),
            "cpus": os.cpu_count(),
        }


# ----------------------------------------------------------------------------- main


def report(result: dict[str, Any]) -> str:
    cfg, ops, lat = result["config"], result["operations"], result["write_to_reported_served_s"]
    lines = [
        f"stable routes {cfg['stable']}, churned routes {cfg['churned']}, {result['elapsed_s']} s, "
        f"{cfg['clients']} keep-alive clients",
        f"operations: {ops['adds']} adds, {ops['edits']} edits, {ops['deletes']} deletes "
        f"({ops['per_s']}/s; {ops['atomic']} atomic, {ops['in_place']} in place)",
        f"requests: {result['requests']} ({result['requests_per_s']}/s): "
        f"{result['stable_requests']} stable, {result['churned_requests']} churned",
        f"write → reported served: p50 {lat['p50']} s, p99 {lat['p99']} s, max {lat['max']} s",
        f"stable errors (non-2xx):      {result['stable_errors']}   (target 0)",
        f"stale answers after served:   {result['stale_answers']}   (target 0)",
        f"lost answers (404 after served, no delete): {result['lost_answers']}",
        f"other churned errors:         {result['churned_errors']}",
        f"final state reported served after {result['settled_after_s']} s; wrong answers then: "
        f"{result['final_check_wrong']}",
        f"load average {', '.join(f'{x:.2f}' for x in result['loadavg'])} on {result['cpus']} CPUs",
    ]
    if result["examples"]:
        lines.append("first problems: " + "; ".join(result["examples"][:8]))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["_echo"]:
        serve_echo()
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("mode", nargs="?", choices=["run", "smoke"], default="run")
    parser.add_argument("--stable", type=int, default=100)
    parser.add_argument("--churned", type=int, default=1000)
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--clients", type=int, default=12)
    parser.add_argument("--ops-rate", type=float, default=40.0, help="churn operations per second")
    parser.add_argument("--in-place", type=float, default=0.5, help="share of writes made in place")
    parser.add_argument(
        "--in-place-gap", type=float, default=0.02, help="seconds an in-place write leaves the file empty"
    )
    parser.add_argument("--poll-interval", type=float, default=0.25)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--json", type=Path, default=RESULTS, help="raw results (not in smoke mode)")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the manifests and weir's log")
    parser.add_argument(
        "--kubernetes",
        action="store_true",
        help="churn through a real API server (tests/kube's envtest; needs KUBEBUILDER_ASSETS)",
    )
    opts = parser.parse_args(args)
    if opts.mode == "smoke":
        opts.stable, opts.churned, opts.duration, opts.ops_rate, opts.clients = 10, 40, 5.0, 20.0, 4
        opts.no_write = True
    cfg = Config(
        opts.stable,
        opts.churned,
        opts.duration,
        opts.clients,
        opts.ops_rate,
        opts.in_place,
        opts.in_place_gap,
        opts.poll_interval,
        opts.seed,
        opts.kubernetes,
    )
    workdir = Path(tempfile.mkdtemp(prefix="weir-churn-"))
    procs = Processes()
    cluster: Any = None
    try:
        echo = procs.add(
            "echo",
            subprocess.Popen(
                [sys.executable, __file__, "_echo"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE
            ),
        )
        assert echo.stdout is not None
        ports = echo.stdout.readline().decode().split()
        if len(ports) != 2:
            raise RuntimeError("the echo server and DNS stub did not start")
        echo_port, dns_port = int(ports[0]), int(ports[1])
        gateway_port, admin_port = free_ports(2)
        rng = random.Random(cfg.seed)
        weir_bin = shutil.which("weir") or str(Path(sys.executable).with_name("weir"))
        command = [
            weir_bin, "run", "--admin-address", f"127.0.0.1:{admin_port}",
            "--access-log", "stdout", "--log-level", "warning",
        ]  # fmt: skip
        store: FilesStore | KubeStore
        if opts.kubernetes:
            cluster, kubeconfig = start_cluster(workdir / "cluster")
            store = KubeStore(cluster.admin, echo_port)
            command += [
                "--kubernetes", "--kubeconfig", str(kubeconfig),
                "--dns-resolver", f"127.0.0.1:{dns_port}", "--egress-denied-cidrs", "127.0.0.66/32",
            ]  # fmt: skip
        else:
            store = FilesStore(workdir / "manifests", echo_port, rng, opts.in_place, opts.in_place_gap)
            command += ["-f", str(workdir / "manifests")]
        bench = Bench(cfg, store, rng, gateway_port, admin_port)
        bench.setup()
        log = (workdir / "weir.log").open("wb")
        # Envoy writes its access log to weir's stdout itself: dropped here, at no cost to weir.
        procs.add(
            "weir",
            subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log),
        )
        result = {"mode": store.kind, **asyncio.run(bench.run())}
        result["weir_log_tail"] = (workdir / "weir.log").read_text(errors="replace").splitlines()[-20:]
    finally:
        procs.stop_all()  # weir stops its Envoy
        if cluster is not None:
            cluster.stop()
        if not opts.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"kept {workdir}", file=sys.stderr)
    print(report(result))
    if not opts.no_write:
        opts.json.parent.mkdir(parents=True, exist_ok=True)
        opts.json.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {opts.json}")
    ok = result["stable_errors"] == 0 and result["stale_answers"] == 0
    return 0 if ok or opts.mode == "run" else 1


if __name__ == "__main__":
    sys.exit(main())
