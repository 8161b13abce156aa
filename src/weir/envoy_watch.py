"""Whether Envoy serves what it was told: listeners it could not bind, listeners it stopped serving.

Two faults Envoy does not recover from by itself (issue 13):

* It refuses a listener whose port is in use, or whose address is not
  (yet) one of the host's, and never tries again. That is the host's state,
  not a fault of the configuration: :func:`transient_rejection` says which
  rejections to send again, :class:`Backoff` when.
* Once its listeners are stopped (``POST /drain_listeners`` on its admin
  interface), Envoy refuses connections and silently ignores every new
  listener, while it still ACKs them. :func:`not_serving` notices it with
  two small admin reads; the controller then restarts that Envoy.

The controller (:mod:`weir.controller`) owns the state these read and acts
on the answers.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Collection

from weir.envoy_admin import EnvoyAdmin
from weir.xds.acks import AckResult, AckStatus
from weir.xds.snapshot import LISTENER

__all__ = [
    "RETRY_FIRST_S",
    "RETRY_MAX_S",
    "SERVING_CHECK_S",
    "Backoff",
    "active_listeners",
    "not_serving",
    "transient_rejection",
]

log = logging.getLogger("weir.controller")

#: Why Envoy refuses a listener when the host's state, not the configuration, is at fault: the
#: port is in use (``EADDRINUSE``), or the address is not (yet) one of the host's (``EADDRNOTAVAIL``).
TRANSIENT_BIND_ERRORS = ("address already in use", "cannot assign requested address")
#: First and longest wait before asking Envoy again for a listener it could not bind.
RETRY_FIRST_S = 0.5
RETRY_MAX_S = 5.0
#: How often Envoy's listeners are compared with what it accepted (two small admin reads).
SERVING_CHECK_S = 2.0


def transient_rejection(result: AckResult) -> bool:
    """Whether ``result`` is Envoy refusing listeners for a reason that may pass by itself."""
    return (
        result.status is AckStatus.NACKED
        and result.type_url == LISTENER
        and any(cause in result.message.lower() for cause in TRANSIENT_BIND_ERRORS)
    )


class Backoff:
    """``action`` run once after a delay that doubles at each :meth:`schedule`, until :meth:`reset`."""

    def __init__(self, action: Callable[[], None], first: float, most: float) -> None:
        self._action = action
        self._first, self._most = first, most
        self._delay = first
        self._handle: asyncio.TimerHandle | None = None

    @property
    def pending(self) -> bool:
        return self._handle is not None

    def schedule(self) -> None:
        """Run the action after the current delay (unless already scheduled); double the delay."""
        if self._handle is not None:
            return
        delay = self._delay
        self._delay = min(delay * 2, self._most)
        log.info("asking Envoy again in %.1f s for the listeners it could not bind", delay)
        self._handle = asyncio.get_running_loop().call_later(delay, self._run)

    def reset(self) -> None:
        """Cancel what is scheduled; the next delay is the first again."""
        self._delay = self._first
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _run(self) -> None:
        self._handle = None
        self._action()


async def active_listeners(admin: EnvoyAdmin) -> set[str]:
    """Names of the listeners Envoy is serving (admin ``/listeners``); empty if it does not answer."""
    try:
        code, body = await admin.get("/listeners?format=json")
        if code != 200:
            return set()
        data = json.loads(body)
        return {str(entry["name"]) for entry in data.get("listener_statuses", [])}
    except (OSError, TimeoutError, ValueError, KeyError, TypeError):
        return set()


async def not_serving(admin: EnvoyAdmin, accepted: Collection[str]) -> str | None:
    """What Envoy fails to serve of the listeners ``accepted`` (names it ACKed), or ``None``.

    ``listener_manager.listener_stopped`` says its listeners were stopped;
    ``/listeners`` lacking an accepted name says one was never added. When
    Envoy does not answer nothing is concluded (a crash is supervision's
    business).
    """
    try:
        code, body = await admin.get(r"/stats?filter=^listener_manager\.listener_stopped$")
        stopped = int(body.rpartition(":")[2]) if code == 200 and body.strip() else 0
    except (OSError, TimeoutError, ValueError):
        return None
    if stopped:
        return "its listeners were stopped through its admin interface (drain_listeners)"
    active = await active_listeners(admin)
    missing = sorted(set(accepted) - active) if active else []
    if missing:
        return f"listeners {', '.join(missing)} are missing from Envoy's active listeners"
    return None
