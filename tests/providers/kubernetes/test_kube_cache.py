"""The Kubernetes provider's cache: validation like files, trimmed objects, Secret data on demand."""

from __future__ import annotations

import base64
from typing import Any

from weir.api.core_v1 import Secret
from weir.api.gateway_v1 import HTTPRoute
from weir.api.meta import ObjectKey
from weir.providers.kubernetes.cache import LAST_APPLIED, ObjectCache, references
from weir.providers.kubernetes.provider import WATCHED, WatchedKind

KINDS = {k.kind: k for k in WATCHED}


def route(name: str, *, version: str = "1", port: Any = 80, **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default", "resourceVersion": version, **meta},
        "spec": {"parentRefs": [{"name": "gw"}], "rules": [{"backendRefs": [{"name": "web", "port": port}]}]},
    }


def secret(name: str, payload: bytes, version: str = "1") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default", "resourceVersion": version},
        "type": "kubernetes.io/tls",
        "data": {
            "tls.crt": base64.b64encode(payload).decode(),
            "tls.key": base64.b64encode(payload).decode(),
        },
    }


def gateway(secret_name: str | None, version: str = "1") -> dict[str, Any]:
    listener: dict[str, Any] = {"name": "http", "port": 8080, "protocol": "HTTP"}
    if secret_name is not None:
        listener = {
            "name": "https",
            "port": 8443,
            "protocol": "HTTPS",
            "tls": {"certificateRefs": [{"name": secret_name}]},
        }
    return {
        "metadata": {"name": "gw", "namespace": "default", "resourceVersion": version},
        "spec": {"gatewayClassName": "weir", "listeners": [listener]},
    }


def test_objects_are_validated_like_files_and_an_invalid_update_keeps_the_last_valid_version() -> None:
    cache = ObjectCache()
    kind = KINDS["HTTPRoute"]
    cache.replace(kind, None, [route("web")])
    cache.apply(kind, "MODIFIED", route("web", version="2", port=0))
    snap = cache.snapshot()
    served = snap.resources.get(HTTPRoute, "default", "web")
    assert served is not None and served.spec.rules[0].backend_refs[0].port == 80
    [problem] = snap.problems
    assert problem.object == "HTTPRoute default/web"
    assert problem.field == "spec.rules[0].backendRefs[0].port"
    assert problem.message == (
        "Invalid value: 0: should be greater than or equal to 1: kept the last valid version"
    )
    # Never valid: skipped, reported.
    cache.apply(kind, "ADDED", route("bad", port="80"))
    snap = cache.snapshot()
    assert snap.resources.get(HTTPRoute, "default", "bad") is None
    assert any(p.object == "HTTPRoute default/bad" for p in snap.problems)
    # Fixed: served, problem gone; deleted: gone.
    cache.apply(kind, "MODIFIED", route("web", version="3", port=81))
    cache.apply(kind, "DELETED", route("bad"))
    snap = cache.snapshot()
    assert snap.problems == ()
    served = snap.resources.get(HTTPRoute, "default", "web")
    assert served is not None and served.spec.rules[0].backend_refs[0].port == 81


def test_a_relist_replaces_the_kind_so_deletions_in_a_gap_are_seen() -> None:
    cache = ObjectCache()
    kind = KINDS["HTTPRoute"]
    cache.replace(kind, None, [route("a"), route("b")])
    cache.replace(kind, None, [route("a", version="5")])
    assert [k.name for k in cache.snapshot().resources.objects] == ["a"]
    assert cache.live(ObjectKey("HTTPRoute", "default", "a")) == ("5", None)


def test_managed_fields_and_the_last_applied_annotation_are_dropped() -> None:
    cache = ObjectCache()
    fat = route("web", managedFields=[{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}])
    fat["metadata"]["annotations"] = {LAST_APPLIED: "{...}", "team": "a"}
    cache.replace(KINDS["HTTPRoute"], None, [fat])
    served = cache.snapshot().resources.get(HTTPRoute, "default", "web")
    assert served is not None and served.metadata.annotations == {"team": "a"}


