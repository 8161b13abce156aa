"""The CORS filter: inert unless a route carries a CORS policy (its per-route configuration, made
here). Always present, so that adding the first CORS policy changes routes, not the listener."""

from __future__ import annotations

import re
from typing import Any

from envoy.extensions.filters.http.cors.v3 import cors_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from envoy.type.matcher.v3 import regex_pb2, string_pb2
from google.protobuf import wrappers_pb2

from weir import ir
from weir.xds.common import CORS_FILTER, pack
from weir.xds.filters import ChainNeeds, HttpFilterModule


def http_filter(needs: ChainNeeds) -> list[Any]:
    return [hcm_pb2.HttpFilter(name=CORS_FILTER, typed_config=pack(cors_pb2.Cors()))]


def per_route(route: ir.Route) -> Any | None:
    """The route's CORS policy, packed, or ``None``."""
    return None if route.cors is None else pack(_cors_policy(route.cors))


#: Every method a CORS policy can name (with ``*`` and credentials, all are listed).
_CORS_METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH")


_DEFAULT_PORTS = {"http": "80", "https": "443"}


def _cors_policy(cors: ir.Cors) -> Any:
    """The route's CORS policy. Preflights from an origin not allowed are answered, not forwarded."""
    out = cors_pb2.CorsPolicy(
        allow_origin_string_match=[origin_matcher(origin) for origin in cors.allow_origins],
        allow_methods=", ".join(cors.allow_methods),
        allow_headers=", ".join(cors.allow_headers),
        expose_headers=", ".join(cors.expose_headers),
        max_age=str(cors.max_age_s),
        forward_not_matching_preflights=wrappers_pb2.BoolValue(value=False),
    )
    if cors.allow_credentials:
        out.allow_credentials.value = True
    return out


def origin_matcher(origin: str) -> Any:
    """An allowed origin: ``*`` any; else scheme, host (``*`` matches any characters) and port,
    the scheme's default port matching with or without it being written."""
    if origin == "*":
        return string_pb2.StringMatcher(safe_regex=regex_pb2.RegexMatcher(regex=".*"))
    scheme, _, authority = origin.partition("://")
    host, _, port = authority.partition(":")
    host_regex = ".*".join(re.escape(part) for part in host.split("*"))
    default = _DEFAULT_PORTS.get(scheme.lower())
    if not port or port == default:
        port_regex = f"(:{default})?" if default else ""
    else:
        port_regex = ":" + re.escape(port)
    regex = re.escape(scheme) + "://" + host_regex + port_regex
    return string_pb2.StringMatcher(safe_regex=regex_pb2.RegexMatcher(regex=regex))


#: First: a preflight is answered before anything else runs.
FILTER = HttpFilterModule(CORS_FILTER, 100, http_filter, per_route=per_route)
