"""Reporting for the data-path benchmark: medians with min-max, ratios within rounds, JSON results."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from dataplane_env import Sample, say

from weir.envoy import envoy_binary


def med(values: list[float]) -> str:
    if not values:
        return "-"
    fmt = _fmt(values)
    return f"{fmt(statistics.median(values))} ({fmt(min(values))}-{fmt(max(values))})"


def _fmt(values: list[float]) -> Callable[[float], str]:
    biggest = max(abs(v) for v in values)
    if biggest >= 1000:
        return lambda v: f"{v:,.0f}"
    if biggest >= 10:
        return lambda v: f"{v:.1f}"
    return lambda v: f"{v:.2f}"


def by_contender(samples: list[Sample]) -> dict[str, list[Sample]]:
    out: dict[str, list[Sample]] = {}
    for sample in samples:
        out.setdefault(sample.contender, []).append(sample)
    return out


def _values(samples: list[Sample], attr: str) -> list[float]:
    return [v for v in (getattr(s, attr) for s in samples) if v is not None]


def print_table(samples: list[Sample], protos: dict[str, str]) -> None:
    rows = [("contender", "upstream", "req/s", "p50 ms", "p99 ms", "CPU µs/req", "user/sys µs", "errors")]
    for name, group in by_contender(samples).items():
        cpu = med(_values(group, "cpu_us"))
        core = _values(group, "core_cpu_us")
        if core and _values(group, "cpu_us") != core:
            cpu += f"; envoy {med(core)}"
        user = [s.extra["user_us"] for s in group if "user_us" in s.extra]
        system = [s.extra["sys_us"] for s in group if "sys_us" in s.extra]
        split = f"{statistics.median(user):.1f}/{statistics.median(system):.1f}" if user else "-"
        rows.append(
            (
                name,
                protos.get(name, "?"),
                med(_values(group, "rps")),
                med(_values(group, "p50_ms")),
                med(_values(group, "p99_ms")),
                cpu,
                split,
                str(sum(s.errors for s in group)),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        say("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))


#: (numerator, denominator, metric, label, target description, predicate on the median)
Ratio = tuple[str, str, str, str, str, Callable[[float], bool] | None]


def ratios(samples: Sequence[Any], wanted: list[Ratio]) -> list[dict[str, Any]]:
    """Each ratio computed within each round, then summarised (samples: Sample or StreamSample)."""
    rounds: dict[int, dict[str, Any]] = {}
    for sample in samples:
        rounds.setdefault(sample.round, {})[sample.contender] = sample
    out = []
    for num, den, metric, label, target, ok in wanted:
        per_round = []
        for rnd in sorted(rounds):
            a, b = rounds[rnd].get(num), rounds[rnd].get(den)
            if a is None or b is None:
                continue
            x, y = getattr(a, metric), getattr(b, metric)
            if x is None or y is None or not y:
                continue
            per_round.append(x / y)
        if per_round:
            out.append(
                {
                    "ratio": f"{num}/{den}",
                    "metric": metric,
                    "label": label,
                    "target": target,
                    "rounds": per_round,
                    "median": statistics.median(per_round),
                    "ok": None if ok is None else ok(statistics.median(per_round)),
                }
            )
    return out


def print_ratios(summary: list[dict[str, Any]]) -> None:
    if not summary:
        return
    say("ratios (computed within each round; median (min-max) [per round]):")
    for r in summary:
        verdict = "" if r["ok"] is None else ("  met" if r["ok"] else "  NOT met")
        target = f"  target {r['target']}{verdict}" if r["target"] else ""
        rounds = " ".join(f"{v:.3f}" for v in r["rounds"])
        say(f"  {r['ratio']} {r['label']}: {med(r['rounds'])} [{rounds}]{target}")


def save(
    path: str | None, scenario: str, args: argparse.Namespace, samples: list[Any], extra: dict[str, Any]
) -> None:
    if not path:
        return
    data = {
        "scenario": scenario,
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "args": {k: v for k, v in vars(args).items() if k != "func"},
        "machine": machine(),
        "samples": [asdict(s) for s in samples],
        **extra,
    }
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(data, indent=1) + "\n")
    say(f"results written to {path}")


def machine() -> dict[str, Any]:
    model = "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    versions = {}
    for tool, cmd in {
        "nginx": ["nginx", "-v"],
        "haproxy": ["haproxy", "-v"],
        "wrk": ["wrk", "-v"],
        "envoy": [envoy_binary(), "--version"],
    }.items():
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=False)
            text = (done.stdout + done.stderr).strip().splitlines()
            versions[tool] = next((ln.strip() for ln in text if ln.strip()), "?")
    return {"cpu": model, "cpus": os.cpu_count(), "kernel": os.uname().release, "versions": versions}


def fmt_value(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}" if value < 100 else f"{value:.0f}"
