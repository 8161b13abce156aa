"""weir.xds.cache.BuildCache: the same resources as weir.xds.build.build, rebuilding only what changed."""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any

import pytest
from goldens import golden_names, load_ir

from weir import ir
from weir.xds import build as xds_build
from weir.xds import cache as xds_cache
from weir.xds import listeners
from weir.xds.cache import BuildCache
from weir.xds.snapshot import CLUSTER, LISTENER, PUSH_ORDER, ROUTE, Resource, snapshot_version


def _serialised(resources: dict[str, dict[str, Any]]) -> dict[str, list[tuple[str, bytes]]]:
    return {
        type_url: [(name, message.SerializeToString(deterministic=True)) for name, message in by_name.items()]
        for type_url, by_name in resources.items()
    }


def _values(resources: dict[str, dict[str, Resource]]) -> dict[str, list[tuple[str, bytes]]]:
    return {
        type_url: [(name, r.value) for name, r in by_name.items()] for type_url, by_name in resources.items()
    }


@pytest.mark.parametrize("name", golden_names())
def test_equals_build_on_every_golden(name: str) -> None:
    source = load_ir(name)
    cache = BuildCache()
    first = cache.build(source)
    assert _values(first) == _serialised(xds_build.build(source))
    for by_name in first.values():
        for resource_name, resource in by_name.items():
            assert resource.name == resource_name
            assert resource.version == Resource.of(resource.message(), resource_name).version
    # Again, from an equal IR that shares no object with the first: every resource reused.
    misses = {kind: m for kind, (_, m, _) in cache.stats().items()}
    again = cache.build(pickle.loads(pickle.dumps(source)))
    assert {kind: m for kind, (_, m, _) in cache.stats().items()} == misses
    assert all(again[t][n] is first[t][n] for t in PUSH_ORDER for n in first[t])


def test_equals_build_on_everything_at_once(merged_ir: ir.IR) -> None:
    assert _values(BuildCache().build(merged_ir)) == _serialised(xds_build.build(merged_ir))


def _upstream(i: int, host: str | None = None) -> ir.Upstream:
    hostname = host or f"x{i}.example.com"
    return ir.Upstream(
        f"xbackend/default/x{i}",
        ir.DnsName(hostname, 443),
        host_header=hostname,
        egress_guard=ir.EgressGuard(),
    )


def _route(i: int, path: str | None = None) -> ir.Route:
    return ir.Route(
        f"default/r{i}/rule/0/match/0",
        ir.RouteMatch(ir.PathMatch("PathPrefix", path or f"/r{i}")),
        ir.Forward((ir.WeightedBackend(f"xbackend/default/x{i}", 1),)),
    )


def _ir(routes: dict[int, ir.Route], upstreams: dict[int, ir.Upstream], listeners: int = 2) -> ir.IR:
    """Route ``i`` on listener ``i % listeners``, each listener one virtual host."""
    return ir.IR(
        listeners=tuple(
            ir.Listener(
                f"127.0.0.1:{8000 + k}",
                "127.0.0.1",
                8000 + k,
                (
                    ir.VirtualHost(
                        "any", ("*",), tuple(r for i, r in sorted(routes.items()) if i % listeners == k)
                    ),
                ),
            )
            for k in range(listeners)
        ),
        upstreams=tuple(u for _, u in sorted(upstreams.items())),
    )


def _misses(cache: BuildCache) -> dict[str, int]:
    return {kind: misses for kind, (_, misses, _) in cache.stats().items()}


