"""Control-plane scale benchmark: N HTTPRoutes, each with its own XBackend.

Usage::

    python bench/controlplane.py --shape path host gateways tls --n 100 1000 10000 --edits 50
    python bench/controlplane.py smoke --shape host   # N=100, 5 edits, a few seconds

For each shape (:mod:`controlplane_shapes`: ``path``, ``host``, ``gateways``,
``tls``) and each N it generates a folder of manifests (a GatewayClass, the
shape's Gateways, and one file per route holding an HTTPRoute and its
XBackend, which forwards to ``x<i>.bench.example``) and measures:

* **stages, in process** (a fresh Python process per N, so heaps do not mix):
  load + validate (``FilesProvider.load``), ``translate``, ``xds.build``, the
  controller's snapshot version hash, ADS serialisation (every resource packed
  into one ``DiscoveryResponse`` per type and serialised), a full collection of
  the garbage collector, and one single-route edit recomputed the way the
  controller does it today (reload, translate, build, hash, compare, pack);
* **end to end, through ``weir run`` in a subprocess**: start → every sampled
  route answered through Envoy (:data:`SAMPLE` routes spread over all of them,
  the last one included), with the milestones weir logs on the way; then
  ``--edits`` single-route edits (alternately a new path on the route, a new
  hostname in the ``host`` shape, and a new hostname on its XBackend, each
  written to the route's own file) → the new
  behaviour answered through Envoy, p50 / p99; RSS of weir and of Envoy (from
  ``/proc``) after start and after the edits.

Upstreams: nginx (Debian's ``nginx-light`` or ``nginx``) when installed, else
``weir.testkit.RecordingUpstream``; either answers ``<Host> <path>``, so a
probe can tell which XBackend served it. XBackend hostnames resolve through a
small DNS responder on loopback (every name under ``bench.example`` is
``127.0.0.1``; a wire-format responder in its own process, so that resolving
10,000 names at start costs the benchmark, not weir, little). The egress
guard stays on every cluster, denying only ``127.0.0.66/32`` as the tests do
(``--egress-denied-cidrs``), so loopback upstreams are allowed.

Envoy's access log lines travel through weir's logging (``weir.envoy.access``
at INFO); the benchmark runs the ``weir run`` command with that one logger at
WARNING so that its own probes do not load the process it measures.

Everything binds to 127.0.0.1 and every process started is stopped by its PID.
Results go to ``docs/performance.md`` (section "Control plane", or "Control
plane, SHAPE shape"), ``docs/img/controlplane[-SHAPE].png`` and
``bench/results/controlplane[-SHAPE].json`` unless ``--no-write`` (smoke never
writes).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import http.client
import json
import math
import os
import random
import re
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from controlplane_shapes import (  # noqa: E402  (a sibling module, found through the line above)
    SHAPES,
    ZONE,
    Pki,
    Probe,
    Prober,
    Shape,
    make_pki,
    route_file,
)

#: Routes probed at start (spread evenly; the first and the last are always in).
SAMPLE = 32
DENIED = "127.0.0.66/32"
MIB = 1024 * 1024
SECTION = "## Control plane"


def section(shape: Shape) -> str:
    """The heading of ``shape``'s section of docs/performance.md (``path``'s is the original one)."""
    return SECTION if shape.name == "path" else f"{SECTION}, {shape.name} shape"


def results_json(shape: Shape) -> Path:
    suffix = "" if shape.name == "path" else f"-{shape.name}"
    return REPO / "bench" / "results" / f"controlplane{suffix}.json"


def plot_png(shape: Shape) -> Path:
    suffix = "" if shape.name == "path" else f"-{shape.name}"
    return REPO / "docs" / "img" / f"controlplane{suffix}.png"


# ----------------------------------------------------------------------------- manifests


def write_atomically(path: Path, text: str) -> None:
    """Write as editors do: a hidden temporary file renamed over the target."""
    tmp = path.with_name("." + path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def sample_routes(n: int, count: int = SAMPLE) -> list[int]:
    if n <= count:
        return list(range(n))
    step = (n - 1) / (count - 1)
    return sorted({round(k * step) for k in range(count)} | {0, n - 1})


# ----------------------------------------------------------------------------- helper processes


def dns_answer(packet: bytes, zone: bytes, ttl: int = 3600) -> bytes | None:
    """A DNS reply: ``A 127.0.0.1`` for names in ``zone``, empty NOERROR for other types, else NXDOMAIN."""
    if len(packet) < 12:
        return None
    ident, flags, qdcount = struct.unpack("!HHH", packet[:6])
    if qdcount != 1 or flags & 0x8000:
        return None
    pos, labels = 12, []
    while True:
        if pos >= len(packet):
            return None
        size = packet[pos]
        if size == 0:
            pos += 1
            break
        if size & 0xC0:
            return None
        labels.append(packet[pos + 1 : pos + 1 + size])
        pos += 1 + size
    if pos + 4 > len(packet):
        return None
    qtype = struct.unpack("!H", packet[pos : pos + 2])[0]
    question = packet[12 : pos + 4]
    name = b".".join(labels).lower()
    known = name == zone or name.endswith(b"." + zone)
    answer = b""
    if known and qtype in (1, 255):  # A, ANY
        answer = b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, ttl, 4) + bytes((127, 0, 0, 1))
    # QR, AA, RD as asked, RA; NXDOMAIN outside the zone.
    reply_flags = 0x8400 | (flags & 0x0100) | 0x0080 | (0 if known else 3)
    header = struct.pack("!6H", ident, reply_flags, 1, 1 if answer else 0, 0, 0)
    return header + question + answer


def serve_dns(log_path: str | None = None) -> None:
    """``_dns [LOG]``: answer on a UDP port of 127.0.0.1 until SIGTERM; print the port first.

    With ``LOG``, the arrival time (``time.perf_counter``) and question of every
    query are written there on exit.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * MIB)
    sock.bind(("127.0.0.1", 0))
    seen: list[tuple[float, bytes]] = []

    def finish(*_: Any) -> None:
        if log_path:
            with open(log_path, "w") as fh:
                fh.writelines(f"{at:.6f} {packet[12:-4]!r}\n" for at, packet in seen)
        sys.exit(0)

    signal.signal(signal.SIGTERM, finish)
    print(sock.getsockname()[1], flush=True)
    zone = ZONE.encode()
    while True:
        packet, peer = sock.recvfrom(4096)
        if log_path:
            seen.append((time.perf_counter(), packet))
        reply = dns_answer(packet, zone)
        if reply is not None:
            sock.sendto(reply, peer)


