"""Status conditions: Gateway API vocabulary, and the last step that depends on Envoy.

Translation is pure, so it cannot know whether Envoy accepted what it
produced. It writes every ``Programmed`` condition as ``False/Pending``;
:func:`apply_data_plane` then settles them from what the data plane reported
(ACK, NACK, which sockets are bound). ``lastTransitionTime`` is not set here
either: it needs a clock and the previous status (see
:mod:`weir.status_store`).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar, TypeVar, cast

from weir.api.meta import MAX_PARENTS, ObjectKey

# Condition types.
ACCEPTED = "Accepted"
PROGRAMMED = "Programmed"
RESOLVED_REFS = "ResolvedRefs"
CONFLICTED = "Conflicted"
OVERLAPPING_TLS_CONFIG = "OverlappingTLSConfig"
SUPPORTED_VERSION = "SupportedVersion"
INSECURE_FRONTEND_VALIDATION_MODE = "InsecureFrontendValidationMode"

# Reasons (constants of the Gateway API specification).
R_ACCEPTED = "Accepted"
R_PROGRAMMED = "Programmed"
R_RESOLVED_REFS = "ResolvedRefs"
CONFLICTED = "Conflicted"
R_PENDING = "Pending"
R_INVALID = "Invalid"
R_INVALID_PARAMETERS = "InvalidParameters"
R_LISTENERS_NOT_VALID = "ListenersNotValid"
R_UNSUPPORTED_ADDRESS = "UnsupportedAddress"
R_UNSUPPORTED_PROTOCOL = "UnsupportedProtocol"
R_UNSUPPORTED_VALUE = "UnsupportedValue"
R_NOT_ALLOWED = "NotAllowed"
R_PARENT_NOT_ACCEPTED = "ParentNotAccepted"
R_INVALID_ROUTE_KINDS = "InvalidRouteKinds"
R_NO_MATCHING_PARENT = "NoMatchingParent"
R_NOT_ALLOWED_BY_LISTENERS = "NotAllowedByListeners"
R_NO_MATCHING_LISTENER_HOSTNAME = "NoMatchingListenerHostname"
R_BACKEND_NOT_FOUND = "BackendNotFound"
R_INVALID_KIND = "InvalidKind"
R_REF_NOT_PERMITTED = "RefNotPermitted"
R_NO_VALID_CA_CERTIFICATE = "NoValidCACertificate"
R_INVALID_CA_CERTIFICATE_REF = "InvalidCACertificateRef"
R_INVALID_CA_CERTIFICATE_KIND = "InvalidCACertificateKind"
R_CONFIGURATION_CHANGED = "ConfigurationChanged"
R_INVALID_CLIENT_CERTIFICATE_REF = "InvalidClientCertificateRef"
R_ADDRESS_NOT_ASSIGNED = "AddressNotAssigned"
R_ADDRESS_NOT_USABLE = "AddressNotUsable"
R_PORT_UNAVAILABLE = "PortUnavailable"
R_PROTOCOL_CONFLICT = "ProtocolConflict"
R_HOSTNAME_CONFLICT = "HostnameConflict"
R_INVALID_CERTIFICATE_REF = "InvalidCertificateRef"
R_OVERLAPPING_HOSTNAMES = "OverlappingHostnames"
R_SUPPORTED_VERSION = "SupportedVersion"
R_CONFLICTED = "Conflicted"

PENDING_MESSAGE = "Waiting for Envoy to accept the configuration and bind the listener"


@dataclass(frozen=True, slots=True)
class Condition:
    """One status condition as translation decides it (without ``lastTransitionTime``).

    Frozen: a condition is a value, made once and never modified; it becomes
    the Kubernetes shape (:meth:`as_dict`) only where a status is written.
    """

    type: str
    ok: bool
    reason: str
    message: str
    generation: int

    def as_dict(self) -> dict[str, Any]:
        """The condition as ``status.conditions[]`` holds it."""
        return {
            "type": self.type,
            "status": "True" if self.ok else "False",
            "reason": self.reason,
            "message": self.message,
            "observedGeneration": self.generation,
        }


def condition(kind: str, ok: bool, reason: str, message: str, generation: int) -> Condition:
    """A condition of type ``kind`` (see :class:`Condition`)."""
    return Condition(kind, ok, reason, message, generation)


def conditions_data(conditions: Iterable[Condition]) -> list[dict[str, Any]]:
    """``conditions`` as a ``status.conditions`` list."""
    return [c.as_dict() for c in conditions]


_T = TypeVar("_T")

#: A reference (``parentRef``, ``ancestorRef``) as frozen ``(field, value)`` pairs, in field order.
Ref = tuple[tuple[str, Any], ...]


def ref_of(data: Mapping[str, Any]) -> Ref:
    """``data`` (a reference of strings and numbers) as a :data:`Ref`."""
    return tuple(data.items())


@dataclass(frozen=True, slots=True)
class ParentStatus:
    """One entry of a route's (or a v1.6 XBackend's) ``status.parents``."""

    #: The key the reference is written under.
    REF_KEY: ClassVar[str] = "parentRef"

    ref: Ref
    controller_name: str
    conditions: tuple[Condition, ...]


@dataclass(frozen=True, slots=True)
class AncestorStatus(ParentStatus):
    """One entry of a policy's (or a main-shaped XBackend's) ``status.ancestors``."""

    REF_KEY: ClassVar[str] = "ancestorRef"


class StatusInterner:
    """Turns typed statuses into dicts, equal values into one object.

    Statuses are values, never modified once written, and most objects' are
    alike: the 2,500 routes of one listener have the same ``parentRef`` and
    conditions, and so the same entry and the same ``status``. At 10,000
    routes separate copies took 6 MiB. One interner belongs to one
    translation pass (it rides on the pass's
    :class:`~weir.translate.backends.BackendResolver`, which every route kind
    receives); it holds nothing between passes and no module holds one.
    """

    def __init__(self) -> None:
        self._made: dict[Hashable, Any] = {}

    def condition(self, cond: Condition) -> dict[str, Any]:
        return self._intern(cond, cond.as_dict)

    def ref(self, ref: Ref) -> dict[str, Any]:
        return self._intern(("ref", ref), lambda: dict(ref))

    def entry(self, entry: ParentStatus) -> dict[str, Any]:
        return self._intern(entry, lambda: self._entry_data(entry))

    def entries(self, entries: tuple[ParentStatus, ...]) -> list[dict[str, Any]]:
        return self._intern(("entries", entries), lambda: [self.entry(e) for e in entries])

    def status(self, key: str, entries: tuple[ParentStatus, ...]) -> dict[str, Any]:
        return self._intern(("status", key, entries), lambda: {key: self.entries(entries)})

    def _entry_data(self, entry: ParentStatus) -> dict[str, Any]:
        return {
            entry.REF_KEY: self.ref(entry.ref),
            "controllerName": entry.controller_name,
            "conditions": self._intern(
                ("conditions", entry.conditions), lambda: [self.condition(c) for c in entry.conditions]
            ),
        }

    def one_of(self, value: _T) -> _T:
        """The first value equal to ``value`` this pass saw (for any hashable frozen value)."""
        return self._intern(("value", value), lambda: value)

    def _intern(self, key: Hashable, make: Callable[[], _T]) -> _T:
        found = self._made.get(key)
        if found is None:
            found = self._made[key] = make()
        return cast("_T", found)


def entry_data(entry: ParentStatus) -> dict[str, Any]:
    """``entry`` as written, made afresh (for entries that are one of a kind)."""
    return {
        entry.REF_KEY: dict(entry.ref),
        "controllerName": entry.controller_name,
        "conditions": conditions_data(entry.conditions),
    }


def parents_status(
    previous: Mapping[str, Any] | None,
    controller_name: str,
    ours: Sequence[ParentStatus],
    *,
    key: str = "parents",
    limit: int = MAX_PARENTS,
    interner: StatusInterner | None = None,
) -> dict[str, Any] | None:
    """``{key: [...]}``: other controllers' entries as written, then weir's ``ours``.

    This is where typed statuses become dicts. ``key`` is ``parents``
    (routes, XBackends) or ``ancestors`` (policies). At most ``limit``
    entries. ``None`` when there is nothing to write: weir has no entry now
    and had none before. When weir had entries and now has none, the result
    removes them. With an ``interner``, equal results are one object (when
    no other controller wrote entries); without, every part is made afresh
    (for entries that are one of a kind, where sharing would only fill the
    table).
    """
    written = _written_entries(previous, key)
    others = [p for p in written if p.get("controllerName") != controller_name]
    if not ours and len(others) == len(written):
        return None
    if interner is None:
        return {key: (others + [entry_data(e) for e in ours])[:limit]}
    if not others:
        return interner.status(key, tuple(ours[:limit]))
    mine = [interner.entry(e) for e in ours]
    return {key: (others + mine)[:limit]}


_REF_FIELD = MappingProxyType({"parents": "parentRef", "ancestors": "ancestorRef"})


def _written_entries(previous: Mapping[str, Any] | None, key: str) -> list[dict[str, Any]]:
    """The well-formed entries of ``previous[key]`` as written; anything else there is ignored.

    ``status`` is read from manifests as plain data, unchecked (weir never
    reads its own back): ``status: {parents: 5}`` passed validation and made
    translation raise. An entry is kept only if it has the shape the API
    gives it (a string ``controllerName``, an object ``parentRef`` or
    ``ancestorRef``, a list of condition objects) and is plain JSON data,
    as the status store and an API server expect.
    """
    entries = previous.get(key) if isinstance(previous, Mapping) else None
    if not isinstance(entries, list):
        return []
    ref = _REF_FIELD.get(key, "parentRef")
    return [entry for entry in entries if _well_formed(entry, ref)]


def _well_formed(entry: Any, ref: str) -> bool:
    if not isinstance(entry, dict) or not isinstance(entry.get("controllerName"), str):
        return False
    conditions = entry.get("conditions", [])
    if not isinstance(entry.get(ref), dict) or not isinstance(conditions, list):
        return False
    if not all(isinstance(c, dict) for c in conditions):
        return False
    try:
        json.dumps(entry, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return False
    return True


@dataclass(frozen=True)
class DataPlaneState:
    """What the data plane has reported about the configuration being judged.

    ``accepted``: Envoy ACKed every resource type of this configuration.
    ``rejection``: Envoy's message when it NACKed something (``accepted`` is
    then False). ``rejected_sockets``: the listener sockets that message
    names; empty when it names none, and then the rejection concerns every
    listener. ``unusable_sockets``: those of them rejected because their
    address cannot be bound at all (not an address of this host; see
    :func:`attribute_rejection`). ``bound``: the ``(address, port)`` sockets
    Envoy is accepting connections on.
    """

    accepted: bool = False
    rejection: str | None = None
    rejected_sockets: frozenset[tuple[str, int]] = field(default_factory=frozenset)
    unusable_sockets: frozenset[tuple[str, int]] = field(default_factory=frozenset)
    bound: frozenset[tuple[str, int]] = field(default_factory=frozenset)
    #: weir asks Envoy again, with back-off, for what it rejected (a listener whose port was busy).
    retrying: bool = False

    @property
    def rejection_text(self) -> str:
        """Envoy's message, and whether weir tries again."""
        text = (self.rejection or "").rstrip()
        return text + ("; weir tries again with back-off until Envoy accepts it" if self.retrying else "")

    def rejects(self, sockets: tuple[tuple[str, int], ...]) -> bool:
        """Whether the rejection concerns a listener served on ``sockets``."""
        if self.rejection is None:
            return False
        return not self.rejected_sockets or any(s in self.rejected_sockets for s in sockets)


