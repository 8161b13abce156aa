"""Secrets: IR secrets → Envoy SDS ``Secret`` resources (part of :mod:`weir.xds.build`).

Certificates, private keys and trusted CAs travel inline in ``Secret``
resources over SDS only; listeners and clusters refer to them by name
(:func:`sds`) and never embed the material. :func:`redact` hides private keys
when built resources are rendered for people (:func:`weir.xds.build.to_data`).
"""

from __future__ import annotations

from typing import Any

from envoy.extensions.transport_sockets.tls.v3 import secret_pb2

from weir import ir
from weir.xds.common import ads


def envoy_secret(secret: ir.Secret) -> Any:
    out = secret_pb2.Secret(name=secret.name)
    if isinstance(secret, ir.TrustedCA):
        out.validation_context.trusted_ca.inline_string = secret.pem
    elif isinstance(secret, ir.GenericSecret):
        out.generic_secret.secret.inline_string = secret.value
    else:
        out.tls_certificate.certificate_chain.inline_string = secret.certificate_chain
        out.tls_certificate.private_key.inline_string = secret.private_key
    return out


def sds(name: str) -> Any:
    return secret_pb2.SdsSecretConfig(name=name, sds_config=ads())


def redact(resource: dict[str, Any]) -> dict[str, Any]:
    """Replace secret material in a Secret's JSON mapping (others pass through)."""
    cert = resource.get("tlsCertificate")
    if isinstance(cert, dict) and "privateKey" in cert:
        cert["privateKey"] = {"inlineString": "<redacted>"}
    if "genericSecret" in resource:
        resource["genericSecret"] = {"secret": {"inlineString": "<redacted>"}}
    return resource