def serve_recording_upstream(cert: str | None = None, key: str | None = None) -> None:
    """``_upstream [CERT KEY]``: weir.testkit.RecordingUpstream answering ``<Host> <path>`` (over TLS
    with ``CERT`` and ``KEY``); print the port first."""
    import asyncio
    import ssl

    from weir.testkit import RecordingUpstream, SeenRequest, UpstreamResponse

    async def main() -> None:
        upstream: RecordingUpstream

        def answer(seen: SeenRequest) -> UpstreamResponse:
            upstream.clear()  # nothing to keep; memory stays flat
            return UpstreamResponse(body=f"{seen.host} {seen.path}\n")

        context = None
        if cert and key:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(cert, key)
        upstream = RecordingUpstream("bench", handler=answer, http2=False, ssl_context=context)
        await upstream.start()
        print(upstream.port, flush=True)
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        await stop.wait()
        await upstream.stop()

    asyncio.run(main())


NGINX_CONF = """\
daemon off;
master_process on;
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {dir}/body;
  proxy_temp_path {dir}/proxy;
  fastcgi_temp_path {dir}/fastcgi;
  uwsgi_temp_path {dir}/uwsgi;
  scgi_temp_path {dir}/scgi;
  keepalive_requests 1000000;
  server {{
    listen 127.0.0.1:{port};
    location / {{ default_type text/plain; return 200 "$host $uri\\n"; }}
  }}
}}
"""


class Processes:
    """Child processes started by the benchmark; each is stopped by its PID."""

    def __init__(self) -> None:
        self._procs: list[tuple[str, subprocess.Popen[bytes]]] = []

    def add(self, name: str, proc: subprocess.Popen[bytes]) -> subprocess.Popen[bytes]:
        self._procs.append((name, proc))
        return proc

    def stop(self, proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout: float = 20) -> None:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, sig)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
                proc.wait(5)
        self._procs = [(n, p) for n, p in self._procs if p is not proc]

    def stop_all(self) -> None:
        for _, proc in reversed(list(self._procs)):
            self.stop(proc)


def _read_port(proc: subprocess.Popen[bytes], what: str) -> int:
    assert proc.stdout is not None
    line = proc.stdout.readline().decode().strip()
    if not line.isdigit():
        raise RuntimeError(f"{what} did not start (printed {line!r})")
    return int(line)


def start_upstream(procs: Processes, workdir: Path, port: int, tls: Pki | None = None) -> tuple[str, int]:
    """nginx if installed (on ``port``), else RecordingUpstream (on a port it picks); with ``tls``, a
    RecordingUpstream presenting ``tls``'s certificate for every name of the zone."""
    nginx = (
        None
        if tls
        else shutil.which("nginx")
        or next((p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if os.access(p, os.X_OK)), None)
    )
    if nginx:
        conf_dir = workdir / "nginx"
        conf_dir.mkdir()
        (conf_dir / "nginx.conf").write_text(NGINX_CONF.format(dir=conf_dir, port=port))
        proc = procs.add(
            "nginx",
            subprocess.Popen(
                [nginx, "-p", str(conf_dir), "-c", str(conf_dir / "nginx.conf")],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            ),
        )
        if wait_http(port, "/", timeout=10):
            return "nginx", port
        procs.stop(proc)
    cmd = [sys.executable, __file__, "_upstream"]
    if tls:
        cmd += [str(tls.upstream_cert), str(tls.upstream_key)]
    proc = procs.add("upstream", subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE))
    name = "RecordingUpstream over TLS" if tls else "RecordingUpstream"
    return name, _read_port(proc, "RecordingUpstream")


def start_dns(procs: Processes, log: Path | None = None) -> int:
    cmd = [sys.executable, __file__, "_dns"] + ([str(log)] if log else [])
    proc = procs.add("dns", subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE))
    return _read_port(proc, "DNS responder")


