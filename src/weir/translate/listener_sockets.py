"""Which listeners share a socket or a name: each socket goes to listeners of one family, each TLS
server name to one listener; the others are refused as conflicts, and overlaps across Gateways noted."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from weir.api.gateway_v1 import Gateway
from weir.translate import status as st
from weir.translate.listener_contexts import ALONE, Conflict, GatewayContext, ListenerContext


def _settle_sockets(gateways: list[GatewayContext]) -> None:
    """Give every socket to listeners of one family, and every TLS server name to one listener.

    HTTP listeners share a socket (virtual hosts tell them apart), so do
    HTTPS and TLS listeners (the server name of the ClientHello tells them
    apart); a TCP listener needs its socket for itself. Within one Gateway,
    listeners on one port that cannot share it are all refused (Gateway API:
    ``Conflicted=True``, ``ProtocolConflict``; none of them is served): those
    of different families, and an HTTPS and a TLS listener with the same
    hostname (or both without one). Across Gateways, which all run in this
    one Envoy, the oldest Gateway (creation time, then namespace/name) keeps
    the socket, and a newer one's listener is refused with
    ``PortUnavailable``, or, for an HTTPS or TLS hostname an older Gateway
    serves on that socket, with ``Conflicted=True``, ``HostnameConflict``: a
    Gateway created later never takes a port or a name away from one that is
    serving (without creation times, as in plain files, namespace/name
    decides).
    """
    owners: dict[tuple[str, int], ListenerContext] = {}
    names: dict[tuple[tuple[str, int], str], ListenerContext] = {}
    ordered = sorted(
        gateways,
        key=lambda c: (c.gateway.metadata.creation_timestamp or "", c.gateway.namespace, c.gateway.name),
    )
    for ctx in ordered:
        # The Gateway's own listeners, then each attached ListenerSet's: within one of these
        # groups conflicting listeners are all refused; a later group never takes a port or
        # a server name from an earlier one (the Gateway API's precedence for ListenerSets).
        groups = [ctx.own_listeners, *(lsc.listeners for lsc in ctx.listener_sets)]
        kept = _PortIndex()
        for group in groups:
            valid = [lc for lc in group if lc.valid]
            in_group = _PortIndex(valid)
            for lc in valid:
                lc.conflict = _conflict_within(lc, in_group) or _conflict_within(lc, kept)
            for lc in valid:
                if lc.conflict is None:
                    lc.conflict = _conflict_across(lc, owners, names)
                if lc.conflict is not None:
                    lc.valid = False
                    continue
                kept.add(lc)
                for socket in lc.sockets:
                    owners.setdefault(socket, lc)
                    if lc.family == "TLS":
                        names.setdefault((socket, lc.hostname or ""), lc)


def _seen_from(other: ListenerContext, lc: ListenerContext) -> str:
    """``other``'s name as ``lc``'s owner reads it: qualified when another object declares it
    (listener names repeat across a Gateway and its ListenerSets)."""
    if other.owner is lc.owner:
        return other.name
    owner = other.owner
    return f"{other.name} of {type(owner).KIND} {owner.namespace}/{owner.name}"


class _PortIndex:
    """Valid listeners of one Gateway (or ListenerSet) by port: by family, and those of the TLS
    family by hostname, so that finding what ``lc`` conflicts with costs what it conflicts with,
    not a pass over every listener (a Gateway of 1,000 listeners: a million tests)."""

    __slots__ = ("families", "names", "order")

    def __init__(self, listeners: list[ListenerContext] | None = None) -> None:
        self.families: dict[int, dict[str, list[ListenerContext]]] = {}
        self.names: dict[tuple[int, str | None], list[ListenerContext]] = {}
        self.order: dict[int, int] = {}  # id of a listener -> when it came: messages name them in order
        for lc in listeners or ():
            self.add(lc)

    def add(self, lc: ListenerContext) -> None:
        self.order[id(lc)] = len(self.order)
        port = lc.spec.port
        self.families.setdefault(port, {}).setdefault(lc.family, []).append(lc)
        if lc.family == "TLS":
            self.names.setdefault((port, lc.hostname), []).append(lc)


def _conflict_within(lc: ListenerContext, index: _PortIndex) -> Conflict | None:
    """Why ``lc`` cannot share its port with the other valid listeners of its Gateway (those of
    ``index``), if it cannot.

    ``ProtocolConflict`` for another family, or an HTTPS and a TLS listener
    with one hostname; ``HostnameConflict`` for one TLS-family hostname twice
    with the same protocol spelled differently (``https``, ``HTTPS``).
    """
    port = lc.spec.port
    families = sorted(
        (o for family, group in index.families.get(port, {}).items() if family != lc.family for o in group),
        key=lambda o: index.order[id(o)],
    )
    if families:
        message = (
            f"Port {port} is also used by listener "
            + ", ".join(f"{_seen_from(o, lc)} ({o.protocol})" for o in families)
            + f", which cannot share it with {lc.protocol}: a port serves HTTP listeners, or HTTPS and "
            "TLS listeners, or one TCP or UDP listener; change the port of one of them"
        )
        return Conflict(st.R_INVALID, message, conflicted=st.R_PROTOCOL_CONFLICT)
    if lc.family != "TLS":
        return None
    same = [o for o in index.names.get((port, lc.hostname), ()) if o is not lc]
    if not same:
        return None
    what = f"hostname {lc.hostname}" if lc.hostname else "no hostname (every server name)"
    named = ", ".join(f"{_seen_from(o, lc)} ({o.protocol})" for o in same)
    message = (
        f"Listener {named} also has port {port} and {what}: "
        "the server name of a TLS connection could not tell them apart; give them different hostnames "
        "or ports"
    )
    # Same protocol: only spelled differently (https, HTTPS), which the CRD's uniqueness rule misses.
    protocol = any(o.protocol != lc.protocol for o in same)
    return Conflict(
        st.R_INVALID, message, conflicted=st.R_PROTOCOL_CONFLICT if protocol else st.R_HOSTNAME_CONFLICT
    )


def _conflict_across(
    lc: ListenerContext,
    owners: dict[tuple[str, int], ListenerContext],
    names: dict[tuple[tuple[str, int], str], ListenerContext],
) -> Conflict | None:
    """Why an older Gateway's listeners (already in ``owners`` and ``names``) keep ``lc``'s socket."""
    for socket in lc.sockets:
        address, port = socket
        owner = owners.get(socket)
        if (
            owner is not None
            and owner.gateway is not lc.gateway
            and (owner.family != lc.family or lc.family in ALONE)
        ):
            gw = owner.gateway
            return Conflict(
                st.R_PORT_UNAVAILABLE,
                f"{address}:{port} is already served by listener {owner.name} ({owner.protocol}) of "
                f"the older Gateway {gw.namespace}/{gw.name}; "
                + (
                    f"a {alone.protocol} listener needs its port for itself"
                    if (alone := lc if lc.family in ALONE else owner).family in ALONE
                    else "listeners of these protocols cannot share a port"
                )
                + ": use another port or another address",
                conflicted=None,
            )
        holder = names.get((socket, lc.hostname or ""))
        if holder is not None and holder.gateway is not lc.gateway:
            gw = holder.gateway
            what = f"hostname {lc.hostname}" if lc.hostname else "every server name (no hostname)"
            return Conflict(
                st.R_INVALID,
                f"{address}:{port} already serves {what} for listener {holder.name} ({holder.protocol}) of "
                f"the older Gateway {gw.namespace}/{gw.name}; use another hostname, port or address",
                conflicted=st.R_HOSTNAME_CONFLICT,
            )
    return None


def _note_overlaps(gateways: list[GatewayContext]) -> None:
    """Mark TLS-terminating listeners whose hostnames overlap on a socket (``OverlappingTLSConfig``).

    A client may reuse a connection made for one name for another its
    certificate also covers (HTTP connection coalescing); on a socket
    serving ``a.example.com`` and ``*.example.com`` that reaches the
    other listener's certificate, answered 421 by weir. Only a warning: both
    are served.
    """
    by_socket: dict[tuple[str, int], list[ListenerContext]] = defaultdict(list)
    for ctx in gateways:
        for lc in ctx.listeners:
            if lc.valid and lc.terminates_tls:
                for socket in lc.sockets:
                    by_socket[socket].append(lc)
    for listeners in by_socket.values():
        # Found through each hostname's wildcard suffixes, not by testing every pair: a socket of
        # 1,000 HTTPS listeners would cost a million tests (and each is named in the order given).
        order = {id(lc): at for at, lc in enumerate(listeners)}
        by_hostname: dict[str | None, list[ListenerContext]] = defaultdict(list)
        for lc in listeners:
            by_hostname[lc.hostname].append(lc)
        beneath: dict[str | None, list[str]] = defaultdict(list)  # the hostnames each one covers
        for hostname in by_hostname:
            if hostname is not None:
                beneath[None].append(hostname)
                for wildcard in wildcards_over(hostname):
                    if wildcard in by_hostname:
                        beneath[wildcard].append(hostname)
        for hostname, group in by_hostname.items():
            names: list[str | None] = [hostname, *beneath.get(hostname, ())]
            if hostname is not None:
                names += [w for w in wildcards_over(hostname) if w in by_hostname]
                names.append(None)
            others = sorted(
                {id(o): o for name in names for o in by_hostname.get(name, ())}.values(),
                key=lambda o: order[id(o)],
            )
            for lc in group:
                seen = set(lc.overlapping)
                for other in others:
                    label = _label(other, lc.gateway)
                    if other is not lc and label not in seen:
                        seen.add(label)
                        lc.overlapping.append(label)


def _label(lc: ListenerContext, seen_from: Gateway) -> str:
    gw = lc.gateway
    name = f"{lc.name} ({lc.hostname or 'no hostname'})"
    return name if gw is seen_from else f"{name} of Gateway {gw.namespace}/{gw.name}"


def wildcards_over(name: str) -> Iterator[str]:
    """The wildcard hostnames other than ``name`` that match ``name``, most specific first:
    ``a.b.example`` gives ``*.b.example``, ``*.example`` (not ``*``, which is no hostname)."""
    at = name.find(".")
    while at >= 0:
        wildcard = "*" + name[at:]
        if wildcard != name:
            yield wildcard
        at = name.find(".", at + 1)


def hostnames_overlap(a: str | None, b: str | None) -> bool:
    """Whether some server name matches both listener hostnames (``None``: every name)."""
    if a is None or b is None or a == b:
        return True
    return covers(a, b) or covers(b, a)


def covers(hostname: str | None, name: str) -> bool:
    """Whether listener ``hostname`` matches ``name`` (possibly a wildcard itself: then all it matches).

    ``None`` matches every name; ``*.example.com`` any name with one or more
    labels in front of ``example.com``.
    """
    if hostname is None or hostname == name:
        return True
    if not hostname.startswith("*."):
        return False
    return name.endswith(hostname[1:])
