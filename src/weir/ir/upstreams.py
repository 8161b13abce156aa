"""IR upstreams: where traffic goes (endpoints or an external hostname), how it is spoken to
(protocol, TLS), and what guards it (egress guard, retry budget, credentials, MCP tool policy)."""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Literal

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
    oauth2: OAuth2Credential | None = None
    aws_sigv4: AwsSigV4 | None = None
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
class OAuth2Credential:
    """An OAuth2 client-credentials token Envoy fetches and sends as ``Authorization: Bearer <token>``.

    ``name`` identifies the credential (one per ``BackendCredentialPolicy``,
    ``credential/NS/POLICY``). Envoy posts to ``token_url`` through the
    upstream ``token_upstream`` (in :attr:`IR.upstreams`: the token
    endpoint's XBackend, with its TLS and egress guard) with
    ``client_id`` and the value of the :class:`GenericSecret`
    ``client_secret`` (in the form body, or HTTP Basic with
    ``basic_auth``), and the ``scopes``; it caches the token and fetches
    the next before it expires. ``overwrite``: as for
    :class:`CredentialInjection`.
    """

    name: str
    token_upstream: str
    token_url: str
    client_id: str
    client_secret: str
    scopes: tuple[str, ...] = ()
    basic_auth: bool = False
    overwrite: bool = True


@dataclass(frozen=True, slots=True)
class AwsSigV4:
    """AWS Signature Version 4 on every request to an upstream (``BackendCredentialPolicy``).

    The request is signed for ``region`` and ``service`` with the access key
    ``access_key_id``, its ``secret_access_key`` and, for temporary
    credentials, ``session_token``; the body's SHA-256 is signed with
    ``signed_payload``, else ``UNSIGNED-PAYLOAD``. The secret fields are
    redacted by :func:`to_data` and never appear in ``repr``.
    """

    region: str
    service: str
    access_key_id: str
    secret_access_key: str = dataclasses.field(repr=False)
    session_token: str | None = dataclasses.field(default=None, repr=False)
    signed_payload: bool = True


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
    #: The policy grants tools per caller: a tool must then be granted, by ``allowed`` (to every
    #: caller, identified or not; empty: to none) or by one of ``grants`` whose caller matches.
    per_caller: bool = False
    grants: tuple[McpToolGrant, ...] = ()
    #: How callers' bearer tokens are verified; ``None``: they are not.
    jwt: McpJwtProvider | None = None


@dataclass(frozen=True, slots=True)
class McpJwtProvider:
    """A JWT issuer whose tokens the gateway verifies for a ``BackendMCPPolicy``.

    ``name`` is unique per policy (``NAMESPACE/NAME``); ``jwks`` the JSON Web
    Key Set (public keys, as JSON text). A request with a token that fails
    verification is refused; one without a token is served as unidentified.
    """

    name: str
    issuer: str
    audiences: tuple[str, ...]
    jwks: str
    #: The claims the policy's rules match on (each read as a list, or as the words of a string).
    claims: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class McpCaller:
    """A verified caller identity: a valid token of ``jwt`` (a :class:`McpJwtProvider` name) whose
    ``sub`` is one of ``subjects`` (when any) and which has, for each ``(claim, values)`` of
    ``claims``, one of the values (a list item, or a word of a space-separated string); or, with
    ``jwt`` ``None``, a client certificate with one of ``subject_alt_names`` (URI or DNS SAN)."""

    jwt: str | None = None
    subjects: tuple[str, ...] = ()
    claims: tuple[tuple[str, tuple[str, ...]], ...] = ()
    subject_alt_names: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class McpToolGrant:
    """Tools (patterns, as :attr:`McpToolPolicy.allowed`) the callers ``caller`` matches may call."""

    caller: McpCaller
    allowed: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DnsSettings:
    """How Envoy resolves external hostnames.

    ``resolvers`` are ``(ip, port)`` pairs; empty means the system's resolver.
    ``lookup_timeout_ms`` bounds one query so that a silent server does not
    hold configuration updates back for long.
    """

    resolvers: tuple[tuple[str, int], ...] = ()
    lookup_timeout_ms: int = 1000
