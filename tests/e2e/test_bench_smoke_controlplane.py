"""The control-plane benchmark's smoke mode runs end to end for every workload shape (N=100, a few
edits, each answered through Envoy). No timing is judged."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from weir.translate.incremental import PATCH_ALWAYS

BENCH = Path(__file__).resolve().parents[2] / "bench" / "controlplane.py"


@pytest.mark.parametrize("shape", ["path", "host", "gateways", "tls"])
def test_controlplane_bench_smoke_prints_its_table(shape: str) -> None:
    bench = subprocess.Popen(
        [sys.executable, str(BENCH), "smoke", "--shape", shape],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = bench.communicate(timeout=150)
    except subprocess.TimeoutExpired:
        bench.terminate()  # the bench stops weir, Envoy and its helpers on SIGTERM
        _, err = bench.communicate(timeout=60)
        pytest.fail(f"the smoke run did not finish within 150 s:\n{err[-3000:]}")
    assert bench.returncode == 0, err[-3000:]
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
    # The restart (a second weir run on the same folder, reading the parse cache) was measured.
    restart = next(line for line in out.splitlines() if "restart → every sampled route served" in line)
    assert restart.split("|")[2].strip() not in ("", "-"), restart
    assert "| target at N = 100 |" in out
    assert f"--shape {shape} --n 100" in out
    # Every edit was answered through Envoy (the bench exits 1 otherwise) and none failed.
    assert "| 100 |" in out and out.split("| 100 |", 1)[1].split("\n", 1)[0].rstrip().endswith("| 0 |")


PHASES = BENCH.parent / "controlplane_phases.py"


@pytest.mark.parametrize("shape", ["path", "host", "gateways", "tls"])
def test_phases_bench_smoke_prints_its_table(shape: str) -> None:
    """``bench/controlplane_phases.py`` at two small N: every phase and edit kind is reported, and
    the edits that must be patched were (a Secret or ConfigMap only one XBackend names; in ``host``
    the CA every XBackend trusts, which recomputes every route, at these N below
    :data:`~weir.translate.incremental.PATCH_ALWAYS` routes; in ``tls`` a listener's certificate
    takes a full pass)."""
    result = subprocess.run(
        [sys.executable, str(PHASES), "--shape", shape, "--n", "10", "20", "--edits", "1"],
        capture_output=True,
        text=True,
        timeout=200,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    for row in ("| load |", "| translate |", "| build |", "| edit address |", "| edit backend |"):
        assert row in out, f"missing row {row!r}:\n{out}"
    secret_row = next(line for line in out.splitlines() if line.startswith("| edit secret or configmap |"))
    assert PATCH_ALWAYS >= 20
    assert ("full" in secret_row) == (shape == "tls"), secret_row
