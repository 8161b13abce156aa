"""`weir run --kubernetes`: which flags go together, and how they are read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from weir.cli import _kube_options, app

runner = CliRunner()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ([], "give either --file"),
        (["--kubernetes", "-f", "."], "give either --file"),
        (["-f", ".", "--kubeconfig", "k"], "--kubeconfig: only with --kubernetes"),
        (["-f", ".", "--namespace", "a", "--publish-service", "a/b"], "--namespace, --publish-service: only"),
        (["--kubernetes", "--publish-service", "weir"], "--publish-service must be NAMESPACE/NAME"),
        (["--kubernetes", "--namespace", "Not_A_Namespace"], "is not a namespace name"),
        (["--kubernetes", "--gateway-address", "not an address"], "neither an IP address nor a hostname"),
        (["--kubernetes", "--lease-duration", "0.5"], "--lease-duration"),
    ],
)
def test_flags_that_do_not_go_together_are_refused_before_anything_starts(args: list[str], says: str) -> None:
    result = runner.invoke(app, ["run", *args], env={"COLUMNS": "300"})
    assert result.exit_code == 2, result.output
    assert says in " ".join(result.output.split())


def kube(**given: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "kubeconfig": None,
        "namespace": [],
        "lease_namespace": None,
        "lease_name": "weir-leader",
        "lease_duration": 15.0,
        "publish_service": None,
        "gateway_address": [],
        "controller_name": "weir.dev/gateway-controller",
        "reprobe_interval": 30.0,
    }
    args.update(given)
    return args


def test_options_and_their_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("POD_NAME", "weir-7d9f")
    monkeypatch.setenv("POD_NAMESPACE", "gateway-system")
    options, publish, addresses = _kube_options(
        **kube(
            kubeconfig=tmp_path / "config",
            namespace=["apps", "apps", "web"],
            publish_service="gateway-system/weir",
            gateway_address=["192.0.2.1", "gw.example.com"],
        )
    )
    assert options.kubeconfig == str(tmp_path / "config")
    assert options.namespaces == ("apps", "web")
    assert publish == options.publish_service == ("gateway-system", "weir")
    assert addresses == ("192.0.2.1", "gw.example.com")
    lease = options.lease
    assert lease is not None
    # The namespace is decided when the provider starts ($POD_NAMESPACE, else the configuration's
    # namespace: tests/kube/test_envtest_lease.py); "" says so.
    assert (lease.namespace, lease.name) == ("", "weir-leader")
    assert lease.identity.startswith("weir-7d9f-") and len(lease.identity) == len("weir-7d9f-") + 6
    assert (lease.lease_duration_s, lease.renew_deadline_s, lease.retry_period_s) == (15.0, 10.0, 2.0)

    monkeypatch.delenv("POD_NAMESPACE")
    options, _, _ = _kube_options(**kube(lease_namespace=None))
    assert options.lease is not None and options.lease.namespace == ""
    options, _, _ = _kube_options(**kube(lease_namespace="ops"))
    assert options.lease is not None and options.lease.namespace == "ops"
