"""``deploy/``, the ``Containerfile`` and ``docs/kubernetes.md`` agree with weir and with Kubernetes.

No cluster here: manifests are checked against the Kubernetes API's own schemas (the
``kubernetes-validate`` package, strict: unknown fields are errors), the RBAC rules against
what weir reads (:data:`weir.providers.kubernetes.provider.WATCHED`) and the statuses it writes (the
translate golden files), container arguments and documented command lines against weir's own
CLI parser, and the Deployment's probes against a real weir serving the example manifests
through a real Envoy.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import re
import shlex
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import kubernetes_validate
import pytest
import typer
import typer.main
import yaml

from weir.api import crds, registry
from weir.cli import app
from weir.controller import Controller, Options
from weir.envoy import EnvoyProcess
from weir.loader import load_paths
from weir.providers.files.provider import FilesProvider
from weir.providers.kubernetes.api import CRD
from weir.providers.kubernetes.events import EVENT
from weir.providers.kubernetes.provider import WATCHED
from weir.providers.kubernetes.xbackend import CRD_NAME
from weir.testkit import DnsStub, RecordingUpstream, UpstreamResponse, free_port, make_ca, server_ssl_context
from weir.translate import Settings
from weir.translate.gateways import GATEWAY_API_VERSION

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
EXAMPLES = DEPLOY / "examples"
CONTAINERFILE = REPO / "Containerfile"
DOC = REPO / "docs" / "kubernetes.md"
GOLDEN = REPO / "tests" / "translate" / "testdata"

#: The Kubernetes versions the manifests are checked against: an older one still in wide use,
#: and the newest the schemas package knows.
KUBE_VERSIONS = ("1.30", kubernetes_validate.latest_version())

#: click's UsageError (NoSuchOption, BadParameter, MissingParameter...), wherever typer takes it from.
UsageError: type[Exception] = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")


# --------------------------------------------------------------------------- loading


def load_documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def manifest_files() -> list[Path]:
    return sorted(p for p in DEPLOY.glob("*.yaml") if p.name != "kustomization.yaml")


def all_objects() -> list[dict[str, Any]]:
    return [d for path in manifest_files() for d in load_documents(path)]


def the(kind: str) -> dict[str, Any]:
    """The one object of ``kind`` in ``deploy/``."""
    found = [d for d in all_objects() if d["kind"] == kind]
    assert len(found) == 1, f"deploy/ should hold exactly one {kind}, found {len(found)}"
    return found[0]


def container() -> dict[str, Any]:
    (only,) = the("Deployment")["spec"]["template"]["spec"]["containers"]
    result: dict[str, Any] = only
    return result


def expand(arg: str, env: dict[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion of container arguments (``$$`` escapes a ``$``)."""
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: "$" if m[0] == "$$" else env[m[1]], arg)


def container_args() -> list[str]:
    """The container's arguments as the kubelet hands them over (downward API values filled in)."""
    deployment = the("Deployment")
    env: dict[str, str] = {}
    for var in container().get("env", []):
        if "value" in var:
            env[var["name"]] = var["value"]
        else:
            field = var["valueFrom"]["fieldRef"]["fieldPath"]
            env[var["name"]] = {
                "metadata.namespace": deployment["metadata"]["namespace"],
                "metadata.name": "weir-7d9f8b6c5d-x2x4z",
            }[field]
    return [expand(a, env) for a in container()["args"]]


def parse_cli(argv: list[str]) -> dict[str, Any]:
    """Parse ``weir ARGV`` as the ``weir`` command does (types, ranges, unknown options), running nothing.

    Raises click's ``UsageError`` for what ``weir`` would refuse with a usage message.
    """
    group = typer.main.get_command(app)
    name, *rest = argv
    command = group.commands[name]  # type: ignore[attr-defined]
    with command.make_context(name, list(rest)) as ctx:
        params: dict[str, Any] = dict(ctx.params)
    return params


def option(argv: list[str], name: str) -> str:
    """The value of ``--name`` in ``argv`` (``--name=value`` or ``--name value``)."""
    for i, arg in enumerate(argv):
        if arg.startswith(f"{name}="):
            return arg.partition("=")[2]
        if arg == name:
            return argv[i + 1]
    raise AssertionError(f"{name} is not in {argv}")


# --------------------------------------------------------------------------- files and schemas


