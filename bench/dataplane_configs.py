"""Configuration files for the data-path benchmark's processes (see ``dataplane.py``).

Every contender gets the same job: accept plain HTTP/1.1 on a loopback port,
send the request to ``https://api.bench.test:PORT`` (127.0.0.2) with SNI and
Host ``api.bench.test``, verify the upstream's certificate chain against the
benchmark's CA and its DNS SAN ``api.bench.test``, and reuse upstream
connections. Only weir's configuration is not written here: weir generates
it from Gateway API manifests (:func:`weir_manifests`).
"""

from __future__ import annotations

import ipaddress
import json
import os
from pathlib import Path
from typing import Any

from weir import DEFAULT_CONTROLLER_NAME
from weir.translate.settings import DEFAULT_DENIED_CIDRS

#: The upstream's name, resolved by the benchmark's DNS stub to :data:`UPSTREAM_IP`.
API_HOST = "api.bench.test"
UPSTREAM_IP = "127.0.0.2"
PROXY_IP = "127.0.0.1"
#: What the upstream answers (plus ``x-upstream-proto: HTTP/1.1|HTTP/2.0``).
BODY = '{"id":"bench","object":"chat.completion","choices":[{"index":0,"message":"ok"}]}'

#: weir's egress guard with its default networks, loopback excepted: the upstream is on 127.0.0.2.
#: The guard stays on the request path, as it would in production.
DENIED_CIDRS = tuple(
    c for c in DEFAULT_DENIED_CIDRS if ipaddress.ip_network(c) != ipaddress.ip_network("127.0.0.0/8")
)


def _user_line() -> str:
    # As root, nginx's workers would run as nobody and could not read the private temp folder.
    return "user root;\n" if os.geteuid() == 0 else ""


def nginx_upstream(prefix: Path, port: int, cert: Path, key: Path, *, http2: bool) -> str:
    """The TLS "external API": one worker, a canned answer, long keep-alive."""
    listen = f"listen {UPSTREAM_IP}:{port} ssl{' http2' if http2 else ''};"
    return f"""{_user_line()}daemon off;
master_process on;
worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 8192; multi_accept on; }}
http {{
  access_log off;
  client_body_temp_path {prefix}/tmp;
  keepalive_requests 10000000;
  keepalive_timeout 300s;
  ssl_protocols TLSv1.2 TLSv1.3;
  server {{
    {listen}
    server_name {API_HOST};
    ssl_certificate {cert};
    ssl_certificate_key {key};
    location / {{
      default_type application/json;
      add_header x-upstream-proto $server_protocol;
      return 200 '{BODY}';
    }}
  }}
}}
"""


def nginx_proxy(prefix: Path, port: int, upstream_port: int, ca: Path, *, streaming: bool = False) -> str:
    """nginx as the egress proxy: HTTP/1.1 upstream keep-alive pool, verified TLS, no access log.

    nginx cannot speak HTTP/2 to an upstream, so it uses HTTP/1.1 in every scenario.
    """
    buffering = "proxy_buffering off;\n      proxy_read_timeout 3600s;\n" if streaming else ""
    return f"""{_user_line()}daemon off;
master_process on;
worker_processes 1;
worker_rlimit_nofile 65536;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 16384; multi_accept on; }}
http {{
  access_log off;
  client_body_temp_path {prefix}/tmp;
  proxy_temp_path {prefix}/tmp;
  keepalive_requests 10000000;
  keepalive_timeout 300s;
  upstream api {{
    server {UPSTREAM_IP}:{upstream_port};
    keepalive 256;
    keepalive_requests 10000000;
    keepalive_timeout 300s;
  }}
  server {{
    listen {PROXY_IP}:{port} backlog=4096;
    location / {{
      proxy_pass https://api;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host {API_HOST};
      proxy_ssl_server_name on;
      proxy_ssl_name {API_HOST};
      proxy_ssl_verify on;
      proxy_ssl_verify_depth 2;
      proxy_ssl_trusted_certificate {ca};
      proxy_ssl_session_reuse on;
      proxy_ssl_protocols TLSv1.2 TLSv1.3;
      {buffering}
    }}
  }}
}}
"""


