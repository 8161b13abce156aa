"""Incremental translation equals a full one in every workload shape of the benchmark, for every
kind of edit a user makes there.

The shapes are ``bench/controlplane_shapes.py``'s (``path``, ``host``,
``gateways``, ``tls``) at a small N. The edits: a route's address (its path,
or in ``host`` its hostname), its XBackend's hostname, a new route with a
new XBackend, a route or an XBackend removed, a Secret or ConfigMap edited
(the shared CA of ``host``, a certificate of ``tls``), a GRPCRoute added or
edited, and a listener added to a Gateway. After each, :class:`Translator`
must give what :func:`translate` gives. Some of these take a full pass today
(``Translator.counts`` says which); the property holds either way, and
keeps holding as more of them are patched. :data:`PATCHED` says which kinds
must be patched in which shapes (a Secret or ConfigMap that only XBackends
name, or that nothing names, is; a listener's certificate is not yet).
Hypothesis draws further sequences of kinds and edits in every shape.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from bench_shapes import PORTS, UPSTREAM_PORT, generate, parse, shapes
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from test_incremental import assert_same

from weir.api.meta import KubeObject, ObjectKey
from weir.resources import Resources
from weir.translate import Settings, translate
from weir.translate.incremental import Translator

SETTINGS = Settings(dns_resolvers=(("127.0.0.1", 5353),))
#: routes per shape: a few Gateways of 10 in ``gateways``
N = {"path": 12, "host": 12, "gateways": 40, "tls": 12}
STEPS = 40

KINDS = (
    "address",
    "backend",
    "new route",
    "route removed",
    "xbackend removed",
    "secret or configmap",
    "grpcroute",
    "listener added",
)


#: (shape, kind) pairs that must be patched, not translated in full: a Secret or ConfigMap nothing
#: names (path, gateways). (The CA every XBackend of ``host`` trusts takes a full pass: it changes
#: every route, see ``_PATCH_AT_MOST``.) While a GRPCRoute
#: names one of the XBackends, those are another kind's too and take a full pass (:func:`must_patch`).
PATCHED = {(shape, "secret or configmap") for shape in ("path", "gateways")}


def must_patch(shape_name: str, kind: str, current: dict[ObjectKey, KubeObject]) -> bool:
    return (shape_name, kind) in PATCHED and not any(key.kind == "GRPCRoute" for key in current)


def edit(
    kind: str, shape: Any, rng: random.Random, n: int, current: dict[ObjectKey, KubeObject], pki: Any
) -> tuple[dict[ObjectKey, KubeObject], set[ObjectKey]]:
    """One edit of ``kind``: (objects put, keys removed)."""
    i = rng.randrange(n)
    if kind == "address":
        return parse(shape.route_yaml(i, n, UPSTREAM_PORT, version=rng.randint(2, 10**6))), set()
    if kind == "backend":
        return parse(shape.route_yaml(i, n, UPSTREAM_PORT, backend=rng.randint(1, 10**6))), set()
    if kind == "new route":
        return parse(shape.route_yaml(n + rng.randrange(3), n, UPSTREAM_PORT)), set()
    if kind == "route removed":
        return {}, {ObjectKey("HTTPRoute", "default", f"r{i}")}
    if kind == "xbackend removed":
        return {}, {ObjectKey("XBackend", "default", f"x{i}")}
    if kind == "secret or configmap":
        if shape.name == "tls":  # a listener's certificate, issued again
            j = rng.randrange(shape.listeners(n))
            leaf = pki.ca.issue_server_cert(f"t{j}.example")
            text = (
                f"apiVersion: v1\nkind: Secret\nmetadata: {{name: c{j}, namespace: default}}\n"
                f"type: kubernetes.io/tls\nstringData:\n  tls.crt: |\n{_indent(leaf.chain_pem)}"
                f"  tls.key: |\n{_indent(leaf.key_pem)}"
            )
        elif shape.name == "host":  # the CA every XBackend trusts, another one
            other = shapes.make_pki(pki.upstream_cert.parent.parent / f"pki-{rng.random()}")
            text = (
                f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {shapes.CA_CONFIGMAP}, "
                f"namespace: default}}\ndata:\n  ca.crt: |\n{_indent(other.ca_pem)}"
            )
        else:  # a Secret nothing reads yet
            text = (
                "apiVersion: v1\nkind: Secret\nmetadata: {name: unused, namespace: default}\n"
                f"stringData: {{token: t{rng.randrange(100)}}}\n"
            )
        return parse(text), set()
    if kind == "grpcroute":
        # Its own hostname where the listener has none; else the listener's, which it then shares
        # with that listener's HTTPRoutes (their edits take a full pass).
        hostnames = "[grpc.example]" if shape.name in ("path", "host") else "[]"
        text = f"""\
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {{name: grpc, namespace: default}}
spec:
  parentRefs: [{shape.parent(i, n)}]
  hostnames: {hostnames}
  rules:
  - backendRefs: [{{group: gateway.networking.x-k8s.io, kind: XBackend, name: x{i}}}]
