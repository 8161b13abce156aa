"""Workload shapes of the control-plane benchmark (``bench/controlplane.py --shape``).

Each shape finds a different quadratic, so the benchmark runs the same
phases on several (``DESIGN.md``: "Cost follows change"). In every shape
route ``i`` lives in its own file with its own XBackend, and an edit either
moves the route's *address* (a new path, or in ``host`` a new hostname: the
``version``) or points its XBackend at another hostname (the ``backend``);
:meth:`Shape.probe` says where the route answers after such edits. What the
upstream answers (``<Host> <path>``) tells which XBackend served it.

* ``path`` (the original benchmark): one Gateway with :data:`PATH_LISTENERS`
  HTTP listeners on their own ports; route ``i`` on listener ``i % 4`` serves
  ``/r<i>/v<version>``. Four virtual hosts of N/4 routes.
* ``host``: one hostname per route, the egress users' shape. One Gateway with
  one HTTP listener; route ``i`` serves ``n<i>-v<version>.example`` and sends
  to its own ServerOnly XBackend (TLS to the upstream, CA from one shared
  ConfigMap). N virtual hosts of one route; N TLS clusters.
* ``gateways``: N/10 Gateways (1,000 at N = 10,000) with one HTTP listener
  each, all on one port, each for its own hostname ``g<k>.example``; routes
  ``10k .. 10k+9`` attach to Gateway ``k``. N/10 virtual hosts of 10 routes,
  N/10 Gateway statuses.
* ``tls``: HTTPS listeners on one port, one per hostname ``t<j>.example`` with
  its own certificate (:data:`TLS_CERTIFICATES` of them at most; 50 listeners
  a Gateway, the Gateway API allows 64); route ``i`` attaches to listener
  ``i % listeners`` and serves ``/r<i>/v<version>``. One filter chain and one
  route configuration per certificate.
"""

from __future__ import annotations

import http.client
import socket
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ZONE = "bench.example"
PATH_LISTENERS = 4
GATEWAY_ROUTES = 10
TLS_CERTIFICATES = 1000
TLS_LISTENERS_PER_GATEWAY = 50
CA_CONFIGMAP = "bench-ca"
XGROUP = "gateway.networking.x-k8s.io"

GATEWAY_CLASS = """\
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: weir}
spec: {controllerName: weir.dev/gateway-controller}
"""


def gateway_yaml(name: str, listeners: Sequence[str]) -> str:
    """A Gateway of class ``weir`` in ``default`` with ``listeners`` (flow-style mappings)."""
    lines = "".join(f"  - {listener}\n" for listener in listeners)
    return f"""\
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: {name}, namespace: default}}
spec:
  gatewayClassName: weir
  listeners:
{lines}"""


def backend_host(i: int, backend: int = 0) -> str:
    return f"x{i}.{ZONE}" if backend == 0 else f"x{i}-e{backend}.{ZONE}"


def route_file(folder: Path, i: int) -> Path:
    return folder / "routes" / f"r{i:05d}.yaml"


def _indent(text: str, by: int) -> str:
    pad = " " * by
    return "".join(pad + line if line.strip() else line for line in text.splitlines(keepends=True))


@dataclass(frozen=True)
class Probe:
    """Where route ``i`` answers: a listener port, the request's path and Host, the TLS server name
    (``None``: plaintext), and the upstream host its answer must name."""

    port: int
    path: str
    host: str
    sni: str | None
    expect: str


@dataclass(frozen=True)
class Pki:
    """The run's throw-away CA (a :class:`weir.testkit.pki.CertAuthority`) and a certificate and key
    for ``*.bench.example`` (files), for a TLS upstream."""

    ca: Any
    upstream_cert: Path
    upstream_key: Path

    @property
    def ca_pem(self) -> str:
        return str(self.ca.cert_pem)


def make_pki(folder: Path) -> Pki:
    from weir.testkit.pki import make_ca

    ca = make_ca("weir bench")
    files = ca.issue_server_cert(f"*.{ZONE}").write(folder, "upstream")
    return Pki(ca, files.cert, files.key)


