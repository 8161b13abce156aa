"""Load for the data-path benchmark: wrk (or a small Python fallback), and SSE streams.

- :func:`run_wrk` runs ``wrk --latency`` and parses its report.
- :func:`python_load` is a keep-alive HTTP/1.1 load generator in asyncio, for
  machines without wrk (the CI smoke run). It is much slower than wrk: its
  numbers show that the path works, not how fast it is.
- :func:`sse_upstream` and :func:`sse_clients` are the two ends of the
  streaming scenario (run as separate processes by ``dataplane.py``): an
  MCP-style server that keeps ``text/event-stream`` responses open and sends
  each stream an event stamped with ``CLOCK_MONOTONIC`` (shared by every
  process on the machine), and clients that open the streams and measure how
  late each event arrives.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import re
import ssl
import statistics
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any

WRK = "wrk"


@dataclass
class LoadResult:
    """One measured run of a load generator."""

    requests: int
    seconds: float
    #: Latency percentiles in milliseconds (keys 50, 99, ...).
    latency_ms: dict[int, float]
    errors: int = 0
    tool: str = "wrk"
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0


_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1000.0, "m": 60_000.0}


def _ms(text: str) -> float:
    match = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text)
    if not match:
        raise ValueError(f"unexpected wrk latency {text!r}")
    return float(match.group(1)) * _UNITS[match.group(2)]


def parse_wrk(output: str) -> LoadResult:
    """Requests, duration, errors and the latency distribution of ``wrk --latency``'s report."""
    done = re.search(r"(\d+) requests in ([\d.]+)(us|ms|s|m)", output)
    if not done:
        raise ValueError(f"no request count in wrk's output:\n{output}")
    latency = {
        int(pct): _ms(value) for pct, value in re.findall(r"^\s+(\d+)%\s+([\d.]+\w+)\s*$", output, re.M)
    }
    errors = 0
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    if non2xx:
        errors += int(non2xx.group(1))
    sockets = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output)
    if sockets:
        errors += sum(int(n) for n in sockets.groups())
    seconds = _ms(done.group(2) + done.group(3)) / 1000.0
    return LoadResult(int(done.group(1)), seconds, latency, errors, "wrk")


def run_wrk(url: str, *, connections: int, seconds: float, core: int | None) -> LoadResult:
    """``wrk -t1 -cN -dS --latency URL``, pinned to ``core``."""
    command = [WRK, "-t1", f"-c{connections}", f"-d{max(1, round(seconds))}s", "--latency", url]
    if core is not None:
        command = ["taskset", "-c", str(core), *command]
    done = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 60, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"wrk failed ({done.returncode}): {done.stderr or done.stdout}")
    return parse_wrk(done.stdout)


def run_wrk_together(
    urls: list[str], *, connections: int, seconds: float, core: int | None
) -> list[LoadResult]:
    """One wrk per URL, all at once (the lever study's simultaneous A/B)."""
    procs = []
    for url in urls:
        command = [WRK, "-t1", f"-c{connections}", f"-d{max(1, round(seconds))}s", "--latency", url]
        if core is not None:
            command = ["taskset", "-c", str(core), *command]
        procs.append(subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=seconds + 60)
        if proc.returncode != 0:
            raise RuntimeError(f"wrk failed ({proc.returncode}): {err or out}")
        results.append(parse_wrk(out))
    return results


# --------------------------------------------------------------------------
# Python fallback load generator
# --------------------------------------------------------------------------


