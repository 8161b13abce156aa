"""weir.telemetry and weir.xds.counters without Envoy: the stats reader, the counters, the page.

Envoy's stats, their fetch and the data-plane families are shown against the
real Envoy in tests/e2e/test_metrics.py; here, the reader of Envoy's text
``/stats`` format is fed chunks cut at awkward places, and the fetch meets
peers that fail the ways Envoy's admin could (silent, gone).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from weir import __version__
from weir.admin import AdminServer
from weir.api.meta import ObjectKey
from weir.envoy_admin import EnvoyAdmin
from weir.envoy_stats import ENVOY_STATS_USED, StatNames, _StatsParser, fetch_envoy_stats
from weir.loader import Problem
from weir.metrics import CONTENT_TYPE, MetricFamily, parse
from weir.telemetry import Sources, Telemetry
from weir.xds.counters import MAX_IN_FLIGHT, XdsCounters

ENVOY_TEXT = """\
cluster.service/default/web/80.upstream_cx_connect_fail: 1
cluster.service/default/web/80.upstream_rq_2xx: 5
cluster.service/default/web/80/h2.upstream_rq_2xx: 2
cluster.service/default/web/80/h2.external.upstream_rq_2xx: 2
cluster.service/default/gone/80.upstream_rq_2xx: 2
cluster.service/default/web/8080.upstream_rq_5xx: 1
cluster.weir-xds.upstream_rq_2xx: 9
cluster.xbackend/default/api.v2.rbac.denied: 4
cluster.xbackend/default/api.v2.ssl.fail_verify_error: 0
cluster.xbackend/default/api.v2.ssl.fail_verify_san: 2
cluster.xbackend/default/api.v2.upstream_cx_none_healthy: 3
cluster.xbackend/default/api.v2.upstream_rq_2xx: 7
cluster.xbackend/default/api.v2.internal.upstream_rq_2xx: 7
cluster.xbackend/other/ssl.rbac.denied: 1
cluster.xbackend/other/ssl.upstream_rq_time: P0(nan,1) P25(nan,1)
http.127.0.0.1_8080.downstream_rq_2xx: 11
http.127.0.0.1_8080.downstream_rq_4xx: 2
http.admin.downstream_rq_2xx: 100
http.weir-tcp-egress.downstream_rq_2xx: 6
listener.envoy_internal_weir-egress-denied.downstream_cx_total: 5
http.127.0.0.1_9999.downstream_rq_2xx: 8
server.memory_allocated: 123456
server.version: "1.40.0"
"""

EXPECTED = {
    ("weir_backend_connect_failures_total", ("Service", "default", "web")): 1.0,
    # Every cluster of a Service (ports, HTTP/2 use) adds up to the Service; the dynamic stats'
    # internal/external copies, and clusters not served (any more), are not read.
    ("weir_backend_requests_total", ("Service", "default", "web", "2xx")): 7.0,
    ("weir_backend_requests_total", ("Service", "default", "web", "5xx")): 1.0,
    # An XBackend name with dots; "ssl" and "rbac" as names do not confuse the stat suffixes
    # (nor does a stat weir does not read: rbac.denied, the MCP tool policy's).
    ("weir_backend_tls_verify_failures_total", ("XBackend", "default", "api.v2", "chain")): 0.0,
    ("weir_backend_tls_verify_failures_total", ("XBackend", "default", "api.v2", "san")): 2.0,
    ("weir_backend_unavailable_total", ("XBackend", "default", "api.v2")): 3.0,
    ("weir_backend_requests_total", ("XBackend", "default", "api.v2", "2xx")): 7.0,
    ("weir_egress_refused_total", ()): 5.0,
    # Only the Gateway sockets weir serves: not admin, not the internal TCP egress listener.
    ("weir_downstream_requests_total", ("127.0.0.1:8080", "2xx")): 11.0,
    ("weir_downstream_requests_total", ("127.0.0.1:8080", "4xx")): 2.0,
}
NAMES = StatNames(
    backends={
        "service/default/web/80": ("Service", "default", "web"),
        "service/default/web/80/h2": ("Service", "default", "web"),
        "service/default/web/8080": ("Service", "default", "web"),
        "xbackend/default/api.v2": ("XBackend", "default", "api.v2"),
        "xbackend/other/ssl": ("XBackend", "other", "ssl"),
    },
    sockets={"127.0.0.1_8080": "127.0.0.1:8080"},
)


def cut(data: bytes, every: int) -> list[bytes]:
    return [data[i : i + every] for i in range(0, len(data), every)]


@pytest.mark.parametrize("every", [1, 7, 64, 100_000])
def test_envoy_stats_are_read_in_chunks_and_renamed(every: int) -> None:
    parser = _StatsParser(NAMES)
    for chunk in cut(ENVOY_TEXT.encode(), every):
        parser.feed(chunk)
    parser.close()
    assert parser.values == EXPECTED


def test_every_stat_read_is_in_the_inclusion_patterns() -> None:
    """A stat the reader turns into a metric is kept by ENVOY_STATS_USED (Envoy's inclusion list)."""
    kept = [re.compile(p) for p in ENVOY_STATS_USED]
    for line in ENVOY_TEXT.splitlines():
        name = line.split(": ")[0]
        parser = _StatsParser(NAMES)
        parser.feed(line.encode() + b"\n")
        if parser.values:
            assert any(p.fullmatch(name) for p in kept), name
    for other in (
        "cluster.weir-xds.upstream_rq_2xx",
        "cluster.xbackend/a/b.upstream_rq_time",
        "server.version",
    ):
        assert not any(p.fullmatch(other) for p in kept), other


async def test_envoy_stats_failures_are_reported_not_raised() -> None:
    accepted: list[asyncio.StreamWriter] = []

    async def silent(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)  # accepts, never answers

    folder = Path(tempfile.mkdtemp(prefix="weir-"))
    admin = EnvoyAdmin(folder / "admin.sock")
    server = await asyncio.start_unix_server(silent, admin.path)
    try:
        started = time.monotonic()
        stats = await fetch_envoy_stats(admin, StatNames(), timeout=0.3)
        assert stats.error == "no complete answer within 0.3 s" and not stats.values
        assert time.monotonic() - started < 2
    finally:
        server.close()
        for writer in accepted:
            writer.close()
        await server.wait_closed()
    os.unlink(admin.path)
    try:
        missing = await fetch_envoy_stats(admin, StatNames())  # nothing listens there any more
        assert missing.error and "No such file" in missing.error
    finally:
        shutil.rmtree(folder)


def test_xds_counters_time_push_to_ack() -> None:
    now = [100.0]
    counters = XdsCounters(clock=lambda: now[0])
    cluster = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
    listener = "type.googleapis.com/envoy.config.listener.v3.Listener"
    counters.pushed(cluster, "1")
    counters.pushed(listener, "2")
    now[0] += 0.02
    counters.acked(cluster, "1")
    counters.nacked(listener, "2")
    counters.acked(cluster, "unknown")  # an answer to a push forgotten: counted, not timed
    families = {f.name: f for f in counters.collect()}
    values = {
        (n, s.name_suffix, tuple(s.labels.items())): s.value for n, f in families.items() for s in f.samples
    }
    assert values[("weir_xds_pushes_total", "", (("type", "Cluster"),))] == 1
    assert values[("weir_xds_acks_total", "", (("type", "Cluster"),))] == 2
    assert values[("weir_xds_acks_total", "", (("type", "Listener"),))] == 0  # present from the first push
    assert values[("weir_xds_nacks_total", "", (("type", "Listener"),))] == 1
    assert values[("weir_xds_push_ack_duration_seconds", "_count", (("type", "Cluster"),))] == 1
    assert (
        values[("weir_xds_push_ack_duration_seconds", "_bucket", (("type", "Cluster"), ("le", "0.025")))] == 1
    )
    assert (
        values[("weir_xds_push_ack_duration_seconds", "_bucket", (("type", "Cluster"), ("le", "0.01")))] == 0
    )
    # Pushes never answered are forgotten, oldest first.
    for nonce in range(MAX_IN_FLIGHT + 10):
        counters.pushed(cluster, f"n{nonce}")
    counters.acked(cluster, "n0")
    counters.acked(cluster, f"n{MAX_IN_FLIGHT + 9}")
    assert counters.ack_seconds.count("Cluster") == 2


# --------------------------------------------------------------------------- the page


def _sources(envoy: Any, statuses: dict[ObjectKey, dict[str, Any]], problems: list[Problem]) -> Sources:
    return Sources(
        problems=lambda: problems,
        statuses=lambda: statuses,
        translation=lambda: None,
        envoys=lambda: [envoy] if envoy is not None else [],
        xds=lambda: None,
        config_accepted=lambda: True,
        controller_name=WEIR,
    )


def values_of(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (f.name + s.name_suffix, tuple(sorted(s.labels.items()))): s.value
        for f in parse(text)  # strict
        for s in f.samples
    }


WEIR = "weir.dev/gateway-controller"
STATUSES: dict[ObjectKey, dict[str, Any]] = {
    ObjectKey("Gateway", "default", "a"): {
        "conditions": [{"type": "Accepted", "status": "True"}, {"type": "Programmed", "status": "True"}]
    },
    ObjectKey("Gateway", "default", "b"): {
        "conditions": [{"type": "Accepted", "status": "True"}, {"type": "Programmed", "status": "False"}]
    },
    ObjectKey("HTTPRoute", "default", "r"): {
        "parents": [
            {
                "controllerName": "weir.dev/gateway-controller",
                "conditions": [{"type": "Accepted", "status": "True"}],
            },
            {
                "controllerName": "weir.dev/gateway-controller",
                "conditions": [{"type": "Accepted", "status": "False"}],
            },
            {
                "controllerName": "someone.else/controller",
                "conditions": [{"type": "Accepted", "status": "False"}],
            },
        ]
    },
}


async def test_control_plane_page() -> None:
    problems = [
        Problem("error", "a.yaml", 1, None, None, "bad"),
        Problem("warning", "b.yaml", 2, None, None, "w"),
    ]
    telemetry = Telemetry(_sources(None, STATUSES, problems))
    telemetry.translation(0.2, failed=False)
    telemetry.translation(0.004, failed=True)
    extra = MetricFamily("weir_mcp_tool_calls_total", "counter", "calls", ())
    telemetry.add_collector(lambda: [extra])
    code, page = await telemetry.scrape()
    assert code == 200 and page.content_type == CONTENT_TYPE
    values = values_of(page.body)
    expected = {
        ("weir_build_info", (("version", __version__),)): 1,
        ("weir_translations_total", ()): 2,
        ("weir_translation_failures_total", ()): 1,
        ("weir_translation_duration_seconds_count", ()): 2,
        ("weir_translation_duration_seconds_bucket", (("le", "0.005"),)): 1,
        ("weir_config_problems", (("severity", "error"),)): 1,
        ("weir_config_problems", (("severity", "warning"),)): 1,
        ("weir_envoy_ready", ()): 0,
        ("weir_envoy_restarts_total", (("reason", "exited"),)): 0,
        ("weir_envoy_restarts_total", (("reason", "not_serving"),)): 0,
        ("weir_envoy_config_accepted", ()): 1,
        ("weir_managed_objects", (("kind", "Gateway"),)): 2,
        ("weir_managed_objects", (("kind", "HTTPRoute"),)): 1,
        ("weir_gateways_programmed", ()): 1,
        ("weir_status_conditions", (("kind", "HTTPRoute"), ("status", "False"), ("type", "Accepted"))): 1,
        ("weir_status_conditions", (("kind", "HTTPRoute"), ("status", "True"), ("type", "Accepted"))): 1,
        ("weir_status_conditions", (("kind", "Gateway"), ("status", "False"), ("type", "Programmed"))): 1,
        # Envoy does not run: its stats are missing, and the page says so.
        ("weir_envoy_stats_up", ()): 0,
    }
    assert {key: values.get(key) for key in expected} == expected
    assert "# TYPE weir_mcp_tool_calls_total counter" in page.body

    assert not any(name.startswith("weir_backend_") for (name, _) in values)
    # Counts over statuses are kept until the statuses change.
    assert (await telemetry.scrape())[1].body == page.body


async def test_admin_server_answers_metrics_as_text() -> None:
    telemetry = Telemetry(_sources(None, STATUSES, []))
    admin = AdminServer(
        "127.0.0.1", 0, {"/metrics": telemetry.scrape, "/healthz": lambda: (200, {"ok": True})}
    )
    await admin.start()
    try:
        async with httpx.AsyncClient() as client:
            response = await client.get(f"http://127.0.0.1:{admin.port}/metrics")
            health = await client.get(f"http://127.0.0.1:{admin.port}/healthz")
    finally:
        await admin.stop()
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert values_of(response.text)[("weir_gateways_programmed", ())] == 1
    assert health.headers["content-type"] == "application/json" and health.json() == {"ok": True}
