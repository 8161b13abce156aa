"""A Gateway API conformance-style harness for weir in standalone mode.

The world a module gets (one weir per module, see ``conftest.py``):

* the namespaces ``gateway-conformance-infra``, ``-app-backend`` and
  ``-web-backend`` (labelled as upstream: ``gateway-conformance: infra`` or
  ``backend``), the GatewayClass :data:`GATEWAY_CLASS` and the Gateways
  ``same-namespace`` (routes from its namespace), ``all-namespaces`` and
  ``backend-namespaces`` (namespaces labelled ``backend``), each with a
  listener ``http`` on port 80;
* every Gateway on its own loopback address, 127.0.1.x, through
  ``spec.addresses`` (:meth:`Conformance.apply` adds one to each Gateway
  that has none, so case manifests stay as a user would write them);
* the Services ``infra-backend-v1/v2/v3``, ``app-backend-v1/v2`` and
  ``web-backend`` (port 8080; ``infra-backend-v1`` also 8081 with
  ``appProtocol: kubernetes.io/h2c`` and 8082 with ``kubernetes.io/ws``),
  with EndpointSlices whose endpoints are distinct loopback addresses,
  127.0.2.x, one :class:`~weir.testkit.EchoHttpServer` per endpoint ("pod",
  named ``<service>-<n>``), speaking HTTP/1.1, h2c and WebSocket on one port;
  optionally TLS backends (``tls-backend``, ``backendtlspolicy-test``),
  gRPC backends (``grpc-infra-backend-v1/v2/v3``) and UDP backends
  (``l4-backend``, UDP port 53, in the infra and app-backend namespaces: each
  pod answers a datagram with the JSON of its identity, :class:`UdpEchoServer`);
* TLS Secrets and a CA ConfigMap signed by a CA made for the module.

Manifests are applied by writing files into the folder weir watches.
:meth:`Conformance.apply` returns once weir has served them: the file is
followed by a marker object whose version the harness waits to see handed
to the controller, then for Envoy to accept the configuration and for the
statuses of that translation to be published. Requests then need only a
short window of eventual consistency (:meth:`Conformance.expect`).

A case is data (:mod:`cases`, re-exported here): manifests, status
expectations (:class:`RouteStatus`, :class:`GatewayStatus`,
:class:`PolicyStatus`, :class:`ObjectStatus`), exchanges (:class:`Request` →
:class:`Expect`: backend, status code, headers, redirect, what the backend
saw) and later steps (:class:`Step`); :func:`run_case` carries it out. A case
whose feature weir does not implement yet names it in ``pending``: it is a
strict xfail until it passes.

Gateways listen on the ports their manifests say when this process may bind
them (root, in CI containers); otherwise every listener port (and a
``parentRef`` port) is mapped to a free high port, the same one for each use
of a number in a module (:meth:`Conformance.listener_port`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
import shutil
import socket
import ssl
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

import httpx
import yaml

from echo_grpc import GrpcEchoServer
from weir.controller import Controller, Options
from weir.providers.files.provider import FilesProvider, Snapshot
from weir.testkit import (
    CertAuthority,
    EchoHttpServer,
    EchoIdentity,
    EchoRequest,
    IssuedCert,
    client_ssl_context,
    make_ca,
    server_ssl_context,
)
from weir.translate import Settings

from .cases import (  # the case vocabulary, re-exported: test modules import it all from here
    INFRA_NS,
    Case,
    CondSpec,
    Exchange,
    Expect,
    GatewayStatus,
    ListenerStatus,
    Manifests,
    ObjectStatus,
    PolicyStatus,
    Redirect,
    Request,
    RouteStatus,
    Seen,
    StatusCheck,
    Step,
    ok,
    params,
    pending_marks,
    single_rule_route,
    status,
)

log = logging.getLogger("conformance")

APP_NS = "gateway-conformance-app-backend"
WEB_NS = "gateway-conformance-web-backend"
GATEWAY_CLASS = "gateway-conformance"
CONTROLLER = Settings().controller_name
GROUP = "gateway.networking.k8s.io"

GATEWAY_NET = "127.0.1."
POD_NET = "127.0.2."
#: Fixed addresses of the base Gateways; others get .10 and up, in order of first use.
BASE_GATEWAYS = {"same-namespace": 1, "all-namespaces": 2, "backend-namespaces": 3}
#: Port every echo server tries first (each has its own address, so all can share it).
ECHO_PORT = 3000

#: Client certificates (``Request.client_cert``), each issued by its own CA; each CA's
#: certificate is in a ConfigMap (key ``ca.crt``) named in the value, in the infra namespace,
#: as the upstream suite's ``tls-validity-checks-ca-certificate`` (and a per-port one).
CLIENT_CERTIFICATES = {
    "tls-validity-checks-client-certificate": "tls-validity-checks-ca-certificate",
    "tls-validity-checks-per-port-client-certificate": "tls-validity-checks-per-port-ca-certificate",
    # What a Gateway presents to backends (spec.tls.backend); also a Secret of that name.
    "tls-checks-client-certificate": "tls-checks-client-ca-certificate",
}

#: The hostnames the module's TLS certificates are issued for.
TLS_CERTIFICATES: dict[tuple[str, str], tuple[str, ...]] = {
    (INFRA_NS, "tls-validity-checks-certificate"): (
        "example.org",
        "*.example.org",
        "second-example.org",
        "abc.example.com",
        # HTTPRouteHTTPSListenerDetectMisdirectedRequests's server names
        "*.wildcard.org",
        "unknown-example.org",
    ),
    (INFRA_NS, "tls-checks-certificate"): ("abc.example.com",),
    (INFRA_NS, "tls-terminate-checks-certificate"): ("tls.example.com",),
    (WEB_NS, "certificate"): ("example.org", "*.example.org"),
}
MARKER = "conformance-marker"
BASE_FILE = "00-base.yaml"
MARKER_FILE = "zz-marker.yaml"


# ----------------------------------------------------------------------------- backends


@dataclass(frozen=True)
class PortSpec:
    port: int
    name: str | None = None
    app_protocol: str | None = None
    protocol: Literal["TCP", "UDP"] = "TCP"


@dataclass(frozen=True)
class BackendSpec:
    """A Service and its pods; ``kind`` says what each pod runs."""

    namespace: str
    name: str
    pods: int = 2
    ports: tuple[PortSpec, ...] = (PortSpec(8080),)
    kind: Literal["http", "tls", "grpc", "udp"] = "http"
    #: For ``tls``: the names the pods' certificate is issued for.
    tls_names: tuple[str, ...] = ()
    #: For ``tls``: the pods require a client certificate issued by the CA of this
    #: :data:`CLIENT_CERTIFICATES` entry.
    client_ca: str | None = None


HTTP_BACKENDS = (
    BackendSpec(
        INFRA_NS,
        "infra-backend-v1",
        ports=(
            PortSpec(8080, "first-port"),
            PortSpec(8081, "second-port", "kubernetes.io/h2c"),
            PortSpec(8082, "third-port", "kubernetes.io/ws"),
        ),
    ),
    BackendSpec(INFRA_NS, "infra-backend-v2"),
    BackendSpec(INFRA_NS, "infra-backend-v3"),
    BackendSpec(APP_NS, "app-backend-v1"),
    BackendSpec(APP_NS, "app-backend-v2"),
    BackendSpec(WEB_NS, "web-backend"),
)
TLS_BACKENDS = (
    BackendSpec(INFRA_NS, "tls-backend", 1, (PortSpec(443),), "tls", ("abc.example.com",)),
    BackendSpec(APP_NS, "tls-backend", 1, (PortSpec(443),), "tls", ("abc.example.com",)),
    BackendSpec(
        INFRA_NS,
        "backendtlspolicy-test",
        1,
        (PortSpec(443, "https"),),
        "tls",
        ("abc.example.com", "san.example.com"),
    ),
    BackendSpec(
        INFRA_NS,
        "tls-backend-with-client-cert-validation",
        1,
        (PortSpec(443, "https"),),
        "tls",
        ("abc.example.com",),
        client_ca="tls-checks-client-certificate",
    ),
)
GRPC_BACKENDS = tuple(
    BackendSpec(INFRA_NS, f"grpc-infra-backend-v{i}", 1, (PortSpec(8080, None, "kubernetes.io/h2c"),), "grpc")
    for i in (1, 2, 3)
)

UDP_BACKENDS = tuple(
    BackendSpec(ns, "l4-backend", 2, (PortSpec(53, "dns", protocol="UDP"),), "udp")
    for ns in (INFRA_NS, APP_NS)
)


class UdpEchoServer(asyncio.DatagramProtocol):
    """A UDP "pod": answers every datagram with JSON naming the pod (``namespace``, ``pod``,
    ``service``, as the HTTP echo does) and the ``payload`` it received."""

    def __init__(self, identity: EchoIdentity, *, host: str, port: int) -> None:
        self.identity = identity
        self.host = host
        self.port = port
        self.seen: list[bytes] = []
        self._transport: asyncio.DatagramTransport | None = None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(lambda: self, local_addr=(self.host, self.port))
        self.port = transport.get_extra_info("sockname")[1]

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.DatagramTransport, transport)  # a datagram endpoint's

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        self.seen.append(data)
        who = self.identity
        answer = {"namespace": who.namespace, "pod": who.pod, "service": who.service}
        answer["payload"] = data.decode(errors="replace")
        assert self._transport is not None
        self._transport.sendto(json.dumps(answer).encode(), addr)

    async def stop(self) -> None:
        if self._transport is not None:
            self._transport.close()


@dataclass
class Pod:
    spec: BackendSpec
    name: str
    address: str
    server: EchoHttpServer | GrpcEchoServer | UdpEchoServer

    @property
    def port(self) -> int:
        return self.server.port


# ----------------------------------------------------------------------------- the provider wrapper


class _TrackedProvider:
    """Passes a :class:`FilesProvider` through, noting which snapshot the controller was handed last.

    The controller applies each snapshot as soon as it receives it, in the
    same task, before anything else runs: what is recorded here at the
    yield is what the controller is serving an instant later.

    A snapshot counts only when it holds every file the marker names and no
    other: the file watcher may hand over the marker's new version in a batch
    before the one that names a file written just before it (seen once in
    about 20 runs: a case's Gateway "has no status").
    """

    def __init__(self, inner: FilesProvider) -> None:
        self.inner = inner
        self.handed_seq = -1
        self.statuses_at_handing: Mapping[Any, Any] | None = None
        self.controller: Controller | None = None

    def _note(self, snapshot: Snapshot) -> None:
        marker = snapshot.resources.config_map(INFRA_NS, MARKER)
        if marker is None:
            self.handed_seq = -1
        else:
            written = set(filter(None, marker.data.get("files", "").split(",")))
            read = {os.path.basename(file) for file, _ in snapshot.origins.values()}
            read |= {os.path.basename(p.file) for p in snapshot.problems}
            if read - {BASE_FILE, MARKER_FILE} == written:
                self.handed_seq = int(marker.data.get("seq", "-1"))
        if self.controller is not None:
            self.statuses_at_handing = self.controller.statuses()

    def load(self) -> Snapshot:
        snapshot = self.inner.load()
        self._note(snapshot)
        return snapshot

    async def watch(self) -> AsyncIterator[Snapshot]:
        async for snapshot in self.inner.watch():
            self._note(snapshot)
            yield snapshot


# ----------------------------------------------------------------------------- the harness


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _can_bind(address: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((address, port))
        except OSError:
            return False
    return True


def _free_port(address: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((address, 0))
        port: int = sock.getsockname()[1]
    return port


class Conformance:
    """One weir controller (in process, real Envoy) over a folder, with the base world around it."""

    def __init__(
        self,
        folder: Path,
        *,
        tls_backends: bool = False,
        grpc_backends: bool = False,
        udp_backends: bool = False,
    ) -> None:
        self.folder = folder
        self.ca: CertAuthority = make_ca("weir conformance CA")
        self.certs: dict[tuple[str, str], IssuedCert] = {
            key: self.ca.issue_server_cert(*names) for key, names in TLS_CERTIFICATES.items()
        }
        self.client_cas = {
            name: make_ca(f"weir conformance client CA {name}") for name in CLIENT_CERTIFICATES
        }
        self.client_certs = {
            name: ca.issue_client_cert(f"{name} client") for name, ca in self.client_cas.items()
        }
        self.backends = (
            HTTP_BACKENDS
            + (TLS_BACKENDS if tls_backends else ())
            + (GRPC_BACKENDS if grpc_backends else ())
            + (UDP_BACKENDS if udp_backends else ())
        )
        self.pods: dict[tuple[str, str], list[Pod]] = {}
        self.controller: Controller | None = None
        self.provider: _TrackedProvider | None = None
        self.envoy_pids: list[int] = []
        self._addresses = {(INFRA_NS, name): GATEWAY_NET + str(n) for name, n in BASE_GATEWAYS.items()}
        self._ports: dict[int, int] = {}
        self._privileged = _can_bind(GATEWAY_NET + "1", 80) and _can_bind(GATEWAY_NET + "1", 443)
        self._seq = 0
        #: The files written besides the base and the marker (the marker names them).
        self._case_files: set[str] = set()
        self._clients: dict[str, httpx.AsyncClient] = {}

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        try:
            await self._start_pods()
            self._write(BASE_FILE, yaml.safe_dump_all(self.base_manifests(), sort_keys=False))
            self._write_marker()
            self.provider = _TrackedProvider(FilesProvider([str(self.folder)], debounce_ms=20))
            self.controller = Controller(self.provider, Settings(), Options(admin_port=0))
            self.provider.controller = self.controller
            await self.controller.start()
            if self.controller.envoy is not None and self.controller.envoy.pid:
                self.envoy_pids.append(self.controller.envoy.pid)
            await asyncio.wait_for(self.controller.ready.wait(), 30)
            await self.settle()
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        for client in self._clients.values():
            await client.aclose()
        self._clients.clear()
        if self.controller is not None:
            if self.controller.envoy is not None and self.controller.envoy.pid:
                self.envoy_pids.append(self.controller.envoy.pid)
            await self.controller.stop()
            self.controller = None
        for pods in self.pods.values():
            for pod in pods:
                await pod.server.stop()
        self.pods.clear()

    async def _start_pods(self) -> None:
        index = 0
        port = ECHO_PORT if _can_bind(POD_NET + "1", ECHO_PORT) else _free_port(POD_NET + "1")
        for spec in self.backends:
            pods: list[Pod] = []
            self.pods[(spec.namespace, spec.name)] = pods  # tracked at once: stop() stops what started
            for n in range(spec.pods):
                index += 1
                address = POD_NET + str(index)
                identity = EchoIdentity(spec.namespace, f"{spec.name}-{n}", spec.name)
                server: EchoHttpServer | GrpcEchoServer | UdpEchoServer
                if spec.kind == "grpc":
                    server = GrpcEchoServer(identity, host=address, port=port)
                elif spec.kind == "udp":
                    server = UdpEchoServer(identity, host=address, port=port)
                else:
                    context = None
                    if spec.kind == "tls":
                        verify = self.client_cas[spec.client_ca] if spec.client_ca else None
                        cert = self.ca.issue_server_cert(*spec.tls_names)
                        context = server_ssl_context(cert, verify_client=verify)
                    server = EchoHttpServer(identity, host=address, port=port, ssl_context=context)
                pods.append(Pod(spec, identity.pod, address, server))
                await server.start()

    # ------------------------------------------------------------------ addresses and ports

    def gateway_address(self, name: str, namespace: str = INFRA_NS) -> str:
        """The loopback address of Gateway ``namespace/name`` (allocated on first use)."""
        key = (namespace, name)
        if key not in self._addresses:
            used = {int(a.rsplit(".", 1)[1]) for a in self._addresses.values()}
            self._addresses[key] = GATEWAY_NET + str(next(n for n in range(10, 255) if n not in used))
        return self._addresses[key]

    def listener_port(self, port: int) -> int:
        """The port a listener written with ``port`` really gets.

        The same number when this process may bind privileged ports on the
        Gateway addresses (and they are free); otherwise a free high port,
        the same for every use of ``port`` in this module.
        """
        if self._privileged:
            return port
        if port not in self._ports:
            self._ports[port] = _free_port(GATEWAY_NET + "1")
        return self._ports[port]

    def pod(self, service: str, namespace: str = INFRA_NS, index: int = 0) -> Pod:
        return self.pods[(namespace, service)][index]

    async def pods_answering(self, path: str, headers: dict[str, str], count: int) -> list[str]:
        """The pod that answered each of ``count`` requests for ``path`` on ``same-namespace``, in
        order (each request its own connection; every answer must be 200)."""
        pods = []
        async with httpx.AsyncClient(timeout=5) as client:
            for _ in range(count):
                response = await client.get(self.url(Request(path=path)), headers=headers)
                assert response.status_code == 200, response.text
                pods.append(str(response.json()["pod"]))
        return pods

    def requests_seen(self, service: str, namespace: str = INFRA_NS) -> list[EchoRequest]:
        """Every request the pods of ``service`` received (oldest first per pod)."""
        out: list[EchoRequest] = []
        for pod in self.pods[(namespace, service)]:
            if isinstance(pod.server, EchoHttpServer):
                out.extend(pod.server.requests)
        return out

    # ------------------------------------------------------------------ manifests

    def base_manifests(self) -> list[dict[str, Any]]:
        docs: list[dict[str, Any]] = []
        for ns, label in ((INFRA_NS, "infra"), (APP_NS, "backend"), (WEB_NS, "backend")):
            docs.append(
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": ns, "labels": {"gateway-conformance": label}},
                }
            )
        docs.append(
            {
                "apiVersion": f"{GROUP}/v1",
                "kind": "GatewayClass",
                "metadata": {"name": GATEWAY_CLASS},
                "spec": {"controllerName": CONTROLLER},
            }
        )
        allowed: dict[str, dict[str, Any]] = {
            "same-namespace": {"from": "Same"},
            "all-namespaces": {"from": "All"},
            "backend-namespaces": {
                "from": "Selector",
                "selector": {"matchLabels": {"gateway-conformance": "backend"}},
            },
        }
        for name, namespaces in allowed.items():
            gateway = {
                "apiVersion": f"{GROUP}/v1",
                "kind": "Gateway",
                "metadata": {"name": name, "namespace": INFRA_NS},
                "spec": {
                    "gatewayClassName": GATEWAY_CLASS,
                    "listeners": [
                        {
                            "name": "http",
                            "port": 80,
                            "protocol": "HTTP",
                            "allowedRoutes": {"namespaces": namespaces},
                        }
                    ],
                },
            }
            docs.append(self._adjust(gateway))
        for spec in self.backends:
            docs.extend(self._service_manifests(spec))
        client_secrets = {(INFRA_NS, name): cert for name, cert in self.client_certs.items()}
        for (ns, name), cert in {**self.certs, **client_secrets}.items():
            docs.append(
                {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {"name": name, "namespace": ns},
                    "type": "kubernetes.io/tls",
                    "data": {"tls.crt": _b64(cert.chain_pem), "tls.key": _b64(cert.key_pem)},
                }
            )
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "malformed-certificate", "namespace": INFRA_NS},
                "type": "kubernetes.io/tls",
                "data": {"tls.crt": _b64("not a certificate"), "tls.key": _b64("not a key")},
            }
        )
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "backend-tls-checks-certificate", "namespace": INFRA_NS},
                "data": {"ca.crt": self.ca.cert_pem},
            }
        )
        for cert_name, config_map in CLIENT_CERTIFICATES.items():
            docs.append(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": config_map, "namespace": INFRA_NS},
                    "data": {"ca.crt": self.client_cas[cert_name].cert_pem},
                }
            )
        return docs

    def _service_manifests(self, spec: BackendSpec) -> list[dict[str, Any]]:
        pods = self.pods[(spec.namespace, spec.name)]

        def port_entry(p: PortSpec, number: int) -> dict[str, Any]:
            entry: dict[str, Any] = {"protocol": p.protocol, "port": number}
            if p.name:
                entry["name"] = p.name
            if p.app_protocol:
                entry["appProtocol"] = p.app_protocol
            return entry

        service = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": spec.name, "namespace": spec.namespace},
            "spec": {
                "selector": {"app": spec.name},
                "ports": [{**port_entry(p, p.port), "targetPort": pods[0].port} for p in spec.ports],
            },
        }
        endpoint_slice = {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": f"{spec.name}-abcde",
                "namespace": spec.namespace,
                "labels": {"kubernetes.io/service-name": spec.name},
            },
            "addressType": "IPv4",
            "ports": [port_entry(p, pods[0].port) for p in spec.ports],
            "endpoints": [
                {
                    "addresses": [pod.address],
                    "conditions": {"ready": True},
                    "targetRef": {"kind": "Pod", "namespace": spec.namespace, "name": pod.name},
                }
                for pod in pods
            ],
        }
        return [service, endpoint_slice]

    def _adjust(self, doc: dict[str, Any]) -> dict[str, Any]:
        """Give a Gateway its loopback address and real ports; map ports in routes' parentRefs."""
        kind = doc.get("kind")
        spec = doc.get("spec") or {}
        if kind == "Gateway":
            meta = doc.get("metadata") or {}
            key = (meta.get("namespace", "default"), meta["name"])
            if "addresses" not in spec:
                spec["addresses"] = [{"type": "IPAddress", "value": self.gateway_address(key[1], key[0])}]
            else:  # written by the case: requests go to its first IP address
                ips = [
                    a["value"]
                    for a in spec["addresses"]
                    if a.get("type", "IPAddress") == "IPAddress" and a.get("value")
                ]
                if ips:
                    self._addresses[key] = ips[0]
            for listener in spec.get("listeners") or []:
                if isinstance(listener.get("port"), int):
                    listener["port"] = self.listener_port(listener["port"])
        elif kind == "ListenerSet":
            for listener in spec.get("listeners") or []:
                if isinstance(listener.get("port"), int):
                    listener["port"] = self.listener_port(listener["port"])
        elif kind in ("HTTPRoute", "GRPCRoute", "TLSRoute", "TCPRoute", "UDPRoute"):
            for ref in spec.get("parentRefs") or []:
                if isinstance(ref.get("port"), int):
                    ref["port"] = self.listener_port(ref["port"])
        return doc

    def _write(self, name: str, text: str) -> Path:
        path = self.folder / name
        tmp = path.with_name("." + path.name + ".tmp")
        tmp.write_text(text)
        os.replace(tmp, path)  # atomic, as editors and kubectl-like tools do
        return path

    def _write_marker(self) -> None:
        self._seq += 1
        marker = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": MARKER, "namespace": INFRA_NS},
            "data": {"seq": str(self._seq), "files": ",".join(sorted(self._case_files))},
        }
        self._write(MARKER_FILE, yaml.safe_dump(marker))

    async def apply(self, name: str, manifests: str, *, wait: bool = True) -> None:
        """Write ``manifests`` (YAML) as file ``name``; with ``wait``, return once weir serves them."""
        docs = [self._adjust(d) for d in yaml.safe_load_all(manifests) if d]
        self._write(f"{name}.yaml", yaml.safe_dump_all(docs, sort_keys=False))
        self._case_files.add(f"{name}.yaml")
        if wait:
            await self.settle()

    async def delete(self, name: str, *, wait: bool = False) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.folder / f"{name}.yaml").unlink()
        self._case_files.discard(f"{name}.yaml")
        if wait:
            await self.settle()

    async def settle(self, timeout: float = 15.0) -> float:
        """Wait until weir has served everything written so far and published its statuses.

        Returns the time it took. Settled means: the controller was handed the
        files as they are now, published the statuses of that translation, and
        Envoy either serves it (every listener bound) or rejected it (weir's
        admin ``/status`` says so). Neither within ``timeout`` is logged, not
        raised: the case's own expectations then say what is wrong.
        """
        assert self.controller is not None and self.provider is not None
        started = time.monotonic()
        self._write_marker()
        wanted, provider, controller = self._seq, self.provider, self.controller
        deadline = started + timeout
        while provider.handed_seq < wanted:
            if time.monotonic() > deadline:
                raise AssertionError(f"weir did not read the manifests within {timeout} s")
            await asyncio.sleep(0.01)
        polled = time.monotonic()
        while controller.statuses() is provider.statuses_at_handing or not controller.programmed():
            if time.monotonic() > deadline:
                log.warning("weir did not program the configuration within %s s", timeout)
                break
            if controller.statuses() is not provider.statuses_at_handing and time.monotonic() > polled + 0.2:
                # Envoy may have rejected it (a listener it cannot bind): settled, just not programmed.
                polled = time.monotonic()
                if await self._rejection() is not None:
                    break
            await asyncio.sleep(0.01)
        return time.monotonic() - started

    async def _rejection(self) -> str | None:
        """Envoy's rejection of the configuration being served, as weir's admin ``/status`` reports it."""
        assert self.controller is not None and self.controller.admin_port
        client = self._client("http")
        response = await client.get(f"http://127.0.0.1:{self.controller.admin_port}/status")
        rejection = response.json().get("dataPlane", {}).get("rejection")
        return str(rejection) if rejection else None

    # ------------------------------------------------------------------ status

    def status(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        assert self.controller is not None
        for key, value in self.controller.statuses().items():
            if (key.kind, key.namespace, key.name) == (kind, namespace, name):
                return value
        return None

    def check(self, check: StatusCheck) -> None:
        """Assert one status expectation (statuses are final once :meth:`settle` returned)."""
        if isinstance(check, RouteStatus):
            self._check_route(check)
        elif isinstance(check, GatewayStatus):
            self._check_gateway(check)
        elif isinstance(check, PolicyStatus):
            self._check_policy(check)
        else:
            what = f"{check.kind} {check.namespace + '/' if check.namespace else ''}{check.name}"
            found = self.status(check.kind, check.namespace, check.name)
            assert found is not None, f"{what} has no status"
            _check_conditions(what, found.get("conditions") or [], check.conditions, check.generation)

    def _check_route(self, check: RouteStatus) -> None:
        what = f"{check.kind} {check.namespace}/{check.name}"
        found = self.status(check.kind, check.namespace, check.name) or {}
        entries = [
            p
            for p in found.get("parents") or []
            if p.get("controllerName") == CONTROLLER
            and p["parentRef"].get("name") == check.gateway
            and p["parentRef"].get("namespace", check.namespace) == check.gateway_namespace
            and (check.section is None or p["parentRef"].get("sectionName") == check.section)
        ]
        if check.absent:
            assert not entries, f"{what}: expected no parent entry for {check.gateway}, got {entries}"
            return
        assert entries, f"{what}: no parent status for Gateway {check.gateway}; status: {found or 'none'}"
        _check_conditions(what, entries[0]["conditions"], check.conditions, check.generation)

    def _check_gateway(self, check: GatewayStatus) -> None:
        what = f"{check.kind} {check.namespace}/{check.name}"
        found = self.status(check.kind, check.namespace, check.name)
        assert found is not None, f"{what} has no status"
        _check_conditions(what, found.get("conditions") or [], check.conditions, check.generation)
        if check.addresses is not None:
            values = tuple(a.get("value") for a in found.get("addresses") or [])
            assert values == check.addresses, f"{what}: status.addresses {values}, want {check.addresses}"
        if check.attached_listener_sets is not None:
            got = found.get("attachedListenerSets")
            assert got == check.attached_listener_sets, (
                f"{what}: attachedListenerSets {got}, want {check.attached_listener_sets}"
            )
        listeners = {entry["name"]: entry for entry in found.get("listeners") or []}
        if check.only_listeners is not None:
            assert sorted(listeners) == sorted(check.only_listeners), (
                f"{what}: listeners {sorted(listeners)}, want {sorted(check.only_listeners)}"
            )
        for name, expected in check.listeners.items():
            entry = listeners.get(name)
            assert entry is not None, f"{what}: no status for listener {name!r} (have {sorted(listeners)})"
            where = f"{what} listener {name}"
            _check_conditions(where, entry.get("conditions") or [], expected.conditions, check.generation)
            if expected.attached is not None:
                assert entry.get("attachedRoutes") == expected.attached, (
                    f"{where}: attachedRoutes {entry.get('attachedRoutes')}, want {expected.attached}"
                )
            kinds = sorted(k["kind"] for k in entry.get("supportedKinds") or [])
            if expected.kinds is not None:
                missing = sorted(set(expected.kinds) - set(kinds))
                assert not missing, f"{where}: supportedKinds {kinds} lack {missing}"
            if expected.only_kinds is not None:
                assert kinds == sorted(expected.only_kinds), (
                    f"{where}: supportedKinds {kinds}, want exactly {sorted(expected.only_kinds)}"
                )

    def _check_policy(self, check: PolicyStatus) -> None:
        what = f"{check.kind} {check.namespace}/{check.name}"
        found = self.status(check.kind, check.namespace, check.name) or {}
        entries = [
            a
            for a in found.get("ancestors") or []
            if a.get("controllerName") == CONTROLLER
            and a["ancestorRef"].get("name") == check.gateway
            and a["ancestorRef"].get("namespace", check.namespace) == check.gateway_namespace
        ]
        assert entries, f"{what}: no ancestor status for Gateway {check.gateway}; status: {found or 'none'}"
        _check_conditions(what, entries[0]["conditions"], check.conditions, check.generation)

    # ------------------------------------------------------------------ traffic

    def _client(self, kind: str) -> httpx.AsyncClient:
        if kind not in self._clients:
            # No keep-alive: every request opens its own connection, so a connection
            # to a listener Envoy is draining never answers for the new configuration.
            limits = httpx.Limits(max_keepalive_connections=0)
            timeout = httpx.Timeout(5.0)
            if kind == "h2c":
                client = httpx.AsyncClient(http1=False, http2=True, limits=limits, timeout=timeout)
            elif kind.startswith("https"):
                identity = kind.partition(":")[2]
                cert = self.client_certs[identity] if identity else None
                context = client_ssl_context(self.ca, cert=cert, alpn=["h2", "http/1.1"])
                client = httpx.AsyncClient(http2=True, verify=context, limits=limits, timeout=timeout)
            else:
                client = httpx.AsyncClient(limits=limits, timeout=timeout)
            self._clients[kind] = client
        return self._clients[kind]

    def url(self, request: Request) -> str:
        address = self.gateway_address(request.gateway, request.gateway_namespace)
        return f"{request.scheme}://{address}:{self.listener_port(request.port)}{request.path}"

    async def send(self, request: Request) -> httpx.Response:
        """Send ``request`` once (a datagram's answer comes back as the body of a 200)."""
        if request.datagram is not None:
            return httpx.Response(200, content=await self.send_datagram(request))
        if request.scheme == "https":
            kind = f"https:{request.client_cert}" if request.client_cert else "https"
        else:
            kind = "h2c" if request.http2 else "http"
        headers = [("host", request.host)] if request.host else []
        extensions: dict[str, Any] = {}
        if request.scheme == "https":
            extensions["sni_hostname"] = request.sni or request.host.rsplit(":", 1)[0]
        return await self._client(kind).request(
            request.method,
            self.url(request),
            headers=[*headers, *request.headers],
            content=request.body,
            extensions=extensions,
        )

    async def send_datagram(self, request: Request, timeout: float = 0.5) -> bytes:
        """Send ``request.datagram`` to the listener; the one datagram that answers (OSError: none)."""
        assert request.datagram is not None
        loop = asyncio.get_running_loop()
        answers: asyncio.Queue[bytes] = asyncio.Queue()

        class Client(asyncio.DatagramProtocol):
            def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
                answers.put_nowait(data)

        address = self.gateway_address(request.gateway, request.gateway_namespace)
        remote = (address, self.listener_port(request.port))
        transport, _ = await loop.create_datagram_endpoint(Client, remote_addr=remote)
        try:
            transport.sendto(request.datagram)
            try:
                return await asyncio.wait_for(answers.get(), timeout)
            except TimeoutError:
                raise OSError(f"no datagram came back from {remote} within {timeout} s") from None
        finally:
            transport.close()

    async def expect(
        self, request: Request, expect: Expect, *, timeout: float = 2.0, successes: int = 2
    ) -> httpx.Response | None:
        """Send ``request`` until ``successes`` answers in a row meet ``expect`` (at most ``timeout`` s)."""
        deadline = time.monotonic() + timeout
        streak, last = 0, "no answer"
        response: httpx.Response | None = None
        while True:
            try:
                response = await self.send(request)
                problem = self.compare(response, expect)
            except (httpx.HTTPError, OSError, ssl.SSLError) as exc:
                response = None
                problem = None if expect.error else f"request failed: {type(exc).__name__}: {exc}"
            if problem is None:
                streak += 1
                if streak >= successes:
                    return response
            else:
                streak, last = 0, problem
            if time.monotonic() > deadline:
                raise AssertionError(f"{request.describe()}: {last}")
            await asyncio.sleep(0.02 if problem else 0)

    def compare(self, response: httpx.Response, expect: Expect) -> str | None:
        """What is wrong with ``response`` (None when it meets ``expect``)."""
        if expect.error:
            return f"expected the request to fail, got HTTP {response.status_code}"
        if expect.server_error:
            if not 500 <= response.status_code <= 599:
                return f"status {response.status_code}, want 5xx; body: {response.text[:300]!r}"
        elif expect.statuses:
            if response.status_code not in expect.statuses:
                return (
                    f"status {response.status_code}, want one of {expect.statuses}: {response.text[:200]!r}"
                )
        elif response.status_code != expect.status:
            return f"status {response.status_code}, want {expect.status}; body: {response.text[:300]!r}"
        problems: list[str] = []
        data: dict[str, Any] = {}
        if expect.backend is not None or expect.seen is not None:
            try:
                data = response.json()
            except ValueError:
                return f"not an echo server's answer: {response.text[:300]!r}"
        if expect.backend is not None:
            pod = str(data.get("pod", ""))
            if not pod.startswith(expect.backend + "-") or data.get("namespace") != expect.namespace:
                problems.append(
                    f"answered by pod {data.get('namespace')}/{pod}, want a pod of "
                    f"{expect.namespace}/{expect.backend}"
                )
        if expect.seen is not None:
            problems.extend(_compare_seen(data, expect.seen))
        for name, value in expect.headers:
            got = response.headers.get_list(name)
            if ",".join(got) != value:
                problems.append(f"response header {name}: {got}, want {value!r}")
        for name, choices in expect.header_choices:
            got_value = ",".join(response.headers.get_list(name))
            if _items(got_value) not in [_items(c) for c in choices]:
                problems.append(f"response header {name}: {got_value!r}, want one of {list(choices)}")
        for name in expect.absent_headers:
            if name in response.headers:
                problems.append(f"response header {name} should be absent, is {response.headers[name]!r}")
        if expect.redirect is not None:
            want = self.redirect_url(expect.redirect)
            got_location = response.headers.get("location")
            if got_location != want:
                problems.append(f"Location {got_location!r}, want {want!r}")
        return "; ".join(problems) or None

    def redirect_url(self, redirect: Redirect) -> str:
        port = redirect.port
        if port is not None and redirect.listener_port:
            port = self.listener_port(port)
        default = {"http": 80, "https": 443}.get(redirect.scheme)
        authority = redirect.host if port is None or port == default else f"{redirect.host}:{port}"
        return f"{redirect.scheme}://{authority}{redirect.path}"


def _items(value: str) -> list[str]:
    return sorted(item.strip() for item in value.split(",") if item.strip())


def _compare_seen(data: Mapping[str, Any], seen: Seen) -> Iterator[str]:
    for key, want in (
        ("path", seen.path),
        ("host", seen.host),
        ("method", seen.method),
        ("proto", seen.proto),
        ("sni", seen.sni),
    ):
        if want is not None and data.get(key) != want:
            yield f"backend saw {key} {data.get(key)!r}, want {want!r}"
    headers = {str(k).lower(): v for k, v in dict(data.get("headers") or {}).items()}
    for name, want in seen.headers:
        got = headers.get(name.lower())
        if got is None or ",".join(got) != want:
            yield f"backend saw header {name}: {got}, want {want!r}"
    for name in seen.absent_headers:
        if name.lower() in headers:
            yield f"backend saw header {name}: {headers[name.lower()]}, want it absent"


def _check_conditions(
    what: str, conditions: Sequence[Mapping[str, Any]], wanted: Mapping[str, CondSpec], generation: int | None
) -> None:
    by_type = {c["type"]: c for c in conditions}
    for kind, spec in wanted.items():
        status, reason = (spec, None) if isinstance(spec, str) else spec
        found = by_type.get(kind)
        summary = {t: (c["status"], c.get("reason")) for t, c in by_type.items()}
        assert found is not None, f"{what}: no {kind} condition; conditions: {summary}"
        assert found["status"] == status and (reason is None or found.get("reason") == reason), (
            f"{what}: {kind} is {found['status']}/{found.get('reason')} ({found.get('message')!r}), "
            f"want {status}/{reason or 'any reason'}"
        )
    if generation is not None:
        stale = {
            c["type"]: c.get("observedGeneration")
            for c in conditions
            if c.get("observedGeneration") != generation
        }
        assert not stale, f"{what}: observedGeneration {stale}, want {generation} everywhere"


async def run_case(h: Conformance, case: Case) -> None:
    """Apply the case's manifests, check its statuses then its exchanges, step by step; clean up."""
    try:
        for step in (Step(case.manifests, case.statuses, case.exchanges), *case.steps):
            manifests = step.manifests(h) if callable(step.manifests) else step.manifests
            await h.apply(case.file, manifests)
            for check in step.statuses:
                h.check(check)
            for exchange in step.exchanges:
                await h.expect(exchange.request, exchange.expect)
    finally:
        await h.delete(case.file)


@contextlib.asynccontextmanager
async def conformance_world(
    folder: Path, *, tls_backends: bool = False, grpc_backends: bool = False, udp_backends: bool = False
) -> AsyncIterator[Conformance]:
    """A started :class:`Conformance`; stops it (and checks Envoy is gone) on exit."""
    harness = Conformance(
        folder, tls_backends=tls_backends, grpc_backends=grpc_backends, udp_backends=udp_backends
    )
    await harness.start()
    try:
        yield harness
    finally:
        await harness.stop()
        for pid in harness.envoy_pids:
            assert not _pid_alive(pid), f"Envoy {pid} survived stop()"
        shutil.rmtree(folder, ignore_errors=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


__all__ = [
    "APP_NS",
    "CONTROLLER",
    "GATEWAY_CLASS",
    "INFRA_NS",
    "WEB_NS",
    "Case",
    "CondSpec",
    "Conformance",
    "Exchange",
    "Expect",
    "GatewayStatus",
    "ListenerStatus",
    "Manifests",
    "ObjectStatus",
    "PolicyStatus",
    "Redirect",
    "Request",
    "RouteStatus",
    "Seen",
    "StatusCheck",
    "Step",
    "conformance_world",
    "ok",
    "params",
    "pending_marks",
    "run_case",
    "single_rule_route",
    "status",
]
