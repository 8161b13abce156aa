"""An ACK is never credited to a configuration served while status was being settled.

Settling status reads Envoy's answer for the configuration being served, then
awaits listener probes. A change applied during those awaits (the files
watcher or the Kubernetes watch runs on the same event loop) replaced the
configuration being served; settling then stored "accepted" for the new one
on the strength of the old one's ACK, and published the new statuses (a new
``observedGeneration``) with ``dataPlane.accepted: true`` before Envoy had
even received them. That is exactly what a user (and bench/churn.py) takes as
"this edit is served".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from weir_harness import GATEWAY_HEAD, Weir, eventually

import weir.controller as controller_module
from weir.providers.files.provider import FilesProvider
from weir.testkit import free_port
from weir.xds.server import AckStatus


def _route(generation: int) -> str:
    return f"""\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: r, namespace: default, generation: {generation}}}
spec:
  parentRefs: [{{name: gw}}]
  rules:
  - filters:
    - type: RequestRedirect
      requestRedirect: {{hostname: v{generation}.example, statusCode: 302}}
"""


async def test_an_ack_is_not_credited_to_a_configuration_served_while_settling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gateway_port = free_port()
    harness = Weir(tmp_path, None, gateway_port)
    harness.write("gw.yaml", GATEWAY_HEAD.format(port=gateway_port))
    harness.write("route.yaml", _route(1))
    controller = await harness.start()
    try:
        await eventually(controller.programmed, timeout=10)
        ads = controller._ads
        assert ads is not None
        published: list[tuple[bool, Any, int]] = []
        publish = controller._store.publish

        def recording_publish(statuses: Any) -> Any:
            """What status is published with: accepted?, Envoy's answer for what is served, generation."""
            current = controller._current
            assert current.snapshot is not None
            answer = ads.state().ack_result(current.snapshot.version)
            route = next(s for k, s in statuses.items() if k.kind == "HTTPRoute")
            generation = route["parents"][0]["conditions"][0]["observedGeneration"]
            published.append((current.state.accepted, answer and answer.status, generation))
            return publish(statuses)

        monkeypatch.setattr(controller._store, "publish", recording_publish)
        probe = controller_module.listener_bound
        edited: list[str] = []

        async def probe_then_edit(address: str, port: int, timeout: float = 0.5) -> bool:
            """The probe, and meanwhile the route's next generation applied (as a watcher would)."""
            ok = await probe(address, port, timeout)
            if not edited:
                harness.write("route.yaml", _route(2))
                controller._apply_snapshot(FilesProvider([str(tmp_path)]).load())
                assert controller._current.snapshot is not None
                edited.append(controller._current.snapshot.version)
            return ok

        monkeypatch.setattr(controller_module, "listener_bound", probe_then_edit)
        controller._settle.set()
        await eventually(lambda: edited and controller.programmed(), timeout=10)
        await eventually(lambda: published and published[-1][2] == 2, timeout=10)
        wrong = [p for p in published if p[0] and p[1] is not AckStatus.ACKED]
        assert not wrong, f"published as accepted before Envoy accepted it: {published}"
    finally:
        await harness.stop()
