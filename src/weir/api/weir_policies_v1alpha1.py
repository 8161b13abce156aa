"""weir's backend policies, ``weir.dev/v1alpha1``: BackendCredentialPolicy and BackendMCPPolicy.

Both are Gateway API policies attached to backends (GEP-713 direct policy
attachment, ``spec.targetRefs`` to objects in the policy's own namespace):
properties of the destination, owned by whoever owns the backend. What they
do is in :mod:`weir.translate.credentials` and :mod:`weir.translate.mcppolicy`.

A credential the gateway adds to every request it sends to the targets, so
that applications never hold it::

    apiVersion: weir.dev/v1alpha1
    kind: BackendCredentialPolicy
    metadata: {name: openai-key, namespace: egress}
    spec:
      targetRefs: [{group: gateway.networking.x-k8s.io, kind: XBackend, name: openai}]
      secretRef: {name: openai, key: api-key}   # a Secret in the policy's namespace
      header: {name: Authorization, valuePrefix: "Bearer "}   # the defaults: Authorization, no prefix
      overwrite: true   # the default: the gateway's value replaces the client's

Or a credential that is not a static key (exactly one of ``secretRef``, ``oauth2``,
``awsSigV4``): an OAuth2 token the gateway fetches (client-credentials grant) and renews, or an
AWS Signature Version 4 on each request::

    spec:
      targetRefs: [{group: gateway.networking.x-k8s.io, kind: XBackend, name: azure-openai}]
      oauth2:
        tokenEndpoint: {backendRef: {name: entra-id}, path: /TENANT/oauth2/v2.0/token}  # an XBackend
        clientIDRef: {name: entra-client, key: client-id}
        clientSecretRef: {name: entra-client, key: client-secret}
        scopes: ["https://cognitiveservices.azure.com/.default"]
    ---
    spec:
      targetRefs: [{group: gateway.networking.x-k8s.io, kind: XBackend, name: bedrock}]
      awsSigV4: {region: us-east-1, service: bedrock, credentialsRef: {name: aws}}  # AWS_* keys

The tools an agent may call on an MCP server (an XBackend of protocol ``MCP``)::

    apiVersion: weir.dev/v1alpha1
    kind: BackendMCPPolicy
    metadata: {name: github-tools, namespace: egress}
    spec:
      targetRefs: [{group: gateway.networking.x-k8s.io, kind: XBackend, name: github-mcp}]
      allowedTools: ["get_*", search_code]   # absent: every tool not denied
      deniedTools: [get_secret]              # wins over allowedTools

Tools granted by who calls (per-caller policy): ``jwt`` names how the gateway
verifies a bearer token, and each of ``rules`` grants tools to callers whose
verified identity it matches (a token's subject or claims, or a client
certificate's subject alternative name on an HTTPS listener that validates
client certificates). With ``rules``, ``allowedTools`` is what every caller
may use, identified or not (absent: nothing)::

    spec:
      targetRefs: [{group: gateway.networking.x-k8s.io, kind: XBackend, name: github-mcp}]
      jwt:
        issuer: https://idp.example
        audiences: [github-mcp]
        jwks: {configMapRef: {name: idp-keys, key: jwks.json}}   # or secretRef
      allowedTools: [search_code]          # anyone
      deniedTools: [delete_*]              # no one
      rules:
      - from: {jwt: {claims: [{name: groups, values: [maintainers]}]}}
        allowedTools: ["create_*", "get_*"]
      - from: {clientCertificate: {subjectAltNames: ["spiffe://example/ci"]}}
        allowedTools: [get_pull_request]

``targetRefs`` is the Gateway API's (1 to 16 references, with its rules on
``sectionName``); a CEL rule limits the kinds each policy can act on, so a
reference to anything else is refused with the object, where its author sees it.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, StringConstraints

from weir.api.cel import CelChecked, CelModel, CelRule
from weir.api.gateway_v1 import ParentReference
from weir.api.gateway_v1_backendtlspolicy import TargetRefs
from weir.api.meta import Condition, GatewayController, KubeObject, Model, ObjectName
from weir.api.weir_v1alpha1 import API_VERSION
from weir.api.xbackend_v1alpha1 import GROUP as XBACKEND_GROUP

_ATOMIC: dict[str, Any] = {"x-kubernetes-list-type": "atomic"}

# ------------------------------------------------------------------ status (PolicyStatus)


class PolicyAncestorStatus(Model):
    """Gateway API ``PolicyAncestorStatus``: the policy's conditions as seen from one ancestor."""

    ancestor_ref: ParentReference
    controller_name: GatewayController
    conditions: tuple[Condition, ...] = Field(
        min_length=1,
        max_length=8,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )


