"""Envoy's default worker count: the CPUs the process may use, over fake cgroup v1/v2 trees."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from weir.cpus import cgroup_cpu_quota, usable_cpus


def tree(tmp_path: Path, cgroup_line: str, files: dict[str, str]) -> tuple[Path, Path]:
    proc, root = tmp_path / "proc", tmp_path / "cgroup"
    proc.mkdir()
    (proc / "cgroup").write_text(cgroup_line + "\n")
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
    root.mkdir(exist_ok=True)
    return proc, root


@pytest.fixture
def many_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(32)))


def test_v2_quota_of_the_process_cgroup(tmp_path: Path, many_cpus: None) -> None:
    proc, root = tree(tmp_path, "0::/kubepods/pod1/c1", {"kubepods/pod1/c1/cpu.max": "150000 100000"})
    assert cgroup_cpu_quota(proc, root) == 1.5
    assert usable_cpus(proc, root) == 1  # rounded down: the rest is for Envoy's main thread and weir


def test_v2_tightest_ancestor_wins(tmp_path: Path, many_cpus: None) -> None:
    files = {
        "kubepods/cpu.max": "max 100000",
        "kubepods/pod1/cpu.max": "400000 100000",
        "kubepods/pod1/c1/cpu.max": "max 100000",
    }
    proc, root = tree(tmp_path, "0::/kubepods/pod1/c1", files)
    assert usable_cpus(proc, root) == 4


def test_v2_inside_a_cgroup_namespace(tmp_path: Path, many_cpus: None) -> None:
    """The process's path reads ``/`` and its own cgroup is mounted at the root."""
    proc, root = tree(tmp_path, "0::/", {"cpu.max": "200000 100000"})
    assert usable_cpus(proc, root) == 2


def test_v2_host_path_with_the_container_cgroup_at_the_root(tmp_path: Path, many_cpus: None) -> None:
    proc, root = tree(tmp_path, "0::/kubepods/pod1/c1", {"cpu.max": "300000 100000"})
    assert usable_cpus(proc, root) == 3


def test_v2_unlimited(tmp_path: Path, many_cpus: None) -> None:
    proc, root = tree(tmp_path, "0::/user.slice", {"user.slice/cpu.max": "max 100000"})
    assert cgroup_cpu_quota(proc, root) is None
    assert usable_cpus(proc, root) == 32


def test_v1_quota(tmp_path: Path, many_cpus: None) -> None:
    files = {
        "cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "250000",
        "cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000",
    }
    proc, root = tree(tmp_path, "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc", files)
    assert cgroup_cpu_quota(proc, root) == 2.5
    assert usable_cpus(proc, root) == 2


def test_v1_unlimited(tmp_path: Path, many_cpus: None) -> None:
    files = {"cpu/docker/abc/cpu.cfs_quota_us": "-1", "cpu/docker/abc/cpu.cfs_period_us": "100000"}
    proc, root = tree(tmp_path, "4:cpu,cpuacct:/docker/abc", files)
    assert cgroup_cpu_quota(proc, root) is None


def test_quota_below_one_cpu_still_gives_one_worker(tmp_path: Path, many_cpus: None) -> None:
    proc, root = tree(tmp_path, "0::/", {"cpu.max": "50000 100000"})
    assert usable_cpus(proc, root) == 1


def test_affinity_smaller_than_quota_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3})
    proc, root = tree(tmp_path, "0::/", {"cpu.max": "800000 100000"})
    assert usable_cpus(proc, root) == 1


def test_no_cgroup_files_means_the_affinity(tmp_path: Path, many_cpus: None) -> None:
    assert usable_cpus(tmp_path / "nope", tmp_path / "none") == 32


def test_this_process(tmp_path: Path) -> None:
    """On the real machine: never more than the affinity allows, at least 1."""
    assert 1 <= usable_cpus() <= len(os.sched_getaffinity(0))


def test_envoy_default_workers_follow_the_usable_cpus_and_the_flag_wins() -> None:
    from weir.envoy import EnvoyProcess

    assert EnvoyProcess({}).concurrency == usable_cpus()
    assert EnvoyProcess({}, concurrency=3).concurrency == 3
