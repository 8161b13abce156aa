"""`weir demo` is the README's first command: it must pass and leave nothing running."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def envoy_pids() -> set[int]:
    found = set()
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if (proc / "comm").read_text().strip() == "envoy":
                    found.add(int(proc.name))
            except OSError:
                continue
    return found


def test_weir_demo_passes_and_stops_everything() -> None:
    before = envoy_pids()
    weir = Path(sys.executable).with_name("weir")
    result = subprocess.run([str(weir), "demo"], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "demo passed" in result.stdout
    assert "api.weir-demo.test" in result.stdout  # the SNI and Host the upstream saw
    assert envoy_pids() - before == set(), "weir demo left an Envoy running"
