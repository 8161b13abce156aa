"""The intermediate representation: what the data plane must do, in weir's words.

The IR is the contract between :mod:`weir.translate` (which produces it from
Gateway API resources) and :mod:`weir.xds.build` (which turns it into Envoy
resources). It is made of frozen dataclasses holding only plain values and
tuples, so two IRs built from the same input compare equal and serialise to
the same bytes.

Names in the IR (listener, upstream, secret names) are stable identifiers
derived from the Gateway API objects; :mod:`weir.xds.build` uses them verbatim
as Envoy resource names, so a reader can follow an object from a manifest to
``/config_dump``.

Nothing here knows Envoy field names. A concept appears here when a user can
observe it; how Envoy achieves it is :mod:`weir.xds.build`'s business.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Any, Literal

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


# --------------------------------------------------------------------------
# Upstreams
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A concrete IP address and port."""

    address: str
    port: int


@dataclass(frozen=True, slots=True)
class StaticEndpoints:
    """A fixed set of endpoints (Service backends). May be empty: then 503."""

    endpoints: tuple[Endpoint, ...]


@dataclass(frozen=True, slots=True)
class DnsName:
    """An external hostname that Envoy resolves itself and keeps re-resolving.

    ``dns``: how to resolve it, when it differs from :attr:`IR.dns` (a
    GatewayClass's parameters can name their own resolvers); ``None``: :attr:`IR.dns`.
    """

    hostname: str
    port: int
    dns: DnsSettings | None = None


class UpstreamProtocol(enum.Enum):
    """What Envoy speaks to an upstream.

    ``HTTP1``: HTTP/1.1 only. ``HTTP2``: HTTP/2 only (ALPN ``h2`` over TLS,
    prior knowledge (h2c) in plaintext). ``AUTO``: ALPN decides between h2 and
    http/1.1; only meaningful with TLS (translation uses ``HTTP1`` for
    plaintext). ``TCP``: no HTTP at all, the bytes of a :class:`TcpListener`'s
    connections, relayed unchanged (inside TLS when the upstream has TLS);
    only TCP listeners use such upstreams, and only such upstreams serve
    them.
    """

    HTTP1 = "http1"
    HTTP2 = "http2"
    AUTO = "auto"
    TCP = "tcp"
    UDP = "udp"


@dataclass(frozen=True, slots=True)
class SubjectAltName:
    """A name the upstream's certificate must carry (one of a tuple suffices).

    ``kind`` ``DNS`` matches a certificate DNS SAN exactly; a ``*.`` leading
    label in ``value`` or in the certificate is a wildcard per RFC 6125.
    ``URI`` matches a URI SAN exactly.
    """

    kind: Literal["DNS", "URI"]
    value: str


@dataclass(frozen=True, slots=True)
class UpstreamTLS:
    """TLS origination towards an upstream. Verification is never optional.

    ``sni`` is sent in the ClientHello. The peer certificate must chain to
    ``trusted_ca`` (the name of a :class:`TrustedCA` secret, so it can change
    without touching the upstream) or, when that is ``None``, to the system
    trust store at ``system_trust_file``. Exactly one of the two is set. The
    certificate must carry one of ``subject_alt_names`` (never empty).
    ``client_certificate`` names a :class:`TlsCertificate` secret to present,
    for mutual TLS.
    """

    sni: str
    subject_alt_names: tuple[SubjectAltName, ...]
    trusted_ca: str | None = None
    system_trust_file: str | None = None
    client_certificate: str | None = None
    min_version: Literal["1.2", "1.3"] = "1.2"
    max_version: Literal["1.2", "1.3"] = "1.3"


@dataclass(frozen=True, slots=True)
class EgressGuard:
    """Networks the addresses of an external hostname must not be in (DNS rebinding, SSRF).

    The address chosen for each request is checked before any connection is
    made: one inside ``denied_networks`` (CIDRs in canonical form, sorted)
    answers the client 403 with a body that names the address, and the
    refusal is counted and logged. For a ``TCP`` upstream the check is the
    same, per connection, and a refused connection is closed before any
    byte is relayed (there is no HTTP to answer with). An IPv6 address
    that embeds an IPv4 address (IPv4-mapped, NAT64, 6to4...) is checked as
    the IPv4 address it reaches (:mod:`weir.addresses`). When a name
    resolves to several addresses, only the requests (or connections) that
    would go to a denied one are refused. Empty: nothing is denied.
    """

    denied_networks: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Upstream:
    """A destination requests are forwarded to (an Envoy cluster).

    ``name`` is ``service/NS/NAME/PORT`` (``service/NS/NAME/PORT/tcp`` for
    the raw TCP use of a Service port by a TCPRoute, ``service/NS/NAME/PORT/h2``
    for its HTTP/2 use by a GRPCRoute) or ``xbackend/NS/NAME``.
    ``host_header``, when set, replaces the request's Host (``:authority``)
    when this upstream is chosen; XBackends set it to the external hostname
    so the request is valid for the real server (``TCP`` upstreams have
    none). ``egress_guard`` is set on every upstream that is an external
    hostname (``None``: no guard, as for Services, whose addresses their
    owners choose).

    ``websocket``: a request asking to upgrade to WebSocket (RFC 6455,
    ``Upgrade: websocket``) is passed on with its upgrade, and once the
    upstream answers ``101`` the connection carries WebSocket frames both
    ways, unchanged, until either side closes. Elsewhere the upgrade is not
    offered to upstreams. Only ``HTTP1`` upstreams have it.

    ``grpc``: the upstream speaks gRPC (an ``HTTP2`` upstream): a route to
    it honours the deadline a call carries (``grpc-timeout``) towards the
    upstream, so a call past its deadline is cancelled there too and the
    client gets ``DEADLINE_EXCEEDED``.
    """

    name: str
    destination: StaticEndpoints | DnsName
    protocol: UpstreamProtocol = UpstreamProtocol.HTTP1
    tls: UpstreamTLS | None = None
    host_header: str | None = None
    connect_timeout_ms: int = 5000
    egress_guard: EgressGuard | None = None
    websocket: bool = False
    grpc: bool = False
    credential: CredentialInjection | None = None
    mcp_tools: McpToolPolicy | None = None
    retry_budget: RetryBudget | None = None


