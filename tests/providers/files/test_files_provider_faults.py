"""weir.providers.files.provider against files written the way tools write them, and non-files.

Real files and real watching. Each test reproduces a fault of issue 13: a
file rewritten in place (``cp``, ``>``: truncated, then written) was served
empty in between; see also tests/e2e/test_files_faults.py (through Envoy).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_files_provider import messages, namespace, port_of, service, watching

from weir import loader
from weir.providers.files.provider import REWRITE_GRACE_S, FilesProvider, Snapshot

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "manifests"
    root.mkdir()
    (root / "web.yaml").write_text(service("web", 80) + "---\n" + service("api", 81))
    (root / "ns.yaml").write_text(namespace("apps"))
    return root


def drain(queue: asyncio.Queue[Snapshot]) -> list[Snapshot]:
    out = []
    while not queue.empty():
        out.append(queue.get_nowait())
    return out


async def test_a_file_truncated_then_written_again_never_withdraws_its_objects(tree: Path) -> None:
    """The issue's case: 0.05-0.3 s between the truncate and the write (as ``cp`` and ``>`` leave it)."""
    provider = FilesProvider([tree])
    provider.load()
    path = tree / "web.yaml"
    text = path.read_text()
    async with watching(provider) as watch:
        for pause in (0.3, 0.05, 0.15, 0.3):
            with path.open("w"):  # truncated: empty now
                pass
            await asyncio.sleep(pause)
            path.write_text(text)
            await asyncio.sleep(0.05)
        # Half written: only the first document, then the rest.
        path.write_text(text.split("---\n")[0])
        await asyncio.sleep(0.2)
        path.write_text(text)
        await asyncio.sleep(REWRITE_GRACE_S + 0.3)
        for snapshot in drain(watch.queue):
            assert (port_of(snapshot, "web"), port_of(snapshot, "api")) == (80, 81), messages(snapshot)
        served = provider.snapshot
        assert served is not None and (port_of(served, "web"), port_of(served, "api")) == (80, 81)
        assert served.problems == ()


async def test_an_emptied_file_withdraws_its_objects_once_unchanged_for_the_grace(tree: Path) -> None:
    provider = FilesProvider([tree])
    provider.load()
    path = tree / "web.yaml"
    async with watching(provider) as watch:
        started = time.monotonic()
        path.write_text("")
        snapshot = await asyncio.wait_for(watch.queue.get(), REWRITE_GRACE_S + 2)
        took = time.monotonic() - started
        assert REWRITE_GRACE_S <= took < REWRITE_GRACE_S + 0.5, took
        assert port_of(snapshot, "web") is None and port_of(snapshot, "api") is None
        assert snapshot.resources.namespace("apps") is not None


async def test_a_change_dropping_an_object_waits_and_each_change_restarts_the_wait(tree: Path) -> None:
    provider = FilesProvider([tree], grace_s=0.6)
    provider.load()
    path = tree / "web.yaml"
    async with watching(provider) as watch:
        started = time.monotonic()
        path.write_text(service("web", 80))  # api dropped: held
        await asyncio.sleep(0.4)
        path.write_text(service("web", 80) + "# still being written\n")  # changed again: wait again
        snapshot = await asyncio.wait_for(watch.queue.get(), 3)
        took = time.monotonic() - started
        assert 0.4 + 0.6 <= took < 0.4 + 0.6 + 0.5, took
        assert port_of(snapshot, "web") == 80 and port_of(snapshot, "api") is None
        # Meanwhile other files are served at once.
        started = time.monotonic()
        path.write_text("")
        await asyncio.sleep(0.05)
        (tree / "ns.yaml").write_text(namespace("apps") + "---\n" + namespace("apps2"))
        snapshot = await asyncio.wait_for(watch.queue.get(), 3)
        assert time.monotonic() - started < 0.5
        assert snapshot.resources.namespace("apps2") is not None
        assert port_of(snapshot, "web") == 80  # still held


async def test_a_change_that_withdraws_nothing_is_served_at_once_and_ends_the_hold(tree: Path) -> None:
    provider = FilesProvider([tree])
    provider.load()
    path = tree / "web.yaml"
    async with watching(provider) as watch:
        path.write_text("")
        await asyncio.sleep(0.1)
        started = time.monotonic()
        path.write_text(service("web", 90) + "---\n" + service("api", 91) + "---\n" + service("new", 92))
        snapshot = await asyncio.wait_for(watch.queue.get(), 3)
        assert time.monotonic() - started < 0.5
        assert (port_of(snapshot, "web"), port_of(snapshot, "api"), port_of(snapshot, "new")) == (90, 91, 92)
        await asyncio.sleep(REWRITE_GRACE_S + 0.2)
        assert watch.queue.empty()


async def test_a_file_renamed_over_the_manifest_is_served_at_once_unless_empty(tree: Path) -> None:
    """Renamed over it, the file was written whole elsewhere: its deletions need no wait."""
    provider = FilesProvider([tree])
    provider.load()
    path = tree / "web.yaml"
    tmp = tree / ".web.yaml.tmp"
    async with watching(provider) as watch:
        tmp.write_text(service("web", 80))
        started = time.monotonic()
        snapshot = await watch.change(lambda: os.replace(tmp, path))
        assert time.monotonic() - started < 0.5
        assert port_of(snapshot, "web") == 80 and port_of(snapshot, "api") is None
        tmp.write_text("")
        started = time.monotonic()
        snapshot = await watch.change(lambda: os.replace(tmp, path), deadline=REWRITE_GRACE_S + 1)
        assert time.monotonic() - started >= REWRITE_GRACE_S  # an empty file is held even so
        assert port_of(snapshot, "web") is None


