"""Virtual hosts of the listeners sharing a socket: which listener owns a Host, in what order routes match.

HTTP listeners on one socket share a route configuration (Envoy picks a
virtual host by Host); an HTTPS listener has its own (the server name picks
its filter chain). Either way the Gateway API's rules are:

* **Listener isolation.** A request belongs to the listener whose hostname
  matches its Host most specifically (exact, then the longest wildcard, then
  none), and only that listener's routes may answer it, 404 when none does:
  a route hostname that a more specific listener on the socket claims is
  left to that listener, and a listener's hostname gets a virtual host of its
  own (empty when no route serves it) wherever another domain of the route
  configuration would otherwise catch its Hosts.
* **Hostname precedence.** Among the routes of one listener, those of the
  most specific matching hostname come first (an exact name, then longer
  wildcards before shorter ones, ``*`` last), each group in match precedence
  order. A less specific hostname's routes still serve the requests the more
  specific ones do not match: a virtual host ``foo.example.org`` ends with the
  listener's ``*.example.org`` routes.

Listeners with the same hostname on one socket (HTTP listeners of different
Gateways) are told apart by nothing in a request: they share their Hosts.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Sequence

from weir import ir
from weir.translate.gateways import ListenerContext, RouteEntry, wildcards_over


class Owners:
    """Which listener of a socket owns a name: the one whose hostname matches it best.

    Found through the name's own candidates (itself, then each wildcard over a
    suffix of it, longest first, then no hostname) rather than by testing
    every listener: a socket shared by 1,000 Gateways would otherwise cost a
    million tests to place 1,000 domains.
    """

    __slots__ = ("_by_hostname", "_nested", "groups")

    def __init__(self, listeners: Iterable[ListenerContext]) -> None:
        #: the listeners of each hostname, in the order given
        self.groups: dict[str | None, list[ListenerContext]] = {}
        for lc in listeners:
            self.groups.setdefault(lc.hostname, []).append(lc)
        # equally specific: the first one
        self._by_hostname = {hostname: group[0] for hostname, group in self.groups.items()}
        self._nested: dict[str | None, list[str]] | None = None

    def group(self, hostname: str | None) -> list[ListenerContext]:
        return self.groups.get(hostname, [])

    def has_hostname(self, name: str) -> bool:
        return name in self._by_hostname

    def nested(self, hostname: str | None) -> list[str]:
        """The other listeners' hostnames that ``hostname`` matches (no hostname: all of them), sorted.

        Indexed once per socket through each hostname's own wildcard suffixes, so finding them
        for every listener costs what the hostnames' labels do, not listeners squared.
        """
        if self._nested is None:
            index: dict[str | None, list[str]] = {}
            for name in self._by_hostname:
                if name is None:
                    continue
                index.setdefault(None, []).append(name)
                for wildcard in wildcards_over(name):
                    if wildcard in self._by_hostname:
                        index.setdefault(wildcard, []).append(name)
            self._nested = {key: sorted(names) for key, names in index.items()}
        return self._nested.get(hostname, [])

    def __call__(self, name: str) -> ListenerContext | None:
        """The owner of ``name`` (a server name or domain, maybe a wildcard), or ``None``."""
        by_hostname = self._by_hostname
        found = by_hostname.get(name)  # an exact name, or the same wildcard: nothing matches better
        if found is not None:
            return found
        for wildcard in wildcards_over(name):
            found = by_hostname.get(wildcard)
            if found is not None:
                return found
        return by_hostname.get(None)


def owned_virtual_hosts(
    prefix: str, group: Sequence[ListenerContext], owners: Owners
) -> list[ir.VirtualHost]:
    """The virtual hosts ``PREFIX/DOMAIN`` of the listeners in ``group`` (all with one hostname).

    One per domain their routes attach for, unless a listener of ``owners``
    (those sharing the socket) with a more specific hostname owns it. Each
    holds the domain's routes, then those of the group's wider domains that
    match its Hosts (see the module's docstring).
    """
    hostname = group[0].hostname
    by_domain: dict[str, list[RouteEntry]] = {}
    for lc in group:
        for domain, entries in lc.routes.items():
            found = owners(domain)
            if entries and found is not None and found.hostname == hostname:
                by_domain.setdefault(domain, []).extend(entries)
    empty: list[RouteEntry] = []
    return [_virtual_host(prefix, domain, lambda d: by_domain.get(d, empty)) for domain in sorted(by_domain)]


def domain_virtual_host(prefix: str, domain: str, owners: Owners) -> ir.VirtualHost | None:
    """The virtual host ``PREFIX/DOMAIN`` :func:`owned_virtual_hosts` makes for ``domain`` among
    the listeners of ``owners``, or ``None`` when it makes none; at the cost of one domain's routes."""
    found = owners(domain)
    if found is None:
        return None
    group = owners.group(found.hostname)

    def entries(d: str) -> list[RouteEntry]:
        if d != domain and ((other := owners(d)) is None or other.hostname != found.hostname):
            return []
        return [entry for lc in group for entry in lc.routes.get(d, ())]

    if not entries(domain):
        return None
    return _virtual_host(prefix, domain, entries)


def _virtual_host(prefix: str, domain: str, entries: Callable[[str], list[RouteEntry]]) -> ir.VirtualHost:
    """``domain``'s virtual host: its routes (``entries``), then those of its wider domains."""
    # The wider domains, most specific first: wildcards over a suffix of it, longest first, then "*".
    wider = [*wildcards_over(domain), "*"] if domain != "*" else []
    # A route serving several of these domains comes once, where it matches first. Its name
    # says which route, rule and match it is (hashing IR routes by value cost 8 ms per 2,500).
    routes: dict[str, ir.Route] = {}
    for d in (domain, *wider):
        for _, route in sorted(entries(d), key=lambda e: e[0]):
            routes.setdefault(route.name, route)
    return ir.VirtualHost(f"{prefix}/{domain}", (domain,), tuple(routes.values()))


def patched_virtual_hosts(
    prefix: str,
    before: Sequence[ir.VirtualHost],
    owners: Owners,
    domains: Iterable[str],
) -> tuple[ir.VirtualHost, ...] | None:
    """``before`` (sorted by name) after routes moved in or out of ``domains``, with only those
    domains' virtual hosts made again; ``None`` when more may have changed (a wildcard or ``*``
    among ``domains``: other domains' virtual hosts end with their routes), and the caller must
    make them all.

    An exact domain is no other domain's wider one, so its own virtual host is all it changes:
    its routes, or when it has none and it is a listener's hostname that a wider domain of the
    route configuration would catch, the empty one :func:`claimed` gives it. (Claimed virtual
    hosts only ever come from domains with routes: whatever covers a claimed wildcard covers
    the names under it too.)
    """
    todo = sorted(set(domains))
    if any(d == "*" or d.startswith("*.") for d in todo):
        return None
    out = list(before)

    def find(name: str) -> tuple[int, bool]:
        at = bisect.bisect_left(out, name, key=lambda v: v.name)
        return at, at < len(out) and out[at].name == name

    def serves(domain: str) -> bool:
        at, present = find(f"{prefix}/{domain}")
        return present and bool(out[at].routes)

    for domain in todo:
        name = f"{prefix}/{domain}"
        vhost = domain_virtual_host(prefix, domain, owners)
        if vhost is None and owners.has_hostname(domain) and any(map(serves, (*wildcards_over(domain), "*"))):
            vhost = ir.VirtualHost(name, (domain,), ())
        at, present = find(name)
        if vhost is None:
            if present:
                del out[at]
        elif present:
            out[at] = vhost
        else:
            out.insert(at, vhost)
    return tuple(out)


def claimed(prefix: str, hostname: str | None, domains: set[str]) -> list[ir.VirtualHost]:
    """An empty virtual host ``PREFIX/HOSTNAME`` (Envoy answers 404) for a listener's ``hostname``
    that no virtual host serves but a wider one of ``domains`` (those of the route configuration's
    virtual hosts) would catch; else nothing. ``domains`` gets the new one's."""
    if hostname is None or hostname in domains:
        return []
    if "*" not in domains and not any(w in domains for w in wildcards_over(hostname)):
        return []
    domains.add(hostname)
    return [ir.VirtualHost(f"{prefix}/{hostname}", (hostname,), ())]
