"""Incremental translation equals a full one (:mod:`weir.translate.incremental`).

After every step of random edit sequences, :class:`Translator` must give
what :func:`translate` gives for the same objects: the same IR, the same
statuses in the same order, the same Gateway sockets. The world holds what
makes patching hard: two Gateway classes, one of which refuses hostnames
outside an allow-list (a shared XBackend is refused or not depending on
who uses it), listeners with and without hostnames on one socket,
cross-namespace references with and without a ReferenceGrant, Services
with EndpointSlices, XBackends of every TLS mode, a TCPRoute and a
BackendCredentialPolicy (whose targets force a full pass), and references
to things that do not exist. Steps change routes, XBackends, Services and
slices (what is patched), and sometimes a Gateway or a grant (what is not).

Each golden input of ``testdata/`` is also taken apart and put back one
HTTPRoute, XBackend or Service at a time.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from weir import ir
from weir.api.meta import KubeObject, ObjectKey
from weir.loader import load_text
from weir.resources import Resources
from weir.translate import Settings, Translation, translate
from weir.translate.incremental import Translator

SETTINGS = Settings(
    dns_resolvers=(("127.0.0.1", 5353),), system_trust_file="/etc/ssl/certs/ca-certificates.crt"
)
TESTDATA = Path(__file__).parent / "testdata"
ROUTES = 14
XBACKENDS = 10
#: x4 has a credential policy and x5 a TCPRoute: routes naming them take the full path
PINNED = (4, 5)
SERVICES = 3

FIXED = """
apiVersion: v1
kind: Namespace
metadata: {name: default}
---
apiVersion: v1
kind: Namespace
metadata: {name: other, labels: {team: a}}
---
apiVersion: weir.dev/v1alpha1
kind: GatewayClassConfig
metadata: {name: restricted}
spec:
  egress:
    allowedHostnames: ["*.allowed.example"]
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: open}
spec: {controllerName: weir.dev/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: restricted}
spec:
  controllerName: weir.dev/gateway-controller
  parametersRef: {group: weir.dev, kind: GatewayClassConfig, name: restricted}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: g2, namespace: default}
spec:
  gatewayClassName: restricted
  listeners:
  - {name: web, port: 8081, protocol: HTTP, hostname: "*.example.com",
     allowedRoutes: {namespaces: {from: All}}}
---
apiVersion: v1
kind: Secret
metadata: {name: token, namespace: default}
stringData: {token: s3cret}
---
apiVersion: weir.dev/v1alpha1
kind: BackendCredentialPolicy
metadata: {name: cred, namespace: default}
spec:
  targetRefs: [{group: gateway.networking.x-k8s.io, kind: XBackend, name: x4}]
  secretRef: {name: token, key: token}
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: {name: relay, namespace: default}
spec:
  parentRefs: [{name: g1, sectionName: tcp}]
  rules: [{backendRefs: [{group: gateway.networking.x-k8s.io, kind: XBackend, name: x5, port: 5432}]}]
"""


def gateway(rng: random.Random) -> str:
    hostname = f", hostname: {rng.choice(['*.example.com', 'a.example.com', 'b.example.com'])!r}"
    allowed = rng.choice(["All", "Same"])
    return f"""apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: g1, namespace: default}}
spec:
  gatewayClassName: open
  listeners:
  - {{name: any, port: 8080, protocol: HTTP, allowedRoutes: {{namespaces: {{from: All}}}}}}
  - {{name: named, port: 8080, protocol: HTTP{hostname}, allowedRoutes: {{namespaces: {{from: {allowed}}}}}}}
  - {{name: tcp, port: 9000, protocol: TCP, allowedRoutes: {{kinds: [{{kind: TCPRoute}}]}}}}
"""


def grant(rng: random.Random) -> str:
    names = rng.choice(["", "    name: x1\n"])
    return f"""apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {{name: from-default, namespace: other}}
