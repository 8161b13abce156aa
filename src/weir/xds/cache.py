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
* per route configuration (a listener's, or an HTTPS server's), the
  serialised resource, valid while its virtual hosts are the same; per
  virtual host, its serialised field; per route, the serialised Envoy
  route; each with the same rule. A route configuration changed by one
  edit is joined from the bytes of the virtual hosts that did not change,
  and a virtual host from those of its routes: at 10,000 virtual hosts an
  edit serialises one, not 10,000 messages.

The output equals ``build()``'s, message for message (a test compares them on
every golden IR). Bounded: after each build, entries the build did not use
are dropped, so the cache holds one configuration's worth of resources.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from weir import ir
from weir.xds import build as _build
from weir.xds.clusters import upstream_cluster
from weir.xds.listeners import tls_listener
from weir.xds.mcp import McpUse, uses_tool_policies
from weir.xds.routes import route_bytes, route_configuration_bytes, virtual_host_field
from weir.xds.secrets import envoy_secret
from weir.xds.snapshot import CLUSTER, LISTENER, ROUTE, SECRET, Resource, content_version

_V = TypeVar("_V")
_T = TypeVar("_T")


class _Reads(Mapping[str, _V]):
    """A read-only view of a mapping that remembers which names were looked up."""

    __slots__ = ("_data", "everything", "seen")

    def __init__(self, data: Mapping[str, _V]) -> None:
        self._data = data
        self.seen: set[str] = set()
        #: Iterated or measured: the reader depended on the whole mapping.
        self.everything = False

    def __getitem__(self, name: str) -> _V:
        self.seen.add(name)
        return self._data[name]

    def get(self, name: str, default: Any = None) -> Any:  # Mapping's goes through KeyError
        self.seen.add(name)
        return self._data.get(name, default)

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        self.seen.add(name)
        return name in self._data

    def __iter__(self) -> Iterator[str]:
        self.everything = True
        return iter(self._data)

    def __len__(self) -> int:
        self.everything = True
        return len(self._data)


def _record(reads: Mapping[str, Any], names: frozenset[str]) -> None:
    """Record ``names`` as read through ``reads``, when it is a :class:`_Reads` (a part reused, or
    made, inside a part being made: the outer one depends on what the inner one read; the outer
    one passes it on to its own outer one when it is done)."""
    if isinstance(reads, _Reads):
        reads.seen |= names


class _Everything:
    """The names that changed when nothing is known: all of them."""

    def isdisjoint(self, names: frozenset[str]) -> bool:
        return not names


@dataclass(slots=True)
class _Changes:
    """What one build shares among its memos: the upstream and secret names whose value differs from
    the last build that succeeded (:meth:`BuildCache.build` finds them), and the IR objects found
    equal to those an entry was built from (by ``id``, emptied after each build), so that an object
    compared once is not compared again."""

    upstreams: set[str] | _Everything
    secrets: set[str] | _Everything
    equal: dict[int, Any]


@dataclass(slots=True)
class _Entry(Generic[_T]):
    source: Any
    #: the names of the upstreams and secrets the value was made from
    upstreams: frozenset[str]
    secrets: frozenset[str]
    value: _T


def _same(now: Any, then: Any, equal: dict[int, Any]) -> bool:
    """``now == then``, remembering an equality found (by ``id(now)``) for the rest of the build."""
    if now is then or equal.get(id(now)) is then:
        return True
    if now != then:
        return False
    equal[id(now)] = then
    return True


