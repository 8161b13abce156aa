"""Shared building blocks of every resource model: object metadata and conditions.

Conventions for every model in :mod:`weir.api`:

* Python attributes are the snake_case form of the JSON field; the JSON name
  is the alias, and validation errors are reported by alias, so a path reads
  ``spec.rules[0].backendRefs[1].port`` exactly as in the manifest.
* Unknown fields are ignored (as the API server prunes them), except where a
  typo would silently change behaviour; models are immutable once parsed.
* Defaults are those of the upstream CRDs, applied at parse time, so
  translation never re-implements a default. A default of ``None`` or of an
  empty collection is only a Python convenience: in the CRD the field is
  absent (see :func:`crd_default`); any other default is the CRD's.
* A constraint lives in the model: pydantic constraints for the OpenAPI
  schema, :class:`weir.api.cel.CelRule` for the CRD's CEL rules (with the
  upstream rule text and message). :mod:`weir.api.crds` generates the CRD
  from the same models that standalone validation runs.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator
from pydantic.alias_generators import to_camel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

#: The Gateway API caps a route's (and an XBackend's) ``status.parents`` at 32 entries.
MAX_PARENTS = 32
#: ... and a policy's ``status.ancestors`` (``PolicyStatus``) at 16.
MAX_ANCESTORS = 16

#: RFC 1123 subdomain, as the API server checks ``metadata.name``.
DNS1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
#: RFC 1123 label.
DNS1123_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
_SUBDOMAIN_RE = re.compile(DNS1123_SUBDOMAIN)
_LABEL_RE = re.compile(DNS1123_LABEL)


class Model(BaseModel):
    """Base of every API model: camelCase aliases, frozen, unknown fields ignored."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        frozen=True,
        extra="ignore",
        str_strip_whitespace=False,
    )

    def model_post_init(self, context: Any, /) -> None:
        # pydantic gives every instance its own set of the fields its input set (216 bytes, a
        # quarter of a parsed HTTPRoute's memory); the models are frozen, so they can share one.
        given = self.__pydantic_fields_set__
        key = frozenset(given)
        shared = _FIELDS_SET.get(key)
        if shared is None:
            shared = _FIELDS_SET[key] = _SharedFieldsSet(given)
        object.__setattr__(self, "__pydantic_fields_set__", shared)


class _SharedFieldsSet(set[str]):
    """A model's ``model_fields_set``, one instance shared by every model whose input set those fields.

    Read-only: nothing changes a frozen model's fields set, and the mutators
    refuse all the same; a copy (``model_copy``, ``copy.deepcopy``, pickling)
    is a plain set of the copy's own, which ``model_copy(update=...)`` adds to.
    """

    __slots__ = ()

    def _refuse(self, *args: object) -> Any:
        raise TypeError("a model's fields set is shared with other models and cannot change")

    add = discard = remove = pop = clear = _refuse
    update = difference_update = intersection_update = symmetric_difference_update = _refuse
    __ior__ = __iand__ = __isub__ = __ixor__ = _refuse

    def __copy__(self) -> set[str]:
        return set(self)

    def __deepcopy__(self, memo: object) -> set[str]:
        return set(self)

    def __reduce__(self) -> tuple[type[set[str]], tuple[list[str]]]:
        return set, (list(self),)


_FIELDS_SET: dict[frozenset[str], _SharedFieldsSet] = {}


