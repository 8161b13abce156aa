"""The churn benchmark's smoke mode runs end to end (10 stable and 40 churned routes, 5 s of load).

No timing is judged. The run must complete through real weir and Envoy, send
requests to both kinds of route while every kind of write happens, see the
final state reported served and answered exactly, and count no stable error
and no stale answer (the targets of issue 13).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "churn.py"


def _figure(out: str, label: str) -> int:
    match = re.search(rf"^{re.escape(label)}:?\s+(\d+)", out, re.M)
    assert match, f"no {label!r} line in:\n{out}"
    return int(match.group(1))


def test_churn_bench_smoke_counts_no_stable_error_and_no_stale_answer() -> None:
    result = subprocess.run(
        [sys.executable, str(BENCH), "smoke"],
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    out = result.stdout
    assert "stable routes 10, churned routes 40" in out, (out + result.stderr)[-4000:]
    ops = re.search(
        r"operations: (\d+) adds, (\d+) edits, (\d+) deletes .*?(\d+) atomic, (\d+) in place", out
    )
    assert ops and all(int(n) > 0 for n in ops.groups()), out
    requests = re.search(r"requests: \d+ \([\d.]+/s\): (\d+) stable, (\d+) churned", out)
    assert requests and int(requests.group(1)) > 100 and int(requests.group(2)) > 100, out
    assert "wrong answers then: {'stable': 0, 'churned': 0}" in out, out
    assert _figure(out, "stable errors (non-2xx)") == 0, out
    assert _figure(out, "stale answers after served") == 0, out
    assert result.returncode == 0, (out + result.stderr)[-4000:]
