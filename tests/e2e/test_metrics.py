"""``/metrics`` end to end: real requests through real Envoy, then exact counter values.

One Gateway socket, and a path per backend (``/NAME/...``):

* ``api`` — an XBackend in plaintext to a recording upstream on 127.0.0.2,
  which answers 200, then 503;
* ``blocked`` — its hostname resolves to the forbidden 127.0.0.66: the egress
  guard refuses (403, no connection);
* ``wrong-ca`` / ``wrong-name`` — TLS upstreams whose certificate is signed by
  a CA nobody trusts / names another host: verification fails (503);
* ``down`` — nothing listens at its address: the connection is refused (503);
* ``missing`` — its hostname does not resolve (NXDOMAIN): no address (503);
* ``web`` — a Service with two ports, each a cluster, summed into one series.

Every page is read by weir's strict reader and by Prometheus' own parser.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import textwrap
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families
from weir_harness import FORBIDDEN_IP, GATEWAY_HEAD, Weir, eventually, indent_pem, pid_alive

from weir import __version__
from weir.metrics import parse
from weir.testkit import (
    CertAuthority,
    DnsStub,
    RecordingUpstream,
    UpstreamResponse,
    make_ca,
    server_ssl_context,
)

UPSTREAM_IP = "127.0.0.2"
SERVICE_IP = "127.0.0.3"
XB = "gateway.networking.x-k8s.io"

Series = tuple[str, tuple[tuple[str, str], ...]]


async def scrape(weir: Weir) -> tuple[str, dict[Series, float]]:
    """The page and its samples; both parsers must accept it and agree on every value."""
    assert weir.controller is not None and weir.controller.admin_port
    async with httpx.AsyncClient(timeout=10) as client:
        response = await client.get(f"http://127.0.0.1:{weir.controller.admin_port}/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    values = {
        (family.name + sample.name_suffix, tuple(sorted(sample.labels.items()))): sample.value
        for family in parse(response.text)
        for sample in family.samples
    }
    theirs = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }
    assert theirs == values
    return response.text, values


def series(metric: str, /, **labels: str) -> Series:
    return metric, tuple(sorted(labels.items()))


def of(metric: str, name: str, /, kind: str = "XBackend", **labels: str) -> Series:
    """A series of backend ``name`` (an XBackend unless ``kind`` says otherwise) in ``default``."""
    return series(metric, kind=kind, namespace="default", name=name, **labels)


def xbackend(name: str, hostname: str, port: int, tls: str = "") -> str:
    text = (
        f"---\napiVersion: {XB}/v1alpha1\nkind: XBackend\nmetadata: {{name: {name}, namespace: default}}\n"
        f"spec:\n  type: ExternalHostname\n  externalHostname: {{hostname: {hostname}}}\n"
        f"  port: {{port: {port}}}\n"
    )
    if tls:
        text += "  tls:\n" + textwrap.indent(tls, "    ")
    return text


def route(names: list[str], service_ports: tuple[int, int]) -> str:
    text = (
        "---\napiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\n"
        "metadata: {name: r, namespace: default}\nspec:\n  parentRefs: [{name: gw}]\n  rules:\n"
    )
    for name in names:
        text += (
            f"  - matches: [{{path: {{type: PathPrefix, value: /{name}}}}}]\n"
            f"    backendRefs: [{{group: {XB}, kind: XBackend, name: {name}}}]\n"
        )
    for index, port in enumerate(service_ports):
        text += (
            f"  - matches: [{{path: {{type: PathPrefix, value: /web{index}}}}}]\n"
            f"    backendRefs: [{{name: web, port: {port}}}]\n"
        )
    return text


def service(ports: tuple[int, int]) -> str:
    listed = ", ".join(f"{{name: p{p}, port: {p}}}" for p in ports)
    return (
        f"---\napiVersion: v1\nkind: Service\nmetadata: {{name: web, namespace: default}}\n"
        f"spec: {{ports: [{listed}]}}\n"
        f"---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n"
        f"metadata: {{name: web-1, namespace: default, labels: {{kubernetes.io/service-name: web}}}}\n"
        f"addressType: IPv4\nports: [{listed}]\nendpoints: [{{addresses: [{SERVICE_IP}]}}]\n"
    )


def verified_by(ca: CertAuthority, hostname: str) -> str:
    return (
        f"mode: ServerOnly\nvalidation:\n  hostname: {hostname}\n"
        '  caCertificateRefs: [{group: "", kind: ConfigMap, name: good-ca}]\n'
    )


def ca_config_map(ca: CertAuthority) -> str:
    return (
        "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: good-ca, namespace: default}\n"
        f"data:\n  ca.crt: |\n{indent_pem(ca.cert_pem, 4)}"
    )


def closed_port(host: str) -> int:
    """A port nothing listens on at ``host`` (bound, then released)."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