spec:
  from: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: default}}]
  to:
  - group: gateway.networking.x-k8s.io
    kind: XBackend
{names}"""


def xbackend(rng: random.Random, i: int, namespace: str = "default") -> str:
    if i == 5:  # the TCPRoute's
        return f"""apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackend
metadata: {{name: x5, namespace: {namespace}}}
spec:
  type: ExternalHostname
  externalHostname: {{hostname: db{rng.randrange(3)}.example}}
  port: {{port: 5432}}
  protocol: TCP
"""
    host = rng.choice(["api.allowed.example", "svc.allowed.example", "outside.example", "10.1.2.3"])
    protocol = rng.choice(["", "  protocol: HTTP2\n", "  protocol: MCP\n", "  protocol: H2C\n"])
    tls = rng.choice(
        [
            "",
            f"  tls: {{mode: ServerOnly, validation: {{hostname: {host}, "
            "wellKnownCACertificates: System}}\n",
            "  tls: {mode: ServerOnly}\n",
            f"  tls: {{mode: ServerOnly, validation: {{hostname: {host}, caCertificateRefs: [{{group: '', "
            "kind: ConfigMap, name: ca}]}}\n",
            f"  tls: {{mode: ServerOnly, validation: {{hostname: {host}, caCertificateRefs: [{{group: '', "
            "kind: ConfigMap, name: none}]}}\n",
        ]
    )
    return f"""apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackend
metadata: {{name: x{i}, namespace: {namespace}}}
spec:
  type: ExternalHostname
  externalHostname: {{hostname: {host}}}
  port: {{port: {rng.choice([443, 8443])}}}
{protocol}{tls}"""


def service(rng: random.Random, i: int) -> str:
    ports = rng.sample([80, 81, 82], rng.randint(1, 2))
    listed = "\n".join(
        f"  - {{name: p{p}, port: {p}{rng.choice(['', ', appProtocol: kubernetes.io/h2c'])}}}" for p in ports
    )
    return f"""apiVersion: v1
kind: Service
metadata: {{name: s{i}, namespace: default}}
spec:
  ports:
{listed}
"""


def endpoint_slice(rng: random.Random, i: int) -> str:
    addresses = ", ".join(f"10.0.{i}.{a}" for a in rng.sample(range(1, 9), rng.randint(1, 3)))
    ready = rng.choice(["true", "false"])
    return f"""apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: s{i}-a, namespace: default, labels: {{kubernetes.io/service-name: s{i}}}}}
addressType: IPv4
ports: [{{name: p80, port: 8080}}, {{name: p81, port: 8081}}]
endpoints: [{{addresses: [{addresses}], conditions: {{ready: {ready}}}}}]
"""


def some_xbackend(rng: random.Random) -> int:
    if rng.random() < 0.05:
        return rng.choice(PINNED)
    return rng.choice([i for i in range(XBACKENDS) if i not in PINNED])


def backend_ref(rng: random.Random) -> str:
    roll = rng.random()
    weight = rng.choice(["", ", weight: 0", ", weight: 3"])
    if roll < 0.45:
        return f"{{group: gateway.networking.x-k8s.io, kind: XBackend, name: x{some_xbackend(rng)}{weight}}}"
    if roll < 0.75:
        return f"{{name: s{rng.randrange(SERVICES)}, port: {rng.choice([80, 81])}{weight}}}"
    if roll < 0.85:
        name = f"x{rng.randrange(2)}"
        return "{group: gateway.networking.x-k8s.io, kind: XBackend, name: " + name + ", namespace: other}"
    if roll < 0.92:
        return "{group: gateway.networking.x-k8s.io, kind: XBackend, name: missing}"
    return "{group: example.com, kind: Bucket, name: b}"


def http_route(rng: random.Random, i: int) -> str:
    parents = rng.sample(
        [
            "{name: g1}",
            "{name: g1, sectionName: named}",
            "{name: g2}",
            "{name: nowhere}",
        ],
        rng.randint(1, 2),
    )
    if len(parents) == 2 and all(p.startswith("{name: g1") for p in parents):
        # Naming g1 with and without a sectionName is refused (CommonRouteSpec's parentRefs rule).
        parents = parents[1:]
    hostnames = rng.sample(
        ["a.example.com", "b.example.com", "*.example.com", "other.org"], rng.randint(0, 2)
    )
    rules = []
    for r in range(1 if rng.random() < 0.7 else 2):
        refs = ", ".join(backend_ref(rng) for _ in range(1 if rng.random() < 0.7 else 2))
        mirror = ""
        if rng.random() < 0.15:
            target = f"x{some_xbackend(rng)}"
            mirror = (
                "\n    filters: [{type: RequestMirror, requestMirror: {backendRef: "
                "{group: gateway.networking.x-k8s.io, kind: XBackend, name: " + target + "}}}]"
            )
        rules.append(
            f"  - matches: [{{path: {{type: PathPrefix, value: /r{rng.randrange(4)}/{r}}}}}]\n"
            f"    backendRefs: [{refs}]{mirror}"
        )
    return f"""apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: r{i}, namespace: default, creationTimestamp: "2026-01-01T00:00:{i:02d}Z"}}
