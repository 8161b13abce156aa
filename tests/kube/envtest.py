"""A real kube-apiserver and etcd for tests, started the way controller-runtime's envtest does.

``$KUBEBUILDER_ASSETS`` names the folder holding the ``kube-apiserver`` and
``etcd`` binaries (``export KUBEBUILDER_ASSETS="$(../shared/envtest/install)"``).
:class:`Cluster` starts both as child processes on 127.0.0.1 and free ports,
with token authentication (a token file) and RBAC authorization on: the
``admin`` token is a superuser (``system:masters``); :data:`WEIR_USER` is the
identity of weir's service account (``system:serviceaccount:weir-system:weir``),
which has exactly what ``deploy/`` grants it once :meth:`Cluster.install_rbac`
applied those manifests. Nothing else runs (no controllers: namespaces are not
finalised, Pods never start, EndpointSlices exist only when a test writes them).

:class:`Api` is a small synchronous client for tests (the admin's, or any
token's) over ``httpx``: create, server-side apply, get, list, delete, status
writes, each returning the JSON the server answered.
"""

from __future__ import annotations

import json
import os
import shutil
import ssl
import subprocess
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from weir.providers.kubernetes.api import plural
from weir.testkit import free_port

__all__ = ["ASSETS_HINT", "WEIR_USER", "Api", "Cluster", "assets"]

#: What to do when the binaries are not there.
ASSETS_HINT = (
    "no real API server for tests/kube: set KUBEBUILDER_ASSETS to a folder holding kube-apiserver and etcd, "
    'e.g. export KUBEBUILDER_ASSETS="$(../shared/envtest/install)" (.ci/run does this)'
)

ADMIN_TOKEN = "weir-test-admin-token"
WEIR_TOKEN = "weir-test-weir-token"
#: The user weir's deployment runs as: its service account, as RBAC's ServiceAccount subject names it.
WEIR_USER = "system:serviceaccount:weir-system:weir"
#: Someone with no rights at all (RBAC refusals).
NOBODY_TOKEN = "weir-test-nobody-token"

#: Kinds that are not namespaced, among those tests write.
CLUSTER_SCOPED = frozenset(
    {
        "Namespace",
        "ClusterRole",
        "ClusterRoleBinding",
        "CustomResourceDefinition",
        "GatewayClass",
        "GatewayClassConfig",
    }
)


def assets() -> Path | None:
    """The folder of the binaries (``$KUBEBUILDER_ASSETS``), if it holds both."""
    folder = os.environ.get("KUBEBUILDER_ASSETS")
    if not folder:
        return None
    path = Path(folder)
    if all(os.access(path / b, os.X_OK) for b in ("kube-apiserver", "etcd")):
        return path
    return None


def resource_path(api_version: str, kind: str, namespace: str | None, name: str | None = None) -> str:
    """The REST path of ``kind`` (in ``namespace``; of the object ``name``)."""
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    if namespace and kind not in CLUSTER_SCOPED:
        base += f"/namespaces/{namespace}"
    base += f"/{plural(kind)}"
    return f"{base}/{name}" if name else base


class ApiError(Exception):
    """A request the API server refused: ``code`` and its ``Status`` body."""

    def __init__(self, code: int, body: Any) -> None:
        self.code = code
        self.body = body
        message = body.get("message") if isinstance(body, dict) else body
        super().__init__(f"{code}: {message}")


