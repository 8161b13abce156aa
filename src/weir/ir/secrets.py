"""IR secrets: what TLS and credentials need (trusted CAs, certificates, generic values)."""

from __future__ import annotations

from dataclasses import dataclass

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
