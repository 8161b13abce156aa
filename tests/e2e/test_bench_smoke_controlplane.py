"""The control-plane benchmark's smoke mode runs end to end (N=100, a few edits). No timing is judged."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "controlplane.py"


def test_controlplane_bench_smoke_prints_its_table() -> None:
    result = subprocess.run(
        [sys.executable, str(BENCH), "smoke"],
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert "| | N = 100 | growth k |" in out
    for row in (
        "load + validate (in process)",
        "translate (in process)",
        "xDS build (in process)",
        "start → every sampled route served",
        "edit → served, p99",
        "weir RSS after edits",
        "Envoy RSS after edits",
    ):
        assert row in out, f"missing row {row!r}:\n{out}"
    assert "| target at N = 100 |" in out