class Shape:
    """A workload; subclasses say what is generated and where each route answers."""

    name = ""
    #: listener ports the shape needs
    ports = 1
    #: the XBackends originate TLS (the upstream must speak it)
    tls_upstream = False
    #: what the report says about the workload (after "Workload:")
    describe = ""

    def generate(self, folder: Path, n: int, ports: Sequence[int], upstream_port: int, pki: Pki) -> None:
        (folder / "routes").mkdir(parents=True, exist_ok=True)
        (folder / "gateway.yaml").write_text(self.gateways_yaml(n, ports, pki))
        for i in range(n):
            route_file(folder, i).write_text(self.route_yaml(i, n, upstream_port))

    def gateways_yaml(self, n: int, ports: Sequence[int], pki: Pki) -> str:
        raise NotImplementedError

    def parent(self, i: int, n: int) -> str:
        """The route's ``parentRefs`` entry (flow style)."""
        raise NotImplementedError

    def route_yaml(self, i: int, n: int, upstream_port: int, version: int = 1, backend: int = 0) -> str:
        return f"""\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: r{i}, namespace: default}}
spec:
  parentRefs: [{self.parent(i, n)}]
{self.route_match(i, version)}    backendRefs: [{{group: {XGROUP}, kind: XBackend, name: x{i}}}]
---
{self.xbackend_yaml(i, upstream_port, backend)}"""

    def route_match(self, i: int, version: int) -> str:
        """The route's hostnames (if any) and ``rules:`` up to its first rule's backendRefs."""
        return f"  rules:\n  - matches: [{{path: {{type: PathPrefix, value: /r{i}/v{version}}}}}]\n"

    def xbackend_yaml(self, i: int, upstream_port: int, backend: int) -> str:
        return f"""\
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackend
metadata: {{name: x{i}, namespace: default}}
spec:
  type: ExternalHostname
  externalHostname: {{hostname: {backend_host(i, backend)}}}
  port: {{port: {upstream_port}}}
"""

    def probe(self, i: int, n: int, ports: Sequence[int], version: int = 1, backend: int = 0) -> Probe:
        return Probe(ports[0], f"/r{i}/v{version}/probe", "gw.bench", None, backend_host(i, backend))


class PathShape(Shape):
    name = "path"
    ports = PATH_LISTENERS
    describe = (
        f"one Gateway with {PATH_LISTENERS} HTTP listeners; N HTTPRoutes, each in its own file with its "
        "own XBackend (plaintext, an external hostname resolved by a DNS responder on loopback, the "
        f"egress guard on every cluster); route `i` attaches to listener `i % {PATH_LISTENERS}` and "
        "serves `/r<i>/v1`"
    )

    def gateways_yaml(self, n: int, ports: Sequence[int], pki: Pki) -> str:
        listeners = [f"{{name: l{k}, port: {port}, protocol: HTTP}}" for k, port in enumerate(ports)]
        return f"{GATEWAY_CLASS}---\n{gateway_yaml('bench', listeners)}"

    def parent(self, i: int, n: int) -> str:
        return f"{{name: bench, sectionName: l{i % PATH_LISTENERS}}}"

    def probe(self, i: int, n: int, ports: Sequence[int], version: int = 1, backend: int = 0) -> Probe:
        return Probe(
            ports[i % PATH_LISTENERS], f"/r{i}/v{version}/probe", "gw.bench", None, backend_host(i, backend)
        )