class _Memo(Generic[_T]):
    """Values built from IR values, by name, each valid while its source is the same and none of the
    upstreams and secrets it read changed.

    Keyed by name (names are unique per kind of IR object) rather than by
    value: hashing a frozen dataclass walks all of it on every lookup, and
    comparing it with the cached one stops at the first identical field (the
    same objects, once translation reuses them). Generational: :meth:`rotate`
    keeps the entries used since the previous rotation and drops the others.

    What an entry read is checked against the names that changed in this
    build (:class:`_Changes`, shared by the memos of one cache): a set
    operation on the few names that changed, not a look at each of the
    10,000 upstreams a listener's routes read. An entry made in a build that
    failed is forgotten (see :meth:`rotate`), so every entry held was made
    from values no newer than the last build that succeeded, which is what
    the changes are found against.
    """

    def __init__(self, changes: _Changes, counts: list[int] | None = None) -> None:
        self._changes = changes
        self._old: dict[str, _Entry[_T]] = {}
        self._new: dict[str, _Entry[_T]] = {}
        self.hits = 0
        self.misses = 0
        #: [hits, misses] shared by memos counted together (those of the routes of every virtual host)
        self._counts = counts if counts is not None else [0, 0]

    def get(
        self,
        name: str,
        source: Any,
        upstreams: Mapping[str, ir.Upstream],
        secrets: Mapping[str, ir.Secret],
        make: Callable[[Mapping[str, ir.Upstream], Mapping[str, ir.Secret]], _T],
    ) -> _T:
        entry = self._new.get(name) or self._old.get(name)
        changes = self._changes
        if (
            entry is not None
            and _same(source, entry.source, changes.equal)
            and (not entry.upstreams or changes.upstreams.isdisjoint(entry.upstreams))
            and (not entry.secrets or changes.secrets.isdisjoint(entry.secrets))
        ):
            self.hits += 1
            self._counts[0] += 1
            if entry.upstreams:
                _record(upstreams, entry.upstreams)
            if entry.secrets:
                _record(secrets, entry.secrets)
        else:
            self.misses += 1
            self._counts[1] += 1
            seen_upstreams, seen_secrets = _Reads(upstreams), _Reads(secrets)
            value = make(seen_upstreams, seen_secrets)
            if seen_upstreams.everything or seen_secrets.everything:
                return value  # depends on everything: not worth keeping
            read_upstreams, read_secrets = frozenset(seen_upstreams.seen), frozenset(seen_secrets.seen)
            _record(upstreams, read_upstreams)
            _record(secrets, read_secrets)
            entry = _Entry(source, read_upstreams, read_secrets, value)
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

    def reuse(self, name: str, source: Any) -> _Entry[_T] | None:
        """The entry of ``name`` when it was made from ``source`` itself and nothing it read changed,
        counted as used; else ``None`` (and :meth:`get` decides). The caller records what it read."""
        entry = self._old.get(name)
        if (
            entry is None
            or entry.source is not source
            or entry.secrets
            or (entry.upstreams and not self._changes.upstreams.isdisjoint(entry.upstreams))
        ):
            return None
        self.hits += 1
        self._new[name] = entry
        return entry

    def keep_all(self, drop: Iterable[str] = ()) -> None:
        """Count every entry held as used in this generation, but those of ``drop``."""
        kept = self._old | self._new
        for name in drop:
            kept.pop(name, None)
        self._new = kept

    def previous(self, name: str) -> _T | None:
        """What ``name`` held last, valid or not (a part made again starts from its own parts)."""
        entry = self._new.get(name) or self._old.get(name)
        return None if entry is None else entry.value

    def values(self) -> Iterator[_T]:
        """Every value held."""
        yield from (entry.value for entry in self._new.values())
        yield from (entry.value for name, entry in self._old.items() if name not in self._new)

    def rotate(self, *, keep_old: bool = False) -> None:
        """Start a new generation: keep what the last one used; with ``keep_old`` (the build failed),
        keep what was held before it instead, and forget what it made."""
        if keep_old:
            self._new = {}
        else:
            self._old, self._new = self._new, {}

    def __len__(self) -> int:
        return len(self._new) + sum(1 for key in self._old if key not in self._new)


_NO_SECRETS: Mapping[str, ir.Secret] = {}
_NO_UPSTREAMS: Mapping[str, ir.Upstream] = {}


@dataclass(slots=True)
class _RouteConfig:
    """A route configuration built: the resource, whether its routes use MCP tool policies, and its
    virtual hosts' parts (what it is made again from when it changes)."""

    resource: Resource
    mcp_tools: McpUse | None
    virtual_hosts: _Memo[_VirtualHost]


@dataclass(slots=True)
class _VirtualHost:
    """A virtual host built: serialised and framed, whether its routes use MCP tool policies, and
    its routes, serialised and framed (what it is made again from when it changes)."""

    value: bytes
    mcp_tools: McpUse | None
    routes: _Memo[bytes]


