"""Client certificate validation on HTTPS listeners: a Gateway's ``spec.tls.frontend``.

The settings apply by port (``perPort``, else ``default``) to every HTTPS
listener on it, so that all server names on one socket validate clients the
same way: a client cannot escape validation by naming another listener in
its ClientHello. Trust anchors are ConfigMaps (key ``ca.crt``, the Gateway
API's core support) or Secrets (same key) in the Gateway's namespace, or in
another one a ReferenceGrant opens to Gateways. Every reference must resolve:
a listener validating against fewer anchors than its owner listed would
refuse clients for reasons nobody could see, so a problem refuses the
listener (``Accepted=False``, ``NoValidCACertificate``) and names the
reference in ``ResolvedRefs`` with the Gateway API's reasons
(``InvalidCACertificateRef``, ``InvalidCACertificateKind``,
``RefNotPermitted``).

``AllowValidOnly`` requires a certificate that chains to an anchor;
``AllowInsecureFallback`` asks for one and lets every client in, valid,
invalid or without (the backend decides); the Gateway then says so in its
``InsecureFrontendValidationMode`` condition.
"""

from __future__ import annotations

from dataclasses import dataclass

from weir import ir
from weir.api.gateway_v1 import GROUP, FrontendTLSValidation, Gateway
from weir.resources import Resources
from weir.translate import status as st
from weir.translate.grants import reference_permitted
from weir.translate.tls import CA_KEY, TlsProblem, _digest, ca_certificate


@dataclass(frozen=True)
class ClientCAProblem:
    """Why a listener cannot validate clients: its ``ResolvedRefs=False`` reason and message."""

    reason: str
    message: str


@dataclass(frozen=True)
class ClientValidation:
    """What an HTTPS listener validates clients with, and the trust bundle it names."""

    validation: ir.ClientValidation
    bundle: ir.TrustedCA


def validation_for(gateway: Gateway, port: int) -> FrontendTLSValidation | None:
    """The client validation the Gateway asks of HTTPS listeners on ``port``, if any."""
    tls = gateway.spec.tls
    if tls is None or tls.frontend is None:
        return None
    return tls.frontend.for_port(port).validation


def insecure_fallback(gateway: Gateway) -> bool:
    """Whether any of the Gateway's frontend settings lets clients in without a valid certificate."""
    tls = gateway.spec.tls
    if tls is None or tls.frontend is None:
        return False
    settings = [tls.frontend.default, *(entry.tls for entry in tls.frontend.per_port)]
    return any(s.validation is not None and s.validation.mode == "AllowInsecureFallback" for s in settings)


def client_validation(
    resources: Resources, gateway: Gateway, validation: FrontendTLSValidation
) -> ClientValidation | ClientCAProblem:
    """The trust bundle of ``validation``'s references (all of them, in order), or the first problem."""
    bundle: list[str] = []
    for i, ref in enumerate(validation.ca_certificate_refs):
        namespace = ref.namespace or gateway.namespace
        where = f"caCertificateRefs[{i}] ({ref.kind} {namespace}/{ref.name})"
        if ref.group != "" or ref.kind not in ("ConfigMap", "Secret"):
            return ClientCAProblem(
                st.R_INVALID_CA_CERTIFICATE_KIND,
                f"{where}: kind {ref.group or 'core'}/{ref.kind} is not supported; "
                f"refer to a ConfigMap (or Secret) holding the CA certificate under {CA_KEY}",
            )
        if not reference_permitted(
            resources,
            from_group=GROUP,
            from_kind="Gateway",
            from_namespace=gateway.namespace,
            to_group="",
            to_kind=ref.kind,
            to_namespace=namespace,
            to_name=ref.name,
        ):
            return ClientCAProblem(
                st.R_REF_NOT_PERMITTED,
                f"{where} is in another namespace and no ReferenceGrant in {namespace} allows "
                f"Gateways from {gateway.namespace} to refer to it",
            )
        found = ca_certificate(resources, namespace, i, ref)
        if isinstance(found, TlsProblem):  # missing, no ca.crt, not PEM: the backend's words and reason
            return ClientCAProblem(found.resolved_reason or st.R_INVALID_CA_CERTIFICATE_REF, found.message)
        bundle.append(found)
    pem = "".join(bundle)
    name = f"client-ca/{gateway.namespace}/{gateway.name}/{_digest(pem)}"
    return ClientValidation(
        ir.ClientValidation(trusted_ca=name, required=validation.mode == "AllowValidOnly"),
        ir.TrustedCA(name, pem),
    )