class PolicyStatus(Model):
    """Gateway API ``PolicyStatus``. Read only for the CRD: status is kept as data."""

    ancestors: tuple[PolicyAncestorStatus, ...] = Field(default=(), max_length=16, json_schema_extra=_ATOMIC)


# ------------------------------------------------------------------ BackendCredentialPolicy

#: The kinds a BackendCredentialPolicy acts on.
CREDENTIAL_TARGET_KINDS = (("", "Service"), (XBACKEND_GROUP, "XBackend"))

CredentialTargetRefs = Annotated[
    TargetRefs,
    CelRule(
        "self.all(t, (t.group == '' && t.kind == 'Service') || "
        f"(t.group == '{XBACKEND_GROUP}' && t.kind == 'XBackend'))",
        f'targetRefs must be Services (group "", kind Service) or XBackends (group {XBACKEND_GROUP}, '
        "kind XBackend)",
    ),
]

#: A Secret key, as Kubernetes allows them.
SecretKey = Annotated[str, StringConstraints(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z0-9]+$")]

#: Headers Envoy manages itself, or that frame the message: a credential cannot be put there.
RESERVED_HEADERS = (
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "upgrade",
)

#: Gateway API ``HTTPHeaderName`` (an RFC 7230 token), minus the headers of :data:`RESERVED_HEADERS`.
CredentialHeaderName = Annotated[
    str,
    StringConstraints(min_length=1, max_length=256, pattern=r"^[A-Za-z0-9!#$%&'*+\-.^_`|~]+$"),
    CelRule(
        "!(self.lowerAscii() in [" + ", ".join(f"'{h}'" for h in RESERVED_HEADERS) + "])",
        "header name must not be Host, Content-Length, Transfer-Encoding, Connection, Keep-Alive, "
        "Proxy-Connection, TE or Upgrade: Envoy sets those itself",
    ),
]


class SecretKeyReference(Model):
    """A key of a Secret in the policy's namespace."""

    name: ObjectName
    key: SecretKey


class CredentialHeader(Model):
    """Where the credential goes: header ``name``, value ``valuePrefix`` + the Secret's value."""

    name: CredentialHeaderName = "Authorization"
    #: Printable ASCII; it may end with a space (``Bearer ``) but not start with one.
    value_prefix: (
        Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=r"^[!-~][ -~]*$")] | None
    ) = None


class LocalXBackendReference(Model):
    """An XBackend in the policy's namespace, by name."""

    group: Literal["gateway.networking.x-k8s.io"] = "gateway.networking.x-k8s.io"
    kind: Literal["XBackend"] = "XBackend"
    name: ObjectName


class TokenEndpoint(Model):
    """Where the gateway asks for tokens: ``path`` on an XBackend in the policy's namespace.

    An XBackend, not a URL: its hostname, port, TLS verification (CA, SAN)
    and the egress guard of the Gateways using the credential's targets are
    those of any other external backend, so the token request leaves by the
    same guarded path as every other request, and a name that resolves into
    a denied network is refused (no token, no request) rather than fetched.
    """

    #: An XBackend (group gateway.networking.x-k8s.io) in the policy's namespace.
    backend_ref: LocalXBackendReference
    path: Annotated[str, StringConstraints(min_length=1, max_length=1024, pattern=r"^/[!-~]*$")] = "/"


#: An OAuth2 scope (RFC 6749 section 3.3: printable ASCII but space, ``"`` and ``\\``).
OAuth2Scope = Annotated[str, StringConstraints(min_length=1, max_length=256, pattern=r"^[!#-\[\]-~]+$")]


class OAuth2ClientCredentials(Model):
    """OAuth2 client-credentials grant (RFC 6749 section 4.4): the gateway gets the token.

    The gateway posts ``grant_type=client_credentials``, the client id and
    secret and the scopes to the token endpoint, caches the access token,
    fetches a new one before it expires, and sends ``Authorization: Bearer
    <token>`` with every request to the targets.
    """

    token_endpoint: TokenEndpoint
    client_id_ref: SecretKeyReference = Field(alias="clientIDRef")
    client_secret_ref: SecretKeyReference
    scopes: tuple[OAuth2Scope, ...] | None = Field(
        default=None, min_length=1, max_length=16, json_schema_extra=_ATOMIC
    )
    #: ``Body``: id and secret in the form body (RFC 6749's alternative); ``Basic``: HTTP Basic.
    client_authentication: Literal["Body", "Basic"] = "Body"