def free_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports on 127.0.0.1."""
    socks = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            socks.append(sock)
        return [s.getsockname()[1] for s in socks]
    finally:
        for sock in socks:
            sock.close()


# ----------------------------------------------------------------------------- HTTP probes


def wait_http(port: int, path: str, timeout: float) -> bool:
    prober, deadline = Prober(), time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if prober.get(Probe(port, path, "localhost", None, ""))[0]:
                return True
            time.sleep(0.02)
        return False
    finally:
        prober.close()


# ----------------------------------------------------------------------------- /proc


def rss_mib(pid: int | None) -> tuple[float, float]:
    """(VmRSS, VmHWM) of ``pid`` in MiB; zeros if it is gone."""
    if not pid:
        return 0.0, 0.0
    values = {"VmRSS": 0.0, "VmHWM": 0.0}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in values:
                values[key] = int(rest.split()[0]) / 1024
    return values["VmRSS"], values["VmHWM"]


def cpu_ticks(pids: Sequence[int]) -> int:
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total


def wait_idle(pids: Sequence[int], timeout: float = 60.0, window: float = 0.2) -> float:
    """Wait until ``pids`` use under 10% of a core over ``window`` seconds; the time waited."""
    started = time.monotonic()
    hz = os.sysconf("SC_CLK_TCK")
    before = cpu_ticks(pids)
    while time.monotonic() - started < timeout:
        time.sleep(window)
        now = cpu_ticks(pids)
        if (now - before) / hz < 0.1 * window:
            break
        before = now
    return time.monotonic() - started


# ----------------------------------------------------------------------------- stages in process


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100)."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def delta_changes(old: Any, new: Any) -> dict[str, tuple[list[str], list[str]]]:
    """Per type, what the ADS server sends an Envoy holding ``old`` when ``new`` is served:
    (names of resources whose version differs, names removed). Removals count for clusters
    and listeners only (Envoy drops unused route configurations and secrets itself)."""
    from weir.xds.snapshot import PUSH_ORDER, WILDCARD_TYPES

    out = {}
    for type_url in PUSH_ORDER:
        before, after = old.of_type(type_url), new.of_type(type_url)
        changed = [n for n, r in after.items() if (b := before.get(n)) is None or b.version != r.version]
        removed = [n for n in before if n not in after] if type_url in WILDCARD_TYPES else []
        out[type_url] = (changed, removed)
    return out


def delta_responses(snapshot: Any, changes: dict[str, tuple[list[str], list[str]]]) -> int:
    """Serialise the delta responses for ``changes`` as the ADS server builds them; their size."""
    from envoy.service.discovery.v3 import discovery_pb2

    size = 0
    for type_url, (changed, removed) in changes.items():
        if not changed and not removed:
            continue
        response = discovery_pb2.DeltaDiscoveryResponse(
            system_version_info=snapshot.version, type_url=type_url, nonce="1", removed_resources=removed
        )
        resources = snapshot.of_type(type_url)
        for name in changed:
            resource = resources[name]
            item = response.resources.add()
            item.name, item.version = name, resource.version
            item.resource.type_url, item.resource.value = resource.type_url, resource.value
        size += len(response.SerializeToString())
    return size


def measure_stages(folder: Path, edits: int, shape: Shape, upstream_port: int) -> dict[str, Any]:
    """``_stages``: time each stage of the forward path in this process (see the module doc)."""
    import resource

    from weir.controller import _keep_retiring
    from weir.loader import gc_paused
    from weir.providers.files.provider import FilesProvider
    from weir.translate import Settings
    from weir.translate.incremental import Translator
    from weir.xds.cache import BuildCache
    from weir.xds.snapshot import PUSH_ORDER, Snapshot, snapshot_version

    settings = Settings(dns_resolvers=(("127.0.0.1", 53),), egress_denied_cidrs=(DENIED,))
    out: dict[str, Any] = {}

    rss: dict[str, float] = {"imports": rss_mib(os.getpid())[0]}
    out["rss_after"] = rss

    def timed(name: str, fn: Any, *args: Any) -> Any:
        started = time.perf_counter()
        result = fn(*args)
        out[name] = time.perf_counter() - started
        rss[name] = rss_mib(os.getpid())[0]
        return result

    pauses: list[float] = []
    gc_started = [0.0]

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            gc_started[0] = time.perf_counter()
        elif info.get("generation") == 2:
            pauses.append(time.perf_counter() - gc_started[0])

    provider = FilesProvider([str(folder)])
    snapshot = timed("load", provider.load)
    out["objects"] = len(snapshot.resources)
    out["problems"] = len(snapshot.problems)
    # As the controller does: the collector paused while a snapshot is translated and built,
    # and what was made frozen afterwards (weir.controller.Controller._apply).
    with gc_paused():
        translator = Translator(settings)
        translation = timed("translate", translator.translate, snapshot.resources)
        builder = BuildCache()
        resources = timed("build", builder.build, translation.ir)
        version = timed("hash", snapshot_version, resources)
        served = Snapshot(version, resources)
        empty = Snapshot("", {})
        out["xds_bytes"] = timed("serialise", delta_responses, served, delta_changes(empty, served))
    timed("gc_freeze", gc.freeze)
    out["resources"] = {t.rsplit(".", 1)[-1]: len(resources[t]) for t in PUSH_ORDER}
    out["gc_objects"] = gc.get_freeze_count()
    # A full collection, frozen heap included (what weir.controller._refreeze_heap costs), and
    # one with the heap frozen (what the collector costs from then on).
    gc.unfreeze()
    timed("gc_full", gc.collect)
    gc.freeze()
    out["gc_frozen"] = gc.get_freeze_count()
    timed("gc_full_frozen", gc.collect)
    out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    # One edit at a time, recomputed as the controller does it.
    n = sum(1 for _ in (folder / "routes").iterdir())
    steps: dict[str, list[float]] = {
        k: [] for k in ("reload", "translate", "build", "hash", "compare", "serialise", "total")
    }
    sent: list[int] = []
    rng = random.Random(7)
    gc.callbacks.append(on_gc)
    try:
        for k in range(edits):
            i = rng.randrange(n)
            path = route_file(folder, i)
            original = path.read_text()
            kind_path = k % 2 == 0
            text = shape.route_yaml(
                i, n, upstream_port, version=2 if kind_path else 1, backend=0 if kind_path else k + 1
            )
            write_atomically(path, text)
            with gc_paused():
                t0 = time.perf_counter()
                provider._reload({os.path.abspath(path)})
                t1 = time.perf_counter()
                assert provider.snapshot is not None
                edited = translator.translate(provider.snapshot.resources)
                t2 = time.perf_counter()
                desired = builder.build(edited.ir)
                t3 = time.perf_counter()
                to_serve = _keep_retiring(served, desired)
                new = Snapshot(snapshot_version(to_serve), to_serve)
                t4 = time.perf_counter()
                changes = delta_changes(served, new)
                t5 = time.perf_counter()
                delta_responses(new, changes)
                t6 = time.perf_counter()
            gc.freeze()
            spans = (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5, t6 - t0)
            for name, value in zip(steps, spans, strict=True):
                steps[name].append(value)
            sent.append(sum(len(c) + len(r) for c, r in changes.values()))
            served = new
            write_atomically(path, original)
            provider._reload({os.path.abspath(path)})
    finally:
        gc.callbacks.remove(on_gc)
    out["edit"] = {name: statistics.median(values) for name, values in steps.items() if values}
    out["edit_resources_sent"] = statistics.median(sent) if sent else 0
    out["gc2_pauses"] = len(pauses)
    out["gc2_pause_max"] = max(pauses, default=0.0)
    out["build_cache"] = builder.stats()
    out["translator"] = dict(translator.counts)
    return out


def run_stages(
    folder: Path, edits: int, shape: Shape, upstream_port: int, profile: Path | None
) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "_stages", str(folder), "--edits", str(edits)]
    cmd += ["--shape", shape.name, "--upstream-port", str(upstream_port)]
    if profile is not None:
        cmd += ["--profile", str(profile)]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=1800)
    if result.returncode != 0:
        raise RuntimeError(f"stage measurement failed:\n{result.stderr[-4000:]}")
    data: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return data


# ----------------------------------------------------------------------------- end to end

WEIR_MAIN = (
    "import logging, sys; logging.getLogger('weir.envoy.access').setLevel(logging.WARNING); "
    "from weir.cli import main; sys.argv[0] = 'weir'; "
)

#: Milestones in weir's log (name, pattern); the first match after a mark counts.
MILESTONES = (
    ("loaded", re.compile(r"serving (\d+) objects from (\d+) files")),
    ("served", re.compile(r"serving configuration (\S+) .*translated in ([\d.]+) ms")),
    ("envoy_ready", re.compile(r"Envoy is ready")),
    ("programmed", re.compile(r"programmed (\d+) ms after it was served")),
    ("cache_written", re.compile(r"parse cache: wrote (\d+) files")),
)


class LogWatch:
    """Reads weir's stderr in a thread; remembers when each milestone line arrived."""

    def __init__(self, stream: Any, keep: Path) -> None:
        self._lock = threading.Lock()
        self.events: list[tuple[float, str, re.Match[str]]] = []
        self._keep = keep.open("w")
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: Any) -> None:
        for raw in iter(stream.readline, b""):
            now = time.perf_counter()
            line = raw.decode("utf-8", "replace")
            self._keep.write(f"{now:.6f} {line}")
            for name, pattern in MILESTONES:
                match = pattern.search(line)
                if match:
                    with self._lock:
                        self.events.append((now, name, match))
        self._keep.close()

    def last_error(self) -> str:
        """The last line weir logged at ERROR (Rich's layout removed), or ''."""
        self._thread.join(timeout=5)
        found = ""
        with contextlib.suppress(OSError), open(self._keep.name) as fh:
            for line in fh:
                text = line.split(" ", 1)[-1].strip()  # without the arrival time
                if text.startswith("error:"):  # the CLI's own last word
                    found = text
                elif " ERROR " in text:
                    found = text.split(" ERROR ", 1)[1].strip()
        return found

    def first(self, name: str, after: float) -> tuple[float, re.Match[str]] | None:
        with self._lock:
            for at, event, match in self.events:
                if event == name and at >= after:
                    return at, match
        return None


