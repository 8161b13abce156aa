"""Gateway listeners end to end: HTTPS termination, certificates, TLS passthrough and termination.

Real Envoy, certificates made by ``trustme`` (through :mod:`weir.testkit.pki`),
upstreams on loopback. Clients connect to 127.0.0.1 and choose the server
name (SNI) themselves; they verify the certificate they get against the CA
they trust, for that name, so a test knows whose certificate answered: the
gateway's (HTTPS, TLS termination) or the upstream's (passthrough).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import textwrap
from collections import Counter
from typing import Any

import httpx
import pytest
from cryptography import x509
from weir_harness import Weir, eventually

from echo_tcp import EchoServer
from weir.testkit import (
    CertAuthority,
    DnsStub,
    IssuedCert,
    RecordingUpstream,
    client_ssl_context,
    free_port,
    make_ca,
    server_ssl_context,
)

pytestmark = pytest.mark.timeout(90)

XB = "gateway.networking.x-k8s.io"


@pytest.fixture
def ca() -> CertAuthority:
    """The CA of the gateway's certificates (what clients of the gateway trust)."""
    return make_ca("gateway CA")


# --------------------------------------------------------------------------
# Manifests
# --------------------------------------------------------------------------


def gateway(listeners: str, *, name: str = "gw", namespace: str = "default") -> str:
    return f"""\
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {{name: weir}}
spec: {{controllerName: weir.dev/gateway-controller}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  gatewayClassName: weir
  listeners:
{textwrap.indent(textwrap.dedent(listeners).strip(), "  ")}
"""


def https_listener(name: str, port: int, hostname: str | None, secret: str, secret_ns: str = "") -> str:
    host = f"hostname: {hostname}\n  " if hostname else ""
    ns = f", namespace: {secret_ns}" if secret_ns else ""
    return f"""\
- name: {name}
  port: {port}
  protocol: HTTPS
  {host}tls: {{certificateRefs: [{{name: {secret}{ns}}}]}}
"""


def tls_secret(name: str, cert: IssuedCert, namespace: str = "default") -> str:
    return f"""\
---
apiVersion: v1
kind: Secret
metadata: {{name: {name}, namespace: {namespace}}}
type: kubernetes.io/tls
stringData:
  tls.crt: |
{textwrap.indent(cert.chain_pem, "    ")}  tls.key: |
{textwrap.indent(cert.key_pem, "    ")}"""


def raw_secret(name: str, crt: str, key: str) -> str:
    return f"""\
---
apiVersion: v1
kind: Secret
metadata: {{name: {name}, namespace: default}}
type: kubernetes.io/tls
stringData: {{tls.crt: {json.dumps(crt)}, tls.key: {json.dumps(key)}}}
"""


def service(name: str, ip: str, port: int) -> str:
    return f"""\
---
apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: default}}
spec: {{ports: [{{name: main, port: {port}}}]}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: {name}-1, namespace: default, labels: {{kubernetes.io/service-name: {name}}}}}
addressType: IPv4
ports: [{{name: main, port: {port}}}]
endpoints: [{{addresses: [{ip}]}}]
"""


def http_route(name: str, section: str, hostnames: list[str], backend: str, port: int) -> str:
    return f"""\
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}, namespace: default}}
spec:
  parentRefs: [{{name: gw, sectionName: {section}}}]
  hostnames: [{", ".join(hostnames)}]
  rules:
  - backendRefs: [{{name: {backend}, port: {port}}}]
"""


def tls_route(name: str, section: str, hostnames: list[str], backend_refs: str) -> str:
    return f"""\
---
apiVersion: gateway.networking.k8s.io/v1
kind: TLSRoute
metadata: {{name: {name}, namespace: default}}
spec:
  parentRefs: [{{name: gw, sectionName: {section}}}]
  hostnames: [{", ".join(hostnames)}]
  rules:
  - backendRefs: [{backend_refs}]
"""


