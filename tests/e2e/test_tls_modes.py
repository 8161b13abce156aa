"""XBackend TLS modes, end to end: one weir + real Envoy, many XBackends, real TLS upstreams.

Every case is its own XBackend (own external hostname, own route path
``/<case>/``, own upstream on 127.0.0.2), all served by one weir instance so
the module stays fast while each test only looks at its own backend: its own
upstream's recordings, its own cluster's Envoy stats, its own status. The
rotation tests each rewrite only their own manifest file.

The DNS stub maps every external hostname to 127.0.0.2. "5xx and nothing
recorded" is the proof that a refused TLS handshake never turned into a
request (nor into plaintext).
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import datetime
import ssl
import textwrap
import warnings
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from weir_harness import GATEWAY_HEAD, Weir, eventually, indent_pem, pid_alive

from weir.testkit import (
    CertAuthority,
    DnsStub,
    IssuedCert,
    RecordingUpstream,
    free_port,
    make_ca,
    server_ssl_context,
)
from weir.translate.settings import DEFAULT_SYSTEM_TRUST_FILE

pytestmark = pytest.mark.asyncio(loop_scope="module")

UPSTREAM_IP = "127.0.0.2"
SPIFFE_API = "spiffe://example.test/ns/default/sa/api"
ROTATION_CASES = ("rot-ca", "rot-client", "rot-pooled")  # each in its own manifest file


# --------------------------------------------------------------------------- manifests


def route_and_xbackend(case: str, hostname: str, port: int, tls: str) -> str:
    """HTTPRoute ``/<case>`` → XBackend ``<case>`` for ``hostname:port``, with the ``tls:`` block ``tls``."""
    return f"""\
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {case}, namespace: default}}
spec:
  parentRefs: [{{name: gw}}]
  rules:
  - matches: [{{path: {{type: PathPrefix, value: /{case}}}}}]
    backendRefs: [{{group: gateway.networking.x-k8s.io, kind: XBackend, name: {case}}}]
---
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackend
metadata: {{name: {case}, namespace: default}}
spec:
  type: ExternalHostname
  externalHostname: {{hostname: {hostname}}}
  port: {{port: {port}}}
  tls:
{textwrap.indent(textwrap.dedent(tls).strip(), "    ")}
"""


def config_map(name: str, pem: str) -> str:
    return f"""\
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: {name}, namespace: default}}
data:
  ca.crt: |
{indent_pem(pem, 4)}"""


def ca_secret(name: str, pem: str) -> str:
    encoded = base64.b64encode(pem.encode()).decode()
    return f"""\
---
apiVersion: v1
kind: Secret
metadata: {{name: {name}, namespace: default}}
type: Opaque
data: {{ca.crt: {encoded}}}
"""


def tls_secret(name: str, cert: IssuedCert) -> str:
    crt = base64.b64encode(cert.chain_pem.encode()).decode()
    key = base64.b64encode(cert.key_pem.encode()).decode()
    return f"""\
---
apiVersion: v1
kind: Secret
metadata: {{name: {name}, namespace: default}}
type: kubernetes.io/tls
data: {{tls.crt: {crt}, tls.key: {key}}}
"""


def server_only(hostname: str, *refs: tuple[str, str], sans: str = "") -> str:
    """``mode: ServerOnly`` verified for ``hostname`` against (kind, name) CA references."""
    ca_refs = ", ".join(f'{{group: "", kind: {kind}, name: {name}}}' for kind, name in refs)
    text = f"""\
mode: ServerOnly
validation:
  hostname: {hostname}
  caCertificateRefs: [{ca_refs}]
"""
    if sans:
        text += f"  subjectAltNames: {sans}\n"
    return text


def rotation_ca_manifest(port: int, ca_pem: str) -> str:
    host = "rot-ca.example.test"
    return route_and_xbackend("rot-ca", host, port, server_only(host, ("ConfigMap", "rot-ca"))) + config_map(
        "rot-ca", ca_pem
    )


def rotation_client_manifest(case: str, port: int, ca_pem: str, client: IssuedCert) -> str:
    host = f"{case}.example.test"
    tls = f"""\