def test_references_find_every_secret_and_config_map_a_spec_names() -> None:
    cache = ObjectCache()
    cache.replace(KINDS["Gateway"], None, [gateway("tls")])
    [gw] = cache.snapshot().resources.gateways
    assert references(gw) == {ObjectKey("Secret", "default", "tls")}
    cache.replace(KINDS["HTTPRoute"], None, [route("web")])
    [web] = cache.snapshot().resources.http_routes
    assert references(web) == frozenset()  # backendRefs are Services


def test_secret_data_is_kept_only_while_referenced() -> None:
    """Memory: 20 unreferenced 32 KiB Secrets cost no payload; a reference brings one's data back."""
    cache = ObjectCache()
    secrets = KINDS["Secret"]
    payload = b"x" * 32768
    cache.replace(KINDS["Gateway"], None, [gateway(None)])
    cache.replace(secrets, None, [secret(f"s{i}", payload) for i in range(20)])
    stats = cache.stats()
    assert (stats.objects, stats.elided, stats.data_bytes) == (21, 20, 0)
    served = cache.snapshot().resources.get(Secret, "default", "s3")
    assert served is not None and served.data == {}  # the object exists, without its payload
    assert cache.wanted() == {}

    cache.apply(KINDS["Gateway"], "MODIFIED", gateway("s3", version="2"))
    assert cache.wanted() == {ObjectKey("Secret", "default", "s3"): "1"}
    cache.fill(secrets, secret("s3", payload), "1")
    assert cache.wanted() == {}
    stats = cache.stats()
    assert stats.elided == 19 and 2 * 32768 < stats.data_bytes < 3 * 32768
    served = cache.snapshot().resources.get(Secret, "default", "s3")
    assert served is not None and served.value("tls.crt") == payload

    # A newer event wins over a fetch that started before it.
    cache.apply(secrets, "MODIFIED", secret("s3", b"new", version="7"))
    cache.fill(secrets, secret("s3", payload), "1")
    served = cache.snapshot().resources.get(Secret, "default", "s3")
    assert served is not None and served.value("tls.crt") == b"new"

    # The reference goes away: the payload is dropped again.
    cache.apply(KINDS["Gateway"], "MODIFIED", gateway(None, version="3"))
    assert cache.stats().data_bytes == 0


def test_a_kind_that_is_not_served_is_a_warning_and_in_resources() -> None:
    cache = ObjectCache()
    xbackend: WatchedKind = KINDS["XBackend"]
    cache.unserved(xbackend, None)
    snap = cache.snapshot()
    assert snap.resources.unserved == {"XBackend"}
    [problem] = snap.problems
    assert problem.severity == "warning"
    assert problem.message.startswith(
        "XBackend (gateway.networking.x-k8s.io/v1alpha1) is not installed; routes that reference it get "
        "ResolvedRefs=False/InvalidKind"
    )
    cache.replace(xbackend, None, [])
    assert cache.snapshot().resources.unserved == frozenset()


def test_a_secret_ref_without_a_kind_counts_as_a_reference() -> None:
    """BackendCredentialPolicy names its Secret as ``secretRef: {name, key}``: its data is kept."""
    cache = ObjectCache()
    policy = {
        "metadata": {"name": "openai", "namespace": "default", "resourceVersion": "1"},
        "spec": {
            "targetRefs": [{"group": "gateway.networking.x-k8s.io", "kind": "XBackend", "name": "openai"}],
            "secretRef": {"name": "openai-key", "key": "api-key"},
        },
    }
    cache.replace(KINDS["BackendCredentialPolicy"], None, [policy])
    assert cache.snapshot().problems == ()
    cache.replace(KINDS["Secret"], None, [secret("openai-key", b"sk-test")])
    served = cache.snapshot().resources.get(Secret, "default", "openai-key")
    assert served is not None and served.value("tls.crt") == b"sk-test"