#: What the operating system says (``EADDRNOTAVAIL``) when a socket's address is none of the host's.
_ADDRESS_NOT_AVAILABLE = "cannot assign requested address"


def attribute_rejection(
    rejection: str | None, listeners: Mapping[str, tuple[str, int]]
) -> tuple[frozenset[tuple[str, int]], frozenset[tuple[str, int]]]:
    """The sockets an Envoy NACK names, and those of them whose address cannot be used.

    ``listeners``: IR listener name (``ADDRESS:PORT``) → socket. Envoy names
    each listener it could not add, then why, one after the other ("Error
    adding/updating listener(s) 192.0.2.10:80: cannot bind '192.0.2.10:80':
    Cannot assign requested address, 127.0.0.1:8080: cannot bind ...
    Address already in use"): a listener's part of the text runs from each
    mention of its name to the next mention of any listener's.
    """
    if not rejection:
        return frozenset(), frozenset()
    mentions = sorted(
        (match.start(), match.end(), socket)
        for name, socket in listeners.items()
        for match in re.finditer(rf"(?<![\w.:\[]){re.escape(name)}(?![\w.])", rejection)
    )
    named: set[tuple[str, int]] = set()
    unusable: set[tuple[str, int]] = set()
    for i, (_, end, socket) in enumerate(mentions):
        named.add(socket)
        until = mentions[i + 1][0] if i + 1 < len(mentions) else len(rejection)
        if _ADDRESS_NOT_AVAILABLE in rejection[end:until].lower():
            unusable.add(socket)
    return frozenset(named), frozenset(unusable)


