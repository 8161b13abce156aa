"""Upstream TLS: from a backend's ``tls`` block to verified, never-optional TLS origination.

Every failure here is reported and makes the backend unusable; nothing ever
degrades to plaintext or to skipping verification.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from weir import ir
from weir.api.gateway_v1 import ObjectReference, SecretObjectReference
from weir.api.xbackend_v1alpha1 import CACertificateRef, ClientCertificateRef, TLSValidation
from weir.resources import Resources
from weir.translate import status as st
from weir.translate.grants import reference_permitted
from weir.translate.settings import Settings

CA_KEY = "ca.crt"


@dataclass(frozen=True)
class TlsProblem:
    """Why TLS could not be set up: the reasons for ``Accepted`` and ``ResolvedRefs``."""

    accepted_reason: str
    resolved_reason: str | None
    message: str


@dataclass(frozen=True)
class TlsOrigination:
    """TLS settings to originate with, and the secrets they name.

    ``skipped``: CA references that could not be used (each a
    :class:`TlsProblem`); the trusted bundle holds the others. A caller that
    requires every reference to resolve treats a non-empty ``skipped`` as a
    failure.
    """

    tls: ir.UpstreamTLS
    secrets: tuple[ir.Secret, ...]
    skipped: tuple[TlsProblem, ...] = ()


def server_validation(
    resources: Resources,
    settings: Settings,
    *,
    namespace: str,
    validation: TLSValidation | None,
    default_hostname: str,
) -> TlsOrigination | TlsProblem:
    """TLS settings verifying the server as ``validation`` says.

    Without ``validation``: the system trust store and ``default_hostname``
    for both SNI and the certificate name. With it: SNI is
    ``validation.hostname``; the certificate must carry one of
    ``subjectAltNames``, or else ``validation.hostname``. CA references are
    ConfigMaps or Secrets in ``namespace`` with a ``ca.crt`` key; several are
    concatenated into one trusted bundle named ``ca/<content hash>``: the XBackends and policies
    that trust the same certificates share one SDS secret (10,000 ServerOnly XBackends with their
    CA from one ConfigMap made 10,000 equal secrets, each loaded by Envoy).
    A reference that cannot be used is left out of the bundle and listed in
    :attr:`TlsOrigination.skipped`; when none can be used, the first one's
    problem is the result (never an empty trust store).
    """
    if validation is None:
        return TlsOrigination(
            ir.UpstreamTLS(
                sni=default_hostname,
                subject_alt_names=(ir.SubjectAltName("DNS", default_hostname),),
                system_trust_file=settings.system_trust_file,
            ),
            (),
        )
    sans = tuple(
        ir.SubjectAltName("DNS", san.hostname)
        if san.type == "Hostname" and san.hostname
        else ir.SubjectAltName("URI", san.uri or "")
        for san in validation.subject_alt_names
    ) or (ir.SubjectAltName("DNS", validation.hostname),)
    if validation.well_known_ca_certificates is not None:
        if validation.well_known_ca_certificates != "System":
            return TlsProblem(
                st.R_UNSUPPORTED_VALUE,
                None,
                f"wellKnownCACertificates {validation.well_known_ca_certificates!r} is not supported; "
                "use System (the system trust store) or caCertificateRefs",
            )
        return TlsOrigination(
            ir.UpstreamTLS(
                sni=validation.hostname,
                subject_alt_names=sans,
                system_trust_file=settings.system_trust_file,
            ),
            (),
        )
    bundle: list[str] = []
    skipped: list[TlsProblem] = []
    for i, ref in enumerate(validation.ca_certificate_refs):
        found = ca_certificate(resources, namespace, i, ref)
        if isinstance(found, TlsProblem):
            skipped.append(found)
        else:
            bundle.append(found)
    if not bundle:
        return skipped[0]
    pem = "".join(bundle)
    name = f"ca/{_digest(pem)}"
    return TlsOrigination(
        ir.UpstreamTLS(sni=validation.hostname, subject_alt_names=sans, trusted_ca=name),
        (ir.TrustedCA(name, pem),),
        tuple(skipped),
    )


def ca_certificate(
    resources: Resources, namespace: str, index: int, ref: CACertificateRef | ObjectReference
) -> str | TlsProblem:
    """The PEM certificates of ``caCertificateRefs[index]`` (a ConfigMap or Secret with ``ca.crt``),
    or why they cannot be used. Backends' references and Gateways' client-certificate ones alike."""
    where = f"caCertificateRefs[{index}] ({ref.kind} {namespace}/{ref.name})"
    if ref.group != "" or ref.kind not in ("ConfigMap", "Secret"):
        return TlsProblem(
            st.R_NO_VALID_CA_CERTIFICATE,
            st.R_INVALID_KIND,
            f"{where}: kind {ref.group or 'core'}/{ref.kind} is not supported; "
            "refer to a ConfigMap or Secret holding ca.crt",
        )
    source = (
        resources.config_map(namespace, ref.name)
        if ref.kind == "ConfigMap"
        else resources.secret(namespace, ref.name)
    )
    if source is None:
        return TlsProblem(
            st.R_NO_VALID_CA_CERTIFICATE,
            st.R_INVALID_CA_CERTIFICATE_REF,
            f"{where} does not exist; create it with the CA certificate under key {CA_KEY}",
        )
    raw = source.data.get(CA_KEY) if ref.kind == "ConfigMap" else _secret_text(resources, namespace, ref.name)
    if not raw:
        return TlsProblem(
            st.R_NO_VALID_CA_CERTIFICATE,
            st.R_INVALID_CA_CERTIFICATE_REF,
            f"{where} has no {CA_KEY} key; put the PEM CA certificate there",
        )
    error = _pem_certificates_error(raw)
    if error:
        return TlsProblem(
            st.R_NO_VALID_CA_CERTIFICATE,
            st.R_INVALID_CA_CERTIFICATE_REF,
            f"{where}: {CA_KEY} is not a valid PEM certificate: {error}",
        )
    return raw.strip() + "\n"


def client_certificate(
    resources: Resources,
    *,
    from_kind: str,
    from_group: str,
    namespace: str,
    ref: ClientCertificateRef | SecretObjectReference,
    secret_prefix: str,
) -> ir.TlsCertificate | TlsProblem:
    """The ``kubernetes.io/tls`` Secret ``ref`` as a certificate to present to the upstream."""
    target_ns = ref.namespace or namespace
    where = f"clientCertificateRef (Secret {target_ns}/{ref.name})"
    if ref.group != "" or ref.kind != "Secret":
        return TlsProblem(
            st.R_INVALID,
            st.R_INVALID_KIND,
            f"clientCertificateRef kind {ref.group or 'core'}/{ref.kind} is not supported; refer to a Secret",
        )
    if not reference_permitted(
        resources,
        from_group=from_group,
        from_kind=from_kind,
        from_namespace=namespace,
        to_group="",
        to_kind="Secret",
        to_namespace=target_ns,
        to_name=ref.name,
    ):
        return TlsProblem(
            st.R_INVALID,
            st.R_REF_NOT_PERMITTED,
            f"{where} is in another namespace and no ReferenceGrant in {target_ns} allows it",
        )
    secret = resources.secret(target_ns, ref.name)
    if secret is None:
        return TlsProblem(st.R_INVALID, st.R_INVALID_CLIENT_CERTIFICATE_REF, f"{where} does not exist")
    cert, key = secret.value("tls.crt"), secret.value("tls.key")
    if not cert or not key:
        return TlsProblem(
            st.R_INVALID,
            st.R_INVALID_CLIENT_CERTIFICATE_REF,
            f"{where} must have tls.crt and tls.key (type kubernetes.io/tls)",
        )
    error = _pem_certificates_error(cert.decode(errors="replace"))
    if error is None:
        error = _key_error(cert, key)
    if error:
        return TlsProblem(st.R_INVALID, st.R_INVALID_CLIENT_CERTIFICATE_REF, f"{where}: {error}")
    name = f"client-cert/{secret_prefix}/{_digest(cert.decode() + key.decode())}"
    return ir.TlsCertificate(name, cert.decode(), key.decode())


def _digest(material: str) -> str:
    """A short content hash for secret names.

    Secrets are named by content so that a rotated CA bundle or client
    certificate changes the cluster that uses it: Envoy then replaces the
    cluster and drains its connections. Updating a secret in place over SDS
    would leave pooled connections on the old certificate (or trusting a
    removed CA) until they close, which can take an hour.
    """
    return hashlib.sha256(material.encode()).hexdigest()[:12]


def _key_error(cert_pem: bytes, key_pem: bytes) -> str | None:
    """Why ``key_pem`` is not the private key of the first certificate in ``cert_pem``.

    Envoy would reject the pair (``KEY_VALUES_MISMATCH``) and NACK the whole
    secret; saying so here puts the reason on the XBackend instead.
    """
    try:
        key = load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError):
        return "tls.key is not an unencrypted PEM private key"
    leaf = x509.load_pem_x509_certificates(cert_pem)[0]
    encoding, form = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if key.public_key().public_bytes(encoding, form) != leaf.public_key().public_bytes(encoding, form):
        return "tls.key does not belong to the certificate in tls.crt"
    return None


def _secret_text(resources: Resources, namespace: str, name: str) -> str | None:
    secret = resources.secret(namespace, name)
    value = secret.value(CA_KEY) if secret else None
    return value.decode(errors="replace") if value else None


def _pem_certificates_error(pem: str) -> str | None:
    """Why ``pem`` is not one or more certificates, in words that do not depend on the library version."""
    if "-----BEGIN CERTIFICATE-----" not in pem:
        return "no PEM block 'BEGIN CERTIFICATE' found"
    try:
        x509.load_pem_x509_certificates(pem.encode())
    except ValueError:
        return "a CERTIFICATE block does not decode to an X.509 certificate"
    return None