mode: ClientAndServer
clientCertificateRef: {{group: "", kind: Secret, name: {case}-cert}}
validation:
  hostname: {host}
  caCertificateRefs: [{{group: "", kind: ConfigMap, name: {case}-ca}}]
"""
    return (
        route_and_xbackend(case, host, port, tls)
        + config_map(f"{case}-ca", ca_pem)
        + tls_secret(f"{case}-cert", client)
    )


# --------------------------------------------------------------------------- the shared world


@dataclass
class World:
    weir: Weir
    dns: DnsStub
    ca: CertAuthority  # trusted through caCertificateRefs
    other_ca: CertAuthority  # trusted by nobody
    client_ca: CertAuthority  # what the mTLS upstreams trust for client certificates
    upstreams: dict[str, RecordingUpstream] = field(default_factory=dict)

    async def get(self, case: str, path: str = "/x") -> httpx.Response:
        async with httpx.AsyncClient(timeout=5) as client:
            return await client.get(self.weir.url(f"/{case}{path}"))

    async def admin(self, path: str) -> httpx.Response:
        """GET from Envoy's admin interface (its unix socket)."""
        controller = self.weir.controller
        assert controller is not None and controller.envoy is not None
        socket = controller.envoy.admin_socket
        assert socket is not None
        async with httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=socket), timeout=5) as client:
            response = await client.get("http://envoy" + path)
        response.raise_for_status()
        return response

    async def stat(self, case: str, name: str) -> int:
        """Envoy counter ``cluster.xbackend/default/<case>.<name>`` (0 if not there)."""
        body = (await self.admin(f"/stats?filter={name.rsplit('.', 1)[-1]}")).text
        prefix = f"cluster.xbackend/default/{case}.{name}: "
        values = [int(line[len(prefix) :]) for line in body.splitlines() if line.startswith(prefix)]
        return values[0] if values else 0

    async def client_chain_in_envoy(self, case: str) -> str | None:
        """The certificate chain Envoy holds in the client-certificate secret of XBackend ``case``."""
        dump = (await self.admin("/config_dump?resource=dynamic_active_secrets")).json()
        for entry in dump.get("configs", []):
            if entry.get("name", "").startswith(f"client-cert/xbackend/default/{case}"):
                chain: str = entry["secret"]["tls_certificate"]["certificate_chain"]["inline_string"]
                return chain
        return None

    def conditions(self, case: str) -> dict[str, dict[str, Any]]:
        [parent] = self.weir.status_of("XBackend", "default", case)["parents"]
        return {c["type"]: c for c in parent["conditions"]}

    async def refused(self, case: str, stat: str | None = None) -> httpx.Response:
        """The request fails with 5xx, the upstream saw nothing, and ``stat`` (if given) went up."""
        before = await self.stat(case, stat) if stat else 0
        response = await self.get(case)
        assert 500 <= response.status_code < 600, (response.status_code, response.text)
        assert self.upstreams[case].requests == [], f"{case}: a request reached the upstream"
        if stat:
            after = await self.stat(case, stat)
            assert after > before, f"{case}: Envoy stat {stat} did not move ({before} → {after})"
        return response


@dataclass
class Case:
    """One XBackend and its upstream. ``cert`` None means a plaintext upstream."""

    hostname: str
    tls: str
    cert: IssuedCert | None
    docs: str = ""
    server: dict[str, Any] = field(default_factory=dict)  # extra server_ssl_context arguments
    tweak: Any = None  # called with the server SSLContext


def _tls11_only(ctx: ssl.SSLContext) -> None:
    # OpenSSL 3 refuses TLS < 1.2 at security level >= 1; level 0 makes this a real TLS 1.1 server.
    ctx.set_ciphers("DEFAULT:@SECLEVEL=0")