class Api:
    """A synchronous client for tests, as one user (one bearer token)."""

    def __init__(self, server: str, token: str, ca: Path) -> None:
        self.server = server
        self._client = httpx.Client(
            base_url=server,
            headers={"Authorization": f"Bearer {token}"},
            verify=ssl.create_default_context(cafile=str(ca)),
            timeout=20.0,
        )

    def close(self) -> None:
        self._client.close()

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self._client.request(method, path, **kwargs)
        try:
            body = response.json()
        except ValueError:
            body = response.text
        if response.status_code >= 400:
            raise ApiError(response.status_code, body)
        return body

    @staticmethod
    def _where(obj: dict[str, Any]) -> tuple[str, str, str | None, str]:
        metadata = obj["metadata"]
        return obj["apiVersion"], obj["kind"], metadata.get("namespace"), metadata["name"]

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        api_version, kind, namespace, _ = self._where(obj)
        result: dict[str, Any] = self.request("POST", resource_path(api_version, kind, namespace), json=obj)
        return result

    def apply(self, obj: dict[str, Any], manager: str = "weir-tests") -> dict[str, Any]:
        """Server-side apply (creates or updates; forces ownership as ``kubectl apply --server-side
        --force-conflicts`` would)."""
        api_version, kind, namespace, name = self._where(obj)
        result: dict[str, Any] = self.request(
            "PATCH",
            resource_path(api_version, kind, namespace, name),
            params={"fieldManager": manager, "force": "true"},
            content=yaml.safe_dump(obj).encode(),
            headers={"Content-Type": "application/apply-patch+yaml"},
        )
        return result

    def apply_all(self, objects: Iterable[dict[str, Any]]) -> None:
        for obj in objects:
            self.apply(obj)

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        try:
            result: dict[str, Any] = self.request("GET", resource_path(api_version, kind, namespace, name))
        except ApiError as exc:
            if exc.code == 404:
                return None
            raise
        return result

    def list(
        self, api_version: str, kind: str, namespace: str | None = None, **params: Any
    ) -> dict[str, Any]:
        result: dict[str, Any] = self.request(
            "GET", resource_path(api_version, kind, namespace), params=params
        )
        return result

    def delete(self, api_version: str, kind: str, namespace: str | None, name: str) -> None:
        try:
            self.request("DELETE", resource_path(api_version, kind, namespace, name))
        except ApiError as exc:
            if exc.code != 404:
                raise

    def put_status(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Replace ``obj``'s status (its ``metadata.resourceVersion`` must be current: 409 if not)."""
        api_version, kind, namespace, name = self._where(obj)
        result: dict[str, Any] = self.request(
            "PUT", resource_path(api_version, kind, namespace, name) + "/status", json=obj
        )
        return result

    def status(self, api_version: str, kind: str, namespace: str | None, name: str) -> dict[str, Any]:
        obj = self.get(api_version, kind, namespace, name)
        return (obj or {}).get("status") or {}

    def _served(self, crd: dict[str, Any]) -> bool:
        """Whether the API server answers for the CRD's kind yet (some time after ``Established``)."""
        spec = crd["spec"]
        version = f"{spec['group']}/{spec['versions'][0]['name']}"
        try:
            self.list(version, spec["names"]["kind"], limit=1)
        except ApiError as exc:
            if exc.code == 404:
                return False
            raise
        return True

    def wait_established(self, crd_names: Iterable[str], timeout: float = 30.0) -> None:
        """Until every CRD named is ``Established`` and its kind is served."""
        deadline = time.monotonic() + timeout
        for name in crd_names:
            while True:
                crd = self.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", None, name)
                found = ((crd or {}).get("status") or {}).get("conditions") or []
                conditions = {c["type"]: c["status"] for c in found}
                if conditions.get("Established") == "True" and self._served(crd or {}):
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"CRD {name} not established after {timeout} s: {conditions}")
                time.sleep(0.1)


@dataclass
class _Process:
    popen: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(10)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(10)


