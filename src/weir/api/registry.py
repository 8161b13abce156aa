"""Which model parses which ``apiVersion``/``kind``."""

from __future__ import annotations

from weir.api import (
    core_v1,
    discovery_v1,
    gateway_v1,
    gateway_v1_backendtlspolicy,
    gateway_v1_grpcroute,
    gateway_v1_listenerset,
    gateway_v1_tcproute,
    gateway_v1_tlsroute,
    gateway_v1_udproute,
    gateway_v1beta1,
    weir_policies_v1alpha1,
    weir_v1alpha1,
    xbackend_v1alpha1,
    xbackendtrafficpolicy_v1alpha1,
)
from weir.api.meta import KubeObject

#: Every kind weir understands, in the order translation depends on them.
MODELS: tuple[type[KubeObject], ...] = (
    core_v1.Namespace,
    core_v1.Secret,
    core_v1.ConfigMap,
    core_v1.Service,
    discovery_v1.EndpointSlice,
    weir_v1alpha1.GatewayClassConfig,
    gateway_v1.GatewayClass,
    gateway_v1.Gateway,
    gateway_v1_listenerset.ListenerSet,
    gateway_v1.HTTPRoute,
    gateway_v1_tcproute.TCPRoute,
    gateway_v1_tlsroute.TLSRoute,
    gateway_v1_udproute.UDPRoute,
    gateway_v1beta1.ReferenceGrant,
    xbackend_v1alpha1.XBackend,
    gateway_v1_backendtlspolicy.BackendTLSPolicy,
    weir_policies_v1alpha1.BackendCredentialPolicy,
    weir_policies_v1alpha1.BackendMCPPolicy,
    gateway_v1_grpcroute.GRPCRoute,
    xbackendtrafficpolicy_v1alpha1.XBackendTrafficPolicy,
)

#: Older versions of a kind in :data:`MODELS` whose schema differs from the current one's, read
#: from files only (a cluster serves the current version, which is the one weir watches).
OLDER_VERSIONS: tuple[type[KubeObject], ...] = (
    gateway_v1_tcproute.TCPRouteV1Alpha2,
    gateway_v1_udproute.UDPRouteV1Alpha2,
)

#: Kinds weir reads from files only; a cluster's are not watched (Pods: see ``core_v1.Pod``).
FILES_ONLY: tuple[type[KubeObject], ...] = (core_v1.Pod,)

_BY_TYPE: dict[tuple[str, str], type[KubeObject]] = {
    (version, m.KIND): m
    for m in (*MODELS, *OLDER_VERSIONS, *FILES_ONLY)
    for version in (m.API_VERSION, *m.ALSO_SERVED)
}
_KINDS: dict[str, type[KubeObject]] = {m.KIND: m for m in (*MODELS, *FILES_ONLY)}


def lookup(api_version: str, kind: str) -> type[KubeObject] | None:
    """The model for ``apiVersion``/``kind``, or ``None`` if weir does not read that type."""
    return _BY_TYPE.get((api_version, kind))


def model_for_kind(kind: str) -> type[KubeObject] | None:
    """The model weir uses for a kind regardless of version (kinds are unique across weir's groups)."""
    return _KINDS.get(kind)