def build_cases(w: World, sys_ca: CertAuthority) -> dict[str, Case]:
    ca, other = w.ca, w.other_ca

    def plain_so(case: str, cert_ca: CertAuthority = ca, **issue: Any) -> Case:
        host = f"{case}.example.test"
        names = issue.pop("names", (host,))
        return Case(
            host, server_only(host, ("ConfigMap", "good-ca")), cert_ca.issue_server_cert(*names, **issue)
        )

    def with_sans(case: str, sans: str, *names: str, uri_sans: tuple[str, ...] = ()) -> Case:
        host = f"{case}.example.test"
        cert = ca.issue_server_cert(*names, uri_sans=uri_sans)
        return Case(host, server_only(host, ("ConfigMap", "good-ca"), sans=sans), cert)

    def system(case: str, cert_ca: CertAuthority) -> Case:
        host = f"{case}.example.test"
        tls = f"mode: ServerOnly\nvalidation: {{hostname: {host}, wellKnownCACertificates: System}}\n"
        return Case(host, tls, cert_ca.issue_server_cert(host))

    mtls_server = {"verify_client": w.client_ca}
    client_cert = w.client_ca.issue_client_cert("weir-mtls-client")
    cases = {
        # 1. plaintext
        "none": Case("none.example.test", "mode: None", None),
        # 2. CA references
        "cm": plain_so("cm"),
        "secret": Case(
            "secret.example.test",
            server_only("secret.example.test", ("Secret", "secret-ca")),
            ca.issue_server_cert("secret.example.test"),
            docs=ca_secret("secret-ca", ca.cert_pem),
        ),
        "two-refs": Case(
            "two-refs.example.test",
            server_only("two-refs.example.test", ("ConfigMap", "unrelated-ca"), ("Secret", "two-refs-ca")),
            ca.issue_server_cert("two-refs.example.test"),
            docs=config_map("unrelated-ca", other.cert_pem) + ca_secret("two-refs-ca", ca.cert_pem),
        ),
        # 3. the system trust store
        "sys-private": system("sys-private", ca),
        "sys-trusted": system("sys-trusted", sys_ca),
        "no-validation": Case(
            "no-validation.example.test",
            "mode: ServerOnly",
            sys_ca.issue_server_cert("no-validation.example.test"),
        ),
        # 4. SNI from validation.hostname, Host from the external hostname
        "sni": Case(
            "sni-ext.example.test",
            server_only("sni-verified.example.test", ("ConfigMap", "good-ca")),
            ca.issue_server_cert("sni-verified.example.test"),
        ),
        # 5. subjectAltNames
        "san-exact": with_sans(
            "san-exact", "[{type: Hostname, hostname: alt.example.test}]", "alt.example.test"
        ),
        "san-not-hostname": with_sans(
            "san-not-hostname",
            "[{type: Hostname, hostname: alt.example.test}]",
            "san-not-hostname.example.test",
        ),
        "san-wild": with_sans(
            "san-wild", "[{type: Hostname, hostname: '*.example.test'}]", "api.example.test"
        ),
        "san-wild-miss": with_sans(
            "san-wild-miss", "[{type: Hostname, hostname: '*.example.org'}]", "api.example.test"
        ),
        "san-wild-deep": with_sans(
            "san-wild-deep", "[{type: Hostname, hostname: '*.example.test'}]", "a.api.example.test"
        ),
        "san-uri": with_sans("san-uri", f"[{{type: URI, uri: '{SPIFFE_API}'}}]", uri_sans=(SPIFFE_API,)),
        "san-uri-miss": with_sans(
            "san-uri-miss",
            "[{type: URI, uri: 'spiffe://example.test/ns/default/sa/other'}]",
            uri_sans=(SPIFFE_API,),
        ),
        # 6. certificates that must not verify
        "wrong-ca": plain_so("wrong-ca", other),
        "expired": plain_so("expired", valid_for=-datetime.timedelta(minutes=5)),
        "wrong-name": plain_so("wrong-name", names=("someone-else.example.test",)),
        # 7. TLS versions
        "tls12": dataclasses.replace(plain_so("tls12"), server={"maximum_version": ssl.TLSVersion.TLSv1_2}),
        "tls11": dataclasses.replace(
            plain_so("tls11"),
            server={"minimum_version": ssl.TLSVersion.TLSv1_1, "maximum_version": ssl.TLSVersion.TLSv1_1},
            tweak=_tls11_only,
        ),
        # 8. mutual TLS
        "mtls": Case(
            "mtls.example.test",
            server_only("mtls.example.test", ("ConfigMap", "good-ca")).replace(
                "mode: ServerOnly\n",
                'mode: ClientAndServer\nclientCertificateRef: {group: "", kind: Secret, name: mtls-client}\n',
            ),
            ca.issue_server_cert("mtls.example.test"),
            docs=tls_secret("mtls-client", client_cert),
            server=mtls_server,
        ),
        "mtls-no-client-cert": dataclasses.replace(plain_so("mtls-no-client-cert"), server=mtls_server),
        # 10. references that do not resolve
        "missing-ca": Case(
            "missing-ca.example.test",
            server_only("missing-ca.example.test", ("ConfigMap", "does-not-exist")),
            ca.issue_server_cert("missing-ca.example.test"),
        ),
        "missing-ca-plain": Case(
            "missing-ca-plain.example.test",
            server_only("missing-ca-plain.example.test", ("ConfigMap", "does-not-exist")),
            None,
        ),
    }
    return cases


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    base = tmp_path_factory.mktemp("tls-modes")
    folder = base / "manifests"
    folder.mkdir()
    # "The system trust store": the real bundle plus one private CA, so that
    # System can be proven both to be used (sys_ca → 200) and to verify
    # (any other private CA → 5xx).
    sys_ca = make_ca("pretend-public root")
    system_bundle = base / "system-ca-certificates.crt"
    real = Path(DEFAULT_SYSTEM_TRUST_FILE)
    system_bundle.write_text((real.read_text() if real.exists() else "") + sys_ca.cert_pem)

    async with DnsStub() as dns:
        harness = Weir(folder, dns, free_port(), egress_denied_cidrs=())  # upstreams are on loopback
        harness.settings = dataclasses.replace(harness.settings, system_trust_file=str(system_bundle))
        w = World(harness, dns, make_ca("e2e CA"), make_ca("other CA"), make_ca("client CA"))
        try:
            text = GATEWAY_HEAD.format(port=harness.gateway_port) + config_map("good-ca", w.ca.cert_pem)
            for name, case in build_cases(w, sys_ca).items():
                ctx = None
                if case.cert is not None:
                    with warnings.catch_warnings():  # ssl.TLSVersion.TLSv1_1 is deprecated (on purpose here)
                        warnings.simplefilter("ignore", DeprecationWarning)
                        ctx = server_ssl_context(case.cert, **case.server)
                    if case.tweak:
                        case.tweak(ctx)
                upstream = await RecordingUpstream(name, host=UPSTREAM_IP, ssl_context=ctx).start()
                w.upstreams[name] = upstream
                dns.set(case.hostname, [UPSTREAM_IP])
                text += route_and_xbackend(name, case.hostname, upstream.port, case.tls) + case.docs
            harness.write("cases.yaml", text)
            for name in ROTATION_CASES:
                host = f"{name}.example.test"
                verify_client = None if name == "rot-ca" else w.client_ca
                ctx = server_ssl_context(w.ca.issue_server_cert(host), verify_client=verify_client)
                w.upstreams[name] = await RecordingUpstream(name, host=UPSTREAM_IP, ssl_context=ctx).start()
                dns.set(host, [UPSTREAM_IP])
            harness.write(
                "rot-ca.yaml", rotation_ca_manifest(w.upstreams["rot-ca"].port, w.other_ca.cert_pem)
            )
            for name in ("rot-client", "rot-pooled"):
                manifest = rotation_client_manifest(
                    name, w.upstreams[name].port, w.ca.cert_pem, w.client_ca.issue_client_cert("client-v1")
                )
                harness.write(f"{name}.yaml", manifest)
            await harness.start()
            yield w
        finally:
            await harness.stop()
            for upstream in w.upstreams.values():
                await upstream.stop()
            for pid in harness.envoy_pids:
                assert not pid_alive(pid), f"Envoy {pid} survived stop()"