def test_an_edit_rebuilds_only_what_it_touches() -> None:
    routes = {i: _route(i) for i in range(10)}
    upstreams = {i: _upstream(i) for i in range(10)}
    cache = BuildCache()
    before = cache.build(_ir(routes, upstreams))
    start = _misses(cache)

    # A new path on route 3 (listener 1): one route, one listener's part.
    routes[3] = _route(3, "/elsewhere")
    after = cache.build(_ir(routes, upstreams))
    misses = _misses(cache)
    assert misses["routes"] - start["routes"] == 1
    assert misses["listeners"] - start["listeners"] == 1
    assert misses["clusters"] == start["clusters"]
    assert after[ROUTE]["127.0.0.1:8000"] is before[ROUTE]["127.0.0.1:8000"]
    assert after[ROUTE]["127.0.0.1:8001"].version != before[ROUTE]["127.0.0.1:8001"].version
    assert all(after[CLUSTER][n] is before[CLUSTER][n] for n in before[CLUSTER])
    assert _values(after) == _serialised(xds_build.build(_ir(routes, upstreams)))

    # A new hostname on XBackend 4: its cluster is made again, and its route (Host rewrite) on
    # listener 0. The cluster (EDS) does not name the host: it is the same resource; the new
    # name's addresses come as its assignment (weir.external_endpoints).
    upstreams[4] = _upstream(4, "elsewhere.example.com")
    start = _misses(cache)
    again = cache.build(_ir(routes, upstreams))
    misses = _misses(cache)
    assert (misses["clusters"] - start["clusters"], misses["routes"] - start["routes"]) == (1, 1)
    assert again[CLUSTER]["xbackend/default/x4"].version == after[CLUSTER]["xbackend/default/x4"].version
    assert again[ROUTE]["127.0.0.1:8001"] is after[ROUTE]["127.0.0.1:8001"]
    assert again[LISTENER] == after[LISTENER]
    assert _values(again) == _serialised(xds_build.build(_ir(routes, upstreams)))


def test_holds_only_what_the_last_build_used() -> None:
    routes = {i: _route(i) for i in range(10)}
    upstreams = {i: _upstream(i) for i in range(10)}
    cache = BuildCache()
    cache.build(_ir(routes, upstreams))
    assert {kind: held for kind, (_, _, held) in cache.stats().items()} == {
        "clusters": 10,
        "secrets": 0,
        "listeners": 2,
        "routes": 10,
    }
    small = {i: r for i, r in routes.items() if i < 4}
    cache.build(_ir(small, {i: u for i, u in upstreams.items() if i < 4}, listeners=1))
    held = {kind: held for kind, (_, _, held) in cache.stats().items()}
    assert (held["clusters"], held["listeners"], held["routes"]) == (4, 1, 4)


def test_a_broken_ir_is_refused_and_the_cache_survives() -> None:
    routes = {i: _route(i) for i in range(4)}
    upstreams = {i: _upstream(i) for i in range(4)}
    cache = BuildCache()
    good = cache.build(_ir(routes, upstreams))
    broken = _ir({**routes, 9: _route(9)}, upstreams)  # route 9 names an upstream that does not exist
    with pytest.raises(ValueError, match="unknown upstream"):
        cache.build(broken)
    start = _misses(cache)
    again = cache.build(_ir(routes, upstreams))
    assert _misses(cache) == start
    assert all(again[t][n] is good[t][n] for t in PUSH_ORDER for n in good[t])


def test_every_upstream_a_route_reads_is_a_dependency() -> None:
    """A request mirror reads its upstream (through ``upstreams.get``): a change to it rebuilds the route."""
    mirrored = dataclasses.replace(
        _route(1),
        action=ir.Forward(
            (ir.WeightedBackend("xbackend/default/x1", 1),), mirrors=(ir.Mirror("xbackend/default/x2"),)
        ),
    )
    upstreams = {1: _upstream(1), 2: _upstream(2)}
    cache = BuildCache()
    before = cache.build(_ir({1: mirrored}, upstreams, listeners=1))
    upstreams[2] = _upstream(2, "elsewhere.example.com")
    after = cache.build(_ir({1: mirrored}, upstreams, listeners=1))
    assert after[ROUTE]["127.0.0.1:8000"].version != before[ROUTE]["127.0.0.1:8000"].version
    assert _values(after) == _serialised(xds_build.build(_ir({1: mirrored}, upstreams, listeners=1)))


def test_an_unchanged_type_is_the_same_mapping_and_keeps_its_version() -> None:
    routes = {i: _route(i) for i in range(4)}
    upstreams = {i: _upstream(i) for i in range(4)}
    cache = BuildCache()
    first = cache.build(_ir(routes, upstreams))
    version = snapshot_version(first)
    routes[1] = _route(1, "/moved")
    second = cache.build(_ir(routes, upstreams))
    assert second[CLUSTER] is first[CLUSTER] and second[LISTENER] is first[LISTENER]
    assert second[ROUTE] is not first[ROUTE]
    assert snapshot_version(second) != version
    # The version is a function of the content, however the mappings were made.
    copied = {t: dict(by_name) for t, by_name in second.items()}
    assert snapshot_version(copied) == snapshot_version(second)
    routes[1] = _route(1)
    assert snapshot_version(cache.build(_ir(routes, upstreams))) == version