def test_every_manifest_parses_and_fits_the_kubernetes_api_schema() -> None:
    files = manifest_files()
    assert len(files) >= 7
    kinds = set()
    for path in files:
        documents = load_documents(path)
        assert documents, f"{path.name} holds no object"
        for doc in documents:
            kinds.add(doc["kind"])
            for version in KUBE_VERSIONS:
                try:
                    kubernetes_validate.validate(doc, version, strict=True)
                except kubernetes_validate.ValidationError as exc:
                    pytest.fail(
                        f"{path.name}: {doc['kind']} {doc['metadata']['name']} (Kubernetes {version}): {exc}"
                    )
    assert kinds == {
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Deployment",
        "Service",
        "PodDisruptionBudget",
    }


def test_the_schema_check_catches_a_misspelt_field() -> None:
    pdb = the("PodDisruptionBudget")
    pdb["spec"]["minAvailabel"] = pdb["spec"].pop("minAvailable")
    with pytest.raises(kubernetes_validate.ValidationError, match="minAvailabel"):
        kubernetes_validate.validate(pdb, KUBE_VERSIONS[0], strict=True)


def test_kustomization_lists_every_manifest() -> None:
    (kustomization,) = load_documents(DEPLOY / "kustomization.yaml")
    assert kustomization["kind"] == "Kustomization"
    listed = kustomization["resources"]
    assert len(listed) == len(set(listed))
    assert sorted(listed) == [p.name for p in manifest_files()]
    (image,) = kustomization["images"]
    assert image["name"] == container()["image"], (
        "the kustomization's image does not replace the Deployment's"
    )


def test_namespaced_objects_live_in_the_namespace() -> None:
    namespace = the("Namespace")["metadata"]["name"]
    for doc in all_objects():
        if doc["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding"):
            assert doc["metadata"].get("namespace") == namespace, f"{doc['kind']} {doc['metadata']['name']}"


# --------------------------------------------------------------------------- RBAC

Grant = tuple[str, str, str]  # (API group, resource, verb)


def grants(role: dict[str, Any]) -> dict[Grant, tuple[str, ...] | None]:
    """Every (group, resource, verb) ``role`` grants → its resourceNames (``None``: any name)."""
    out: dict[Grant, tuple[str, ...] | None] = {}
    for rule in role["rules"]:
        assert "nonResourceURLs" not in rule, f"{role['metadata']['name']}: nonResourceURLs"
        for field in ("apiGroups", "resources", "verbs", "resourceNames"):
            assert "*" not in rule.get(field, []), f"{role['metadata']['name']}: '*' in {field}: {rule}"
        names = tuple(rule["resourceNames"]) if "resourceNames" in rule else None
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    assert (group, resource, verb) not in out, f"granted twice: {(group, resource, verb)}"
                    out[group, resource, verb] = names
    return out


def status_kinds_written() -> set[str]:
    """Every kind translation writes a status for, in the translate golden files.

    Their ``status:`` section maps ``Kind namespace/name`` (or ``Kind name``) to the status,
    two spaces in, before the ``ir:`` section.
    """
    kinds = set()
    for path in GOLDEN.glob("*.out.yaml"):
        text = path.read_text()
        assert text.startswith("status:"), path.name
        section = text.partition("\nir:")[0]
        kinds.update(re.findall(r"^  ([A-Z][A-Za-z]+) [^\s:]+:(?: \{\})?$", section, re.MULTILINE))
    return kinds


#: The one object weir creates: Events about what it reports on (weir.providers.kubernetes.events).
EVENTS = (EVENT.group, EVENT.plural, "create")
#: The one object weir reads without watching its kind: XBackend's CRD, for its status's shape.
XBACKEND_CRD = (CRD.group, CRD.plural, "get")
#: The headless Services of EndpointSelector XBackends (weir.providers.kubernetes.selector).
SELECTOR_SERVICES = {("", "services", "create"), ("", "services", "delete")}


def test_clusterrole_reads_every_kind_weir_watches_and_nothing_else() -> None:
    granted = grants(the("ClusterRole"))
    reads = {(g, r) for (g, r, v) in granted if "/" not in r and (g, r, v) not in (EVENTS, XBACKEND_CRD)}
    watched = {(k.group, k.plural) for k in WATCHED}
    assert reads == watched, (
        f"missing: {sorted(watched - reads)}; not watched by weir: {sorted(reads - watched)}"
    )
    for group, resource in watched:
        verbs = {
            v for (g, r, v) in granted if (g, r) == (group, resource) and (g, r, v) not in SELECTOR_SERVICES
        }
        assert verbs == {"get", "list", "watch"}, f"{group}/{resource}: {sorted(verbs)}"
        assert granted[group, resource, "list"] is None  # cluster-wide, every name


