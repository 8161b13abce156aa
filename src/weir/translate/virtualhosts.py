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

from collections.abc import Sequence

from weir import ir
from weir.translate.gateways import ListenerContext, RouteEntry, covers


def owner(name: str, listeners: Sequence[ListenerContext]) -> ListenerContext | None:
    """The listener whose hostname matches ``name`` (a server name or domain, maybe a wildcard) best."""
    matching = [lc for lc in listeners if covers(lc.hostname, name)]
    return max(matching, key=lambda lc: specificity(lc.hostname), default=None)


def specificity(hostname: str | None) -> tuple[int, int]:
    """Exact names before wildcards, longer wildcards before shorter, no hostname last."""
    if hostname is None:
        return (0, 0)
    if hostname.startswith("*."):
        return (1, hostname.count("."))
    return (2, 0)


def owned_virtual_hosts(
    prefix: str, group: Sequence[ListenerContext], listeners: Sequence[ListenerContext]
) -> list[ir.VirtualHost]:
    """The virtual hosts ``PREFIX/DOMAIN`` of the listeners in ``group`` (all with one hostname).

    One per domain their routes attach for, unless a listener of ``listeners``
    (those sharing the socket) with a more specific hostname owns it. Each
    holds the domain's routes, then those of the group's wider domains that
    match its Hosts (see the module's docstring).
    """
    hostname = group[0].hostname
    by_domain: dict[str, list[RouteEntry]] = {}
    for lc in group:
        for domain, entries in lc.routes.items():
            found = owner(domain, listeners)
            if entries and found is not None and found.hostname == hostname:
                by_domain.setdefault(domain, []).extend(entries)
    virtual_hosts = []
    for domain in sorted(by_domain):
        wider = sorted(
            (w for w in by_domain if w != domain and covers(None if w == "*" else w, domain)),
            key=lambda w: (w == "*", -len(w), w),
        )
        # A route serving several of these domains comes once, where it matches first. Its name
        # says which route, rule and match it is (hashing IR routes by value cost 8 ms per 2,500).
        routes: dict[str, ir.Route] = {}
        for d in (domain, *wider):
            for _, route in sorted(by_domain[d], key=lambda e: e[0]):
                routes.setdefault(route.name, route)
        virtual_hosts.append(ir.VirtualHost(f"{prefix}/{domain}", (domain,), tuple(routes.values())))
    return virtual_hosts


def claimed(
    prefix: str, hostname: str | None, virtual_hosts: Sequence[ir.VirtualHost]
) -> list[ir.VirtualHost]:
    """An empty virtual host ``PREFIX/HOSTNAME`` (Envoy answers 404) for a listener's ``hostname``
    that no virtual host serves but a wider domain of ``virtual_hosts`` would catch; else nothing."""
    if hostname is None:
        return []
    domains = {d for vhost in virtual_hosts for d in vhost.domains}
    if hostname in domains or not any(covers(None if d == "*" else d, hostname) for d in domains):
        return []
    return [ir.VirtualHost(f"{prefix}/{hostname}", (hostname,), ())]