# --------------------------------------------------------------------------- 1. mode None


async def test_mode_none_is_plaintext_and_status_says_so(world: World) -> None:
    response = await world.get("none")
    assert response.status_code == 200, response.text
    [seen] = world.upstreams["none"].requests
    assert (seen.http_version, seen.tls_version, seen.sni, seen.alpn) == ("1.1", None, None, None)
    assert seen.host == "none.example.test"
    accepted = world.conditions("none")["Accepted"]
    assert accepted["status"] == "True"
    assert "unencrypted" in accepted["message"], accepted


# --------------------------------------------------------------------------- 2. CA references


@pytest.mark.parametrize("case", ["cm", "secret", "two-refs"])
async def test_server_only_trusts_ca_references(world: World, case: str) -> None:
    response = await world.get(case)
    assert response.status_code == 200, response.text
    seen = world.upstreams[case].requests[-1]
    assert seen.sni == f"{case}.example.test"
    assert seen.host == f"{case}.example.test"
    assert seen.tls_version is not None
    conditions = world.conditions(case)
    assert (conditions["Accepted"]["status"], conditions["ResolvedRefs"]["status"]) == ("True", "True")


# --------------------------------------------------------------------------- 3. system trust


async def test_system_trust_rejects_a_private_ca(world: World) -> None:
    await world.refused("sys-private", "ssl.fail_verify_error")


