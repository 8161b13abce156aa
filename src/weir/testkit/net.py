"""Loopback-only networking helpers shared by the testkit servers.

Everything in :mod:`weir.testkit` binds to loopback only: ``127.0.0.0/8`` or
``::1``. Hosts must be IP literals (``"localhost"`` is refused: it may resolve
to more than one address, or to something unexpected).
"""

from __future__ import annotations

import collections
import ipaddress
import socket

__all__ = ["NonLoopbackAddressError", "free_port", "loopback_ok", "require_loopback"]


class NonLoopbackAddressError(ValueError):
    """Raised when a testkit server is asked to bind to a non-loopback address."""


def loopback_ok(host: str) -> bool:
    """Return True iff ``host`` is an IP literal in ``127.0.0.0/8`` or is ``::1``.

    Never raises: anything that is not such an IP literal (hostnames, the
    wildcard ``0.0.0.0``/``::``, garbage) returns False.
    """
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address):
        return address == ipaddress.IPv6Address("::1")
    return address in ipaddress.IPv4Network("127.0.0.0/8")


def require_loopback(host: str, *, what: str = "testkit server") -> str:
    """Return ``host`` unchanged if :func:`loopback_ok`, else raise.

    Raises:
        NonLoopbackAddressError: with a message naming ``what`` and ``host``.
    """
    if not loopback_ok(host):
        raise NonLoopbackAddressError(
            f"{what} refuses to bind to {host!r}: weir.testkit binds only to loopback "
            "IP literals (127.0.0.0/8 or ::1)"
        )
    return host


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port that was free on ``host`` a moment ago.

    The port is found by binding port 0 and closing the socket, so another
    process may take it before the caller binds it; prefer binding port 0
    directly where the API allows it.

    Raises:
        NonLoopbackAddressError: if ``host`` is not a loopback IP literal.
    """
    require_loopback(host, what="free_port")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # The kernel may hand out a closed port again at once: a test asking for two ports before
    # binding either (a gateway's and a listener's) then got the same one twice. A port handed
    # out recently in this process is not handed out again.
    for _ in range(64):
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port: int = sock.getsockname()[1]
        if port not in _HANDED_OUT:
            break
    if len(_RECENT) == _RECENT.maxlen:
        _HANDED_OUT.discard(_RECENT[0])
    _RECENT.append(port)
    _HANDED_OUT.add(port)
    return port


#: The ports :func:`free_port` handed out last (bounded: the oldest are forgotten).
_RECENT: collections.deque[int] = collections.deque(maxlen=4096)
_HANDED_OUT: set[int] = set()
