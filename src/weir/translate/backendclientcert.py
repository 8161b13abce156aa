"""The client certificate a Gateway presents to TLS backends: its ``spec.tls.backend.clientCertificateRef``.

One fact is decided here, :func:`gateway_client_certificate`: what a Gateway's
reference resolves to (the certificate, or why it cannot be used), read by the
Gateway's status (``ResolvedRefs``) and by the backends of its routes.

Envoy presents a client certificate per cluster, and weir's clusters are per
backend, shared by every Gateway. A backend made TLS by a BackendTLSPolicy is
therefore given a cluster of its own for each client certificate that
Gateways present to it (:func:`weir.translate.backends.BackendResolver`): a
route attached to Gateways that present different certificates cannot send
one request through both, and that backend is unusable for it (the route's
``ResolvedRefs`` says why). A reference that does not resolve leaves the
Gateway ``Accepted`` with ``ResolvedRefs=False``, as the Gateway API asks;
its backends are then reached without a client certificate (one that
requires it refuses the handshake), never with another Gateway's.

XBackends carry their own ``tls.clientCertificateRef``; the Gateway's is not
added to them.
"""

from __future__ import annotations

from weir import ir
from weir.api.gateway_v1 import GROUP as GATEWAY_GROUP
from weir.api.gateway_v1 import Gateway
from weir.resources import Resources
from weir.translate import status as st
from weir.translate import tls

__all__ = ["gateway_client_certificate"]


def gateway_client_certificate(
    resources: Resources, gateway: Gateway
) -> ir.TlsCertificate | tls.TlsProblem | None:
    """The certificate ``gateway`` presents to TLS backends, why it cannot, or ``None`` (none asked).

    A problem's ``resolved_reason`` is the Gateway's ``ResolvedRefs`` reason:
    ``RefNotPermitted`` for a Secret in another namespace without a
    ReferenceGrant, ``InvalidClientCertificateRef`` otherwise (a missing or
    malformed Secret, a kind other than Secret).
    """
    spec_tls = gateway.spec.tls
    ref = spec_tls.backend.client_certificate_ref if spec_tls and spec_tls.backend else None
    if ref is None:
        return None
    found = tls.client_certificate(
        resources,
        from_kind="Gateway",
        from_group=GATEWAY_GROUP,
        namespace=gateway.namespace,
        ref=ref,
        # Named by the Secret, not the Gateway: Gateways presenting one Secret share its clusters.
        secret_prefix=f"gateway-backend/{ref.namespace or gateway.namespace}/{ref.name}",
    )
    if isinstance(found, tls.TlsProblem) and found.resolved_reason != st.R_REF_NOT_PERMITTED:
        return tls.TlsProblem(found.accepted_reason, st.R_INVALID_CLIENT_CERTIFICATE_REF, found.message)
    return found