class HostShape(Shape):
    name = "host"
    tls_upstream = True
    describe = (
        "one Gateway with one HTTP listener; N HTTPRoutes, each in its own file with its own "
        "ServerOnly XBackend (TLS to the upstream, verified against a CA from one shared ConfigMap); "
        "route `i` serves the hostname `n<i>-v1.example` (N virtual hosts of one route each)"
    )

    def gateways_yaml(self, n: int, ports: Sequence[int], pki: Pki) -> str:
        listener = f"{{name: http, port: {ports[0]}, protocol: HTTP}}"
        return f"""{GATEWAY_CLASS}---
{gateway_yaml("bench", [listener])}---
apiVersion: v1
kind: ConfigMap
metadata: {{name: {CA_CONFIGMAP}, namespace: default}}
data:
  ca.crt: |
{_indent(pki.ca_pem, 4)}"""

    def parent(self, i: int, n: int) -> str:
        return "{name: bench, sectionName: http}"

    def route_match(self, i: int, version: int) -> str:
        return (
            f"  hostnames: [n{i}-v{version}.example]\n"
            "  rules:\n  - matches: [{path: {type: PathPrefix, value: /}}]\n"
        )

    def xbackend_yaml(self, i: int, upstream_port: int, backend: int) -> str:
        host = backend_host(i, backend)
        return f"""{super().xbackend_yaml(i, upstream_port, backend)}  tls:
    mode: ServerOnly
    validation:
      hostname: {host}
      caCertificateRefs: [{{group: "", kind: ConfigMap, name: {CA_CONFIGMAP}}}]
"""

    def probe(self, i: int, n: int, ports: Sequence[int], version: int = 1, backend: int = 0) -> Probe:
        return Probe(ports[0], "/probe", f"n{i}-v{version}.example", None, backend_host(i, backend))


