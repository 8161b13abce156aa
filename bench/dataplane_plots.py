"""PNG plots of ``dataplane.py --json`` results, for ``docs/performance.md``.

    python bench/dataplane.py plot results/egress-h1.json results/egress-h2.json results/streaming.json

One figure per file, ``dataplane-<scenario>.png`` in ``--out`` (default
``docs/img``): bars are medians over rounds, whiskers the min and max.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

#: (sample field, axis label) per scenario kind.
EGRESS_PANELS = (("rps", "requests/s"), ("p99_ms", "p99 latency (ms)"), ("cpu_us", "proxy CPU (µs/request)"))
STREAMING_PANELS = (("kib_per_stream", "proxy memory (KiB/stream)"), ("p99_ms", "event p99 latency (ms)"))
COLOURS = {
    "weir": "#1f77b4",
    "lean-envoy": "#9467bd",
    "lean-envoy-same": "#c5b0d5",
    "weir-before": "#aec7e8",
    "nginx": "#2ca02c",
    "haproxy": "#ff7f0e",
    "direct": "#7f7f7f",
}


def plot(files: list[str], out: str) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for file in files:
        data = json.loads(Path(file).read_text())
        scenario = data["scenario"]
        if scenario == "levers":
            stem = Path(file).stem
            name = stem if stem.startswith("dataplane-") else f"dataplane-{stem}"
            written.append(_plot_levers(plt, data, Path(out) / f"{name}.png"))
            continue
        panels = STREAMING_PANELS if scenario == "streaming" else EGRESS_PANELS
        groups: dict[str, list[dict[str, Any]]] = {}
        for sample in data["samples"]:
            groups.setdefault(sample["contender"], []).append(sample)
        names = list(groups)
        fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6))
        for ax, (field, label) in zip(axes, panels, strict=True):
            shown, mids, lows, highs = [], [], [], []
            for name in names:
                values = [s[field] for s in groups[name] if s.get(field) is not None]
                if not values:
                    continue
                mid = statistics.median(values)
                shown.append(name)
                mids.append(mid)
                lows.append(mid - min(values))
                highs.append(max(values) - mid)
            colours = [COLOURS.get(n.split("+")[0], "#bcbd22") for n in shown]
            ax.bar(shown, mids, yerr=[lows, highs], capsize=4, color=colours)
            ax.set_title(label, fontsize=10)
            ax.tick_params(axis="x", rotation=30, labelsize=8)
            ax.grid(axis="y", alpha=0.3)
        rounds = data["args"].get("rounds")
        fig.suptitle(f"{scenario}: median and min-max of {rounds} interleaved rounds", fontsize=11)
        fig.tight_layout()
        target = Path(out) / f"dataplane-{scenario}.png"
        target.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(target, dpi=110)
        plt.close(fig)
        written.append(target)
        print(f"wrote {target}")
    return written


def _plot_levers(plt: Any, data: dict[str, Any], target: Path) -> Path:
    """Horizontal bars: each variant's Envoy CPU per request relative to weir (median, min-max)."""
    pairs = data["pairs"]
    names = list(pairs)
    mids, lows, highs = [], [], []
    for name in names:
        values = [v[0] for v in pairs[name]]
        mid = statistics.median(values)
        mids.append(mid)
        lows.append(mid - min(values))
        highs.append(max(values) - mid)
    fig, ax = plt.subplots(figsize=(7.5, 0.38 * len(names) + 1.4))
    colours = [COLOURS.get(n.split("+")[0], "#bcbd22") for n in names]
    ax.barh(names, mids, xerr=[lows, highs], capsize=3, color=colours)
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xlim(min(0.7, min(mids) - 0.05), max(1.1, max(mids) + 0.05))
    ax.invert_yaxis()
    ax.set_xlabel("Envoy CPU per request, relative to weir (measured at the same time)")
    ax.tick_params(axis="y", labelsize=8)
    ax.grid(axis="x", alpha=0.3)
    rounds = data["args"].get("rounds")
    ax.set_title(f"levers: median and min-max of {rounds} A/B rounds", fontsize=10)
    fig.tight_layout()
    target.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(target, dpi=110)
    plt.close(fig)
    print(f"wrote {target}")
    return target
