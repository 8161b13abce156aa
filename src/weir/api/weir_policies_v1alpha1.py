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


class BackendMCPPolicySpec(CelModel):
    cel_rules: ClassVar[tuple[CelRule, ...]] = (
        CelRule(
            "has(self.allowedTools) || has(self.deniedTools)",
            "set allowedTools, deniedTools or both",
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


class BackendMCPPolicy(CelChecked, KubeObject):
    """Which tools a ``tools/call`` through the gateway may name, for the MCP XBackends targeted."""

    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "BackendMCPPolicy"
    STATUS: ClassVar[type[Model]] = PolicyStatus

    spec: BackendMCPPolicySpec
