"""The ``weir`` command."""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
import yaml
from pydantic import StringConstraints, TypeAdapter, ValidationError
from rich.console import Console
from rich.markup import escape

from weir import DEFAULT_CONTROLLER_NAME, __version__, ir
from weir.api.meta import DNS1123_LABEL, Hostname, PreciseHostname
from weir.loader import LoadReport, load_paths
from weir.resources import Resources
from weir.streamdump import LazyList, LazyMap, write_json, write_yaml
from weir.translate import Settings, translate
from weir.translate.settings import DEFAULT_SYSTEM_TRUST_FILE

app = typer.Typer(
    name="weir",
    help="weir: a Gateway API implementation built around XBackend, with Envoy as the data plane.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
err = Console(stderr=True)
out = Console()

Paths = Annotated[
    list[Path],
    typer.Option("--file", "-f", help="A YAML file or a folder of them (recursive). Repeatable."),
]
ControllerName = Annotated[str, typer.Option(help="GatewayClasses with this controllerName are weir's.")]
EgressDeniedCidrs = Annotated[
    str | None,
    typer.Option(
        metavar="CIDR[,CIDR...]",
        help="Networks external hostnames must not resolve into, for every GatewayClass (replaces "
        "GatewayClassConfig spec.egress.deniedCIDRs and the default: loopback, private, link-local...). "
        "An empty value denies nothing.",
    ),
]
EgressAllowedHostnames = Annotated[
    str | None,
    typer.Option(
        metavar="PATTERN[,PATTERN...]",
        help="Hostnames XBackends may name (api.example.com, *.example.com), for every GatewayClass "
        "(replaces GatewayClassConfig spec.egress.allowedHostnames). An empty value allows any.",
    ),
]
DEFAULT_ADMIN = "127.0.0.1:9900"


def main() -> None:
    app()


def _setup_logging(level: str, fmt: str = "text") -> None:
    from weir.logs import FORMATS, setup

    if fmt not in FORMATS:
        raise typer.BadParameter(f"--log-format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    try:
        setup(level, fmt, err)
    except ValueError as exc:
        raise typer.BadParameter(f"--log-level: {exc}") from None


def _host_port(value: str, what: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise typer.BadParameter(f"{what} must be HOST:PORT, got {value!r}")
    return host.strip("[]"), int(port)


def _print_problems(report: LoadReport) -> None:
    for problem in report.problems:
        style = "red" if problem.severity == "error" else "yellow"
        text = escape(str(problem))  # patterns like [a-z0-9] are not Rich markup
        err.print(f"[{style}]{problem.severity}[/{style}]: {text}", highlight=False, soft_wrap=True)


def _settings(
    controller_name: str,
    bind_address: str,
    dns_resolver: list[str],
    trust: str,
    *,
    denied_cidrs: str | None = None,
    allowed_hostnames: str | None = None,
) -> Settings:
    return Settings(
        controller_name=controller_name,
        bind_address=bind_address,
        dns_resolvers=tuple(_host_port(r, "--dns-resolver") for r in dns_resolver),
        system_trust_file=trust,
        egress_denied_cidrs=_cidrs(denied_cidrs),
        egress_allowed_hostnames=_hostname_patterns(allowed_hostnames),
    )


def _csv(value: str | None) -> tuple[str, ...] | None:
    """``None`` when the option is absent; otherwise its comma-separated items (``()`` for "")."""
    if value is None:
        return None
    return tuple(item.strip() for item in value.split(",") if item.strip())


def _cidrs(value: str | None) -> tuple[str, ...] | None:
    items = _csv(value)
    for item in items or ():
        try:
            ipaddress.ip_network(item)
        except ValueError:
            try:
                hint = f"; did you mean {ipaddress.ip_network(item, strict=False)}?"
            except ValueError:
                hint = ""
            raise typer.BadParameter(
                f"--egress-denied-cidrs: {item!r} is not a network like 10.0.0.0/8 or fc00::/7{hint}"
            ) from None
    return items


def _hostname_patterns(value: str | None) -> tuple[str, ...] | None:
    items = _csv(value)
    for item in items or ():
        try:
            TypeAdapter(Hostname).validate_python(item)
        except ValidationError:
            raise typer.BadParameter(
                f"--egress-allowed-hostnames: {item!r} is not a hostname like api.example.com "
                "or *.example.com (lower case)"
            ) from None
    return items


#: ``--gateway-services`` values, as the Service type each names.
_SERVICE_TYPES: dict[str, Literal["ClusterIP", "LoadBalancer"]] = {
    "ClusterIP": "ClusterIP",
    "LoadBalancer": "LoadBalancer",
}


def _kube_options(
    *,
    kubeconfig: Path | None,
    namespace: list[str],
    lease_namespace: str | None,
    lease_name: str,
    lease_duration: float,
    publish_service: str | None,
    gateway_address: list[str],
    controller_name: str,
    reprobe_interval: float,
    unready_without_election: bool = False,
    gateway_services: str | None = None,
) -> tuple[Any, tuple[str, str] | None, tuple[str, ...]]:
    """``weir run --kubernetes``: the provider's options, the publish Service, the fixed addresses."""
    from weir.providers.kubernetes.leader import LeaseSettings
    from weir.providers.kubernetes.provider import (
        KubernetesOptions,
        default_identity,
    )
    from weir.providers.kubernetes.watch import WatchTiming

    label: TypeAdapter[str] = TypeAdapter(
        Annotated[str, StringConstraints(pattern=DNS1123_LABEL, max_length=63)]
    )
    for ns in namespace:
        try:
            label.validate_python(ns)
        except ValidationError:
            raise typer.BadParameter(f"--namespace: {ns!r} is not a namespace name") from None
    publish: tuple[str, str] | None = None
    if publish_service is not None:
        ns, _, name = publish_service.partition("/")
        try:
            label.validate_python(ns)
            label.validate_python(name)
        except ValidationError:
            raise typer.BadParameter(
                f"--publish-service must be NAMESPACE/NAME of a Service, got {publish_service!r}"
            ) from None
        publish = (ns, name)
    for address in gateway_address:
        try:
            ipaddress.ip_address(address)
        except ValueError:
            try:
                TypeAdapter(PreciseHostname).validate_python(address)
            except ValidationError:
                raise typer.BadParameter(
                    f"--gateway-address: {address!r} is neither an IP address nor a hostname"
                ) from None
    if gateway_services is not None:
        if gateway_services not in _SERVICE_TYPES:
            raise typer.BadParameter(
                "--gateway-services must be ClusterIP or LoadBalancer (a Service type), "
                f"got {gateway_services!r}"
            )
        if publish is None:
            raise typer.BadParameter(
                "--gateway-services needs --publish-service: the Service that selects weir's pods, whose "
                "endpoints the Gateways' Services list"
            )
    try:
        lease = LeaseSettings.scaled(lease_namespace or "", lease_name, default_identity(), lease_duration)
    except ValueError as exc:
        raise typer.BadParameter(f"--lease-duration: {exc}") from None
    options = KubernetesOptions(
        kubeconfig=str(kubeconfig) if kubeconfig is not None else None,
        namespaces=tuple(dict.fromkeys(namespace)),
        controller_name=controller_name,
        publish_service=publish,
        lease=lease,
        unready_without_election=unready_without_election,
        timing=WatchTiming(reprobe_s=reprobe_interval),
        gateway_services=_SERVICE_TYPES.get(gateway_services or ""),
    )
    return options, publish, tuple(gateway_address)


@app.command()
def run(
    file: Annotated[
        list[Path],
        typer.Option(
            "--file", "-f", help="A YAML file or a folder of them (recursive). Repeatable. Or --kubernetes."
        ),
    ] = [],  # noqa: B006 - typer needs a literal default
    controller_name: ControllerName = DEFAULT_CONTROLLER_NAME,
    bind_address: Annotated[
        str, typer.Option(help="Where listeners bind when a Gateway has no IPAddress addresses.")
    ] = "127.0.0.1",
    dns_resolver: Annotated[
        list[str],
        typer.Option(help="HOST:PORT of a DNS server for external hostnames. Repeatable."),
    ] = [],  # noqa: B006 - typer needs a literal default
    admin_address: Annotated[
        str,
        typer.Option(help="HOST:PORT of weir's admin endpoint (status, health). Keep it on loopback."),
    ] = DEFAULT_ADMIN,
    envoy_log_level: Annotated[str, typer.Option(help="Envoy's log level.")] = "warning",
    system_trust_file: Annotated[
        str, typer.Option(help="CA bundle for wellKnownCACertificates: System.")
    ] = DEFAULT_SYSTEM_TRUST_FILE,
    log_level: Annotated[str, typer.Option(help="weir's log level.")] = "info",
    log_format: Annotated[
        str,
        typer.Option(
            metavar="text|json",
            help="weir's log lines: 'text' (coloured on a terminal, else one plain unwrapped line per "
            "record) or 'json' (one object per line: time, level, logger, message).",
        ),
    ] = "text",
    egress_denied_cidrs: EgressDeniedCidrs = None,
    egress_allowed_hostnames: EgressAllowedHostnames = None,
    envoy_concurrency: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Envoy worker threads (--concurrency). Default: the CPUs weir may use (affinity, quota).",
        ),
    ] = None,
    envoy_ready_timeout: Annotated[
        float,
        typer.Option(min=1, help="Seconds Envoy may take to become ready with the first configuration."),
    ] = 60.0,
    access_log: Annotated[
        str,
        typer.Option(
            metavar="stdout|log",
            help="Where Envoy's JSON access log goes: 'stdout' (Envoy writes it to weir's stdout "
            "itself, one JSON object per line) or 'log' (through weir's log, logger weir.envoy.access "
            "at INFO; weir's Python process then spends several times Envoy's CPU on every request).",
        ),
    ] = "stdout",
    drain_timeout: Annotated[
        float,
        typer.Option(
            min=0,
            help="Graceful stop: on SIGTERM or SIGINT, /ready answers 503 and Envoy finishes the requests "
            "in flight (every response asks the client to close), for at most this many seconds; then "
            "weir stops Envoy and exits. A second signal stops at once.",
        ),
    ] = 5.0,
    shutdown_delay: Annotated[
        float,
        typer.Option(
            min=0,
            help="Graceful stop: seconds (rounded up to whole seconds) Envoy keeps accepting new connections "
            "after the signal (while /ready answers 503), so that load balancers stop sending them first; "
            "at most --drain-timeout. Replaces a preStop sleep in Kubernetes.",
        ),
    ] = 0.0,
    envoy_standby: Annotated[
        bool,
        typer.Option(
            "--envoy-standby",
            help="Run a second Envoy on the same configuration and ports (SO_REUSEPORT), so that a crash "
            "of one costs only the requests in flight on it, not the time to start another "
            "(docs/architecture.md). Doubles Envoy's memory and threads.",
        ),
    ] = False,
    run_dir: Annotated[
        Path | None,
        typer.Option(
            help="weir's run folder (xDS and Envoy's admin sockets, Envoy's pid file), which outlives "
            "weir: if weir crashes, Envoy keeps serving, and the next weir on the same folder adopts it. "
            "Default: $XDG_RUNTIME_DIR (else the temporary folder)/weir-UID/ADMIN_HOST-ADMIN_PORT; with "
            "admin port 0, a temporary folder (Envoy then stops with weir).",
        ),
    ] = None,
    cache_dir: Annotated[
        Path | None,
        typer.Option(
            help="Where parsed files are kept between runs, so that a restart parses only the files that "
            "changed (about 5x faster at 10,000 files). Default: $WEIR_CACHE_DIR, else "
            "$XDG_CACHE_HOME/weir, else ~/.cache/weir. Files mode only.",
        ),
    ] = None,
    no_cache: Annotated[
        bool, typer.Option("--no-cache", help="Parse every file at start; keep no parse cache.")
    ] = False,
    kubernetes: Annotated[
        bool,
        typer.Option(
            "--kubernetes",
            help="Read objects from a Kubernetes API server (instead of --file) and write their status "
            "back; replicas elect a leader, which writes status.",
        ),
    ] = False,
    kubeconfig: Annotated[
        Path | None,
        typer.Option(
            help="With --kubernetes: the kubeconfig to use. Default: in-cluster configuration in a pod, "
            "else $KUBECONFIG, else ~/.kube/config."
        ),
    ] = None,
    namespace: Annotated[
        list[str],
        typer.Option(
            help="With --kubernetes: read namespaced objects only in this namespace. Repeatable. "
            "Default: all namespaces. Cluster-scoped kinds are always read."
        ),
    ] = [],  # noqa: B006
    lease_namespace: Annotated[
        str | None,
        typer.Option(
            help="With --kubernetes: namespace of the leader-election Lease. Default: $POD_NAMESPACE, "
            "else the configuration's namespace (in a pod the service account's, else the kubeconfig "
            "context's, else default)."
        ),
    ] = None,
    lease_name: Annotated[str, typer.Option(help="With --kubernetes: name of the Lease.")] = "weir-leader",
    lease_duration: Annotated[
        float,
        typer.Option(
            min=1,
            help="With --kubernetes: seconds a leader's Lease lasts without renewal (renewed every "
            "2/15 of it, given up after 2/3 of it without renewal).",
        ),
    ] = 15.0,
    publish_service: Annotated[
        str | None,
        typer.Option(
            metavar="NAMESPACE/NAME",
            help="With --kubernetes: the Service in front of weir's pods; Gateways' status.addresses come "
            "from its load-balancer ingress (else its cluster IP).",
        ),
    ] = None,
    gateway_address: Annotated[
        list[str],
        typer.Option(
            metavar="ADDRESS",
            help="With --kubernetes: an address (IP or hostname) for every Gateway's status.addresses, "
            "instead of --publish-service. Repeatable.",
        ),
    ] = [],  # noqa: B006
    gateway_services: Annotated[
        str | None,
        typer.Option(
            metavar="ClusterIP|LoadBalancer",
            help="With --kubernetes and --publish-service: keep a Service of this type per Gateway, in the "
            "Gateway's namespace, carrying spec.infrastructure labels and annotations; each Gateway's "
            'status.addresses come from it (docs/kubernetes.md, "A Service per Gateway"). Needs the '
            "extra RBAC of deploy/gateway-services/.",
        ),
    ] = None,
    unready_without_election: Annotated[
        bool,
        typer.Option(
            "--unready-without-election",
            help="With --kubernetes: /ready answers 503 while leader election fails (the Lease cannot be "
            "read or written). Without it, /ready follows Envoy only (traffic is served either way; "
            "the failure is in the log, /status and the weir_kubernetes_leader_election_failing metric).",
        ),
    ] = False,
    kube_reprobe_interval: Annotated[
        float,
        typer.Option(min=0.1, hidden=True, help="Seconds between probes for a kind not installed."),
    ] = 30.0,
) -> None:
    """Serve Gateway API manifests from files and folders (reloading them when they change), or from
    a Kubernetes API server with --kubernetes."""
    import dataclasses

    from weir.controller import Controller, Options, run_until_signalled
    from weir.providers.base import Provider
    from weir.providers.files.parsecache import ParseCache
    from weir.providers.files.parsecache import default_folder as default_cache_folder
    from weir.providers.files.provider import FilesProvider
    from weir.runfolder import default_run_dir

    if access_log not in ("stdout", "log"):
        raise typer.BadParameter("--access-log must be stdout or log")
    if shutdown_delay > drain_timeout:
        raise typer.BadParameter(
            f"--shutdown-delay ({shutdown_delay:g} s) must not exceed --drain-timeout ({drain_timeout:g} s)"
        )
    if kubernetes == bool(file):
        raise typer.BadParameter(
            "give either --file (manifests in files and folders) or --kubernetes (objects from an API server)"
        )
    if not kubernetes:
        given = [
            flag
            for flag, value in (
                ("--kubeconfig", kubeconfig),
                ("--namespace", namespace),
                ("--lease-namespace", lease_namespace),
                ("--publish-service", publish_service),
                ("--gateway-address", gateway_address),
                ("--gateway-services", gateway_services),
                ("--unready-without-election", unready_without_election),
            )
            if value
        ]
        if given:
            raise typer.BadParameter(f"{', '.join(given)}: only with --kubernetes")
    _setup_logging(log_level, log_format)
    host, port = _host_port(admin_address, "--admin-address")
    settings = _settings(
        controller_name,
        bind_address,
        dns_resolver,
        system_trust_file,
        denied_cidrs=egress_denied_cidrs,
        allowed_hostnames=egress_allowed_hostnames,
    )
    provider: Provider
    if kubernetes:
        from weir.providers.kubernetes.provider import KubernetesProvider

        kube, publish, addresses = _kube_options(
            kubeconfig=kubeconfig,
            namespace=namespace,
            lease_namespace=lease_namespace,
            lease_name=lease_name,
            lease_duration=lease_duration,
            publish_service=publish_service,
            gateway_address=gateway_address,
            controller_name=controller_name,
            reprobe_interval=kube_reprobe_interval,
            unready_without_election=unready_without_election,
            gateway_services=gateway_services,
        )
        settings = dataclasses.replace(
            settings,
            publish_service=publish,
            gateway_addresses=addresses,
            gateway_services=kube.gateway_services,
        )
        provider = KubernetesProvider(kube)
    else:
        paths = [str(p) for p in file]
        parse_cache = None if no_cache else ParseCache(cache_dir or default_cache_folder(), paths)
        provider = FilesProvider(paths, parse_cache=parse_cache)
    controller = Controller(
        provider,
        settings,
        Options(
            admin_host=host,
            admin_port=port,
            envoy_log_level=envoy_log_level,
            envoy_concurrency=envoy_concurrency,
            envoy_ready_timeout_s=envoy_ready_timeout,
            envoy_access_log_to_stdout=access_log == "stdout",
            drain_timeout_s=drain_timeout,
            shutdown_delay_s=shutdown_delay,
            run_dir=str(run_dir or default_run_dir(host, port)) if run_dir or port else None,
            envoy_standby=envoy_standby,
        ),
    )
    try:
        asyncio.run(run_until_signalled(controller))
    except Exception as exc:
        err.print(f"[red]error[/red]: {exc}")
        raise typer.Exit(1) from None


@app.command()
def validate(file: Paths) -> None:
    """Check manifests against the API schemas. Exit 0 when valid, 1 when not."""
    report = load_paths(file)
    _print_problems(report)
    count = len(report.objects)
    if report.errors:
        invalid = len({(p.file, p.start or p.line, p.object) for p in report.errors})
        err.print(f"{len(report.errors)} error(s) in {invalid} invalid object(s); {count} valid")
        raise typer.Exit(1)
    out.print(f"{count} object(s) valid")


@app.command("translate")
def translate_cmd(
    file: Paths,
    output: Annotated[str, typer.Option("--output", "-o", help="yaml or json")] = "yaml",
    controller_name: ControllerName = DEFAULT_CONTROLLER_NAME,
    bind_address: Annotated[str, typer.Option(help="As for `weir run`.")] = "127.0.0.1",
    dns_resolver: Annotated[list[str], typer.Option(help="As for `weir run`.")] = [],  # noqa: B006
    egress_denied_cidrs: EgressDeniedCidrs = None,
    egress_allowed_hostnames: EgressAllowedHostnames = None,
) -> None:
    """Print every resource with the status weir computes, the IR and the Envoy resources. Starts nothing."""
    from weir.xds import build
    from weir.xds.cache import BuildCache

    if output not in ("yaml", "json"):
        raise typer.BadParameter("--output must be yaml or json")
    report = load_paths(file)
    _print_problems(report)
    resources = Resources.from_objects(item.object for item in report.objects)
    settings = _settings(
        controller_name,
        bind_address,
        dns_resolver,
        DEFAULT_SYSTEM_TRUST_FILE,
        denied_cidrs=egress_denied_cidrs,
        allowed_hostnames=egress_allowed_hostnames,
    )
    try:
        result = translate(resources, settings)
        # Written as it is made (weir.streamdump): at 10,000 routes the whole document at once
        # took gigabytes. Each Envoy resource is built (serialised, by the build cache) and turned
        # into data one at a time.
        built = BuildCache().build(result.ir)
    except Exception as exc:  # a bug: validated input must translate; say so rather than a traceback
        err.print(
            "[red]error[/red]: translation failed (a bug in weir, please report it): "
            f"{type(exc).__name__}: {escape(str(exc))}"
        )
        raise typer.Exit(2) from None
    statuses = (
        {
            "apiVersion": obj.api_version,
            "kind": obj.kind,
            "metadata": {"name": obj.name, **({"namespace": obj.namespace} if obj.namespace else {})},
            "status": result.statuses[key],
        }
        for key, obj in sorted(resources.objects.items())
        if key in result.statuses
    )
    data = LazyMap(
        [
            ("resources", LazyList(statuses)),
            ("problems", [p.to_data() for p in report.problems]),
            ("ir", _lazy_ir(result.ir)),
            (
                "envoy",
                LazyMap(
                    (
                        type_url,
                        LazyMap(
                            (name, build.resource_data(by_name[name].message())) for name in sorted(by_name)
                        ),
                    )
                    for type_url, by_name in sorted(built.items())
                ),
            ),
        ]
    )
    out = sys.stdout
    if output == "json":
        write_json(data, out.write)
    else:
        write_yaml(data, out.write, _yaml_text_c)
    if report.errors:
        raise typer.Exit(1)


@app.command()
def status(
    admin_address: Annotated[
        str, typer.Option(help="HOST:PORT of the running weir's admin endpoint.")
    ] = DEFAULT_ADMIN,
    output: Annotated[str, typer.Option("--output", "-o", help="yaml or json")] = "yaml",
) -> None:
    """Print the status of every resource a running weir manages."""
    host, port = _host_port(admin_address, "--admin-address")
    url = f"http://{host}:{port}/status"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            data = json.loads(response.read())
    except (urllib.error.URLError, OSError) as exc:
        err.print(f"[red]error[/red]: cannot reach weir at {url}: {exc}. Is `weir run` running?")
        raise typer.Exit(1) from None
    _dump(data, output)


@app.command()
def crds(
    xbackend: Annotated[
        str | None,
        typer.Option(
            "--xbackend",
            metavar="v1.6|main",
            help="Also print XBackend's CRD, in the released shape (v1.6, the default) or upstream main's "
            "(main), for a cluster without the Gateway API experimental channel (v1.6 and later install "
            "XBackend themselves: never apply both).",
        ),
    ] = None,
    test_cluster: Annotated[
        bool,
        typer.Option(
            "--test-cluster",
            help="Print a CRD for every kind weir reads, the Gateway API kinds included, from weir's "
            "own models, for an API server in tests. They keep only the fields weir reads: never "
            "apply them to a real cluster (install the Gateway API release there).",
        ),
    ] = False,
) -> None:
    """Print the CustomResourceDefinitions of weir's own kinds (weir.dev) as YAML."""
    from weir.api.crds import for_cluster, for_test_cluster, render
    from weir.api.xbackend_v1alpha1 import SHAPES

    if test_cluster:
        sys.stdout.write(render(for_test_cluster()))
        return
    if xbackend is None:
        sys.stdout.write(render(for_cluster()))
        return
    if xbackend not in SHAPES:
        err.print(f"[red]error[/red]: --xbackend {xbackend}: the shapes are {' and '.join(SHAPES)}")
        raise typer.Exit(2)
    sys.stdout.write(render(for_cluster(xbackend="main" if xbackend == "main" else "v1.6")))


@app.command()
def version() -> None:
    """Print the versions of weir and of the Envoy it runs."""
    from weir.envoy import envoy_binary

    out.print(f"weir {__version__}")
    try:
        text = subprocess.run(
            [envoy_binary(), "--version"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
        line = next((ln for ln in text.splitlines() if "version" in ln), text.strip())
        out.print(f"envoy {line.split('version:', 1)[-1].strip()}", highlight=False)
    except (OSError, subprocess.SubprocessError, RuntimeError) as exc:
        out.print(f"envoy: not available ({exc})")


@app.command()
def demo(
    keep_running: Annotated[
        bool, typer.Option(help="Keep weir and the demo upstream running until Ctrl-C.")
    ] = False,
) -> None:
    """Offline demonstration: a local TLS 'external API', a DNS stub and weir, with verified TLS."""
    from weir.demo import run_demo

    _setup_logging("warning")
    code = asyncio.run(run_demo(out, keep_running=keep_running))
    raise typer.Exit(code)


def _lazy_ir(value: ir.IR) -> LazyMap:
    """:func:`weir.ir.to_data` of an IR, its collections made one element at a time."""
    return LazyMap(
        (
            ir.camel(field.name),
            LazyList(map(ir.to_data, items)) if isinstance(items, tuple) else ir.to_data(items),
        )
        for field in dataclasses.fields(value)
        for items in (getattr(value, field.name),)
    )


def _dump(data: Any, output: str) -> None:
    if output == "json":
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    else:
        sys.stdout.write(yaml_text(data))


class _PlainDumper(yaml.SafeDumper):
    """YAML for people: a value that appears twice is written out twice.

    Statuses share equal parts (weir.translate.status.StatusInterner, the status
    store); PyYAML would write those as ``&id001`` anchors and ``*id001``
    aliases, which nobody reading ``weir translate`` wants to follow.
    """

    def ignore_aliases(self, data: Any) -> bool:
        return True


def yaml_text(data: Any, width: int = 120) -> str:
    """``data`` as the CLI writes YAML: keys in their order, no anchors or aliases."""
    return yaml.dump(data, Dumper=_PlainDumper, sort_keys=False, width=width)


class _PlainCDumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """:class:`_PlainDumper` with libyaml's emitter (when PyYAML has it): about four times faster.
    The same documents; only where a long double-quoted string folds can the text differ, so the
    golden files keep :func:`yaml_text`."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _yaml_text_c(data: Any) -> str:
    """:func:`yaml_text` for output too big to wait for (``weir translate -o yaml``)."""
    return yaml.dump(data, Dumper=_PlainCDumper, sort_keys=False, width=120)