@dataclass(frozen=True)
class Config:
    """How one run measures (from the command line)."""

    shape: str = "path"
    edits: int = 50
    stage_edits: int = 5
    #: Keep manifests, weir's log and the DNS query log in the work folder.
    keep: bool = False
    envoy_log_level: str = "warning"
    #: Where to write cProfile output for the largest N (diagnosis only: it slows weir down).
    profile: Path | None = None


@dataclass
class EndToEnd:
    upstream: str = ""
    start_s: float = math.nan
    milestones: dict[str, float] = field(default_factory=dict)
    translate_ms_at_start: float = math.nan
    weir_cpu_start_s: float = math.nan
    #: When the first sampled route answered, and what the last probe that failed got.
    first_route_s: float = math.nan
    start_last_miss: str = ""
    weir_rss_start: float = 0.0
    envoy_rss_start: float = 0.0
    weir_rss_end: float = 0.0
    weir_hwm_end: float = 0.0
    envoy_rss_end: float = 0.0
    edits: list[dict[str, Any]] = field(default_factory=list)
    failed_edits: int = 0
    #: The same measures for a second ``weir run`` on the same folder after the first stopped
    #: (the edits made, the parse cache written): start_s, weir_cpu_start_s and milestones.
    restart: dict[str, float] = field(default_factory=dict)
    #: Why ``weir run`` did not serve every sampled route (then nothing after start was measured).
    error: str = ""
    attempts: int = 1


def weir_command(
    folder: Path, dns_port: int, admin_port: int, config: Config, profile: Path | None, cache_dir: Path
) -> list[str]:
    main = f"import cProfile; cProfile.run('main()', {str(profile)!r})" if profile else "main()"
    return [
        sys.executable,
        "-c",
        WEIR_MAIN + main,
        "run",
        "-f",
        str(folder),
        "--dns-resolver",
        f"127.0.0.1:{dns_port}",
        "--egress-denied-cidrs",
        DENIED,
        "--admin-address",
        f"127.0.0.1:{admin_port}",
        "--log-level",
        "info",
        "--envoy-log-level",
        config.envoy_log_level,
        "--cache-dir",
        str(cache_dir),
    ]


def run_end_to_end(
    folder: Path,
    n: int,
    shape: Shape,
    pki: Pki,
    listener_ports: Sequence[int],
    upstream_port: int,
    dns_port: int,
    config: Config,
    profile: Path | None,
    *,
    edits: int,
    cache_dir: Path,
    wait_for_cache: bool = True,
) -> EndToEnd:
    """Start ``weir run`` on ``folder``, time it until every sampled route answers, make ``edits``
    edits; then (``wait_for_cache``) wait for the parse cache to be written, which a restart on
    ``cache_dir`` reads. A restart that found the cache current writes none."""
    result = EndToEnd()
    admin_port = free_ports(1)[0]
    cmd = weir_command(folder, dns_port, admin_port, config, profile, cache_dir)
    env = {**os.environ, "COLUMNS": "400", "PYTHONUNBUFFERED": "1"}
    prober = Prober(pki.ca_pem)
    hz = os.sysconf("SC_CLK_TCK")
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env
    )
    log_path = folder.parent / f"weir-{n}.log"
    logs = LogWatch(proc.stderr, log_path)
    envoy_pid: int | None = None
    try:
        sample = sample_routes(n)
        pending = {i: shape.probe(i, n, listener_ports) for i in sample}
        deadline = t0 + max(120.0, n * 0.05)
        while pending:
            if proc.poll() is not None:
                result.error = (
                    f"weir exited with {proc.returncode} after {time.perf_counter() - t0:.1f} s: "
                    + (logs.last_error() or f"see {log_path}")
                )
                return result
            if time.perf_counter() > deadline:
                result.error = f"routes not served after {deadline - t0:.0f} s: {sorted(pending)[:10]}"
                return result
            for i, probe in list(pending.items()):
                status, body = prober.get(probe)
                if status != 200 or not body.startswith(probe.expect + " "):
                    result.start_last_miss = f"{status} {body.strip()[:60]!r}"
                    break  # not served yet: look again shortly
                if math.isnan(result.first_route_s):
                    result.first_route_s = time.perf_counter() - t0
                del pending[i]
            if pending:
                time.sleep(0.01)
        result.start_s = time.perf_counter() - t0
        result.weir_cpu_start_s = cpu_ticks([proc.pid]) / hz
        status = json.loads(admin_get(admin_port, "/status"))
        envoy_pid = status["dataPlane"]["envoyPid"]
        pids = [proc.pid] + ([envoy_pid] if envoy_pid else [])
        wait_idle(pids, timeout=120)
        for name, _ in MILESTONES:
            seen = logs.first(name, t0)
            if seen is not None:
                result.milestones[name] = seen[0] - t0
                if name == "served":
                    result.translate_ms_at_start = float(seen[1][2])
        result.weir_rss_start = rss_mib(proc.pid)[0]
        result.envoy_rss_start = rss_mib(envoy_pid)[0]

        rng = random.Random(11)
        targets = rng.sample(range(n), edits) if edits <= n else [rng.randrange(n) for _ in range(edits)]
        versions = dict.fromkeys(targets, 1)
        backends = dict.fromkeys(targets, 0)
        for k, i in enumerate(targets):
            kind = "path" if k % 2 == 0 else "backend"
            if kind == "path":
                versions[i] += 1
            else:
                backends[i] = k + 1
            probe = shape.probe(i, n, listener_ports, versions[i], backends[i])
            text = shape.route_yaml(i, n, upstream_port, version=versions[i], backend=backends[i])
            cpu_before = cpu_ticks([proc.pid])
            started = time.perf_counter()
            write_atomically(route_file(folder, i), text)
            answered = math.nan
            limit = started + max(30.0, n * 0.02)
            while time.perf_counter() < limit:
                if prober.answers(probe):
                    answered = time.perf_counter()
                    break
                time.sleep(0.002 if time.perf_counter() - started < 0.2 else 0.01)
            edit: dict[str, Any] = {
                "route": i,
                "kind": kind,
                "latency_ms": (answered - started) * 1000,
                "weir_cpu_ms": (cpu_ticks([proc.pid]) - cpu_before) / hz * 1000,
            }
            loaded, served = logs.first("loaded", started), logs.first("served", started)
            if loaded is not None:
                edit["reloaded_ms"] = (loaded[0] - started) * 1000
            if served is not None:
                edit["served_ms"] = (served[0] - started) * 1000
                edit["translate_ms"] = float(served[1][2])
            if math.isnan(answered):
                result.failed_edits += 1
            result.edits.append(edit)
            wait_idle(pids, timeout=120)
        result.weir_rss_end, result.weir_hwm_end = rss_mib(proc.pid)
        result.envoy_rss_end = rss_mib(envoy_pid)[0]
        limit = time.perf_counter() + 120
        while wait_for_cache and logs.first("cache_written", t0) is None and time.perf_counter() < limit:
            time.sleep(0.2)
        return result
    finally:
        prober.close()
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(5)
        if envoy_pid and pid_alive(envoy_pid):
            raise RuntimeError(f"Envoy {envoy_pid} outlived weir")