@pytest.mark.parametrize("case", ["sys-trusted", "no-validation"])
async def test_system_trust_is_the_configured_bundle(world: World, case: str) -> None:
    response = await world.get(case)
    assert response.status_code == 200, response.text
    seen = world.upstreams[case].requests[-1]
    assert seen.sni == seen.host == f"{case}.example.test"


# --------------------------------------------------------------------------- 4. SNI vs Host


async def test_sni_is_validation_hostname_and_host_is_external_hostname(world: World) -> None:
    response = await world.get("sni")
    assert response.status_code == 200, response.text
    seen = world.upstreams["sni"].requests[-1]
    assert seen.sni == "sni-verified.example.test"
    assert seen.host == "sni-ext.example.test"


# --------------------------------------------------------------------------- 5. subjectAltNames


@pytest.mark.parametrize("case", ["san-exact", "san-wild", "san-uri"])
async def test_subject_alt_names_that_match(world: World, case: str) -> None:
    response = await world.get(case)
    assert response.status_code == 200, response.text
    # SNI stays validation.hostname even though the certificate does not carry it.
    assert world.upstreams[case].requests[-1].sni == f"{case}.example.test"


@pytest.mark.parametrize("case", ["san-not-hostname", "san-wild-miss", "san-wild-deep", "san-uri-miss"])
async def test_subject_alt_names_that_do_not_match(world: World, case: str) -> None:
    await world.refused(case, "ssl.fail_verify_san")


# --------------------------------------------------------------------------- 6. bad certificates


@pytest.mark.parametrize(
    ("case", "stat"),
    [
        ("wrong-ca", "ssl.fail_verify_error"),
        ("expired", "ssl.fail_verify_error"),
        ("wrong-name", "ssl.fail_verify_san"),
    ],
)
async def test_bad_server_certificates_are_refused(world: World, case: str, stat: str) -> None:
    await world.refused(case, stat)


# --------------------------------------------------------------------------- 7. TLS versions


async def test_tls_1_3_by_default(world: World) -> None:
    response = await world.get("cm")
    assert response.status_code == 200, response.text
    assert world.upstreams["cm"].requests[-1].tls_version == "TLSv1.3"


async def test_tls_1_2_only_upstream_works(world: World) -> None:
    response = await world.get("tls12")
    assert response.status_code == 200, response.text
    assert world.upstreams["tls12"].requests[-1].tls_version == "TLSv1.2"


async def test_tls_1_1_only_upstream_is_refused(world: World) -> None:
    # First prove the upstream really speaks TLS 1.1, so the 5xx is Envoy refusing it, not a broken
    # server. (Envoy refuses twice over: minimum TLSv1_2, and its default upstream cipher list has
    # only AEAD suites, which TLS 1.1 cannot use; lowering only the minimum still gives 5xx.)
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        client.minimum_version = client.maximum_version = ssl.TLSVersion.TLSv1_1
    client.set_ciphers("DEFAULT:@SECLEVEL=0")
    world.ca.configure_trust(client)
    upstream = world.upstreams["tls11"]
    _, writer = await asyncio.open_connection(
        UPSTREAM_IP, upstream.port, ssl=client, server_hostname="tls11.example.test"
    )
    try:
        assert writer.get_extra_info("ssl_object").version() == "TLSv1.1"
    finally:
        writer.close()
    await world.refused("tls11")