def haproxy(port: int, upstream_port: int, ca: Path, *, http2: bool, streaming: bool = False) -> str:
    """HAProxy as the egress proxy: one thread, verified TLS (SNI + name), connection reuse.

    With ``http2`` it offers only ALPN ``h2`` to the upstream (HAProxy speaks HTTP/2 to servers).
    """
    alpn = " alpn h2" if http2 else " alpn http/1.1"
    timeout = "3600s" if streaming else "60s"
    # Without it HAProxy holds small writes of a response back (about 200 ms an event).
    no_delay = "  option http-no-delay\n" if streaming else ""
    return f"""global
  nbthread 1
  maxconn 8000
  ssl-server-verify required
defaults
  mode http
  timeout connect 5s
  timeout client {timeout}
  timeout server {timeout}
  timeout http-keep-alive 300s
  http-reuse always
{no_delay}frontend egress
  bind {PROXY_IP}:{port}
  default_backend api
backend api
  http-request set-header Host {API_HOST}
  server api {UPSTREAM_IP}:{upstream_port} ssl verify required ca-file {ca} sni str({API_HOST}) \
verifyhost {API_HOST}{alpn}
"""


_TYPES = "type.googleapis.com/envoy.extensions."


def _strip_filter() -> dict[str, Any]:
    """Internal headers removed by prefix as the last thing before the request leaves (as weir does)."""
    mutations: list[dict[str, Any]] = [
        {"remove_on_match": {"key_matcher": {"prefix": prefix, "ignore_case": True}}}
        for prefix in ("x-envoy-", "x-forwarded-")
    ]
    mutations += [{"remove": name} for name in ("forwarded", "x-request-id")]
    trailers = [{"remove_on_match": {"key_matcher": {"prefix": "x-envoy-", "ignore_case": True}}}]
    return {
        "name": "strip",
        "typed_config": {
            "@type": _TYPES + "filters.http.header_mutation.v3.HeaderMutation",
            "mutations": {
                "request_mutations": mutations,
                "request_trailers_mutations": mutations,
                "response_trailers_mutations": trailers,
            },
        },
    }


def lean_envoy(
    port: int, upstream_port: int, ca: Path, *, http2: bool, streaming: bool = False, same: bool = False
) -> str:
    """The leanest hand-written Envoy bootstrap for the same route and TLS verification.

    One listener, one route (``/`` → the API with its Host), the router with
    ``suppress_envoy_headers``, no request id, no access log, ``x-forwarded-proto``
    removed; one static cluster with SNI, the CA and the SAN checked, and
    HTTP/1.1 or HTTP/2 stated explicitly.

    ``same``: the leanest hand-written config that also behaves as weir's
    does: client address from the connection, path normalisation, weir's
    JSON access log and the removal of internal headers by prefix on the
    cluster; per-response-code statistics off. (weir's egress guard costs
    requests nothing: weir hands Envoy only allowed addresses, over EDS.)
    """
    route: dict[str, Any] = {"cluster": "api", "host_rewrite_literal": API_HOST}
    if streaming:
        route["timeout"] = "0s"
    hcm: dict[str, Any] = {
        "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3."
        "HttpConnectionManager",
        "stat_prefix": "lean",
        "codec_type": "AUTO",
        "generate_request_id": False,
        "route_config": {
            "virtual_hosts": [
                {
                    "name": "api",
                    "domains": ["*"],
                    "routes": [{"match": {"prefix": "/"}, "route": route}],
                    "request_headers_to_remove": ["x-forwarded-proto"],
                }
            ]
        },
        "http_filters": [
            {
                "name": "envoy.filters.http.router",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router",
                    "suppress_envoy_headers": True,
                },
            }
        ],
    }
    options: dict[str, Any] = {
        "@type": _TYPES + "upstreams.http.v3.HttpProtocolOptions",
        "explicit_http_config": {"http2_protocol_options": {}} if http2 else {"http_protocol_options": {}},
    }
    if same:
        from weir.xds.build import ACCESS_LOG_FORMAT

        hcm.update(
            {
                "use_remote_address": True,
                "normalize_path": True,
                "merge_slashes": True,
                "path_with_escaped_slashes_action": "UNESCAPE_AND_REDIRECT",
                "strip_any_host_port": True,
                "access_log": [
                    {
                        "name": "envoy.access_loggers.stdout",
                        "typed_config": {
                            "@type": _TYPES + "access_loggers.stream.v3.StdoutAccessLog",
                            "log_format": {"json_format": dict(ACCESS_LOG_FORMAT)},
                        },
                    }
                ],
            }
        )
        del hcm["route_config"]["virtual_hosts"][0]["request_headers_to_remove"]  # the strip filter does it
        hcm["http_filters"][0]["typed_config"]["dynamic_stats"] = False
        options["http_filters"] = [
            _strip_filter(),
            {
                "name": "envoy.filters.http.upstream_codec",
                "typed_config": {"@type": _TYPES + "filters.http.upstream_codec.v3.UpstreamCodec"},
            },
        ]
    tls = {
        "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
        "sni": API_HOST,
        "common_tls_context": {
            "tls_params": {"tls_maximum_protocol_version": "TLSv1_3"},
            "validation_context": {
                "trusted_ca": {"filename": str(ca)},
                "match_typed_subject_alt_names": [{"san_type": "DNS", "matcher": {"exact": API_HOST}}],
            },
        },
    }
    cluster = {
        "name": "api",
        "type": "STATIC",
        "connect_timeout": "5s",
        "load_assignment": {
            "cluster_name": "api",
            "endpoints": [
                {
                    "lb_endpoints": [
                        {
                            "endpoint": {
                                "address": {
                                    "socket_address": {"address": UPSTREAM_IP, "port_value": upstream_port}
                                }
                            }
                        }
                    ]
                }
            ],
        },
        "typed_extension_protocol_options": {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": options
        },
        "transport_socket": {"name": "envoy.transport_sockets.tls", "typed_config": tls},
    }
    listener = {
        "name": "lean",
        "address": {"socket_address": {"address": PROXY_IP, "port_value": port}},
        "filter_chains": [
            {"filters": [{"name": "envoy.filters.network.http_connection_manager", "typed_config": hcm}]}
        ],
    }
    return json.dumps({"static_resources": {"listeners": [listener], "clusters": [cluster]}}, indent=1)


