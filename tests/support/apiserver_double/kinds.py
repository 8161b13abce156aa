"""Which resources the API-server double serves, and under which names.

A :class:`KindInfo` is one *version* of one resource, as discovery lists it.
Versions of the same resource (same group and plural, e.g. ReferenceGrant
``v1beta1`` and ``v1``) share one store, as they share one etcd prefix in a
real cluster; the double does no conversion (the versions weir reads have the
same schema), it only rewrites ``apiVersion`` on the way out.

:data:`DEFAULT_KINDS` is derived from :data:`weir.api.registry.MODELS` (every
kind and version weir reads) plus ``coordination.k8s.io/v1`` Lease and
``events.k8s.io/v1`` Event, so a kind added to the registry is served without
touching this module.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from weir.api.meta import KubeObject
from weir.api.registry import MODELS

__all__ = ["DEFAULT_KINDS", "EVENT", "LEASE", "XBACKEND", "KindInfo", "guess_plural", "kinds_without"]


@dataclass(frozen=True)
class KindInfo:
    """One served version of one resource.

    ``status_subresource``: the kind has a ``/status`` subresource (writes to
    the main endpoint then leave ``status`` alone, writes to ``/status`` change
    only ``status``, and ``metadata.generation`` counts spec changes only).
    ``builtin``: a kind of the API server itself rather than a CRD; it changes
    three things, as in a real server: list items carry no ``apiVersion``/
    ``kind``, a strategic merge patch is accepted (CRDs answer 415), and a PUT
    without ``metadata.resourceVersion`` is an unconditional update (CRDs
    answer 422).
    """

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    status_subresource: bool = True
    builtin: bool = False

    @property
    def api_version(self) -> str:
        """``group/version``, or just ``version`` for the core group."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def resource(self) -> tuple[str, str]:
        """``(group, plural)``: what the versions of one resource share (their storage)."""
        return (self.group, self.plural)

    @property
    def qualified(self) -> str:
        """``plural.group`` (``plural`` for the core group), as API-server messages name a resource."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def qualified_kind(self) -> str:
        """``Kind.group`` (``Kind`` for the core group), as "is invalid" messages name a kind."""
        return f"{self.kind}.{self.group}" if self.group else self.kind


def guess_plural(kind: str) -> str:
    """The plural Kubernetes guesses for ``kind`` (lower-case; ``-y`` → ``-ies``, ``-s`` → ``-ses``)."""
    lower = kind.lower()
    if lower.endswith("y") and len(lower) > 1 and lower[-2] not in "aeiou":
        return lower[:-1] + "ies"
    if lower.endswith(("s", "x", "z", "ch", "sh")):
        return lower + "es"
    return lower + "s"


# Built-in kinds: (group, kind) -> (plural, has a status subresource).
_BUILTIN: dict[tuple[str, str], tuple[str, bool]] = {
    ("", "Namespace"): ("namespaces", True),
    ("", "Service"): ("services", True),
    ("", "Secret"): ("secrets", False),
    ("", "ConfigMap"): ("configmaps", False),
    ("", "Endpoints"): ("endpoints", False),
    ("discovery.k8s.io", "EndpointSlice"): ("endpointslices", False),
    ("coordination.k8s.io", "Lease"): ("leases", False),
    ("events.k8s.io", "Event"): ("events", False),
}


def _kind_info(api_version: str, kind: str, namespaced: bool, status: bool = True) -> KindInfo:
    group, _, version = api_version.rpartition("/")
    builtin = _BUILTIN.get((group, kind))
    if builtin is not None:
        return KindInfo(group, version, kind, builtin[0], namespaced, builtin[1], builtin=True)
    return KindInfo(group, version, kind, guess_plural(kind), namespaced, status)


def _has_status_subresource(model: type[KubeObject]) -> bool:
    """As the CRDs declare it: the Gateway API's for every kind but ReferenceGrant; weir's own
    (:mod:`weir.api.crds`) where the model declares a ``STATUS``."""
    group = model.API_VERSION.rpartition("/")[0]
    if group.startswith("gateway.networking.") and model.KIND != "ReferenceGrant":
        return True
    return getattr(model, "STATUS", None) is not None


LEASE = _kind_info("coordination.k8s.io/v1", "Lease", namespaced=True)
#: The Events weir reports (weir.providers.kubernetes.events).
EVENT = _kind_info("events.k8s.io/v1", "Event", namespaced=True)
XBACKEND = _kind_info("gateway.networking.x-k8s.io/v1alpha1", "XBackend", namespaced=True)

#: Every kind and version weir reads (:data:`weir.api.registry.MODELS`), Lease and Event.
DEFAULT_KINDS: tuple[KindInfo, ...] = (
    *(
        _kind_info(version, model.KIND, model.NAMESPACED, _has_status_subresource(model))
        for model in MODELS
        for version in (model.API_VERSION, *model.ALSO_SERVED)
    ),
    LEASE,
    EVENT,
)


def kinds_without(*kinds: str, base: Iterable[KindInfo] = DEFAULT_KINDS) -> tuple[KindInfo, ...]:
    """``base`` without the named kinds (every version), e.g. ``kinds_without("XBackend")``."""
    unknown = set(kinds) - {k.kind for k in base}
    if unknown:
        raise ValueError(f"kinds_without: not among the kinds given: {sorted(unknown)}")
    return tuple(k for k in base if k.kind not in kinds)
