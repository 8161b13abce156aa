"""weir.providers.files.provider, watching: a lone atomic replace read at once, bursts read once and whole.

Real files, real watching (watchfiles). ``test_files_provider.py`` covers
what each kind of change does to a snapshot; this file covers when the
snapshot comes, and how many there are.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from weir.providers.files.provider import FilesProvider, Snapshot

pytestmark = pytest.mark.timeout(60)


def service(name: str, port: int) -> str:
    return f"apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\nspec:\n  ports:\n  - port: {port}\n"


def port_of(snapshot: Snapshot, name: str) -> int | None:
    svc = snapshot.resources.service("default", name)
    return svc.spec.ports[0].port if svc is not None else None


def replace_atomically(path: Path, text: str) -> None:
    """As careful editors and tools write: a hidden temporary file renamed over the target."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


@asynccontextmanager
async def snapshots(provider: FilesProvider) -> AsyncIterator[asyncio.Queue[Snapshot]]:
    """The snapshots ``provider.watch()`` yields, in a queue."""
    queue: asyncio.Queue[Snapshot] = asyncio.Queue()

    async def run() -> None:
        async for snapshot in provider.watch():
            queue.put_nowait(snapshot)

    task = asyncio.create_task(run())
    await asyncio.sleep(0.05)  # the watchers are up
    try:
        yield queue
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def no_more(queue: asyncio.Queue[Snapshot], seconds: float = 0.4) -> None:
    await asyncio.sleep(seconds)
    assert queue.empty(), "another snapshot came"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "manifests"
    root.mkdir()
    (root / "web.yaml").write_text(service("web", 80))
    return root


async def test_an_atomic_replace_is_served_within_tens_of_milliseconds(tree: Path) -> None:
    provider = FilesProvider([tree])
    provider.load()
    path = tree / "web.yaml"
    latencies = []
    async with snapshots(provider) as queue:
        for port in range(1001, 1008):
            started = time.perf_counter()
            replace_atomically(path, service("web", port))
            snapshot = await asyncio.wait_for(queue.get(), 2)
            latencies.append(time.perf_counter() - started)
            assert port_of(snapshot, "web") == port
            await asyncio.sleep(0.03)
        await no_more(queue)
    # The watcher hands a batch over after 10 ms without a change (10-20 ms after the rename); a
    # pause of 50 ms, as before, would make every one of these take 50 ms or more.
    assert statistics.median(latencies) < 0.05, [f"{s * 1000:.0f} ms" for s in latencies]


async def test_a_burst_with_pauses_in_it_is_read_once(tree: Path) -> None:
    provider = FilesProvider([tree], debounce_ms=300)
    provider.load()
    async with snapshots(provider) as queue:
        for i in range(20):
            (tree / f"a{i}.yaml").write_text(service(f"a{i}", 1000 + i))
        # Longer than the watcher's 10 ms pause, so the first files reach weir as a batch of
        # their own; shorter than the provider's debounce, which a burst waits for.
        await asyncio.sleep(0.05)
        for i in range(20):
            (tree / f"b{i}.yaml").write_text(service(f"b{i}", 2000 + i))
        snapshot = await asyncio.wait_for(queue.get(), 5)
        assert len(snapshot.resources) == 41, "the burst was read before it ended"
        assert port_of(snapshot, "b19") == 2019
        await no_more(queue)


async def test_a_file_renamed_away_and_written_again_is_never_served_without_its_objects(tree: Path) -> None:
    provider = FilesProvider([tree], debounce_ms=300)
    provider.load()
    path = tree / "web.yaml"
    backup = tree / "web.yaml~"  # as vim does with 'writebackup': rename the file away, write it anew
    async with snapshots(provider) as queue:
        os.rename(path, backup)
        await asyncio.sleep(0.05)
        path.write_text(service("web", 8080))
        backup.unlink()
        snapshot = await asyncio.wait_for(queue.get(), 5)
        assert port_of(snapshot, "web") == 8080
        await no_more(queue)


async def test_changes_next_to_the_folder_watched_are_none_of_its_business(tree: Path) -> None:
    provider = FilesProvider([tree])
    provider.load()
    log = tree.parent / "weir.log"  # the folder's parent is watched too, to see the folder come and go
    async with snapshots(provider) as queue:
        replace_atomically(tree / "web.yaml", service("web", 81))
        assert port_of(await asyncio.wait_for(queue.get(), 2), "web") == 81
        for line in range(20):
            with log.open("a") as out:
                out.write(f"line {line}\n")
            await asyncio.sleep(0.01)
        # Had they counted, every file would have been listed and read again, for nothing.
        await no_more(queue)