async def test_a_new_file_redefining_a_served_object_is_the_error_wherever_it_sorts(tree: Path) -> None:
    """``a-dup.yaml`` redefining an object ``web.yaml`` serves took it over (its name sorts first)."""
    provider = FilesProvider([tree])
    provider.load()
    web, dup = tree / "web.yaml", tree / "a-dup.yaml"
    async with watching(provider) as watch:
        snapshot = await watch.change(
            lambda: dup.write_text(namespace("extra") + "---\n" + service("api", 99))
        )
        assert port_of(snapshot, "api") == 81
        assert snapshot.resources.namespace("extra") is not None  # the rest of the newcomer serves
        assert messages(snapshot) == [
            f"{dup}:6: Service default/api: Duplicate value: already defined at {web}:9; "
            "this definition is ignored"
        ]
        # The served definition moves within its file: still it.
        snapshot = await watch.change(
            lambda: web.write_text(service("api", 82) + "---\n" + service("web", 80))
        )
        assert port_of(snapshot, "api") == 82
        assert messages(snapshot) == [
            f"{dup}:6: Service default/api: Duplicate value: already defined at {web}:1; "
            "this definition is ignored"
        ]
        # Once web.yaml no longer defines it, the other definition is served.
        snapshot = await watch.change(
            lambda: web.write_text(service("web", 80)), deadline=REWRITE_GRACE_S + 1
        )
        assert port_of(snapshot, "api") == 99
        assert snapshot.problems == ()
    # At start, nothing is served yet: the first definition in reading order (sorted paths) wins.
    snapshot = FilesProvider([tree]).load()
    assert port_of(snapshot, "api") == 99
    web.write_text(service("web", 80) + "---\n" + service("api", 81))
    snapshot = FilesProvider([tree]).load()
    assert port_of(snapshot, "api") == 99
    assert messages(snapshot) == [
        f"{web}:9: Service default/api: Duplicate value: already defined at {dup}:6; "
        "this definition is ignored"
    ]


@contextlib.contextmanager
def fifo(path: Path) -> Iterator[Path]:
    """A named pipe at ``path``; on the way out, a reader stuck opening it (old code) is let go."""
    os.mkfifo(path)
    try:
        yield path
    finally:
        with contextlib.suppress(OSError):  # ENXIO: nobody is opening it for reading
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))


async def test_a_named_pipe_never_blocks_the_provider_and_is_one_problem(tree: Path) -> None:
    """A FIFO named ``*.yaml`` blocked the provider forever: no reload, nothing reported."""
    with fifo(tree / "pipe.yaml") as pipe:
        provider = FilesProvider([tree])
        snapshot = await asyncio.wait_for(asyncio.to_thread(provider.load), 5)
        assert port_of(snapshot, "web") == 80
        assert messages(snapshot) == [f"{pipe}: cannot read: a named pipe, not a regular file; skipped"]
        async with watching(provider) as watch:
            text = service("web", 90) + "---\n" + service("api", 81)
            snapshot = await watch.change(lambda: (tree / "web.yaml").write_text(text))
            assert port_of(snapshot, "web") == 90
            assert len(snapshot.problems) == 1
            # Named explicitly, too.
            snapshot = await asyncio.wait_for(asyncio.to_thread(FilesProvider([pipe]).load), 5)
            assert messages(snapshot) == [f"{pipe}: cannot read: a named pipe, not a regular file; skipped"]


def test_validate_skips_a_named_pipe_and_a_device_with_a_problem(tree: Path) -> None:
    os.symlink("/dev/zero", tree / "zero.yaml")
    with fifo(tree / "pipe.yaml") as pipe:
        done: list[loader.LoadReport] = []
        thread = threading.Thread(target=lambda: done.append(loader.load_paths([tree])), daemon=True)
        thread.start()
        thread.join(5)
        assert done, "load_paths blocked"
        assert [str(p) for p in done[0].problems] == [
            f"{pipe}: cannot read: a named pipe, not a regular file; skipped",
            f"{tree}/zero.yaml: cannot read: a character device, not a regular file; skipped",
        ]
        assert len(done[0].objects) == 3


async def test_a_symbolic_link_to_nothing_is_one_problem_not_silence(tree: Path) -> None:
    """It was dropped without a word (``weir validate`` reported it)."""
    os.symlink(tree / "gone.yaml", tree / "dangling.yaml")
    os.symlink(tree / "loop.yaml", tree / "loop.yaml")
    provider = FilesProvider([tree])
    snapshot = provider.load()
    assert messages(snapshot) == [
        f"{tree}/dangling.yaml: cannot read: No such file or directory",
        f"{tree}/loop.yaml: cannot read: Too many levels of symbolic links",
    ]
    assert port_of(snapshot, "web") == 80
    async with watching(provider) as watch:
        snapshot = await watch.change(lambda: (tree / "gone.yaml").write_text(service("gone", 70)))
        assert port_of(snapshot, "gone") == 70
        assert messages(snapshot) == [f"{tree}/loop.yaml: cannot read: Too many levels of symbolic links"]
