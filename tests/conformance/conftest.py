"""Fixtures of the conformance suite, and its summary at the end of the run.

Each test module gets one weir (``conformance`` fixture, module scope and
module event loop); a module sets ``HARNESS = {"tls_backends": True}`` (or
``grpc_backends``, ``udp_backends``) for the backends it needs beyond the HTTP ones.
"""

from __future__ import annotations

import tempfile
from collections import Counter, defaultdict
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from .harness import Conformance, conformance_world

#: Module → area shown in the summary.
AREAS = {
    "test_httproute": "HTTPRoute",
    "test_gateway": "Gateway",
    "test_referencegrant": "ReferenceGrant",
    "test_grpcroute": "GRPCRoute",
    "test_tlsroute": "TLSRoute",
    "test_backendtlspolicy": "BackendTLSPolicy",
    "test_listenerset": "ListenerSet",
    "test_tcproute": "TCPRoute",
    "test_udproute": "UDPRoute",
}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def conformance(request: pytest.FixtureRequest) -> AsyncIterator[Conformance]:
    options: dict[str, Any] = dict(getattr(request.module, "HARNESS", {}))
    folder = Path(tempfile.mkdtemp(prefix="weir-conformance-", dir="/tmp"))
    async with conformance_world(folder, **options) as harness:
        yield harness


def _area(nodeid: str) -> str | None:
    path = nodeid.split("::", 1)[0]
    if "conformance/" not in path.replace("\\", "/"):
        return None
    return AREAS.get(Path(path).stem)  # None for the harness's own tests


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """``conformance: N passed, M xfail (not implemented)``, the same by area, and what is pending."""
    outcomes: dict[str, Counter[str]] = defaultdict(Counter)
    pending: dict[str, list[str]] = defaultdict(list)
    for outcome in ("passed", "failed", "xfailed", "xpassed", "skipped", "error"):
        for report in terminalreporter.stats.get(outcome, []):
            nodeid = getattr(report, "nodeid", "")
            area = _area(nodeid)
            if area is None or getattr(report, "when", "call") not in ("call", "setup"):
                continue
            if outcome == "passed" and report.when != "call":
                continue
            outcomes[area][outcome] += 1
            if outcome == "xfailed":
                reason = str(getattr(report, "wasxfail", "")).removeprefix("not implemented yet: ")
                case = nodeid.split("::", 1)[1] if "::" in nodeid else nodeid
                pending[area].append(f"{case} ({reason})")
    if not outcomes:
        return
    total: Counter[str] = Counter()
    for counts in outcomes.values():
        total.update(counts)

    def line(counts: Counter[str]) -> str:
        text = f"{counts['passed']} passed, {counts['xfailed']} xfail (not implemented)"
        for extra in ("failed", "xpassed", "error", "skipped"):
            if counts[extra]:
                text += f", {counts[extra]} {extra}"
        return text

    write = terminalreporter.write_line
    terminalreporter.section("conformance summary")
    write(f"conformance: {line(total)}, by area:")
    for area in sorted(outcomes):
        write(f"  {area:<17} {line(outcomes[area])}")
    for area in sorted(pending):
        write(f"  pending in {area}:")
        for item in sorted(pending[area]):
            write(f"    - {item}")
