"""The build cache: :func:`weir.xds.build.build`, serialised, rebuilding only what changed.

A controller builds the whole IR again after every change, but one edited
route changes one route configuration, one XBackend one cluster. The cache
remembers, per IR value (the IR is made of frozen, hashable dataclasses), the
Envoy resource built from it, serialised once as a
:class:`~weir.xds.snapshot.Resource`:

* a cluster per ``(upstream, dns settings)``, an SDS secret per secret;
* per listener, its Envoy listener and route configurations, valid while
  the upstreams and secrets they read are unchanged: the parts record which
  entries of ``upstreams``/``secrets`` they looked at, and a cached part is
  reused only if each of those is still the same (identity, else equality);
* per route, the Envoy route, with the same rule, so that a route
  configuration changed by one edit is assembled from the routes that did
  not change instead of being built from scratch;
* the :data:`~weir.xds.common.TCP_EGRESS` resources, likewise.

The output equals ``build()``'s, message for message (a test compares them on
every golden IR). Bounded: after each build, entries the build did not use
are dropped, so the cache holds one configuration's worth of resources.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from weir import ir
from weir.xds import build as _build
from weir.xds.clusters import upstream_cluster
from weir.xds.routes import envoy_route, routes_field
from weir.xds.secrets import envoy_secret
from weir.xds.snapshot import Resource

_V = TypeVar("_V")
_T = TypeVar("_T")

#: What a recorded read found when the name was absent.
_ABSENT: Any = object()


class _Reads(Mapping[str, _V]):
    """A read-only view of a mapping that remembers which names were looked up, and what they held."""

    __slots__ = ("_data", "everything", "seen")

    def __init__(self, data: Mapping[str, _V]) -> None:
        self._data = data
        self.seen: dict[str, Any] = {}
        #: Iterated or measured: the reader depended on the whole mapping.
        self.everything = False

    def __getitem__(self, name: str) -> _V:
        value = self._data.get(name, _ABSENT)
        self.seen[name] = value
        if value is _ABSENT:
            raise KeyError(name)
        return value  # type: ignore[no-any-return]

    def get(self, name: str, default: Any = None) -> Any:  # Mapping's goes through KeyError
        value = self._data.get(name, _ABSENT)
        self.seen[name] = value
        return default if value is _ABSENT else value

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        value = self._data.get(name, _ABSENT)
        self.seen[name] = value
        return value is not _ABSENT

    def __iter__(self) -> Iterator[str]:
        self.everything = True
        return iter(self._data)

    def __len__(self) -> int:
        self.everything = True
        return len(self._data)


_Deps = tuple[tuple[str, Any], ...]


@dataclass(slots=True)
class _Entry(Generic[_T]):
    source: Any
    upstreams: _Deps
    secrets: _Deps
    value: _T


def _same(now: Any, then: Any, equal: dict[int, Any]) -> bool:
    """``now == then``, remembering an equality found (by ``id(now)``) for the rest of the build."""
    if now is then or equal.get(id(now)) is then:
        return True
    if now != then:
        return False
    equal[id(now)] = then
    return True


def _still(deps: _Deps, current: Mapping[str, Any], equal: dict[int, Any]) -> bool:
    """Whether every dependency in ``deps`` still holds the same (or an equal) value in ``current``.

    Read through a :class:`_Reads`, the dependencies are checked against the mapping underneath and
    recorded in bulk: a route configuration of 2,500 cached routes checks 2,500 of them.
    """
    if isinstance(current, _Reads):
        if not _still(deps, current._data, equal):
            return False
        current.seen.update(deps)
        return True
    get = current.get
    for name, value in deps:
        now = get(name, _ABSENT)
        if now is not value and not _same(now, value, equal):
            return False
    return True


class _Memo(Generic[_T]):
    """Values built from IR values, by name, each valid while its source and the upstreams and
    secrets it read are unchanged.

    Keyed by name (names are unique per kind of IR object) rather than by
    value: hashing a frozen dataclass walks all of it on every lookup, and
    comparing it with the cached one stops at the first identical field (the
    same objects, once translation reuses them). Generational: :meth:`rotate`
    keeps the entries used since the previous rotation and drops the others.

    ``equal`` is shared by the memos of one cache, and emptied after each
    build: the IR objects of this build found equal to those entries were
    built from, so that an upstream compared once (for its cluster) is not
    compared again (for each route that reads it).
    """

    def __init__(self, equal: dict[int, Any]) -> None:
        self._equal = equal
        self._old: dict[str, _Entry[_T]] = {}
        self._new: dict[str, _Entry[_T]] = {}
        self.hits = 0
        self.misses = 0

    def get(
        self,
        name: str,
        source: Any,
        upstreams: Mapping[str, ir.Upstream],
        secrets: Mapping[str, ir.Secret],
        make: Callable[[Mapping[str, ir.Upstream], Mapping[str, ir.Secret]], _T],
    ) -> _T:
        entry = self._new.get(name) or self._old.get(name)
        equal = self._equal
        if (
            entry is not None
            and _same(source, entry.source, equal)
            and (not entry.upstreams or _still(entry.upstreams, upstreams, equal))
            and (not entry.secrets or _still(entry.secrets, secrets, equal))
        ):
            self.hits += 1
        else:
            self.misses += 1
            seen_upstreams, seen_secrets = _Reads(upstreams), _Reads(secrets)
            value = make(seen_upstreams, seen_secrets)
            if seen_upstreams.everything or seen_secrets.everything:
                return value  # depends on everything: not worth keeping
            entry = _Entry(
                source, tuple(seen_upstreams.seen.items()), tuple(seen_secrets.seen.items()), value
            )
        self._new[name] = entry
        return entry.value

    def get_same(self, name: str, source: Any) -> _T | None:
        """The value of a part that read no upstreams or secrets, when built from ``source`` itself
        (the common case once translation hands over the same objects); ``None`` otherwise, and
        :meth:`get` decides. The cheap path taken 10,000 times per build for clusters."""
        entry = self._old.get(name)
        if entry is None or entry.source is not source or entry.upstreams or entry.secrets:
            return None
        self.hits += 1
        self._new[name] = entry
        return entry.value

    def rotate(self, *, keep_old: bool = False) -> None:
        """Start a new generation: keep what the last one used (and, with ``keep_old``, the rest)."""
        if keep_old:
            self._old.update(self._new)
            self._new = {}
        else:
            self._old, self._new = self._new, {}

    def __len__(self) -> int:
        return len(self._new) + sum(1 for key in self._old if key not in self._new)


_NO_SECRETS: Mapping[str, ir.Secret] = {}
_NO_UPSTREAMS: Mapping[str, ir.Upstream] = {}


def _route_bytes(route: ir.Route, upstreams: Mapping[str, ir.Upstream]) -> bytes:
    # Kept serialised, framed for a virtual host: a few hundred bytes, where the message would
    # take several KiB.
    return routes_field(envoy_route(route, upstreams).SerializeToString(deterministic=True))


def _serialised(part: dict[str, dict[str, Any]]) -> dict[str, dict[str, Resource]]:
    return {t: {name: Resource.of(m, name) for name, m in by_name.items()} for t, by_name in part.items()}


class _CachedParts(_build.Parts):
    def __init__(self, cache: BuildCache) -> None:
        self._cache = cache

    def cluster(self, upstream: ir.Upstream, dns: ir.DnsSettings) -> Any:
        same = self._cache._clusters.get_same(upstream.name, upstream)
        if same is not None:
            return same
        return self._cache._clusters.get(
            upstream.name,
            upstream,
            _NO_UPSTREAMS,
            _NO_SECRETS,
            lambda _u, _s: Resource.of(upstream_cluster(upstream, dns), upstream.name),
        )

    def secret(self, secret: ir.Secret) -> Any:
        return self._cache._secrets.get(
            secret.name,
            secret,
            _NO_UPSTREAMS,
            _NO_SECRETS,
            lambda _u, _s: Resource.of(envoy_secret(secret), secret.name),
        )

    def listener(
        self,
        listener: ir.AnyListener,
        upstreams: Mapping[str, ir.Upstream],
        secrets: Mapping[str, ir.Secret],
    ) -> tuple[dict[str, dict[str, Any]], tuple[ir.TcpListener | ir.TlsRelay, ...]]:
        def make(
            u: Mapping[str, ir.Upstream], s: Mapping[str, ir.Secret]
        ) -> tuple[dict[str, dict[str, Resource]], tuple[ir.TcpListener | ir.TlsRelay, ...]]:
            # The listener changed (or an upstream it uses): its routes that did not are reused.
            routes = self._cache._routes.setdefault(listener.name, _Memo(self._cache._equal))

            def one(route: ir.Route, u: Mapping[str, ir.Upstream]) -> bytes:
                return routes.get(route.name, route, u, _NO_SECRETS, lambda uu, _s: _route_bytes(route, uu))

            try:
                built, tunneled = _build.listener_part(listener, u, s, encode_route=one)
            except BaseException:
                routes.rotate(keep_old=True)
                raise
            routes.rotate()
            return _serialised(built), tunneled

        return self._cache._listeners.get(listener.name, listener, upstreams, secrets, make)

    def mirror_egress(self) -> dict[str, dict[str, Any]]:
        return _mirror_egress()

    def tcp_egress(
        self, tunneled: tuple[ir.TcpListener | ir.TlsRelay, ...], upstreams: Mapping[str, ir.Upstream]
    ) -> dict[str, dict[str, Any]]:
        return self._cache._egress.get(
            "",
            tunneled,
            upstreams,
            _NO_SECRETS,
            lambda u, _s: _serialised(_build.tcp_egress_part(tunneled, u)),
        )


@functools.lru_cache(maxsize=1)
def _mirror_egress() -> dict[str, dict[str, Resource]]:
    return _serialised(_build.mirror_egress_part())


def _same_resources(a: Mapping[str, Resource], b: Mapping[str, Resource]) -> bool:
    if len(a) != len(b):
        return False
    for (name_a, resource_a), (name_b, resource_b) in zip(a.items(), b.items(), strict=True):
        if name_a != name_b or (resource_a is not resource_b and resource_a.version != resource_b.version):
            return False
    return True


class BuildCache:
    """Builds IRs one after another, reusing what the previous builds made (see the module doc).

    :meth:`build` returns what :func:`weir.xds.build.build` returns, with each
    message as a :class:`~weir.xds.snapshot.Resource`, and raises the same
    errors. A type whose resources did not change is returned as the same
    mapping object as by the previous build (callers must not modify it).
    Not thread-safe; one instance per controller.
    """

    def __init__(self) -> None:
        self._equal: dict[int, Any] = {}
        #: Clusters, for the DNS settings of :attr:`_dns` (all are rebuilt when those change).
        self._clusters: _Memo[Resource] = _Memo(self._equal)
        self._dns: ir.DnsSettings | None = None
        self._secrets: _Memo[Resource] = _Memo(self._equal)
        self._listeners: _Memo[
            tuple[dict[str, dict[str, Resource]], tuple[ir.TcpListener | ir.TlsRelay, ...]]
        ] = _Memo(self._equal)
        self._egress: _Memo[dict[str, dict[str, Resource]]] = _Memo(self._equal)
        #: Per listener name, its routes, serialised (rotated when the listener is rebuilt).
        self._routes: dict[str, _Memo[bytes]] = {}
        self._memos: tuple[_Memo[Any], ...] = (self._clusters, self._secrets, self._listeners, self._egress)
        #: How many parts (resources, or routes of rebuilt route configurations) the last build made afresh.
        self.rebuilt = 0
        self._last: dict[str, dict[str, Resource]] = {}

    def build(self, ir_: ir.IR) -> dict[str, dict[str, Resource]]:
        misses = self._misses()
        if ir_.dns != self._dns:
            self._clusters.rotate()
            self._clusters.rotate()  # forgets every cluster: each one names its resolvers
            self._dns = ir_.dns
        try:
            out = _build.assemble(ir_, _CachedParts(self))
        except BaseException:
            # A failed build (a bug in translation) must not cost the next one its cache.
            for memo in self._memos:
                memo.rotate(keep_old=True)
            raise
        finally:
            self._equal.clear()  # ids are only meaningful while this build's IR lives
        listeners = {listener.name for listener in ir_.listeners}
        self._routes = {name: memo for name, memo in self._routes.items() if name in listeners}
        for memo in self._memos:
            memo.rotate()
        self.rebuilt = self._misses() - misses
        # A type whose resources are all the ones of the previous build is returned as the
        # previous mapping itself: the snapshot version and the ADS server skip it at once.
        for type_url, by_name in out.items():
            last = self._last.get(type_url)
            if last is not None and _same_resources(last, by_name):
                out[type_url] = last
        self._last = out
        return out

    def _misses(self) -> int:
        return sum(m.misses for m in self._memos) + sum(m.misses for m in self._routes.values())

    def stats(self) -> dict[str, tuple[int, int, int]]:
        """Per kind of entry: (hits, misses, entries held), for benchmarks and tests."""
        memos: dict[str, _Memo[Any]] = {
            "clusters": self._clusters,
            "secrets": self._secrets,
            "listeners": self._listeners,
            "tcp_egress": self._egress,
        }
        out = {name: (m.hits, m.misses, len(m)) for name, m in memos.items()}
        routes = self._routes.values()
        out["routes"] = (
            sum(m.hits for m in routes),
            sum(m.misses for m in routes),
            sum(len(m) for m in routes),
        )
        return out
