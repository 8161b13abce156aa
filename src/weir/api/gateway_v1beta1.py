"""Gateway API ``gateway.networking.k8s.io/v1beta1``: ReferenceGrant."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from weir.api.meta import Group, Kind, KubeObject, Model, Namespace, ObjectName

#: ReferenceGrant is served as v1 since Gateway API v1.5 and still as v1beta1; the schema is the same.
API_VERSION = "gateway.networking.k8s.io/v1beta1"
API_VERSION_V1 = "gateway.networking.k8s.io/v1"


class ReferenceGrantFrom(Model):
    group: Group
    kind: Kind
    namespace: Namespace


class ReferenceGrantTo(Model):
    group: Group
    kind: Kind
    name: ObjectName | None = None


class ReferenceGrantSpec(Model):
    from_: tuple[ReferenceGrantFrom, ...] = Field(alias="from", min_length=1, max_length=16)
    to: tuple[ReferenceGrantTo, ...] = Field(min_length=1, max_length=16)


class ReferenceGrant(KubeObject):
    """Lets objects in ``from`` namespaces refer to ``to`` objects in this grant's namespace."""

    API_VERSION: ClassVar[str] = API_VERSION
    ALSO_SERVED: ClassVar[tuple[str, ...]] = (API_VERSION_V1,)
    KIND: ClassVar[str] = "ReferenceGrant"

    spec: ReferenceGrantSpec
