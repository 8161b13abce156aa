"""Resources and object keys: what translation and the providers rely on."""

from __future__ import annotations

import copy
import gc
import pickle
import weakref

from weir.api.core_v1 import Service
from weir.api.meta import ObjectKey
from weir.resources import Resources


def service(name: str, port: int = 80) -> Service:
    return Service.model_validate(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"ports": [{"port": port}]},
        }
    )


def test_object_keys_copy_and_pickle_as_keys() -> None:
    key = ObjectKey("Service", "default", "a")
    for again in (copy.copy(key), copy.deepcopy(key), pickle.loads(pickle.dumps(key))):
        assert again == key and type(again) is ObjectKey and again.name == "a"
    assert copy.deepcopy({key: {"x": 1}}) == {key: {"x": 1}}


def test_with_changes_knows_what_changed_since_its_base_only() -> None:
    base = Resources.from_objects([service("a"), service("b")], unserved=frozenset({"XBackend"}))
    edited = base.with_changes({service("c").key: service("c")}, [ObjectKey("Service", "default", "a")])
    assert edited.unserved == base.unserved
    assert edited.changed_since(base) == {
        ObjectKey("Service", "default", "c"),
        ObjectKey("Service", "default", "a"),
    }
    assert edited.changed_since(edited) is None  # not made from itself
    assert base.changed_since(edited) is None
    again = edited.with_changes({}, [])
    assert again.changed_since(base) is None  # only the direct base is known


def test_with_changes_does_not_keep_earlier_snapshots_alive() -> None:
    resources = Resources.from_objects([service("a")])
    earlier = []
    for port in range(1, 30):
        earlier.append(weakref.ref(resources))
        resources = resources.with_changes({service("a", port).key: service("a", port)}, [])
    gc.collect()
    assert [ref for ref in earlier if ref() is not None] == []