def apply_data_plane(
    statuses: Mapping[ObjectKey, dict[str, Any]],
    gateway_sockets: Mapping[ObjectKey, Mapping[str, tuple[tuple[str, int], ...]]],
    state: DataPlaneState,
) -> dict[ObjectKey, dict[str, Any]]:
    """Settle every Gateway's ``Programmed`` conditions from ``state``.

    ``gateway_sockets`` maps a Gateway to, per listener name, the sockets
    that listener needs; it names only the listeners in the data plane
    (accepted and usable: not, say, an HTTPS listener whose certificate does
    not resolve), the others keep the conditions translation gave them. A
    listener is programmed when Envoy answered for the configuration without
    rejecting that listener and all its sockets are bound (Envoy applies the
    listeners it accepts even when it rejects another one). The Gateway is
    programmed when every listener in the data plane is; it is ``Invalid``
    when Envoy rejected one of its listeners, or rejected something it could
    not attribute; with no listener in the data plane it keeps translation's
    ``Programmed``. When every socket of a Gateway that Envoy rejected was
    rejected because its address is not one of the host's, the Gateway is
    ``AddressNotUsable`` instead, and those addresses are left out of its
    ``status.addresses``. Other objects pass through unchanged. The input is
    not modified.
    """
    answered = state.accepted or state.rejection is not None
    out: dict[ObjectKey, dict[str, Any]] = dict(statuses)
    for key, sockets_by_listener in gateway_sockets.items():
        status = statuses.get(key)
        if status is None or not any(sockets_by_listener.values()):
            continue  # nothing of it is in the data plane: translation said why
        status = copy.deepcopy(status)
        programmed_listeners = 0
        waiting = rejected = False
        own = {s for sockets in sockets_by_listener.values() for s in sockets}
        refused = own & state.rejected_sockets
        unusable = sorted({a for a, _ in own & state.unusable_sockets})
        for listener in status.get("listeners", []):
            conds = listener["conditions"]
            sockets = sockets_by_listener.get(listener["name"], ())
            if not _is_true(conds, ACCEPTED) or not sockets:
                continue
            generation = _generation(conds)
            missing = [s for s in sockets if s not in state.bound]
            if state.rejects(sockets):
                rejected = True
                message = f"Envoy rejected the configuration: {state.rejection_text}"
                new = condition(PROGRAMMED, False, R_INVALID, message, generation).as_dict()
            elif answered and not missing:
                programmed_listeners += 1
                new = condition(
                    PROGRAMMED, True, R_PROGRAMMED, "Envoy is serving this listener", generation
                ).as_dict()
            else:
                waiting = True
                where = ", ".join(f"{a}:{p}" for a, p in missing) or "the listener"
                new = condition(
                    PROGRAMMED, False, R_PENDING, f"Waiting for Envoy to bind {where}", generation
                ).as_dict()
            _replace(conds, new)
        conds = status["conditions"]
        generation = _generation(conds)
        if rejected and unusable and refused <= state.unusable_sockets:
            message = _unusable_message(unusable, served=len(unusable) < len({a for a, _ in own}))
            new = condition(PROGRAMMED, False, R_ADDRESS_NOT_USABLE, message, generation).as_dict()
        elif rejected or (state.rejection is not None and not state.rejected_sockets):
            message = (
                "Envoy rejected the configuration; the previous configuration keeps serving: "
                f"{state.rejection_text}"
            )
            new = condition(PROGRAMMED, False, R_INVALID, message, generation).as_dict()
        elif programmed_listeners and not waiting:
            new = condition(
                PROGRAMMED, True, R_PROGRAMMED, "Envoy is serving every listener", generation
            ).as_dict()
        elif _is_true(conds, ACCEPTED):
            new = condition(PROGRAMMED, False, R_PENDING, PENDING_MESSAGE, generation).as_dict()
        else:
            continue
        _replace(conds, new)
        if unusable and "addresses" in status:
            status["addresses"] = [a for a in status["addresses"] if a.get("value") not in unusable]
        out[key] = status
    return out


def _unusable_message(addresses: list[str], *, served: bool) -> str:
    """Which addresses cannot be used, and how to fix it (the Gateway API's SHOULD for the reason)."""
    listed = ", ".join(addresses)
    message = (
        f"Envoy cannot listen on {listed} (Cannot assign requested address): not an address of this "
        "host; assign it to one of the host's network interfaces, or remove it from spec.addresses"
    )
    return message + ("; the Gateway's other addresses are served" if served else "")


def _is_true(conds: list[dict[str, Any]], kind: str) -> bool:
    return any(c["type"] == kind and c["status"] == "True" for c in conds)


def _generation(conds: list[dict[str, Any]]) -> int:
    return int(conds[0]["observedGeneration"]) if conds else 1


def _replace(conds: list[dict[str, Any]], new: dict[str, Any]) -> None:
    for i, cond in enumerate(conds):
        if cond["type"] == new["type"]:
            conds[i] = new
            return
    conds.append(new)
