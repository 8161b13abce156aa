"""How long Envoy takes to load weir's configuration for N routes, and how much memory it needs.

Usage::

    python bench/envoy_load.py --n 10000 --rounds 3 --json bench/results/envoy-load.json
    python bench/envoy_load.py --n 10000 --variants kept-stats,all-stats

The configuration is ``bench/controlplane.py``'s workload (N HTTPRoutes, each
with its own XBackend, on one Gateway with 4 listeners), translated and built
once in this process and served by weir's own ADS server
(:class:`weir.xds.server.AdsServer`) to a fresh Envoy started by
:class:`weir.envoy.EnvoyProcess` with weir's bootstrap, modified per variant:

* ``weir``: weir's bootstrap as it is: the stats inclusion list
  (``weir.bootstrap.STATS_KEPT``) and deferred creation of cluster traffic
  stats (``deferred_stat_options``);
* ``kept-eager``: the inclusion list, every kept stat created with its cluster;
* ``regex-stats``: the same, with the inclusion list written as RE2 patterns
  (what a list of regular expressions costs);
* ``all-deferred``: every stat, traffic stats deferred;
* ``all-stats``: every stat, created with its cluster (Envoy's defaults);
* ``no-stats``: ``stats_matcher.reject_all`` (the floor);
* ``weir-dns``: weir's configuration with every EDS cluster of an external
  hostname made the DNS cluster weir built before it resolved names itself
  (Envoy's DNS cluster extension, c-ares with the same resolvers): what
  resolving in weir saves Envoy at start (issue 14);
* ``weir+concurrency-1``: weir's bootstrap, one Envoy worker thread instead of two;
* ``weir-upstream-filters``: weir's configuration without the clusters' upstream HTTP
  filters (egress guard, header removal, codec): what that chain costs Envoy to load
  (an experiment: weir never serves this);

``weir`` serves each external hostname's assignment (EDS, the address the
DNS responder gives, as weir's resolver would) with the clusters; weir's own
lookups are not part of Envoy's start (they run in weir, 256 at a time).

For each: Envoy start → ready (``/ready``), → every type ACKed (the whole
configuration accepted; CDS is ACKed once every cluster has warmed, DNS
included), → the last route answered through Envoy, and Envoy's RSS then.
Variants are interleaved within each round; the report gives medians and
min-max. Everything runs on 127.0.0.1 (upstream: nginx if installed, else
the testkit's; a DNS responder in its own process) and every process started
is stopped by its PID.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import controlplane as cp
import controlplane_shapes as shapes

VARIANTS = ("weir", "kept-eager", "regex-stats", "all-deferred", "all-stats", "no-stats")
#: Variants that change the resources as well (not only the bootstrap).
RESOURCE_VARIANTS = ("weir-dns", "weir+concurrency-1", "weir-upstream-filters")


def variant_bootstrap(config: dict[str, Any], variant: str) -> dict[str, Any]:
    from weir.bootstrap import STATS_KEPT

    config = dict(config)
    if variant in ("weir", *RESOURCE_VARIANTS):
        return config
    if variant not in VARIANTS:
        raise SystemExit(f"unknown variant {variant!r}; known: {', '.join(VARIANTS + RESOURCE_VARIANTS)}")
    if variant != "all-deferred":
        config.pop("deferred_stat_options", None)
    if variant in ("all-stats", "all-deferred"):
        config.pop("stats_config", None)
    elif variant == "no-stats":
        config["stats_config"] = {"stats_matcher": {"reject_all": True}}
    elif variant == "regex-stats":
        patterns = [
            {"safe_regex": {"regex": (".*" + re.escape(v)) if kind == "suffix" else (re.escape(v) + ".*")}}
            for kind, v in STATS_KEPT
        ]
        config["stats_config"] = {"stats_matcher": {"inclusion_list": {"patterns": patterns}}}
    return config


def as_dns_clusters(snapshot: Any, upstreams: dict[str, Any], dns: Any) -> Any:
    """``snapshot`` with the EDS clusters of external hostnames made DNS clusters, as weir built them
    before it resolved names itself (and without their assignments)."""
    from envoy.config.cluster.v3 import cluster_pb2
    from envoy.extensions.clusters.common.dns.v3 import dns_pb2
    from envoy.extensions.clusters.dns.v3 import dns_cluster_pb2
    from envoy.extensions.network.dns_resolver.cares.v3 import cares_dns_resolver_pb2
    from google.protobuf import duration_pb2

    from weir.xds.common import socket_address
    from weir.xds.snapshot import CLUSTER, ENDPOINT, Resource, Snapshot

    resolver = cares_dns_resolver_pb2.CaresDnsResolverConfig()
    resolver.query_timeout_seconds.value = max(1, dns.lookup_timeout_ms // 1000)
    resolver.query_tries.value = 1
    resolver.dns_resolver_options.no_default_search_domain = True
    resolver.resolvers.extend(socket_address(host, port) for host, port in dns.resolvers)
    cluster_config = dns_cluster_pb2.DnsCluster(
        dns_lookup_family=dns_pb2.V4_PREFERRED,
        respect_dns_ttl=True,
        dns_failure_refresh_rate=dns_cluster_pb2.DnsCluster.RefreshRate(
            base_interval=duration_pb2.Duration(nanos=250_000_000),
            max_interval=duration_pb2.Duration(seconds=5),
        ),
    )
    cluster_config.typed_dns_resolver_config.name = "envoy.network.dns_resolver.cares"
    cluster_config.typed_dns_resolver_config.typed_config.Pack(resolver)
    clusters = {}
    for name, resource in snapshot.of_type(CLUSTER).items():
        message = cluster_pb2.Cluster.FromString(resource.value)
        if message.type == cluster_pb2.Cluster.EDS:
            destination = upstreams[name].destination
            message.ClearField("type")
            message.ClearField("eds_cluster_config")
            message.cluster_type.name = "envoy.cluster.dns"
            message.cluster_type.typed_config.Pack(cluster_config)
            message.load_assignment.cluster_name = name
            endpoint = message.load_assignment.endpoints.add().lb_endpoints.add().endpoint
            endpoint.address.CopyFrom(socket_address(destination.hostname, destination.port))
        clusters[name] = Resource.of(message, name)
    return Snapshot(snapshot.version + "-dns", {**snapshot.resources, CLUSTER: clusters, ENDPOINT: {}})


def with_assignments(resources: dict[str, Any], upstreams: dict[str, Any], address: str) -> dict[str, Any]:
    """``resources`` with the assignment weir serves for each external hostname resolving to ``address``."""
    from weir import ir
    from weir.xds.endpoints import load_assignment
    from weir.xds.snapshot import ENDPOINT, Resource

    assignments = {
        name: Resource.of(load_assignment(name, u.destination.hostname, u.destination.port, [address]), name)
        for name, u in sorted(upstreams.items())
        if isinstance(u.destination, ir.DnsName)
    }
    return {**resources, ENDPOINT: assignments}


def without(snapshot: Any, variant: str) -> Any:
    """``snapshot`` with its clusters' upstream HTTP filters removed."""
    from envoy.config.cluster.v3 import cluster_pb2
    from envoy.extensions.upstreams.http.v3 import http_protocol_options_pb2

    from weir.xds.snapshot import CLUSTER, Resource, Snapshot

    key = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
    clusters = {}
    for name, resource in snapshot.of_type(CLUSTER).items():
        message = cluster_pb2.Cluster.FromString(resource.value)
        if variant == "weir-upstream-filters" and key in message.typed_extension_protocol_options:
            options = http_protocol_options_pb2.HttpProtocolOptions()
            message.typed_extension_protocol_options[key].Unpack(options)
            options.ClearField("http_filters")
            message.typed_extension_protocol_options[key].Pack(options)
        clusters[name] = Resource.of(message, name)
    return Snapshot(f"{snapshot.version}-{variant}", {**snapshot.resources, CLUSTER: clusters})