async def _read_response(reader: asyncio.StreamReader) -> int:
    """Read one HTTP/1.1 response (Content-Length or chunked); return its status."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    if "content-length" in headers:
        await reader.readexactly(int(headers["content-length"]))
    elif headers.get("transfer-encoding", "").lower() == "chunked":
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            await reader.readexactly(size + 2)
            if size == 0:
                break
    return status


async def python_load(
    host: str, port: int, *, connections: int, seconds: float, tls: ssl.SSLContext | None = None
) -> LoadResult:
    """Keep-alive HTTP/1.1 GETs of ``/`` on ``connections`` connections for ``seconds``."""
    latencies: list[float] = []
    errors = 0
    deadline = time.monotonic() + seconds
    request = f"GET /v1/bench HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode()

    async def one_connection() -> None:
        nonlocal errors
        reader, writer = await asyncio.open_connection(host, port, ssl=tls)
        try:
            while time.monotonic() < deadline:
                start = time.perf_counter()
                writer.write(request)
                status = await _read_response(reader)
                latencies.append((time.perf_counter() - start) * 1000.0)
                if status != 200:
                    errors += 1
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    start = time.monotonic()
    results = await asyncio.gather(*(one_connection() for _ in range(connections)), return_exceptions=True)
    elapsed = time.monotonic() - start
    errors += sum(1 for r in results if isinstance(r, BaseException))
    return LoadResult(len(latencies), elapsed, percentiles(latencies), errors, "python")


def percentiles(values: list[float], points: tuple[int, ...] = (50, 90, 99)) -> dict[int, float]:
    if not values:
        return {}
    ordered = sorted(values)
    return {p: ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))] for p in points}


# --------------------------------------------------------------------------
# Streaming: an MCP-style SSE upstream and its clients
# --------------------------------------------------------------------------


async def sse_upstream(host: str, port: int, cert: str, key: str, interval: float) -> None:
    """Answer every request with a ``text/event-stream`` that gets an event every ``interval`` s.

    Each event is ``data: {"t": <CLOCK_MONOTONIC ns>, "seq": n}``, sent in its
    own HTTP/1.1 chunk; streams start at a random phase so events are spread.
    TLS with ALPN ``http/1.1``.
    """
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    ctx.set_alpn_protocols(["http/1.1"])

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
                b"transfer-encoding: chunked\r\n\r\n"
            )
            await asyncio.sleep(random.random() * interval)
            seq = 0
            while True:
                event = f'data: {{"t": {time.monotonic_ns()}, "seq": {seq}}}\n\n'.encode()
                writer.write(b"%x\r\n%s\r\n" % (len(event), event))
                await writer.drain()
                seq += 1
                await asyncio.sleep(interval)
        except (OSError, asyncio.IncompleteReadError, ssl.SSLError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, host, port, ssl=ctx, backlog=4096)
    async with server:
        await server.serve_forever()


_EVENT = re.compile(rb'data: \{"t": (\d+), "seq": (\d+)\}')


async def sse_clients(
    host: str,
    port: int,
    *,
    streams: int,
    seconds: float,
    ready_file: str,
    go_file: str,
    tls: ssl.SSLContext | None = None,
    open_concurrency: int = 100,
) -> dict[str, Any]:
    """Open ``streams`` SSE streams, signal ``ready_file``, wait for ``go_file``, measure ``seconds``.

    Returns event latency percentiles (ms) over the measured window, events
    received, and streams that failed to open or broke.
    """
    latencies: list[float] = []
    opened = failed = broken = 0
    measuring = asyncio.Event()
    stop = asyncio.Event()
    gate = asyncio.Semaphore(open_concurrency)
    request = f"GET /mcp HTTP/1.1\r\nHost: {host}:{port}\r\naccept: text/event-stream\r\n\r\n".encode()
    all_open = asyncio.Event()

    def settled() -> None:
        if opened + failed == streams:
            all_open.set()

    async def one_stream() -> None:
        nonlocal opened, failed, broken
        is_open = False
        try:
            async with gate:
                reader, writer = await asyncio.open_connection(host, port, ssl=tls)
                writer.write(request)
                head = await reader.readuntil(b"\r\n\r\n")
                if not head.startswith(b"HTTP/1.1 200"):
                    raise OSError(head.split(b"\r\n", 1)[0].decode())
                # The first event proves the stream is open end to end.
                buffer = b""
                while not _EVENT.search(buffer):
                    chunk = await reader.read(4096)
                    if not chunk:
                        raise OSError("stream closed before its first event")
                    buffer += chunk
            opened += 1
            is_open = True
            settled()
            buffer = b""
            while not stop.is_set():
                chunk = await reader.read(4096)
                if not chunk:
                    raise OSError("stream closed")
                now = time.monotonic_ns()
                buffer += chunk
                last = 0
                for match in _EVENT.finditer(buffer):
                    last = match.end()
                    if measuring.is_set():
                        latencies.append((now - int(match.group(1))) / 1e6)
                buffer = buffer[last:]
            writer.close()
        except (OSError, asyncio.IncompleteReadError, ssl.SSLError):
            if is_open:
                broken += 1
            else:
                failed += 1
                settled()

    tasks = [asyncio.create_task(one_stream()) for _ in range(streams)]
    start = time.monotonic()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(all_open.wait(), timeout=120)
    open_s = time.monotonic() - start
    with open(ready_file, "w") as f:
        f.write(json.dumps({"opened": opened, "failed": failed}))
    while not _exists(go_file):
        await asyncio.sleep(0.05)
    measuring.set()
    await asyncio.sleep(seconds)
    measuring.clear()
    stop.set()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return {
        "opened": opened,
        "failed": failed,
        "broken": broken,
        "open_seconds": open_s,
        "events": len(latencies),
        "latency_ms": percentiles(latencies, (50, 90, 99, 100)),
        "mean_ms": statistics.fmean(latencies) if latencies else None,
    }


def _exists(path: str) -> bool:
    try:
        with open(path):
            return True
    except OSError:
        return False
