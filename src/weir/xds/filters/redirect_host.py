"""The redirect-host filter: a redirect's ``Location`` never carries the port of the request's Host.

Routing ignores the port of ``Host`` (the route configuration's
``ignore_port_in_host_matching``) and forwarding keeps it, as the Gateway API
asks: a request for ``very.specific.com:1234`` matches ``very.specific.com``
and the backend sees ``Host: very.specific.com:1234``.

Envoy builds a redirect's ``Location`` from that same Host, port included,
unless the redirect names a port of its own; and it writes a port it is given
even when it is the scheme's default (``:80``). The Gateway API derives the
port from the rule alone (its port, else the scheme's well-known port, else
the listener's), so a Host's port must never reach ``Location``. This Lua
filter, disabled on the connection manager and enabled by redirect routes
only (:func:`per_route_config`), removes it before the router builds
``Location``; the route then adds its own port when it has one. Requests on
other routes never instantiate it.
"""

from __future__ import annotations

from typing import Any

from envoy.config.core.v3 import base_pb2
from envoy.config.route.v3 import route_components_pb2
from envoy.extensions.filters.http.lua.v3 import lua_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2

from weir import ir
from weir.xds.common import pack
from weir.xds.filters import HttpFilterModule

#: The filter's name on the connection manager, and the key of its per-route configuration.
REDIRECT_HOST_FILTER = "envoy.filters.http.lua.redirect_host"

_SOURCE = "strip-host-port"

#: ``host:port`` → ``host``; ``[v6]:port`` → ``[v6]``; a Host without a port is left alone
#: (``[v6]`` ends with ``]``, not with digits after a colon).
_LUA = """
function envoy_on_request(handle)
  local headers = handle:headers()
  local host = headers:get(":authority")
  if host ~= nil then
    local bare = string.match(host, "^(.*):%d*$")
    if bare ~= nil and bare ~= "" then
      headers:replace(":authority", bare)
    end
  end
end
"""


def http_filter() -> Any:
    """The filter for an HTTP connection manager, before the router; disabled until a route enables it."""
    config = lua_pb2.Lua(source_codes={_SOURCE: base_pb2.DataSource(inline_string=_LUA)})
    return hcm_pb2.HttpFilter(name=REDIRECT_HOST_FILTER, typed_config=pack(config), disabled=True)


def per_route_config() -> Any:
    """What a redirect route puts under :data:`REDIRECT_HOST_FILTER` to enable the filter."""
    return pack(route_components_pb2.FilterConfig(config=pack(lua_pb2.LuaPerRoute(name=_SOURCE))))


def per_route(route: ir.Route) -> Any | None:
    """A redirect route enables the filter; other routes leave it off."""
    return per_route_config() if isinstance(route.action, ir.Redirect) else None


#: Before the router, which builds ``Location`` from the Host it leaves.
FILTER = HttpFilterModule(REDIRECT_HOST_FILTER, 300, lambda needs: [http_filter()], per_route=per_route)
