"""The provider contract: what the controller needs of a source of Gateway API objects.

A provider (``weir.providers.files``, ``weir.providers.kubernetes``) hands the controller
snapshots of everything it holds, each with the problems found in its input; the optional
protocols below are capabilities the controller discovers at run time (a connection to open,
statuses to write back, state of its own to show). Data moves forward: nothing here lets a
provider see translation or Envoy.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any, Protocol, runtime_checkable

from weir.api.meta import ObjectKey
from weir.loader import Problem
from weir.metrics import MetricFamily
from weir.resources import Resources


class ProviderSnapshot(Protocol):
    """What a provider hands over: the objects, and what is wrong with its input."""

    @property
    def resources(self) -> Resources: ...

    @property
    def problems(self) -> tuple[Problem, ...]: ...


class Provider(Protocol):
    def load(self) -> ProviderSnapshot: ...

    def watch(self) -> AsyncIterator[ProviderSnapshot]: ...


@runtime_checkable
class ManagedProvider(Protocol):
    """A provider with a connection to open before :meth:`Provider.load` and to close at the end."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


@runtime_checkable
class StatusSink(Protocol):
    """A provider that takes the statuses weir publishes somewhere (an API server).

    ``write_status`` gets every status published (with ``lastTransitionTime``),
    each time the controller publishes; it must not block (write in the
    background) nor modify the mapping.
    """

    def write_status(self, statuses: Mapping[ObjectKey, dict[str, Any]]) -> None: ...


@runtime_checkable
class ObservedProvider(Protocol):
    """A provider with state of its own to show: metrics (``collect``, a collector for
    ``/metrics``), a summary for ``/status`` (``describe``), and a reason ``/ready`` should fail
    (``ready_problem``; ``None``: no objection). The Kubernetes provider: leadership, watches."""

    def collect(self) -> Iterable[MetricFamily]: ...

    def describe(self) -> dict[str, Any]: ...

    def ready_problem(self) -> str | None: ...