def _merged(uses: Iterable[McpUse | None]) -> McpUse | None:
    """What all of ``uses`` need together (``None``: none uses MCP tool policies)."""
    found: McpUse | None = None
    for use in uses:
        if use is not None:
            found = use if found is None else found.merge(use)
    return found


def _route_part(route: ir.Route, upstreams: Mapping[str, ir.Upstream], _secrets: Any) -> bytes:
    return route_bytes(route, upstreams)


def _serialised(part: dict[str, dict[str, Any]]) -> dict[str, dict[str, Resource]]:
    return {
        t: {name: m if isinstance(m, Resource) else Resource.of(m, name) for name, m in by_name.items()}
        for t, by_name in part.items()
    }


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

    def clusters(self, upstreams: Mapping[str, ir.Upstream], dns: ir.DnsSettings) -> dict[str, Any]:
        changed = self._cache._changes.upstreams
        last = self._cache._last.get(CLUSTER)
        if not isinstance(changed, set) or last is None or self._cache._dns_changed:
            return super().clusters(upstreams, dns)
        # Only the clusters of upstreams that changed: the others are those of the last build.
        self._cache._clusters.keep_all(drop=changed)
        return _patched(last, changed, upstreams, lambda upstream: self.cluster(upstream, dns))

    def secrets(self, secrets: Mapping[str, ir.Secret]) -> dict[str, Any]:
        changed = self._cache._changes.secrets
        last = self._cache._last.get(SECRET)
        if not isinstance(changed, set) or last is None:
            return super().secrets(secrets)
        self._cache._secrets.keep_all(drop=changed)
        return _patched(last, changed, secrets, self.secret)

    def to_check(
        self, upstreams: Mapping[str, ir.Upstream], secrets: Mapping[str, ir.Secret]
    ) -> Iterable[ir.Upstream]:
        changes = self._cache._changes
        if not isinstance(changes.upstreams, set) or not isinstance(changes.secrets, set) or changes.secrets:
            return upstreams.values()
        return [upstreams[name] for name in changes.upstreams if name in upstreams]

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
    ) -> dict[str, dict[str, Any]]:
        def make(u: Mapping[str, ir.Upstream], s: Mapping[str, ir.Secret]) -> dict[str, dict[str, Resource]]:
            # The listener changed (or an upstream it uses): its route configurations, virtual
            # hosts and routes that did not are reused.
            configs = self._cache._configs.setdefault(listener.name, _Memo(self._cache._changes))
            try:
                built = _build.listener_part(
                    listener,
                    u,
                    s,
                    make_routes=lambda routes, uu: self._route_config(configs, routes, uu),
                    make_tls_listener=self._tls_listener,
                )
            except BaseException:
                configs.rotate(keep_old=True)
                raise
            configs.rotate()
            return _serialised(built)

        return self._cache._listeners.get(listener.name, listener, upstreams, secrets, make)

    def _tls_listener(
        self,
        listener: ir.TlsListener,
        relays: Mapping[str, list[ir.Upstream | None]],
        mcp_servers: dict[str, McpUse],
        oauth2_servers: Mapping[str, tuple[ir.OAuth2Credential, ...]],
    ) -> Resource:
        """A TLS socket's listener, made again only when what its filter chains are made of changed.

        Its HTTPS servers' virtual hosts go to Envoy by RDS, not in the listener: a route edit on
        a socket of 1,000 HTTPS listeners changes one server's virtual hosts and nothing here, and
        would otherwise build and serialise 1,000 filter chains to find the same bytes. The key
        holds everything :func:`weir.xds.listeners.tls_listener` reads.
        """
        key = (
            listener.name,
            listener.address,
            listener.port,
            tuple((s.name, s.server_names, s.certificates, s.client_validation) for s in listener.https),
            listener.relays,
            tuple(sorted((name, tuple(chosen)) for name, chosen in relays.items())),
            tuple(sorted(mcp_servers.items(), key=lambda item: item[0])),
            tuple(sorted(oauth2_servers.items())),
        )
        found = self._cache._tls_listeners.get(listener.name)
        if found is not None and found[0] == key:
            return found[1]
        resource = Resource.of(tls_listener(listener, relays, mcp_servers, oauth2_servers), listener.name)
        self._cache._tls_listeners[listener.name] = (key, resource)
        return resource

    def _route_config(
        self, configs: _Memo[_RouteConfig], routes: ir.Listener, upstreams: Mapping[str, ir.Upstream]
    ) -> tuple[Resource, McpUse | None]:
        """The route configuration of ``routes`` (a listener's, or an HTTPS server's): reused while its
        virtual hosts are the same, else made of its virtual hosts' parts, reused where they are."""

        def make(u: Mapping[str, ir.Upstream], _s: Mapping[str, ir.Secret]) -> _RouteConfig:
            before = configs.previous(routes.name)
            vhosts: _Memo[_VirtualHost] = before.virtual_hosts if before else _Memo(self._cache._changes)
            # Most virtual hosts are the very ones of the last build: taken back without a call to
            # get() each (10,000 of them on one listener), what they read recorded at once.
            parts: list[_VirtualHost] = []
            read: list[frozenset[str]] = []
            try:
                for vhost in sorted(routes.virtual_hosts, key=lambda v: v.name):
                    entry = vhosts.reuse(vhost.name, vhost)
                    if entry is None:
                        parts.append(self._virtual_host(vhosts, vhost, u))
                        continue
                    parts.append(entry.value)
                    if entry.upstreams:
                        read.append(entry.upstreams)
            except BaseException:
                vhosts.rotate(keep_old=True)
                raise
            vhosts.rotate()
            if read:
                _record(u, frozenset().union(*read))
            value = route_configuration_bytes(routes.name, [part.value for part in parts])
            resource = Resource(routes.name, ROUTE, value, content_version(value))
            return _RouteConfig(resource, _merged(part.mcp_tools for part in parts), vhosts)

        built = configs.get(routes.name, routes.virtual_hosts, upstreams, _NO_SECRETS, make)
        return built.resource, built.mcp_tools

    def _virtual_host(
        self, vhosts: _Memo[_VirtualHost], vhost: ir.VirtualHost, upstreams: Mapping[str, ir.Upstream]
    ) -> _VirtualHost:
        def make(u: Mapping[str, ir.Upstream], _s: Mapping[str, ir.Secret]) -> _VirtualHost:
            before = vhosts.previous(vhost.name)
            routes: _Memo[bytes] = (
                before.routes if before else _Memo(self._cache._changes, self._cache._route_counts)
            )
            try:
                framed = [
                    routes.get(route.name, route, u, _NO_SECRETS, functools.partial(_route_part, route))
                    for route in vhost.routes
                ]
            except BaseException:
                routes.rotate(keep_old=True)
                raise
            routes.rotate()
            return _VirtualHost(virtual_host_field(vhost, framed), uses_tool_policies((vhost,), u), routes)

        return vhosts.get(vhost.name, vhost, upstreams, _NO_SECRETS, make)

    def egress_denied(self) -> dict[str, Any]:
        return _egress_denied()


