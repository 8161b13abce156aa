"""``weir demo``: an offline, self-contained tour of weir's main job.

It starts, on loopback only: a TLS "external API" with a CA of its own, a
DNS stub that resolves the API's hostname to it, and weir (with Envoy) serving
a Gateway, an HTTPRoute and an XBackend whose CA comes from a ConfigMap.
Then it sends requests through Envoy, shows what the upstream saw, shows that
a backend trusting the wrong CA is refused rather than downgraded, and stops
everything it started. Exit status 0 means every check held.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

from weir import DEFAULT_CONTROLLER_NAME
from weir.controller import Controller, Options
from weir.providers.files import FilesProvider
from weir.testkit import DnsStub, RecordingUpstream, free_port, make_ca, server_ssl_context
from weir.translate import Settings

API_HOST = "api.weir-demo.test"


def _xbackend(name: str, port: int, ca_config_map: str) -> dict[str, Any]:
    """An XBackend for the demo API, trusting the CA in ``ca_config_map``."""
    return {
        "apiVersion": "gateway.networking.x-k8s.io/v1alpha1",
        "kind": "XBackend",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "type": "ExternalHostname",
            "externalHostname": {"hostname": API_HOST},
            "port": {"port": port},
            "tls": {
                "mode": "ServerOnly",
                "validation": {
                    "hostname": API_HOST,
                    "caCertificateRefs": [{"group": "", "kind": "ConfigMap", "name": ca_config_map}],
                },
            },
        },
    }


def _ca_config_map(name: str, pem: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default"},
        "data": {"ca.crt": pem},
    }


def _route_rule(prefix: str, xbackend: str) -> dict[str, Any]:
    return {
        "matches": [{"path": {"type": "PathPrefix", "value": prefix}}],
        "backendRefs": [{"group": "gateway.networking.x-k8s.io", "kind": "XBackend", "name": xbackend}],
    }


def _manifests(gateway_port: int, api_port: int, ca_pem: str, wrong_ca_pem: str) -> str:
    """The demo's Gateway API objects as multi-document YAML (what a user would write)."""
    gateway_api = "gateway.networking.k8s.io/v1"
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
                "listeners": [{"name": "http", "port": gateway_port, "protocol": "HTTP"}],
            },
        },
        {
            "apiVersion": gateway_api,
            "kind": "HTTPRoute",
            "metadata": {"name": "demo-api", "namespace": "default"},
            "spec": {
                "parentRefs": [{"name": "egress"}],
                "rules": [_route_rule("/api", "demo-api"), _route_rule("/impostor", "wrong-ca")],
            },
        },
        _xbackend("demo-api", api_port, "demo-ca"),
        _xbackend("wrong-ca", api_port, "unrelated-ca"),
        _ca_config_map("demo-ca", ca_pem),
        _ca_config_map("unrelated-ca", wrong_ca_pem),
    ]
    return yaml.safe_dump_all(documents, sort_keys=False)


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


async def run_demo(console: Console, *, keep_running: bool = False) -> int:
    """Run the demonstration; return the process exit status."""
    ok = True
    ca, impostor_ca = make_ca("weir demo CA"), make_ca("unrelated CA")
    server_cert = ca.issue_server_cert(API_HOST)
    gateway_port, api_port = free_port(), free_port()
    async with contextlib.AsyncExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="weir-demo-")))
        upstream = await stack.enter_async_context(
            RecordingUpstream(
                "demo-api",
                host="127.0.0.1",
                port=api_port,
                ssl_context=server_ssl_context(server_cert),
            )
        )
        dns = await stack.enter_async_context(DnsStub())
        dns.set(API_HOST, ["127.0.0.1"])
        manifest = workdir / "demo.yaml"
        manifest.write_text(_manifests(gateway_port, api_port, ca.cert_pem, impostor_ca.cert_pem))
        console.print(
            f"[bold]1.[/bold] A TLS API at https://{API_HOST}:{api_port} (its own CA), "
            f"a DNS stub at {dns.host}:{dns.port}, manifests in {manifest}"
        )

        controller = Controller(
            FilesProvider([str(workdir)]),
            Settings(dns_resolvers=(dns.address,)),
            Options(admin_port=0),
        )
        started = time.monotonic()
        await controller.start()
        stack.push_async_callback(controller.stop)
        try:
            await asyncio.wait_for(controller.ready.wait(), 20)
        except TimeoutError:
            console.print("[red]Envoy did not accept the configuration in time[/red]")
            return 1
        assert controller.envoy is not None
        console.print(
            f"[bold]2.[/bold] weir and Envoy (pid {controller.envoy.pid}) serve the Gateway on "
            f"http://127.0.0.1:{gateway_port} after {time.monotonic() - started:.2f} s"
        )

        status, _ = await asyncio.to_thread(_get, f"http://127.0.0.1:{gateway_port}/api/hello")
        seen = upstream.requests[-1] if upstream.requests else None
        table = Table(title="What the external API saw", show_header=True)
        table.add_column("fact")
        table.add_column("value")
        table.add_column("check")
        checks: list[tuple[str, Any, bool]] = [("HTTP status through weir", status, status == 200)]
        if seen is None:
            checks.append(("request at the API", None, False))
        else:
            checks += [
                ("TLS SNI", seen.sni, seen.sni == API_HOST),
                ("Host header", seen.host, seen.host == API_HOST),
                ("protocol", f"HTTP/{seen.http_version} (ALPN {seen.alpn})", seen.alpn in ("h2", "http/1.1")),
                ("TLS version", seen.tls_version, seen.tls_version == "TLSv1.3"),
                ("path", seen.path, seen.path == "/api/hello"),
            ]
        for fact, value, good in checks:
            ok &= good
            table.add_row(fact, str(value), "[green]ok[/green]" if good else "[red]FAILED[/red]")
        console.print(table)

        before = len(upstream.requests)
        status, _ = await asyncio.to_thread(_get, f"http://127.0.0.1:{gateway_port}/impostor/hello")
        refused = status >= 500 and len(upstream.requests) == before
        ok &= refused
        console.print(
            f"[bold]3.[/bold] An XBackend trusting the wrong CA: HTTP {status}, "
            f"{'no request reached the API (no plaintext fallback)' if refused else 'UNEXPECTED'} "
            + ("[green]ok[/green]" if refused else "[red]FAILED[/red]")
        )

        statuses = controller.statuses()
        gateway = next((s for k, s in statuses.items() if k.kind == "Gateway"), {})
        programmed: dict[str, Any] = next(
            (c for c in gateway.get("conditions", []) if c["type"] == "Programmed"), {}
        )
        ok &= programmed.get("status") == "True"
        console.print(
            f"[bold]4.[/bold] Gateway default/egress Programmed={programmed.get('status')} "
            f"({programmed.get('reason')}): {programmed.get('message')}"
        )
        if keep_running:
            console.print(
                f"Running; try `curl http://127.0.0.1:{gateway_port}/api/x` or "
                f"`weir status --admin-address 127.0.0.1:{controller.admin_port}`. Ctrl-C stops."
            )
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.Event().wait()
    console.print("[bold]5.[/bold] Stopped weir, Envoy, the DNS stub and the API.")
    console.print("[bold green]demo passed[/bold green]" if ok else "[bold red]demo failed[/bold red]")
    return 0 if ok else 1