spec:
  parentRefs: [{", ".join(parents)}]
  hostnames: {hostnames}
  rules:
{chr(10).join(rules)}
"""


def ca_config_map() -> str:
    """ConfigMap ``ca``: the CA of the golden XBackend TLS case."""
    golden = objects((TESTDATA / "xbackend-tls.in.yaml").read_text())
    ca = golden[ObjectKey("ConfigMap", "default", "ca-one")]
    data = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ca", "namespace": "default"}}
    return yaml.safe_dump({**data, "data": ca.model_dump(by_alias=True)["data"]})


def objects(text: str) -> dict[ObjectKey, KubeObject]:
    loaded, problems = load_text(text, "world.yaml")
    assert not [p for p in problems if p.severity == "error"], [str(p) for p in problems]
    return {item.object.key: item.object for item in loaded}


def world(rng: random.Random) -> dict[ObjectKey, KubeObject]:
    parts = [FIXED, gateway(rng), grant(rng)]
    parts.append(ca_config_map())
    parts += [xbackend(rng, i) for i in range(XBACKENDS)]
    parts += [xbackend(rng, i, "other") for i in range(2)]
    parts += [service(rng, i) for i in range(SERVICES)]
    parts += [endpoint_slice(rng, i) for i in range(SERVICES)]
    parts += [http_route(rng, i) for i in range(ROUTES)]
    return objects("---\n".join(parts))


#: What a step changes below each threshold of a roll: (threshold, kind, how many, name pattern,
#: how to write one, how likely an existing one is removed); above the last: a Gateway or a grant.
PATCHED: tuple[tuple[float, str, int, str, Callable[[random.Random, int], str], float], ...] = (
    (0.45, "HTTPRoute", ROUTES, "r{}", http_route, 0.15),
    (0.7, "XBackend", XBACKENDS, "x{}", xbackend, 0.2),
    (0.8, "Service", SERVICES, "s{}", service, 0.2),
    (0.9, "EndpointSlice", SERVICES, "s{}-a", endpoint_slice, 0.3),
)


def step(
    rng: random.Random, current: dict[ObjectKey, KubeObject]
) -> tuple[dict[ObjectKey, KubeObject], set[ObjectKey]]:
    """One random change: upserts and removals."""
    roll = rng.random()
    texts: list[str] = []
    removed: set[ObjectKey] = set()
    for _ in range(1 if rng.random() < 0.8 else rng.randint(2, 3)):
        patched = next((kind for kind in PATCHED if roll < kind[0]), None)
        if patched is not None:
            _, kind, count, name, make, removal = patched
            i = rng.randrange(count)
            key = ObjectKey(kind, "default", name.format(i))
            if key in current and rng.random() < removal:
                removed.add(key)
            else:
                texts.append(make(rng, i))
        elif roll < 0.95:
            texts.append(gateway(rng))
        else:
            texts.append(grant(rng))
        roll = rng.random()
    upserts = {key: obj for text in texts for key, obj in objects(text).items()}
    return upserts, removed - upserts.keys()


def assert_same(incremental: Translation, full: Translation) -> None:
    assert ir.to_data(incremental.ir) == ir.to_data(full.ir)
    assert incremental.statuses == full.statuses
    assert list(incremental.statuses) == list(full.statuses)
    assert incremental.gateway_sockets == full.gateway_sockets


@pytest.mark.parametrize("seed", range(8))
def test_random_edits_equal_full_translation(seed: int) -> None:
    rng = random.Random(seed)
    current = world(rng)
    resources = Resources.from_objects(current.values())
    translator = Translator(SETTINGS)
    assert_same(translator.translate(resources), translate(resources, SETTINGS))
    for _ in range(60):
        upserts, removed = step(rng, current)
        for key in removed:
            del current[key]
        current.update(upserts)
        if rng.random() < 0.8:
            resources = resources.with_changes(upserts, removed)  # the files provider's way
        else:
            resources = Resources.from_objects(current.values())  # no delta: found by identity
        assert_same(translator.translate(resources), translate(resources, SETTINGS))
    # The patch path is what is being tested: most steps must take it.
    assert translator.counts["patched"] >= 25, translator.counts


def test_unchanged_objects_keep_their_status_objects() -> None:
    """What consumes statuses may compare them by identity: an edit replaces only what it changed."""
    rng = random.Random(99)
    current = world(rng)
    resources = Resources.from_objects(current.values())
    translator = Translator(SETTINGS)
    before = translator.translate(resources)
    upserts = objects(http_route(rng, 3))
    after = translator.translate(resources.with_changes(upserts, ()))
    assert translator.counts["patched"] == 1
    r3 = ObjectKey("HTTPRoute", "default", "r3")
    differ = {key for key in after.statuses if after.statuses[key] is not before.statuses.get(key)}
    assert differ == {key for key in after.statuses if after.statuses[key] != before.statuses.get(key)}
    assert r3 in differ


@pytest.mark.parametrize("name", sorted(p.name.removesuffix(".in.yaml") for p in TESTDATA.glob("*.in.yaml")))
def test_golden_inputs_taken_apart_and_put_back(name: str) -> None:
    loaded, _ = load_text((TESTDATA / f"{name}.in.yaml").read_text(), f"{name}.in.yaml")
    every = {item.object.key: item.object for item in loaded}
    resources = Resources.from_objects(every.values())
    translator = Translator(SETTINGS)
    assert_same(translator.translate(resources), translate(resources, SETTINGS))
    for key in sorted(k for k in every if k.kind in ("HTTPRoute", "XBackend", "Service", "EndpointSlice")):
        without = resources.with_changes({}, {key})
        assert_same(translator.translate(without), translate(without, SETTINGS))
        resources = without.with_changes({key: every[key]}, ())
        assert_same(translator.translate(resources), translate(resources, SETTINGS))


def test_an_object_read_again_unchanged_is_not_a_change() -> None:
    """A file read again yields new objects for every document in it: a Gateway sharing a file with
    an edited route must not force a full pass."""
    rng = random.Random(5)
    current = world(rng)
    resources = Resources.from_objects(current.values())
    translator = Translator(SETTINGS)
    translator.translate(resources)
    again = objects(FIXED)  # new objects, equal to those held
    gateway_key = ObjectKey("Gateway", "default", "g2")
    assert again[gateway_key] is not current[gateway_key] and again[gateway_key] == current[gateway_key]
    upserts = {**again, **objects(http_route(rng, 2))}
    resources = resources.with_changes(upserts, ())
    assert_same(translator.translate(resources), translate(resources, SETTINGS))
    assert translator.last == "patched", translator.counts