# --------------------------------------------------------------------------
# Clients
# --------------------------------------------------------------------------


async def handshake(
    port: int, server_name: str, trust: CertAuthority, alpn: tuple[str, ...] = ("h2", "http/1.1")
) -> tuple[x509.Certificate, str | None]:
    """TLS to the gateway with ``server_name``, verified against ``trust``: the certificate and ALPN."""
    context = client_ssl_context(trust, alpn=alpn)
    _, writer = await asyncio.wait_for(
        asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname=server_name), 10
    )
    try:
        sslobj = writer.get_extra_info("ssl_object")
        der = sslobj.getpeercert(binary_form=True)
        return x509.load_der_x509_certificate(der), sslobj.selected_alpn_protocol()
    finally:
        writer.close()
        with contextlib.suppress(OSError, ssl.SSLError):
            await writer.wait_closed()


async def refused(port: int, server_name: str) -> bool:
    """Whether no TLS handshake with ``server_name`` completes, whatever the certificate.

    The client verifies nothing here, so a handshake presenting a wrong
    certificate counts as served (it must not happen either).
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        _, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname=server_name), 10
        )
    except (OSError, ssl.SSLError, asyncio.IncompleteReadError, TimeoutError):
        return True
    writer.close()
    with contextlib.suppress(OSError, ssl.SSLError):
        await writer.wait_closed()
    return False


async def https_get(
    port: int, server_name: str, trust: CertAuthority, *, host: str | None = None, http2: bool = False
) -> httpx.Response:
    """GET / over HTTPS to the gateway: SNI ``server_name``, Host ``host`` (default: the same)."""
    async with httpx.AsyncClient(verify=client_ssl_context(trust), http2=http2, timeout=10) as client:
        return await client.get(
            f"https://127.0.0.1:{port}/",
            headers={"host": host or server_name},
            extensions={"sni_hostname": server_name},
        )


def names_of(cert: x509.Certificate) -> list[str]:
    return cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.DNSName
    )


def listener_status(weir: Weir, name: str, gateway: str = "gw") -> dict[str, Any]:
    status = weir.status_of("Gateway", "default", gateway)
    listener: dict[str, Any] = next(entry for entry in status["listeners"] if entry["name"] == name)
    return listener


def condition(conditions: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    return next(c for c in conditions if c["type"] == kind)


# --------------------------------------------------------------------------
# HTTPS
# --------------------------------------------------------------------------


async def test_https_picks_certificate_and_routes_by_server_name(weir: Weir, ca: CertAuthority) -> None:
    port = weir.gateway_port
    cert_a, cert_b = ca.issue_server_cert("a.example.test"), ca.issue_server_cert("b.example.test")
    async with (
        RecordingUpstream("a", host="127.0.0.2") as up_a,
        RecordingUpstream("b", host="127.0.0.3") as up_b,
    ):
        weir.write(
            "gw.yaml",
            gateway(
                https_listener("a", port, "a.example.test", "a-cert")
                + https_listener("b", port, "b.example.test", "b-cert")
            )
            + tls_secret("a-cert", cert_a)
            + tls_secret("b-cert", cert_b)
            + service("svc-a", "127.0.0.2", up_a.port)
            + service("svc-b", "127.0.0.3", up_b.port)
            + http_route("a", "a", ["a.example.test"], "svc-a", up_a.port)
            + http_route("b", "b", ["b.example.test"], "svc-b", up_b.port),
        )
        await weir.start()

        # The certificate is chosen by SNI (the client checks it is valid for the name it asked).
        got_a, alpn = await handshake(port, "a.example.test", ca)
        assert names_of(got_a) == ["a.example.test"]
        assert alpn == "h2"  # offered h2 and http/1.1: h2 preferred
        got_b, alpn = await handshake(port, "b.example.test", ca, alpn=("http/1.1",))
        assert names_of(got_b) == ["b.example.test"]
        assert alpn == "http/1.1"

        # Each name reaches its own routes, over HTTP/1.1 and HTTP/2.
        response = await https_get(port, "a.example.test", ca)
        assert response.status_code == 200, response.text
        assert response.json()["upstream"] == "a"
        response = await https_get(port, "b.example.test", ca, http2=True)
        assert response.status_code == 200, response.text
        assert response.http_version == "HTTP/2"
        assert response.json()["upstream"] == "b"
        assert up_b.requests[-1].header("x-forwarded-proto") == "https"

        # A connection made for a.example.test does not serve b.example.test's routes: 421.
        misdirected = await https_get(port, "a.example.test", ca, host="b.example.test")
        assert misdirected.status_code == 421
        assert "made for a.example.test" in misdirected.text
        # A name no listener has: no certificate, the handshake fails.
        assert await refused(port, "c.example.test")
        assert len(up_a.requests) == 1 and len(up_b.requests) == 1

        status = weir.status_of("Gateway", "default", "gw")
        assert condition(status["conditions"], "Programmed")["status"] == "True"
        for name in ("a", "b"):
            listener = listener_status(weir, name)
            assert listener["attachedRoutes"] == 1
            assert condition(listener["conditions"], "Programmed")["status"] == "True"
            assert condition(listener["conditions"], "ResolvedRefs")["status"] == "True"
        gateway_class = weir.status_of("GatewayClass", "", "weir")
        assert condition(gateway_class["conditions"], "SupportedVersion")["status"] == "True"


async def test_several_certificates_on_one_listener_are_chosen_by_server_name(
    weir: Weir, ca: CertAuthority
) -> None:
    port = weir.gateway_port
    cert_a, cert_b = ca.issue_server_cert("a.example.test"), ca.issue_server_cert("*.b.example.test")
    async with RecordingUpstream("up", host="127.0.0.2") as up:
        weir.write(
            "gw.yaml",
            gateway(
                f"""\