def admin_get(port: int, path: str) -> str:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        return conn.getresponse().read().decode()
    finally:
        conn.close()


def pid_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


# ----------------------------------------------------------------------------- one N


@dataclass
class Result:
    n: int
    stages: dict[str, Any]
    e2e: EndToEnd

    def edit_latencies(self, kind: str | None = None) -> list[float]:
        return [
            e["latency_ms"]
            for e in self.e2e.edits
            if not math.isnan(e["latency_ms"]) and (kind is None or e["kind"] == kind)
        ]


def run_one(n: int, config: Config, workdir: Path, profile: bool) -> Result:
    procs = Processes()
    shape = SHAPES[config.shape]
    folder = workdir / f"n{n}"
    pki = make_pki(workdir / f"pki-{n}")
    try:
        upstream_name, upstream_port = start_upstream(
            procs, workdir, free_ports(1)[0], pki if shape.tls_upstream else None
        )
        dns_port = start_dns(procs, workdir / f"dns-{n}.log" if config.keep else None)
        listener_ports = free_ports(shape.ports)
        shape.generate(folder, n, listener_ports, upstream_port, pki)
        stage_profile = weir_profile = None
        if profile and config.profile is not None:
            config.profile.mkdir(parents=True, exist_ok=True)
            stage_profile = config.profile / f"stages-{shape.name}-{n}.prof"
            weir_profile = config.profile / f"weir-run-{shape.name}-{n}.prof"
        print(f"N={n}: stages in process...", file=sys.stderr, flush=True)
        stages = run_stages(folder, config.stage_edits, shape, upstream_port, stage_profile)
        print(f"N={n}: weir run, {config.edits} edits...", file=sys.stderr, flush=True)
        args = (folder, n, shape, pki, listener_ports, upstream_port, dns_port, config)
        for attempt in range(1, 3):
            cache_dir = workdir / f"cache-{n}-{attempt}"
            e2e = run_end_to_end(*args, weir_profile, edits=config.edits, cache_dir=cache_dir)
            e2e.upstream, e2e.attempts = upstream_name, attempt
            if not e2e.error:
                break
            print(f"N={n}: attempt {attempt} failed: {e2e.error}", file=sys.stderr, flush=True)
        if not e2e.error:
            print(f"N={n}: weir run again (restart, parse cache)...", file=sys.stderr, flush=True)
            # The edited routes as they were, so that the start's probes hold: files changed while
            # weir was down, parsed again (the rest comes from the cache).
            for i in {edit["route"] for edit in e2e.edits}:
                write_atomically(route_file(folder, i), shape.route_yaml(i, n, upstream_port))
            again = run_end_to_end(*args, None, edits=0, cache_dir=cache_dir, wait_for_cache=False)
            if again.error:
                print(f"N={n}: the restart failed: {again.error}", file=sys.stderr, flush=True)
            e2e.restart = {
                "start_s": math.nan if again.error else again.start_s,
                "weir_cpu_start_s": again.weir_cpu_start_s,
                **{f"milestone_{k}": v for k, v in again.milestones.items()},
            }
        return Result(n, stages, e2e)
    finally:
        procs.stop_all()
        shutil.rmtree(workdir / "nginx", ignore_errors=True)
        shutil.rmtree(workdir / f"pki-{n}", ignore_errors=True)
        if not config.keep:
            shutil.rmtree(folder, ignore_errors=True)


# ----------------------------------------------------------------------------- report


def fmt_s(seconds: float) -> str:
    if math.isnan(seconds):
        return "-"
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"


def fmt_ms(ms: float) -> str:
    return "-" if math.isnan(ms) else (f"{ms:.0f} ms" if ms < 1000 else f"{ms / 1000:.2f} s")


def growth(results: Sequence[Result], value: Any) -> str:
    """Exponent k of cost ∝ N^k between the two largest N (1.0 is linear)."""
    points = [(r.n, value(r)) for r in results if value(r) and not math.isnan(value(r))]
    if len(points) < 2:
        return "-"
    (n1, v1), (n2, v2) = points[-2], points[-1]
    return f"{math.log(v2 / v1) / math.log(n2 / n1):.2f}"


