"""Throw-away PKI for tests and ``weir demo``: a CA, server and client certificates.

The CA is a :class:`trustme.CA` (self-signed root, ECDSA P-256). Leaf
certificates are signed by that CA with :mod:`cryptography` directly, because
``trustme`` cannot put URI SANs (e.g. SPIFFE IDs) in a certificate. Every leaf
carries ``serverAuth`` and ``clientAuth`` extended key usages, so any leaf can
be used on either side of a connection.

All PEM material is returned as ``str``; :meth:`IssuedCert.write` and
:meth:`CertAuthority.write` put it in files for processes (Envoy) that want paths.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trustme
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = [
    "DEFAULT_ALPN",
    "CertAuthority",
    "IssuedCert",
    "PemFiles",
    "client_ssl_context",
    "make_ca",
    "server_ssl_context",
]

#: ALPN protocols a testkit server offers unless told otherwise.
DEFAULT_ALPN: tuple[str, ...] = ("h2", "http/1.1")


@dataclass(frozen=True)
class PemFiles:
    """Paths of PEM files written by :meth:`IssuedCert.write`.

    ``cert`` holds the certificate chain (leaf first), ``key`` the unencrypted
    private key, ``ca`` the issuing root CA certificate.
    """

    cert: Path
    key: Path
    ca: Path


@dataclass(frozen=True)
class IssuedCert:
    """A leaf certificate with its private key, all PEM text.

    ``cert_pem`` is the leaf alone; ``chain_pem`` is leaf plus any
    intermediates (for a root-issued leaf the two are equal); ``ca_pem`` is the
    root that issued it.
    """

    cert_pem: str
    chain_pem: str
    key_pem: str
    ca_pem: str
    common_name: str | None
    dns_names: tuple[str, ...]
    ip_addresses: tuple[str, ...]
    uri_sans: tuple[str, ...]

    def write(self, directory: str | Path, stem: str = "server") -> PemFiles:
        """Write ``<stem>.crt`` (chain), ``<stem>.key`` and ``<stem>-ca.crt``.

        The directory is created if needed; existing files are overwritten.
        The key file is made readable by its owner only.
        """
        base = Path(directory)
        base.mkdir(parents=True, exist_ok=True)
        cert, key, ca = base / f"{stem}.crt", base / f"{stem}.key", base / f"{stem}-ca.crt"
        cert.write_text(self.chain_pem)
        key.touch(mode=0o600, exist_ok=True)
        key.chmod(0o600)
        key.write_text(self.key_pem)
        ca.write_text(self.ca_pem)
        return PemFiles(cert=cert, key=key, ca=ca)

    def x509(self) -> x509.Certificate:
        """Parse the leaf certificate (for assertions on its fields)."""
        return x509.load_pem_x509_certificate(self.cert_pem.encode("ascii"))


def _general_name(identity: str) -> x509.GeneralName:
    """An IP literal becomes an IPAddress SAN, anything else a DNSName SAN."""
    try:
        return x509.IPAddress(ipaddress.ip_address(identity))
    except ValueError:
        return x509.DNSName(identity.encode("idna").decode("ascii"))


class CertAuthority:
    """A throw-away root CA (a :class:`trustme.CA` underneath, see :attr:`trustme`).

    Not for production: keys are unencrypted and live in memory.
    """

    def __init__(self, *, organization: str = "weir testkit") -> None:
        self.trustme: Any = trustme.CA(organization_name=organization)
        self._cert = x509.load_pem_x509_certificate(self.trustme.cert_pem.bytes())
        key = serialization.load_pem_private_key(self.trustme.private_key_pem.bytes(), password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):  # trustme's default key type
            raise TypeError(f"unexpected CA key type {type(key).__name__}")
        self._key: ec.EllipticCurvePrivateKey = key

    @property
    def cert_pem(self) -> str:
        """The CA certificate, PEM. Put it in a trust store to trust issued leaves."""
        return self._cert.public_bytes(serialization.Encoding.PEM).decode("ascii")

    @property
    def key_pem(self) -> str:
        """The CA private key, PEM (unencrypted)."""
        text: str = self.trustme.private_key_pem.bytes().decode("ascii")
        return text

    def write(self, directory: str | Path, name: str = "ca.crt") -> Path:
        """Write the CA certificate to ``directory/name`` and return the path."""
        base = Path(directory)
        base.mkdir(parents=True, exist_ok=True)
        path = base / name
        path.write_text(self.cert_pem)
        return path

    def configure_trust(self, ctx: ssl.SSLContext) -> None:
        """Make ``ctx`` trust certificates issued by this CA."""
        ctx.load_verify_locations(cadata=self.cert_pem)

    def issue_server_cert(
        self,
        *identities: str,
        uri_sans: Iterable[str] = (),
        common_name: str | None = None,
        valid_for: datetime.timedelta = datetime.timedelta(days=365),
    ) -> IssuedCert:
        """Issue a leaf for DNS names / IP literals ``identities`` and URI SANs.

        At least one identity or URI SAN is required. ``common_name`` defaults
        to the first identity (or URI) — modern clients ignore it anyway.
        """
        uris = tuple(uri_sans)
        if not identities and not uris:
            raise ValueError("a server certificate needs at least one DNS name, IP or URI SAN")
        cn = common_name if common_name is not None else (identities or uris)[0]
        return self._issue(cn, identities, uris, valid_for)

    def issue_client_cert(
        self,
        common_name: str,
        *,
        dns_names: Iterable[str] = (),
        uri_sans: Iterable[str] = (),
        valid_for: datetime.timedelta = datetime.timedelta(days=365),
    ) -> IssuedCert:
        """Issue a client certificate whose subject CN is ``common_name``.

        SANs are optional for a client certificate; without any, the
        certificate carries no SAN extension at all.
        """
        if not common_name:
            raise ValueError("a client certificate needs a common name")
        return self._issue(common_name, tuple(dns_names), tuple(uri_sans), valid_for)

    def _issue(
        self,
        common_name: str | None,
        identities: Sequence[str],
        uris: tuple[str, ...],
        valid_for: datetime.timedelta,
    ) -> IssuedCert:
        key = ec.generate_private_key(ec.SECP256R1())
        attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "weir testkit")]
        if common_name:
            attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        now = datetime.datetime.now(datetime.UTC)
        ca_ski = self._cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attributes))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + valid_for)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski.value),
                critical=False,
            )
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=True,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                critical=False,
            )
        )
        names = [_general_name(i) for i in identities]
        names += [x509.UniformResourceIdentifier(u) for u in uris]
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        cert_pem = cert.public_bytes(serialization.Encoding.PEM).decode("ascii")
        key_pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode("ascii")
        ips = tuple(i for i in identities if isinstance(_general_name(i), x509.IPAddress))
        return IssuedCert(
            cert_pem=cert_pem,
            chain_pem=cert_pem,
            key_pem=key_pem,
            ca_pem=self.cert_pem,
            common_name=common_name,
            dns_names=tuple(i for i in identities if i not in ips),
            ip_addresses=ips,
            uri_sans=uris,
        )


def make_ca(organization: str = "weir testkit") -> CertAuthority:
    """Create a fresh throw-away root CA."""
    return CertAuthority(organization=organization)


def _load_identity(ctx: ssl.SSLContext, cert: IssuedCert) -> None:
    # ssl only loads certificates and keys from files.
    with tempfile.TemporaryDirectory(prefix="weir-testkit-") as tmp:
        files = cert.write(tmp, "identity")
        ctx.load_cert_chain(certfile=str(files.cert), keyfile=str(files.key))


def server_ssl_context(
    cert: IssuedCert,
    *,
    verify_client: CertAuthority | None = None,
    require_client_cert: bool = True,
    alpn: Sequence[str] | None = DEFAULT_ALPN,
    minimum_version: ssl.TLSVersion | None = None,
    maximum_version: ssl.TLSVersion | None = None,
) -> ssl.SSLContext:
    """A server-side context presenting ``cert``.

    With ``verify_client`` the server asks for a client certificate issued by
    that CA: ``require_client_cert=True`` (default) refuses handshakes without
    one (``CERT_REQUIRED``), ``False`` accepts them (``CERT_OPTIONAL``).
    ``alpn`` lists the protocols offered, in server preference order; ``None``
    or empty disables ALPN.
    """
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _load_identity(ctx, cert)
    if verify_client is not None:
        verify_client.configure_trust(ctx)
        ctx.verify_mode = ssl.CERT_REQUIRED if require_client_cert else ssl.CERT_OPTIONAL
    if alpn:
        ctx.set_alpn_protocols(list(alpn))
    if minimum_version is not None:
        ctx.minimum_version = minimum_version
    if maximum_version is not None:
        ctx.maximum_version = maximum_version
    return ctx


def client_ssl_context(
    trust: CertAuthority | None = None,
    *,
    cert: IssuedCert | None = None,
    alpn: Sequence[str] | None = None,
) -> ssl.SSLContext:
    """A client-side context that verifies servers against ``trust``.

    Hostname checking stays on: connect with ``server_hostname`` matching a
    SAN of the server certificate. ``cert`` is presented as the client
    certificate; ``alpn`` is offered if given.
    """
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    if trust is not None:
        trust.configure_trust(ctx)
    if cert is not None:
        _load_identity(ctx, cert)
    if alpn:
        ctx.set_alpn_protocols(list(alpn))
    return ctx