- name: https
  port: {port}
  protocol: HTTPS
  tls: {{certificateRefs: [{{name: a-cert}}, {{name: b-cert}}]}}
"""
            )
            + tls_secret("a-cert", cert_a)
            + tls_secret("b-cert", cert_b)
            + service("svc", "127.0.0.2", up.port)
            + http_route("any", "https", ["a.example.test", "x.b.example.test"], "svc", up.port),
        )
        await weir.start()
        got, _ = await handshake(port, "x.b.example.test", ca)
        assert names_of(got) == ["*.b.example.test"]
        got, _ = await handshake(port, "a.example.test", ca)
        assert names_of(got) == ["a.example.test"]
        # A name neither certificate has: the first one (the client, checking the name, refuses it).
        with pytest.raises(ssl.SSLCertVerificationError):
            await handshake(port, "c.example.test", ca)
        assert (await https_get(port, "x.b.example.test", ca)).status_code == 200


async def test_certificate_rotation_without_restart(weir: Weir, ca: CertAuthority) -> None:
    port = weir.gateway_port
    first = ca.issue_server_cert("a.example.test")
    async with RecordingUpstream("a", host="127.0.0.2") as up:
        routes = service("svc", "127.0.0.2", up.port) + http_route(
            "a", "a", ["a.example.test"], "svc", up.port
        )
        listeners = gateway(https_listener("a", port, "a.example.test", "a-cert"))
        weir.write("gw.yaml", listeners + tls_secret("a-cert", first) + routes)
        await weir.start()
        pid = weir.envoy_pid
        got, _ = await handshake(port, "a.example.test", ca)
        assert got.serial_number == first.x509().serial_number

        second = ca.issue_server_cert("a.example.test")
        weir.write("gw.yaml", listeners + tls_secret("a-cert", second) + routes)

        async def rotated() -> bool:
            cert, _ = await handshake(port, "a.example.test", ca)
            return cert.serial_number == second.x509().serial_number

        await eventually(rotated, timeout=15, interval=0.1)
        assert weir.envoy_pid == pid, "Envoy restarted to rotate a certificate"
        response = await https_get(port, "a.example.test", ca)
        assert response.status_code == 200
        listener = listener_status(weir, "a")
        assert condition(listener["conditions"], "Programmed")["status"] == "True"


async def test_invalid_certificate_ref_serves_nothing_for_that_listener(
    weir: Weir, ca: CertAuthority
) -> None:
    port = weir.gateway_port
    cert_a, cert_b = ca.issue_server_cert("a.example.test"), ca.issue_server_cert("b.example.test")
    async with RecordingUpstream("up", host="127.0.0.2") as up:
        manifests = (
            gateway(
                https_listener("a", port, "a.example.test", "a-cert")
                + https_listener("b", port, "b.example.test", "b-cert")
            )
            + tls_secret("a-cert", cert_a)
            + service("svc", "127.0.0.2", up.port)
            + http_route("a", "a", ["a.example.test"], "svc", up.port)
            + http_route("b", "b", ["b.example.test"], "svc", up.port)
        )
        weir.write("gw.yaml", manifests)  # b-cert does not exist
        await weir.start()

        broken = listener_status(weir, "b")
        refs = condition(broken["conditions"], "ResolvedRefs")
        assert (refs["status"], refs["reason"]) == ("False", "InvalidCertificateRef")
        assert "default/b-cert" in refs["message"]
        programmed = condition(broken["conditions"], "Programmed")
        assert (programmed["status"], programmed["reason"]) == ("False", "Invalid")
        assert condition(broken["conditions"], "Accepted")["status"] == "True"
        assert broken["attachedRoutes"] == 1  # the route attached; it is just not served
        assert condition(listener_status(weir, "a")["conditions"], "Programmed")["status"] == "True"
        accepted = condition(weir.status_of("Gateway", "default", "gw")["conditions"], "Accepted")
        assert (accepted["status"], accepted["reason"]) == ("True", "ListenersNotValid")

        # The other listener serves; the broken one's name gets no handshake at all.
        assert (await https_get(port, "a.example.test", ca)).status_code == 200
        assert await refused(port, "b.example.test")
        assert len(up.requests) == 1

        # A malformed Secret is no better.
        weir.write("gw.yaml", manifests + raw_secret("b-cert", cert_b.cert_pem, "not a key"))

        def b_malformed() -> bool:
            refs = condition(listener_status(weir, "b")["conditions"], "ResolvedRefs")
            return "tls.key is not an unencrypted PEM private key" in refs["message"]

        await eventually(b_malformed, timeout=15)
        assert await refused(port, "b.example.test")

        # Once the Secret is right, b is served (same Envoy).
        pid = weir.envoy_pid
        weir.write("gw.yaml", manifests + tls_secret("b-cert", cert_b))

        def b_programmed() -> bool:
            conds = listener_status(weir, "b")["conditions"]
            return bool(condition(conds, "Programmed")["status"] == "True")

        await eventually(b_programmed, timeout=15)
        got, _ = await handshake(port, "b.example.test", ca)
        assert names_of(got) == ["b.example.test"]
        assert (await https_get(port, "b.example.test", ca)).status_code == 200
        assert weir.envoy_pid == pid


async def test_cross_namespace_certificate_needs_a_reference_grant(weir: Weir, ca: CertAuthority) -> None:
    port = weir.gateway_port
    cert = ca.issue_server_cert("a.example.test")
    http_port = free_port()
    async with RecordingUpstream("up", host="127.0.0.2") as up:
        manifests = (
            gateway(
                https_listener("a", port, "a.example.test", "shared", secret_ns="certs")
                + f"- {{name: http, port: {http_port}, protocol: HTTP}}\n"
            )
            + tls_secret("shared", cert, namespace="certs")
            + service("svc", "127.0.0.2", up.port)
            + http_route("a", "a", ["a.example.test"], "svc", up.port)
        )
        weir.write("gw.yaml", manifests)
        await weir.start()
        listener = listener_status(weir, "a")
        refs = condition(listener["conditions"], "ResolvedRefs")
        assert (refs["status"], refs["reason"]) == ("False", "RefNotPermitted")
        # Nothing else on that port: it is not even bound.
        with pytest.raises(OSError):
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()

        weir.write(
            "gw.yaml",
            manifests
            + """\
