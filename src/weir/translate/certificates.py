"""Listener certificates: a Gateway listener's ``tls.certificateRefs`` to the certificates it presents.

Every reference must resolve, or the listener serves nothing: a listener
presenting a subset of what its owner configured (a missing ECDSA
certificate, a renamed Secret) fails in ways clients report far from the
cause. The reasons are the Gateway API's: ``RefNotPermitted`` for a Secret in
another namespace without a ReferenceGrant (checked first, whether or not
the Secret exists), ``InvalidCertificateRef`` for anything else.
"""

from __future__ import annotations

from dataclasses import dataclass

from weir import ir
from weir.api.gateway_v1 import GROUP, GatewayTLSConfig
from weir.api.meta import KubeObject
from weir.resources import Resources
from weir.translate import status as st
from weir.translate.grants import reference_permitted
from weir.translate.tls import _digest, _key_error, _pem_certificates_error


@dataclass(frozen=True)
class CertificateProblem:
    """Why a listener's certificates cannot be used: its ``ResolvedRefs=False`` reason and message."""

    reason: str
    message: str


def listener_certificates(
    resources: Resources, owner: KubeObject, tls: GatewayTLSConfig | None
) -> tuple[ir.TlsCertificate, ...] | CertificateProblem:
    """The certificates of a TLS-terminating listener, in ``certificateRefs`` order, or the first problem.

    ``owner`` declares the listener (a Gateway, or a ListenerSet: its Secrets
    are its own namespace's, and a ReferenceGrant must name ListenerSets to
    open another one to it; a Gateway's grants are not inherited).

    Each is named ``server-cert/NS/NAME/<content hash>``: by content, so
    that a rotated Secret is a new secret and a changed filter chain, which
    Envoy swaps in place (new handshakes get the new certificate at once,
    the socket stays bound). ``tls.crt`` may hold a chain (leaf first);
    ``tls.key`` must be the leaf's unencrypted private key.
    """
    if tls is None or not tls.certificate_refs:
        return CertificateProblem(
            st.R_INVALID_CERTIFICATE_REF,
            "The listener terminates TLS but has no tls.certificateRefs; "
            "name a kubernetes.io/tls Secret holding tls.crt and tls.key",
        )
    out: list[ir.TlsCertificate] = []
    for i, ref in enumerate(tls.certificate_refs):
        namespace = ref.namespace or owner.namespace
        where = f"tls.certificateRefs[{i}] ({ref.kind} {namespace}/{ref.name})"
        if ref.group != "" or ref.kind != "Secret":
            return CertificateProblem(
                st.R_INVALID_CERTIFICATE_REF,
                f"{where}: kind {ref.group or 'core'}/{ref.kind} is not supported; "
                "refer to a core Secret of type kubernetes.io/tls",
            )
        if not reference_permitted(
            resources,
            from_group=GROUP,
            from_kind=type(owner).KIND,
            from_namespace=owner.namespace,
            to_group="",
            to_kind="Secret",
            to_namespace=namespace,
            to_name=ref.name,
        ):
            return CertificateProblem(
                st.R_REF_NOT_PERMITTED,
                f"{where} is in another namespace and no ReferenceGrant in {namespace} allows "
                f"{type(owner).KIND}s from {owner.namespace} to refer to it",
            )
        secret = resources.secret(namespace, ref.name)
        if secret is None:
            return CertificateProblem(st.R_INVALID_CERTIFICATE_REF, f"{where} does not exist")
        cert, key = secret.value("tls.crt"), secret.value("tls.key")
        if not cert or not key:
            return CertificateProblem(
                st.R_INVALID_CERTIFICATE_REF,
                f"{where} must have tls.crt and tls.key (type kubernetes.io/tls); it has "
                + (", ".join(sorted({*secret.data, *secret.string_data})) or "no keys"),
            )
        cert_pem, key_pem = cert.decode(errors="replace"), key.decode(errors="replace")
        error = _pem_certificates_error(cert_pem)
        if error is not None:
            error = f"tls.crt is not a PEM certificate chain: {error}"
        else:
            error = _key_error(cert, key)
        if error:
            return CertificateProblem(st.R_INVALID_CERTIFICATE_REF, f"{where}: {error}")
        name = f"server-cert/{namespace}/{ref.name}/{_digest(cert_pem + key_pem)}"
        out.append(ir.TlsCertificate(name, cert_pem, key_pem))
    return tuple(out)