_Item = TypeVar("_Item")


def _patched(
    last: dict[str, Any], changed: set[str], current: Mapping[str, _Item], make: Callable[[_Item], Any]
) -> dict[str, Any]:
    """``last`` (resources by name, in order) with those of the ``changed`` names made again from
    ``current`` (or gone from it); ``last`` itself when nothing changed."""
    if not changed:
        return last
    out = {name: resource for name, resource in last.items() if name not in changed}
    added = False
    for name in changed:
        item = current.get(name)
        if item is not None:
            added |= name not in out
            out[name] = make(item)
    return dict(sorted(out.items())) if added else out


@functools.lru_cache(maxsize=1)
def _egress_denied() -> dict[str, Resource]:
    return _serialised({LISTENER: _build.Parts().egress_denied()})[LISTENER]


def _differ(
    before: Mapping[str, Any] | None, now: Mapping[str, Any], pending: set[str]
) -> set[str] | _Everything:
    """The names whose value in ``now`` is not the one in ``before`` (added and removed ones too), and
    ``pending``; everything when there is no ``before``. Unchanged values are mostly the same objects
    (translation reuses them): an identity test each, and a comparison for the others."""
    if before is None:
        return _Everything()
    changed = {name for name, value in now.items() if (old := before.get(name)) is not value and old != value}
    if len(before) != len(now) or changed:
        changed |= before.keys() - now.keys()
    return changed | pending


