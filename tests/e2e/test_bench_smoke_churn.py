"""The churn benchmark's smoke mode runs end to end (10 stable and 40 churned routes, 5 s of load).

No timing is judged. The run must complete through real weir and Envoy, send
requests to both kinds of route while every kind of write happens, see the
final state reported served and answered exactly, and count no stable error
and no stale answer (the targets of issue 13).
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

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


def _bench_module() -> Any:
    spec = importlib.util.spec_from_file_location("churn_bench", BENCH)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_churn_bench_judges_stale_and_lost_answers() -> None:
    """The counters the smoke test requires to be 0 do count what they name: an answer older than
    the version reported served is stale, a 404 after a served version with no deletion is lost,
    and neither is counted while a newer write (or a deletion) is not yet reported served."""
    churn = _bench_module()
    bench = churn.Bench.__new__(churn.Bench)
    bench.tally = churn.Tally()
    route = churn.Route("c0001", version=5, present=True, served=4, served_present=True)
    judge = bench.judge_churned
    judge(route, 4, True, 0, 200, "4")  # the version served
    judge(route, 4, True, 0, 200, "5")  # newer than reported: fine
    judge(route, 0, False, 0, 200, "1")  # nothing reported served yet
    judge(route, 0, False, 0, 404, None)
    assert (bench.tally.stale, bench.tally.lost, bench.tally.churned_errors) == (0, 0, 0)
    judge(route, 4, True, 0, 200, "3")
    judge(route, 4, False, 0, 200, "3")  # answered after its deletion (v4) was reported served
    assert bench.tally.stale == 2
    judge(route, 4, True, 0, 404, None)
    assert bench.tally.lost == 1
    route.last_delete = 5  # a deletion written after v4: a 404 is what it asks for
    judge(route, 4, True, 0, 404, None)
    assert bench.tally.lost == 1
    judge(route, 4, True, 0, 503, None)
    assert bench.tally.churned_errors == 1
    assert bench.tally.churned_requests == 9
