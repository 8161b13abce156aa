"""What the leader does about the headless Services of EndpointSelector XBackends: the plan, and the
leader-only writer against the API-server double (tests/kube/test_envtest_xbackend.py runs it on a
real API server)."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

from apiserver_double import ApiServerDouble
from weir.api.xbackend_v1alpha1 import XBackend
from weir.providers.kubernetes.api import KubeApi, load_config
from weir.providers.kubernetes.selector import SelectorServices, plan, wanted_services
from weir.providers.kubernetes.watch import Backoff
from weir.resources import Resources


def xbackend(name: str, uid: str | None = "u1", labels: dict[str, str] | None = None) -> XBackend:
    metadata: dict[str, Any] = {"name": name, "namespace": "shop"}
    if uid:
        metadata["uid"] = uid
    return XBackend.model_validate(
        {
            "apiVersion": "gateway.networking.x-k8s.io/v1alpha1",
            "kind": "XBackend",
            "metadata": metadata,
            "spec": {
                "type": "EndpointSelector",
                "endpointSelector": {"matchLabels": labels or {"app": "web"}},
                "port": {"number": 8080},
            },
        }
    )


def existing(svc: dict[str, Any], name: str) -> dict[str, Any]:
    """``svc`` as the API server returns it once created (a name, a cluster IP of None kept)."""
    out = copy.deepcopy(svc)
    out["metadata"]["name"] = name
    return out


def test_a_missing_service_is_created_and_a_matching_one_kept() -> None:
    wanted = wanted_services([xbackend("web")])
    create, delete = plan(wanted, [], True)
    assert create == [wanted["shop", "web"]] and delete == []
    assert plan(wanted, [existing(wanted["shop", "web"], "web-x1")], True) == ([], [])


def test_a_changed_selector_or_owner_is_a_new_service_and_the_old_one_goes() -> None:
    old = existing(wanted_services([xbackend("web")])["shop", "web"], "web-x1")
    for changed in (xbackend("web", labels={"app": "v2"}), xbackend("web", uid="u2")):
        wanted = wanted_services([changed])
        assert plan(wanted, [old], True) == ([wanted["shop", "web"]], [("shop", "web-x1")])


def test_duplicates_and_services_of_gone_xbackends_are_deleted_unless_xbackends_are_not_served() -> None:
    svc = wanted_services([xbackend("web")])["shop", "web"]
    one, two = existing(svc, "web-a"), existing(svc, "web-b")
    assert plan(wanted_services([xbackend("web")]), [two, one], True) == ([], [("shop", "web-b")])
    assert plan({}, [one], True) == ([], [("shop", "web-a")])
    assert plan({}, [one], False) == ([], []), "the CRD missing: what XBackends want is unknown"


def test_a_labelled_service_without_an_xbackend_owner_is_never_touched() -> None:
    theirs = existing(wanted_services([xbackend("web")])["shop", "web"], "theirs")
    del theirs["metadata"]["ownerReferences"]
    assert plan({}, [theirs], True) == ([], [])


def test_xbackends_without_a_uid_or_with_names_too_long_for_a_label_get_none() -> None:
    assert wanted_services([xbackend("web", uid=None), xbackend("w" * 64)]) == {}
    assert list(wanted_services([xbackend("w" * 63)])) == [("shop", "w" * 63)]


async def test_only_the_leader_creates_and_it_compares_again_on_becoming_leader(tmp_path: Path) -> None:
    """Against the API-server double: nothing is created while not leading; ``resync`` on becoming
    leader creates the Service; a second identical snapshot makes no request."""
    server = ApiServerDouble()
    server.start()
    api = KubeApi(load_config(server.write_kubeconfig(tmp_path / "kubeconfig")))
    leading = False
    services = SelectorServices(api, (), lambda: leading, Backoff(0.02, 0.1))
    task = asyncio.create_task(services.run())
    try:
        server.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}})
        resources = Resources.from_objects([xbackend("web")])
        services.submit(resources)
        await asyncio.sleep(0.3)
        assert server.list("v1", "Service", "shop") == [] and services.created == 0
        leading = True
        services.resync()
        for _ in range(100):
            if services.created:
                break
            await asyncio.sleep(0.02)
        [svc] = server.list("v1", "Service", "shop")
        assert svc["metadata"]["labels"] == {"weir.dev/xbackend": "web"}
        server.clear_requests()
        services.submit(Resources.from_objects([xbackend("web")]))
        await asyncio.sleep(0.2)
        assert server.requests == [], "the same wishes: not even a list"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await api.close()
        server.stop()
