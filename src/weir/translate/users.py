"""Who uses each XBackend, known before any backend is resolved.

An XBackend's egress policy combines those of the classes of every Gateway
whose routes use it (:func:`weir.translate.egress.decide`), so it can be
decided when a route first resolves the XBackend only if all of its users are
known by then. :func:`xbackend_users` finds them first: for every route of
every kind that names an XBackend it would resolve (the same checks as
:meth:`~weir.translate.backends.BackendResolver.resolve`, on the references
each kind's ``resolved_refs`` lists), the Gateways the route attaches to (the
same attachment as the kind's translation, whose result that translation then
reuses). The token endpoint of an OAuth2 credential is an XBackend no route
names: the Gateways of the routes whose backends (XBackends or Services) have
that credential are its users. Routes naming no XBackend (nor such a
backend) are not attached here. The resolver records the users it meets too, for the
XBackends' statuses; ``tests/translate/test_users.py`` holds the two equal.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from weir.api.meta import ObjectKey
from weir.resources import Resources
from weir.translate import grpcroutes, routes, tcproutes, tlsroutes
from weir.translate.attachment import RouteKind, RouteParent, parent_index, route_parents
from weir.translate.backends import credential_token_endpoint, used_xbackend
from weir.translate.credentials import CredentialPolicies
from weir.translate.gateways import GatewayContext
from weir.translate.grpcroutes import GRPC_KIND, KindConflicts
from weir.translate.routes import HTTP_KIND
from weir.translate.tcproutes import RELAY_KIND
from weir.translate.tlsroutes import TLS_KIND


def xbackend_users(
    resources: Resources, gateways: list[GatewayContext], conflicts: KindConflicts
) -> tuple[dict[ObjectKey, set[ObjectKey]], dict[ObjectKey, list[RouteParent]]]:
    """XBackend → the Gateways whose routes (of any kind) resolve it (UDPRoutes never do: an
    XBackend takes no UDP); and the parents of the routes attached to find them, by route, for
    each kind's translation to reuse rather than attach them again."""
    by_key, existing = parent_index(resources, gateways)
    users: dict[ObjectKey, set[ObjectKey]] = {}
    # The token endpoint of an OAuth2 credential is used by the Gateways of the routes using the
    # backends with that credential (Services too). Looked for only when such a policy exists.
    oauth2 = any(p.spec.oauth2 is not None for p in resources.backend_credential_policies)
    credentials = CredentialPolicies(resources)
    attached: dict[ObjectKey, list[RouteParent]] = {}

    def add(route: Any, refs: Iterable[Any], kind: RouteKind, lost: Mapping[int, str] | None = None) -> None:
        refs = list(refs)
        used = {
            xb.key
            for ref in refs
            if (xb := used_xbackend(resources, route.KIND, route.namespace, ref)) is not None
        }
        if oauth2:
            used |= {
                token
                for ref in refs
                if (
                    token := credential_token_endpoint(
                        resources, credentials, route.KIND, route.namespace, ref
                    )
                )
                is not None
            }
        if not used:
            return
        parents = attached[route.key] = route_parents(resources, route, by_key, existing, kind, lost)
        if not parents:  # no parentRef is weir's: nothing is resolved
            return
        found = {a.listener.gateway.key for p in parents for a in p.attachments}
        for key in used:
            users.setdefault(key, set()).update(found)

    for http in resources.http_routes:
        add(http, routes.resolved_refs(http), HTTP_KIND, conflicts.lost.get(http.key))
    for grpc in resources.grpc_routes:
        add(grpc, grpcroutes.resolved_refs(grpc), GRPC_KIND, conflicts.of(grpc.key))
    for tcp in resources.tcp_routes:
        add(tcp, tcproutes.resolved_refs(tcp), RELAY_KIND)
    for tls in resources.tls_routes:
        add(tls, tlsroutes.resolved_refs(tls), TLS_KIND)
    return users, attached