# Gateway API shared string types (from the upstream CRD schemas).
ObjectName = Annotated[str, StringConstraints(min_length=1, max_length=253)]
SectionName = Annotated[str, StringConstraints(min_length=1, max_length=253, pattern=DNS1123_SUBDOMAIN)]
Namespace = Annotated[str, StringConstraints(min_length=1, max_length=63, pattern=DNS1123_LABEL)]
Group = Annotated[
    str,
    StringConstraints(
        max_length=253,
        pattern=r"^$|^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
    ),
]
Kind = Annotated[
    str,
    StringConstraints(min_length=1, max_length=63, pattern=r"^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$"),
]
Hostname = Annotated[
    str,
    StringConstraints(
        min_length=1,
        max_length=253,
        pattern=r"^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
    ),
]
PreciseHostname = Annotated[
    str,
    StringConstraints(
        min_length=1,
        max_length=253,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
    ),
]
#: Gateway API ``LabelValue``: a label's value, 63 characters at most, may be empty.
LabelValue = Annotated[
    str, StringConstraints(max_length=63, pattern=r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
]
#: Gateway API ``AnnotationValue``.
AnnotationValue = Annotated[str, StringConstraints(max_length=4096)]
#: Integers are strict, as in the API server: ``"80"`` and ``true`` are not ports.
PortNumber = Annotated[int, Field(ge=1, le=65535, strict=True)]


class ObjectMeta(Model):
    """The subset of ``metadata`` weir reads.

    ``namespace`` is ``None`` as written; the loader fills in ``default`` for
    namespaced kinds that omit it, as ``kubectl apply`` would.
    """

    name: str = Field(min_length=1, max_length=253)
    namespace: str | None = None
    generation: int = Field(default=1, strict=True)
    resource_version: str | None = None
    uid: str | None = None
    creation_timestamp: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _name_is_subdomain(cls, value: str) -> str:
        if not _SUBDOMAIN_RE.match(value):
            raise ValueError(
                "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                "characters, '-' or '.', and must start and end with an alphanumeric character"
            )
        return value

    @field_validator("namespace")
    @classmethod
    def _namespace_is_label(cls, value: str | None) -> str | None:
        if value is not None and not _LABEL_RE.match(value):
            raise ValueError(
                "a lowercase RFC 1123 label must consist of lower case alphanumeric "
                "characters or '-', and must start and end with an alphanumeric character"
            )
        return value


class KubeObject(Model):
    """A top-level Kubernetes object.

    Subclasses set :attr:`API_VERSION`, :attr:`KIND` and :attr:`NAMESPACED`.
    ``status`` is carried as plain data: weir computes status, it never reads
    its own back from manifests, but keeps other controllers' entries.
    """

    API_VERSION: ClassVar[str] = ""
    #: Other apiVersions of the same schema that weir also reads (the API
    #: server serves one stored object under each of them).
    ALSO_SERVED: ClassVar[tuple[str, ...]] = ()
    KIND: ClassVar[str] = ""
    NAMESPACED: ClassVar[bool] = True

    api_version: str
    kind: str
    metadata: ObjectMeta
    status: dict[str, Any] | None = None

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def namespace(self) -> str:
        """The object's namespace ('' for cluster-scoped kinds)."""
        return self.metadata.namespace or ""

    @property
    def key(self) -> ObjectKey:
        return ObjectKey(self.KIND, self.namespace, self.name)

    def warnings(self) -> tuple[tuple[str, str], ...]:
        """``(field path, message)`` of what is valid here but will not be elsewhere (a cluster's CRD)."""
        return ()


class ObjectKey(tuple[str, str, str]):
    """``(kind, namespace, name)``; namespace is '' for cluster-scoped kinds."""

    __slots__ = ()

    def __new__(cls, kind: str, namespace: str, name: str) -> ObjectKey:
        return super().__new__(cls, (kind, namespace, name))

    def __getnewargs__(self) -> tuple[str, str, str]:  # copy and pickle call __new__ with these
        return (self[0], self[1], self[2])

    @property
    def kind(self) -> str:
        return self[0]

    @property
    def namespace(self) -> str:
        return self[1]

    @property
    def name(self) -> str:
        return self[2]

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}" if self.namespace else f"{self.kind} {self.name}"

    def __repr__(self) -> str:
        return f"ObjectKey({self.kind!r}, {self.namespace!r}, {self.name!r})"


class LocalObjectReference(Model):
    """A reference to an object in the same namespace (group, kind, name)."""

    group: Group
    kind: Kind
    name: ObjectName


# ---------------------------------------------------------------- CRD defaults and shared status types

#: :func:`crd_default` for a field the CRD gives no default.
NO_DEFAULT: Any = PydanticUndefined


def crd_default(field: FieldInfo) -> Any:
    """The default the CRD declares for ``field``, or :data:`NO_DEFAULT`.

    That is the model's default, unless it is ``None`` or an empty
    collection (or made by a factory): those stand for "absent".
    """
    default = field.default
    if default is PydanticUndefined or default is None:
        return NO_DEFAULT
    if isinstance(default, tuple | list | dict | set | frozenset) and not default:
        return NO_DEFAULT
    return default


#: Gateway API ``GatewayController``: ``DOMAIN/PATH``.
GatewayController = Annotated[
    str,
    StringConstraints(
        min_length=1,
        max_length=253,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\/[A-Za-z0-9\/\-._~%!$&'()*+,;=:]+$",
    ),
]


class Condition(Model):
    """``metav1.Condition``, with the API's constraints (status schemas in the CRDs)."""

    type: str = Field(
        max_length=316,
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
    )
    status: Literal["True", "False", "Unknown"]
    observed_generation: int | None = Field(
        default=None, ge=0, strict=True, json_schema_extra={"format": "int64"}
    )
    last_transition_time: str = Field(json_schema_extra={"format": "date-time"})
    reason: str = Field(min_length=1, max_length=1024, pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
    message: str = Field(max_length=32768)