#: An AWS region (``us-east-1``) or service signing name (``bedrock``, ``execute-api``).
AwsName = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=r"^[a-z0-9][a-z0-9-]*$")]


class AwsCredentialsReference(Model):
    """A Secret in the policy's namespace holding AWS credentials under the keys of the AWS CLI's
    environment: ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY`` and, for temporary credentials,
    ``AWS_SESSION_TOKEN``."""

    name: ObjectName


class AwsSigV4(Model):
    """AWS Signature Version 4: the gateway signs each request (``Authorization: AWS4-HMAC-SHA256 ...``)."""

    region: AwsName
    service: AwsName
    credentials_ref: AwsCredentialsReference
    #: ``Signed``: the body's SHA-256 is part of the signature (the gateway buffers the body, up to
    #: 1 MiB); ``Unsigned``: ``UNSIGNED-PAYLOAD``, for services that accept it (S3) and large
    #: or streamed bodies.
    payload: Literal["Signed", "Unsigned"] = "Signed"


class BackendCredentialPolicySpec(CelModel):
    cel_rules: ClassVar[tuple[CelRule, ...]] = (
        CelRule(
            "(has(self.secretRef) ? 1 : 0) + (has(self.oauth2) ? 1 : 0) + (has(self.awsSigV4) ? 1 : 0) == 1",
            "set exactly one of secretRef (a static credential), oauth2 or awsSigV4",
        ),
        CelRule(
            "has(self.secretRef) || !has(self.header) || ((!has(self.header.name) || "
            "self.header.name.lowerAscii() == 'authorization') && !has(self.header.valuePrefix))",
            "header applies to secretRef only: oauth2 sends Authorization: Bearer <token>, awsSigV4 its "
            "signature in Authorization",
        ),
        CelRule(
            "!has(self.awsSigV4) || !has(self.overwrite) || self.overwrite",
            "overwrite: false cannot apply to awsSigV4: the signature covers the request as sent and "
            "always replaces a client's Authorization",
        ),
    )

    target_refs: CredentialTargetRefs
    secret_ref: SecretKeyReference | None = None
    oauth2: OAuth2ClientCredentials | None = None
    aws_sig_v4: AwsSigV4 | None = Field(default=None, alias="awsSigV4")
    header: CredentialHeader = Field(default_factory=CredentialHeader)
    overwrite: bool = Field(default=True, strict=True)


class BackendCredentialPolicy(CelChecked, KubeObject):
    """A credential (from a Secret) that the gateway adds to every request to the targets."""

    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "BackendCredentialPolicy"
    #: The schema of ``status`` in the CRD.
    STATUS: ClassVar[type[Model]] = PolicyStatus

    spec: BackendCredentialPolicySpec


# ------------------------------------------------------------------ BackendMCPPolicy

McpTargetRefs = Annotated[
    TargetRefs,
    CelRule(
        f"self.all(t, t.group == '{XBACKEND_GROUP}' && t.kind == 'XBackend')",
        f"targetRefs must be XBackends (group {XBACKEND_GROUP}, kind XBackend) of protocol MCP",
    ),
]

#: An MCP tool name (SEP-986, the MCP specification since 2025-11-25: 1 to 128 of ``A-Z a-z 0-9
#: _ - .``), in which ``*`` stands for any run of characters.
ToolPattern = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._*-]+$")]


#: A JWT claim name (a top-level member of the token's payload).
ClaimName = Annotated[
    str,
    StringConstraints(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_:.\-/]+$"),
    CelRule("self != 'sub'", "match the subject with subjects, not with a claim named sub"),
]
#: A value a claim is compared with: printable ASCII without spaces (a space separates the
#: words of a space-delimited claim such as ``scope``).
ClaimValue = Annotated[str, StringConstraints(min_length=1, max_length=256, pattern=r"^[!-~]+$")]
#: A URI or DNS subject alternative name, as written in certificates (no ``=`` or ``,``, so that
#: it can never equal a certificate's subject, which Envoy compares too when a certificate has no SAN).
SubjectAltName = Annotated[
    str, StringConstraints(min_length=1, max_length=253, pattern=r"^[A-Za-z0-9._:/@?&%~+!$'()*;\-]+$")
]


class JwksSource(CelModel):
    """Where the JSON Web Key Set that verifies tokens is: a key of a ConfigMap or of a Secret in
    the policy's namespace (exactly one)."""

    cel_rules: ClassVar[tuple[CelRule, ...]] = (
        CelRule(
            "has(self.configMapRef) != has(self.secretRef)",
            "set exactly one of configMapRef and secretRef",
        ),
    )

    config_map_ref: SecretKeyReference | None = None
    secret_ref: SecretKeyReference | None = None


