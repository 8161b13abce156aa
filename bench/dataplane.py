"""Data-path benchmark: weir's generated Envoy config against nginx, HAProxy and hand-written Envoy.

Usage (see ``bench/README.md``)::

    python bench/dataplane.py egress-h1 --rounds 3 --duration 10
    python bench/dataplane.py egress-h2 --rounds 3 --duration 10
    python bench/dataplane.py streaming --rounds 3 --streams 1000 --duration 20
    python bench/dataplane.py smoke                   # ~3 s: weir vs direct, for CI
    python bench/dataplane.py plot results/*.json     # PNGs for docs/performance.md

Everything runs on loopback: a TLS upstream on 127.0.0.2 (nginx; the
streaming scenario's SSE server is Python), a DNS stub in this process
resolving ``api.bench.test`` to it, and the contenders on 127.0.0.1, each
with one worker pinned to core 1 while the load generator and the upstream
share core 0:

- ``weir``: ``weir run`` with Gateway API manifests (its own generated Envoy
  config over ADS, egress guard on, access log on, as shipped);
- ``lean-envoy``: the leanest hand-written static Envoy bootstrap for the same
  route and TLS verification (``dataplane_configs.lean_envoy``);
- ``nginx`` and ``haproxy``: hand-written, access logs off;
- ``direct``: the load generator talks to the upstream itself (TLS).

Contenders are interleaved within each round (the order rotates between
rounds). Proxy CPU per request is the utime+stime delta of the contender's
processes (``/proc/PID/stat``) over the measured window divided by the
requests wrk counted. Ratios are computed pair by pair within a round, then
summarised as median (min-max) over rounds.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path

import dataplane_load as load
from dataplane_env import (
    ALIASES,
    BINARIES,
    EGRESS_CONTENDERS,
    HERE,
    QUIET_WAIT,
    WITHOUT,
    Sample,
    available,
    bench_env,
    installed,
    measure_http,
    measure_together,
    say,
)
from dataplane_report import Ratio, fmt_value, med, print_ratios, print_table, ratios, save
from dataplane_streaming import run_streaming, sse_clients_main, sse_upstream_main

# --------------------------------------------------------------------------
# Scenarios
# --------------------------------------------------------------------------


def run_egress(args: argparse.Namespace, *, http2: bool) -> list[Sample]:
    scenario = "egress-h2" if http2 else "egress-h1"
    names = available(args.contenders.split(",") if args.contenders else list(EGRESS_CONTENDERS))
    use_wrk = installed(load.WRK)
    if not use_wrk:
        say("wrk is not installed: using the Python load generator (slow; numbers show the path works only)")
    with bench_env(args) as bench:
        if installed("nginx"):
            bench.start_nginx_upstream(http2=http2)
        else:
            if http2:
                raise SystemExit("egress-h2 needs nginx as the upstream (see bench/README.md)")
            say("nginx is not installed: the upstream is the Python testkit server (smoke runs only)")
            bench.start_python_upstream()
        protocol = "HTTP" if http2 else args.weir_protocol
        contenders = {n: bench.start(n, http2=http2, protocol=protocol) for n in names}
        protos = {n: c.upstream_proto for n, c in contenders.items()}
        say(
            f"{scenario}: {args.rounds} round(s) x {args.duration:g} s per contender "
            f"({args.warmup:g} s warm-up), {'wrk' if use_wrk else 'python'} -c{args.connections}, "
            + ("proxy on core 1, load generator and upstream on core 0" if bench.pin else "unpinned")
        )
        say("  upstream protocol per contender: " + ", ".join(f"{n} {p}" for n, p in protos.items()))
        samples: list[Sample] = []
        for rnd in range(args.rounds):
            order = names[rnd % len(names) :] + names[: rnd % len(names)]
            for name in order:
                sample = measure_http(
                    bench,
                    contenders[name],
                    rnd,
                    connections=args.connections,
                    seconds=args.duration,
                    warmup=args.warmup,
                    use_wrk=use_wrk,
                    max_foreign=args.max_foreign,
                    retries=args.retries,
                )
                samples.append(sample)
                cpu = f"{sample.cpu_us:.1f} µs/req" if sample.cpu_us is not None else "-"
                busy = " ".join(f"{c}:{v:.0%}" for c, v in sample.extra.get("busy", {}).items())
                busy = f"  cores busy {busy}, others {sample.extra['foreign']:.2f}" if busy else ""
                if "new_upstream_connections" in sample.extra:
                    busy += f", new upstream connections {sample.extra['new_upstream_connections']}"
                say(
                    f"  round {rnd + 1} {name:<10} {sample.rps:>10,.0f} req/s  "
                    f"p50 {fmt_value(sample.p50_ms)} ms  p99 {fmt_value(sample.p99_ms)} ms  "
                    f"CPU {cpu}  errors {sample.errors}{busy}"
                )
        say(f"{scenario} results, median (min-max) over {args.rounds} round(s):")
        print_table(samples, protos)
        summary = ratios(samples, egress_ratios(http2))
        print_ratios(summary)
        save(args.json, scenario, args, samples, {"protocols": protos, "ratios": summary})
    return samples


def egress_ratios(http2: bool) -> list[Ratio]:
    floor = 0.75 if http2 else 0.55
    wanted: list[Ratio] = [
        ("weir", "nginx", "rps", "req/s", f"≥ {floor}", lambda v: v >= floor),
        ("weir", "nginx", "p99_ms", "p99 latency", "≤ 1.5", lambda v: v <= 1.5),
        ("weir", "lean-envoy", "core_cpu_us", "Envoy CPU/req", "≤ 1.10", lambda v: v <= 1.10),
        ("weir", "lean-envoy", "cpu_us", "CPU/req incl. weir's Python", "", None),
        (
            "weir",
            "lean-envoy-same",
            "core_cpu_us",
            "Envoy CPU/req (same behaviour)",
            "≤ 1.10",
            lambda v: v <= 1.10,
        ),
        ("weir", "lean-envoy", "rps", "req/s", "", None),
        ("weir", "haproxy", "rps", "req/s", "", None),
        ("lean-envoy", "nginx", "rps", "req/s", "", None),
        ("weir", "nginx", "cpu_us", "CPU/req", "", None),
        ("weir", "direct", "rps", "req/s", "", None),
    ]
    return wanted


def run_levers(args: argparse.Namespace) -> None:
    """A/B pairs: ``weir`` against each variant, adjacent in time, in many short rounds.

    Variants are lever names (``weir+LEVER``, see ``dataplane_levers.py``) or
    other contenders (``lean-envoy``). The pair order alternates between
    rounds; the ratio of each pair is taken within the round.
    """
    variants = [
        v if v in BINARIES or v in ALIASES or v.startswith("weir+") else f"weir+{v}"
        for v in args.variants.split(",")
    ]
    http2 = args.h2
    with bench_env(args) as bench:
        bench.start_nginx_upstream(http2=http2)
        protocol = "HTTP" if http2 else args.weir_protocol
        contenders = {n: bench.start(n, http2=http2, protocol=protocol) for n in ["weir", *variants]}
        say(
            f"levers ({'egress-h2' if http2 else 'egress-h1'}): weir against each variant, "
            f"{args.rounds} rounds of {args.duration:g} s, pair order alternating"
        )
        samples: list[Sample] = []
        pair_ratios: dict[str, list[tuple[float, float, float, float]]] = {v: [] for v in variants}
        for rnd in range(args.rounds):
            for variant in variants:
                pair = ["weir", variant] if rnd % 2 == 0 else [variant, "weir"]
                got = {}
                if args.together:
                    both = measure_together(
                        bench,
                        [contenders[name] for name in pair],
                        rnd,
                        connections=args.connections // 2,
                        seconds=args.duration,
                        warmup=args.warmup,
                    )
                    got = {sample.contender: sample for sample in both}
                else:
                    for name in pair:
                        got[name] = measure_http(
                            bench,
                            contenders[name],
                            rnd,
                            connections=args.connections,
                            seconds=args.duration,
                            warmup=args.warmup,
                            use_wrk=True,
                            max_foreign=args.max_foreign,
                            retries=args.retries,
                        )
                for sample in got.values():
                    sample.extra["pair"] = variant
                    samples.append(sample)
                a, b = got[variant], got["weir"]
                cpu_a = a.core_cpu_us if a.core_cpu_us is not None else a.cpu_us
                cpu_b = b.core_cpu_us if b.core_cpu_us is not None else b.cpu_us
                pair_ratios[variant].append(
                    (
                        (cpu_a or 0) / (cpu_b or 1),
                        a.rps / b.rps,
                        cpu_b or 0,
                        (a.cpu_us or 0) / (b.cpu_us or 1),
                    )
                )
                say(
                    f"  round {rnd + 1} {variant:<28} CPU {cpu_a:.1f} vs weir {cpu_b:.1f} µs/req "
                    f"(x{pair_ratios[variant][-1][0]:.3f}), req/s x{pair_ratios[variant][-1][1]:.3f}"
                )
        say(
            "variant / weir, median (min-max) of the per-round pair ratios: Envoy's CPU per request, "
            "the same with every process of the contender (weir's Python too), requests/s"
        )
        rows = [("variant", "Envoy CPU/req", "all processes", "req/s", "weir Envoy µs/req")]
        for variant, values in pair_ratios.items():
            rows.append(
                (
                    variant,
                    med([v[0] for v in values]),
                    med([v[3] for v in values]),
                    med([v[1] for v in values]),
                    med([v[2] for v in values]),
                )
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        for row in rows:
            say("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))
        save(args.json, "levers", args, samples, {"pairs": pair_ratios})


def run_report(args: argparse.Namespace) -> None:
    """Print the tables and ratios of ``--json`` result files again (egress scenarios)."""
    for file in args.files:
        data = json.loads(Path(file).read_text())
        scenario = data["scenario"]
        if not scenario.startswith("egress"):
            say(f"{file}: {scenario}: only egress results are reprinted")
            continue
        samples = [Sample(**s) for s in data["samples"]]
        rounds = data["args"]["rounds"]
        say(f"{file}: {scenario}, {data['when']}, median (min-max) over {rounds} round(s):")
        print_table(samples, data.get("protocols", {}))
        print_ratios(ratios(samples, egress_ratios(scenario == "egress-h2")))


def run_smoke(args: argparse.Namespace) -> None:
    """One short round of egress-h1, weir against direct; works without wrk and nginx."""
    args.contenders = "weir,direct"
    args.rounds = 1
    args.retries = 0  # no timing claims: no waiting for a quiet machine either
    QUIET_WAIT["max"] = 0.0
    args.duration = args.duration or 1.5
    args.warmup = 0.5 if installed(load.WRK) else 0.0
    samples = run_egress(args, http2=False)
    if not any(s.contender == "weir" and s.requests > 0 and s.errors == 0 for s in samples):
        raise SystemExit("smoke: weir served no request without error")


# --------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="dataplane.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser, *, duration: float | None, rounds: int) -> None:
        p.add_argument("--rounds", type=int, default=rounds)
        p.add_argument("--duration", type=float, default=duration, help="measured seconds per contender")
        p.add_argument("--contenders", help="comma-separated subset of the contenders")
        p.add_argument("--json", help="write samples and ratios to this file")
        p.add_argument("--no-pin", action="store_true", help="do not pin processes to cores")
        p.add_argument("--keep", action="store_true", help="keep the work folder (configs, logs)")
        p.add_argument(
            "--max-foreign",
            type=float,
            default=0.1,
            help="cores other programs may use during a measurement before it is repeated",
        )
        p.add_argument("--retries", type=int, default=2, help="repeats of a measurement disturbed by others")
        p.add_argument(
            "--quiet-wait",
            type=float,
            default=120.0,
            help="seconds to wait for other programs to go quiet before a measurement",
        )
        p.add_argument(
            "--without",
            default="",
            metavar="PROGRAM,...",
            help="act as if these programs (wrk, nginx, haproxy) were not installed",
        )

    for name, http2 in (("egress-h1", False), ("egress-h2", True)):
        p = sub.add_parser(
            name, help=f"HTTP/1.1 clients → proxy → TLS upstream speaking {'HTTP/2' if http2 else 'HTTP/1.1'}"
        )
        common(p, duration=10.0, rounds=3)
        p.add_argument("--warmup", type=float, default=2.0, help="seconds of load before each measurement")
        p.add_argument("--connections", type=int, default=50, help="client keep-alive connections")
        p.add_argument(
            "--weir-protocol", default=None, help="the XBackend's protocol in egress-h1 (default: unset)"
        )
        p.set_defaults(func=lambda a, h=http2: run_egress(a, http2=h))

    p = sub.add_parser("levers", help="lever study: weir against variants of its config, in A/B pairs")
    common(p, duration=3.0, rounds=6)
    p.add_argument("variants", help="comma-separated levers (see dataplane_levers.py) or contenders")
    p.add_argument("--h2", action="store_true", help="the egress-h2 setup (upstream speaks HTTP/2)")
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--connections", type=int, default=50)
    p.add_argument("--weir-protocol", default=None)
    p.add_argument(
        "--one-by-one",
        dest="together",
        action="store_false",
        help="measure the two of a pair one after the other (default: at once, half the connections each)",
    )
    p.set_defaults(func=run_levers)

    p = sub.add_parser("smoke", help="~3 s: weir vs direct, one round (CI)")
    common(p, duration=None, rounds=1)
    p.add_argument("--connections", type=int, default=8)
    p.set_defaults(func=run_smoke, weir_protocol=None, warmup=0.0)

    p = sub.add_parser("streaming", help="long-lived SSE streams through the proxy: memory and event latency")
    common(p, duration=20.0, rounds=3)
    p.add_argument("--streams", type=int, default=1000)
    p.add_argument("--interval", type=float, default=1.0, help="seconds between events of a stream")
    p.set_defaults(func=run_streaming)

    p = sub.add_parser("plot", help="PNG plots from --json result files")
    p.add_argument("files", nargs="+")
    p.add_argument("--out", default=str(HERE.parent / "docs" / "img"))
    p.set_defaults(func=lambda a: __import__("dataplane_plots").plot(a.files, a.out))

    p = sub.add_parser("report", help="print the tables and ratios of --json result files again")
    p.add_argument("files", nargs="+")
    p.set_defaults(func=run_report)

    p = sub.add_parser("_sse-upstream")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--cert", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--interval", type=float, default=1.0)
    p.set_defaults(func=sse_upstream_main)

    p = sub.add_parser("_sse-clients")
    for flag in ("--url", "--ready", "--go", "--out", "--ca"):
        p.add_argument(flag, required=True)
    p.add_argument("--streams", type=int, required=True)
    p.add_argument("--seconds", type=float, required=True)
    p.set_defaults(func=sse_clients_main)

    args = parser.parse_args(argv)
    # SIGTERM unwinds like Ctrl-C, so every process started is stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    QUIET_WAIT["max"] = getattr(args, "quiet_wait", 0.0)
    WITHOUT.update(p for p in getattr(args, "without", "").split(",") if p)
    args.func(args)


if __name__ == "__main__":
    main()
