"""The unit of configuration handed from :mod:`weir.xds.build` to :mod:`weir.xds.server`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from google.protobuf.message import Message

LISTENER = "type.googleapis.com/envoy.config.listener.v3.Listener"
ROUTE = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
CLUSTER = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
SECRET = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"

#: The order in which a changed snapshot is pushed: what a resource refers to
#: goes before the resource (make before break).
PUSH_ORDER = (SECRET, CLUSTER, LISTENER, ROUTE)

#: Types Envoy subscribes to with a wildcard (it wants all of them); the
#: others it asks for by name.
WILDCARD_TYPES = frozenset({LISTENER, CLUSTER})


@dataclass(frozen=True)
class Snapshot:
    """A complete, versioned set of Envoy resources.

    ``resources`` maps a type URL (one of the constants above) to the
    resources of that type by name. Every type in :data:`PUSH_ORDER` is
    present, possibly empty. ``version`` is opaque to Envoy and changes
    whenever any resource changes; the server sends, per type, only what
    changed since the version Envoy last acknowledged.
    """

    version: str
    resources: Mapping[str, Mapping[str, Message]] = field(default_factory=dict)

    def of_type(self, type_url: str) -> Mapping[str, Message]:
        return self.resources.get(type_url, {})
