"""The data-path benchmark's smoke mode runs end to end: weir against direct, one short round.

No timing is judged (benchmarks are scripts, not timed tests); the run must
complete, weir must answer every request, and the ratio line must be printed.
The second test takes the fallbacks CI gets without wrk and nginx: the Python
load generator and the testkit upstream.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "dataplane.py"
RATIO = re.compile(r"^\s+weir/direct req/s: \d+\.\d+", re.M)


def _smoke(*extra: str) -> str:
    result = subprocess.run(
        [sys.executable, str(BENCH), "smoke", *extra],
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    return result.stdout


@pytest.mark.parametrize("without", ["", "wrk,nginx"], ids=["installed-tools", "python-fallbacks"])
def test_dataplane_bench_smoke_prints_a_ratio(without: str) -> None:
    out = _smoke("--without", without) if without else _smoke()
    assert RATIO.search(out), out
    assert re.search(r"^\s+weir\s+HTTP/1\.1\s", out, re.M), out
    if without:
        assert "Python load generator" in out and "Python testkit server" in out, out