---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: gateways-may-use-certs, namespace: certs}
spec:
  from: [{group: gateway.networking.k8s.io, kind: Gateway, namespace: default}]
  to: [{group: "", kind: Secret, name: shared}]
""",
        )

        def granted() -> bool:
            conds = listener_status(weir, "a")["conditions"]
            return condition(conds, "Programmed")["status"] == "True" and (
                condition(conds, "ResolvedRefs")["status"] == "True"
            )

        await eventually(granted, timeout=15)
        got, _ = await handshake(port, "a.example.test", ca)
        assert names_of(got) == ["a.example.test"]
        assert (await https_get(port, "a.example.test", ca)).status_code == 200


# --------------------------------------------------------------------------
# TLS listeners (TLSRoute)
# --------------------------------------------------------------------------


async def test_tls_passthrough_routes_by_server_name(weir: Weir, dns: DnsStub, ca: CertAuthority) -> None:
    """Passthrough next to HTTPS on one port: the client's TLS session is the upstream's."""
    port = weir.gateway_port
    upstream_ca = make_ca("upstream CA")  # the gateway never has it
    db_cert = upstream_ca.issue_server_cert("db.example.test")
    cache_cert = upstream_ca.issue_server_cert("cache.example.test")
    web_cert = ca.issue_server_cert("www.example.test")
    cache_port = free_port("127.0.0.4")
    async with (
        RecordingUpstream("db", host="127.0.0.2", ssl_context=server_ssl_context(db_cert)) as db,
        RecordingUpstream(
            "cache", host="127.0.0.4", port=cache_port, ssl_context=server_ssl_context(cache_cert)
        ) as cache,
        RecordingUpstream("web", host="127.0.0.3") as web,
    ):
        dns.set("cache.provider.example", ["127.0.0.4"])
        weir.write(
            "gw.yaml",
            gateway(
                https_listener("https", port, "www.example.test", "web-cert")
                + f"""\
