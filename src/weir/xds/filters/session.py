"""The session filter: routes with session persistence send a session back to its first endpoint.

Envoy's stateful session filter, disabled on the connection manager and
enabled by the routes whose :class:`weir.ir.Forward` has a ``session``
(:func:`per_route_config`). With a cookie, Envoy sets it on the first
response, naming the endpoint that answered; with a header, the backend's
responses carry it and clients send it back. The session is not strict: a
session whose endpoint is gone continues on another one, as the Gateway API
asks, rather than failing.
"""

from __future__ import annotations

from typing import Any

from envoy.config.core.v3 import extension_pb2
from envoy.config.route.v3 import route_components_pb2
from envoy.extensions.filters.http.stateful_session.v3 import stateful_session_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from envoy.extensions.http.stateful_session.cookie.v3 import cookie_pb2 as cookie_state_pb2
from envoy.extensions.http.stateful_session.header.v3 import header_pb2 as header_state_pb2
from envoy.type.http.v3 import cookie_pb2
from google.protobuf import duration_pb2

from weir import ir
from weir.xds.common import pack
from weir.xds.filters import HttpFilterModule

#: The filter's name on the connection manager, and the key of its per-route configuration.
SESSION_FILTER = "envoy.filters.http.stateful_session"


def http_filter() -> Any:
    """The filter for an HTTP connection manager, before the router; disabled until a route enables it."""
    return hcm_pb2.HttpFilter(
        name=SESSION_FILTER, typed_config=pack(stateful_session_pb2.StatefulSession()), disabled=True
    )


def per_route_config(session: ir.SessionAffinity) -> Any:
    """What a route with ``session`` puts under :data:`SESSION_FILTER`."""
    if session.kind == "cookie":
        cookie = cookie_pb2.Cookie(
            name=session.name, path="/", ttl=duration_pb2.Duration(seconds=session.ttl_s)
        )
        state = extension_pb2.TypedExtensionConfig(
            name="envoy.http.stateful_session.cookie",
            typed_config=pack(cookie_state_pb2.CookieBasedSessionState(cookie=cookie)),
        )
    else:
        state = extension_pb2.TypedExtensionConfig(
            name="envoy.http.stateful_session.header",
            typed_config=pack(header_state_pb2.HeaderBasedSessionState(name=session.name)),
        )
    per_route = stateful_session_pb2.StatefulSessionPerRoute(
        stateful_session=stateful_session_pb2.StatefulSession(session_state=state, strict=False)
    )
    return pack(route_components_pb2.FilterConfig(config=pack(per_route)))


def per_route(route: ir.Route) -> Any | None:
    """What a route with a session puts under :data:`SESSION_FILTER`, or ``None``."""
    action = route.action
    if not isinstance(action, ir.Forward) or action.session is None:
        return None
    return per_route_config(action.session)


#: Before the router, which picks the session's endpoint.
FILTER = HttpFilterModule(SESSION_FILTER, 400, lambda needs: [http_filter()], per_route=per_route)