class Cluster:
    """etcd and kube-apiserver on 127.0.0.1 (see the module docstring). ``start()``, ``stop()``."""

    def __init__(self, folder: Path, binaries: Path) -> None:
        self.folder = folder
        self.binaries = binaries
        self.etcd_port = free_port()
        self.peer_port = free_port()
        self.port = free_port()
        self.server = f"https://127.0.0.1:{self.port}"
        self._etcd: _Process | None = None
        self._apiserver: _Process | None = None
        self._admin: Api | None = None

    # ------------------------------------------------------------------ processes

    def start(self) -> None:
        """Start etcd and the API server. A port taken between choosing it and binding it (another
        program on the machine: ``address already in use``) is chosen again, twice at most."""
        (self.folder / "pki").mkdir(parents=True, exist_ok=True)
        self._write_credentials()
        for attempt in range(3):
            try:
                self._start_etcd()
                self._start_apiserver()
                return
            except RuntimeError as exc:
                self.stop()
                if "address already in use" not in str(exc) or attempt == 2:
                    raise
                shutil.rmtree(self.folder / "etcd", ignore_errors=True)
                self.etcd_port, self.peer_port, self.port = free_port(), free_port(), free_port()
                self.server = f"https://127.0.0.1:{self.port}"
            except BaseException:
                self.stop()
                raise

    def stop(self) -> None:
        if self._admin is not None:
            self._admin.close()
            self._admin = None
        for proc in (self._apiserver, self._etcd):
            if proc is not None:
                proc.stop()
        self._apiserver = self._etcd = None

    def stop_apiserver(self) -> None:
        """Stop the API server only (an outage, as a restart of the control plane is)."""
        if self._apiserver is not None:
            self._apiserver.stop()
            self._apiserver = None

    def start_apiserver(self) -> None:
        self._start_apiserver()

    def restart(self, *, wipe: bool) -> None:
        """Stop both; with ``wipe``, delete etcd's data (every object, every resourceVersion); start
        both again on the same ports."""
        self.stop()
        if wipe:
            shutil.rmtree(self.folder / "etcd")
        self._start_etcd()
        self._start_apiserver()

    def pids(self) -> list[int]:
        return [p.popen.pid for p in (self._etcd, self._apiserver) if p is not None]

    def _write_credentials(self) -> None:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        (self.folder / "sa.key").write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.TraditionalOpenSSL,
                serialization.NoEncryption(),
            )
        )
        (self.folder / "sa.pub").write_bytes(
            key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        (self.folder / "tokens.csv").write_text(
            f'{ADMIN_TOKEN},admin,admin-uid,"system:masters"\n'
            f'{WEIR_TOKEN},{WEIR_USER},weir-uid,"system:serviceaccounts,system:serviceaccounts:weir-system"\n'
            f"{NOBODY_TOKEN},nobody,nobody-uid\n"
        )

    def _spawn(self, name: str, args: list[str]) -> _Process:
        log = self.folder / f"{name}.log"
        with log.open("ab") as out:
            popen = subprocess.Popen(
                [str(self.binaries / name), *args], stdout=out, stderr=subprocess.STDOUT, cwd=self.folder
            )
        return _Process(popen, log)

    def _start_etcd(self) -> None:
        client = f"http://127.0.0.1:{self.etcd_port}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        self._etcd = self._spawn(
            "etcd",
            [
                "--data-dir", str(self.folder / "etcd"),
                "--listen-client-urls", client, "--advertise-client-urls", client,
                "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                "--initial-cluster", f"default={peer}", "--name", "default",
                "--unsafe-no-fsync",
            ],
        )  # fmt: skip

    def _start_apiserver(self) -> None:
        self._apiserver = self._spawn(
            "kube-apiserver",
            [
                "--etcd-servers", f"http://127.0.0.1:{self.etcd_port}",
                "--bind-address", "127.0.0.1", "--secure-port", str(self.port),
                "--cert-dir", str(self.folder / "pki"),
                "--service-account-issuer", "https://kubernetes.default.svc",
                "--service-account-key-file", str(self.folder / "sa.pub"),
                "--service-account-signing-key-file", str(self.folder / "sa.key"),
                "--token-auth-file", str(self.folder / "tokens.csv"),
                "--authorization-mode", "RBAC",
                "--service-cluster-ip-range", "10.96.0.0/16",
                "--disable-admission-plugins", "ServiceAccount",
                "--allow-privileged=true",
                "--audit-policy-file", str(self._audit_policy()),
                "--audit-log-path", str(self.audit_log),
            ],
        )  # fmt: skip
        self._wait_ready()

    @property
    def audit_log(self) -> Path:
        """The API server's audit log: one JSON event per request weir's user made."""
        return self.folder / "audit.log"

    def _audit_policy(self) -> Path:
        path = self.folder / "audit-policy.yaml"
        policy = {
            "apiVersion": "audit.k8s.io/v1",
            "kind": "Policy",
            "omitStages": ["RequestReceived", "ResponseStarted"],
            "rules": [{"level": "Metadata", "users": [WEIR_USER]}, {"level": "None"}],
        }
        path.write_text(yaml.safe_dump(policy))
        return path

    def audit_mark(self) -> int:
        """Where the audit log ends now (for :meth:`refused_since`)."""
        return self.audit_log.stat().st_size if self.audit_log.exists() else 0

    def requests_since(self, mark: int) -> list[tuple[int, str, str]]:
        """Requests weir's user made since ``mark``: ``(code, verb, URI)`` each."""
        if not self.audit_log.exists():
            return []
        with self.audit_log.open("rb") as f:
            f.seek(mark)
            lines = f.read().decode().splitlines()
        out = []
        for line in lines:
            event = json.loads(line)
            code = int((event.get("responseStatus") or {}).get("code") or 0)
            out.append((code, str(event["verb"]), str(event["requestURI"])))
        return out

    def refused_since(self, mark: int) -> list[str]:
        """Requests of weir's user that RBAC refused (403) since ``mark``: ``VERB URI`` each."""
        return [f"{verb} {uri}" for code, verb, uri in self.requests_since(mark) if code == 403]

    def _wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            for proc in (self._etcd, self._apiserver):
                if proc is not None and proc.popen.poll() is not None:
                    raise RuntimeError(f"{proc.log.stem} exited: {proc.log.read_text()[-3000:]}")
            try:
                response = httpx.get(
                    f"{self.server}/readyz",
                    headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
                    verify=False,  # the serving certificate is written by the server as it starts
                    timeout=2.0,
                )
                if response.status_code == 200 and self.ca.exists():
                    return
                last = f"{response.status_code} {response.text[-500:]}"
            except httpx.HTTPError as exc:
                last = str(exc)
            time.sleep(0.2)
        raise TimeoutError(f"kube-apiserver not ready after {timeout} s: {last}")

    # ------------------------------------------------------------------ access

    @property
    def ca(self) -> Path:
        """The API server's self-signed serving certificate, which clients trust."""
        return self.folder / "pki" / "apiserver.crt"

    @property
    def admin(self) -> Api:
        if self._admin is None:
            self._admin = Api(self.server, ADMIN_TOKEN, self.ca)
        return self._admin

    def api(self, token: str) -> Api:
        return Api(self.server, token, self.ca)

    def kubeconfig(self, name: str, token: str, namespace: str | None = None) -> Path:
        """A kubeconfig file for ``token`` (its context's namespace: ``namespace``)."""
        context: dict[str, Any] = {"cluster": "envtest", "user": name}
        if namespace is not None:
            context["namespace"] = namespace
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "envtest", "cluster": {"server": self.server, "certificate-authority": str(self.ca)}}
            ],
            "users": [{"name": name, "user": {"token": token}}],
            "contexts": [{"name": name, "context": context}],
            "current-context": name,
        }
        path = self.folder / f"kubeconfig-{name}"
        path.write_text(yaml.safe_dump(config))
        return path


def documents(path: Path) -> Iterator[dict[str, Any]]:
    """The objects of a multi-document YAML file."""
    for doc in yaml.safe_load_all(path.read_text()):
        if doc:
            yield doc
