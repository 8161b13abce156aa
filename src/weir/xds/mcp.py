"""MCP tool policies in Envoy: the tool allow-list filters, their refusals and their access log.

Part of :mod:`weir.xds.build`, and the only module that knows how Envoy reads
MCP. An upstream with :attr:`weir.ir.Upstream.mcp_tools` (an XBackend of
protocol ``MCP`` under a ``BackendMCPPolicy``) is served like this:

* **Parsing.** Envoy's MCP filter (:data:`MCP_FILTER`) reads the JSON-RPC
  body of each ``POST`` on the way in and writes what it found into the
  request's dynamic metadata, namespace :data:`MCP_METADATA`: ``method``,
  ``id`` (number or string, as sent), ``params.name`` for ``tools/call``,
  ``is_mcp_request``, and ``is_exceeding_limit`` when the body was larger
  than it reads (:data:`MAX_INSPECTED_BODY`). A JSON-RPC response from the
  client gets the method ``__jsonrpc_response``; a body that is not one
  JSON-RPC 2.0 message (a batch, invalid JSON, ``"jsonrpc": "1.0"``), or a
  ``POST`` without ``Accept: application/json, text/event-stream``, gets no
  ``method``. Escapes are decoded (``"r\\u006d"`` is ``rm``); of duplicate
  keys the last counts, as in Python's, JavaScript's and Go's parsers. Only
  the request is read: responses, ``text/event-stream`` ones included, pass
  as they arrive, except the answers to ``tools/list``, from which
  :mod:`weir.xds.mcp_list` removes the tools the policy refuses.
* **Refusing.** An RBAC filter (:data:`TOOLS_FILTER`) then denies, by that
  metadata, a ``tools/call`` naming a tool the policy does not allow, and
  fails closed on what it cannot judge: a ``tools/call`` without a string
  name, one larger than :data:`MAX_INSPECTED_BODY` (past it a second
  ``params`` could name another tool), and any request with a body it could
  not read (a ``POST`` without a ``method``; ``GET``, ``HEAD``, ``DELETE``
  and ``OPTIONS`` carry no JSON-RPC message and pass). Other methods pass.
* **Who calls.** A per-caller policy (:attr:`weir.ir.McpToolPolicy.per_caller`)
  grants tools by the caller's verified identity. Envoy's JWT filter
  (:data:`JWT_FILTER`, after the MCP filter, enabled per route with the
  requirement of the route's providers) verifies a bearer token against the
  policy's key set, issuer and audiences: a request without one passes
  unidentified, one whose token fails is refused (401, a JSON-RPC error
  with the request's ``id``; the token never goes upstream), and a verified
  payload is left in the metadata under the provider's name, the claims the
  rules read split at spaces into lists. The tool RBAC filter then refuses,
  as :data:`POLICY_NOT_GRANTED`, a ``tools/call`` for a tool that neither
  ``allowed`` nor a grant whose caller matches gives: one principal holds
  caller and tool together (:func:`caller_principal`: the payload's ``sub``
  and claims, or the client certificate's SANs through RBAC's
  ``authenticated``, which is not believed on HTTPS servers that let
  unverified certificates in: :func:`_unverified_filter`). A tool no rule
  grants anyone stays :data:`POLICY_NOT_ALLOWED` (named first).
* **Where.** Envoy 1.40 registers the MCP filter only in the connection
  manager, not as an upstream (cluster) filter, and the refusal must be
  decided from its metadata, so both filters are in the connection manager,
  disabled (:func:`http_filters`), and each route enables them where a
  request goes to an upstream with a policy (:func:`per_filter_config`): on
  the route, or on the weighted cluster of that upstream only, so each
  backend of a split keeps its own policy (a request mirror's policy
  applies too: the mirror receives the same request). Routes without one
  never run them. Only the connection managers of listeners (and HTTPS
  servers) with such routes have them (:func:`uses_tool_policies`): Envoy
  1.40 marks its MCP filter work in progress (not covered by Envoy's threat
  model; the end-to-end tests pin the behaviour weir relies on) and warns
  each time it loads it, and other listeners pay nothing. The price: the first policy on a
  listener, and the removal of its last, change the listener, whose open
  connections Envoy then drains (changes to policies in between only
  change routes).
* **Answering.** RBAC answers ``403 RBAC: access denied``, which an MCP
  client cannot match to its request. The connection manager's local reply
  mappers (:func:`local_reply_mappers`) select weir's refusals by their
  policy name in the response code details and answer as the MCP server
  itself would answer a call for a tool it does not have: HTTP 200,
  ``Content-Type: application/json``, a JSON-RPC error carrying the
  request's ``id``, code ``-32602`` (Invalid params, what the MCP
  specification gives for an unknown tool), a message naming the tool and
  the XBackend, and ``data`` with the same facts for programs. A client
  reports that as the error of that call whatever it does with HTTP
  errors; the ``mcp`` SDK (2.3) raises ``MCPError`` with the code and
  message. A 403 carrying the same body would reach that SDK as well, but
  a client that does not read bodies at an error status (the same SDK,
  for a body that is not JSON) reports a transport failure ("Server
  returned an error response") instead of the refusal. The codes of the
  -32000 range are taken by SDKs (-32000 connection closed, -32001 request
  timeout). A body that could not be read has no ``id`` to answer: it gets
  400, as the streamable HTTP transport prescribes for input a server
  cannot accept, with a JSON-RPC error whose ``id`` is null (the SDK gives
  it its request's id).
* **Counting.** Each ``tools/call`` and each refusal is also sent to weir
  by gRPC access log (:func:`access_log`, served by
  :mod:`weir.xds.accesslog`), which counts calls, refusals, errors and
  durations per XBackend and tool. Its filter only passes requests carrying
  that metadata, which only the enabled filters write: other traffic pays
  two metadata lookups and sends nothing. Entries name their upstream in a
  tag (:data:`UPSTREAM_TAG`): Envoy's own field is empty for a request
  that never reached a host.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import re2
from envoy.config.accesslog.v3 import accesslog_pb2
from envoy.config.core.v3 import base_pb2, config_source_pb2, grpc_service_pb2
from envoy.config.core.v3 import substitution_format_string_pb2 as format_pb2
from envoy.config.rbac.v3 import rbac_pb2
from envoy.config.route.v3 import route_components_pb2
from envoy.extensions.access_loggers.filters.cel.v3 import cel_pb2
from envoy.extensions.access_loggers.grpc.v3 import als_pb2
from envoy.extensions.filters.http.jwt_authn.v3 import config_pb2 as jwt_pb2
from envoy.extensions.filters.http.mcp.v3 import mcp_pb2
from envoy.extensions.filters.http.rbac.v3 import rbac_pb2 as rbac_filter_pb2
from envoy.extensions.filters.http.set_metadata.v3 import set_metadata_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm_pb2,
)
from envoy.type.matcher.v3 import metadata_pb2, regex_pb2, string_pb2, value_pb2
from envoy.type.tracing.v3 import custom_tag_pb2
from google.protobuf import empty_pb2, struct_pb2, wrappers_pb2

from weir import ir
from weir.xds import mcp_list
from weir.xds.common import cluster_name, duration_ms, pack

#: Envoy's MCP filter: its name in the connection manager, and the namespace of the metadata it writes.
MCP_FILTER = "envoy.filters.http.mcp"
MCP_METADATA = "envoy.filters.http.mcp"

#: The RBAC filter that refuses tool calls; its decisions are in the metadata namespace
#: :data:`RBAC_METADATA` (``enforced_engine_result``: ``allowed`` or ``denied``).
TOOLS_FILTER = "weir.mcp_tools"
RBAC_METADATA = "envoy.filters.http.rbac"

#: How much of a request body the MCP filter reads: Envoy's default buffer limit
#: of a connection (1 MiB). A ``tools/call`` larger than this is refused.
MAX_INSPECTED_BODY = 1 << 20

#: The RBAC policies of :data:`TOOLS_FILTER`; the refusal's response code details read
#: ``rbac_access_denied_matched_policy[NAME]``. When several match, Envoy names the
#: first in this (alphabetical) order: a body too large to judge is reported as such
#: whatever tool it seemed to name, a name that is not a string as such.
POLICY_TOO_LARGE = "weir-mcp-too-large"
POLICY_DENIED = "weir-mcp-tool-denied"
POLICY_NOT_ALLOWED = "weir-mcp-tool-not-allowed"
POLICY_NOT_GRANTED = "weir-mcp-tool-not-granted"
POLICY_UNNAMED = "weir-mcp-tool-name-invalid"
POLICY_UNREADABLE = "weir-mcp-unreadable"

#: Prefix shared by every policy name above (and by nothing else weir names).
POLICY_PREFIX = "weir-mcp-"

#: Envoy's JWT filter, which verifies callers' bearer tokens for per-caller policies; the
#: payload of a verified token is in its metadata namespace under the provider's name.
JWT_FILTER = "envoy.filters.http.jwt_authn"
JWT_METADATA = "envoy.filters.http.jwt_authn"
#: The filter marking requests on HTTPS servers that let clients in with certificates they could
#: not verify (``AllowInsecureFallback``): there, certificate rules match no one.
UNVERIFIED_FILTER = "weir.mcp_unverified_certificates"
CALLER_METADATA = "weir.mcp_caller"
UNVERIFIED_KEY = "unverified_certificate"
#: The response code details of the JWT filter's refusals start with this.
JWT_DENIED_DETAILS = "jwt_authn_access_denied"

#: The JSON-RPC error codes of the refusals.
INVALID_PARAMS = -32602
INVALID_REQUEST = -32600

#: The ``log_name`` of the gRPC access log, as :mod:`weir.xds.accesslog` receives it.
ACCESS_LOG_NAME = "weir-mcp-tools"

#: The access log entry's tag naming the request's upstream cluster. The entry's own
#: ``upstream_cluster`` is only set once a host was chosen: not for a refused request, nor
#: for one whose upstream had no healthy host.
UPSTREAM_TAG = "upstream_cluster"

#: How long Envoy gathers access log entries before sending them (or until 16 KiB).
ACCESS_LOG_FLUSH_MS = 500

#: Envoy refuses a regular expression whose RE2 program is larger than this (runtime key
#: ``re2.max_program_size.error_level``, default 100).
MAX_REGEX_PROGRAM_SIZE = 100

#: HTTP methods whose requests carry no JSON-RPC message: they pass without a ``method``.
_BODYLESS_METHODS = ("GET", "HEAD", "DELETE", "OPTIONS")

#: Any string (newlines included); numbers, booleans and objects do not match.
_ANY_STRING = string_pb2.StringMatcher(safe_regex=regex_pb2.RegexMatcher(regex="(?s).*"))
_ALL = rbac_pb2.Permission(any=True)

_TOOL = f"%DYNAMIC_METADATA({MCP_METADATA}:params:name)%"
_ID = f"%DYNAMIC_METADATA({MCP_METADATA}:id)%"
_BACKEND = "%UPSTREAM_CLUSTER%"


# --------------------------------------------------------------------------
# The connection manager: filters, local replies, access log
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class McpUse:
    """What the routes of one connection manager need of the MCP filters: that they exist, and the
    JWT requirements (each the providers of one route's policies) its per-caller policies verify."""

    jwt: frozenset[tuple[ir.McpJwtProvider, ...]] = frozenset()

    def merge(self, other: McpUse | None) -> McpUse:
        return self if other is None or other.jwt <= self.jwt else McpUse(self.jwt | other.jwt)


def http_filters(
    jwt: Iterable[tuple[ir.McpJwtProvider, ...]] = (), *, unverified_certificates: bool = False
) -> list[Any]:
    """The MCP filter, the JWT filter (when ``jwt`` requirements are given), the tool RBAC filter and
    the list filter (:mod:`weir.xds.mcp_list`), all disabled until a route enables them.

    They go after CORS (a preflight is answered before any of this) and before the router. The JWT
    filter comes after the MCP filter, so that its refusals can carry the request's JSON-RPC id.
    ``unverified_certificates``: the connection manager is an HTTPS server's that lets in clients
    whose certificate it could not verify (:func:`_unverified_filter`).
    """
    parser, tools, lister = _packed_http_filters()
    requirements = tuple(sorted(set(jwt), key=requirement_name))
    out = [parser]
    if unverified_certificates:
        out.append(_unverified_filter())
    if requirements:
        out.append(_jwt_filter(requirements))
    return [*out, tools, lister]


@functools.lru_cache(maxsize=1)
def _unverified_filter() -> Any:
    """Marks every request of the connection manager: its client certificates may be unverified.

    Envoy's RBAC ``authenticated`` principal reads a certificate's SANs
    whether or not the certificate chained to a trusted CA; under
    ``AllowInsecureFallback`` a client could present any SAN. The principals
    of certificate rules require this mark to be absent (and the list filter
    reads it too), so that there a certificate proves nothing.
    """
    value = struct_pb2.Struct()
    value.update({UNVERIFIED_KEY: True})
    config = set_metadata_pb2.Config(
        metadata=[set_metadata_pb2.Metadata(metadata_namespace=CALLER_METADATA, value=value)]
    )
    return hcm_pb2.HttpFilter(name=UNVERIFIED_FILTER, typed_config=pack(config))


@functools.lru_cache(maxsize=1)
def _packed_http_filters() -> tuple[Any, Any, Any]:
    parser = mcp_pb2.Mcp(max_request_body_size=wrappers_pb2.UInt32Value(value=MAX_INSPECTED_BODY))
    # No stat prefix: RBAC would put it in front of its metadata keys too. Its counters are the
    # connection manager's ``http.<listener>.rbac.*`` (the egress guard's are per cluster).
    tools = rbac_filter_pb2.RBAC()
    return (
        hcm_pb2.HttpFilter(name=MCP_FILTER, typed_config=pack(parser), disabled=True),
        hcm_pb2.HttpFilter(name=TOOLS_FILTER, typed_config=pack(tools), disabled=True),
        mcp_list.http_filter(),
    )


def requirement_name(providers: Sequence[ir.McpJwtProvider]) -> str:
    """The JWT filter's name for the requirement of a route whose policies verify ``providers``."""
    return "+".join(p.name for p in providers)


@functools.lru_cache(maxsize=64)
def _jwt_filter(requirements: tuple[tuple[ir.McpJwtProvider, ...], ...]) -> Any:
    """The JWT filter verifying the tokens of ``requirements`` (each route names one).

    A request without a token passes unidentified (``allow_missing``); one
    whose token fails verification is refused (401). A verified payload is
    written to the metadata under the provider's name, the claims the rules
    match on split at spaces into lists (``scope``). The token is removed
    from the request (``forward`` false): the MCP server never sees it.
    """
    providers = {p.name: p for providers in requirements for p in providers}
    config = jwt_pb2.JwtAuthentication(
        providers={name: _jwt_provider(p) for name, p in sorted(providers.items())},
        requirement_map={requirement_name(r): _requirement(r) for r in requirements},
    )
    return hcm_pb2.HttpFilter(name=JWT_FILTER, typed_config=pack(config), disabled=True)


def _jwt_provider(provider: ir.McpJwtProvider) -> Any:
    out = jwt_pb2.JwtProvider(
        issuer=provider.issuer,
        audiences=list(provider.audiences),
        local_jwks=base_pb2.DataSource(inline_string=provider.jwks),
        from_headers=[jwt_pb2.JwtHeader(name="Authorization", value_prefix="Bearer ")],
        payload_in_metadata=provider.name,
        forward=False,
    )
    if provider.claims:
        out.normalize_payload_in_metadata.space_delimited_claims.extend(provider.claims)
    return out


def _requirement(providers: Sequence[ir.McpJwtProvider]) -> Any:
    each = [
        jwt_pb2.JwtRequirement(
            requires_any=jwt_pb2.JwtRequirementOrList(
                requirements=[
                    jwt_pb2.JwtRequirement(provider_name=p.name),
                    jwt_pb2.JwtRequirement(allow_missing=empty_pb2.Empty()),
                ]
            )
        )
        for p in providers
    ]
    if len(each) == 1:
        return each[0]
    return jwt_pb2.JwtRequirement(requires_all=jwt_pb2.JwtRequirementAndList(requirements=each))


def local_reply_mappers() -> list[Any]:
    """Turn the tool RBAC filter's 403s into JSON-RPC errors (see the module's docstring)."""
    return [
        _mapper(
            POLICY_TOO_LARGE,
            200,
            INVALID_REQUEST,
            f"tools/call refused: the request is larger than the {MAX_INSPECTED_BODY} bytes the gateway "
            f"reads to apply the BackendMCPPolicy of {_BACKEND}; send smaller arguments",
        ),
        _mapper(
            POLICY_DENIED,
            200,
            INVALID_PARAMS,
            f"tool {_TOOL} is not allowed: the BackendMCPPolicy of {_BACKEND} lists it in deniedTools",
        ),
        _mapper(
            POLICY_NOT_ALLOWED,
            200,
            INVALID_PARAMS,
            f"tool {_TOOL} is not allowed: the BackendMCPPolicy of {_BACKEND} does not list it in "
            "allowedTools",
        ),
        _mapper(
            POLICY_NOT_GRANTED,
            200,
            INVALID_PARAMS,
            f"tool {_TOOL} is not allowed for this caller: no rule of the BackendMCPPolicy of {_BACKEND} "
            "grants it to the caller's verified identity (bearer token or client certificate), nor to "
            "every caller",
        ),
        _mapper(
            POLICY_UNNAMED,
            200,
            INVALID_PARAMS,
            f"tools/call refused: params.name must be a tool name (a string) for the gateway to apply "
            f"the BackendMCPPolicy of {_BACKEND}",
        ),
        _mapper(
            POLICY_UNREADABLE,
            400,
            INVALID_REQUEST,
            "request refused: the gateway could not read its body as one JSON-RPC 2.0 message (a batch, "
            "invalid JSON, or no 'Accept: application/json, text/event-stream' header), so it cannot "
            f"apply the BackendMCPPolicy of {_BACKEND}",
        ),
        # After the MCP filter, the JWT filter knows the id: 401 as the MCP authorization
        # specification prescribes for an invalid or expired token, with the id in the body.
        _mapper(
            "",
            401,
            INVALID_REQUEST,
            f"request refused: the bearer token is not valid for the BackendMCPPolicy of {_BACKEND} "
            "(%RESPONSE_CODE_DETAILS%): a bad signature, an unknown key, an issuer or audience the policy "
            "does not accept, or an expired token. Send a valid token, or none to use the tools that need "
            "no identity",
            expression=f"response.code_details.startsWith('{JWT_DENIED_DETAILS}')",
        ),
    ]


def _mapper(policy: str, status: int, code: int, message: str, *, expression: str | None = None) -> Any:
    """A local reply mapper answering the refusals of ``policy`` (or those ``expression`` selects)
    with a JSON-RPC error."""
    selected = cel_pb2.ExpressionFilter(
        expression=expression or f"response.code_details == 'rbac_access_denied_matched_policy[{policy}]'"
    )
    body = struct_pb2.Struct()
    body.update(
        {
            "jsonrpc": "2.0",
            # A single command keeps the id's JSON type (number or string); null when absent.
            "id": _ID if status != 400 else None,
            "error": {
                "code": code,
                "message": message,
                "data": {"tool": _TOOL, "backend": _BACKEND, "refusedBy": "%RESPONSE_CODE_DETAILS%"},
            },
        }
    )
    return hcm_pb2.ResponseMapper(
        filter=accesslog_pb2.AccessLogFilter(
            extension_filter=accesslog_pb2.ExtensionFilter(
                name="envoy.access_loggers.extension_filters.cel", typed_config=pack(selected)
            )
        ),
        status_code=wrappers_pb2.UInt32Value(value=status),
        body_format_override=format_pb2.SubstitutionFormatString(
            json_format=body, content_type="application/json"
        ),
    )


def access_log() -> Any:
    """The gRPC access log of tool calls and refusals, to weir over the xDS cluster.

    Its filter passes a request only when the MCP filter found a
    ``tools/call`` or ``tools/list`` in it or the tool RBAC filter refused it
    (the list filter's findings are in the ``tools/list`` entries): both write
    metadata only where a route enabled them. Entries carry the request's
    dynamic metadata (method, tool, the refusal), its upstream cluster,
    response code, flags and timings.
    """
    return _packed_access_log()


@functools.lru_cache(maxsize=1)
def _packed_access_log() -> Any:
    # Imported here, not at the top: weir.bootstrap may come to import what imports this module.
    from weir.bootstrap import XDS_CLUSTER

    call = _metadata_filter(MCP_METADATA, "method", "tools/call")
    listed = _metadata_filter(MCP_METADATA, "method", "tools/list")
    refused = _metadata_filter(RBAC_METADATA, "enforced_engine_result", "denied")
    unverified = accesslog_pb2.AccessLogFilter(
        extension_filter=accesslog_pb2.ExtensionFilter(
            name="envoy.access_loggers.extension_filters.cel",
            typed_config=pack(
                cel_pb2.ExpressionFilter(
                    expression=f"response.code_details.startsWith('{JWT_DENIED_DETAILS}')"
                )
            ),
        )
    )
    grpc = als_pb2.HttpGrpcAccessLogConfig(
        common_config=als_pb2.CommonGrpcAccessLogConfig(
            log_name=ACCESS_LOG_NAME,
            grpc_service=grpc_service_pb2.GrpcService(
                envoy_grpc=grpc_service_pb2.GrpcService.EnvoyGrpc(cluster_name=XDS_CLUSTER)
            ),
            transport_api_version=config_source_pb2.V3,
            buffer_flush_interval=duration_ms(ACCESS_LOG_FLUSH_MS),
            custom_tags=[custom_tag_pb2.CustomTag(tag=UPSTREAM_TAG, value="%UPSTREAM_CLUSTER%")],
        )
    )
    return accesslog_pb2.AccessLog(
        name="envoy.access_loggers.http_grpc",
        filter=accesslog_pb2.AccessLogFilter(
            or_filter=accesslog_pb2.OrFilter(
                filters=[
                    *(accesslog_pb2.AccessLogFilter(metadata_filter=f) for f in (call, listed, refused)),
                    unverified,
                ]
            )
        ),
        typed_config=pack(grpc),
    )


def _metadata_filter(namespace: str, key: str, value: str) -> Any:
    return accesslog_pb2.MetadataFilter(
        matcher=_metadata(namespace, (key,), value_pb2.ValueMatcher(string_match=_exact(value))),
        # Envoy's default logs requests without the key: every request.
        match_if_key_not_found=wrappers_pb2.BoolValue(value=False),
    )


# --------------------------------------------------------------------------
# Routes: enabling the filters where a request goes to a policy's upstream
# --------------------------------------------------------------------------


def uses_tool_policies(
    virtual_hosts: Iterable[ir.VirtualHost], upstreams: Mapping[str, ir.Upstream]
) -> McpUse | None:
    """What the routes of ``virtual_hosts`` that send (or mirror) requests to upstreams with a tool
    policy need of the connection manager (``None``: no such route).

    Reads only the upstreams the routes name (the build cache tracks those reads).
    """
    found: McpUse | None = None
    for vhost in virtual_hosts:
        for route in vhost.routes:
            if not isinstance(route.action, ir.Forward):
                continue
            mirrors = [upstreams.get(m.upstream) for m in route.action.mirrors if m.upstream is not None]
            for backend in route.action.backends:
                upstream = upstreams.get(backend.upstream) if backend.upstream is not None else None
                policies = _policies((upstream, *mirrors))
                if not policies:
                    continue
                providers = jwt_providers(policies)
                use = McpUse(frozenset((providers,)) if providers else frozenset())
                found = use if found is None else found.merge(use)
            if not route.action.backends and _policies(mirrors):
                found = found or McpUse()
    return found


def _policies(upstreams: Iterable[ir.Upstream | None]) -> tuple[ir.McpToolPolicy, ...]:
    return tuple(u.mcp_tools for u in upstreams if u is not None and u.mcp_tools is not None)


def jwt_providers(policies: Iterable[ir.McpToolPolicy]) -> tuple[ir.McpJwtProvider, ...]:
    """The distinct JWT providers of ``policies``, by name."""
    return tuple(
        sorted({p.jwt.name: p.jwt for p in policies if p.jwt is not None}.values(), key=lambda p: p.name)
    )


def per_filter_config(
    destination: ir.Upstream | None, mirrors: Iterable[ir.Upstream | None] = ()
) -> dict[str, Any]:
    """``typed_per_filter_config`` of a route (or weighted cluster) sending requests to ``destination``.

    ``mirrors`` receive copies of the same requests, so their policies count
    too (``None``, a backend that failed to resolve, counts for nothing).
    Empty when none of them has a tool policy; otherwise the MCP filter is
    enabled, and the tool RBAC filter when some policy restricts anything
    (an empty policy only counts calls).
    """
    upstreams = (destination, *mirrors)
    policies = tuple(u.mcp_tools for u in upstreams if u is not None and u.mcp_tools is not None)
    if not policies:
        return {}
    out = {MCP_FILTER: _packed_enabled()}
    providers = jwt_providers(policies)
    if providers:
        out[JWT_FILTER] = _packed_requirement(requirement_name(providers))
    if mcp_list.restricts(policies):
        out[TOOLS_FILTER] = _packed_route_rules(policies)
        out[mcp_list.LIST_FILTER] = mcp_list.per_route_config(policies, cluster_name(destination))
    return out


@functools.lru_cache(maxsize=1)
def _packed_enabled() -> Any:
    # Envoy refuses an empty FilterConfig ({disabled: false} is one): the route enables the
    # filter by configuring it, with the same limit as the connection manager's.
    override = mcp_pb2.McpOverride(max_request_body_size=wrappers_pb2.UInt32Value(value=MAX_INSPECTED_BODY))
    return pack(route_components_pb2.FilterConfig(config=pack(override)))


@functools.lru_cache(maxsize=256)
def _packed_requirement(name: str) -> Any:
    return pack(route_components_pb2.FilterConfig(config=pack(jwt_pb2.PerRouteConfig(requirement_name=name))))


@functools.lru_cache(maxsize=256)
def _packed_route_rules(policies: tuple[ir.McpToolPolicy, ...]) -> Any:
    return pack(rbac_filter_pb2.RBACPerRoute(rbac=rbac_filter_pb2.RBAC(rules=tool_rules(policies))))


def tool_rules(policies: Sequence[ir.McpToolPolicy]) -> Any:
    """The DENY rules of :data:`TOOLS_FILTER` for requests that every one of ``policies`` governs.

    A tool is refused when any policy refuses it: a ``denied`` pattern of any
    policy matches it, or it matches none of the ``allowed`` patterns of a
    policy that has some.
    """
    call = _metadata(MCP_METADATA, ("method",), value_pb2.ValueMatcher(string_match=_exact("tools/call")))
    rules = {
        POLICY_TOO_LARGE: _all(
            call, _metadata(MCP_METADATA, ("is_exceeding_limit",), value_pb2.ValueMatcher(bool_match=True))
        ),
        POLICY_UNNAMED: _all(call, _not(_tool(_ANY_STRING))),
        POLICY_UNREADABLE: _all(
            _not(_metadata(MCP_METADATA, ("method",), value_pb2.ValueMatcher(present_match=True))),
            _not(_any(*(_header(":method", m) for m in _BODYLESS_METHODS))),
        ),
    }
    denied = sorted({pattern for p in policies for pattern in p.denied})
    if denied:
        rules[POLICY_DENIED] = _all(call, _any(*(tool_pattern(p, widen=True) for p in denied)))
    allow_lists = [sorted(_granted_anywhere(p)) for p in policies if p.allowed or p.per_caller]
    if allow_lists:
        misses = [_not(_any(*(tool_pattern(p, widen=False) for p in a))) if a else _ALL for a in allow_lists]
        rules[POLICY_NOT_ALLOWED] = _all(call, _any(*misses))
    policies_by_name = {
        name: rbac_pb2.Policy(permissions=[permission], principals=[rbac_pb2.Principal(any=True)])
        for name, permission in rules.items()
    }
    per_caller = [p for p in policies if p.per_caller]
    if per_caller:
        # Who calls is a principal: the tools a caller is granted depend on it, so the whole
        # condition (caller and tool) is one principal, the permission being any tools/call.
        refused = [_principal_not(_granted(p)) for p in per_caller]
        principal = (
            refused[0]
            if len(refused) == 1
            else rbac_pb2.Principal(or_ids=rbac_pb2.Principal.Set(ids=refused))
        )
        policies_by_name[POLICY_NOT_GRANTED] = rbac_pb2.Policy(
            permissions=[_permission(call)], principals=[principal]
        )
    return rbac_pb2.RBAC(action=rbac_pb2.RBAC.DENY, policies=dict(sorted(policies_by_name.items())))


def _granted_anywhere(policy: ir.McpToolPolicy) -> set[str]:
    """Every pattern ``policy`` allows some caller."""
    return {*policy.allowed, *(pattern for g in policy.grants for pattern in g.allowed)}


def _granted(policy: ir.McpToolPolicy) -> Any:
    """A principal: the caller is granted the tool the request names, by a per-caller ``policy``."""
    options = []
    if policy.allowed:
        options.append(_as_principal(_any(*(tool_pattern(p, widen=False) for p in policy.allowed))))
    for grant in policy.grants:
        tools = _as_principal(_any(*(tool_pattern(p, widen=False) for p in grant.allowed)))
        options.append(
            rbac_pb2.Principal(and_ids=rbac_pb2.Principal.Set(ids=[caller_principal(grant.caller), tools]))
        )
    if not options:
        return rbac_pb2.Principal(not_id=rbac_pb2.Principal(any=True))
    if len(options) == 1:
        return options[0]
    return rbac_pb2.Principal(or_ids=rbac_pb2.Principal.Set(ids=options))


def caller_principal(caller: ir.McpCaller) -> Any:
    """An RBAC principal matching the verified identity ``caller`` describes.

    A client certificate: Envoy's ``authenticated`` compares each URI SAN,
    then each DNS SAN, then the subject (which a SAN of the API never
    equals), whether or not the certificate was verified: on an HTTPS server
    that lets unverified certificates in, the mark of
    :func:`_unverified_filter` makes certificate rules match no one. A
    token: the payload the JWT filter wrote under the provider's name
    (present only for a verified token), its ``sub`` and claims; a
    claim's value is a string equal to one of the values, or a list (the
    words of a space-delimited claim, as the filter splits them) holding one.
    """
    if caller.jwt is None:
        names = [
            rbac_pb2.Principal(authenticated=rbac_pb2.Principal.Authenticated(principal_name=_exact(san)))
            for san in caller.subject_alt_names
        ]
        if not names:  # no SAN to match (the API requires one): the rule matches no one
            return rbac_pb2.Principal(not_id=rbac_pb2.Principal(any=True))
        either = names[0] if len(names) == 1 else rbac_pb2.Principal(or_ids=rbac_pb2.Principal.Set(ids=names))
        unverified = _metadata_principal(
            CALLER_METADATA, (UNVERIFIED_KEY,), value_pb2.ValueMatcher(bool_match=True)
        )
        return rbac_pb2.Principal(and_ids=rbac_pb2.Principal.Set(ids=[either, _principal_not(unverified)]))
    provider = caller.jwt
    ids = [_metadata_principal(JWT_METADATA, (provider,), value_pb2.ValueMatcher(present_match=True))]
    if caller.subjects:
        ids.append(_one_of((provider, "sub"), caller.subjects, lists=False))
    for claim, values in caller.claims:
        ids.append(_one_of((provider, claim), values, lists=True))
    return ids[0] if len(ids) == 1 else rbac_pb2.Principal(and_ids=rbac_pb2.Principal.Set(ids=ids))


def _one_of(path: Sequence[str], values: Sequence[str], *, lists: bool) -> Any:
    matchers = []
    for value in values:
        string = value_pb2.ValueMatcher(string_match=_exact(value))
        matchers.append(string)
        if lists:
            matchers.append(value_pb2.ValueMatcher(list_match=value_pb2.ListMatcher(one_of=string)))
    matcher = (
        matchers[0]
        if len(matchers) == 1
        else value_pb2.ValueMatcher(or_match=value_pb2.OrMatcher(value_matchers=matchers))
    )
    return _metadata_principal(JWT_METADATA, path, matcher)


def _metadata_principal(namespace: str, path: Sequence[str], value: Any) -> Any:
    return rbac_pb2.Principal(
        sourced_metadata=rbac_pb2.SourcedMetadata(metadata_matcher=_metadata(namespace, path, value))
    )


def _principal_not(principal: Any) -> Any:
    return rbac_pb2.Principal(not_id=principal)


def _as_principal(permission: Any) -> Any:
    """The principal matching what the permission ``permission`` (of tool patterns) matches."""
    kind = permission.WhichOneof("rule")
    if kind == "and_rules":
        return rbac_pb2.Principal(
            and_ids=rbac_pb2.Principal.Set(ids=[_as_principal(r) for r in permission.and_rules.rules])
        )
    if kind == "or_rules":
        return rbac_pb2.Principal(
            or_ids=rbac_pb2.Principal.Set(ids=[_as_principal(r) for r in permission.or_rules.rules])
        )
    if kind == "not_rule":
        return rbac_pb2.Principal(not_id=_as_principal(permission.not_rule))
    if kind == "any":
        return rbac_pb2.Principal(any=permission.any)
    if kind == "sourced_metadata":
        return rbac_pb2.Principal(sourced_metadata=permission.sourced_metadata)
    raise ValueError(f"no principal for a permission of {kind}")


def tool_pattern(pattern: str, *, widen: bool) -> Any:
    """An RBAC permission matching the tool names of ``pattern``: exact, or ``*`` for any run of characters.

    Plain string matchers where they suffice (``a``, ``a*``, ``*a``, ``*a*``),
    else an RE2 expression. Envoy refuses an expression whose program is
    larger than :data:`MAX_REGEX_PROGRAM_SIZE`, which a long pattern with
    inner stars can reach (tool names have up to 128 characters). Such a
    pattern cannot be matched exactly; ``widen`` says which way to err, so
    that a policy refuses more, never less: a ``deniedTools`` pattern
    (``widen``) then matches every name with its fixed prefix, suffix and
    inner parts (overlapping ones included), an ``allowedTools`` pattern
    matches nothing.
    """
    parts = pattern.split("*")
    if len(parts) == 1:
        return _tool(_exact(pattern))
    head, *inner, tail = parts
    inner = [part for part in inner if part]
    if not inner and head and not tail:
        return _tool(string_pb2.StringMatcher(prefix=head))
    if not inner and tail and not head:
        return _tool(string_pb2.StringMatcher(suffix=tail))
    if len(inner) == 1 and not head and not tail:
        return _tool(string_pb2.StringMatcher(contains=inner[0]))
    if not head and not tail and not inner:  # only stars: any name
        return _tool(_ANY_STRING)
    if regex_fits(pattern):
        return _tool(string_pb2.StringMatcher(safe_regex=_regex(_expression(pattern))))
    if not widen:
        return _not(rbac_pb2.Permission(any=True))
    wider = [string_pb2.StringMatcher(contains=part) for part in inner]
    if head:
        wider.append(string_pb2.StringMatcher(prefix=head))
    if tail:
        wider.append(string_pb2.StringMatcher(suffix=tail))
    return _all(*(_tool(m) for m in wider))


def regex_fits(pattern: str) -> bool:
    """Whether Envoy takes the RE2 expression of ``pattern`` (see :func:`tool_pattern`).

    Only patterns with a ``*`` between fixed parts need one; past the limit
    they are widened (``deniedTools``) or match nothing (``allowedTools``),
    wherever weir matches tool names (:mod:`weir.xds.mcp_list` too).
    """
    return int(re2.compile(_expression(pattern)).programsize) <= MAX_REGEX_PROGRAM_SIZE


def _expression(pattern: str) -> str:
    return "(?s)" + ".*".join(_literal(part) for part in pattern.split("*"))


def _literal(text: str) -> str:
    """``text`` as an RE2 literal (tool names are ASCII; anything else is escaped by code point)."""
    return "".join(c if c.isascii() and (c.isalnum() or c == "_") else f"\\x{{{ord(c):x}}}" for c in text)


# --------------------------------------------------------------------------
# Small matchers
# --------------------------------------------------------------------------


def _tool(matcher: Any) -> Any:
    return _metadata(MCP_METADATA, ("params", "name"), value_pb2.ValueMatcher(string_match=matcher))


def _metadata(namespace: str, path: Sequence[str], value: Any) -> Any:
    return metadata_pb2.MetadataMatcher(
        filter=namespace,
        path=[metadata_pb2.MetadataMatcher.PathSegment(key=key) for key in path],
        value=value,
    )


def _header(name: str, value: str) -> Any:
    return rbac_pb2.Permission(
        header=route_components_pb2.HeaderMatcher(name=name, string_match=_exact(value))
    )


def _exact(value: str) -> Any:
    return string_pb2.StringMatcher(exact=value)


def _regex(expression: str) -> Any:
    return regex_pb2.RegexMatcher(regex=expression)


def _all(*rules: Any) -> Any:
    return rbac_pb2.Permission(and_rules=rbac_pb2.Permission.Set(rules=[_permission(r) for r in rules]))


def _any(*rules: Any) -> Any:
    if len(rules) == 1:
        return _permission(rules[0])
    return rbac_pb2.Permission(or_rules=rbac_pb2.Permission.Set(rules=[_permission(r) for r in rules]))


def _not(rule: Any) -> Any:
    return rbac_pb2.Permission(not_rule=_permission(rule))


def _permission(rule: Any) -> Any:
    if isinstance(rule, metadata_pb2.MetadataMatcher):  # the request's dynamic metadata
        return rbac_pb2.Permission(sourced_metadata=rbac_pb2.SourcedMetadata(metadata_matcher=rule))
    return rule


__all__ = [
    "ACCESS_LOG_NAME",
    "MAX_INSPECTED_BODY",
    "MCP_FILTER",
    "MCP_METADATA",
    "POLICY_DENIED",
    "POLICY_NOT_ALLOWED",
    "POLICY_PREFIX",
    "POLICY_TOO_LARGE",
    "POLICY_UNNAMED",
    "POLICY_UNREADABLE",
    "RBAC_METADATA",
    "TOOLS_FILTER",
    "UPSTREAM_TAG",
    "access_log",
    "http_filters",
    "local_reply_mappers",
    "per_filter_config",
    "regex_fits",
    "tool_pattern",
    "tool_rules",
    "uses_tool_policies",
]
