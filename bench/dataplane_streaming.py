"""The streaming scenario: long-lived SSE streams through each proxy, memory per stream and event latency.

See ``dataplane.py``; the two ends are ``dataplane_load.sse_upstream`` and
``dataplane_load.sse_clients``, each run as a process of its own (pinned with
the upstream, on the load core) through ``dataplane.py``'s hidden subcommands.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import ssl
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import dataplane_configs as cfg
import dataplane_load as load
from dataplane_env import (
    HERE,
    STREAMING_CONTENDERS,
    Bench,
    Contender,
    available,
    bench_env,
    cpu_seconds,
    rss_kib,
    say,
)
from dataplane_report import fmt_value, med, print_ratios, ratios, save


@dataclass
class StreamSample:
    contender: str
    round: int
    streams: int
    opened: int
    broken: int
    events: int
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    rss_idle_kib: int
    rss_open_kib: int
    kib_per_stream: float | None
    cpu_us_per_event: float | None
    open_seconds: float


def run_streaming(args: argparse.Namespace) -> None:
    names = available(args.contenders.split(",") if args.contenders else list(STREAMING_CONTENDERS))
    with bench_env(args) as bench:
        bench.start_sse_upstream(args.interval)
        say(
            f"streaming: {args.streams} SSE streams per contender, an event per stream every "
            f"{args.interval:g} s, measured {args.duration:g} s, {args.rounds} round(s); a fresh proxy "
            "process per measurement; "
            + ("proxy on core 1, clients and upstream on core 0" if bench.pin else "unpinned")
        )
        samples: list[StreamSample] = []
        for rnd in range(args.rounds):
            order = names[rnd % len(names) :] + names[: rnd % len(names)]
            for name in order:
                contender = bench.start(name, http2=False, protocol="MCP", streaming=True)
                try:
                    sample = measure_streams(bench, contender, rnd, args)
                finally:
                    bench.stop(contender)
                samples.append(sample)
                say(
                    f"  round {rnd + 1} {name:<10} opened {sample.opened}/{sample.streams}  "
                    f"events {sample.events}  p50 {fmt_value(sample.p50_ms)} ms  "
                    f"p99 {fmt_value(sample.p99_ms)} ms  "
                    f"memory {fmt_value(sample.kib_per_stream)} KiB/stream  "
                    f"CPU {fmt_value(sample.cpu_us_per_event)} µs/event"
                )
        say(f"streaming results, median (min-max) over {args.rounds} round(s):")
        rows = [
            (
                "contender",
                "streams open",
                "event p50 ms",
                "event p99 ms",
                "KiB/stream",
                "RSS idle→open MiB",
                "CPU µs/event",
            )
        ]
        groups: dict[str, list[StreamSample]] = {}
        for s in samples:
            groups.setdefault(s.contender, []).append(s)
        for name, group in groups.items():
            rss = (
                f"{statistics.median([s.rss_idle_kib for s in group]) / 1024:.0f}→"
                f"{statistics.median([s.rss_open_kib for s in group]) / 1024:.0f}"
                if group[0].rss_idle_kib
                else "-"
            )
            rows.append(
                (
                    name,
                    f"{min(s.opened for s in group)}/{group[0].streams}",
                    med([s.p50_ms for s in group if s.p50_ms is not None]),
                    med([s.p99_ms for s in group if s.p99_ms is not None]),
                    med([s.kib_per_stream for s in group if s.kib_per_stream is not None]),
                    rss,
                    med([s.cpu_us_per_event for s in group if s.cpu_us_per_event is not None]),
                )
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        for row in rows:
            say("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))
        summary = ratios(
            samples,
            [
                ("weir", "nginx", "kib_per_stream", "memory/stream", "", None),
                ("weir", "lean-envoy", "kib_per_stream", "memory/stream", "", None),
                ("weir", "nginx", "p99_ms", "event p99", "", None),
                ("weir", "direct", "p99_ms", "event p99", "", None),
            ],
        )
        print_ratios(summary)
        save(args.json, "streaming", args, samples, {"ratios": summary})


def measure_streams(bench: Bench, contender: Contender, rnd: int, args: argparse.Namespace) -> StreamSample:
    """Memory and CPU of the proxy process (Envoy alone, for weir), event latency from the clients."""
    pids = contender.core_pids() or contender.pids()
    time.sleep(1.0)  # let the freshly started proxy settle
    rss_idle = rss_kib(pids)
    ready, go, out = (bench.work / f"sse-{rnd}-{contender.name}.{x}" for x in ("ready", "go", "json"))
    command = [
        sys.executable,
        str(HERE / "dataplane.py"),
        "_sse-clients",
        "--url",
        contender.url,
        "--streams",
        str(args.streams),
        "--seconds",
        str(args.duration),
        "--ready",
        str(ready),
        "--go",
        str(go),
        "--out",
        str(out),
        "--ca",
        str(bench.pki.ca),
    ]
    name = f"sse-clients-{contender.name}"
    bench.procs.start(name, command, core=bench.load_core)
    deadline = time.monotonic() + 180
    while not ready.exists():
        bench.procs.check(name)
        if time.monotonic() > deadline:
            raise RuntimeError(f"{contender.name}: streams not open after 180 s")
        time.sleep(0.1)
    time.sleep(1.5)  # every stream has had an event through it
    pids = contender.core_pids() or contender.pids()
    rss_open = rss_kib(pids)
    cpu_before = cpu_seconds(pids)
    go.write_text("go")
    proc = bench.procs.running[name]
    proc.wait(timeout=args.duration + 120)
    cpu_after = cpu_seconds(pids)
    bench.procs.running.pop(name, None)
    result = json.loads(out.read_text())
    opened = result["opened"]
    latency = {int(k): v for k, v in result["latency_ms"].items()}
    events = result["events"]
    return StreamSample(
        contender=contender.name,
        round=rnd,
        streams=args.streams,
        opened=opened,
        broken=result["broken"] + result.get("failed", 0),
        events=events,
        p50_ms=latency.get(50),
        p99_ms=latency.get(99),
        max_ms=latency.get(100),
        rss_idle_kib=rss_idle,
        rss_open_kib=rss_open,
        kib_per_stream=(rss_open - rss_idle) / opened if pids and opened else None,
        cpu_us_per_event=(cpu_after - cpu_before) / events * 1e6 if pids and events else None,
        open_seconds=result["open_seconds"],
    )


def sse_upstream_main(args: argparse.Namespace) -> None:
    asyncio.run(load.sse_upstream(cfg.UPSTREAM_IP, args.port, args.cert, args.key, args.interval))


def sse_clients_main(args: argparse.Namespace) -> None:
    scheme, rest = args.url.split("://", 1)
    host, port = rest.split("/", 1)[0].rsplit(":", 1)
    tls = None
    if scheme == "https":
        tls = ssl.create_default_context(cafile=args.ca)
        tls.check_hostname = False
    result = asyncio.run(
        load.sse_clients(
            host,
            int(port),
            streams=args.streams,
            seconds=args.seconds,
            ready_file=args.ready,
            go_file=args.go,
            tls=tls,
        )
    )
    Path(args.out).write_text(json.dumps(result))
