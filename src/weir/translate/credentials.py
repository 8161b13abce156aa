"""BackendCredentialPolicy: the credential the gateway adds to requests to a backend, and its status.

A policy targets XBackends and Services in its own namespace (a Service
whole, or one port by ``sectionName``; an XBackend whole, or by its
``spec.port.name``). Which policy applies where, conflicts and the shape of
the status: :mod:`weir.translate.policies`.

**What it does.** Every request the gateway sends to a target carries
header ``header.name`` (default ``Authorization``) with the value
``header.valuePrefix`` + the value of key ``secretRef.key`` of Secret
``secretRef.name`` (the policy's namespace). With ``overwrite`` (the
default) it replaces a header of that name sent by the client; without, a
client's own header is kept. It applies to HTTP only: every route kind that
sends requests (HTTPRoute, GRPCRoute); the bytes a TCPRoute or TLSRoute
relays to a Service carry no headers and are left alone, and an XBackend of
protocol ``TCP`` cannot be a target (``Invalid``).

**Credentials that are not static** (exactly one of ``secretRef``,
``oauth2``, ``awsSigV4`` is set; validation says so). ``oauth2``: the
gateway gets an access token from the token endpoint, an XBackend of the
policy's namespace (:class:`weir.ir.OAuth2Credential`; the resolver serves
that XBackend as an upstream of its own, used by the same Gateways, so its
TLS verification and egress guard apply), with the client id and secret of
the Secrets named, and sends ``Authorization: Bearer <token>``
(:mod:`weir.xds.oauth2`). ``awsSigV4``: each request is signed with the
access key of a Secret holding ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY`` and optionally ``AWS_SESSION_TOKEN``
(:class:`weir.ir.AwsSigV4`). A token endpoint XBackend that does not exist
(``BackendNotFound``) or is not an HTTP ExternalHostname (``InvalidKind``),
and every Secret problem, fail closed as below; a token endpoint XBackend
that exists but is refused (its own status says why) refuses the targets
too, and requests to the targets are answered 500.

**The value never shows.** It travels to Envoy in an SDS secret of its own,
``credential/NS/POLICY`` (:class:`weir.ir.GenericSecret`), whose name does
not change with the value: rotating the Secret changes that one SDS
resource, and Envoy injects the new value from the next request on, with no
cluster replaced and no request failed. ``weir.ir.to_data`` and
:func:`weir.xds.build.to_data` redact it; no status message, log line or
error here ever includes it (problems are described by key and kind
of character, never by content).

**Fail closed.** A policy that cannot be used (Secret or key missing, a
value no header can carry) is ``Accepted=False``, reason ``Invalid``
(GEP-713's reason for a policy that cannot be carried out), and
``ResolvedRefs=False``, reason ``InvalidCertificateRef``: the Gateway API's
reason for a Secret reference that cannot be used, the nearest standard
word (the Gateway API has none for a credential). Requests to its targets
are then answered 500 by the gateway, as for an unusable BackendTLSPolicy:
none leaves without the credential. A policy that lost a conflict has no
effect, so a problem of its own does not refuse anything.

**Status.** As :func:`weir.translate.policies.statuses` says: an entry per
Gateway using a target, and one per target that does not exist
(``TargetNotFound``) or is an XBackend of protocol ``TCP`` (``Invalid``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from weir import ir
from weir.api.core_v1 import Service, ServicePort
from weir.api.meta import ObjectKey
from weir.api.weir_policies_v1alpha1 import AwsSigV4, BackendCredentialPolicy, OAuth2ClientCredentials
from weir.api.xbackend_v1alpha1 import XBackend
from weir.resources import Resources
from weir.translate import status as st
from weir.translate.policies import SERVICE, XBACKEND, Conditions, PolicyTargets, statuses

KIND = "BackendCredentialPolicy"


@dataclass(frozen=True)
class CredentialVerdict:
    """A policy evaluated on its own: what it adds to requests (all ``None``: unusable), the
    secrets that go with it, and its conditions.

    Exactly one of ``injection`` (a static value), ``oauth2`` and ``aws_sigv4`` is set when the
    policy is usable. ``oauth2.token_upstream`` is left empty here: the token endpoint's XBackend
    is resolved by :class:`weir.translate.backends.BackendResolver` (``token_endpoint``), which
    names its upstream.
    """

    injection: ir.CredentialInjection | None
    secret: ir.GenericSecret | None
    conditions: Conditions
    oauth2: ir.OAuth2Credential | None = None
    aws_sigv4: ir.AwsSigV4 | None = None
    token_endpoint: ObjectKey | None = None

    @property
    def usable(self) -> bool:
        return self.injection is not None or self.oauth2 is not None or self.aws_sigv4 is not None


@dataclass(frozen=True)
class AppliedCredential:
    """The policy a backend gets. Not :attr:`usable`: the policy cannot be carried out, requests are
    refused."""

    policy: BackendCredentialPolicy
    verdict: CredentialVerdict

    @property
    def usable(self) -> bool:
        return self.verdict.usable

    @property
    def injection(self) -> ir.CredentialInjection | None:
        return self.verdict.injection

    @property
    def secrets(self) -> tuple[ir.Secret, ...]:
        return () if self.verdict.secret is None else (self.verdict.secret,)

    def apply(self, upstream: ir.Upstream, token_upstream: ir.Upstream | None = None) -> ir.Upstream:
        """``upstream`` with this credential (a usable one; OAuth2 with its token endpoint's
        resolved ``token_upstream``)."""
        verdict = self.verdict
        if verdict.oauth2 is not None:
            assert token_upstream is not None
            oauth2 = dataclasses.replace(verdict.oauth2, token_upstream=token_upstream.name)
            return dataclasses.replace(upstream, oauth2=oauth2)
        if verdict.aws_sigv4 is not None:
            return dataclasses.replace(upstream, aws_sigv4=verdict.aws_sigv4)
        return dataclasses.replace(upstream, credential=verdict.injection)


class CredentialPolicies:
    """The BackendCredentialPolicies of one translation, indexed by target."""

    def __init__(self, resources: Resources) -> None:
        self._resources = resources
        self._targets = PolicyTargets(resources.backend_credential_policies, (SERVICE, XBACKEND))
        self._verdicts: dict[ObjectKey, CredentialVerdict] = {}

    def for_service_port(
        self, service: Service, port: ServicePort, gateways: set[ObjectKey]
    ) -> AppliedCredential | None:
        """The policy for the HTTP use of ``port`` of ``service``, or ``None``.

        ``gateways`` (whose routes use the port) become ancestors of the policies targeting it.
        """
        found = self._targets.policies_for(SERVICE, service.namespace, service.name, port.name, gateways)
        return self._applied(found[0]) if found else None

    def for_xbackend(
        self, xbackend: XBackend, gateways: set[ObjectKey] | None = None
    ) -> AppliedCredential | None:
        """The policy for ``xbackend``, or ``None`` (always for protocol ``TCP``: no headers).

        ``gateways`` (whose routes use it) become ancestors of the policies targeting it.
        """
        if xbackend.spec.protocol == "TCP":
            return None
        found = self._targets.policies_for(
            XBACKEND, xbackend.namespace, xbackend.name, xbackend.spec.port.name, gateways or ()
        )
        return self._applied(found[0]) if found else None

    def statuses(self, controller_name: str) -> dict[ObjectKey, dict[str, Any]]:
        """``status.ancestors`` of every policy (see the module's docstring)."""
        return statuses(
            self._resources,
            self._targets,
            self._resources.backend_credential_policies,
            controller_name,
            conditions=lambda policy: self._verdict(policy).conditions,
            refuses=_refuses,
        )

    def _applied(self, policy: BackendCredentialPolicy) -> AppliedCredential:
        return AppliedCredential(policy, self._verdict(policy))

    def _verdict(self, policy: BackendCredentialPolicy) -> CredentialVerdict:
        if policy.key not in self._verdicts:
            self._verdicts[policy.key] = _evaluate(self._resources, policy)
        return self._verdicts[policy.key]


def secret_name(policy: BackendCredentialPolicy) -> str:
    """The SDS secret of ``policy``'s credential: named after the policy, never after the value."""
    return f"credential/{policy.namespace}/{policy.name}"


def _refuses(target: Service | XBackend) -> str | None:
    if isinstance(target, XBackend) and target.spec.protocol == "TCP":
        return (
            f"XBackend {target.namespace}/{target.name} has protocol TCP: the bytes it is sent carry no "
            "HTTP headers to put a credential in; target an XBackend that speaks HTTP, or remove this one"
        )
    return None


def _refused(problem: str, reason: str = st.R_INVALID_CERTIFICATE_REF) -> CredentialVerdict:
    """The verdict of a policy that cannot be used: ``problem`` says why (never quoting a secret)."""
    accepted = (
        f"{problem}. Until this is fixed, requests to the targets are answered 500 by the gateway: none "
        "is sent without the credential"
    )
    return CredentialVerdict(
        None,
        None,
        ((st.ACCEPTED, False, st.R_INVALID, accepted), (st.RESOLVED_REFS, False, reason, problem)),
    )


_RESOLVED = (st.RESOLVED_REFS, True, st.R_RESOLVED_REFS, "All references resolved")


def _evaluate(resources: Resources, policy: BackendCredentialPolicy) -> CredentialVerdict:
    spec = policy.spec
    if spec.oauth2 is not None:
        return _evaluate_oauth2(resources, policy, spec.oauth2)
    if spec.aws_sig_v4 is not None:
        return _evaluate_sigv4(resources, policy, spec.aws_sig_v4)
    if spec.secret_ref is None:  # validation asks for exactly one of the three
        return _refused("The policy names no credential: set secretRef, oauth2 or awsSigV4", st.R_INVALID)
    where = f"Secret {policy.namespace}/{spec.secret_ref.name}"
    raw = _credential(resources, policy.namespace, spec.secret_ref.name, spec.secret_ref.key)
    if isinstance(raw, str):
        return _refused(raw)
    header = spec.header
    generic = ir.GenericSecret(secret_name(policy), (header.value_prefix or "") + raw.decode("ascii"))
    injection = ir.CredentialInjection(generic.name, header=header.name, overwrite=spec.overwrite)
    prefix = f", after the prefix {header.value_prefix!r}" if header.value_prefix else ""
    client = "replaced (overwrite: true)" if spec.overwrite else "kept as sent (overwrite: false)"
    message = (
        f"Requests to the targets carry the value of key {spec.secret_ref.key} of {where} in header "
        f"{header.name}{prefix}; a client's own {header.name} header is {client}"
    )
    return CredentialVerdict(injection, generic, ((st.ACCEPTED, True, st.R_ACCEPTED, message), _RESOLVED))


def _evaluate_oauth2(
    resources: Resources, policy: BackendCredentialPolicy, oauth2: OAuth2ClientCredentials
) -> CredentialVerdict:
    """OAuth2 client credentials: the client id and secret from their Secrets, and the token
    endpoint's XBackend (which must exist and speak HTTP; its own problems are its status's)."""
    ref = oauth2.token_endpoint.backend_ref
    xb = resources.get(XBackend, policy.namespace, ref.name)
    if xb is None:
        return _refused(
            f"spec.oauth2.tokenEndpoint.backendRef: XBackend {policy.namespace}/{ref.name} does not exist; "
            "create it (the token endpoint's hostname, port and TLS) or fix the name",
            st.R_BACKEND_NOT_FOUND,
        )
    if xb.spec.external_hostname is None or xb.spec.protocol == "TCP":
        return _refused(
            f"spec.oauth2.tokenEndpoint.backendRef: XBackend {policy.namespace}/{ref.name} is not an "
            "ExternalHostname that speaks HTTP (it has type EndpointSelector or protocol TCP); a token "
            "endpoint is an HTTP(S) server reached by name",
            st.R_INVALID_KIND,
        )
    client_id = _credential(resources, policy.namespace, oauth2.client_id_ref.name, oauth2.client_id_ref.key)
    if isinstance(client_id, str):
        return _refused(f"spec.oauth2.clientIDRef: {client_id}")
    client_secret = _credential(
        resources, policy.namespace, oauth2.client_secret_ref.name, oauth2.client_secret_ref.key
    )
    if isinstance(client_secret, str):
        return _refused(f"spec.oauth2.clientSecretRef: {client_secret}")
    tls = xb.spec.tls is not None and xb.spec.tls.mode != "None"
    hostname, port = xb.spec.external_hostname.hostname, xb.spec.port_number
    default_port = 443 if tls else 80
    authority = hostname if port == default_port else f"{hostname}:{port}"
    url = f"{'https' if tls else 'http'}://{authority}{oauth2.token_endpoint.path}"
    generic = ir.GenericSecret(secret_name(policy), client_secret.decode("ascii"))
    credential = ir.OAuth2Credential(
        name=secret_name(policy),
        token_upstream="",
        token_url=url,
        client_id=client_id.decode("ascii"),
        client_secret=generic.name,
        scopes=oauth2.scopes or (),
        basic_auth=oauth2.client_authentication == "Basic",
        overwrite=policy.spec.overwrite,
    )
    scopes = f" with scopes {' '.join(oauth2.scopes)}" if oauth2.scopes else ""
    client = "replaced (overwrite: true)" if policy.spec.overwrite else "kept as sent (overwrite: false)"
    message = (
        f"Requests to the targets carry Authorization: Bearer <token>, a token the gateway gets from {url} "
        f"(XBackend {policy.namespace}/{ref.name}) with the OAuth2 client-credentials grant{scopes}, "
        "caches and renews before it expires; a client's own Authorization header is "
        f"{client}. While no token can be had, requests are refused (401), never sent without it"
    )
    return CredentialVerdict(
        None,
        generic,
        ((st.ACCEPTED, True, st.R_ACCEPTED, message), _RESOLVED),
        oauth2=credential,
        token_endpoint=xb.key,
    )


#: The keys of the Secret of ``awsSigV4.credentialsRef`` (the AWS CLI's environment variables).
AWS_ACCESS_KEY_ID = "AWS_ACCESS_KEY_ID"
AWS_SECRET_ACCESS_KEY = "AWS_SECRET_ACCESS_KEY"
AWS_SESSION_TOKEN = "AWS_SESSION_TOKEN"


def _evaluate_sigv4(
    resources: Resources, policy: BackendCredentialPolicy, sigv4: AwsSigV4
) -> CredentialVerdict:
    name = sigv4.credentials_ref.name
    values: dict[str, str] = {}
    for key in (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN):
        raw = _credential(resources, policy.namespace, name, key)
        if isinstance(raw, str):
            secret = resources.secret(policy.namespace, name)
            if key == AWS_SESSION_TOKEN and secret is not None and secret.value(key) is None:
                continue  # optional: long-term credentials have none
            return _refused(f"spec.awsSigV4.credentialsRef: {raw}")
        values[key] = raw.decode("ascii")
    signing = ir.AwsSigV4(
        region=sigv4.region,
        service=sigv4.service,
        access_key_id=values[AWS_ACCESS_KEY_ID],
        secret_access_key=values[AWS_SECRET_ACCESS_KEY],
        session_token=values.get(AWS_SESSION_TOKEN),
        signed_payload=sigv4.payload == "Signed",
    )
    payload = (
        "the SHA-256 of the body (buffered, up to 1 MiB)" if signing.signed_payload else "UNSIGNED-PAYLOAD"
    )
    token = " and session token" if signing.session_token is not None else ""
    message = (
        f"Requests to the targets are signed with AWS Signature Version 4 for region {sigv4.region}, "
        f"service {sigv4.service}, with the access key{token} of Secret {policy.namespace}/{name}, after "
        f"the gateway's own headers are removed; the payload hash is {payload}. The signature replaces "
        "a client's Authorization header"
    )
    return CredentialVerdict(
        None, None, ((st.ACCEPTED, True, st.R_ACCEPTED, message), _RESOLVED), aws_sigv4=signing
    )


def _credential(resources: Resources, namespace: str, name: str, key: str) -> bytes | str:
    """The value of ``key`` of Secret ``namespace/name``, or what is wrong with it (a message that
    never quotes it)."""
    where = f"Secret {namespace}/{name}"
    secret = resources.secret(namespace, name)
    if secret is None:
        return f"{where} does not exist; create it with the credential under key {key}"
    raw = secret.value(key)
    if raw is None:
        keys = ", ".join(sorted({*secret.data, *secret.string_data})) or "none"
        return f"{where} has no key {key} (its keys: {keys}); add the credential under that key"
    why = value_problem(raw)
    return raw if why is None else f"The value of key {key} of {where} {why}"


def value_problem(value: bytes) -> str | None:
    """Why ``value`` cannot be (the end of) an HTTP header value, or ``None``.

    The answer never quotes the value: it names what is wrong (empty, a line
    break, a control character, non-ASCII bytes, surrounding whitespace),
    which is enough to fix it.
    """
    if not value:
        return "is empty"
    if b"\n" in value or b"\r" in value:
        return (
            "contains a line break, which a header value cannot carry (a trailing newline, as `echo` "
            "without -n adds, counts); store the value without it"
        )
    if any((b < 0x20 and b != 0x09) or b == 0x7F for b in value):
        return "contains a control character, which a header value cannot carry"
    if any(b >= 0x80 for b in value):
        return "contains bytes that are not ASCII, which header values cannot carry reliably"
    if value[:1] in (b" ", b"\t") or value[-1:] in (b" ", b"\t"):
        return "starts or ends with a space or tab, which HTTP drops from header values; remove them"
    return None
