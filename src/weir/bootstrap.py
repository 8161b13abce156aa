"""Envoy's bootstrap: the static part of its configuration.

Everything else arrives over ADS from weir's unix socket. The bootstrap only
says who Envoy is, where its admin interface binds (loopback only) and how to
reach the ADS server.
"""

from __future__ import annotations

import ipaddress
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: Name of the static cluster through which Envoy reaches the ADS server.
XDS_CLUSTER = "weir-xds"

#: Extensions Envoy must load at start for what weir serves over ADS: internal
#: listeners (in-process, no socket), through which TCP listeners reach guarded
#: upstreams (``weir.xds.build.TCP_EGRESS``). Without it Envoy rejects them.
BOOTSTRAP_EXTENSIONS: tuple[dict[str, Any], ...] = (
    {
        "name": "envoy.bootstrap.internal_listener",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.bootstrap.internal_listener.v3.InternalListener"
        },
    },
)


def bootstrap(
    *,
    node_id: str,
    ads_socket: str,
    admin_address: str = "127.0.0.1",
    admin_port: int = 0,
    cluster: str = "weir",
    max_downstream_connections: int = 50_000,
    ads_retry_base_s: float = 0.1,
    ads_retry_max_s: float = 2.0,
    runtime: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Envoy's bootstrap: everything comes over ADS from ``ads_socket``.

    The admin interface binds ``admin_address``, which must be a loopback
    address; port 0 picks a free port (see :attr:`EnvoyProcess.admin_url`).
    ``runtime`` becomes a static runtime layer.
    """
    if not ipaddress.ip_address(admin_address).is_loopback:
        raise ValueError(f"admin must bind a loopback address, not {admin_address!r}")
    if not 0 <= admin_port <= 65535:
        raise ValueError(f"invalid admin port {admin_port}")
    ads_source = {"ads": {}, "resource_api_version": "V3"}
    config: dict[str, Any] = {
        "node": {"id": node_id, "cluster": cluster},
        "admin": {"address": {"socket_address": {"address": admin_address, "port_value": admin_port}}},
        "dynamic_resources": {
            "ads_config": {
                "api_type": "GRPC",
                "transport_api_version": "V3",
                "set_node_on_first_message_only": True,
                "grpc_services": [
                    {
                        "envoy_grpc": {
                            "cluster_name": XDS_CLUSTER,
                            # How fast Envoy reconnects when the server was away.
                            "retry_policy": {
                                "retry_back_off": {
                                    "base_interval": f"{ads_retry_base_s}s",
                                    "max_interval": f"{ads_retry_max_s}s",
                                }
                            },
                        }
                    }
                ],
            },
            "cds_config": dict(ads_source),
            "lds_config": dict(ads_source),
        },
        "static_resources": {
            "clusters": [
                {
                    "name": XDS_CLUSTER,
                    "type": "STATIC",
                    "connect_timeout": "1s",
                    "load_assignment": {
                        "cluster_name": XDS_CLUSTER,
                        "endpoints": [
                            {"lb_endpoints": [{"endpoint": {"address": {"pipe": {"path": ads_socket}}}}]}
                        ],
                    },
                    "typed_extension_protocol_options": {
                        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                            "@type": "type.googleapis.com/"
                            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                            "explicit_http_config": {
                                "http2_protocol_options": {
                                    # Notice a hung control plane.
                                    "connection_keepalive": {"interval": "30s", "timeout": "5s"}
                                }
                            },
                        }
                    },
                }
            ]
        },
        "bootstrap_extensions": [dict(ext) for ext in BOOTSTRAP_EXTENSIONS],
        "overload_manager": {
            "resource_monitors": [
                {
                    "name": "envoy.resource_monitors.global_downstream_max_connections",
                    "typed_config": {
                        "@type": "type.googleapis.com/envoy.extensions.resource_monitors."
                        "downstream_connections.v3.DownstreamConnectionsConfig",
                        "max_active_downstream_connections": max_downstream_connections,
                    },
                }
            ]
        },
    }
    if runtime:
        config["layered_runtime"] = {"layers": [{"name": "weir", "static_layer": dict(runtime)}]}
    return config


def write_bootstrap(config: Mapping[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write ``config`` as JSON (which Envoy reads as YAML) and return its path."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(target.suffix + ".tmp")
    tmp.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    tmp.replace(target)
    return target
