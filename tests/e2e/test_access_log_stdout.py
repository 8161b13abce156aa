"""`weir run` lets Envoy write its JSON access log to stdout itself; `--access-log log` uses weir's log.

Envoy writes the lines straight to the inherited file descriptor, so no
request costs weir's Python process anything (see docs/performance.md).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from weir_harness import GATEWAY_HEAD, eventually

from weir.testkit import RecordingUpstream, free_port


def _manifests(gateway_port: int, upstream_port: int) -> str:
    return (
        GATEWAY_HEAD.format(port=gateway_port)
        + f"""\
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: web, namespace: default}}
spec:
  parentRefs: [{{name: gw}}]
  rules:
  - backendRefs: [{{name: web, port: {upstream_port}}}]
---
apiVersion: v1
kind: Service
metadata: {{name: web, namespace: default}}
spec: {{ports: [{{name: http, port: {upstream_port}}}]}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: web-1, namespace: default, labels: {{kubernetes.io/service-name: web}}}}
addressType: IPv4
ports: [{{name: http, port: {upstream_port}}}]
endpoints: [{{addresses: [127.0.0.2]}}]
"""
    )


def _access_lines(text: str) -> list[dict[str, object]]:
    lines = []
    for line in text.splitlines():
        start = line.find('{"')
        if start >= 0 and '"response_code"' in line:
            lines.append(json.loads(line[start:]))
    return lines


@pytest.mark.parametrize("mode", ["stdout", "log"])
async def test_access_log_destination(tmp_path: Path, mode: str) -> None:
    port = free_port("127.0.0.2")
    gateway_port, admin_port = free_port(), free_port()
    (tmp_path / "web.yaml").write_text(_manifests(gateway_port, port))
    weir_bin = Path(sys.executable).with_name("weir")
    command = [str(weir_bin), "run", "-f", str(tmp_path), "--admin-address", f"127.0.0.1:{admin_port}"]
    if mode == "log":
        command += ["--access-log", "log"]
    env = {**os.environ, "COLUMNS": "10000"}  # Rich would wrap a log record at 80 columns
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        async with RecordingUpstream("web", host="127.0.0.2", port=port):

            async def served() -> bool:
                try:
                    async with httpx.AsyncClient(timeout=0.5) as client:
                        response = await client.get(f"http://127.0.0.1:{gateway_port}/logged")
                        return response.status_code == 200
                except httpx.HTTPError:
                    return False

            await eventually(served, timeout=20, interval=0.1)
        proc.send_signal(signal.SIGTERM)  # Envoy flushes its access log when it exits
        stdout, stderr = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stderr[-3000:]
    on_stdout, on_stderr = _access_lines(stdout), _access_lines(stderr)
    logged, elsewhere = (on_stdout, on_stderr) if mode == "stdout" else (on_stderr, on_stdout)
    assert any(line["path"] == "/logged" and line["response_code"] == 200 for line in logged), (
        stdout,
        stderr,
    )
    assert not elsewhere
