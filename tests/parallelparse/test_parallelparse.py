"""Parsing on two cores (weir.parallelparse): the same results, in order, as parsing
each file here, whatever the helper process does."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from weir import parallelparse as parallel
from weir.loader import load_paths, parse_bytes
from weir.parallelparse import parse_all
from weir.providers.files.provider import FilesProvider

ROOT = Path(__file__).parents[1]
SEEDS = sorted((ROOT / "loader" / "testdata" / "loader" / "valid").glob("*.yaml")) + sorted(
    (ROOT / "translate" / "testdata").glob("*.in.yaml")
)


@pytest.fixture
def items() -> list[tuple[str, bytes]]:
    """Every seed, and broken variants of some: more than a few chunks' worth."""
    out = [(str(path), path.read_bytes()) for path in SEEDS]
    out += [(f"{name}.cut", raw[: len(raw) // 2]) for name, raw in out[:10]]
    out += [("not-utf8.yaml", b"\xff\xfe\x00bad"), ("empty.yaml", b"")]
    return out


@pytest.fixture(autouse=True)
def small(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parallel, "PARALLEL_MIN", 2)
    monkeypatch.setattr(parallel, "CHUNK", 4)
    monkeypatch.setattr(parallel, "_cores", lambda: 2)


def test_two_processes_give_what_one_gives(items: list[tuple[str, bytes]]) -> None:
    assert len(items) > 4 * parallel.CHUNK
    assert parse_all(items) == [parse_bytes(raw, name) for name, raw in items]


def test_the_helper_parses_its_share(items: list[tuple[str, bytes]], monkeypatch: pytest.MonkeyPatch) -> None:
    """Every chunk parsed here would mean no helper: the last chunk, queued first, is the helper's
    unless this process got there first (it cannot: it starts from the first of many)."""
    here: list[int] = []
    original = parallel.parse_chunk

    def counting(chunk: list[tuple[str, bytes]]) -> list[object]:
        here.append(len(chunk))
        return original(chunk)  # type: ignore[return-value]

    monkeypatch.setattr(parallel, "parse_chunk", counting)
    many = items * 8
    assert parse_all(many) == [parse_bytes(raw, name) for name, raw in many]
    assert sum(here) < len(many)


@pytest.mark.parametrize(
    "command",
    [
        pytest.param(("/nonexistent/python",), id="cannot-start"),
        pytest.param((sys.executable, "-c", "pass"), id="exits-at-once"),
        pytest.param((sys.executable, "-c", "import sys; sys.stdout.write('x' * 9)"), id="writes-nonsense"),
        pytest.param(
            (
                sys.executable,
                "-c",
                "import pickle, struct, sys; d = pickle.dumps((0, ['not a result']));"
                "sys.stdout.buffer.write(struct.pack('!Q', len(d)) + d); sys.stdout.flush()",
            ),
            id="wrong-results",
        ),
        pytest.param(
            (sys.executable, "-c", "import os, sys; sys.stdin.buffer.read(100); os.kill(os.getpid(), 9)"),
            id="killed",
        ),
    ],
)
def test_whatever_the_helper_does_every_file_is_parsed(
    items: list[tuple[str, bytes]], monkeypatch: pytest.MonkeyPatch, command: tuple[str, ...]
) -> None:
    monkeypatch.setattr(parallel._Helper, "command", command)
    assert parse_all(items) == [parse_bytes(raw, name) for name, raw in items]


def test_the_files_provider_reads_a_large_folder_on_two_cores(tmp_path: Path) -> None:
    for i, path in enumerate(SEEDS):
        (tmp_path / f"{i:03d}-{path.name}").write_bytes(path.read_bytes())
    parallel_snapshot = FilesProvider([tmp_path]).load()
    parallel.PARALLEL_MIN = 10**9  # restored by the fixture's monkeypatch
    serial_snapshot = FilesProvider([tmp_path]).load()
    assert parallel_snapshot.resources.objects == serial_snapshot.resources.objects
    assert parallel_snapshot.problems == serial_snapshot.problems


def test_load_paths_reads_a_large_folder_on_two_cores(tmp_path: Path) -> None:
    """``weir validate`` and ``weir translate`` read through :func:`weir.loader.load_paths`."""
    for i, path in enumerate(SEEDS):
        (tmp_path / f"{i:03d}-{path.name}").write_bytes(path.read_bytes())
    (tmp_path / "zz-pipe.yaml").symlink_to(tmp_path / "nowhere")  # unreadable: its place is kept
    parallel_report = load_paths([tmp_path])
    parallel.PARALLEL_MIN = 10**9  # restored by the fixture's monkeypatch
    serial_report = load_paths([tmp_path])
    assert parallel_report.objects == serial_report.objects
    assert parallel_report.problems == serial_report.problems
    assert any("cannot read" in p.message for p in parallel_report.problems)