def _same_resources(a: Mapping[str, Resource], b: Mapping[str, Resource]) -> bool:
    if a is b:
        return True
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
        self._changes = _Changes(_Everything(), _Everything(), {})
        #: the upstreams and secrets of the last build that succeeded (``None``: none did)
        self._last_upstreams: dict[str, ir.Upstream] | None = None
        self._last_secrets: dict[str, ir.Secret] | None = None
        #: names whose value differed in builds that failed since then (their parts may hold either)
        self._pending: tuple[set[str], set[str]] = (set(), set())
        #: Clusters, for the DNS settings of :attr:`_dns` (all are rebuilt when those change).
        self._clusters: _Memo[Resource] = _Memo(self._changes)
        self._dns: ir.DnsSettings | None = None
        self._secrets: _Memo[Resource] = _Memo(self._changes)
        self._listeners: _Memo[dict[str, dict[str, Resource]]] = _Memo(self._changes)
        #: Per listener name, its route configurations (rotated when the listener is rebuilt), each
        #: with its virtual hosts, each with its routes.
        self._configs: dict[str, _Memo[_RouteConfig]] = {}
        #: Per TLS listener name, what its filter chains were made of and the listener built from it.
        self._tls_listeners: dict[str, tuple[Any, Resource]] = {}
        #: [hits, misses] of the memos of routes.
        self._route_counts = [0, 0]
        self._memos: tuple[_Memo[Any], ...] = (self._clusters, self._secrets, self._listeners)
        #: How many parts (resources, or routes of rebuilt route configurations) the last build made afresh.
        self.rebuilt = 0
        self._last: dict[str, dict[str, Resource]] = {}
        self._dns_changed = True

    def build(self, ir_: ir.IR) -> dict[str, dict[str, Resource]]:
        misses = self._misses()
        self._dns_changed = ir_.dns != self._dns
        if self._dns_changed:
            self._clusters.rotate()
            self._clusters.rotate()  # forgets every cluster: each one names its resolvers
            self._dns = ir_.dns
        upstreams = {upstream.name: upstream for upstream in ir_.upstreams}
        secrets = {secret.name: secret for secret in ir_.secrets}
        changes = self._changes
        changes.upstreams = _differ(self._last_upstreams, upstreams, self._pending[0])
        changes.secrets = _differ(self._last_secrets, secrets, self._pending[1])
        try:
            out = _build.assemble(ir_, _CachedParts(self))
        except BaseException:
            # A failed build (a bug in translation) must not cost the next one its cache.
            for memo in self._memos:
                memo.rotate(keep_old=True)
            for pending, changed in zip(self._pending, (changes.upstreams, changes.secrets), strict=True):
                if isinstance(changed, set):
                    pending |= changed
            raise
        finally:
            changes.equal.clear()  # ids are only meaningful while this build's IR lives
        self._last_upstreams, self._last_secrets = upstreams, secrets
        self._pending = (set(), set())
        listeners = {listener.name for listener in ir_.listeners}
        self._configs = {name: memo for name, memo in self._configs.items() if name in listeners}
        self._tls_listeners = {n: v for n, v in self._tls_listeners.items() if n in listeners}
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
        return sum(m.misses for m in self._memos) + self._route_counts[1]

    def stats(self) -> dict[str, tuple[int, int, int]]:
        """Per kind of entry: (hits, misses, entries held), for benchmarks and tests."""
        memos: dict[str, _Memo[Any]] = {
            "clusters": self._clusters,
            "secrets": self._secrets,
            "listeners": self._listeners,
        }
        out = {name: (m.hits, m.misses, len(m)) for name, m in memos.items()}
        held = sum(
            len(vhost.routes)
            for configs in self._configs.values()
            for config in configs.values()
            for vhost in config.virtual_hosts.values()
        )
        out["routes"] = (self._route_counts[0], self._route_counts[1], held)
        return out
