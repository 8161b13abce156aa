"""weir.api.meta.Model: validated models share their fields set, and behave as pydantic's own.

pydantic keeps, per model, the set of fields its input set
(``model_fields_set``): a set per model is a quarter of a parsed route's
memory, so models that set the same fields share one, read-only. Everything
pydantic does with it must still work: ``exclude_unset``, ``model_copy``
with ``update``, copies and pickling; and CEL's ``has()`` reads it.
"""

from __future__ import annotations

import copy
import pickle

import pytest

from weir.api.gateway_v1 import HTTPRoute
from weir.loader import load_text

ROUTE = """\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}, namespace: default}}
spec:
  parentRefs: [{{name: gw}}]
  rules:
  - backendRefs: [{{name: web, port: 80}}]
"""


def routes(*names: str) -> list[HTTPRoute]:
    objects, problems = load_text("---\n".join(ROUTE.format(name=n) for n in names), "r.yaml")
    assert problems == []
    out = [loaded.object for loaded in objects]
    assert all(isinstance(o, HTTPRoute) for o in out)
    return out  # type: ignore[return-value]


def test_models_that_set_the_same_fields_share_one_set() -> None:
    a, b = routes("a", "b")
    assert a.model_fields_set == {"api_version", "kind", "metadata", "spec"}
    assert a.metadata.model_fields_set == {"name", "namespace"}
    assert a.__pydantic_fields_set__ is b.__pydantic_fields_set__
    assert a.metadata.__pydantic_fields_set__ is b.metadata.__pydantic_fields_set__
    assert a.spec.rules[0].__pydantic_fields_set__ is b.spec.rules[0].__pydantic_fields_set__
    assert a.metadata.__pydantic_fields_set__ is not a.__pydantic_fields_set__


def test_a_shared_set_cannot_change() -> None:
    (a,) = routes("a")
    shared = a.model_fields_set
    for change in (
        lambda: shared.add("status"),
        lambda: shared.discard("spec"),
        lambda: shared.update({"status"}),
        lambda: shared.clear(),
    ):
        with pytest.raises(TypeError, match="shared"):
            change()
    with pytest.raises(TypeError):
        shared |= {"status"}
    assert a.model_fields_set == {"api_version", "kind", "metadata", "spec"}


def test_pydantic_still_uses_it() -> None:
    a, b = routes("a", "b")
    assert a.metadata.model_dump(exclude_unset=True) == {"name": "a", "namespace": "default"}
    assert '"generation"' not in a.metadata.model_dump_json(exclude_unset=True)

    copied = a.model_copy(update={"status": {"parents": []}})
    assert copied.status == {"parents": []}
    assert copied.model_fields_set == {"api_version", "kind", "metadata", "spec", "status"}
    assert a.model_fields_set == b.model_fields_set == {"api_version", "kind", "metadata", "spec"}
    assert a.status is None

    for twin in (copy.copy(a), copy.deepcopy(a), pickle.loads(pickle.dumps(a))):
        assert twin == a
        assert twin.model_fields_set == a.model_fields_set
        assert twin.__pydantic_fields_set__ is not a.__pydantic_fields_set__


def test_cel_has_still_sees_what_the_manifest_set() -> None:
    """XBackend's rule ``has(self.externalHostname) == (self.type == 'ExternalHostname')``."""
    base = (
        "apiVersion: gateway.networking.x-k8s.io/v1alpha1\nkind: XBackend\n"
        "metadata: {name: x}\nspec:\n  type: ExternalHostname\n  port: {port: 443}\n"
    )
    objects, problems = load_text(base + "  externalHostname: {hostname: api.example.com}\n", "ok.yaml")
    assert problems == [] and len(objects) == 1
    objects, problems = load_text(base, "missing.yaml")
    assert objects == []
    assert [p.field for p in problems] == ["spec"]
    assert "externalHostname must be set" in problems[0].message
