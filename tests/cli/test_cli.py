"""The ``weir`` command's offline subcommands: validate, translate, version."""

from __future__ import annotations

from pathlib import Path

import yaml
from typer.testing import CliRunner

from unit_manifests import GATEWAY
from weir.cli import app

runner = CliRunner()

GOOD = (
    GATEWAY
    + """---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: api, namespace: default}
spec:
  parentRefs: [{name: gw}]
  rules:
  - backendRefs: [{group: gateway.networking.x-k8s.io, kind: XBackend, name: api}]
---
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackend
metadata: {name: api, namespace: default}
spec:
  type: ExternalHostname
  externalHostname: {hostname: api.example.test}
  port: {port: 443}
  tls: {mode: ServerOnly}
"""
)


def test_validate_accepts_valid_manifests(tmp_path: Path) -> None:
    (tmp_path / "ok.yaml").write_text(GOOD)
    result = runner.invoke(app, ["validate", "-f", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "4 object(s) valid" in result.output


def test_validate_rejects_with_file_line_object_and_field(tmp_path: Path) -> None:
    bad = GOOD.replace("port: {port: 443}", "port: {port: 70000}")
    path = tmp_path / "bad.yaml"
    path.write_text(bad)
    result = runner.invoke(app, ["validate", "-f", str(path)])
    assert result.exit_code == 1
    line = bad.splitlines().index("  port: {port: 70000}") + 1  # the offending field's line
    assert f"{path}:{line}: XBackend default/api: spec.port.port:" in result.output
    assert "less than or equal to 65535" in result.output


def test_translate_prints_status_ir_and_envoy_resources(tmp_path: Path) -> None:
    (tmp_path / "ok.yaml").write_text(GOOD)
    result = runner.invoke(app, ["translate", "-f", str(tmp_path)])
    assert result.exit_code == 0, result.output
    data = yaml.safe_load(result.stdout)
    kinds = {r["kind"] for r in data["resources"]}
    assert kinds == {"GatewayClass", "Gateway", "HTTPRoute", "XBackend"}
    xbackend = next(r for r in data["resources"] if r["kind"] == "XBackend")
    assert xbackend["status"]["parents"][0]["conditions"][0]["status"] == "True"
    assert [u["name"] for u in data["ir"]["upstreams"]] == ["xbackend/default/api"]
    clusters = data["envoy"]["type.googleapis.com/envoy.config.cluster.v3.Cluster"]
    # An external hostname is an EDS cluster (weir resolves it), with the endpoint standing for
    # names whose addresses are all denied; `weir translate` resolves nothing: no assignments.
    assert list(clusters) == ["xbackend/default/api"]
    assert clusters["xbackend/default/api"]["type"] == "EDS"
    listeners = data["envoy"]["type.googleapis.com/envoy.config.listener.v3.Listener"]
    assert list(listeners) == ["127.0.0.1:8080", "weir-egress-denied"]
    assert data["envoy"]["type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"] == {}


def test_version_names_weir_and_envoy() -> None:
    result = runner.invoke(app, ["version"])
    assert result.exit_code == 0
    assert "weir 0.1.0" in result.output
    assert "envoy" in result.output and "1.40" in result.output


def test_validate_and_translate_report_values_yaml_cannot_build_without_a_traceback(tmp_path: Path) -> None:
    """``!!bool maybe`` and kin: one problem naming file, line, object and field; no traceback."""
    for value, words in (
        ("!!bool maybe", '"maybe" is not a valid !!bool'),
        ("!!int abc", '"abc" is not a valid !!int'),
        ("!!float x", '"x" is not a valid !!float'),
        ('!!int ""', '"" is not a valid !!int'),
        ("9" * 4301, '"' + "9" * 40 + '..." is not a valid !!int (Exceeds the limit (4300 digits)'),
    ):
        bad = GOOD.replace("port: {port: 443}", f"port: {{port: {value}}}")
        path = tmp_path / "bad.yaml"
        path.write_text(bad)
        line = bad.splitlines().index("  port: {port: " + value + "}") + 1
        for command in ("validate", "translate"):
            result = runner.invoke(app, [command, "-f", str(path)])
            assert result.exit_code == 1, (command, value, result.output)
            assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
            expected = f"{path}:{line}: XBackend default/api: spec.port.port: invalid YAML: {words}"
            assert expected in result.stderr.replace("\n", ""), (command, result.stderr)
