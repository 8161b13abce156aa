"""IR routing: listeners of every kind, their virtual hosts and routes, and what a route does."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# --------------------------------------------------------------------------
# Routing
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PathMatch:
    """A request path condition.

    ``Exact`` compares the whole path. ``PathPrefix`` matches whole path
    segments: ``/foo`` matches ``/foo``, ``/foo/`` and ``/foo/bar`` but not
    ``/foobar``; ``/`` matches every path. ``value`` never has a trailing
    slash unless it is ``/``. ``RegularExpression``: ``value`` is an RE2
    expression that must match the whole path (query string excluded);
    translation has checked that the data plane accepts it.
    """

    kind: Literal["Exact", "PathPrefix", "RegularExpression"]
    value: str


@dataclass(frozen=True, slots=True)
class HeaderMatch:
    """A request header condition. ``name`` is lower-cased (header names are case-insensitive).

    ``Exact``: the value equals ``value``; ``RegularExpression``: ``value``
    is an RE2 expression that must match the whole header value.
    """

    name: str
    value: str
    kind: Literal["Exact", "RegularExpression"] = "Exact"


@dataclass(frozen=True, slots=True)
class QueryMatch:
    """A query parameter condition. ``name`` compares exactly (case-sensitive).

    ``Exact``: the parameter's value equals ``value``; ``RegularExpression``:
    an RE2 expression that must match the whole value. A parameter given
    several times is matched on its first value.
    """

    name: str
    value: str
    kind: Literal["Exact", "RegularExpression"] = "Exact"


@dataclass(frozen=True, slots=True)
class RouteMatch:
    """All conditions must hold (AND). ``method``: the request method (upper case), or any."""

    path: PathMatch
    headers: tuple[HeaderMatch, ...] = ()
    query: tuple[QueryMatch, ...] = ()
    method: str | None = None


@dataclass(frozen=True, slots=True)
class Header:
    """A header name (lower-cased) and value."""

    name: str
    value: str


@dataclass(frozen=True, slots=True)
class HeaderEdits:
    """Changes to the headers of a request or a response, applied in one step.

    ``set`` replaces every value of the header (or adds it), ``add`` appends
    a value (or adds the header), ``remove`` deletes the header. Each name
    (lower-cased) appears at most once across the three; values are literal
    text. ``Host`` and HTTP/2 pseudo-headers are never edited this way.
    """

    set: tuple[Header, ...] = ()
    add: tuple[Header, ...] = ()
    remove: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class WeightedBackend:
    """One destination of a forwarding action.

    ``upstream`` names an :class:`Upstream` in :attr:`IR.upstreams`, or is
    ``None`` for a backend reference that failed to resolve: the share of
    requests that would have gone to it is answered with HTTP 500, as the
    Gateway API requires. ``weight`` is > 0 (zero-weight backends are dropped
    by translation).

    ``request_headers`` and ``response_headers`` (HTTP only) edit the
    requests sent to this backend and the responses it gives, after the
    route's own edits: where both touch a header, this backend's win.
    """

    upstream: str | None
    weight: int
    request_headers: HeaderEdits | None = None
    response_headers: HeaderEdits | None = None


@dataclass(frozen=True, slots=True)
class PathRewrite:
    """A new path for a request (or for a redirect's ``Location``).

    ``ReplaceFullPath``: the path becomes ``value``. ``ReplacePrefixMatch``:
    the part of the path that the route's ``PathPrefix`` matched (whole
    segments) becomes ``value``, the rest is kept: with prefix ``/foo``,
    ``/foo/bar`` → ``/xyz/bar`` for ``value`` ``/xyz`` (or ``/xyz/``), ``/bar``
    for ``value`` ``/`` (or empty), and ``/foo`` → ``/xyz`` (``/`` for an empty
    ``value``). Only routes matching ``PathPrefix`` use it. The query string
    is kept either way.
    """

    kind: Literal["ReplaceFullPath", "ReplacePrefixMatch"]
    value: str


@dataclass(frozen=True, slots=True)
class Rewrite:
    """Changes to a forwarded request: its Host (``hostname``) and/or its path.

    A Host rewrite wins over the upstream's own ``host_header``.
    """

    hostname: str | None = None
    path: PathRewrite | None = None


@dataclass(frozen=True, slots=True)
class Mirror:
    """Send a copy of ``numerator``/``denominator`` of the requests to ``upstream``.

    The copy is fire-and-forget: its answer is ignored, its failure changes
    nothing for the client. It carries the request as forwarded (headers
    edited, Host unchanged: no ``-shadow`` suffix). ``upstream`` names an
    HTTP :class:`Upstream`; ``0 <= numerator <= denominator``, ``denominator > 0``.
    """

    upstream: str
    numerator: int = 100
    denominator: int = 100


@dataclass(frozen=True, slots=True)
class Retry:
    """Try a request again when an attempt fails.

    An attempt is retried (at most ``attempts`` times after the first) when
    the upstream answers one of ``codes``, when no connection could be made,
    or when the upstream refused the request before processing it (reset
    before the request was sent, HTTP/2 ``REFUSED_STREAM``); never after a
    reset that may follow processing. Retries wait ``backoff_ms`` (``None``:
    25 ms), doubling each time with jitter, up to ten times that. The
    request's timeout bounds all attempts together. Request bodies are kept
    for a retry up to the connection's buffer limit; a larger body is not
    retried.
    """

    codes: tuple[int, ...] = ()
    attempts: int = 1
    backoff_ms: int | None = None


#: How long a forwarded exchange may take by default: from the end of the
#: request to the last byte of the response (Envoy's own default).
DEFAULT_REQUEST_TIMEOUT_MS = 15_000
#: How long a forwarded exchange may go without a byte by default (Envoy's own default).
DEFAULT_IDLE_TIMEOUT_MS = 300_000


@dataclass(frozen=True, slots=True)
class Forward:
    """Send the request to one of ``backends``, chosen by weight.

    ``request_timeout_ms`` bounds the whole exchange, from the end of the
    request to the last byte of the response: when it expires before the
    response starts the client gets 504, after that the response is cut.
    ``idle_timeout_ms`` bounds how long the exchange may go without a byte in
    either direction. ``0`` means no limit. Responses are always streamed to
    the client as they arrive, never gathered first. ``backend_timeout_ms``
    bounds each attempt (the first and every retry) the same way (``0``: no
    limit of its own); an attempt that times out answers 504.

    ``request_headers`` edits the request before it is forwarded (the
    backend's own edits follow), ``rewrite`` changes its Host or path,
    ``mirrors`` send copies elsewhere, ``retry`` tries again.

    ``unresolved_status`` answers the share of requests of backends whose
    ``upstream`` is ``None``: 500, as the Gateway API requires for HTTP, or
    503, which a gRPC client reads as ``UNAVAILABLE`` (gRPC routes).
    """

    backends: tuple[WeightedBackend, ...]
    request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS
    idle_timeout_ms: int = DEFAULT_IDLE_TIMEOUT_MS
    backend_timeout_ms: int = 0
    retry: Retry | None = None
    request_headers: HeaderEdits | None = None
    rewrite: Rewrite | None = None
    mirrors: tuple[Mirror, ...] = ()
    unresolved_status: Literal[500, 503] = 500
    session: SessionAffinity | None = None


@dataclass(frozen=True, slots=True)
class SessionAffinity:
    """Requests of one session go to the endpoint that served its first request.

    ``kind`` ``cookie``: the gateway sets cookie ``name`` (path ``/``) naming
    that endpoint, for ``ttl_s`` seconds (``0``: a session cookie, without
    ``Max-Age`` or ``Expires``), and clients send it back. ``header``: the
    gateway adds header ``name`` to responses and clients send it back. A
    session whose endpoint is gone continues on another one. Sessions pin an
    endpoint within a backend, not the choice among weighted backends.
    """

    kind: Literal["cookie", "header"]
    name: str
    ttl_s: int = 0


@dataclass(frozen=True, slots=True)
class DirectResponse:
    """Answer the request locally, e.g. 500 for a rule with no usable backend."""

    status: int
    body: str = ""


@dataclass(frozen=True, slots=True)
class Redirect:
    """Answer with a redirect to a ``Location`` built from the request.

    ``scheme``, ``hostname`` and ``path`` replace those of the request when
    set. ``port`` is the port written in ``Location``; ``None`` writes none
    (the scheme's default port), whatever port the request's Host carried.
    """

    status: Literal[301, 302, 303, 307, 308] = 302
    scheme: Literal["http", "https"] | None = None
    hostname: str | None = None
    port: int | None = None
    path: PathRewrite | None = None


RouteAction = Forward | DirectResponse | Redirect


@dataclass(frozen=True, slots=True)
class Cors:
    """Cross-origin resource sharing for a route.

    A preflight (``OPTIONS`` with ``Origin`` and
    ``Access-Control-Request-Method``) is answered here, 200, never
    forwarded: with the ``Access-Control-Allow-*`` headers when the origin is
    allowed, without any when it is not. Other requests are routed as usual
    and their responses get ``Access-Control-Allow-Origin`` (the request's
    origin), ``-Allow-Credentials`` and ``-Expose-Headers`` when the origin is
    allowed.

    ``allow_origins``: ``*`` (any), or ``scheme://host[:port]`` where ``*`` in
    the host matches any characters (dots included); an origin without a
    port matches the scheme's default port (80, 443) written or not.
    ``allow_methods``/``allow_headers``: ``("*",)`` allows any (with
    credentials, the requested method and headers are named back instead of
    ``*``). ``max_age_s``: how long a browser may cache a preflight's answer.
    """

    allow_origins: tuple[str, ...] = ()
    allow_methods: tuple[str, ...] = ()
    allow_headers: tuple[str, ...] = ()
    expose_headers: tuple[str, ...] = ()
    max_age_s: int = 5
    allow_credentials: bool = False


@dataclass(frozen=True, slots=True)
class Route:
    """One match and what to do with it.

    ``name`` identifies the source, ``ns/route/rule/match`` (e.g.
    ``default/web/rule/0/match/1``), and shows up in Envoy's config dump.
    Routes are evaluated in the order they appear in :attr:`VirtualHost.routes`;
    translation has already sorted them by Gateway API precedence.

    ``response_headers`` edits every response of the route (forwarded,
    redirect or local); ``cors``, when set, handles cross-origin requests.
    """

    name: str
    match: RouteMatch
    action: RouteAction
    response_headers: HeaderEdits | None = None
    cors: Cors | None = None


@dataclass(frozen=True, slots=True)
class VirtualHost:
    """Routes for a set of request hostnames.

    ``domains`` holds exact names (``api.example.com``), wildcard prefixes
    (``*.example.com``) or ``*``. Within one :class:`Listener` no domain appears
    in two virtual hosts. Any port in the request's Host header is ignored.
    """

    name: str
    domains: tuple[str, ...]
    routes: tuple[Route, ...]


@dataclass(frozen=True, slots=True)
class Listener:
    """A socket Envoy binds, serving plain HTTP (HTTP/1.1 and h2c).

    One IR listener exists per distinct ``(address, port)``; several Gateway
    listeners may share it (told apart by hostname). ``name`` is
    ``address:port``. A listener with no virtual hosts still binds and
    answers 404.
    """

    name: str
    address: str
    port: int
    virtual_hosts: tuple[VirtualHost, ...]


#: How long a relayed TCP connection may go without a byte in either direction
#: by default (Envoy's own default for TCP proxying).
DEFAULT_TCP_IDLE_TIMEOUT_MS = 3_600_000
#: How long a UDP session (one client address) is kept after its last datagram: Envoy's default.
DEFAULT_UDP_IDLE_TIMEOUT_MS = 60_000


@dataclass(frozen=True, slots=True)
class TcpListener:
    """A socket Envoy binds, relaying the bytes of each connection to one backend, unchanged.

    Each accepted connection goes to one of ``backends``, chosen by weight,
    and its bytes flow both ways until either side closes (a half-close is
    passed on) or nothing moved for ``idle_timeout_ms`` (``0``: no limit).
    A backend whose ``upstream`` is ``None`` (a reference that failed to
    resolve) gets its share of connections closed as soon as they are
    accepted, as the Gateway API requires; with no backends at all every
    connection is closed that way. Every upstream named is of protocol
    :attr:`UpstreamProtocol.TCP`. The socket belongs to this listener alone:
    ``name`` is ``address:port`` as for :class:`Listener`, and no two IR
    listeners of either kind share a socket.
    """

    name: str
    address: str
    port: int
    backends: tuple[WeightedBackend, ...]
    idle_timeout_ms: int = DEFAULT_TCP_IDLE_TIMEOUT_MS


@dataclass(frozen=True, slots=True)
class UdpListener:
    """A UDP socket Envoy binds, relaying each client's datagrams to one backend, and the answers back.

    Datagrams from one client address form a session, held for
    ``idle_timeout_ms`` after the last one; a session's datagrams go to the
    backend in ``backends`` (at most one: weir does not split UDP by weight),
    answers come back from the listener's socket. With no backend (a
    reference that failed to resolve) every datagram is dropped. Every
    upstream named is of protocol :attr:`UpstreamProtocol.UDP`; the socket
    belongs to this listener alone.
    """

    name: str
    address: str
    port: int
    backends: tuple[WeightedBackend, ...]
    idle_timeout_ms: int = DEFAULT_UDP_IDLE_TIMEOUT_MS


@dataclass(frozen=True, slots=True)
class HttpsServer:
    """HTTPS on the connections of a :class:`TlsListener` whose ClientHello names one of ``server_names``.

    ``name`` is ``LISTENER/SERVER-NAME`` (``127.0.0.1:8443/a.example.com``,
    ``127.0.0.1:8443/*`` when ``server_names`` is empty) and also names the
    routes of these connections. The gateway terminates TLS (1.2 or 1.3)
    presenting one of ``certificates`` (names of :class:`TlsCertificate`
    secrets, at least one): the one whose names match the client's server
    name, exact before wildcard, else the first. Clients are offered HTTP/2
    and HTTP/1.1 through ALPN. Requests are then routed by Host through
    ``virtual_hosts``, as on a :class:`Listener`: a Host that no virtual host
    matches gets 404. These are only the routes of this server name, so a
    request never reaches routes meant for another one; translation adds
    virtual hosts answering 421 (Misdirected Request) for the Hosts another
    entry of the listener owns (a client reusing a connection for another
    name must open a new one): those under this server's own name, and a
    ``*`` for the rest when it has one.
    """

    name: str
    server_names: tuple[str, ...]
    certificates: tuple[str, ...]
    virtual_hosts: tuple[VirtualHost, ...]
    #: Client certificates asked for and checked during the handshake; ``None``: none asked.
    client_validation: ClientValidation | None = None


@dataclass(frozen=True, slots=True)
class ClientValidation:
    """How an HTTPS server validates the certificates of its clients.

    Clients are asked for a certificate that chains to ``trusted_ca`` (the
    name of a :class:`TrustedCA` secret). ``required``: a client without one,
    or with one that does not chain, fails the handshake. Otherwise every
    client gets through and the backend decides (the Gateway API's
    ``AllowInsecureFallback``).
    """

    trusted_ca: str
    required: bool = True


@dataclass(frozen=True, slots=True)
class TlsRelay:
    """The connections of a :class:`TlsListener` whose ClientHello names one of ``server_names``, relayed.

    ``name`` is ``LISTENER/SERVER-NAME`` as for :class:`HttpsServer`. Without
    ``certificates`` (passthrough), the connection's bytes are relayed
    unchanged, ClientHello included: the client's TLS session is with the
    backend, whose certificate the client sees and verifies; the gateway
    never decrypts. With ``certificates`` (names of :class:`TlsCertificate`
    secrets), the gateway terminates TLS as for :class:`HttpsServer`, without
    offering any ALPN protocol, and relays the decrypted bytes. Backends are
    chosen per connection as for :class:`TcpListener` (by weight; the share of
    a backend whose ``upstream`` is ``None`` is closed at once, as is every
    connection when there are no backends), idle limit ``idle_timeout_ms``;
    every upstream named is of protocol :attr:`UpstreamProtocol.TCP`.
    """

    name: str
    server_names: tuple[str, ...]
    backends: tuple[WeightedBackend, ...]
    certificates: tuple[str, ...] = ()
    idle_timeout_ms: int = DEFAULT_TCP_IDLE_TIMEOUT_MS


@dataclass(frozen=True, slots=True)
class TlsListener:
    """A socket Envoy binds for TLS, each connection dispatched by the server name (SNI) in its ClientHello.

    The entries of ``https`` and ``relays`` each claim ``server_names``:
    exact names, or ``*.`` wildcards matching any name with one or more labels
    in front (``*.example.com`` matches ``a.b.example.com``, not
    ``example.com``). A connection goes to the entry with the most specific
    match: an exact name, else the longest wildcard, else the one entry (at
    most one) whose ``server_names`` is empty, which also takes clients that
    send no server name. No name appears in two entries. A connection that
    matches no entry, or does not start with a TLS ClientHello, is closed.
    ``name`` is ``address:port``; as for the other kinds, the socket belongs
    to this listener alone.
    """

    name: str
    address: str
    port: int
    https: tuple[HttpsServer, ...] = ()
    relays: tuple[TlsRelay, ...] = ()


AnyListener = Listener | TcpListener | TlsListener | UdpListener