# --------------------------------------------------------------------------- 8. mutual TLS


async def test_client_and_server_presents_the_client_certificate(world: World) -> None:
    response = await world.get("mtls")
    assert response.status_code == 200, response.text
    assert world.upstreams["mtls"].requests[-1].client_cn == "weir-mtls-client"


async def test_server_only_to_an_upstream_requiring_client_certificates_fails(world: World) -> None:
    await world.refused("mtls-no-client-cert")


# --------------------------------------------------------------------------- 9. rotation


async def test_ca_rotation_applies_without_restarting_envoy(world: World) -> None:
    pid = world.weir.envoy_pid
    await world.refused("rot-ca", "ssl.fail_verify_error")
    world.weir.write("rot-ca.yaml", rotation_ca_manifest(world.upstreams["rot-ca"].port, world.ca.cert_pem))

    async def ok() -> bool:
        return (await world.get("rot-ca")).status_code == 200

    _, elapsed = await eventually(ok, timeout=5, interval=0.02)
    print(f"CA rotation took effect in {elapsed * 1000:.0f} ms")
    assert elapsed < 1.0
    assert world.weir.envoy_pid == pid


async def test_client_certificate_rotation_reaches_new_connections_without_restart(world: World) -> None:
    pid = world.weir.envoy_pid
    upstream = world.upstreams["rot-client"]
    response = await world.get("rot-client")
    assert response.status_code == 200, response.text
    assert upstream.requests[-1].client_cn == "client-v1"
    world.weir.write(
        "rot-client.yaml",
        rotation_client_manifest(
            "rot-client", upstream.port, world.ca.cert_pem, world.client_ca.issue_client_cert("client-v2")
        ),
    )

    async def rotated() -> bool:
        # Restarting the upstream closes every connection, so each attempt here is a
        # fresh handshake with whatever certificate Envoy has (the pooled case is below).
        await upstream.stop()
        await upstream.start()
        response = await world.get("rot-client")
        return response.status_code == 200 and upstream.requests[-1].client_cn == "client-v2"

    _, elapsed = await eventually(rotated, timeout=5, interval=0.02)
    print(f"client certificate rotation took effect in {elapsed * 1000:.0f} ms")
    assert elapsed < 1.0
    assert world.weir.envoy_pid == pid


async def test_client_certificate_rotation_replaces_pooled_connections(world: World) -> None:
    """Secrets are named by content, so a rotation replaces the cluster and Envoy drains old pools."""
    pid = world.weir.envoy_pid
    upstream = world.upstreams["rot-pooled"]
    url = world.weir.url("/rot-pooled/x")
    # One keep-alive client: one downstream connection, one Envoy worker, its pooled upstream connection.
    async with httpx.AsyncClient(timeout=5) as client:
        response = await client.get(url)
        assert response.status_code == 200, response.text
        assert upstream.requests[-1].client_cn == "client-v1"
        v2 = world.client_ca.issue_client_cert("client-v2")
        world.weir.write(
            "rot-pooled.yaml", rotation_client_manifest("rot-pooled", upstream.port, world.ca.cert_pem, v2)
        )

        async def envoy_has_v2() -> bool:
            return await world.client_chain_in_envoy("rot-pooled") == v2.chain_pem

        await eventually(envoy_has_v2, timeout=5)

        async def rotated() -> bool:
            response = await client.get(url)
            return response.status_code == 200 and upstream.requests[-1].client_cn == "client-v2"

        await eventually(rotated, timeout=1.0, interval=0.02)
    assert world.weir.envoy_pid == pid


# --------------------------------------------------------------------------- 10. unresolvable references


@pytest.mark.parametrize("case", ["missing-ca", "missing-ca-plain"])
async def test_missing_ca_reference_fails_closed(world: World, case: str) -> None:
    await world.refused(case)
    conditions = world.conditions(case)
    assert conditions["Accepted"]["status"] == "False"
    assert conditions["Accepted"]["reason"] == "NoValidCACertificate"
    assert conditions["ResolvedRefs"]["status"] == "False"
    assert conditions["ResolvedRefs"]["reason"] == "InvalidCACertificateRef"
    assert "does-not-exist" in conditions["ResolvedRefs"]["message"]
