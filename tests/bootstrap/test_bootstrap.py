"""Envoy's bootstrap (weir.bootstrap): delta ADS on the unix socket, and the statistics Envoy keeps.

The stats checks run the real Envoy on weir's own resources for an XBackend
(TLS, egress guard) and a Service, once with every stat and once with weir's
inclusion list, and compare the stat names Envoy reports.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
import re2

from weir import ir
from weir.bootstrap import STATS_KEPT, bootstrap, keeps, with_admin_socket
from weir.envoy import EnvoyProcess
from weir.envoy_stats import EGRESS_REFUSED_STAT, ENVOY_STATS_USED
from weir.testkit import make_ca
from weir.xds.cache import BuildCache
from weir.xds.server import AdsServer
from weir.xds.snapshot import Snapshot, snapshot_version

pytestmark = pytest.mark.timeout(60)


def test_delta_ads_over_the_unix_socket() -> None:
    config = bootstrap(node_id="n", ads_socket="/tmp/x.sock")
    ads = config["dynamic_resources"]["ads_config"]
    assert ads["api_type"] == "DELTA_GRPC" and ads["transport_api_version"] == "V3"
    (xds,) = config["static_resources"]["clusters"]
    assert xds["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"] == {
        "pipe": {"path": "/tmp/x.sock"}
    }
    assert "admin" not in config  # only ever on a unix socket (with_admin_socket)
    admin = with_admin_socket(config, "/tmp/run/admin.sock")["admin"]
    assert admin == {"address": {"pipe": {"path": "/tmp/run/admin.sock", "mode": 0o600}}}


def test_the_inclusion_list_is_made_of_cheap_matchers() -> None:
    config = bootstrap(node_id="n", ads_socket="/tmp/x.sock")
    patterns = config["stats_config"]["stats_matcher"]["inclusion_list"]["patterns"]
    assert patterns == [{kind: value} for kind, value in STATS_KEPT]
    # Envoy matches every stat name it creates against the list: no regular expressions.
    assert {kind for kind, _ in STATS_KEPT} == {"prefix", "suffix"}
    assert all(value.endswith(".") for kind, value in STATS_KEPT if kind == "prefix")  # matched unrendered
    assert config["deferred_stat_options"] == {"enable_deferred_creation_stats": True}
    custom = bootstrap(node_id="n", ads_socket="/tmp/x.sock", stats=(("prefix", "server."),))
    assert custom["stats_config"]["stats_matcher"]["inclusion_list"]["patterns"] == [{"prefix": "server."}]


@pytest.mark.parametrize(
    ("name", "kept"),
    [
        ("cluster.xbackend/default/api.upstream_rq_2xx", True),
        ("cluster.xbackend/default/api.ssl.fail_verify_san", True),
        ("cluster.xbackend/default/api.rbac.denied", True),
        ("cluster.service/default/web/80.upstream_cx_connect_fail", True),
        ("http.127.0.0.1_8080.downstream_rq_5xx", True),
        ("server.memory_allocated", True),
        ("cluster.xbackend/default/api.upstream_cx_rx_bytes_total", False),
        ("cluster.xbackend/default/api.lb_healthy_panic", False),
        ("http.127.0.0.1_8080.downstream_cx_total", False),
        # What a graceful stop waits for.
        ("listener.127.0.0.1_8080.downstream_cx_active", True),
        ("http.127.0.0.1_8080.downstream_rq_active", True),
        ("listener.127.0.0.1_8080.downstream_cx_destroy", False),
        # The egress guard's refusals (weir.telemetry.EGRESS_REFUSED_STAT).
        ("listener.envoy_internal_weir-egress-denied.downstream_cx_total", True),
    ],
)
def test_keeps(name: str, kept: bool) -> None:
    assert keeps(name) is kept


# --------------------------------------------------------------------------
# Against the real Envoy
# --------------------------------------------------------------------------


def _ir(ca_pem: str) -> ir.IR:
    api = ir.Upstream(
        "xbackend/default/api",
        ir.StaticEndpoints((ir.Endpoint("127.0.0.1", 9),)),
        tls=ir.UpstreamTLS(
            "api.example.com", (ir.SubjectAltName("DNS", "api.example.com"),), trusted_ca="ca"
        ),
        host_header="api.example.com",
        egress_guard=ir.EgressGuard(("127.0.0.66/32",)),
    )
    web = ir.Upstream("service/default/web/80", ir.StaticEndpoints((ir.Endpoint("127.0.0.1", 9),)))
    routes = tuple(
        ir.Route(
            f"default/r/rule/{i}/match/0",
            ir.RouteMatch(ir.PathMatch("PathPrefix", f"/{u.name.split('/')[2]}")),
            ir.Forward((ir.WeightedBackend(u.name, 1),)),
        )
        for i, u in enumerate((api, web))
    )
    listener = ir.Listener("127.0.0.1:0", "127.0.0.1", 0, (ir.VirtualHost("any", ("*",), routes),))
    return ir.IR(listeners=(listener,), upstreams=(api, web), secrets=(ir.TrustedCA("ca", ca_pem),))


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A private folder with a short path (unix socket paths: 107 bytes)."""
    directory = Path(tempfile.mkdtemp(prefix="weir-", dir="/tmp"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
async def ads(short_tmp: Path) -> AsyncIterator[AdsServer]:
    server = AdsServer(str(short_tmp / "xds.sock"))
    await server.start()
    resources = BuildCache().build(_ir(make_ca("stats CA").cert_pem))
    server.set_snapshot(Snapshot(snapshot_version(resources), resources))
    try:
        yield server
    finally:
        await server.stop(grace=None)


async def _stat_names(ads: AdsServer, run_dir: Path, *, every_stat: bool) -> set[str]:
    config = bootstrap(node_id=run_dir.name, ads_socket=ads.socket_path)
    if every_stat:
        del config["stats_config"], config["deferred_stat_options"]
    envoy = EnvoyProcess(config, run_dir=run_dir, concurrency=1)
    await envoy.start()
    try:
        assert ads.snapshot is not None
        assert (await ads.wait_acked(ads.snapshot.version, timeout=20)).acked
        # One request to each upstream (both fail to connect: port 9), so traffic stats exist.
        listeners = json.loads((await envoy.admin.get("/listeners?format=json"))[1])
        port = listeners["listener_statuses"][0]["local_address"]["socket_address"]["port_value"]
        async with httpx.AsyncClient(timeout=5) as client:
            for path in ("/api", "/web"):
                await client.get(f"http://127.0.0.1:{port}{path}")
        data = json.loads((await envoy.admin.get("/stats?format=json", timeout=5))[1])
    finally:
        await envoy.stop()
    names = {entry["name"] for entry in data["stats"] if "name" in entry}
    for entry in data["stats"]:
        names |= {h["name"] for h in entry.get("histograms", {}).get("computed_quantiles", [])}
    return names


async def test_envoy_keeps_every_stat_weir_reads_and_little_else(ads: AdsServer, short_tmp: Path) -> None:
    every = await _stat_names(ads, short_tmp / "every", every_stat=True)
    kept = await _stat_names(ads, short_tmp / "kept", every_stat=False)
    clusters = {n.split(".", 1)[1].rsplit(".", 1)[0] for n in every if n.startswith("cluster.") and "/" in n}
    assert {"xbackend/default/api", "service/default/web/80"} <= {c.split(".")[0] for c in clusters}

    # Some counters appear only at their first use (a response class, a failed verification):
    # every name weir reads is checked, whether this run made it appear or not.
    read = {n for n in every if any(re2.fullmatch(p, n) for p in ENVOY_STATS_USED)}
    for cluster in ("xbackend/default/api", "service/default/web/80"):
        read |= {f"cluster.{cluster}.upstream_rq_{c}xx" for c in range(1, 6)}
        read |= {f"cluster.{cluster}.{s}" for s in ("ssl.fail_verify_error", "ssl.fail_verify_san")}
    read.add(EGRESS_REFUSED_STAT)
    read |= {
        f"http.{p}.downstream_rq_{c}xx"
        for p in {n.split(".")[1] for n in every if n.startswith("http.")}
        for c in range(1, 6)
    }
    assert all(any(re2.fullmatch(p, n) for p in ENVOY_STATS_USED) for n in read)
    assert [n for n in sorted(read) if not keeps(n)] == []

    # weir.bootstrap.keeps says what Envoy does.
    assert [n for n in sorted(kept) if not keeps(n)] == []
    assert "cluster.xbackend/default/api.upstream_cx_connect_fail" in kept
    assert "cluster.xbackend/default/api.upstream_cx_total" in kept
    # And it is a small part of Envoy's default.
    per_cluster = {n for n in every if n.startswith("cluster.xbackend/default/api.")}
    assert len({n for n in kept if n.startswith("cluster.xbackend/default/api.")}) * 5 < len(per_cluster)
    print(f"\nstats: {len(every)} by default, {len(kept)} kept")
    assert len(kept) * 3 < len(every), json.dumps(sorted(kept))