"""
        return parse(text), set()
    if kind == "listener added":
        gateways = shape.gateways_yaml(n, PORTS, pki)
        port = 9000 + rng.randrange(3)
        text = gateways.replace(
            "  listeners:\n", f"  listeners:\n  - {{name: extra, port: {port}, protocol: HTTP}}\n", 1
        )
        return {k: v for k, v in parse(text).items() if k.kind == "Gateway"}, set()
    raise AssertionError(kind)


def _indent(text: str) -> str:
    return "".join("    " + line for line in text.splitlines(keepends=True))


@pytest.mark.parametrize("shape_name", ["path", "host", "gateways", "tls"])
def test_every_kind_of_edit_equals_a_full_translation(shape_name: str, tmp_path: Path) -> None:
    shape = shapes.SHAPES[shape_name]
    rng = random.Random(shape_name)
    n = N[shape_name]
    current, pki = generate(shape_name, n, tmp_path)
    resources = Resources.from_objects(current.values())
    translator = Translator(SETTINGS)
    assert_same(translator.translate(resources), translate(resources, SETTINGS))
    # Every kind once in a shuffled order, then at random (the route edits more often).
    kinds = rng.sample(KINDS, len(KINDS)) + rng.choices(
        KINDS, weights=(4, 4, 2, 1, 1, 1, 1, 1), k=STEPS - len(KINDS)
    )
    for kind in kinds:
        upserts, removed = edit(kind, shape, rng, n, current, pki)
        removed &= current.keys()
        for key in removed:
            del current[key]
        current.update(upserts)
        resources = resources.with_changes(upserts, removed)
        assert_same(translator.translate(resources), translate(resources, SETTINGS)), kind
        if must_patch(shape_name, kind, current):
            assert translator.last == "patched", (kind, translator.last)
    assert translator.counts["patched"] >= STEPS // 3, translator.counts


@pytest.fixture(scope="module")
def worlds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[dict[ObjectKey, KubeObject], Any]]:
    """Each shape's objects at :data:`N` (made once: generating a shape issues certificates)."""
    return {name: generate(name, N[name], tmp_path_factory.mktemp(name)) for name in N}


@pytest.mark.parametrize("shape_name", ["path", "host", "gateways", "tls"])
@hypothesis_settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(kinds=st.lists(st.sampled_from(KINDS), min_size=1, max_size=8), rng=st.randoms(use_true_random=False))
def test_drawn_edit_sequences_equal_a_full_translation(
    shape_name: str,
    worlds: dict[str, tuple[dict[ObjectKey, KubeObject], Any]],
    kinds: list[str],
    rng: random.Random,
) -> None:
    shape = shapes.SHAPES[shape_name]
    n = N[shape_name]
    objects, pki = worlds[shape_name]
    current = dict(objects)
    resources = Resources.from_objects(current.values())
    translator = Translator(SETTINGS)
    translator.translate(resources)
    for kind in kinds:
        upserts, removed = edit(kind, shape, rng, n, current, pki)
        removed &= current.keys()
        for key in removed:
            del current[key]
        current.update(upserts)
        resources = resources.with_changes(upserts, removed)
        assert_same(translator.translate(resources), translate(resources, SETTINGS))
        if must_patch(shape_name, kind, current):
            assert translator.last == "patched", (kind, translator.last)


@pytest.mark.parametrize("shape_name", ["path", "host", "gateways"])
def test_a_ca_only_xbackends_name_is_patched(shape_name: str, tmp_path: Path) -> None:
    """XBackend ``x0`` trusts a CA of its own (a ConfigMap), then the CA is replaced, removed and
    made again: each step equals a full translation and is patched (only ``x0``'s routes are made
    again); in ``host`` the CA every XBackend shares is replaced first."""
    n = N[shape_name]
    current, pki = generate(shape_name, n, tmp_path)
    resources = Resources.from_objects(current.values())
    translator = Translator(SETTINGS, patch_always=0)  # the share rule at this small N
    translator.translate(resources)
    other = shapes.make_pki(tmp_path / "other")

    def ca(name: str, pem: str) -> dict[ObjectKey, KubeObject]:
        text = f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: default}}\n"
        return parse(text + f"data:\n  ca.crt: |\n{_indent(pem)}")

    own = parse(
        "apiVersion: gateway.networking.x-k8s.io/v1alpha1\nkind: XBackend\n"
        "metadata: {name: x0, namespace: default}\nspec:\n  type: ExternalHostname\n"
        "  externalHostname: {hostname: x0.bench.example}\n  port: {port: 8443}\n"
        "  tls:\n    mode: ServerOnly\n    validation:\n      hostname: x0.bench.example\n"
        "      caCertificateRefs: [{group: '', kind: ConfigMap, name: ca-x0}]\n"
    )
    steps: list[tuple[dict[ObjectKey, KubeObject], set[ObjectKey], bool]] = []
    if shape_name == "host":
        steps.append((ca(shapes.CA_CONFIGMAP, other.ca_pem), set(), False))
    steps += [
        (own, set(), True),  # an XBackend edit
        (ca("ca-x0", pki.ca_pem), set(), True),
        (ca("ca-x0", other.ca_pem), set(), True),
        ({}, {ObjectKey("ConfigMap", "default", "ca-x0")}, True),
        (ca("ca-x0", pki.ca_pem), set(), True),
    ]
    for upserts, removed, patched in steps:
        resources = resources.with_changes(upserts, removed)
        assert_same(translator.translate(resources), translate(resources, SETTINGS))
        assert (translator.last == "patched") == patched, translator.last