class GatewaysShape(Shape):
    name = "gateways"
    describe = (
        f"N/{GATEWAY_ROUTES} Gateways, each with one HTTP listener for its own hostname `g<k>.example`, "
        f"all on one port; N HTTPRoutes, each in its own file with its own XBackend (plaintext); routes "
        f"`{GATEWAY_ROUTES}k` to `{GATEWAY_ROUTES}k+{GATEWAY_ROUTES - 1}` attach to Gateway `k`, route "
        "`i` serves `/r<i>/v1`"
    )

    def gateways_yaml(self, n: int, ports: Sequence[int], pki: Pki) -> str:
        docs = [GATEWAY_CLASS]
        for k in range((n + GATEWAY_ROUTES - 1) // GATEWAY_ROUTES):
            listener = f"{{name: http, port: {ports[0]}, protocol: HTTP, hostname: g{k}.example}}"
            docs.append(gateway_yaml(f"g{k}", [listener]))
        return "---\n".join(docs)

    def parent(self, i: int, n: int) -> str:
        return f"{{name: g{i // GATEWAY_ROUTES}}}"

    def probe(self, i: int, n: int, ports: Sequence[int], version: int = 1, backend: int = 0) -> Probe:
        host = f"g{i // GATEWAY_ROUTES}.example"
        return Probe(ports[0], f"/r{i}/v{version}/probe", host, None, backend_host(i, backend))


class TlsShape(Shape):
    name = "tls"
    describe = (
        f"HTTPS listeners on one port, one per hostname `t<j>.example` with its own certificate "
        f"(min(N, {TLS_CERTIFICATES:,}) of them, each a Secret in its own file; "
        f"{TLS_LISTENERS_PER_GATEWAY} listeners per Gateway); N HTTPRoutes, each in its own file with "
        "its own XBackend (plaintext); route `i` attaches to listener `i % listeners` and serves "
        "`/r<i>/v1`"
    )

    @staticmethod
    def listeners(n: int) -> int:
        return min(n, TLS_CERTIFICATES)

    def generate(self, folder: Path, n: int, ports: Sequence[int], upstream_port: int, pki: Pki) -> None:
        super().generate(folder, n, ports, upstream_port, pki)
        (folder / "certs").mkdir(exist_ok=True)
        for j in range(self.listeners(n)):
            leaf = pki.ca.issue_server_cert(f"t{j}.example")
            (folder / "certs" / f"c{j:04d}.yaml").write_text(
                f"""\
apiVersion: v1
kind: Secret
metadata: {{name: c{j}, namespace: default}}
type: kubernetes.io/tls
stringData:
  tls.crt: |
{_indent(leaf.chain_pem, 4)}  tls.key: |
{_indent(leaf.key_pem, 4)}"""
            )

    def gateways_yaml(self, n: int, ports: Sequence[int], pki: Pki) -> str:
        docs = [GATEWAY_CLASS]
        count = self.listeners(n)
        for g in range((count + TLS_LISTENERS_PER_GATEWAY - 1) // TLS_LISTENERS_PER_GATEWAY):
            listeners = [
                f"{{name: l{j}, port: {ports[0]}, protocol: HTTPS, hostname: t{j}.example, "
                f"tls: {{certificateRefs: [{{name: c{j}}}]}}}}"
                for j in range(g * TLS_LISTENERS_PER_GATEWAY, min(count, (g + 1) * TLS_LISTENERS_PER_GATEWAY))
            ]
            docs.append(gateway_yaml(f"tls{g}", listeners))
        return "---\n".join(docs)

    def parent(self, i: int, n: int) -> str:
        j = i % self.listeners(n)
        return f"{{name: tls{j // TLS_LISTENERS_PER_GATEWAY}, sectionName: l{j}}}"

    def probe(self, i: int, n: int, ports: Sequence[int], version: int = 1, backend: int = 0) -> Probe:
        host = f"t{i % self.listeners(n)}.example"
        return Probe(ports[0], f"/r{i}/v{version}/probe", host, host, backend_host(i, backend))


SHAPES: dict[str, Shape] = {s.name: s for s in (PathShape(), HostShape(), GatewaysShape(), TlsShape())}


class Prober:
    """Keep-alive HTTP/1.1 GETs to 127.0.0.1, one connection per port and TLS server name."""

    def __init__(self, ca_pem: str | None = None) -> None:
        self._conns: dict[tuple[int, str | None], http.client.HTTPConnection] = {}
        self._tls: ssl.SSLContext | None = None
        if ca_pem is not None:
            self._tls = ssl.create_default_context(cadata=ca_pem)

    def get(self, probe: Probe, timeout: float = 2.0) -> tuple[int, str]:
        """(status, body); status 0 when nothing answered."""
        key = (probe.port, probe.sni)
        conn = self._conns.get(key)
        if conn is None:
            conn = self._conns[key] = self._connection(probe, timeout)
        try:
            conn.request("GET", probe.path, headers={"Host": probe.host})
            response = conn.getresponse()
            body = response.read().decode("utf-8", "replace")
            if response.getheader("connection", "").lower() == "close":
                self._drop(key)
            return response.status, body
        except (OSError, http.client.HTTPException):
            self._drop(key)
            return 0, ""

    def answers(self, probe: Probe) -> bool:
        status, body = self.get(probe)
        return status == 200 and body.startswith(probe.expect + " ")

    def _connection(self, probe: Probe, timeout: float) -> http.client.HTTPConnection:
        if probe.sni is None:
            return http.client.HTTPConnection("127.0.0.1", probe.port, timeout=timeout)
        if self._tls is None:
            raise ValueError("a TLS probe needs the CA (Prober(ca_pem=...))")
        return _SniConnection(probe.sni, probe.port, self._tls, timeout)

    def _drop(self, key: tuple[int, str | None]) -> None:
        conn = self._conns.pop(key, None)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        for key in list(self._conns):
            self._drop(key)


class _SniConnection(http.client.HTTPSConnection):
    """HTTPS to 127.0.0.1 with ``server_name`` as the TLS server name (and name checked)."""

    def __init__(self, server_name: str, port: int, context: ssl.SSLContext, timeout: float) -> None:
        super().__init__("127.0.0.1", port, timeout=timeout, context=context)
        self._server_name = server_name
        self._ctx = context

    def connect(self) -> None:
        raw = socket.create_connection(("127.0.0.1", self.port), self.timeout)
        self.sock = self._ctx.wrap_socket(raw, server_hostname=self._server_name)
