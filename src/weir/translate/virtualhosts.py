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

from collections.abc import Iterable, Iterator, Sequence

from weir import ir
from weir.translate.gateways import ListenerContext, RouteEntry


class Owners:
    """Which listener of a socket owns a name: the one whose hostname matches it best.

    Found through the name's own candidates (itself, then each wildcard over a
    suffix of it, longest first, then no hostname) rather than by testing
    every listener: a socket shared by 1,000 Gateways would otherwise cost a
    million tests to place 1,000 domains.
    """

    __slots__ = ("_by_hostname",)

    def __init__(self, listeners: Iterable[ListenerContext]) -> None:
        self._by_hostname: dict[str | None, ListenerContext] = {}
        for lc in listeners:  # equally specific: the first one
            self._by_hostname.setdefault(lc.hostname, lc)

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


def wildcards_over(name: str) -> Iterator[str]:
    """The wildcard hostnames other than ``name`` that match ``name``, most specific first:
    ``a.b.example`` gives ``*.b.example``, ``*.example`` (not ``*``, which is no hostname)."""
    at = name.find(".")
    while at >= 0:
        wildcard = "*" + name[at:]
        if wildcard != name:
            yield wildcard
        at = name.find(".", at + 1)


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
    virtual_hosts = []
    catch_all = ["*"] if "*" in by_domain else []
    for domain in sorted(by_domain):
        # The wider domains, most specific first: wildcards over a suffix of it, longest first, then "*".
        wider = [w for w in wildcards_over(domain) if w in by_domain]
        if domain != "*":
            wider += catch_all
        # A route serving several of these domains comes once, where it matches first. Its name
        # says which route, rule and match it is (hashing IR routes by value cost 8 ms per 2,500).
        routes: dict[str, ir.Route] = {}
        for d in (domain, *wider):
            for _, route in sorted(by_domain[d], key=lambda e: e[0]):
                routes.setdefault(route.name, route)
        virtual_hosts.append(ir.VirtualHost(f"{prefix}/{domain}", (domain,), tuple(routes.values())))
    return virtual_hosts


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
