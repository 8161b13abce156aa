"""weir.providers.files against files written the way tools write them, and things that are not files.

Real files and real watching. Each test reproduces a fault of issue 13: a
file rewritten in place (``cp``, ``>``: truncated, then written) was served
empty in between; see also tests/e2e/test_files_faults.py (through Envoy).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from test_files_provider import messages, namespace, port_of, service, watching

from weir.providers.files import REWRITE_GRACE_S, FilesProvider, Snapshot

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