def test_watched_kinds_are_the_kinds_weir_reads() -> None:
    """WATCHED follows the registry: a kind weir reads in files, it reads in a cluster (RBAC grants it)."""
    assert {(k.group, k.kind) for k in WATCHED} == {
        (m.API_VERSION.rpartition("/")[0], m.KIND) for m in registry.MODELS
    }


def test_clusterrole_patches_only_the_status_of_what_weir_reports_on() -> None:
    granted = grants(the("ClusterRole"))
    assert EVENTS in granted
    assert set(granted) >= SELECTOR_SERVICES
    writes = {
        (g, r, v)
        for (g, r, v) in granted
        if v not in ("get", "list", "watch") and (g, r, v) != EVENTS and (g, r, v) not in SELECTOR_SERVICES
    }
    assert granted[XBACKEND_CRD] == (CRD_NAME,), "one CRD, by name"
    assert not [g for g in granted if g[:2] == XBACKEND_CRD[:2] and g != XBACKEND_CRD], "get only"
    assert writes, "no status write granted"
    by_kind = {k.kind: k for k in WATCHED}
    written = status_kinds_written()
    assert {"GatewayClass", "Gateway", "HTTPRoute", "XBackend"} <= written  # the golden files cover them
    expected = {(by_kind[kind].group, f"{by_kind[kind].plural}/status") for kind in written}
    assert {(g, r) for (g, r, v) in writes} == expected
    for group, resource, verb in writes:
        assert resource.endswith("/status") and verb in ("patch", "update"), (group, resource, verb)
        assert group in ("gateway.networking.k8s.io", "gateway.networking.x-k8s.io", "weir.dev")
    for group, resource, verb in granted:
        if resource.endswith("/status"):
            assert verb in ("patch", "update"), f"{group}/{resource}: {verb}"
    assert "ReferenceGrant" not in written and "GatewayClassConfig" not in written


def test_no_role_writes_secrets_or_touches_leases_cluster_wide() -> None:
    for kind in ("ClusterRole", "Role"):
        for group, resource, verb in grants(the(kind)):
            if group == "" and resource.startswith("secrets"):
                assert verb in ("get", "list", "watch"), f"{kind} grants {verb} on {resource}"
    assert not [g for g in grants(the("ClusterRole")) if g[0] == "coordination.k8s.io"]


def test_role_grants_the_lease_weir_uses_in_its_namespace_only() -> None:
    role = the("Role")
    assert role["metadata"]["namespace"] == the("Deployment")["metadata"]["namespace"]
    granted = grants(role)
    assert {(g, r) for (g, r, _) in granted} == {("coordination.k8s.io", "leases")}
    assert {v for (_, _, v) in granted} == {"get", "create", "update"}
    lease = option(container_args(), "--lease-name")
    assert granted["coordination.k8s.io", "leases", "create"] is None  # a name cannot limit create
    for verb in ("get", "update"):
        assert granted["coordination.k8s.io", "leases", verb] == (lease,)


def test_bindings_give_the_roles_to_the_pods_service_account() -> None:
    deployment = the("Deployment")
    account = the("ServiceAccount")["metadata"]
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == account["name"]
    subject = {"kind": "ServiceAccount", "name": account["name"], "namespace": account["namespace"]}
    for binding, role in (("ClusterRoleBinding", "ClusterRole"), ("RoleBinding", "Role")):
        doc = the(binding)
        assert doc["subjects"] == [subject]
        assert doc["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": role,
            "name": the(role)["metadata"]["name"],
        }


# --------------------------------------------------------------------------- the Deployment


def test_container_arguments_parse_with_weirs_cli() -> None:
    args = container_args()
    params = parse_cli(args)
    assert args[0] == "run" and params["kubernetes"] is True
    assert params["bind_address"] == "0.0.0.0"
    service = the("Service")["metadata"]
    assert params["publish_service"] == f"{service['namespace']}/{service['name']}"
    cpu_limit = float(container()["resources"]["limits"]["cpu"])
    assert params["envoy_concurrency"] <= cpu_limit


def test_the_cli_check_refuses_what_weir_refuses() -> None:
    with pytest.raises(UsageError):
        parse_cli([*container_args(), "--no-such-option"])
    with pytest.raises(UsageError):
        parse_cli([*container_args(), "--envoy-concurrency=0"])


