"""Envoy's bootstrap: the static part of its configuration.

Everything else arrives over ADS from weir's unix socket. The bootstrap only
says who Envoy is, where its admin interface listens (a unix socket only:
:func:`with_admin_socket`, :mod:`weir.envoy_admin`), how to
reach the ADS server (incremental "delta" ADS, :mod:`weir.xds.server`), and
which statistics Envoy keeps (:data:`STATS_KEPT`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from weir.runfolder import unix_socket_path

#: Name of the static cluster through which Envoy reaches the ADS server.
XDS_CLUSTER = "weir-xds"

_CODE_CLASSES = ("1xx", "2xx", "3xx", "4xx", "5xx")

#: The Envoy statistics weir keeps (the bootstrap's
#: ``stats_config.stats_matcher.inclusion_list``): stat names that end with
#: one of the ``suffix`` values or begin with one of the ``prefix`` values.
#: Envoy creates no other stat.
#:
#: Why: by default Envoy keeps about 100 counters, gauges and histograms per
#: cluster; at 10,000 clusters they cost hundreds of MiB and seconds of load
#: time (docs/performance.md, "Control plane"). Why suffixes and prefixes
#: rather than regular expressions: Envoy matches every stat name it is about
#: to create against the list, and a name that is rejected goes through every
#: pattern; regular expressions over a million names cost as much time as
#: the stats saved. Prefixes ending in ``.`` are matched without even
#: rendering the name.
#:
#: Kept: every stat ``/metrics`` reads (:data:`weir.telemetry.ENVOY_STATS_USED`,
#: checked by ``tests/bootstrap/test_bootstrap.py`` against real Envoy stat names),
#: and, for people and tests reading Envoy's admin ``/stats``: per cluster the
#: request and connection totals, failures, timeouts and retries, the egress
#: guard's refusals, RBAC counters and TLS handshakes and verification failures, SigV4
#: signatures; per HTTP connection manager the responses by class and OAuth2 token fetches;
#: Envoy's own server, cluster-manager, listener-manager and control-plane stats (a few dozen).
STATS_KEPT: tuple[tuple[str, str], ...] = (
    *(("suffix", f".upstream_rq_{c}") for c in _CODE_CLASSES),
    *(
        ("suffix", f".upstream_{s}")
        for s in (
            "rq_total",
            "rq_timeout",
            "rq_retry",
            "rq_pending_overflow",
            "cx_total",
            "cx_active",
            "cx_connect_fail",
            "cx_connect_timeout",
            "cx_none_healthy",
            "cx_overflow",
        )
    ),
    ("suffix", ".rbac.allowed"),
    ("suffix", ".rbac.denied"),
    # Refusals of the egress guard (weir.xds.endpoints.EGRESS_DENIED).
    ("prefix", "listener.envoy_internal_weir-egress-denied."),
    ("suffix", ".ssl.handshake"),
    ("suffix", ".ssl.connection_error"),
    ("suffix", ".ssl.fail_verify_error"),
    ("suffix", ".ssl.fail_verify_san"),
    ("suffix", ".ssl.fail_verify_no_cert"),
    ("suffix", ".ssl.fail_verify_cert_hash"),
    # OAuth2 tokens (weir.xds.oauth2) and SigV4 signing (a cluster filter) of BackendCredentialPolicies.
    *(
        ("suffix", f".credential_injector.{s}")
        for s in (
            "failed",
            "oauth2.token_requested",
            "oauth2.token_fetched",
            *(
                f"oauth2.token_fetch_failed_on_{r}"
                for r in (
                    "bad_response_code",
                    "bad_token",
                    "client_secret",
                    "cluster_not_found",
                    "stream_reset",
                )
            ),
        )
    ),
    ("suffix", ".aws_request_signing.signing_added"),
    ("suffix", ".aws_request_signing.signing_failed"),
    # What a graceful stop waits for (weir.envoy.EnvoyProcess.drain).
    ("suffix", ".downstream_rq_active"),
    ("suffix", ".downstream_cx_active"),
    *(("suffix", f".downstream_rq_{c}") for c in _CODE_CLASSES),
    ("prefix", "server."),
    ("prefix", "cluster_manager."),
    ("prefix", "listener_manager."),
    ("prefix", "control_plane."),
)


def keeps(name: str, kept: Sequence[tuple[str, str]] = STATS_KEPT) -> bool:
    """Whether Envoy keeps stat ``name`` with ``kept`` as its inclusion list (Envoy's own rule)."""
    return any(name.endswith(v) if kind == "suffix" else name.startswith(v) for kind, v in kept)


#: Extensions Envoy must load at start for what weir serves over ADS: internal
#: listeners (in-process, no socket), such as the one standing for an external
#: hostname's denied addresses (``weir.xds.endpoints.EGRESS_DENIED``). Without
#: it Envoy rejects them.
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
    cluster: str = "weir",
    max_downstream_connections: int = 50_000,
    ads_retry_base_s: float = 0.1,
    ads_retry_max_s: float = 2.0,
    runtime: Mapping[str, Any] | None = None,
    stats: Sequence[tuple[str, str]] = STATS_KEPT,
) -> dict[str, Any]:
    """Envoy's bootstrap: everything comes over ADS from ``ads_socket``.

    It has no admin interface: :class:`weir.envoy.EnvoyProcess` adds one on
    a unix socket in its run folder (:func:`with_admin_socket`).
    ``runtime`` becomes a static runtime layer. ``stats`` says which
    statistics Envoy keeps (see :data:`STATS_KEPT`).
    """
    ads_source = {"ads": {}, "resource_api_version": "V3"}
    config: dict[str, Any] = {
        "node": {"id": node_id, "cluster": cluster},
        "dynamic_resources": {
            "ads_config": {
                # Incremental: an edit sends what changed, not every resource of its type.
                "api_type": "DELTA_GRPC",
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
        # A cluster's traffic stats (most of its ~100) are created at its first request, not
        # when it is added: thousands of clusters load faster and most never see a request.
        "deferred_stat_options": {"enable_deferred_creation_stats": True},
        "stats_config": {
            "stats_matcher": {"inclusion_list": {"patterns": [{kind: value} for kind, value in stats]}}
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


#: Envoy's admin socket may be opened by its owner only (``chmod 0600``).
ADMIN_SOCKET_MODE = 0o600


def with_admin_socket(config: Mapping[str, Any], path: str) -> dict[str, Any]:
    """``config`` with Envoy's admin interface on the unix socket ``path`` (mode 0600), and only there.

    Never TCP: any local process could then stop every listener
    (``POST /drain_listeners``) or read the configuration.
    """
    pipe = {"path": unix_socket_path(path), "mode": ADMIN_SOCKET_MODE}
    return {**config, "admin": {"address": {"pipe": pipe}}}


def bootstrap_text(config: Mapping[str, Any]) -> str:
    """The bootstrap file's content for ``config`` (JSON, which Envoy reads as YAML)."""
    return json.dumps(config, indent=2, sort_keys=True) + "\n"


def write_bootstrap(config: Mapping[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write ``config`` as JSON (which Envoy reads as YAML) and return its path."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(target.suffix + ".tmp")
    tmp.write_text(bootstrap_text(config))
    tmp.replace(target)
    return target