def _host_ir(routes: dict[int, ir.Route], upstreams: dict[int, ir.Upstream]) -> ir.IR:
    """One listener, a virtual host per route (``r<i>.example``): the benchmark's host shape."""
    vhosts = tuple(
        ir.VirtualHost(f"127.0.0.1:8000/r{i}.example", (f"r{i}.example",), (route,))
        for i, route in sorted(routes.items())
    )
    return ir.IR(
        listeners=(ir.Listener("127.0.0.1:8000", "127.0.0.1", 8000, vhosts),),
        upstreams=tuple(u for _, u in sorted(upstreams.items())),
    )


def test_one_virtual_host_of_many_edited_is_the_only_one_made_again() -> None:
    routes = {i: _route(i) for i in range(50)}
    upstreams = {i: _upstream(i) for i in range(50)}
    cache = BuildCache()
    cache.build(_host_ir(routes, upstreams))
    start = _misses(cache)
    routes[7] = _route(7, "/elsewhere")
    upstreams[9] = _upstream(9, "elsewhere.example.com")
    after = cache.build(_host_ir(routes, upstreams))
    misses = _misses(cache)
    # Route 7 (its path) and route 9 (its upstream's Host rewrite); one cluster; one listener.
    assert misses["routes"] - start["routes"] == 2
    assert misses["clusters"] - start["clusters"] == 1
    assert _values(after) == _serialised(xds_build.build(_host_ir(routes, upstreams)))
    # A virtual host gone and one new (a route's hostname renamed).
    del routes[3]
    routes[77] = _route(3)
    again = cache.build(_host_ir(routes, upstreams))
    assert _values(again) == _serialised(xds_build.build(_host_ir(routes, upstreams)))


def test_parts_made_in_a_failed_build_are_not_reused() -> None:
    """A build that fails after making parts from an upstream's new value: the next build, with the
    old value again, must not take those parts for the old value's."""
    routes = {i: _route(i) for i in range(4)}
    upstreams = {i: _upstream(i) for i in range(4)}
    cache = BuildCache()
    cache.build(_host_ir(routes, upstreams))
    changed = {**upstreams, 1: _upstream(1, "elsewhere.example.com")}
    broken = _host_ir({**routes, 9: _route(9)}, changed)  # route 9's upstream does not exist
    with pytest.raises(ValueError, match="unknown upstream"):
        cache.build(broken)
    for source in (_host_ir(routes, upstreams), _host_ir(routes, changed), _host_ir(routes, upstreams)):
        assert _values(cache.build(source)) == _serialised(xds_build.build(source))


def test_a_tls_socket_keeps_its_listener_when_only_virtual_hosts_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An HTTPS server's virtual hosts go by RDS: editing them remakes its route configuration, not
    the socket's listener of one filter chain per server (1,000 on a socket of 1,000 listeners);
    a server's certificates do remake it."""
    made: list[str] = []

    def counted(listener: ir.TlsListener, *args: Any) -> Any:
        made.append(listener.name)
        return listeners.tls_listener(listener, *args)

    for module in (xds_build, xds_cache):
        monkeypatch.setattr(module, "tls_listener", counted, raising=False)
    source = load_ir("tls_listeners")
    at, tls = next((i, lst) for i, lst in enumerate(source.listeners) if isinstance(lst, ir.TlsListener))
    server = next(s for s in tls.https if s.virtual_hosts)
    cache = BuildCache()
    first = cache.build(source)

    def with_server(changed: ir.HttpsServer) -> ir.IR:
        https = tuple(changed if s.name == server.name else s for s in tls.https)
        listeners = list(source.listeners)
        listeners[at] = dataclasses.replace(tls, https=https)
        return dataclasses.replace(source, listeners=tuple(listeners))

    assert made.count(tls.name) == 1
    edited = with_server(dataclasses.replace(server, virtual_hosts=server.virtual_hosts[:-1]))
    second = cache.build(edited)
    assert made.count(tls.name) == 1
    assert _values(second) == _serialised(xds_build.build(edited))
    assert second[LISTENER][tls.name] is first[LISTENER][tls.name]
    assert second[ROUTE][server.name].value != first[ROUTE][server.name].value

    recertified = with_server(dataclasses.replace(server, certificates=server.certificates[:1] * 2))
    third = cache.build(recertified)
    assert made.count(tls.name) == 2
    assert _values(third) == _serialised(xds_build.build(recertified))
    assert third[LISTENER][tls.name].value != second[LISTENER][tls.name].value