@dataclass(frozen=True, slots=True)
class RetryBudget:
    """At most ``percent`` of the requests in flight to an upstream may be retries, and at least
    ``min_concurrent`` retries are always allowed; a retry beyond the budget is not made."""

    percent: int
    min_concurrent: int


@dataclass(frozen=True, slots=True)
class CredentialInjection:
    """A credential Envoy adds to every request it sends to an upstream (``BackendCredentialPolicy``).

    ``secret`` names a :class:`GenericSecret` in :attr:`IR.secrets` whose value
    is the whole header value (any prefix such as ``Bearer `` included). It is
    delivered over SDS under a name that does not change with the value, so a
    rotated credential reaches Envoy without replacing the cluster: unlike a
    client certificate, a header is added per request, and pooled connections
    carry the new value from the next request on. ``overwrite``: the
    gateway's value replaces a header of that name sent by the client;
    otherwise the client's is kept.
    """

    secret: str
    header: str = "Authorization"
    overwrite: bool = True


@dataclass(frozen=True, slots=True)
class McpToolPolicy:
    """Which tools an MCP ``tools/call`` may name (``BackendMCPPolicy``).

    Patterns are exact tool names or contain ``*``, which matches any run of
    characters (including none). A tool is allowed when ``allowed`` is empty
    or one of its patterns matches, and no ``denied`` pattern matches. Other
    MCP methods are not affected.
    """

    allowed: tuple[str, ...] = ()
    denied: tuple[str, ...] = ()


# --------------------------------------------------------------------------
# Secrets (delivered over SDS so they change without touching their users)
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TrustedCA:
    """PEM certificates (one or more, concatenated) that upstream certificates must chain to."""

    name: str
    pem: str


@dataclass(frozen=True, slots=True)
class TlsCertificate:
    """A certificate chain and private key in PEM."""

    name: str
    certificate_chain: str
    private_key: str


@dataclass(frozen=True, slots=True)
class GenericSecret:
    """An opaque value (a credential), redacted by :func:`to_data`."""

    name: str
    value: str


Secret = TrustedCA | TlsCertificate | GenericSecret


# --------------------------------------------------------------------------
# The whole
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DnsSettings:
    """How Envoy resolves external hostnames.

    ``resolvers`` are ``(ip, port)`` pairs; empty means the system's resolver.
    ``lookup_timeout_ms`` bounds one query so that a silent server does not
    hold configuration updates back for long.
    """

    resolvers: tuple[tuple[str, int], ...] = ()
    lookup_timeout_ms: int = 1000


@dataclass(frozen=True, slots=True)
class IR:
    """Everything the data plane must do. Tuples are sorted by name.

    ``listeners`` holds HTTP, TCP and TLS listeners alike (each binds a
    socket); their names, ``address:port``, are unique across the kinds.
    """

    listeners: tuple[AnyListener, ...] = ()
    upstreams: tuple[Upstream, ...] = ()
    secrets: tuple[Secret, ...] = ()
    dns: DnsSettings = DnsSettings()


def to_data(value: Any, *, omit_defaults: bool = False) -> Any:
    """Plain data (dicts, lists, scalars) for an IR value, for golden files and ``weir translate``.

    Dataclasses become mappings with a ``type`` key naming their class where
    the field's type is a union, enums become their value, tuples lists.
    Secret material (private keys) is replaced by a placeholder so that it
    never reaches output meant for people. ``omit_defaults``: leave out every
    field equal to its default (translate goldens: a new IR field, at its
    default, then changes none of them, and a diff shows what changed).
    """
    if isinstance(value, TlsCertificate):
        return {
            "type": "TlsCertificate",
            "name": value.name,
            "certificateChain": f"<{len(value.certificate_chain)} bytes of PEM>",
            "privateKey": "<redacted>",
        }
    if isinstance(value, GenericSecret):
        return {"type": "GenericSecret", "name": value.name, "value": "<redacted>"}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = {}
        if isinstance(
            value,
            (
                Forward,
                DirectResponse,
                Redirect,
                StaticEndpoints,
                DnsName,
                TrustedCA,
                Listener,
                TcpListener,
                UdpListener,
                TlsListener,
            ),
        ):
            out["type"] = type(value).__name__
        for field in dataclasses.fields(value):
            item = getattr(value, field.name)
            if omit_defaults and _is_default(field, item):
                continue
            out[camel(field.name)] = to_data(item, omit_defaults=omit_defaults)
        return out
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple | list):
        return [to_data(v, omit_defaults=omit_defaults) for v in value]
    return value


def _is_default(field: dataclasses.Field[Any], value: Any) -> bool:
    """Whether ``value`` is ``field``'s default (a field without one never is)."""
    if field.default is not dataclasses.MISSING:
        return bool(value == field.default)
    if field.default_factory is not dataclasses.MISSING:
        return bool(value == field.default_factory())
    return False


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)