class McpJwt(Model):
    """How the gateway verifies the caller's bearer token (``Authorization: Bearer ...``).

    A token must be signed by a key of ``jwks``, be issued by ``issuer``,
    carry one of ``audiences`` (when set) and be within its validity
    period; a request carrying a token that fails any of this is refused
    (HTTP 401). A request without a token is served with the tools that need
    no identity. The token is not forwarded to the MCP server.
    """

    issuer: Annotated[str, StringConstraints(min_length=1, max_length=512, pattern=r"^[!-~]+$")]
    audiences: tuple[ClaimValue, ...] | None = Field(
        default=None, min_length=1, max_length=16, json_schema_extra=_ATOMIC
    )
    jwks: JwksSource


class ClaimMatch(Model):
    """The claim ``name`` holds one of ``values``: a string claim equal to one of them or, as for
    ``scope``, having one of them among its space-separated words; or a list claim with one of them
    as an item."""

    name: ClaimName
    values: tuple[ClaimValue, ...] = Field(min_length=1, max_length=32, json_schema_extra=_ATOMIC)


class JwtCaller(Model):
    """Callers with a valid token (see ``spec.jwt``) whose subject is one of ``subjects`` (when set)
    and that satisfies every one of ``claims``. Empty: any valid token."""

    subjects: tuple[ClaimValue, ...] | None = Field(
        default=None, min_length=1, max_length=64, json_schema_extra=_ATOMIC
    )
    claims: tuple[ClaimMatch, ...] | None = Field(
        default=None, min_length=1, max_length=8, json_schema_extra=_ATOMIC
    )


class CertificateCaller(Model):
    """Callers whose client certificate, validated by the Gateway (``spec.tls.frontend``), has one
    of ``subjectAltNames`` among its URI or DNS subject alternative names."""

    subject_alt_names: tuple[SubjectAltName, ...] = Field(
        min_length=1, max_length=64, json_schema_extra=_ATOMIC
    )


class McpCaller(CelModel):
    """Who a rule grants tools to: callers identified by a token or by a client certificate."""

    cel_rules: ClassVar[tuple[CelRule, ...]] = (
        CelRule(
            "has(self.jwt) != has(self.clientCertificate)", "set exactly one of jwt and clientCertificate"
        ),
    )

    jwt: JwtCaller | None = None
    client_certificate: CertificateCaller | None = None


class McpToolRule(Model):
    """Tools granted to the callers ``from`` matches, on top of ``spec.allowedTools``."""

    from_: McpCaller = Field(alias="from")
    allowed_tools: tuple[ToolPattern, ...] = Field(min_length=1, max_length=64, json_schema_extra=_ATOMIC)


class BackendMCPPolicySpec(CelModel):
    cel_rules: ClassVar[tuple[CelRule, ...]] = (
        CelRule(
            "has(self.allowedTools) || has(self.deniedTools) || has(self.rules)",
            "set allowedTools, deniedTools, rules, or several of them",
        ),
        CelRule(
            "!has(self.rules) || has(self.jwt) || self.rules.all(r, !has(r.from.jwt))",
            "rules that match on jwt need spec.jwt: the issuer and keys the gateway verifies tokens with",
        ),
    )

    target_refs: McpTargetRefs
    #: Absent: every tool that is not denied. To refuse every tool, deny ``*``.
    allowed_tools: tuple[ToolPattern, ...] | None = Field(
        default=None, min_length=1, max_length=64, json_schema_extra=_ATOMIC
    )
    denied_tools: tuple[ToolPattern, ...] | None = Field(
        default=None, min_length=1, max_length=64, json_schema_extra=_ATOMIC
    )
    #: How callers' bearer tokens are verified (for ``rules`` that match on ``jwt``).
    jwt: McpJwt | None = None
    #: Tools granted per caller. Set: a tool must be granted, by ``allowedTools`` (anyone) or a rule.
    rules: tuple[McpToolRule, ...] | None = Field(
        default=None, min_length=1, max_length=32, json_schema_extra=_ATOMIC
    )


class BackendMCPPolicy(CelChecked, KubeObject):
    """Which tools a ``tools/call`` through the gateway may name, for the MCP XBackends targeted."""

    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "BackendMCPPolicy"
    STATUS: ClassVar[type[Model]] = PolicyStatus

    spec: BackendMCPPolicySpec
