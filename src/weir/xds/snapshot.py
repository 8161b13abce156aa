"""The unit of configuration handed from :mod:`weir.xds.build` to :mod:`weir.xds.server`.

A :class:`Snapshot` holds every Envoy resource as a :class:`Resource`: the
message serialised once (deterministically) and a version that is a hash of
those bytes. The ADS server compares versions, not messages, to decide what
changed, and sends the bytes it already has; nothing is serialised twice.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import symbol_database
from google.protobuf.message import Message

LISTENER = "type.googleapis.com/envoy.config.listener.v3.Listener"
ROUTE = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
CLUSTER = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
ENDPOINT = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
SECRET = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"

#: The order in which a changed snapshot is pushed: what a resource refers to
#: goes before the resource (make before break). Endpoints (of the EDS clusters
#: of external hostnames) follow their clusters, as Envoy asks for them then.
PUSH_ORDER = (SECRET, CLUSTER, ENDPOINT, LISTENER, ROUTE)

#: Types Envoy subscribes to with a wildcard (it wants all of them); the
#: others it asks for by name.
WILDCARD_TYPES = frozenset({LISTENER, CLUSTER})


def content_version(value: bytes) -> str:
    """The version of a serialised resource: 16 hex digits of a hash of its bytes."""
    return hashlib.blake2b(value, digest_size=8).hexdigest()


@dataclass(frozen=True, slots=True)
class Resource:
    """One Envoy resource, serialised once.

    ``value`` is the message serialised with ``deterministic=True`` (so the
    same content always has the same bytes); ``version`` is
    :func:`content_version` of it, which Envoy gets as the resource's version
    in delta xDS. Two resources are the same content exactly when their
    versions are equal.
    """

    name: str
    type_url: str
    value: bytes
    version: str

    @classmethod
    def of(cls, message: Message, name: str | None = None) -> Resource:
        """Serialise ``message`` (named ``name``, else by its ``name`` field)."""
        value = message.SerializeToString(deterministic=True)
        type_url = "type.googleapis.com/" + message.DESCRIPTOR.full_name
        return cls(name if name is not None else message.name, type_url, value, content_version(value))

    def message(self) -> Any:
        """The message, decoded again (for people and tests; the server never needs it)."""
        full_name = self.type_url.rsplit("/", 1)[-1]
        cls = symbol_database.Default().GetSymbol(full_name)
        return cls.FromString(self.value)


@dataclass(frozen=True)
class Snapshot:
    """A complete, versioned set of Envoy resources.

    ``resources`` maps a type URL (one of the constants above) to the
    resources of that type by name. Every type in :data:`PUSH_ORDER` is
    present, possibly empty. Messages given instead of :class:`Resource`
    objects are serialised here. ``version`` is opaque to Envoy and changes
    whenever any resource changes; per resource, Envoy is told its content
    version, and the server sends only the resources whose version differs
    from what that Envoy has.
    """

    version: str
    resources: Mapping[str, Mapping[str, Resource]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        normalised: dict[str, Mapping[str, Resource]] = {t: {} for t in PUSH_ORDER}
        for type_url, by_name in self.resources.items():
            if all(isinstance(r, Resource) for r in by_name.values()):
                normalised[type_url] = by_name
            else:
                normalised[type_url] = {
                    name: r if isinstance(r, Resource) else Resource.of(r, name)
                    for name, r in by_name.items()
                }
        object.__setattr__(self, "resources", normalised)

    def of_type(self, type_url: str) -> Mapping[str, Resource]:
        return self.resources.get(type_url, {})


def snapshot_version(resources: Mapping[str, Mapping[str, Resource]]) -> str:
    """A content hash of a whole configuration: equal content, equal version.

    Computed from the resources' own versions (already hashes of their
    bytes), so it costs a pass over the names, not a serialisation; and not
    even that for a type given as the very mapping it was given last time
    (:class:`weir.xds.cache.BuildCache` returns unchanged types so).
    """
    digest = hashlib.blake2b(digest_size=8)
    for type_url in PUSH_ORDER:
        digest.update(type_url.encode() + b"\n" + _type_digest(resources.get(type_url, {})))
    return digest.hexdigest()


#: The digests of the last few mappings :func:`_type_digest` saw, by identity (with the mapping,
#: which keeps its id from being reused while it is here).
_DIGESTS: dict[int, tuple[Mapping[str, Resource], bytes]] = {}


def _type_digest(by_name: Mapping[str, Resource]) -> bytes:
    known = _DIGESTS.get(id(by_name))
    if known is not None and known[0] is by_name:
        return known[1]
    text = "".join(f"{name}\0{by_name[name].version}\n" for name in sorted(by_name))
    value = hashlib.blake2b(text.encode(), digest_size=16).digest()
    if len(_DIGESTS) >= 16:
        del _DIGESTS[next(iter(_DIGESTS))]
    _DIGESTS[id(by_name)] = (by_name, value)
    return value