- name: passthrough
  port: {port}
  protocol: TLS
  tls: {{mode: Passthrough}}
"""
            )
            + tls_secret("web-cert", web_cert)
            + service("web", "127.0.0.3", web.port)
            + service("db", "127.0.0.2", db.port)
            + http_route("web", "https", ["www.example.test"], "web", web.port)
            + tls_route("db", "passthrough", ["db.example.test"], f"{{name: db, port: {db.port}}}")
            # An XBackend of protocol TCP, through the egress guard's tunnel (the harness denies a
            # loopback address, so every XBackend is guarded).
            + tls_route(
                "cache",
                "passthrough",
                ["cache.example.test"],
                f"{{group: {XB}, kind: XBackend, name: cache}}",
            )
            + f"""\
---
apiVersion: {XB}/v1alpha1
kind: XBackend
metadata: {{name: cache, namespace: default}}
spec:
  type: ExternalHostname
  externalHostname: {{hostname: cache.provider.example}}
  port: {{port: {cache_port}}}
  protocol: TCP
""",
        )
        await weir.start()

        # db.example.test: the upstream's certificate (from a CA the gateway never saw), end to end.
        got, alpn = await handshake(port, "db.example.test", upstream_ca)
        assert names_of(got) == ["db.example.test"]
        assert alpn == "h2"  # negotiated with the upstream, which offers h2
        response = await https_get(port, "db.example.test", upstream_ca)
        assert response.status_code == 200
        seen = db.requests[-1]
        assert (seen.upstream, seen.sni, seen.host) == ("db", "db.example.test", "db.example.test")
        assert seen.header("x-forwarded-for") is None  # bytes relayed, not a proxied request
        # The gateway's CA does not vouch for it: the gateway did not terminate.
        with pytest.raises(ssl.SSLCertVerificationError):
            await handshake(port, "db.example.test", ca)

        response = await https_get(port, "cache.example.test", upstream_ca)
        assert response.status_code == 200
        assert (cache.requests[-1].upstream, cache.requests[-1].sni) == ("cache", "cache.example.test")

        # www.example.test on the same port: terminated by the gateway, with its certificate.
        response = await https_get(port, "www.example.test", ca)
        assert response.status_code == 200 and response.json()["upstream"] == "web"
        # A server name no route claims: closed.
        assert await refused(port, "other.example.test")

        passthrough = listener_status(weir, "passthrough")
        assert passthrough["attachedRoutes"] == 2
        assert passthrough["supportedKinds"] == [{"group": "gateway.networking.k8s.io", "kind": "TLSRoute"}]
        assert condition(passthrough["conditions"], "Programmed")["status"] == "True"
        for name in ("db", "cache"):
            route = weir.status_of("TLSRoute", "default", name)
            assert {c["type"]: c["status"] for c in route["parents"][0]["conditions"]} == {
                "Accepted": "True",
                "ResolvedRefs": "True",
            }


async def test_tls_passthrough_weights(weir: Weir) -> None:
    port = weir.gateway_port
    upstream_ca = make_ca("upstream CA")
    cert = upstream_ca.issue_server_cert("db.example.test")
    backend_port = free_port("127.0.0.2")
    async with (
        RecordingUpstream("one", host="127.0.0.2", port=backend_port, ssl_context=server_ssl_context(cert)),
        RecordingUpstream("two", host="127.0.0.3", port=backend_port, ssl_context=server_ssl_context(cert)),
    ):
        weir.write(
            "gw.yaml",
            gateway(f"- {{name: tls, port: {port}, protocol: TLS, tls: {{mode: Passthrough}}}}\n")
            + service("one", "127.0.0.2", backend_port)
            + service("two", "127.0.0.3", backend_port)
            + tls_route(
                "db",
                "tls",
                ["db.example.test"],
                f"{{name: one, port: {backend_port}, weight: 3}}, "
                f"{{name: two, port: {backend_port}, weight: 1}}",
            ),
        )
        await weir.start()
        seen: Counter[str] = Counter()
        for _ in range(80):
            response = await https_get(port, "db.example.test", upstream_ca)
            seen[response.json()["upstream"]] += 1
        assert seen["one"] + seen["two"] == 80
        assert 45 <= seen["one"] <= 75, seen


async def test_tls_termination_relays_decrypted_bytes(weir: Weir, ca: CertAuthority) -> None:
    port = weir.gateway_port
    cert = ca.issue_server_cert("raw.example.test")
    async with EchoServer("echo", host="127.0.0.2") as echo:
        weir.write(
            "gw.yaml",
            gateway(
                f"""\
- name: raw
  port: {port}
  protocol: TLS
  hostname: raw.example.test
  tls: {{mode: Terminate, certificateRefs: [{{name: raw-cert}}]}}
"""
            )
            + tls_secret("raw-cert", cert)
            + service("echo", "127.0.0.2", echo.port)
            + tls_route("raw", "raw", ["raw.example.test"], f"{{name: echo, port: {echo.port}}}"),
        )
        await weir.start()
        context = client_ssl_context(ca)
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=context, server_hostname="raw.example.test"
        )
        try:
            assert writer.get_extra_info("ssl_object").selected_alpn_protocol() is None
            writer.write(b"hello through TLS\n")
            await writer.drain()
            assert await asyncio.wait_for(reader.readexactly(18), 10) == b"hello through TLS\n"
        finally:
            writer.close()
            with contextlib.suppress(OSError, ssl.SSLError):
                await writer.wait_closed()
        # The echo server saw plaintext: no TLS there.
        assert echo.connections and echo.connections[-1].tls_version is None
        assert echo.received >= 18
