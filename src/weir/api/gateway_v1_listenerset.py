"""Gateway API ``gateway.networking.k8s.io/v1``: ListenerSet.

A ListenerSet adds listeners to a Gateway that allows it
(``spec.allowedListeners`` on the Gateway; none by default). Its listener
entries have the schema of a Gateway's listeners, with the same CEL rules
(tls by protocol, unique names and port/protocol/hostname combinations
within the set); names need not be unique across the Gateway and its sets.
Routes attach to its listeners by naming the ListenerSet as their parent.
Kept out of :mod:`weir.api.gateway_v1` like the other route and policy kinds.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, model_validator

from weir.api.gateway_v1 import GROUP, Listener, unique_listeners
from weir.api.meta import Group, Kind, KubeObject, Model, Namespace, ObjectName

API_VERSION = f"{GROUP}/v1"


class ParentGatewayReference(Model):
    """``spec.parentRef``: the Gateway the listeners are added to (in the set's namespace by default)."""

    group: Group = GROUP
    kind: Kind = "Gateway"
    name: ObjectName
    namespace: Namespace | None = None


class ListenerSetSpec(Model):
    parent_ref: ParentGatewayReference
    listeners: tuple[Listener, ...] = Field(min_length=1, max_length=64)

    @model_validator(mode="after")
    def _unique(self) -> ListenerSetSpec:
        unique_listeners(self.listeners, fold_case=True)  # upstream's message says Gateway here too
        return self


class ListenerSet(KubeObject):
    """Listeners added to a Gateway, owned by another team or namespace."""

    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "ListenerSet"

    spec: ListenerSetSpec
