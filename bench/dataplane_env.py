"""The data-path benchmark's environment: processes, CPU accounting, upstreams, contenders, measuring.

See ``dataplane.py``. :class:`Bench` owns a work folder, a throw-away CA, a
DNS stub in this process and every process started (each ended by its PID
when the benchmark ends); :func:`measure_http` runs the load generator
against one contender and counts its CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import resource
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import dataplane_configs as cfg
import dataplane_load as load

from weir.envoy import envoy_binary
from weir.testkit import DnsStub, free_port, make_ca
from weir.testkit.pki import CertAuthority, PemFiles

T = TypeVar("T")

PROXY_CORE = 1
LOAD_CORE = 0
HERE = Path(__file__).resolve().parent
EGRESS_CONTENDERS = ("weir", "lean-envoy", "lean-envoy-same", "nginx", "haproxy", "direct")
STREAMING_CONTENDERS = ("weir", "lean-envoy", "lean-envoy-same", "nginx", "haproxy", "direct")
CLK_TCK = os.sysconf("SC_CLK_TCK")
PATH = "/v1/chat/completions"


def say(message: str) -> None:
    print(message, flush=True)


# --------------------------------------------------------------------------
# Processes
# --------------------------------------------------------------------------


def pinned(core: int | None, command: list[str]) -> list[str]:
    return command if core is None else ["taskset", "-c", str(core), *command]


def can_pin() -> bool:
    return (os.cpu_count() or 1) >= 2 and shutil.which("taskset") is not None


def children(pid: int) -> list[int]:
    out: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{task}/children") as f:
                out.extend(int(p) for p in f.read().split())
    return out


def process_tree(pid: int) -> list[int]:
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        todo.extend(children(current))
    return tree


def cpu_split(pids: list[int]) -> tuple[float, float]:
    """(utime, stime) of ``pids`` (all their threads, exited ones included), in seconds."""
    user = system = 0
    for pid in pids:
        with contextlib.suppress(OSError), open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
            user += int(fields[11])  # utime (field 14 of proc(5))
            system += int(fields[12])  # stime (field 15)
    return user / CLK_TCK, system / CLK_TCK


def cpu_seconds(pids: list[int]) -> float:
    """utime + stime of ``pids``, in seconds."""
    return sum(cpu_split(pids))


def core_busy() -> dict[int, tuple[int, int]]:
    """Per CPU: (busy, total) jiffies from /proc/stat."""
    out = {}
    for line in Path("/proc/stat").read_text().splitlines():
        name, *values = line.split()
        if name.startswith("cpu") and name != "cpu":
            ticks = [int(v) for v in values[:8]]
            idle = ticks[3] + ticks[4]
            out[int(name[3:])] = (sum(ticks) - idle, sum(ticks))
    return out


def busy_share(before: dict[int, tuple[int, int]], after: dict[int, tuple[int, int]]) -> dict[int, float]:
    return {cpu: (after[cpu][0] - before[cpu][0]) / max(1, after[cpu][1] - before[cpu][1]) for cpu in after}


def tcp_active_opens() -> int:
    """Connections this machine has initiated so far (``Tcp: ActiveOpens`` of /proc/net/snmp)."""
    lines = [
        line.split() for line in Path("/proc/net/snmp").read_text().splitlines() if line.startswith("Tcp:")
    ]
    return int(lines[1][lines[0].index("ActiveOpens")])


def rss_kib(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
    return total


def comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


class Processes:
    """Children started by the benchmark; :meth:`stop_all` ends each of them by PID."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.running: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, command: list[str], *, core: int | None) -> subprocess.Popen[bytes]:
        log = open(self.logs / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(
            pinned(core, command),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        self.running[name] = proc
        return proc

    def check(self, name: str) -> None:
        proc = self.running[name]
        if proc.poll() is not None:
            tail = (self.logs / f"{name}.log").read_text(errors="replace")[-3000:]
            raise RuntimeError(f"{name} exited with code {proc.returncode}:\n{tail}")

    def stop(self, name: str) -> None:
        proc = self.running.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def stop_all(self) -> None:
        for name in list(self.running):
            self.stop(name)


class LoopThread:
    """An asyncio loop in a thread, for the DNS stub and Python servers of this process."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="bench-loop", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = 60) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def http_get(
    url: str, timeout: float = 5.0, context: ssl.SSLContext | None = None, *, body: bool = True
) -> tuple[int, dict[str, str], str]:
    """GET ``url``: status, headers and body (``body=False``: an event stream, not read)."""
    request = urllib.request.Request(url, headers={"accept": "application/json, text/event-stream"})
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            headers = {k.lower(): v for k, v in response.headers.items()}
            return response.status, headers, response.read().decode() if body else ""
    except urllib.error.HTTPError as exc:
        return exc.code, {}, exc.read().decode(errors="replace")


def wait_http(
    url: str,
    what: str,
    *,
    timeout: float = 60.0,
    check: Callable[[], None] | None = None,
    context: ssl.SSLContext | None = None,
    body: bool = True,
) -> tuple[dict[str, str], str]:
    """GET ``url`` until it answers 200; the last answer's headers and body."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if check is not None:
            check()
        try:
            status, headers, text = http_get(url, context=context, body=body)
            if status == 200:
                return headers, text
            last = f"HTTP {status}: {text[:300]}"
        except OSError as exc:
            last = str(exc)
        time.sleep(0.1)
    raise RuntimeError(f"{what} not serving {url} after {timeout:g} s: {last}")


# --------------------------------------------------------------------------
# The bench environment
# --------------------------------------------------------------------------


@dataclass
class Contender:
    name: str
    #: The URL the load generator requests.
    url: str
    #: Root process (None for ``direct``).
    pid: int | None = None
    #: Process name whose CPU is also reported on its own ("envoy" for weir).
    core_process: str | None = None
    #: HTTP version the contender used to the upstream (from ``x-upstream-proto``).
    upstream_proto: str = "?"
    restart: Callable[[], None] | None = None

    def pids(self) -> list[int]:
        return [] if self.pid is None else process_tree(self.pid)

    def core_pids(self) -> list[int]:
        if self.core_process is None:
            return []
        return [p for p in self.pids() if comm(p) == self.core_process]


class Bench:
    """Work folder, certificates, DNS stub, upstream and contenders of one scenario run."""

    def __init__(self, *, pin: bool, keep: bool = False) -> None:
        self.work = Path(tempfile.mkdtemp(prefix="weir-bench-"))
        self.keep = keep
        (self.work / "logs").mkdir()
        self.procs = Processes(self.work / "logs")
        self.loop = LoopThread()
        self.pin = pin
        self.ca: CertAuthority = make_ca("weir bench")
        self.pki: PemFiles = self.ca.issue_server_cert(cfg.API_HOST).write(self.work / "pki", "upstream")
        self.dns = self.loop.run(
            DnsStub(host="127.0.0.1", ttl=3600, records={cfg.API_HOST: [cfg.UPSTREAM_IP]}).start()
        )
        self.upstream_port = 0
        self.python_upstream: Any = None

    @property
    def proxy_core(self) -> int | None:
        return PROXY_CORE if self.pin else None

    @property
    def load_core(self) -> int | None:
        return LOAD_CORE if self.pin else None

    def close(self) -> None:
        self.procs.stop_all()
        with contextlib.suppress(Exception):
            self.loop.run(self.dns.stop(), timeout=5)
        if self.python_upstream is not None:
            with contextlib.suppress(Exception):
                self.loop.run(self.python_upstream.stop(), timeout=5)
        self.loop.close()
        if self.keep:
            say(f"work folder kept: {self.work}")
        else:
            shutil.rmtree(self.work, ignore_errors=True)

    def client_tls(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.pki.ca))
        ctx.check_hostname = False  # clients connect by IP (as wrk does); the chain is still verified
        return ctx

    # ---------------------------------------------------------------- upstreams

    def start_nginx_upstream(self, *, http2: bool) -> None:
        self.upstream_port = free_port(cfg.UPSTREAM_IP)
        prefix = self.work / "upstream"
        (prefix / "tmp").mkdir(parents=True)
        conf = prefix / "nginx.conf"
        conf.write_text(
            cfg.nginx_upstream(prefix, self.upstream_port, self.pki.cert, self.pki.key, http2=http2)
        )
        self.procs.start("upstream", ["nginx", "-p", str(prefix), "-c", str(conf)], core=self.load_core)
        wait_http(
            self.upstream_url(),
            "upstream",
            check=lambda: self.procs.check("upstream"),
            context=self.client_tls(),
        )

    def start_python_upstream(self) -> None:
        """The testkit's upstream (HTTP/1.1 over TLS) when nginx is not installed: smoke runs only."""
        from weir.testkit import RecordingUpstream, SeenRequest, UpstreamResponse, server_ssl_context

        def answer(seen: SeenRequest) -> UpstreamResponse:
            proto = "HTTP/2.0" if seen.http_version == "2" else f"HTTP/{seen.http_version}"
            headers = (("content-type", "application/json"), ("x-upstream-proto", proto))
            return UpstreamResponse(body=cfg.BODY, headers=headers)

        cert = self.ca.issue_server_cert(cfg.API_HOST)
        ctx = server_ssl_context(cert, alpn=("http/1.1",))
        upstream = RecordingUpstream(
            "api", host=cfg.UPSTREAM_IP, ssl_context=ctx, handler=answer, http2=False
        )
        self.python_upstream = self.loop.run(upstream.start())
        self.upstream_port = upstream.port

    def start_sse_upstream(self, interval: float) -> None:
        self.upstream_port = free_port(cfg.UPSTREAM_IP)
        command = [
            sys.executable,
            str(HERE / "dataplane.py"),
            "_sse-upstream",
            "--port",
            str(self.upstream_port),
            "--cert",
            str(self.pki.cert),
            "--key",
            str(self.pki.key),
            "--interval",
            str(interval),
        ]
        self.procs.start("upstream", command, core=self.load_core)
        deadline = time.monotonic() + 20
        while True:
            self.procs.check("upstream")
            try:
                with socket.create_connection((cfg.UPSTREAM_IP, self.upstream_port), timeout=1):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def upstream_url(self) -> str:
        return f"https://{cfg.UPSTREAM_IP}:{self.upstream_port}{PATH}"

    # ---------------------------------------------------------------- contenders

    def start(self, name: str, *, http2: bool, protocol: str | None, streaming: bool = False) -> Contender:
        if name in ALIASES or name == "weir" or name.startswith("weir+"):
            contender = self._weir(name, protocol=protocol)
        else:
            starter = {
                "lean-envoy": self._lean_envoy,
                "lean-envoy-same": self._lean_envoy_same,
                "nginx": self._nginx,
                "haproxy": self._haproxy,
                "direct": self._direct,
            }[name]
            contender = starter(http2=http2, streaming=streaming)
        context = self.client_tls() if name == "direct" else None
        check = None if contender.pid is None else (lambda: self.procs.check(name))
        headers, body = wait_http(contender.url, name, check=check, context=context, body=not streaming)
        if not streaming and body != cfg.BODY:
            raise RuntimeError(f"{name}: unexpected body {body[:200]!r}")
        contender.upstream_proto = headers.get("x-upstream-proto", "?")
        return contender

    def _proxy_url(self, port: int) -> str:
        return f"http://{cfg.PROXY_IP}:{port}{PATH}"

    def _weir(self, name: str, *, protocol: str | None) -> Contender:
        """``weir run``; ``weir+LEVER,...`` runs it through ``dataplane_levers.py`` (lever study)."""
        spec = ALIASES.get(name, name)
        port = free_port(cfg.PROXY_IP)
        folder = self.work / name.replace("+", "_").replace(",", "_")
        folder.mkdir(exist_ok=True)
        manifests = cfg.weir_manifests(port, self.upstream_port, self.ca.cert_pem, protocol=protocol)
        (folder / "bench.yaml").write_text(manifests)
        weir = Path(sys.executable).with_name("weir")
        if "+" in spec:
            command = [sys.executable, str(HERE / "dataplane_levers.py"), ",".join(spec.split("+")[1:])]
        elif weir.exists():
            command = [str(weir)]
        else:
            command = [sys.executable, "-c", "from weir.cli import main; main()"]
        command += [
            "run", "-f", str(folder),
            "--dns-resolver", f"{self.dns.host}:{self.dns.port}",
            "--admin-address", f"127.0.0.1:{free_port()}",
            "--egress-denied-cidrs", ",".join(cfg.DENIED_CIDRS),
            "--envoy-concurrency", "1",
        ]  # fmt: skip
        proc = self.procs.start(name, command, core=self.proxy_core)
        return Contender(name, self._proxy_url(port), proc.pid, core_process="envoy")

    def _lean_envoy(self, *, http2: bool, streaming: bool, same: bool = False) -> Contender:
        name = "lean-envoy-same" if same else "lean-envoy"
        port = free_port(cfg.PROXY_IP)
        path = self.work / f"{name}.json"
        config = cfg.lean_envoy(
            port, self.upstream_port, self.pki.ca, http2=http2, streaming=streaming, same=same
        )
        path.write_text(config)
        command = [envoy_binary(), "-c", str(path), "--concurrency", "1", "--disable-hot-restart",
                   "--log-level", "warning"]  # fmt: skip
        proc = self.procs.start(name, command, core=self.proxy_core)
        return Contender(name, self._proxy_url(port), proc.pid, core_process="envoy")

    def _lean_envoy_same(self, *, http2: bool, streaming: bool) -> Contender:
        return self._lean_envoy(http2=http2, streaming=streaming, same=True)

    def _nginx(self, *, http2: bool, streaming: bool) -> Contender:
        port = free_port(cfg.PROXY_IP)
        prefix = self.work / "nginx"
        (prefix / "tmp").mkdir(parents=True, exist_ok=True)
        conf = prefix / "nginx.conf"
        conf.write_text(cfg.nginx_proxy(prefix, port, self.upstream_port, self.pki.ca, streaming=streaming))
        proc = self.procs.start("nginx", ["nginx", "-p", str(prefix), "-c", str(conf)], core=self.proxy_core)
        return Contender("nginx", self._proxy_url(port), proc.pid)

    def _haproxy(self, *, http2: bool, streaming: bool) -> Contender:
        port = free_port(cfg.PROXY_IP)
        conf = self.work / "haproxy.cfg"
        conf.write_text(cfg.haproxy(port, self.upstream_port, self.pki.ca, http2=http2, streaming=streaming))
        proc = self.procs.start("haproxy", ["haproxy", "-db", "-f", str(conf)], core=self.proxy_core)
        return Contender("haproxy", self._proxy_url(port), proc.pid)

    def _direct(self, *, http2: bool, streaming: bool) -> Contender:
        return Contender("direct", self.upstream_url())

    def stop(self, contender: Contender) -> None:
        if contender.pid is not None:
            self.procs.stop(contender.name)


BINARIES = {
    "weir": None,
    "lean-envoy": None,
    "lean-envoy-same": None,
    "nginx": "nginx",
    "haproxy": "haproxy",
    "direct": None,
}
#: Contenders that are weir with levers (``dataplane_levers.py``) under a name of their own.
ALIASES = {
    # weir as it was before this benchmark's changes: access log through weir's Python log,
    # per-response-code statistics on.
    "weir-before": "weir+forward-access-log+dynamic-stats",
}
#: Programs to act as if they were not installed (``--without``), to try the fallbacks.
WITHOUT: set[str] = set()


def installed(binary: str) -> bool:
    return binary not in WITHOUT and shutil.which(binary) is not None


def available(names: tuple[str, ...] | list[str]) -> list[str]:
    """The contenders whose programs are installed; the others are named and skipped."""
    out = []
    for name in names:
        binary = BINARIES.get(name)
        if binary is not None and not installed(binary):
            say(f"skipping {name}: `{binary}` is not installed (see bench/README.md)")
            continue
        out.append(name)
    return out


# --------------------------------------------------------------------------
# Measuring
# --------------------------------------------------------------------------


@dataclass
class Sample:
    """One contender in one round."""

    contender: str
    round: int
    rps: float
    requests: int
    seconds: float
    p50_ms: float | None
    p99_ms: float | None
    errors: int
    #: Proxy CPU per request in µs: every process of the contender.
    cpu_us: float | None
    #: The same for the core process alone (Envoy, for weir).
    core_cpu_us: float | None = None
    tool: str = "wrk"
    extra: dict[str, Any] = field(default_factory=dict)


def ours_cpu(bench: Bench, contender: Contender) -> float:
    """CPU seconds used so far by the measurement's own processes.

    This process, its reaped children (wrk), the upstream and ``contender``:
    other contenders count as foreign (a weir that forwards access logs
    through Python may still be working through its backlog).
    """
    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime
    upstream = bench.procs.running.get("upstream")
    pids = contender.pids() + (process_tree(upstream.pid) if upstream is not None else [])
    return total + cpu_seconds(pids)


def foreign_load(bench: Bench, contender: Contender, seconds: float) -> float:
    """Cores used by other programs (see :func:`ours_cpu`) during the next ``seconds``."""
    busy_before, ours_before, start = core_busy(), ours_cpu(bench, contender), time.monotonic()
    time.sleep(seconds)
    busy_after, ours = core_busy(), ours_cpu(bench, contender) - ours_before
    busy_s = sum(busy_after[c][0] - busy_before[c][0] for c in busy_after) / CLK_TCK
    return max(0.0, (busy_s - ours) / (time.monotonic() - start))


#: Longest wait for a quiet machine before a measurement (seconds); 0 disables the wait.
QUIET_WAIT = {"max": 120.0}


def wait_quiet(bench: Bench, contender: Contender, threshold: float) -> None:
    """Wait (up to ``QUIET_WAIT['max']``) until other programs leave the cores idle for 2 s."""
    if QUIET_WAIT["max"] <= 0:
        return
    deadline = time.monotonic() + QUIET_WAIT["max"]
    quiet, waited, load_seen = 0, False, 0.0
    while quiet < 2 and time.monotonic() < deadline:
        load_seen = foreign_load(bench, contender, 1.0)
        if load_seen <= threshold:
            quiet += 1
        else:
            quiet = 0
            if not waited:
                say(f"  (other programs use {load_seen:.2f} cores: waiting up to {QUIET_WAIT['max']:.0f} s)")
                waited = True
    if quiet < 2:
        say(f"  (still {load_seen:.2f} cores used by other programs: measuring anyway)")


def measure_http(
    bench: Bench,
    contender: Contender,
    rnd: int,
    *,
    connections: int,
    seconds: float,
    warmup: float,
    use_wrk: bool,
    max_foreign: float = 0.1,
    retries: int = 2,
) -> Sample:
    """Measure; again (at most ``retries`` times) while other programs used more than ``max_foreign`` cores.

    The machine may be shared: "foreign" CPU is what the cores were busy with
    beyond the benchmark's own processes (kernel softirq work included, so it
    is rarely exactly 0). The sample with the least of it is kept.
    """
    best: Sample | None = None
    for _ in range(retries + 1):
        wait_quiet(bench, contender, max_foreign)
        sample = _measure_http(
            bench, contender, rnd, connections=connections, seconds=seconds, warmup=warmup, use_wrk=use_wrk
        )
        if best is None or sample.extra.get("foreign", 0) < best.extra.get("foreign", 0):
            best = sample
        if sample.extra.get("foreign", 0) <= max_foreign:
            break
        say(f"  ({contender.name}: other programs used {sample.extra['foreign']:.2f} cores; measuring again)")
    assert best is not None
    return best


def _measure_http(
    bench: Bench,
    contender: Contender,
    rnd: int,
    *,
    connections: int,
    seconds: float,
    warmup: float,
    use_wrk: bool,
) -> Sample:
    """Warm up, then run the load generator once while counting the contender's CPU."""
    if use_wrk:
        if warmup > 0:
            load.run_wrk(contender.url, connections=connections, seconds=warmup, core=bench.load_core)
        pids, core = contender.pids(), contender.core_pids()
        before, core_before, busy_before = cpu_seconds(pids), cpu_seconds(core), core_busy()
        split_before, opens_before = cpu_split(core or pids), tcp_active_opens()
        ours_before, start = ours_cpu(bench, contender), time.monotonic()
        result = load.run_wrk(contender.url, connections=connections, seconds=seconds, core=bench.load_core)
        after, core_after, busy_after = cpu_seconds(pids), cpu_seconds(core), core_busy()
        # Connections opened during the run beyond wrk's own: the proxy's to the upstream.
        result.extra["new_upstream_connections"] = tcp_active_opens() - opens_before - connections
        split_after = cpu_split(core or pids)
        elapsed, ours = time.monotonic() - start, ours_cpu(bench, contender) - ours_before
        result.extra["busy"] = busy_share(busy_before, busy_after)
        if pids:
            n = max(result.requests, 1)
            result.extra["user_us"] = (split_after[0] - split_before[0]) / n * 1e6
            result.extra["sys_us"] = (split_after[1] - split_before[1]) / n * 1e6
        busy_s = sum(busy_after[c][0] - busy_before[c][0] for c in busy_after) / CLK_TCK
        result.extra["foreign"] = max(0.0, (busy_s - ours) / elapsed)
    else:
        host, port, tls = _split(contender.url, bench)
        pids, core = contender.pids(), contender.core_pids()
        before, core_before = cpu_seconds(pids), cpu_seconds(core)
        result = bench.loop.run(
            load.python_load(host, port, connections=connections, seconds=seconds, tls=tls),
            timeout=seconds + 60,
        )
        after, core_after = cpu_seconds(pids), cpu_seconds(core)
    requests = max(result.requests, 1)
    return Sample(
        contender=contender.name,
        round=rnd,
        rps=result.rps,
        requests=result.requests,
        seconds=result.seconds,
        p50_ms=result.latency_ms.get(50),
        p99_ms=result.latency_ms.get(99),
        errors=result.errors,
        cpu_us=(after - before) / requests * 1e6 if pids else None,
        core_cpu_us=(core_after - core_before) / requests * 1e6 if core else None,
        tool=result.tool,
        extra=result.extra,
    )


def measure_together(
    bench: Bench, contenders: list[Contender], rnd: int, *, connections: int, seconds: float, warmup: float
) -> list[Sample]:
    """Load every contender at once, each with its own wrk, and count each one's CPU over the same window.

    The proxies share the proxy core, so whatever else runs on the machine
    disturbs them alike: the ratio of their CPU per request is much steadier
    than that of measurements taken one after the other.
    """
    urls = [c.url for c in contenders]
    if warmup > 0:
        load.run_wrk_together(urls, connections=connections, seconds=warmup, core=bench.load_core)
    trees = [c.pids() for c in contenders]
    pids = [c.core_pids() or tree for c, tree in zip(contenders, trees, strict=True)]
    before, trees_before = [cpu_split(p) for p in pids], [cpu_seconds(t) for t in trees]
    results = load.run_wrk_together(urls, connections=connections, seconds=seconds, core=bench.load_core)
    after, trees_after = [cpu_split(p) for p in pids], [cpu_seconds(t) for t in trees]
    samples = []
    for i, (contender, result, b, a) in enumerate(zip(contenders, results, before, after, strict=True)):
        n = max(result.requests, 1)
        core_cpu = (sum(a) - sum(b)) / n * 1e6
        samples.append(
            Sample(
                contender=contender.name,
                round=rnd,
                rps=result.rps,
                requests=result.requests,
                seconds=result.seconds,
                p50_ms=result.latency_ms.get(50),
                p99_ms=result.latency_ms.get(99),
                errors=result.errors,
                cpu_us=(trees_after[i] - trees_before[i]) / n * 1e6,
                core_cpu_us=core_cpu,
                extra={"user_us": (a[0] - b[0]) / n * 1e6, "sys_us": (a[1] - b[1]) / n * 1e6},
            )
        )
    return samples


def _split(url: str, bench: Bench) -> tuple[str, int, ssl.SSLContext | None]:
    scheme, rest = url.split("://", 1)
    hostport = rest.split("/", 1)[0]
    host, port = hostport.rsplit(":", 1)
    tls = None
    if scheme == "https":
        tls = bench.client_tls()
    return host, int(port), tls


@contextlib.contextmanager
def bench_env(args: argparse.Namespace) -> Iterator[Bench]:
    pin = can_pin() and not args.no_pin
    if not pin:
        say("not pinning processes (needs 2 CPUs and taskset): numbers are indicative only")
    bench = Bench(pin=pin, keep=args.keep)
    try:
        yield bench
    finally:
        bench.close()
