"""The TLS listener of a socket: its HTTPS and TLS listeners, dispatched by server name.

Each Gateway listener on the socket claims its hostname (none: every name),
and a connection belongs to the listener whose hostname matches its server
name most specifically: exact, then the longest wildcard, then none (the
Gateway API's rule, and Envoy's for filter chains). So:

* An HTTPS listener serves only its own routes, and only the Hosts it owns:
  a route hostname that a more specific HTTPS listener on the socket claims
  is left to that one. A request whose Host another listener owns, or no
  listener does, answers 421 (Misdirected Request), so that a client reusing
  a connection for another name (HTTP/2 coalescing) opens a new one, whose
  server name picks the right certificate and routes. Only a listener
  without a hostname owns unclaimed Hosts: its connections answer 404 for
  them. A Host its own hostname matches but none of its routes serves gets
  404 too. Which Hosts it owns and in what order its routes match is decided
  as for HTTP listeners (:mod:`weir.translate.virtualhosts`).

  Each server's route configuration stays the size of what it owns: its own
  virtual hosts, one answering 421 for each other listener's hostname that
  its own hostname matches (those Hosts would otherwise reach its routes),
  and, when it has a hostname, one ``*`` answering 421 for everything else.
  A socket of 1,000 listeners with exact hostnames makes 1,000 small
  configurations, not 1,000 of 1,000 virtual hosts (what naming every other
  listener's hostname in every configuration made). This is the upstream
  conformance test HTTPRouteHTTPSListenerDetectMisdirectedRequests's rule: a
  request is misdirected when the listener its server name selects is not
  the one its Host selects.
* A TLS listener relays the server names its routes claim, unless a more
  specific listener (HTTPS or TLS) on the socket owns that name.
"""

from __future__ import annotations

from weir import ir
from weir.translate.gateways import ListenerContext
from weir.translate.virtualhosts import Owners, claimed, owned_virtual_hosts

#: The body of a 421: the Host belongs to another listener on the same port.
MISDIRECTED_BODY = (
    "weir: {host} is served by listener {listener} of Gateway {gateway} on this port, not on this "
    "connection; open a new one whose server name (SNI) is that host\n"
)
#: The body of the 421 for a Host that no other listener on the port claims more specifically.
ELSEWHERE_BODY = (
    "weir: this connection was made for {host} (listener {listener} of Gateway {gateway}); this "
    "request's Host is not served on it: open a new connection whose server name (SNI) is that Host\n"
)
#: ... and when that listener serves nothing (its certificates do not resolve).
UNSERVED_BODY = (
    "weir: {host} belongs to listener {listener} of Gateway {gateway} on this port, which serves "
    "nothing until its certificates resolve (see its ResolvedRefs condition)\n"
)


def tls_listener(name: str, address: str, port: int, listeners: list[ListenerContext]) -> ir.TlsListener:
    """The IR listener for one socket from the accepted HTTPS and TLS listeners on it.

    ``listeners`` have distinct hostnames (:func:`weir.translate.gateways._settle_sockets`
    saw to it). One whose certificates do not resolve serves nothing, but still
    owns its hostname: its server name is closed (not left to a wildcard
    listener, whose routes and certificate were not meant for it), and other
    HTTPS listeners answer 421 for it.
    """
    https_listeners = [lc for lc in listeners if lc.protocol == "HTTPS"]
    https_owners, owners = Owners(https_listeners), Owners(listeners)
    servers = []
    relays = []
    for lc in https_listeners:
        if not lc.served:
            relays.append(
                ir.TlsRelay(f"{name}/{lc.hostname or '*'}", _server_names(lc.hostname), backends=())
            )
            continue
        servers.append(https_server(name, lc, https_owners))
    for lc in listeners:
        if lc.protocol != "TLS":
            continue
        if not lc.served:
            closed = ir.TlsRelay(f"{name}/{lc.hostname or '*'}", _server_names(lc.hostname), backends=())
            relays.append(closed)
            continue
        certificates = tuple(c.name for c in lc.certificates) if lc.terminates_tls else ()
        for server_name, backends in sorted(lc.relays.items()):
            if owners(server_name) is lc:
                relays.append(
                    ir.TlsRelay(
                        name=f"{name}/{server_name}",
                        server_names=_server_names(None if server_name == "*" else server_name),
                        backends=backends,
                        certificates=certificates,
                    )
                )
    return ir.TlsListener(
        name=name,
        address=address,
        port=port,
        https=tuple(sorted(servers, key=lambda s: s.name)),
        relays=tuple(sorted(relays, key=lambda r: r.name)),
    )


def https_server(name: str, lc: ListenerContext, https_owners: Owners) -> ir.HttpsServer:
    """The HTTPS server of the served listener ``lc`` on the socket of TLS listener ``name``, among the
    socket's HTTPS listeners (whose :class:`Owners` are ``https_owners``).

    Its size follows what ``lc`` owns, never the number of listeners on the socket (but for the
    one without a hostname, which names every other listener's hostname once).
    """
    server = f"{name}/{lc.hostname or '*'}"
    virtual_hosts = owned_virtual_hosts(server, [lc], https_owners)
    # Hosts under its own hostname that a more specific listener owns: 421, before its routes do.
    for domain in https_owners.nested(lc.hostname):
        other = https_owners(domain)
        assert other is not None  # a listener's own hostname has an owner: that listener
        virtual_hosts.append(ir.VirtualHost(f"{server}/{domain}", (domain,), (_misdirected(other),)))
    if lc.hostname is not None:
        # Every Host outside its own hostname belongs to another listener (or none): 421.
        virtual_hosts.append(ir.VirtualHost(f"{server}/*", ("*",), (_elsewhere(lc),)))
    # Its own Hosts that no route serves: 404, not the 421 of a wider domain.
    domains = {domain for vhost in virtual_hosts for domain in vhost.domains}
    virtual_hosts += claimed(server, lc.hostname, domains)
    return ir.HttpsServer(
        name=server,
        server_names=_server_names(lc.hostname),
        certificates=tuple(c.name for c in lc.certificates),
        virtual_hosts=tuple(sorted(virtual_hosts, key=lambda v: v.name)),
        client_validation=lc.client_validation.validation if lc.client_validation else None,
    )


def _server_names(hostname: str | None) -> tuple[str, ...]:
    return () if hostname is None else (hostname,)


def _misdirected(other: ListenerContext) -> ir.Route:
    gw = other.gateway
    host = other.hostname or "this host"
    body = MISDIRECTED_BODY.format(host=host, listener=other.name, gateway=f"{gw.namespace}/{gw.name}")
    if not other.served:
        body = UNSERVED_BODY.format(host=host, listener=other.name, gateway=f"{gw.namespace}/{gw.name}")
    return ir.Route(
        name=f"misdirected/{gw.namespace}/{gw.name}/{other.name}",
        match=ir.RouteMatch(path=ir.PathMatch("PathPrefix", "/")),
        action=ir.DirectResponse(421, body),
    )


def _elsewhere(lc: ListenerContext) -> ir.Route:
    """The 421 on ``lc``'s connections for a Host outside its hostname."""
    gw = lc.gateway
    body = ELSEWHERE_BODY.format(host=lc.hostname, listener=lc.name, gateway=f"{gw.namespace}/{gw.name}")
    return ir.Route(
        name=f"misdirected/{gw.namespace}/{gw.name}/{lc.name}/elsewhere",
        match=ir.RouteMatch(path=ir.PathMatch("PathPrefix", "/")),
        action=ir.DirectResponse(421, body),
    )
