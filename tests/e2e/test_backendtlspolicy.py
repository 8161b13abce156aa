"""BackendTLSPolicy on Services, end to end: one weir + real Envoy, real TLS upstreams on loopback.

Each case is a Service (one endpoint: its own upstream on 127.0.0.2) behind its own path
``/<case>``, with the policies the case needs. "5xx and nothing recorded" proves that a policy
that cannot be used (or a certificate that does not verify) never let a request through, in
TLS or in plaintext. The upstreams record SNI, ALPN, TLS version and HTTP version, so each test
checks what was really negotiated.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import pytest_asyncio
import yaml
from weir_harness import GATEWAY_HEAD, Weir, pid_alive

from weir.testkit import CertAuthority, RecordingUpstream, free_port, make_ca, server_ssl_context

pytestmark = pytest.mark.asyncio(loop_scope="module")

UPSTREAM_IP = "127.0.0.2"
SPIFFE = "spiffe://cluster.test/ns/default/sa/billing"


def service(name: str, ports: list[dict[str, Any]], endpoint_ports: dict[str, int]) -> list[dict[str, Any]]:
    """Service ``name`` with ``ports``, one endpoint on :data:`UPSTREAM_IP` (port name → upstream port)."""
    return [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"ports": ports},
        },
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": name,
                "namespace": "default",
                "labels": {"kubernetes.io/service-name": name},
            },
            "addressType": "IPv4",
            "ports": [{"name": n, "port": p} for n, p in endpoint_ports.items()],
            "endpoints": [{"addresses": [UPSTREAM_IP], "conditions": {"ready": True}}],
        },
    ]


def policy(
    name: str,
    target: str,
    validation: dict[str, Any],
    *,
    section: str | None = None,
    created: str | None = None,
    options: dict[str, str] | None = None,
) -> dict[str, Any]:
    ref: dict[str, Any] = {"group": "", "kind": "Service", "name": target}
    if section:
        ref["sectionName"] = section
    metadata: dict[str, Any] = {"name": name, "namespace": "default"}
    if created:
        metadata["creationTimestamp"] = created
    spec: dict[str, Any] = {"targetRefs": [ref], "validation": validation}
    if options:
        spec["options"] = options
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "BackendTLSPolicy",
        "metadata": metadata,
        "spec": spec,
    }


def ca_validation(hostname: str, ca: str = "good-ca", **extra: Any) -> dict[str, Any]:
    return {
        "hostname": hostname,
        "caCertificateRefs": [{"group": "", "kind": "ConfigMap", "name": ca}],
        **extra,
    }


@dataclass
class World:
    weir: Weir
    ca: CertAuthority
    upstreams: dict[str, RecordingUpstream] = field(default_factory=dict)

    async def get(self, path: str) -> httpx.Response:
        async with httpx.AsyncClient(timeout=5) as client:
            return await client.get(self.weir.url(path))

    def conditions(self, policy: str) -> dict[str, dict[str, Any]]:
        [ancestor] = self.weir.status_of("BackendTLSPolicy", "default", policy)["ancestors"]
        assert ancestor["ancestorRef"] == {
            "group": "gateway.networking.k8s.io",
            "kind": "Gateway",
            "namespace": "default",
            "name": "gw",
        }
        return {c["type"]: c for c in ancestor["conditions"]}

    async def refused(self, path: str, *upstreams: str) -> None:
        response = await self.get(path)
        assert 500 <= response.status_code < 600, (response.status_code, response.text)
        for name in upstreams:
            assert self.upstreams[name].requests == [], f"{name}: a request reached the upstream"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    folder = tmp_path_factory.mktemp("backendtlspolicy")
    harness = Weir(folder, None, free_port())
    w = World(harness, make_ca("e2e CA"))
    other = make_ca("untrusted CA")

    async def tls_upstream(
        name: str, *names: str, ca: CertAuthority = w.ca, **server: Any
    ) -> RecordingUpstream:
        cert = ca.issue_server_cert(*names, uri_sans=server.pop("uri_sans", ()))
        upstream = RecordingUpstream(name, host=UPSTREAM_IP, ssl_context=server_ssl_context(cert, **server))
        w.upstreams[name] = await upstream.start()
        return upstream

    try:
        https = [{"name": "https", "port": 443}]
        docs: list[dict[str, Any]] = [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "good-ca", "namespace": "default"},
                "data": {"ca.crt": w.ca.cert_pem},
            },
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "other-ca", "namespace": "default"},
                "data": {"ca.crt": other.cert_pem},
            },
        ]
        rules: dict[str, tuple[str, int]] = {}

        # A CA from a ConfigMap; SNI and the certificate name are validation.hostname.
        up = await tls_upstream("ca", "ca.svc.test")
        docs += [*service("ca", https, {"https": up.port}), policy("ca", "ca", ca_validation("ca.svc.test"))]
        rules["ca"] = ("ca", 443)
        # The certificate is not from the trusted CA.
        up = await tls_upstream("wrong-ca", "wrong-ca.svc.test", ca=other)
        docs += service("wrong-ca", https, {"https": up.port})
        docs.append(policy("wrong-ca", "wrong-ca", ca_validation("wrong-ca.svc.test")))
        rules["wrong-ca"] = ("wrong-ca", 443)
        # subjectAltNames: a SPIFFE URI only; SNI stays hostname.
        up = await tls_upstream("san", uri_sans=(SPIFFE,))
        docs += service("san", https, {"https": up.port})
        sans = [{"type": "URI", "uri": SPIFFE}]
        docs.append(policy("san", "san", ca_validation("billing.svc.test", subjectAltNames=sans)))
        rules["san"] = ("san", 443)
        # The certificate names someone else.
        up = await tls_upstream("wrong-name", "someone-else.svc.test")
        docs += service("wrong-name", https, {"https": up.port})
        docs.append(policy("wrong-name", "wrong-name", ca_validation("wrong-name.svc.test")))
        rules["wrong-name"] = ("wrong-name", 443)
        # Two policies on one Service: the older one applies.
        up = await tls_upstream("conflict", "older.svc.test")
        docs += service("conflict", https, {"https": up.port})
        docs.append(
            policy(
                "conflict-newer", "conflict", ca_validation("newer.svc.test"), created="2024-05-01T00:00:01Z"
            )
        )
        docs.append(
            policy(
                "conflict-older", "conflict", ca_validation("older.svc.test"), created="2024-05-01T00:00:00Z"
            )
        )
        rules["conflict"] = ("conflict", 443)
        # A policy for one port (sectionName) and one for the whole Service.
        one = await tls_upstream("section-1", "port.svc.test")
        two = await tls_upstream("section-2", "service.svc.test")
        ports = [{"name": "https-1", "port": 443}, {"name": "https-2", "port": 8443}]
        docs += service("section", ports, {"https-1": one.port, "https-2": two.port})
        docs.append(policy("section-port", "section", ca_validation("port.svc.test"), section="https-1"))
        docs.append(policy("section-service", "section", ca_validation("service.svc.test")))
        rules["section-1"] = ("section", 443)
        rules["section-2"] = ("section", 8443)
        # A CA reference that does not exist, towards a TLS upstream and towards a plaintext one.
        up = await tls_upstream("missing-ca", "missing-ca.svc.test")
        docs += service("missing-ca", https, {"https": up.port})
        docs.append(policy("missing-ca", "missing-ca", ca_validation("missing-ca.svc.test", ca="nope")))
        rules["missing-ca"] = ("missing-ca", 443)
        plain = RecordingUpstream("missing-ca-plain", host=UPSTREAM_IP)
        w.upstreams["missing-ca-plain"] = await plain.start()
        docs += service("missing-ca-plain", https, {"https": plain.port})
        docs.append(
            policy("missing-ca-plain", "missing-ca-plain", ca_validation("plain.svc.test", ca="nope"))
        )
        rules["missing-ca-plain"] = ("missing-ca-plain", 443)
        # A valid policy towards a plaintext upstream: TLS or nothing.
        plain = RecordingUpstream("plaintext", host=UPSTREAM_IP)
        w.upstreams["plaintext"] = await plain.start()
        docs += service("plaintext", https, {"https": plain.port})
        docs.append(policy("plaintext", "plaintext", ca_validation("plaintext.svc.test")))
        rules["plaintext"] = ("plaintext", 443)
        # Protocols: h2c appProtocol with TLS is HTTP/2 over TLS (ALPN h2); no appProtocol lets ALPN choose.
        up = await tls_upstream("h2", "h2.svc.test")
        docs += service(
            "h2", [{"name": "https", "port": 443, "appProtocol": "kubernetes.io/h2c"}], {"https": up.port}
        )
        docs.append(policy("h2", "h2", ca_validation("h2.svc.test")))
        rules["h2"] = ("h2", 443)
        up = await tls_upstream("http11-only", "http11-only.svc.test", alpn=["http/1.1"])
        docs += service("http11-only", https, {"https": up.port})
        docs.append(policy("http11-only", "http11-only", ca_validation("http11-only.svc.test")))
        rules["http11-only"] = ("http11-only", 443)
        # options: TLS 1.3 at least, towards an upstream that stops at 1.2.
        up = await tls_upstream("tls13", "tls13.svc.test", maximum_version=ssl.TLSVersion.TLSv1_2)
        docs += service("tls13", https, {"https": up.port})
        docs.append(
            policy(
                "tls13", "tls13", ca_validation("tls13.svc.test"), options={"weir.dev/tls-min-version": "1.3"}
            )
        )
        rules["tls13"] = ("tls13", 443)

        route = {
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "HTTPRoute",
            "metadata": {"name": "services", "namespace": "default"},
            "spec": {
                "parentRefs": [{"name": "gw"}],
                "rules": [
                    {
                        "matches": [{"path": {"type": "PathPrefix", "value": f"/{case}"}}],
                        "backendRefs": [{"name": svc, "port": port}],
                    }
                    for case, (svc, port) in rules.items()
                ],
            },
        }
        text = (
            GATEWAY_HEAD.format(port=harness.gateway_port)
            + "---\n"
            + yaml.safe_dump_all([route, *docs], sort_keys=False)
        )
        harness.write("world.yaml", text)
        await harness.start()
        yield w
    finally:
        await harness.stop()
        for upstream in w.upstreams.values():
            await upstream.stop()
        for pid in harness.envoy_pids:
            assert not pid_alive(pid), f"Envoy {pid} survived stop()"


async def test_ca_from_a_config_map_verifies_and_sni_is_the_hostname(world: World) -> None:
    response = await world.get("/ca/x")
    assert response.status_code == 200, response.text
    seen = world.upstreams["ca"].requests[-1]
    assert seen.sni == "ca.svc.test"
    assert seen.tls_version == "TLSv1.3"
    conditions = world.conditions("ca")
    assert (conditions["Accepted"]["status"], conditions["ResolvedRefs"]["status"]) == ("True", "True")
    route = {
        c["type"]: c
        for c in world.weir.status_of("HTTPRoute", "default", "services")["parents"][0]["conditions"]
    }
    assert route["Accepted"]["status"] == "True", route
    # Other rules of this route go to Services whose policies are unusable on purpose: the route's
    # ResolvedRefs names those (a rule with no usable backend), never this one.
    assert "Service default/ca " not in route["ResolvedRefs"]["message"], route


@pytest.mark.parametrize("case", ["wrong-ca", "wrong-name"])
async def test_a_certificate_that_does_not_verify_is_refused(world: World, case: str) -> None:
    await world.refused(f"/{case}/x", case)


async def test_subject_alt_names_replace_the_hostname_check(world: World) -> None:
    response = await world.get("/san/x")
    assert response.status_code == 200, response.text
    assert world.upstreams["san"].requests[-1].sni == "billing.svc.test"


async def test_the_older_of_two_policies_applies_and_the_other_is_conflicted(world: World) -> None:
    response = await world.get("/conflict/x")
    assert response.status_code == 200, response.text
    assert world.upstreams["conflict"].requests[-1].sni == "older.svc.test"
    assert world.conditions("conflict-older")["Accepted"]["reason"] == "Accepted"
    newer = world.conditions("conflict-newer")["Accepted"]
    assert (newer["status"], newer["reason"]) == ("False", "Conflicted")
    assert "conflict-older" in newer["message"]


async def test_a_policy_for_a_port_wins_over_one_for_the_whole_service(world: World) -> None:
    for case, sni in (("section-1", "port.svc.test"), ("section-2", "service.svc.test")):
        response = await world.get(f"/{case}/x")
        assert response.status_code == 200, (case, response.text)
        assert world.upstreams[case].requests[-1].sni == sni
    for name in ("section-port", "section-service"):
        assert world.conditions(name)["Accepted"]["status"] == "True"


@pytest.mark.parametrize("case", ["missing-ca", "missing-ca-plain"])
async def test_an_invalid_policy_fails_requests_never_plaintext(world: World, case: str) -> None:
    await world.refused(f"/{case}/x", case)
    conditions = world.conditions(case)
    assert (conditions["Accepted"]["status"], conditions["Accepted"]["reason"]) == (
        "False",
        "NoValidCACertificate",
    )
    assert (conditions["ResolvedRefs"]["status"], conditions["ResolvedRefs"]["reason"]) == (
        "False",
        "InvalidCACertificateRef",
    )


async def test_a_plaintext_upstream_is_not_reached_without_tls(world: World) -> None:
    await world.refused("/plaintext/x", "plaintext")


async def test_h2c_app_protocol_with_a_policy_is_http2_over_tls(world: World) -> None:
    response = await world.get("/h2/x")
    assert response.status_code == 200, response.text
    seen = world.upstreams["h2"].requests[-1]
    assert (seen.alpn, seen.http_version) == ("h2", "2")


async def test_without_app_protocol_alpn_chooses(world: World) -> None:
    response = await world.get("/ca/alpn")
    assert response.status_code == 200, response.text
    assert (world.upstreams["ca"].requests[-1].alpn, world.upstreams["ca"].requests[-1].http_version) == (
        "h2",
        "2",
    )
    response = await world.get("/http11-only/x")
    assert response.status_code == 200, response.text
    seen = world.upstreams["http11-only"].requests[-1]
    assert (seen.alpn, seen.http_version) == ("http/1.1", "1.1")


async def test_minimum_tls_version_option(world: World) -> None:
    await world.refused("/tls13/x", "tls13")
    assert world.conditions("tls13")["Accepted"]["status"] == "True"


async def test_status_is_served_on_the_admin_endpoint(world: World) -> None:
    data = await world.weir.admin_status()
    text = str(data)
    assert "BackendTLSPolicy" in text