def rows(results: Sequence[Result]) -> list[tuple[str, list[str], str]]:
    """(metric, one cell per N, growth exponent between the two largest N)."""

    def stage(name: str) -> Any:
        return lambda r: r.stages[name]

    def edit_stage(name: str) -> Any:
        return lambda r: r.stages["edit"].get(name, math.nan)

    def milestone(name: str) -> Any:
        return lambda r: r.e2e.milestones.get(name, math.nan)

    def p(q: float, kind: str | None = None) -> Any:
        return lambda r: percentile(r.edit_latencies(kind), q) / 1000

    def restart(name: str) -> Any:
        return lambda r: r.e2e.restart.get(name, math.nan)

    spec: list[tuple[str, Any, str]] = [
        ("load + validate (in process)", stage("load"), "s"),
        ("translate (in process)", stage("translate"), "s"),
        ("xDS build (in process)", stage("build"), "s"),
        ("snapshot hash (in process)", stage("hash"), "s"),
        ("ADS serialisation, all types (in process)", stage("serialise"), "s"),
        ("full GC collection (in process)", stage("gc_full"), "s"),
        (
            "full GC collection, heap frozen (in process)",
            lambda r: r.stages.get("gc_full_frozen", math.nan),
            "s",
        ),
        ("one edit, recomputed as the controller does (in process)", edit_stage("total"), "s"),
        ("one edit: xDS build, cached (in process)", edit_stage("build"), "s"),
        (
            "one edit: resources sent, delta (in process)",
            lambda r: r.stages.get("edit_resources_sent", 0),
            "n",
        ),
        (
            "one edit: longest full GC pause (in process)",
            lambda r: r.stages.get("gc2_pause_max", math.nan),
            "s",
        ),
        ("weir run: files loaded", milestone("loaded"), "s"),
        ("weir run: first snapshot served", milestone("served"), "s"),
        ("weir run: Envoy ready", milestone("envoy_ready"), "s"),
        ("weir run: Programmed", milestone("programmed"), "s"),
        ("weir run: first sampled route served", lambda r: r.e2e.first_route_s, "s"),
        ("**start → every sampled route served**", lambda r: r.e2e.start_s, "s"),
        ("weir CPU time until then", lambda r: r.e2e.weir_cpu_start_s, "s"),
        ("restart: files loaded (parse cache)", restart("milestone_loaded"), "s"),
        ("restart: first snapshot served", restart("milestone_served"), "s"),
        ("**restart → every sampled route served**", restart("start_s"), "s"),
        ("weir CPU time until then (restart)", restart("weir_cpu_start_s"), "s"),
        ("**edit → served, p50**", p(50), "s"),
        ("**edit → served, p99**", p(99), "s"),
        ("edit → served, p50, path edits", p(50, "path"), "s"),
        ("edit → served, p50, backend edits", p(50, "backend"), "s"),
        ("weir RSS after start", lambda r: r.e2e.weir_rss_start, "MiB"),
        ("**weir RSS after edits**", lambda r: r.e2e.weir_rss_end, "MiB"),
        ("weir peak RSS (VmHWM)", lambda r: r.e2e.weir_hwm_end, "MiB"),
        ("Envoy RSS after start", lambda r: r.e2e.envoy_rss_start, "MiB"),
        ("Envoy RSS after edits", lambda r: r.e2e.envoy_rss_end, "MiB"),
    ]
    out = []
    for label, value, unit in spec:
        cells = []
        for r in results:
            v = value(r)
            if unit == "MiB":
                cells.append(f"{v:.0f} MiB" if v else "-")
            elif unit == "n":
                cells.append(f"{v:,.0f}")
            else:
                cells.append(fmt_s(v))
        out.append((label, cells, growth(results, value)))
    return out


def table(results: Sequence[Result]) -> str:
    head = "| | " + " | ".join(f"N = {r.n:,}" for r in results) + " | growth k |"
    sep = "|---|" + "---:|" * len(results) + "---:|"
    lines = [head, sep]
    lines += [f"| {label} | " + " | ".join(cells) + f" | {k} |" for label, cells, k in rows(results)]
    return "\n".join(lines)


def targets(results: Sequence[Result]) -> str:
    big = max(results, key=lambda r: r.n)
    p99 = percentile(big.edit_latencies(), 99)
    if big.e2e.error:
        return f"Not met at N = {big.n:,}: `weir run` did not serve every sampled route ({big.e2e.error})."
    lines = [
        f"| target at N = {big.n:,} | goal | measured | gap |",
        "|---|---:|---:|---:|",
        f"| start → serving every route | ≤ 3 s | {fmt_s(big.e2e.start_s)} | {big.e2e.start_s / 3:.1f}x |",
        f"| single-route edit served, p99 | ≤ 100 ms | {fmt_ms(p99)} | {p99 / 100:.1f}x |",
        f"| control-plane RSS | ≤ 250 MiB | {big.e2e.weir_rss_end:.0f} MiB | "
        f"{big.e2e.weir_rss_end / 250:.1f}x |",
    ]
    return "\n".join(lines)


