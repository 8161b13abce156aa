"""``weir demo``: an offline, self-contained tour of weir's main job.

It starts, on loopback only: a TLS "external API" with a CA of its own, an
"internal service", a DNS stub that resolves the API's hostname to the API
and another name to the internal service, and weir (with Envoy) serving a
Gateway, an HTTPRoute and XBackends, one of them with its CA in a ConfigMap.
Then it sends requests through Envoy, shows what the upstream saw, shows that
a backend trusting the wrong CA is refused rather than downgraded and that a
hostname resolving into a denied network is refused before any connection,
and stops everything it started. Exit status 0 means every check held.

Everything weir is told is in the manifests, as a user would write them:
the GatewayClass's parameters (a GatewayClassConfig) name the DNS stub and
the egress policy. That policy is weir's default one except for loopback:
the demo's "external" API runs on 127.0.0.1, so only the internal service's
address, 127.0.0.2, is denied there.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
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
from weir.providers.files.provider import FilesProvider
from weir.testkit import DnsStub, RecordingUpstream, free_port, make_ca, server_ssl_context
from weir.translate import Settings
from weir.translate.settings import DEFAULT_DENIED_CIDRS

API_HOST = "api.weir-demo.test"
#: A name whose address is in a denied network, as after a DNS rebinding.
INTERNAL_HOST = "rebound.weir-demo.test"
API_IP, INTERNAL_IP = "127.0.0.1", "127.0.0.2"


def _class_config(dns: tuple[str, int]) -> dict[str, Any]:
    """The demo GatewayClass's parameters: the DNS stub, and the egress policy."""
    loopback = ipaddress.ip_network("127.0.0.0/8")
    denied = [c for c in DEFAULT_DENIED_CIDRS if ipaddress.ip_network(c) != loopback]
    return {
        "apiVersion": "weir.dev/v1alpha1",
        "kind": "GatewayClassConfig",
        "metadata": {"name": "demo"},
        "spec": {
            "egress": {
                "deniedCIDRs": [*denied, f"{INTERNAL_IP}/32"],
                "allowedHostnames": ["*.weir-demo.test"],
            },
            "dns": {"resolvers": [{"address": dns[0], "port": dns[1]}]},
        },
    }


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


def _manifests(
    gateway_port: int,
    api_port: int,
    ca_pem: str,
    wrong_ca_pem: str,
    *,
    dns: tuple[str, int],
    internal_port: int,
) -> str:
    """The demo's Gateway API objects as multi-document YAML (what a user would write)."""
    gateway_api = "gateway.networking.k8s.io/v1"
    documents: list[dict[str, Any]] = [
        _class_config(dns),
        {
            "apiVersion": gateway_api,
            "kind": "GatewayClass",
            "metadata": {"name": "weir"},
            "spec": {
                "controllerName": DEFAULT_CONTROLLER_NAME,
                "parametersRef": {"group": "weir.dev", "kind": "GatewayClassConfig", "name": "demo"},
            },
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
                "rules": [
                    _route_rule("/api", "demo-api"),
                    _route_rule("/impostor", "wrong-ca"),
                    _route_rule("/rebound", "rebound"),
                ],
            },
        },
        _xbackend("demo-api", api_port, "demo-ca"),
        _xbackend("wrong-ca", api_port, "unrelated-ca"),
        {
            "apiVersion": "gateway.networking.x-k8s.io/v1alpha1",
            "kind": "XBackend",
            "metadata": {"name": "rebound", "namespace": "default"},
            "spec": {
                "type": "ExternalHostname",
                "externalHostname": {"hostname": INTERNAL_HOST},
                "port": {"port": internal_port},
            },
        },
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
    gateway_port, api_port = free_port(), free_port(API_IP)
    async with contextlib.AsyncExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="weir-demo-")))
        upstream = await stack.enter_async_context(
            RecordingUpstream(
                "demo-api",
                host=API_IP,
                port=api_port,
                ssl_context=server_ssl_context(server_cert),
            )
        )
        internal = await stack.enter_async_context(RecordingUpstream("internal", host=INTERNAL_IP))
        dns = await stack.enter_async_context(DnsStub())
        dns.set(API_HOST, [API_IP])
        dns.set(INTERNAL_HOST, [INTERNAL_IP])
        manifest = workdir / "demo.yaml"
        manifest.write_text(
            _manifests(
                gateway_port,
                api_port,
                ca.cert_pem,
                impostor_ca.cert_pem,
                dns=dns.address,
                internal_port=internal.port,
            )
        )
        console.print(
            f"[bold]1.[/bold] A TLS API at https://{API_HOST}:{api_port} (its own CA), "
            f"an internal service at http://{INTERNAL_IP}:{internal.port}, "
            f"a DNS stub at {dns.host}:{dns.port}, manifests in {manifest}. The GatewayClass's "
            "parameters (GatewayClassConfig demo) name the DNS stub and weir's default egress policy, "
            f"with loopback narrowed to {INTERNAL_IP}: the demo API itself is on {API_IP}."
        )

        controller = Controller(FilesProvider([str(workdir)]), Settings(), Options(admin_port=0))
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

        status, body = await asyncio.to_thread(_get, f"http://127.0.0.1:{gateway_port}/rebound/hello")
        guarded = status == 403 and INTERNAL_IP in body and not internal.requests
        ok &= guarded
        console.print(
            f"[bold]4.[/bold] {INTERNAL_HOST} resolves to {INTERNAL_IP}, a denied network: HTTP {status}, "
            f"{'refused before connecting' if guarded else 'UNEXPECTED'} "
            + ("[green]ok[/green]" if guarded else "[red]FAILED[/red]"),
            highlight=False,
        )
        console.print(f"    {body.strip()}", highlight=False, markup=False)

        statuses = controller.statuses()
        gateway = next((s for k, s in statuses.items() if k.kind == "Gateway"), {})
        programmed: dict[str, Any] = next(
            (c for c in gateway.get("conditions", []) if c["type"] == "Programmed"), {}
        )
        ok &= programmed.get("status") == "True"
        console.print(
            f"[bold]5.[/bold] Gateway default/egress Programmed={programmed.get('status')} "
            f"({programmed.get('reason')}): {programmed.get('message')}"
        )
        if keep_running:
            console.print(
                f"Running; try `curl http://127.0.0.1:{gateway_port}/api/x` or "
                f"`weir status --admin-address 127.0.0.1:{controller.admin_port}`. Ctrl-C stops."
            )
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.Event().wait()
    console.print("[bold]6.[/bold] Stopped weir, Envoy, the DNS stub and the API.")
    console.print("[bold green]demo passed[/bold green]" if ok else "[bold red]demo failed[/bold red]")
    return 0 if ok else 1
