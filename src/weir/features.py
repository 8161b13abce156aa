"""The Gateway API features weir implements: the one list, for GatewayClass
``status.supportedFeatures``, ``docs/kubernetes.md`` and the conformance suite.

Each feature (named as ``sigs.k8s.io/gateway-api/pkg/features`` names it)
maps to the cases of ``tests/conformance`` that show it, named after the
upstream conformance tests; ``tests/conformance/test_features.py`` fails if a
listed case is missing or pending. A feature is listed only when a case
shows it: what weir does beyond them (WebSocket backends, request mirrors,
...) is tested elsewhere but not claimed here until a conformance case covers
it.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["FEATURES", "SUPPORTED_FEATURES"]

#: Feature name -> the conformance cases that show it.
FEATURES: Mapping[str, tuple[str, ...]] = {
    "BackendTLSPolicy": ("BackendTLSPolicy", "BackendTLSPolicyInvalidCACertificateRef"),
    "BackendTLSPolicySANValidation": ("BackendTLSPolicySANValidation",),
    "GRPCRoute": ("GRPCExactMethodMatching", "GRPCRouteHeaderMatching"),
    "Gateway": ("GatewayWithAttachedRoutes", "GatewayModifyListeners", "GatewayObservedGenerationBump"),
    "GatewayHTTPListenerIsolation": ("GatewayHTTPListenerIsolation",),
    "GatewayStaticAddresses": ("GatewayStaticAddresses",),
    "GatewayFrontendClientCertificateValidation": (
        "GatewayFrontendClientCertificateValidation",
        "GatewayInvalidFrontendClientCertificateValidation",
    ),
    "GatewayFrontendClientCertificateValidationInsecureFallback": (
        "GatewayFrontendClientCertificateValidationInsecureFallback",
    ),
    "HTTPRoute": ("HTTPRouteSimpleSameNamespace", "HTTPRouteMatching", "HTTPRouteCrossNamespace"),
    "HTTPRouteBackendProtocolH2C": ("HTTPRouteBackendProtocolH2C",),
    "HTTPRouteBackendRequestHeaderModification": ("HTTPRouteBackendRequestHeaderModifier",),
    "HTTPRouteBackendTimeout": ("HTTPRouteTimeoutBackendRequest",),
    "HTTPRouteCORS": ("HTTPRouteCORS",),
    "HTTPRouteHostRewrite": ("HTTPRouteRewriteHost",),
    "HTTPRouteMethodMatching": ("HTTPRouteMethodMatching",),
    "HTTPRouteNamedRouteRule": ("HTTPRouteNamedRule",),
    "HTTPRouteParentRefPort": ("HTTPRouteListenerPortMatching",),
    "HTTPRoutePathRedirect": ("HTTPRouteRedirectPath",),
    "HTTPRoutePathRewrite": ("HTTPRouteRewritePath",),
    "HTTPRoutePortRedirect": ("HTTPRouteRedirectPort", "HTTPRouteRedirectPortAndScheme"),
    "HTTPRouteQueryParamMatching": ("HTTPRouteQueryParamMatching",),
    "HTTPRouteRequestTimeout": ("HTTPRouteTimeoutRequest",),
    "HTTPRouteResponseHeaderModification": ("HTTPRouteResponseHeaderModifier",),
    "HTTPRouteSchemeRedirect": ("HTTPRouteRedirectScheme", "HTTPRouteRedirectPortAndScheme"),
    "ListenerSet": ("ListenerSetDefaultNotAllowed", "ListenerSetAllowedNamespaceSelector"),
    "ReferenceGrant": ("HTTPRouteReferenceGrant", "GatewaySecretReferenceGrantSpecific"),
    "TCPRoute": ("TCPRouteParentRefPortAndSectionName", "TCPRouteReferenceGrant"),
    "TLSRoute": ("TLSRouteSimpleSameNamespace", "TLSRouteListenerHostnameMatching"),
    "UDPRoute": (
        "UDPRoute",
        "UDPRouteParentRefPortAndSectionName",
        "UDPRouteInvalidCrossNamespaceBackendRef",
    ),
}

#: The names, sorted as ``status.supportedFeatures`` lists them.
SUPPORTED_FEATURES: tuple[str, ...] = tuple(sorted(FEATURES))