def edit_breakdown(results: Sequence[Result]) -> str:
    lines = [
        "| N | files reloaded (p50) | weir compute, logged (p50) | snapshot handed to ADS (p50) "
        "| served through Envoy (p50) | failed |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:

        def med(key: str, r: Result = r) -> float:
            values = [e[key] for e in r.e2e.edits if key in e and not math.isnan(e[key])]
            return statistics.median(values) if values else math.nan

        lines.append(
            f"| {r.n:,} | {fmt_ms(med('reloaded_ms'))} | {fmt_ms(med('translate_ms'))} | "
            f"{fmt_ms(med('served_ms'))} | {fmt_ms(med('latency_ms'))} | {r.e2e.failed_edits} |"
        )
    return "\n".join(lines)


def in_process_edit(results: Sequence[Result]) -> str:
    names = ("reload", "translate", "build", "hash", "compare", "serialise", "total")
    lines = ["| N | " + " | ".join(names) + " |", "|---:|" + "---:|" * len(names)]
    for r in results:
        lines.append(f"| {r.n:,} | " + " | ".join(fmt_s(r.stages["edit"][k]) for k in names) + " |")
    return "\n".join(lines)


def run_info(edits: int, load: tuple[float, float]) -> dict[str, Any]:
    """What a report says about the run besides its results."""
    return {
        "date": time.strftime("%Y-%m-%d"),
        "cores": os.cpu_count(),
        "python": sys.version.split()[0],
        "edits": edits,
        "load_average": list(load),
    }


def report(results: Sequence[Result], info: dict[str, Any]) -> str:
    r0 = results[0]
    shape = SHAPES[info.get("shape", "path")]
    load = info.get("load_average") or [math.nan, math.nan]
    saved = results_json(shape).relative_to(REPO)
    moved = "hostname" if shape.name == "host" else "path"
    extra = (before_after(results) + envoy_load()) if shape.name == "path" else ""
    return f"""\
Measured by `python bench/controlplane.py --shape {shape.name} --n {" ".join(str(r.n) for r in results)} \
--edits {info["edits"]}` ({info["date"]}, {info["cores"]} cores, Python {info["python"]}, upstream:
{r0.e2e.upstream}; load average {load[0]:.1f} before the run, {load[1]:.1f} after: other work
shared the machine, so single timings can be off by a factor of two; the JSON of the run is
`{saved}`, and `python bench/controlplane.py report {saved}` renders this section and the plot
again). Workload: {shape.describe}.
Edits alternate a new {moved} on the route and a new hostname on its XBackend, each written to the
route's file; latency runs from the file's rename to the first answer from the new behaviour
through Envoy (polled every 2 ms, then 10 ms after 200 ms). "growth k" is the exponent of
cost ∝ N^k between the two largest N: 1.0 is linear.

{table(results)}

Against the targets:

{targets(results)}

Where an edit's time goes in `weir run` (medians; times from the file's rename to the
moment weir logged it):

{edit_breakdown(results)}

One edit recomputed in process the way the controller does it (incremental translation, build cache; medians):

{in_process_edit(results)}

{extra}{failures(results)}![time and memory vs N]({plot_png(shape).relative_to(REPO / "docs")})
"""


#: What the previous measurement found (hand-copied from the report it made: see its "source").
BEFORE = REPO / "bench" / "results" / "controlplane-before.json"
#: ``bench/envoy_load.py``'s results, when it was run with ``--json`` to this file.
ENVOY_LOAD = REPO / "bench" / "results" / "envoy-load.json"


def before_after(results: Sequence[Result]) -> str:
    """Key rows of this run next to those of :data:`BEFORE`, for the N both measured."""
    if not BEFORE.exists():
        return ""
    before = json.loads(BEFORE.read_text())
    now: dict[str, Any] = {
        "start → every sampled route served": lambda r: r.e2e.start_s,
        "edit → served, p50": lambda r: percentile(r.edit_latencies(), 50) / 1000,
        "edit → served, p99": lambda r: percentile(r.edit_latencies(), 99) / 1000,
        "xDS build (in process)": lambda r: r.stages["build"],
        "one edit, recomputed as the controller does (in process)": lambda r: r.stages["edit"]["total"],
        "weir RSS after edits": lambda r: r.e2e.weir_rss_end,
        "Envoy RSS after edits": lambda r: r.e2e.envoy_rss_end,
    }
    ns = [n for n in before["n"] if any(r.n == n for r in results)]
    if not ns:
        return ""
    by_n = {r.n: r for r in results}
    lines = [
        "| before → after | " + " | ".join(f"N = {n:,}" for n in ns) + " |",
        "|---|" + "---:|" * len(ns),
    ]
    for label, values in before["rows"].items():
        if label not in now:
            continue
        cells = []
        for n in ns:
            old, new = values[before["n"].index(n)], now[label](by_n[n])
            if "RSS" in label:
                cells.append(f"{old:.0f} → {new:.0f} MiB")
            else:
                cells.append(f"{fmt_s(old)} → {fmt_s(new)}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return f"Before and after ({before['source']}):\n\n" + "\n".join(lines) + "\n\n"


def envoy_load() -> str:
    """``bench/envoy_load.py``'s table, if its results are in :data:`ENVOY_LOAD`."""
    if not ENVOY_LOAD.exists():
        return ""
    data = json.loads(ENVOY_LOAD.read_text())
    lines = [
        "| variant | ready (all ACKed) | last route served | Envoy RSS |",
        "|---|---:|---:|---:|",
    ]
    for variant, runs in data["results"].items():

        def cell(key: str, unit: str = "s", runs: list[dict[str, float]] = runs) -> str:
            values = [r[key] for r in runs]
            mid, low, high = statistics.median(values), min(values), max(values)
            if unit == "MiB":
                return f"{mid:.0f} ({low:.0f}-{high:.0f}) MiB"
            return f"{mid:.2f} ({low:.2f}-{high:.2f}) s"

        lines.append(f"| {variant} | {cell('acked_s')} | {cell('served_s')} | {cell('rss_mib', 'MiB')} |")
    variants = ",".join(data["results"])
    return (
        f"Envoy alone loading this configuration for N = {data['n']:,}, per variant "
        f"(`python bench/envoy_load.py --n {data['n']} --rounds {data.get('rounds', '?')} "
        f"--variants {variants}`; median (min-max); `weir` is weir's bootstrap and configuration, "
        "`kept-eager` to `no-stats` differ from it in their stats settings only, `weir-upstream-filters` "
        "and `weir-static` are experiments on the configuration; see the script):\n\n"
        + "\n".join(lines)
        + "\n\n"
    )


def failures(results: Sequence[Result]) -> str:
    notes = [
        f"- N = {r.n:,}: {'failed' if r.e2e.error else 'succeeded'} on attempt {r.e2e.attempts}"
        + (f": {r.e2e.error}" if r.e2e.error else " (earlier attempts failed to start)")
        for r in results
        if r.e2e.error or r.e2e.attempts > 1
    ]
    text = ("`weir run` start failures:\n\n" + "\n".join(notes) + "\n\n") if notes else ""
    misses = [f"N = {r.n:,}: `{r.e2e.start_last_miss}`" for r in results if r.e2e.start_last_miss]
    if misses:
        text += "Last failed probe before every sampled route answered: " + "; ".join(misses) + ".\n\n"
    return text


def plot(results: Sequence[Result], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ns = [r.n for r in results]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    series = {
        "load + validate": [r.stages["load"] for r in results],
        "translate": [r.stages["translate"] for r in results],
        "xDS build": [r.stages["build"] for r in results],
        "start → all served": [r.e2e.start_s for r in results],
        "edit → served p50": [percentile(r.edit_latencies(), 50) / 1000 for r in results],
        "edit → served p99": [percentile(r.edit_latencies(), 99) / 1000 for r in results],
    }
    for label, values in series.items():
        left.plot(ns, values, marker="o", label=label)
    anchor = results[-1].stages["load"]
    ref = [anchor * n / ns[-1] for n in ns]
    left.plot(ns, ref, linestyle=":", color="grey", label="∝ N (linear), through load at the largest N")
    left.axhline(3, color="red", linestyle="--", linewidth=0.8, label="start target 3 s")
    left.axhline(0.1, color="darkred", linestyle="--", linewidth=0.8, label="edit target 100 ms")
    left.set_xscale("log")
    left.set_yscale("log")
    left.set_xlabel("HTTPRoutes (each with its own XBackend)")
    left.set_ylabel("seconds")
    left.set_title("Control-plane time vs N")
    left.legend(fontsize=7)
    right.plot(ns, [r.e2e.weir_rss_end for r in results], marker="o", label="weir RSS")
    right.plot(ns, [r.e2e.weir_hwm_end for r in results], marker="o", label="weir peak RSS")
    right.plot(ns, [r.e2e.envoy_rss_end for r in results], marker="o", label="Envoy RSS")
    right.axhline(250, color="red", linestyle="--", linewidth=0.8, label="weir target 250 MiB")
    right.set_xscale("log")
    right.set_yscale("log")
    right.set_xlabel("HTTPRoutes")
    right.set_ylabel("MiB")
    right.set_title("Memory vs N (after the edits)")
    right.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_docs(results: Sequence[Result], body: str, shape: Shape) -> None:
    write_section(REPO / "docs" / "performance.md", body, section(shape))
    plot(results, plot_png(shape))
    print(f"wrote docs/performance.md ({section(shape)[3:]}) and {plot_png(shape)}", file=sys.stderr)


def render(path: Path, *, write: bool) -> int:
    """``report FILE``: the report (and, with ``write``, the docs section and plot) of a saved run."""
    raw = json.loads(path.read_text())
    if isinstance(raw, list):  # written before runs recorded their circumstances
        raw = {"date": "?", "cores": "?", "python": "?", "edits": "?", "results": raw}
    fields = {f.name for f in dataclasses.fields(EndToEnd)}
    results = [
        Result(item["n"], item["stages"], EndToEnd(**{k: v for k, v in item.items() if k in fields}))
        for item in raw["results"]
    ]
    body = report(results, raw)
    print(body)
    if write:
        write_docs(results, body, SHAPES[raw.get("shape", "path")])
    return 0


def write_section(doc: Path, body: str, heading: str = SECTION) -> None:
    """Replace the section ``heading`` of ``doc`` (create the file if needed), nothing else."""
    if doc.exists():
        text = doc.read_text()
    else:
        text = "# Performance\n\n## Data path\n\nSee `bench/dataplane.py`.\n\n"
    section = f"{heading}\n\n{body.rstrip()}\n"
    start = text.find(heading + "\n")
    if start < 0:
        text = text.rstrip() + "\n\n" + section
    else:
        following = re.search(r"^## ", text[start + len(heading) :], flags=re.MULTILINE)
        end = start + len(heading) + following.start() if following else len(text)
        text = text[:start] + section + ("\n" + text[end:] if following else "")
    doc.write_text(text)


# ----------------------------------------------------------------------------- main


def _stop_on_sigterm(*_: object) -> None:
    """SIGTERM unwinds like Ctrl-C, so that every ``finally`` stops the processes it started
    (weir, whose Envoy outlives a killed weir; the upstream; the DNS responder)."""
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    if args[:1] == ["_dns"]:
        serve_dns(args[1] if len(args) > 1 else None)
        return 0
    if args[:1] == ["_upstream"]:
        serve_recording_upstream(*args[1:3])
        return 0
    if args[:1] == ["_stages"]:
        sub = argparse.ArgumentParser()
        sub.add_argument("folder", type=Path)
        sub.add_argument("--edits", type=int, default=5)
        sub.add_argument("--profile", type=Path)
        sub.add_argument("--shape", choices=SHAPES, default="path")
        sub.add_argument("--upstream-port", type=int, required=True)
        opts = sub.parse_args(args[1:])
        stage_args = (opts.folder, opts.edits, SHAPES[opts.shape], opts.upstream_port)
        if opts.profile is not None:
            import cProfile

            profiler = cProfile.Profile()
            data = profiler.runcall(measure_stages, *stage_args)
            profiler.dump_stats(opts.profile)
        else:
            data = measure_stages(*stage_args)
        print(json.dumps(data))
        return 0

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", nargs="?", choices=("run", "smoke", "report"), default="run")
    parser.add_argument("results", nargs="?", type=Path, help="report: the JSON a run wrote")
    parser.add_argument(
        "--shape",
        nargs="+",
        choices=SHAPES,
        default=["path"],
        help="workload shapes, each measured and reported on its own (see bench/controlplane_shapes.py)",
    )
    parser.add_argument("--n", type=int, nargs="+", default=[100, 1000, 10000], help="route counts")
    parser.add_argument("--edits", type=int, default=50, help="single-route edits through weir run")
    parser.add_argument("--stage-edits", type=int, default=5, help="edits recomputed in process")
    parser.add_argument("--no-write", action="store_true", help="do not update docs/")
    parser.add_argument(
        "--json",
        type=Path,
        help="also write raw results here (default, when writing docs: bench/results/controlplane.json)",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="cProfile the stages and weir run of the largest N into DIR (slows weir: diagnosis only)",
    )
    parser.add_argument("--keep", action="store_true", help="keep manifests, weir's logs and DNS queries")
    parser.add_argument("--envoy-log-level", default="warning", help="passed to weir run")
    opts = parser.parse_args(args)
    if opts.mode == "report":
        if opts.results is None:
            parser.error("report needs the JSON file a run wrote")
        return render(opts.results, write=not opts.no_write)
    if opts.mode == "smoke":
        opts.n, opts.edits, opts.stage_edits, opts.no_write = [100], 5, 2, True
    if opts.profile is not None:
        opts.no_write = True  # profiled numbers are not the ones to record
    failed = 0
    for shape in opts.shape:
        config = Config(
            shape=shape,
            edits=opts.edits,
            stage_edits=opts.stage_edits,
            keep=opts.keep,
            envoy_log_level=opts.envoy_log_level,
            profile=opts.profile,
        )
        failed += run_shape(config, sorted(opts.n), write=not opts.no_write, json_path=opts.json)
    if failed:
        print(f"{failed} edit(s) were not served in time", file=sys.stderr)
    return 1 if failed else 0


def run_shape(config: Config, ns: Sequence[int], *, write: bool, json_path: Path | None) -> int:
    """Measure one shape at each N, print (and with ``write`` record) its report; failed edits."""
    shape = SHAPES[config.shape]
    workdir = Path(tempfile.mkdtemp(prefix=f"weir-bench-cp-{shape.name}-"))
    results: list[Result] = []
    load_before = os.getloadavg()[0]
    try:
        for n in ns:
            print(f"shape {shape.name}:", file=sys.stderr, end=" ", flush=True)
            results.append(run_one(n, config, workdir, profile=n == max(ns)))
    finally:
        if config.keep:
            print(f"kept {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"load average: {load_before:.2f} before, {os.getloadavg()[0]:.2f} after", file=sys.stderr)
    info = {**run_info(config.edits, (load_before, os.getloadavg()[0])), "shape": shape.name}
    body = report(results, info)
    print(body)
    if json_path is None and write:
        json_path = results_json(shape)
    elif json_path is not None and shape.name != "path":
        json_path = json_path.with_name(f"{json_path.stem}-{shape.name}{json_path.suffix}")
    if json_path is not None:
        raw = {**info, "results": [{**asdict(r.e2e), "n": r.n, "stages": r.stages} for r in results]}
        json_path.write_text(json.dumps(raw, indent=1))
    if write:
        write_docs(results, body, shape)
    return sum(r.e2e.failed_edits for r in results)


if __name__ == "__main__":
    sys.exit(main())
