"""What Envoy accepted: the ADS server's ACK/NACK bookkeeping, and immutable views of it.

:class:`ServerState` is what :meth:`weir.xds.server.AdsServer.state` returns;
the controller decides ``Programmed`` from :meth:`ServerState.ack_result`.
:class:`Subscription` and :class:`Push` are the server's own mutable records
of one type on one Envoy stream; :meth:`Subscription.view` is what leaves it.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from weir.xds.snapshot import PUSH_ORDER, WILDCARD_TYPES, Resource

# --------------------------------------------------------------------------


class Outcome(enum.Enum):
    """What Envoy answered to the last response of one type on one stream."""

    PENDING = "Pending"
    ACKED = "Acked"
    NACKED = "Nacked"


@dataclass(frozen=True, slots=True)
class Nack:
    """Envoy rejected ``version`` of one type; ``message`` is Envoy's own text."""

    type_url: str
    version: str
    message: str
    node_id: str


@dataclass(frozen=True, slots=True)
class NodeTypeState:
    """One type on one Envoy's stream."""

    type_url: str
    #: Envoy asked for this type (for named types: for at least one name).
    subscribed: bool
    #: Names Envoy asked for; empty for wildcard types.
    resource_names: frozenset[str]
    #: Version of the last response sent, ``None`` before the first.
    sent_version: str | None
    #: The newest snapshot version whose resources equal the last response's.
    synced_version: str | None
    #: Answer to the last response, ``None`` before the first.
    outcome: Outcome | None
    #: Last version Envoy acknowledged on this stream.
    acked_version: str | None
    #: Last rejection on this stream, cleared by a later ACK.
    nack: Nack | None


@dataclass(frozen=True, slots=True)
class NodeState:
    """One connected Envoy (its newest stream)."""

    node_id: str
    stream_id: int
    peer: str
    connected_since: float
    types: Mapping[str, NodeTypeState]


@dataclass(frozen=True, slots=True)
class TypeState:
    """One type across all Envoys, kept across disconnections."""

    type_url: str
    #: Version of the last response of this type sent to any Envoy.
    sent_version: str | None
    #: Version of the last ACK of this type from any Envoy.
    acked_version: str | None
    #: The last NACK of this type, cleared by a later ACK.
    nack: Nack | None


class AckStatus(enum.Enum):
    ACKED = "Acked"
    NACKED = "Nacked"
    #: Not decided before the timeout (or no Envoy connected).
    TIMEOUT = "Timeout"
    #: Another snapshot replaced this version before it was decided.
    SUPERSEDED = "Superseded"


@dataclass(frozen=True, slots=True)
class AckResult:
    """Whether every Envoy accepted every type of ``version``.

    For ``NACKED``, ``type_url``/``message``/``node_id`` say which type was
    rejected and Envoy's reason; for ``TIMEOUT``, ``message`` says what was
    still awaited.
    """

    version: str
    status: AckStatus
    type_url: str | None = None
    message: str = ""
    node_id: str | None = None

    @property
    def acked(self) -> bool:
        return self.status is AckStatus.ACKED