def test_downward_api_gives_weir_its_pod_name_and_namespace() -> None:
    env = {v["name"]: v for v in container()["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"


def admin_port() -> int:
    host, _, port = option(container_args(), "--admin-address").rpartition(":")
    assert host == "0.0.0.0", "the kubelet probes the pod IP: admin must not bind loopback only"
    return int(port)


def probe_paths() -> dict[str, str]:
    """Probe name → path, after checking that each probes the admin port over HTTP."""
    ports = {p["name"]: p["containerPort"] for p in container()["ports"]}
    paths = {}
    for name in ("startupProbe", "livenessProbe", "readinessProbe"):
        get = container()[name]["httpGet"]
        port = ports[get["port"]] if isinstance(get["port"], str) else get["port"]
        assert port == admin_port(), f"{name} probes port {port}, weir's admin endpoint is on {admin_port()}"
        assert get.get("scheme", "HTTP") == "HTTP"
        paths[name] = get["path"]
    return paths


def test_probes_use_weirs_health_and_readiness_paths() -> None:
    assert probe_paths() == {
        "startupProbe": "/healthz",
        "livenessProbe": "/healthz",
        "readinessProbe": "/ready",
    }


def test_two_replicas_spread_and_protected_by_the_pdb() -> None:
    deployment = the("Deployment")
    spec = deployment["spec"]
    labels = spec["template"]["metadata"]["labels"]
    assert spec["replicas"] == 2
    assert spec["selector"]["matchLabels"].items() <= labels.items()
    assert spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    for constraint in spec["template"]["spec"]["topologySpreadConstraints"]:
        assert constraint["labelSelector"]["matchLabels"].items() <= labels.items()
    pdb = the("PodDisruptionBudget")["spec"]
    assert pdb["minAvailable"] == 1 < spec["replicas"]
    assert pdb["selector"]["matchLabels"].items() <= labels.items()
    assert pdb["selector"]["matchLabels"] == spec["selector"]["matchLabels"]


def test_pod_runs_non_root_on_a_read_only_filesystem_with_a_writable_tmpdir() -> None:
    pod = the("Deployment")["spec"]["template"]["spec"]
    security = container()["securityContext"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert security == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    # weir's run directory comes from tempfile.mkdtemp: under TMPDIR, which must be writable.
    tmpdir = {v["name"]: v.get("value") for v in container()["env"]}["TMPDIR"]
    mounts = {m["mountPath"]: m["name"] for m in container()["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[mounts[tmpdir]]
    assert len(tmpdir) + len("/weir-XXXXXXXX/xds.sock") < 108, "unix socket paths are limited to 107 bytes"


def test_ports_below_1024_are_allowed_by_the_sysctl_not_by_a_capability() -> None:
    low = [p["port"] for p in the("Service")["spec"]["ports"] if p["targetPort"] < 1024]
    sysctls = {
        s["name"]: int(s["value"])
        for s in the("Deployment")["spec"]["template"]["spec"]["securityContext"]["sysctls"]
    }
    assert low, "the example publishes port 80"
    assert sysctls["net.ipv4.ip_unprivileged_port_start"] <= min(low)
    assert "add" not in container()["securityContext"]["capabilities"]


def test_resources_are_sized_and_grace_period_covers_the_drain() -> None:
    resources = container()["resources"]
    assert set(resources) == {"requests", "limits"}
    assert set(resources["requests"]) == set(resources["limits"]) == {"cpu", "memory"}

    def mib(quantity: str) -> float:
        units = {"Mi": 1.0, "Gi": 1024.0}
        return float(quantity[:-2]) * units[quantity[-2:]]

    # docs/performance.md: weir + Envoy ≈ 275 MiB at 1,000 routes; the limit leaves room for growth.
    assert 256 <= mib(resources["requests"]["memory"]) <= mib(resources["limits"]["memory"])
    assert mib(resources["limits"]["memory"]) >= 1024
    # weir's graceful stop replaces a preStop sleep: it must fit in the grace period.
    assert "lifecycle" not in container()
    delay = float(option(container_args(), "--shutdown-delay"))
    drain = float(option(container_args(), "--drain-timeout"))
    stop_timeout = inspect.signature(EnvoyProcess).parameters["stop_timeout"].default
    grace = the("Deployment")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert 5 <= delay <= drain and grace >= drain + stop_timeout + 5


# --------------------------------------------------------------------------- Service and examples


def example_objects() -> list[dict[str, Any]]:
    return [d for path in sorted(EXAMPLES.glob("*.yaml")) for d in load_documents(path)]


def test_examples_are_valid_and_use_weirs_gateway_class() -> None:
    report = load_paths([EXAMPLES])
    assert not report.problems, [str(p) for p in report.problems]
    assert {item.object.kind for item in report.objects} == {
        "GatewayClass",
        "Gateway",
        "HTTPRoute",
        "XBackend",
    }
    (gateway_class,) = [d for d in example_objects() if d["kind"] == "GatewayClass"]
    assert gateway_class["spec"]["controllerName"] == "weir.dev/gateway-controller"


def test_service_publishes_the_example_listener_ports_to_the_pods() -> None:
    service = the("Service")
    spec = service["spec"]
    assert spec["type"] == "LoadBalancer"
    labels = the("Deployment")["spec"]["template"]["metadata"]["labels"]
    assert spec["selector"].items() <= labels.items()
    listener_ports = {
        listener["port"]
        for d in example_objects()
        if d["kind"] == "Gateway"
        for listener in d["spec"]["listeners"]
    }
    assert {p["port"] for p in spec["ports"]} == listener_ports
    for port in spec["ports"]:
        assert port["targetPort"] == port["port"], "Envoy binds the listener's port in the pod"
    assert admin_port() not in {p["port"] for p in spec["ports"]}, "the admin endpoint must not be published"


async def test_probes_answer_on_a_running_weir_serving_the_examples(tmp_path: Path) -> None:
    """The examples served by a real weir and Envoy: the probe paths answer 200, a request gets through.

    As in a pod, except for addresses: everything on 127.0.0.1, the Gateway's port and the
    XBackend's destination port moved to free ones, www.example.com resolved by a DNS stub to
    a local TLS server whose certificate a throw-away CA signed (the "system" trust store here).
    """
    ca = make_ca()
    ca_file = ca.write(tmp_path)
    cert = ca.issue_server_cert("www.example.com")
    upstream = RecordingUpstream(
        "www.example.com",
        ssl_context=server_ssl_context(cert),
        handler=UpstreamResponse(body=b"Example Domain"),
    )
    await upstream.start()
    dns = DnsStub()
    dns.set("www.example.com", ["127.0.0.1"])
    await dns.start()
    gateway_port = free_port()
    folder = tmp_path / "manifests"
    folder.mkdir()
    for doc in example_objects():
        if doc["kind"] == "Gateway":
            for listener in doc["spec"]["listeners"]:
                listener["port"] = gateway_port
        if doc["kind"] == "XBackend":
            doc["spec"]["port"]["port"] = upstream.port
        (folder / f"{doc['kind'].lower()}.yaml").write_text(yaml.safe_dump(doc))
    settings = Settings(
        bind_address="127.0.0.1",
        dns_resolvers=(dns.address,),
        system_trust_file=str(ca_file),
        egress_denied_cidrs=(),  # the guard would refuse loopback, where the "external" server is
    )
    controller = Controller(
        FilesProvider([str(folder)]), settings, Options(admin_host="127.0.0.1", admin_port=0)
    )
    envoy_pid = None
    try:
        await controller.start()
        await asyncio.wait_for(controller.ready.wait(), 30)
        assert controller.envoy is not None
        envoy_pid = controller.envoy.pid
        admin = f"http://127.0.0.1:{controller.admin_port}"
        async with httpx.AsyncClient(timeout=5) as client:
            for name, path in probe_paths().items():
                for _ in range(100):
                    response = await client.get(admin + path)
                    if response.status_code == 200:
                        break
                    await asyncio.sleep(0.1)
                assert response.status_code == 200, f"{name} {path}: {response.status_code} {response.text}"
            assert (await client.get(admin + "/no-such-path")).status_code == 404
            response = await client.get(f"http://127.0.0.1:{gateway_port}/")
        assert response.status_code == 200, response.text
        assert response.content == b"Example Domain"
        (seen,) = upstream.requests
        assert (seen.host, seen.sni) == ("www.example.com", "www.example.com")
    finally:
        await controller.stop()
        await dns.stop()
        await upstream.stop()
    assert envoy_pid is not None
    with pytest.raises(ProcessLookupError):
        os.kill(envoy_pid, 0)  # stopped by the controller, by PID


# --------------------------------------------------------------------------- in Kubernetes mode


def with_option(argv: list[str], name: str, value: str) -> list[str]:
    """``argv`` with ``--name``'s value replaced (written ``--name=value``)."""
    out = [
        a for i, a in enumerate(argv) if not (a == name or a.startswith(f"{name}=") or argv[i - 1] == name)
    ]
    return [*out, f"{name}={value}"]


def request_verb(method: str, path: str) -> tuple[str, str, str, str | None, str | None]:
    """``(group, resource, verb, namespace, name)`` of an API request, as RBAC sees it."""
    route, _, query = path.partition("?")
    match = re.match(
        r"^/(?:api/v1|apis/([^/]+)/[^/]+)(?:/namespaces/([^/]+))?/([^/]+)(?:/([^/]+))?(/status)?$", route
    )
    assert match, f"not a resource request: {method} {path}"
    group, namespace, resource, name, status = match.groups()
    if resource == "namespaces" and namespace and not name:  # GET /api/v1/namespaces/NAME
        resource, name, namespace = "namespaces", namespace, None
    writes = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
    verb = writes.get(method) or (
        "watch" if re.search(r"(^|&)watch=(true|1)", query) else "get" if name else "list"
    )
    return group or "", resource + (status or ""), verb, namespace, name


def allowed(group: str, resource: str, verb: str, namespace: str | None, name: str | None) -> bool:
    """Whether the ClusterRole, or the Role in its namespace, lets the ServiceAccount do this."""
    cluster = grants(the("ClusterRole"))
    if (group, resource, verb) in cluster:
        names = cluster[group, resource, verb]
        return names is None or name in names
    role = the("Role")
    namespaced = grants(role)
    if namespace != role["metadata"]["namespace"] or (group, resource, verb) not in namespaced:
        return False
    names = namespaced[group, resource, verb]
    return names is None or name in names


async def test_rbac_allows_every_request_weir_makes_in_the_pod() -> None:
    """weir run with the Deployment's arguments against the API-server double: it reads every kind,
    elects itself, writes status, answers its probes, and RBAC allows each request it made."""
    from apiserver_double import ApiServerDouble

    run_dir = Path(tempfile.mkdtemp(prefix="weir-", dir="/tmp"))  # short: unix socket paths
    dns = DnsStub()  # empty: www.example.com is NXDOMAIN, and no query leaves loopback
    await dns.start()
    api = ApiServerDouble()
    api.start()
    process: asyncio.subprocess.Process | None = None
    try:
        deployment = the("Deployment")
        namespace = deployment["metadata"]["namespace"]
        for ns in sorted(
            {namespace, *(d["metadata"].get("namespace", "default") for d in example_objects())}
        ):
            api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        service = api.create(the("Service"))
        service["status"] = {"loadBalancer": {"ingress": [{"ip": "203.0.113.10"}]}}
        api.replace_status(service)
        gateway_port = free_port()
        for doc in example_objects():
            if doc["kind"] == "Gateway":
                for listener in doc["spec"]["listeners"]:
                    listener["port"] = gateway_port
            api.create(doc)
        admin = free_port()
        args = with_option(container_args(), "--bind-address", "127.0.0.1")
        args = with_option(args, "--admin-address", f"127.0.0.1:{admin}")
        args += ["--kubeconfig", str(api.write_kubeconfig(run_dir / "kubeconfig"))]
        args += ["--dns-resolver", f"{dns.host}:{dns.port}"]
        env = {
            **os.environ,
            "TMPDIR": str(run_dir),
            "POD_NAME": "weir-7d9f8b6c5d-x2x4z",
            "POD_NAMESPACE": namespace,
        }
        env.pop("KUBERNETES_SERVICE_HOST", None)
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-c", "from weir.cli import main; main()", *args,
            env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        gateway: dict[str, Any] = {}
        for _ in range(300):
            gateway = api.get("gateway.networking.k8s.io/v1", "Gateway", "default", "egress") or {}
            conditions = {c["type"]: c["status"] for c in gateway.get("status", {}).get("conditions", [])}
            if conditions.get("Programmed") == "True":
                break
            assert process.returncode is None, f"weir exited with {process.returncode}"
            await asyncio.sleep(0.1)
        assert gateway["status"]["addresses"] == [{"type": "IPAddress", "value": "203.0.113.10"}]
        lease = api.get("coordination.k8s.io/v1", "Lease", namespace, option(args, "--lease-name"))
        assert lease is not None and lease["spec"]["holderIdentity"].startswith("weir-7d9f8b6c5d-x2x4z")
        async with httpx.AsyncClient(timeout=5) as client:
            for name, path in probe_paths().items():
                response = await client.get(f"http://127.0.0.1:{admin}{path}")
                assert response.status_code == 200, f"{name} {path}: {response.status_code}"
            envoy_pid = (await client.get(f"http://127.0.0.1:{admin}/status")).json()["dataPlane"]["envoyPid"]
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), 20) == 0
        with pytest.raises(ProcessLookupError):
            os.kill(envoy_pid, 0)
    finally:
        if process is not None and process.returncode is None:
            process.kill()
            await process.wait()
        api.stop()
        await dns.stop()
        shutil.rmtree(run_dir, ignore_errors=True)
    made = {request_verb(method, path) for method, path in api.requests if not path.startswith("/version")}
    denied = sorted((r for r in made if not allowed(*r)), key=str)
    assert not denied, f"requests the RBAC manifests would refuse: {denied}"
    verbs = {(g, r, v) for g, r, v, _, _ in made}
    for kind in WATCHED:
        assert {(kind.group, kind.plural, "list"), (kind.group, kind.plural, "watch")} <= verbs, kind
    assert ("gateway.networking.k8s.io", "gateways/status", "patch") in verbs
    assert XBACKEND_CRD in verbs  # the shape of XBackend status, read from its CRD
    assert ("coordination.k8s.io", "leases", "create") in verbs


def test_the_rbac_check_refuses_what_the_roles_do_not_grant() -> None:
    assert allowed("gateway.networking.k8s.io", "gateways/status", "patch", "default", "egress")
    assert not allowed("gateway.networking.k8s.io", "gateways", "patch", "default", "egress")
    assert not allowed("", "secrets", "create", "default", None)
    assert not allowed("coordination.k8s.io", "leases", "update", "default", "weir-leader")
    assert not allowed("coordination.k8s.io", "leases", "update", "weir-system", "another-lease")
    assert allowed("coordination.k8s.io", "leases", "update", "weir-system", "weir-leader")
    assert request_verb(
        "GET", "/apis/gateway.networking.k8s.io/v1/gateways?watch=true&resourceVersion=5"
    ) == (
        "gateway.networking.k8s.io",
        "gateways",
        "watch",
        None,
        None,
    )
    assert request_verb("PATCH", "/apis/gateway.networking.k8s.io/v1/namespaces/a/gateways/b/status")[2:] == (
        "patch",
        "a",
        "b",
    )


# --------------------------------------------------------------------------- Containerfile


def containerfile_instructions() -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` of the Containerfile, continuation lines joined."""
    text = re.sub(r"\\\n", " ", CONTAINERFILE.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            instruction, _, rest = line.partition(" ")
            out.append((instruction.upper(), rest.strip()))
    return out


def test_containerfile_runs_the_weir_console_script_as_non_root() -> None:
    instructions = containerfile_instructions()
    last = {name: args for name, args in instructions}
    assert json.loads(last["ENTRYPOINT"]) == ["weir"]
    pyproject = (REPO / "pyproject.toml").read_text()
    assert re.search(r'^weir = "weir\.cli:main"$', pyproject, re.MULTILINE), "no `weir` console script"
    cmd = json.loads(last["CMD"])
    assert parse_cli(cmd)["kubernetes"] is True
    user = last["USER"].split(":")[0]
    assert user.isdigit() and int(user) != 0, "a numeric non-root user lets the kubelet check runAsNonRoot"
    assert int(user) == the("Deployment")["spec"]["template"]["spec"]["securityContext"]["runAsUser"]
    args = [a for n, a in instructions if n == "ARG"]
    assert any(re.match(r"PYTHON_IMAGE=\S*python:3\.11-slim", a) for a in args)
    runs = " ".join(a for n, a in instructions if n == "RUN")
    assert re.search(r"pip install /src\b", runs)
    copied = " ".join(a for n, a in instructions if n == "COPY")
    ignore = (REPO / ".containerignore").read_text().splitlines()
    for needed in ("pyproject.toml", "README.md", "src"):
        assert needed in copied
        assert f"!{needed}" in ignore or f"!{needed}/" in ignore, f".containerignore leaves out {needed}"


# --------------------------------------------------------------------------- CRDs


def crd_documents(*args: str) -> list[dict[str, Any]]:
    from typer.testing import CliRunner

    result = CliRunner().invoke(app, ["crds", *args])
    assert result.exit_code == 0, result.output
    return [d for d in yaml.safe_load_all(result.stdout) if d is not None]


def test_weir_crds_leaves_xbackend_to_the_gateway_api_release() -> None:
    """The experimental channel installs xbackends.gateway.networking.x-k8s.io; weir must not fight it."""
    default = {d["metadata"]["name"] for d in crd_documents()}
    assert default and all(name.endswith(".weir.dev") for name in default)
    everything = {d["metadata"]["name"] for d in crd_documents("--xbackend", "v1.6")}
    assert everything - default == {"xbackends.gateway.networking.x-k8s.io"}
    assert {crds.crd(r)["metadata"]["name"] for r in crds.for_cluster()} == default


def walk(node: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for name, sub in node.get("properties", {}).items():
        yield from walk(sub, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from walk(node["additionalProperties"], f"{path}{{}}")


@pytest.mark.parametrize("crd", crd_documents("--xbackend", "v1.6"), ids=lambda d: d["metadata"]["name"])
def test_crds_are_valid_apiextensions_v1(crd: dict[str, Any]) -> None:
    for version in KUBE_VERSIONS:
        kubernetes_validate.validate(crd, version, strict=True)
    spec = crd["spec"]
    names = spec["names"]
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["metadata"]["name"] == f"{names['plural']}.{spec['group']}"
    label = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
    assert label.match(names["plural"]) and label.match(names["singular"])
    assert re.match(r"^[A-Z][A-Za-z0-9]*$", names["kind"]) and names["listKind"] == names["kind"] + "List"
    assert names["singular"] == names["kind"].lower()
    model = next(m for m in registry.MODELS if names["kind"] == m.KIND)
    assert spec["scope"] == ("Namespaced" if model.NAMESPACED else "Cluster")
    assert [v["name"] for v in spec["versions"] if v["storage"]] == [model.API_VERSION.rpartition("/")[2]]
    for version in spec["versions"]:
        assert version["served"] is True
        schema = version["schema"]["openAPIV3Schema"]
        # Structural: a type on every node; metadata left to the API server; no combinators or refs.
        assert schema["properties"]["metadata"] == {"type": "object"}
        for path, node in walk(schema, "openAPIV3Schema"):
            assert "type" in node, f"{path} has no type"
            assert not {"$ref", "anyOf", "oneOf", "allOf", "not", "nullable"} & node.keys(), path
        has_status = "status" in schema["properties"]
        assert ("status" in version.get("subresources", {})) == has_status


# --------------------------------------------------------------------------- docs/kubernetes.md


def doc_weir_commands() -> list[list[str]]:
    """Every ``weir ...`` command line in the doc's shell blocks (pipelines and ``&&`` split)."""
    text = DOC.read_text()
    commands = []
    for block in re.findall(r"```(?:sh|console)\n(.*?)```", text, re.DOTALL):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            line = line.strip().removeprefix("$ ")
            for part in re.split(r"\|\||&&|\||;", line.split("  #")[0]):
                words = shlex.split(part, comments=True)
                if words and words[0] == "weir":
                    commands.append(words[1:])
    return commands


def test_every_weir_command_in_the_doc_parses() -> None:
    commands = doc_weir_commands()
    assert ["crds"] in commands and ["crds", "--xbackend", "v1.6"] in commands
    for argv in commands:
        try:
            parse_cli(argv)
        except UsageError as exc:
            pytest.fail(f"docs/kubernetes.md: `weir {shlex.join(argv)}`: {exc}")


def test_the_doc_shows_the_deployments_command_line() -> None:
    assert container_args() in doc_weir_commands()


def test_the_doc_installs_the_gateway_api_release_weir_implements() -> None:
    text = DOC.read_text()
    urls = re.findall(
        r"https://github\.com/kubernetes-sigs/gateway-api/releases/download/(v[0-9.]+)/(\S+)", text
    )
    assert urls
    for version, name in urls:
        assert version.startswith(GATEWAY_API_VERSION + "."), version
        assert name == "experimental-install.yaml"
    assert "kubectl apply --server-side -f https://github.com/kubernetes-sigs/gateway-api" in text


def test_the_doc_names_every_manifest_and_flag_of_the_contract() -> None:
    text = DOC.read_text()
    for path in manifest_files():
        assert f"`{path.name}`" in text, path.name
    for flag in (
        "--kubernetes",
        "--kubeconfig",
        "--namespace",
        "--lease-namespace",
        "--lease-name",
        "--publish-service",
        "--gateway-address",
    ):
        assert f"`{flag}" in text, flag
        parse_cli(["run", "--kubernetes", *([flag] if flag == "--kubernetes" else [flag, "x"])])
