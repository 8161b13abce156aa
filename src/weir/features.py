"""The Gateway API features weir implements: the one list, for GatewayClass
``status.supportedFeatures``, ``docs/kubernetes.md`` and the conformance suite.

Each feature (named as ``sigs.k8s.io/gateway-api/pkg/features`` names it)
maps to the cases of ``tests/conformance`` that show it, named after the
upstream conformance tests; ``tests/conformance/test_features.py`` fails if a
listed case is missing or pending. A feature is listed only when a case
shows it: what weir does beyond them (WebSocket backends, request mirrors,
...) is tested elsewhere but not claimed here until a conformance case covers
it.

:data:`PROFILES` lists upstream v1.6.1's features by conformance profile and
:data:`OUTSIDE_PROFILES` the features it names outside them, so that
:func:`feature_table` can write ``docs/conformance.md``'s table: every
feature, claimed or not, with the cases that show it.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = [
    "FEATURES",
    "GATEWAY_SERVICES_FEATURES",
    "OUTSIDE_PROFILES",
    "PROFILES",
    "SUPPORTED_FEATURES",
    "feature_table",
    "supported_features",
]

#: Feature name -> the conformance cases that show it.
FEATURES: Mapping[str, tuple[str, ...]] = {
    "BackendTLSPolicy": ("BackendTLSPolicy", "BackendTLSPolicyInvalidCACertificateRef"),
    "BackendTLSPolicySANValidation": ("BackendTLSPolicySANValidation",),
    "GatewayBackendClientCertificate": (
        "GatewayBackendClientCertificateFeature",
        "GatewayInvalidTLSBackendConfiguration",
    ),
    "GRPCRoute": ("GRPCExactMethodMatching", "GRPCRouteHeaderMatching"),
    "Gateway": ("GatewayWithAttachedRoutes", "GatewayModifyListeners", "GatewayObservedGenerationBump"),
    "GatewayHTTPListenerIsolation": ("GatewayHTTPListenerIsolation",),
    "GatewayHTTPSListenerDetectMisdirectedRequests": ("HTTPRouteHTTPSListenerDetectMisdirectedRequests",),
    "GatewayPort8080": ("GatewayWithAttachedRoutesWithPort8080", "HTTPRouteRedirectPortAndScheme"),
    "GatewayStaticAddresses": ("GatewayStaticAddresses",),
    "GatewayAddressEmpty": ("GatewayOptionalAddressValue",),
    # Shown on a real API server (tests/kube/test_envtest_gateway_infrastructure.py), only
    # with --gateway-services: see GATEWAY_SERVICES_FEATURES.
    "GatewayInfrastructurePropagation": ("GatewayInfrastructure",),
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
    "GRPCRouteNamedRouteRule": ("GRPCRouteNamedRule",),
    "HTTPRouteParentRefPort": ("HTTPRouteListenerPortMatching",),
    # GEP-957 "Destination Port Matching" is ParentReference.port: a route bound to the listeners
    # of one port, and refused (NoMatchingParent) when no listener has that port. Upstream has no
    # test naming the feature; these cases show both halves.
    "HTTPRouteDestinationPortMatching": (
        "HTTPRouteListenerPortMatching",
        "HTTPRouteInvalidParentRefNotMatchingListenerPort",
    ),
    "HTTPRoutePathRedirect": ("HTTPRouteRedirectPath",),
    "HTTPRouteRequestMirror": ("HTTPRouteRequestMirror",),
    "HTTPRouteRequestMultipleMirrors": ("HTTPRouteRequestMultipleMirrors",),
    "HTTPRouteRequestPercentageMirror": ("HTTPRouteRequestPercentageMirror",),
    "HTTPRouteBackendProtocolWebSocket": ("HTTPRouteBackendProtocolWebSocket",),
    "CookieSessionPersistence": ("HTTPRouteSessionPersistenceCookie",),
    "CookieSessionPersistencePermanentLifetime": (
        "GRPCRouteSessionPersistenceCookiePermanentLifetime",
        "HTTPRouteSessionPersistencePermanentCookie",
    ),
    "HTTPRoute303RedirectStatusCode": ("HTTPRoute303Redirect",),
    "HTTPRoute307RedirectStatusCode": ("HTTPRoute307Redirect",),
    "HTTPRoute308RedirectStatusCode": ("HTTPRoute308Redirect",),
    "HTTPRoutePathRewrite": ("HTTPRouteRewritePath",),
    "HTTPRoutePortRedirect": ("HTTPRouteRedirectPort", "HTTPRouteRedirectPortAndScheme"),
    "HTTPRouteQueryParamMatching": ("HTTPRouteQueryParamMatching",),
    "HTTPRouteRequestTimeout": ("HTTPRouteTimeoutRequest",),
    "HTTPRouteResponseHeaderModification": ("HTTPRouteResponseHeaderModifier",),
    "HTTPRouteRetry": ("HTTPRouteRetry",),
    "HTTPRouteRetryBackendTimeout": ("HTTPRouteRetryWithTimeouts",),
    "HTTPRouteRetryConnectionError": ("HTTPRouteRetryConnectionError",),
    "HTTPRouteSchemeRedirect": ("HTTPRouteRedirectScheme", "HTTPRouteRedirectPortAndScheme"),
    "ListenerSet": (
        "ListenerSetDefaultNotAllowed",
        "ListenerSetAllowedNamespaceSelector",
        "ListenerSetParentNotAccepted",
        "ListenerSetUpdateListenerHostname",
    ),
    "ReferenceGrant": ("HTTPRouteReferenceGrant", "GatewaySecretReferenceGrantSpecific"),
    "TCPRoute": ("TCPRouteParentRefPortAndSectionName", "TCPRouteReferenceGrant"),
    "TLSRoute": ("TLSRouteSimpleSameNamespace", "TLSRouteListenerHostnameMatching"),
    "TLSRouteModeTerminate": ("TLSRouteTerminateSimpleSameNamespace", "TLSRouteModeTerminate"),
    "TLSRouteModeMixed": ("TLSRouteMixedTerminationSameNamespace",),
    "UDPRoute": (
        "UDPRoute",
        "UDPRouteParentRefPortAndSectionName",
        "UDPRouteInvalidCrossNamespaceBackendRef",
    ),
}

#: Features weir implements only with ``weir run --kubernetes --gateway-services`` (the per-Gateway
#: Service, :mod:`weir.infrastructure`): without it there is nothing per Gateway for
#: ``spec.infrastructure`` to reach, so GatewayClasses do not claim them.
GATEWAY_SERVICES_FEATURES: frozenset[str] = frozenset({"GatewayInfrastructurePropagation"})


def supported_features(*, gateway_services: bool = False) -> tuple[str, ...]:
    """``status.supportedFeatures`` (sorted) of weir's GatewayClasses: :data:`FEATURES`, less
    :data:`GATEWAY_SERVICES_FEATURES` unless the per-Gateway Service mode is on."""
    return tuple(
        sorted(name for name in FEATURES if gateway_services or name not in GATEWAY_SERVICES_FEATURES)
    )


#: The names claimed by default (no mode on), sorted as ``status.supportedFeatures`` lists them.
SUPPORTED_FEATURES: tuple[str, ...] = supported_features()


#: Gateway API's extended Gateway features, in every Gateway profile.
_GATEWAY_EXTENDED = (
    "GatewayPort8080",
    "GatewayStaticAddresses",
    "GatewayHTTPListenerIsolation",
    "GatewayHTTPSListenerDetectMisdirectedRequests",
    "GatewayInfrastructurePropagation",
    "GatewayAddressEmpty",
    "ListenerSet",
    "GatewayBackendClientCertificate",
    "GatewayFrontendClientCertificateValidation",
    "GatewayFrontendClientCertificateValidationInsecureFallback",
)
_HTTPROUTE_EXTENDED = (
    "HTTPRouteDestinationPortMatching",
    "HTTPRouteBackendRequestHeaderModification",
    "HTTPRouteQueryParamMatching",
    "HTTPRouteMethodMatching",
    "HTTPRouteResponseHeaderModification",
    "HTTPRoutePortRedirect",
    "HTTPRouteSchemeRedirect",
    "HTTPRoutePathRedirect",
    "HTTPRouteHostRewrite",
    "HTTPRoutePathRewrite",
    "HTTPRouteRequestMirror",
    "HTTPRouteRequestMultipleMirrors",
    "HTTPRouteRequestPercentageMirror",
    "HTTPRouteRequestTimeout",
    "HTTPRouteBackendTimeout",
    "HTTPRouteParentRefPort",
    "HTTPRouteBackendProtocolH2C",
    "HTTPRouteBackendProtocolWebSocket",
    "HTTPRouteNamedRouteRule",
    "HTTPRouteCORS",
    "HTTPRoute303RedirectStatusCode",
    "HTTPRoute307RedirectStatusCode",
    "HTTPRoute308RedirectStatusCode",
    "HTTPRouteRetry",
    "HTTPRouteRetryBackendTimeout",
    "HTTPRouteRetryConnectionError",
)

#: Conformance profile -> (core features, extended features) in upstream v1.6.1. The
#: extended sets are what v1.6.1 conformance reports list per profile as supported plus
#: unsupported (``conformance/reports/v1.6/envoy-gateway/experimental-v1.9.0-default-report.yaml``,
#: run with v1.6.1, and ``agentgateway-agentgateway/v1.3.1-report.yaml``, which lists none
#: unsupported): a report names every extended feature of the profiles it ran.
#: GATEWAY-TCP and GATEWAY-UDP are listed so that the table covers TCPRoute and UDPRoute;
#: neither v1.6 report has such a profile.
PROFILES: Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "GATEWAY-HTTP": (
        ("Gateway", "ReferenceGrant", "HTTPRoute"),
        (*_GATEWAY_EXTENDED, *_HTTPROUTE_EXTENDED, "BackendTLSPolicy", "BackendTLSPolicySANValidation"),
    ),
    "GATEWAY-GRPC": (("Gateway", "ReferenceGrant", "GRPCRoute"), _GATEWAY_EXTENDED),
    "GATEWAY-TLS": (
        ("Gateway", "ReferenceGrant", "TLSRoute"),
        (*_GATEWAY_EXTENDED, "TLSRouteModeTerminate", "TLSRouteModeMixed"),
    ),
    "GATEWAY-TCP": (("Gateway", "TCPRoute"), ()),
    "GATEWAY-UDP": (("Gateway", "UDPRoute"), ()),
}

#: Features upstream names (``pkg/features``, its conformance tests) that no v1.6.1 profile
#: lists: upstream runs their tests when an implementation claims them, outside the profile
#: summaries. The table shows them below the profiles' features.
OUTSIDE_PROFILES: tuple[str, ...] = (
    "GRPCRouteNamedRouteRule",
    "CookieSessionPersistence",
    "CookieSessionPersistencePermanentLifetime",
    "BackendTLSPolicyClusterTrustBundle",
    "GatewayFrontendClusterTrustBundle",
)


def feature_table() -> str:
    """docs/conformance.md's feature table (Markdown), from :data:`PROFILES`,
    :data:`OUTSIDE_PROFILES` and :data:`FEATURES`."""
    order: list[str] = []
    for core, extended in PROFILES.values():
        order.extend(name for name in (*core, *extended) if name not in order)
    order.extend(name for name in OUTSIDE_PROFILES if name not in order)
    header = ["feature", *PROFILES, "weir claims", "shown by (tests/conformance)"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name in order:
        levels = []
        for core, extended in PROFILES.values():
            levels.append("core" if name in core else "extended" if name in extended else "")
        cases = ", ".join(FEATURES.get(name, ()))
        claimed = "yes" if name in FEATURES else "no"
        if name in GATEWAY_SERVICES_FEATURES and name in FEATURES:
            claimed = "with `--gateway-services`"
            cases += " (tests/kube)"
        lines.append("| " + " | ".join([f"`{name}`", *levels, claimed, cases]) + " |")
    return "\n".join(lines) + "\n"