@dataclass(frozen=True, slots=True)
class ServerState:
    """An immutable summary of the server and of what Envoy accepted."""

    #: Version of the current snapshot, ``None`` before the first.
    snapshot_version: str | None
    #: Connected Envoys by node id.
    nodes: Mapping[str, NodeState]
    #: Per type URL (every type of :data:`PUSH_ORDER`), across Envoys.
    types: Mapping[str, TypeState]
    #: Total number of streams opened since the server started.
    streams_opened: int = 0

    @property
    def connected(self) -> bool:
        return bool(self.nodes)

    def ack_result(self, version: str) -> AckResult | None:
        """The decided outcome of ``version``, or ``None`` while undecided."""
        result, _ = self._evaluate(version)
        return result

    def pending_reason(self, version: str) -> str:
        """Why ``version`` is not decided yet (empty when it is)."""
        _, reason = self._evaluate(version)
        return reason

    def _evaluate(self, version: str) -> tuple[AckResult | None, str]:
        if self.snapshot_version != version:
            return (
                AckResult(
                    version,
                    AckStatus.SUPERSEDED,
                    message=f"snapshot {self.snapshot_version!r} replaced it",
                ),
                "",
            )
        if not self.nodes:
            return None, "no Envoy is connected"
        reason = ""
        for node in self.nodes.values():
            for type_url in PUSH_ORDER:
                ts = node.types.get(type_url)
                active = ts is not None and ts.subscribed
                if ts is None or not active:
                    if type_url in WILDCARD_TYPES and not reason:
                        reason = f"{node.node_id} has not subscribed to {short_type_name(type_url)}"
                    continue
                if ts.synced_version != version:
                    reason = reason or f"{short_type_name(type_url)} not yet sent to {node.node_id}"
                    continue
                if ts.outcome is Outcome.NACKED:
                    message = ts.nack.message if ts.nack is not None else ""
                    return (
                        AckResult(
                            version,
                            AckStatus.NACKED,
                            type_url=type_url,
                            message=message,
                            node_id=node.node_id,
                        ),
                        "",
                    )
                if ts.outcome is not Outcome.ACKED and not reason:
                    reason = f"waiting for {node.node_id} to answer {short_type_name(type_url)}"
        if reason:
            return None, reason
        return AckResult(version, AckStatus.ACKED), ""


# --------------------------------------------------------------------------
# Mutable bookkeeping of the ADS server, per stream (weir.xds.server only)
# --------------------------------------------------------------------------


@dataclass(slots=True)
class Push:
    """One response on one stream, until Envoy answers it."""

    nonce: str
    version: str
    #: What was sent, by name; the names in ``fallbacks`` went in their last
    #: accepted version instead of the current one (with the rejection why).
    resources: dict[str, Resource]
    fallbacks: dict[str, Nack]
    removed: tuple[str, ...]


@dataclass(slots=True)
class Subscription:
    """One type on one stream."""

    type_url: str
    wildcard: bool
    #: Envoy sent a first request for this type on this stream.
    subscribed: bool = False
    #: Names asked for (named types only).
    names: set[str] = field(default_factory=set)
    #: Name → version of each resource Envoy has, or was sent last.
    known: dict[str, str] = field(default_factory=dict)
    #: Responses not answered yet, by nonce, oldest first.
    pending: dict[str, Push] = field(default_factory=dict)
    #: Resources Envoy may not hold in the version last sent: rejected, or
    #: sent in their last accepted version; cleared by an ACK carrying them.
    suspects: dict[str, Nack] = field(default_factory=dict)
    #: A response was sent on this stream.
    responded: bool = False
    #: Envoy answered (ACK or NACK) a response on this stream.
    answered: bool = False
    sent_version: str | None = None
    synced_version: str | None = None
    #: The snapshot's mapping of this type when it was last synced (unchanged types are the
    #: same mapping from one snapshot to the next: nothing to compare).
    synced_resources: Mapping[str, Resource] | None = None
    acked_version: str | None = None
    nack: Nack | None = None

    @property
    def active(self) -> bool:
        return self.subscribed and (self.wildcard or bool(self.names))

    @property
    def outcome(self) -> Outcome | None:
        if self.pending:
            return Outcome.PENDING
        if not self.answered:
            return None
        return Outcome.NACKED if self.suspects else Outcome.ACKED

    def view(self) -> NodeTypeState:
        return NodeTypeState(
            type_url=self.type_url,
            subscribed=self.active,
            resource_names=frozenset(self.names),
            sent_version=self.sent_version,
            synced_version=self.synced_version,
            outcome=self.outcome,
            acked_version=self.acked_version,
            nack=self.nack if self.suspects else None,
        )


def short_type_name(type_url: str) -> str:
    return type_url.rsplit(".", 1)[-1]