class World:
    """Every backend of the module docstring, with its upstream."""

    def __init__(self, weir: Weir, dns: DnsStub) -> None:
        self.weir, self.dns = weir, dns
        self.good_ca, self.other_ca = make_ca("good"), make_ca("nobody trusts this")

    async def __aenter__(self) -> World:
        self.api = await RecordingUpstream("api", host=UPSTREAM_IP).__aenter__()
        port = self.api.port
        wrong_ca_cert = self.other_ca.issue_server_cert("wrong-ca.example.test")
        wrong_name_cert = self.good_ca.issue_server_cert("someone-else.example.test")
        self.wrong_ca = await RecordingUpstream(
            "wrong-ca", host="127.0.0.4", ssl_context=server_ssl_context(wrong_ca_cert)
        ).__aenter__()
        self.wrong_name = await RecordingUpstream(
            "wrong-name", host="127.0.0.5", ssl_context=server_ssl_context(wrong_name_cert)
        ).__aenter__()
        self.web = [
            await RecordingUpstream("web-a", host=SERVICE_IP).__aenter__(),
            await RecordingUpstream("web-b", host=SERVICE_IP).__aenter__(),
        ]
        for name, ip in [("api", UPSTREAM_IP), ("blocked", FORBIDDEN_IP), ("down", "127.0.0.6")]:
            self.dns.set(f"{name}.example.test", [ip])
        self.dns.set("wrong-ca.example.test", ["127.0.0.4"])
        self.dns.set("wrong-name.example.test", ["127.0.0.5"])
        web_ports = (self.web[0].port, self.web[1].port)
        self.weir.write(
            "world.yaml",
            GATEWAY_HEAD.format(port=self.weir.gateway_port)
            + route(["api", "blocked", "wrong-ca", "wrong-name", "down", "missing"], web_ports)
            + xbackend("api", "api.example.test", port)
            + xbackend("blocked", "blocked.example.test", port)
            + xbackend(
                "wrong-ca",
                "wrong-ca.example.test",
                self.wrong_ca.port,
                verified_by(self.good_ca, "wrong-ca.example.test"),
            )
            + xbackend(
                "wrong-name",
                "wrong-name.example.test",
                self.wrong_name.port,
                verified_by(self.good_ca, "wrong-name.example.test"),
            )
            + xbackend("down", "down.example.test", closed_port("127.0.0.6"))
            + xbackend("missing", "missing.example.test", port)
            + ca_config_map(self.good_ca)
            + service(web_ports),
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        for upstream in [self.api, self.wrong_ca, self.wrong_name, *self.web]:
            await upstream.__aexit__(None, None, None)

    async def get(self, path: str) -> int:
        async with httpx.AsyncClient(timeout=10) as client:
            return (await client.get(self.weir.url(path))).status_code


async def test_data_plane_counters_match_the_requests(weir: Weir, dns: DnsStub) -> None:
    async with World(weir, dns) as world:
        await weir.start()
        codes = {
            "api": [await world.get("/api/x") for _ in range(3)],
            "blocked": [await world.get("/blocked/x") for _ in range(2)],
            "wrong-ca": [await world.get("/wrong-ca/x")],
            "wrong-name": [await world.get("/wrong-name/x")],
            "down": [await world.get("/down/x")],
            "missing": [await world.get("/missing/x")],
            "web": [await world.get("/web0/x"), await world.get("/web1/x"), await world.get("/web1/y")],
            "nothing": [await world.get("/nothing")],
        }
        world.api.handler = UpstreamResponse(status=503)
        codes["api"].append(await world.get("/api/x"))
        assert codes == {
            "api": [200, 200, 200, 503],
            "blocked": [403, 403],
            "wrong-ca": [503],
            "wrong-name": [503],
            "down": [503],
            "missing": [503],
            "web": [200, 200, 200],
            "nothing": [404],
        }
        # Nothing reached an upstream it should not have.
        assert world.wrong_ca.requests == [] and world.wrong_name.requests == []
        assert len(world.api.requests) == 4

        _, values = await scrape(weir)
    socket_name = f"127.0.0.1:{weir.gateway_port}"
    tls_failures, connect = "weir_backend_tls_verify_failures_total", "weir_backend_connect_failures_total"
    expected = {
        series("weir_egress_refused_total"): 2,  # blocked's two requests, nothing else
        of(tls_failures, "wrong-ca", reason="chain"): 1,
        of(tls_failures, "wrong-ca", reason="san"): 0,
        of(tls_failures, "wrong-name", reason="san"): 1,
        of(tls_failures, "wrong-name", reason="chain"): 0,
        # A failed handshake is a failed connection, as is a refused one.
        of(connect, "down"): 1,
        of(connect, "wrong-ca"): 1,
        of(connect, "wrong-name"): 1,
        of(connect, "api"): 0,
        of(connect, "web", kind="Service"): 0,
        of("weir_backend_unavailable_total", "missing"): 1,
        of("weir_backend_unavailable_total", "api"): 0,
        # Every response on the Gateway socket: 6 of 200; 2 of 403 and a 404; 5 of 503 (1 from the upstream).
        series("weir_downstream_requests_total", socket=socket_name, code_class="2xx"): 6,
        series("weir_downstream_requests_total", socket=socket_name, code_class="4xx"): 3,
        series("weir_downstream_requests_total", socket=socket_name, code_class="5xx"): 5,
        series("weir_downstream_requests_total", socket=socket_name, code_class="3xx"): 0,
        series(
            "weir_gateway_listener_info",
            namespace="default",
            gateway="gw",
            listener="http",
            socket=socket_name,
        ): 1,
        series("weir_envoy_stats_up"): 1,
    }
    assert {key: values.get(key) for key in expected} == expected


async def test_backend_requests_by_response_class(weir: Weir, dns: DnsStub) -> None:
    """``upstream_rq_<class>`` per backend: needs Envoy's router to keep its dynamic stats."""
    async with World(weir, dns) as world:
        await weir.start()
        for _ in range(3):
            assert await world.get("/api/x") == 200
        world.api.handler = UpstreamResponse(status=503)
        assert await world.get("/api/x") == 503
        world.api.handler = UpstreamResponse(status=404)
        assert await world.get("/api/x") == 404
        assert await world.get("/wrong-ca/x") == 503
        assert await world.get("/blocked/x") == 403
        for path in ("/web0/a", "/web1/b", "/web1/c"):
            assert await world.get(path) == 200
        _, values = await scrape(weir)

    def requests(kind: str, name: str, code_class: str) -> float | None:
        return values.get(of("weir_backend_requests_total", name, kind=kind, code_class=code_class))

    assert {c: requests("XBackend", "api", c) for c in ("2xx", "4xx", "5xx")} == {
        "2xx": 3,
        "4xx": 1,
        "5xx": 1,
    }
    # Envoy's 503 for a failed handshake counts for the backend; the guard's 403 does not (nothing left).
    assert requests("XBackend", "wrong-ca", "5xx") == 1
    assert requests("XBackend", "blocked", "4xx") in (None, 0)
    # Both ports of the Service (two clusters), one series.
    assert requests("Service", "web", "2xx") == 3


async def test_control_plane_and_xds_counters(weir: Weir, dns: DnsStub, tmp_path: Path) -> None:
    async with World(weir, dns):
        await weir.start()
        _, values = await scrape(weir)
        assert values[series("weir_build_info", version=__version__)] == 1
        assert values[series("weir_translations_total")] == 1
        assert values[series("weir_translation_failures_total")] == 0
        assert values[series("weir_translation_duration_seconds_count")] == 1
        assert values[series("weir_config_problems", severity="error")] == 0
        assert values[series("weir_envoy_ready")] == 1
        assert values[series("weir_envoy_restarts_total", reason="exited")] == 0
        assert values[series("weir_envoy_config_accepted")] == 1
        assert values[series("weir_gateways_programmed")] == 1
        assert values[series("weir_managed_objects", kind="XBackend")] == 6
        assert values[series("weir_managed_objects", kind="Gateway")] == 1
        assert values[series("weir_status_conditions", kind="HTTPRoute", type="Accepted", status="True")] == 1
        types = ("Cluster", "Listener", "RouteConfiguration", "Secret")
        for xds_type in types:
            acks = values[series("weir_xds_acks_total", type=xds_type)]
            assert acks >= 1, xds_type
            assert values[series("weir_xds_nacks_total", type=xds_type)] == 0
            assert values[series("weir_xds_pushes_total", type=xds_type)] >= acks
            assert values[series("weir_xds_push_ack_duration_seconds_count", type=xds_type)] == acks

        # Envoy rejects a listener it cannot bind: one NACK, and the Gateway says so.
        blocker = socket.socket()
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        try:
            taken = blocker.getsockname()[1]
            weir.write(
                "blocked-gw.yaml",
                "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\n"
                "metadata: {name: blocked, namespace: default}\n"
                "spec:\n  gatewayClassName: weir\n"
                f"  listeners: [{{name: http, port: {taken}, protocol: HTTP}}]\n",
            )

            async def nacked() -> dict[Series, float] | None:
                _, now = await scrape(weir)
                rejected = now.get(series("weir_xds_nacks_total", type="Listener"))
                published = now.get(series("weir_managed_objects", kind="Gateway")) == 2
                return now if rejected and published else None

            values, _ = await eventually(nacked, timeout=10, interval=0.1)
            # At least one NACK: weir asks Envoy again, with back-off, while the port is busy.
            assert values[series("weir_xds_nacks_total", type="Listener")] >= 1
            assert values[series("weir_translations_total")] == 2
            assert values[series("weir_envoy_config_accepted")] == 0

            async def one_programmed() -> bool:
                _, now = await scrape(weir)
                ok = now.get(series("weir_gateways_programmed")) == 1
                return (
                    ok
                    and now.get(
                        series("weir_status_conditions", kind="Gateway", type="Programmed", status="False")
                    )
                    == 1
                )

            await eventually(one_programmed, timeout=10, interval=0.1)

            # A file that does not parse: a standing problem, and nothing else lost.
            weir.write("broken.yaml", "apiVersion: v1\nkind: Service\nmetadata: {name: [oops]}\n")

            async def problem() -> bool:
                _, now = await scrape(weir)
                return now.get(series("weir_config_problems", severity="error")) == 1

            await eventually(problem, timeout=10, interval=0.1)
            _, values = await scrape(weir)
            assert values[series("weir_translations_total")] == 3
            assert values[series("weir_gateways_programmed")] == 1
        finally:
            blocker.close()  # weir then binds it (the retry): not checked here

        # Envoy dies; weir restarts it and counts it.
        pid = weir.envoy_pid
        os.kill(pid, signal.SIGKILL)

        async def restarted() -> bool:
            _, now = await scrape(weir)
            return (
                now[series("weir_envoy_restarts_total", reason="exited")] == 1
                and now[series("weir_envoy_ready")] == 1
            )

        await eventually(restarted, timeout=15, interval=0.1)
        assert weir.envoy_pid != pid and not pid_alive(pid)

        # Scrapes a moment apart share one fetch of Envoy's stats; a second later, a new one.
        fetch = series("weir_envoy_stats_fetch_duration_seconds")
        (_, first), (_, second) = await asyncio.gather(scrape(weir), scrape(weir))
        assert first[fetch] == second[fetch] > 0
        await asyncio.sleep(1.1)
        assert (await scrape(weir))[1][fetch] != first[fetch]
