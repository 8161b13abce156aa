"""Leader election with a ``coordination.k8s.io/v1`` Lease, as client-go's leaderelection does it.

Every replica translates and serves its own Envoy; only the leader writes
status. :class:`LeaderElector` decides who that is:

* **Acquire.** The Lease is free when it has no holder, or when its record
  (holder, ``renewTime``, ``leaseTransitions``) has not changed for
  ``lease_duration_s`` *as observed by this replica's monotonic clock*
  (clocks of different machines are never compared). Taking it writes
  ``holderIdentity``, ``acquireTime``, ``renewTime``, ``leaseDurationSeconds``
  and ``leaseTransitions + 1``, guarded by ``resourceVersion``: of two
  replicas racing, the API server lets one write (the other gets 409).
* **Renew** every ``retry_period_s`` while leading. If renewing has not
  succeeded for ``renew_deadline_s`` (shorter than the lease duration, so
  that the leader gives up before anyone else may take over), or another
  holder is observed, leadership is lost *at once*: :attr:`is_leader` turns
  false by itself when the deadline passes, even if the renewing task is
  stuck, and status writes check it before every request.
* **Release** on a clean stop: the Lease is handed back (no holder), so a
  successor takes over on its next try instead of after the lease duration.

A new leader is announced through ``on_change(True)``; the status writer
then writes the full current status (each object diffed against what the
API server holds).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from weir.providers.kubernetes.api import LEASE, KubeApi, describe, is_transient, status_code
from weir.providers.kubernetes.metrics import KubeMetrics, error_code

__all__ = ["LeaderElector", "LeaseSettings", "election_problem"]

log = logging.getLogger("weir.kubernetes.leader")


@dataclass(frozen=True)
class LeaseSettings:
    """Which Lease, who this replica is, and the timings (defaults: client-go's)."""

    namespace: str
    name: str
    identity: str
    lease_duration_s: float = 15.0
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.retry_period_s < self.renew_deadline_s < self.lease_duration_s:
            raise ValueError(
                "lease timings must satisfy 0 < retry period < renew deadline < lease duration, got "
                f"{self.retry_period_s} < {self.renew_deadline_s} < {self.lease_duration_s}"
            )

    @classmethod
    def scaled(cls, namespace: str, name: str, identity: str, duration_s: float) -> LeaseSettings:
        """Timings in client-go's proportions (15 s / 10 s / 2 s) for a lease of ``duration_s``."""
        return cls(namespace, name, identity, duration_s, duration_s * 2 / 3, duration_s * 2 / 15)


def _micro_time(when: dt.datetime) -> str:
    """A ``MicroTime`` as the API server writes it."""
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def election_problem(settings: LeaseSettings, exc: BaseException) -> str:
    """What is wrong when the Lease cannot be read or written, and how to fix it."""
    where = f"Lease {settings.namespace}/{settings.name}"
    code = status_code(exc)
    text = describe(exc)
    if code == 404:
        return (
            f"{where}: the namespace {settings.namespace!r} does not exist ({text}); create it, or give "
            "--lease-namespace (the default is $POD_NAMESPACE in a pod, else the kubeconfig context's "
            "namespace); status is not written until then"
        )
    if code == 403:
        return (
            f"{where}: not allowed ({text}); grant get, create and update on it (deploy/leader-election.yaml "
            "does, in weir-system, for the Lease weir-leader), or give --lease-namespace and --lease-name "
            "that RBAC allows; status is not written until then"
        )
    return f"{where}: {text}; status is not written until leader election succeeds"


class LeaderElector:
    """Elects this replica or another (see the module docstring).

    :attr:`problem` says why electing fails (the Lease's namespace missing,
    RBAC refusing, the API server away), ``None`` while it works;
    ``on_problem`` is called when it changes. :attr:`holder` is the holder
    last seen in the Lease.
    """

    def __init__(
        self,
        api: KubeApi,
        settings: LeaseSettings,
        on_change: Callable[[bool], None] = lambda _: None,
        on_problem: Callable[[], None] = lambda: None,
        metrics: KubeMetrics | None = None,
    ) -> None:
        self.settings = settings
        self._metrics = metrics or KubeMetrics()
        self._api = api
        self._on_change = on_change
        self._on_problem = on_problem
        self.problem: str | None = None
        self.problem_since: float | None = None  # monotonic time the current series of failures began
        self.holder: str | None = None
        self._leading = False
        self._renewed_at = 0.0  # monotonic time of the last successful acquire or renew
        self._observed: tuple[Any, ...] | None = None  # the Lease record last seen
        self._observed_at = 0.0  # monotonic time it was first seen
        self._expires_at: float | None = None  # when another holder's lease runs out, as observed
        self.transitions = 0  # how many times this replica became leader

    @property
    def is_leader(self) -> bool:
        """True while this replica holds the Lease and renewed it within the renew deadline."""
        if not self._leading:
            return False
        if time.monotonic() - self._renewed_at > self.settings.renew_deadline_s:
            self._lose("could not renew the Lease within the renew deadline")
            return False
        return True

    async def run(self) -> None:
        """Try to acquire, then renew, every retry period, until cancelled."""
        s = self.settings
        log.info("leader election: Lease %s/%s as %s", s.namespace, s.name, s.identity)
        while True:
            try:
                if await self._try_acquire_or_renew():
                    self._win()
                elif self._leading:
                    self._lose("another replica holds the Lease")
                self._failed(None)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._metrics.api_errors.inc(error_code(exc))
                self._failed(exc)
            self.is_leader  # noqa: B018 - loses leadership when the renew deadline has passed
            await asyncio.sleep(self._next_try())

    async def release(self) -> None:
        """Hand the Lease back if this replica holds it (on a clean stop)."""
        if not self._leading:
            return
        self._lose("stopping")
        s = self.settings
        try:
            lease = await self._api.get(LEASE, s.namespace, s.name)
            spec = (lease or {}).get("spec") or {}
            if lease is None or spec.get("holderIdentity") != s.identity:
                return
            now = _micro_time(dt.datetime.now(dt.UTC))
            lease["spec"] = {**spec, "holderIdentity": None, "leaseDurationSeconds": 1, "renewTime": now}
            await self._api.replace(LEASE, lease)
            log.info("leader election: released Lease %s/%s", s.namespace, s.name)
        except Exception as exc:
            log.warning(
                "leader election: could not release Lease %s/%s: %s", s.namespace, s.name, describe(exc)
            )

    def _failed(self, exc: BaseException | None) -> None:
        """Record the outcome of a try: the problem, logged once per kind of failure (an error:
        nothing writes status while it lasts), and once when it is over."""
        problem = election_problem(self.settings, exc) if exc is not None else None
        if problem == self.problem:
            return
        if problem is None:
            log.info("leader election works again")
            self.problem_since = None
        else:
            # The API server away is a warning (it says so once for every watch too); a Lease that
            # cannot be had while the server answers is an error: it will not mend by itself.
            level = logging.WARNING if exc is not None and is_transient(exc) else logging.ERROR
            log.log(level, "leader election: %s", problem)
            if self.problem_since is None:
                self.problem_since = time.monotonic()
        self.problem = problem
        self._on_problem()

    def _next_try(self) -> float:
        """A retry period, or less when another holder's lease expires sooner (take over on time)."""
        period = self.settings.retry_period_s
        if self._leading or self._expires_at is None:
            return period
        return min(period, max(0.0, self._expires_at - time.monotonic()) + 0.01)

    def _win(self) -> None:
        self._renewed_at = time.monotonic()
        if not self._leading:
            self._leading = True
            self.transitions += 1
            self._metrics.leader_transitions.inc()
            log.info(
                "leader election: this replica (%s) is the leader; it writes status", self.settings.identity
            )
            self._on_change(True)

    def _lose(self, why: str) -> None:
        if self._leading:
            self._leading = False
            # Losing the Lease is a warning; handing it back on a clean stop is what should happen.
            level = logging.INFO if why == "stopping" else logging.WARNING
            log.log(level, "leader election: no longer the leader (%s); status writes stop", why)
            self._on_change(False)

    def _observe(self, spec: dict[str, Any]) -> None:
        record = (
            spec.get("holderIdentity"),
            spec.get("renewTime"),
            spec.get("acquireTime"),
            spec.get("leaseTransitions"),
            spec.get("leaseDurationSeconds"),
        )
        if record != self._observed:
            self._observed = record
            self._observed_at = time.monotonic()

    async def _try_acquire_or_renew(self) -> bool:
        s = self.settings
        now = _micro_time(dt.datetime.now(dt.UTC))
        duration = max(1, math.ceil(s.lease_duration_s))  # whole seconds in the Lease, never shorter
        lease = await self._api.get(LEASE, s.namespace, s.name)
        spec: dict[str, Any]
        if lease is None:
            spec = {
                "holderIdentity": s.identity,
                "leaseDurationSeconds": duration,
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": 0,
            }
            body = {"metadata": {"name": s.name, "namespace": s.namespace}, "spec": spec}
            try:
                await self._api.create(LEASE, body)
            except Exception as exc:
                if status_code(exc) == 409:
                    return False  # another replica created it first
                raise
            self._observe(spec)
            self.holder = s.identity
            return True
        spec = dict(lease.get("spec") or {})
        self._observe(spec)
        holder = spec.get("holderIdentity")
        self.holder = str(holder) if holder else None
        held_for = float(spec.get("leaseDurationSeconds") or s.lease_duration_s)
        self._expires_at = self._observed_at + held_for if holder and holder != s.identity else None
        if self._expires_at is not None and time.monotonic() < self._expires_at:
            return False  # held by another replica, and renewed recently enough
        if holder == s.identity:
            spec.update(renewTime=now, leaseDurationSeconds=duration)
        else:
            spec.update(
                holderIdentity=s.identity,
                leaseDurationSeconds=duration,
                acquireTime=now,
                renewTime=now,
                leaseTransitions=int(spec.get("leaseTransitions") or 0) + 1,
            )
        lease["spec"] = spec
        try:
            await self._api.replace(LEASE, lease)
        except Exception as exc:
            if status_code(exc) == 409:
                return False  # someone else wrote it since we read it
            raise
        self._observe(spec)
        self.holder = s.identity
        return True