async def measure(
    snapshot: Any, variant: str, workdir: Path, probe: Any, timeout: float, dns_clusters: Any
) -> dict[str, float]:
    from weir.envoy import EnvoyProcess, bootstrap
    from weir.xds.server import AdsServer

    run = Path(tempfile.mkdtemp(prefix="el-", dir="/tmp"))
    ads = AdsServer(str(run / "xds.sock"))
    await ads.start()
    config = variant_bootstrap(bootstrap(node_id="bench", ads_socket=ads.socket_path), variant)
    concurrency = None
    if variant == "weir-dns":
        snapshot = dns_clusters
    elif variant == "weir+concurrency-1":
        concurrency = 1
    elif variant == "weir-upstream-filters":
        snapshot = without(snapshot, variant)
    ads.set_snapshot(snapshot)
    envoy = EnvoyProcess(config, run_dir=run / "envoy", ready_timeout=timeout, concurrency=concurrency)
    prober = shapes.Prober()
    out: dict[str, float] = {}
    try:
        started = time.perf_counter()
        await envoy.start()
        out["ready_s"] = time.perf_counter() - started
        result = await ads.wait_acked(snapshot.version, timeout=timeout)
        if not result.acked:
            raise RuntimeError(f"{variant}: not accepted: {result}")
        out["acked_s"] = time.perf_counter() - started
        deadline = time.perf_counter() + timeout
        while not prober.answers(probe):
            if time.perf_counter() > deadline:
                raise RuntimeError(f"{variant}: {probe.path} not served")
            await asyncio.sleep(0.01)
        out["served_s"] = time.perf_counter() - started
        await asyncio.sleep(0.5)  # let Envoy settle before reading its memory
        out["rss_mib"] = cp.rss_mib(envoy.pid)[0]
    finally:
        prober.close()
        await envoy.stop()
        await ads.stop(grace=None)
        shutil.rmtree(run, ignore_errors=True)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--timeout", type=float, default=120)
    parser.add_argument(
        "--json", type=Path, help="write results here (controlplane.py reports bench/results/envoy-load.json)"
    )
    opts = parser.parse_args()
    variants = [v for v in opts.variants.split(",") if v]
    for variant in variants:
        variant_bootstrap({}, variant)  # refuses unknown ones before anything starts

    from weir.providers.files.provider import FilesProvider
    from weir.translate import Settings, translate
    from weir.xds.cache import BuildCache
    from weir.xds.snapshot import Snapshot, snapshot_version

    procs = cp.Processes()
    workdir = Path(tempfile.mkdtemp(prefix="weir-bench-el-"))
    results: dict[str, list[dict[str, float]]] = {v: [] for v in variants}
    try:
        _, upstream_port = cp.start_upstream(procs, workdir, cp.free_ports(1)[0])
        dns_port = cp.start_dns(procs)
        shape = shapes.SHAPES["path"]
        ports = cp.free_ports(shapes.PATH_LISTENERS)
        folder = workdir / "manifests"
        shape.generate(folder, opts.n, ports, upstream_port, shapes.make_pki(workdir))
        settings = Settings(dns_resolvers=(("127.0.0.1", dns_port),), egress_denied_cidrs=(cp.DENIED,))
        ir_ = translate(FilesProvider([str(folder)]).load().resources, settings).ir
        upstreams = {u.name: u for u in ir_.upstreams}
        resources = with_assignments(BuildCache().build(ir_), upstreams, "127.0.0.1")
        snapshot = Snapshot(snapshot_version(resources), resources)
        dns_clusters = as_dns_clusters(snapshot, upstreams, ir_.dns)
        last = opts.n - 1
        probe = shape.probe(last, opts.n, ports)
        for round_ in range(opts.rounds):
            order = variants[round_ % len(variants) :] + variants[: round_ % len(variants)]
            for variant in order:
                print(f"round {round_ + 1}: {variant}...", file=sys.stderr, flush=True)
                results[variant].append(
                    asyncio.run(measure(snapshot, variant, workdir, probe, opts.timeout, dns_clusters))
                )
    finally:
        procs.stop_all()
        shutil.rmtree(workdir, ignore_errors=True)

    cores, rounds = os.cpu_count(), opts.rounds
    print(f"Envoy loading weir's configuration for N = {opts.n:,} ({cores} cores, {rounds} rounds)")
    print(f"{'variant':<13} {'ready':>18} {'all ACKed':>18} {'last route served':>18} {'Envoy RSS':>22}")
    for variant, runs in results.items():

        def cell(key: str, unit: str = "s", runs: list[dict[str, float]] = runs) -> str:
            values = [r[key] for r in runs]
            fmt = "{:.2f}" if unit == "s" else "{:.0f}"
            return (
                f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}-"
                f"{fmt.format(max(values))}) {unit}"
            )

        print(
            f"{variant:<13} {cell('ready_s'):>18} {cell('acked_s'):>18} {cell('served_s'):>18} "
            f"{cell('rss_mib', 'MiB'):>22}"
        )
    if opts.json:
        info = {"n": opts.n, "rounds": opts.rounds, "date": time.strftime("%Y-%m-%d"), "cores": cores}
        opts.json.write_text(json.dumps({**info, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