def weir_manifests(port: int, upstream_port: int, ca_pem: str, *, protocol: str | None) -> str:
    """What a weir user writes for this job: Gateway, HTTPRoute, XBackend and its CA.

    ``protocol`` is the XBackend's ``spec.protocol`` (``None``: unset, ALPN decides).
    """
    gateway_api = "gateway.networking.k8s.io/v1"
    xbackend: dict[str, Any] = {
        "type": "ExternalHostname",
        "externalHostname": {"hostname": API_HOST},
        "port": {"port": upstream_port},
        "tls": {
            "mode": "ServerOnly",
            "validation": {
                "hostname": API_HOST,
                "caCertificateRefs": [{"group": "", "kind": "ConfigMap", "name": "bench-ca"}],
            },
        },
    }
    if protocol is not None:
        xbackend["protocol"] = protocol
    documents: list[dict[str, Any]] = [
        {
            "apiVersion": gateway_api,
            "kind": "GatewayClass",
            "metadata": {"name": "weir"},
            "spec": {"controllerName": DEFAULT_CONTROLLER_NAME},
        },
        {
            "apiVersion": gateway_api,
            "kind": "Gateway",
            "metadata": {"name": "egress", "namespace": "default"},
            "spec": {
                "gatewayClassName": "weir",
                "listeners": [{"name": "http", "port": port, "protocol": "HTTP"}],
            },
        },
        {
            "apiVersion": gateway_api,
            "kind": "HTTPRoute",
            "metadata": {"name": "api", "namespace": "default"},
            "spec": {
                "parentRefs": [{"name": "egress"}],
                "rules": [
                    {
                        "backendRefs": [
                            {"group": "gateway.networking.x-k8s.io", "kind": "XBackend", "name": "api"}
                        ]
                    }
                ],
            },
        },
        {
            "apiVersion": "gateway.networking.x-k8s.io/v1alpha1",
            "kind": "XBackend",
            "metadata": {"name": "api", "namespace": "default"},
            "spec": xbackend,
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "bench-ca", "namespace": "default"},
            "data": {"ca.crt": ca_pem},
        },
    ]
    return "---\n".join(json.dumps(doc, indent=1) + "\n" for doc in documents)
