"""The done bar: ``weir run --kubernetes --kubeconfig FILE``, no other flag that matters, on a
cluster with only the CRDs: it serves a real request through Envoy and writes every status.

(``--admin-address`` only moves the admin endpoint off the fixed port 9900, which tests may not
use. The kubeconfig is the cluster admin's with no namespace in its context, as a new user's is.)
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
from envtest import ADMIN_TOKEN, Cluster
from kube_harness import GW, conditions, eventually, gateway, gateway_class, our_parent
from kube_world import Objects

from weir.features import SUPPORTED_FEATURES
from weir.testkit import free_port

#: A line of weir's log off a terminal: one record, unwrapped.
PLAIN_LINE = re.compile(
    r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (DEBUG|INFO|WARNING|ERROR|CRITICAL) [\w.]+: "
)


def redirect_route(namespace: str) -> dict[str, object]:
    """A route Envoy answers itself (no upstream: a real API server refuses loopback endpoints)."""
    return {
        "apiVersion": GW,
        "kind": "HTTPRoute",
        "metadata": {"name": "moved", "namespace": namespace},
        "spec": {
            "parentRefs": [{"name": "gw"}],
            "rules": [
                {
                    "matches": [{"path": {"type": "PathPrefix", "value": "/old"}}],
                    "filters": [
                        {
                            "type": "RequestRedirect",
                            "requestRedirect": {"hostname": "new.example.com", "statusCode": 301},
                        }
                    ],
                }
            ],
        },
    }


async def test_weir_run_kubernetes_with_a_kubeconfig_and_nothing_else(
    cluster: Cluster, objects: Objects, tmp_path: Path
) -> None:
    ns = objects.namespace
    port = free_port()
    objects.apply(gateway_class(ns), gateway(ns, ns, port), redirect_route(ns))
    kubeconfig = cluster.kubeconfig(f"new-user-{ns}", ADMIN_TOKEN)
    admin = free_port()
    log = tmp_path / "weir.log"
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("POD_NAMESPACE", "POD_NAME", "KUBERNETES_SERVICE_HOST")
    }
    with log.open("wb") as stderr:
        proc = subprocess.Popen(
            [
                sys.executable, "-c", "from weir.cli import main; main()",
                "run", "--kubernetes", "--kubeconfig", str(kubeconfig),
                "--admin-address", f"127.0.0.1:{admin}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=env,
        )  # fmt: skip
    envoy_pid = None
    try:

        def programmed() -> bool:
            gw = cluster.admin.status(GW, "Gateway", ns, "gw")
            route = our_parent(cluster.admin.status(GW, "HTTPRoute", ns, "moved")) or {}
            return (
                conditions(gw).get("Programmed", ("",))[0] == "True"
                and conditions(route).get("Accepted", ("",))[0] == "True"
            )

        await eventually(programmed, timeout=40, every=0.3)
        async with httpx.AsyncClient(timeout=5) as client:
            response = await client.get(f"http://127.0.0.1:{port}/old/page")
            status = (await client.get(f"http://127.0.0.1:{admin}/status")).json()
        assert response.status_code == 301
        assert response.headers["location"] == f"http://new.example.com:{port}/old/page"
        envoy_pid = status["dataPlane"]["envoyPid"]
        gateway_class_status = cluster.admin.status(GW, "GatewayClass", None, ns)
        assert conditions(gateway_class_status)["Accepted"] == ("True", "Accepted")
        assert gateway_class_status["supportedFeatures"] == [{"name": n} for n in SUPPORTED_FEATURES]
        gw = cluster.admin.status(GW, "Gateway", ns, "gw")
        assert conditions(gw)["Accepted"] == ("True", "Accepted")
        assert conditions(gw["listeners"][0]) == {
            "Accepted": ("True", "Accepted"),
            "Programmed": ("True", "Programmed"),
            "ResolvedRefs": ("True", "ResolvedRefs"),
        }
        # The Lease is in the context's namespace, "default" (weir-system does not exist there).
        lease = status["provider"]["lease"]
        assert (lease["namespace"], lease["holder"], lease["problem"]) == ("default", lease["identity"], None)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        cluster.admin.delete("coordination.k8s.io/v1", "Lease", "default", "weir-leader")
    if envoy_pid is not None:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and Path(f"/proc/{envoy_pid}").exists():
            time.sleep(0.1)
        assert not Path(f"/proc/{envoy_pid}").exists(), "Envoy outlived weir"
    lines = [line for line in log.read_text().splitlines() if line and not line.startswith("[")]
    assert lines, "weir logged nothing"
    assert all(PLAIN_LINE.match(line) for line in lines), lines  # one record a line, never wrapped
    assert not [line for line in lines if "HTTP Request:" in line]  # the client's lines are DEBUG
    assert not [line for line in lines if " WARNING " in line or " ERROR " in line], lines
