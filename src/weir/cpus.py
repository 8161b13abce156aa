"""How many CPUs this process may actually use: the default number of Envoy workers.

``os.cpu_count()`` counts the machine's CPUs. A process may be held to fewer
by its CPU affinity (``taskset``, cpusets, a Kubernetes static CPU policy)
and by a CFS bandwidth quota (a container's CPU limit: cgroup v2
``cpu.max``, v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``). More Envoy
workers than that fight over the same CPU time; fewer leave CPUs idle (on a
32-CPU node a fixed 2 used 2).

:func:`usable_cpus` is the smaller of the affinity mask's size and the
quota in whole CPUs, rounded down (1.5 CPUs: 1 worker, leaving the half to
Envoy's main thread and weir, which share the quota), never below 1. The
quota is the tightest along the process's cgroup and its ancestors, as the
kernel applies each of them. The files are read from ``proc`` and
``cgroup_root`` so tests can point them at a fake tree.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path


def usable_cpus(proc: str | Path = "/proc/self", cgroup_root: str | Path = "/sys/fs/cgroup") -> int:
    """The number of CPUs this process may use (see the module's docstring)."""
    try:
        count = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        count = os.cpu_count() or 1
    quota = cgroup_cpu_quota(Path(proc), Path(cgroup_root))
    if quota is not None:
        count = min(count, max(1, math.floor(quota)))
    return max(1, count)


def cgroup_cpu_quota(proc: Path, cgroup_root: Path) -> float | None:
    """The CFS quota of the process's cgroups in CPUs (the tightest); ``None``: unlimited or unknown."""
    try:
        lines = (proc / "cgroup").read_text().splitlines()
    except OSError:
        return None
    quotas: list[float] = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":  # cgroup v2: "0::/path"
            quotas.extend(_along(cgroup_root, path, _v2_quota))
        elif "cpu" in controllers.split(","):  # cgroup v1: "4:cpu,cpuacct:/path"
            for mount in (cgroup_root / controllers, cgroup_root / "cpu", cgroup_root / "cpu,cpuacct"):
                if mount.is_dir():
                    quotas.extend(_along(mount, path, _v1_quota))
                    break
    return min(quotas) if quotas else None


def _along(mount: Path, path: str, read: Callable[[Path], float | None]) -> list[float]:
    """The quotas from ``mount/path`` up to ``mount``.

    Inside a cgroup namespace the process's path reads ``/`` while ``mount``
    is its own cgroup; when ``mount/path`` does not exist (a path from the
    host's view, with the container's cgroup mounted at the root), the
    mount's own files are what apply.
    """
    directory = mount / path.lstrip("/")
    if not directory.is_dir():
        directory = mount
    found: list[float] = []
    while True:
        quota = read(directory)
        if quota is not None:
            found.append(quota)
        if directory == mount or mount not in directory.parents:
            return found
        directory = directory.parent


def _v2_quota(directory: Path) -> float | None:
    """``cpu.max``: ``"max 100000"`` (no limit) or ``"QUOTA PERIOD"`` in microseconds."""
    try:
        fields = (directory / "cpu.max").read_text().split()
    except OSError:
        return None
    if len(fields) != 2 or fields[0] == "max":
        return None
    return _ratio(fields[0], fields[1])


def _v1_quota(directory: Path) -> float | None:
    """``cpu.cfs_quota_us`` (``-1``: no limit) over ``cpu.cfs_period_us``."""
    try:
        quota = (directory / "cpu.cfs_quota_us").read_text().strip()
        period = (directory / "cpu.cfs_period_us").read_text().strip()
    except OSError:
        return None
    return _ratio(quota, period)


def _ratio(quota: str, period: str) -> float | None:
    try:
        q, p = int(quota), int(period)
    except ValueError:
        return None
    return q / p if q > 0 and p > 0 else None
