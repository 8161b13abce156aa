"""weir.providers.files.provider: real files, real watching (watchfiles), snapshots after changes.

These providers serve a change that withdraws objects at once (``grace_s=0``):
the tests here are about what each change does; test_files_provider_faults.py
covers how long a file rewritten in place is held back.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from weir import loader
from weir.api.core_v1 import Service
from weir.api.meta import ObjectKey
from weir.providers.files.provider import KEPT_FILE, FilesProvider, Snapshot

#: A change must show up in a snapshot within this long.
DEADLINE = 1.0


def service(name: str, port: int, namespace: str | None = None) -> str:
    """A Service; without ``namespace`` its ``port`` is on line 7 (where a problem with it points)."""
    ns = f"\n  namespace: {namespace}" if namespace else ""
    return (
        f"apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}{ns}\nspec:\n  ports:\n  - port: {port}\n"
    )


def namespace(name: str) -> str:
    return f"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n"


def port_of(snapshot: Snapshot, name: str, ns: str = "default") -> int | None:
    svc = snapshot.resources.service(ns, name)
    return svc.spec.ports[0].port if svc is not None else None


def messages(snapshot: Snapshot) -> list[str]:
    return [str(p) for p in snapshot.problems]


class Watch:
    """Runs ``provider.watch()`` in a task; snapshots land in a queue tests read with timeouts."""

    def __init__(self, provider: FilesProvider) -> None:
        self.provider = provider
        self.queue: asyncio.Queue[Snapshot] = asyncio.Queue()
        self.task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        async for snapshot in self.provider.watch():
            self.queue.put_nowait(snapshot)

    async def start(self) -> None:
        self.task = asyncio.create_task(self._run())
        await asyncio.sleep(0.05)  # the watcher is up (changes before this are caught anyway)

    async def change(self, action: Callable[[], object], deadline: float = DEADLINE) -> Snapshot:
        """Apply ``action`` and return the snapshot it causes, asserting it came within ``deadline``."""
        started = time.perf_counter()
        action()
        snapshot = await asyncio.wait_for(self.queue.get(), timeout=deadline + 1.0)
        elapsed = time.perf_counter() - started
        assert elapsed < deadline, f"snapshot took {elapsed:.3f}s"
        return snapshot

    async def quiet(self, seconds: float = 0.4) -> None:
        """Assert that no snapshot arrives for ``seconds``."""
        await asyncio.sleep(seconds)
        assert self.queue.empty(), messages(self.queue.get_nowait())

    async def stop(self) -> None:
        assert self.task is not None
        self.task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await self.task


@asynccontextmanager
async def watching(provider: FilesProvider) -> AsyncIterator[Watch]:
    watch = Watch(provider)
    await watch.start()
    try:
        yield watch
    finally:
        await watch.stop()


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "manifests"
    (root / "apps").mkdir(parents=True)
    (root / "web.yaml").write_text(service("web", 80) + "---\n" + service("api", 81))
    (root / "apps" / "ns.yaml").write_text(namespace("apps"))
    return root


# ------------------------------------------------------------------ initial load


def test_initial_load(tree: Path) -> None:
    snapshot = FilesProvider([tree], grace_s=0).load()
    assert snapshot.problems == ()
    assert sorted(str(k) for k in snapshot.resources.objects) == [
        "Namespace apps",
        "Service default/api",
        "Service default/web",
    ]
    assert port_of(snapshot, "web") == 80
    assert snapshot.origins[ObjectKey("Service", "default", "api")] == (str(tree / "web.yaml"), 9)
    assert snapshot.origins[ObjectKey("Namespace", "", "apps")] == (str(tree / "apps" / "ns.yaml"), 1)


def test_initial_load_reports_problems_and_serves_the_rest(tree: Path) -> None:
    (tree / "bad.yaml").write_text(service("bad", 0))
    (tree / "broken.yaml").write_text("kind: [\n")
    snapshot = FilesProvider([tree, tree / "missing.yaml"], grace_s=0).load()
    assert messages(snapshot) == [
        f"{tree}/missing.yaml: no such file or directory",
        f"{tree}/bad.yaml:7: Service default/bad: spec.ports[0].port: "
        "Invalid value: 0: should be greater than or equal to 1",
        f"{tree}/broken.yaml:2: invalid YAML: did not find expected node content "
        "(while parsing a flow node started on line 2)",
    ]
    assert len(snapshot.errors) == 3
    assert len(snapshot.resources) == 3


def test_provider_needs_paths() -> None:
    with pytest.raises(ValueError):
        FilesProvider([])


# ------------------------------------------------------------------ watching


async def test_edit_gives_a_new_snapshot_within_a_second(tree: Path) -> None:
    provider = FilesProvider([tree], grace_s=0)
    assert port_of(provider.load(), "web") == 80
    async with watching(provider) as watch:
        path = tree / "web.yaml"
        snapshot = await watch.change(
            lambda: path.write_text(service("web", 8080) + "---\n" + service("api", 81))
        )
        assert port_of(snapshot, "web") == 8080
        assert snapshot.problems == ()
        # And again: every batch of changes gives a snapshot.
        snapshot = await watch.change(lambda: path.write_text(service("web", 8081)))
        assert port_of(snapshot, "web") == 8081
        assert port_of(snapshot, "api") is None


async def test_invalid_edit_keeps_the_last_valid_version(tree: Path) -> None:
    provider = FilesProvider([tree], grace_s=0)
    provider.load()
    path = tree / "web.yaml"
    async with watching(provider) as watch:
        snapshot = await watch.change(
            lambda: path.write_text(service("web", 0) + "---\n" + service("api", 82))
        )
        assert port_of(snapshot, "web") == 80  # the last valid version
        assert port_of(snapshot, "api") == 82  # the valid change in the same file is served
        assert messages(snapshot) == [
            f"{path}:7: Service default/web: spec.ports[0].port: "
            "Invalid value: 0: should be greater than or equal to 1: kept the last valid version"
        ]
        # Fixed: served, the problem is gone.
        snapshot = await watch.change(
            lambda: path.write_text(service("web", 90) + "---\n" + service("api", 82))
        )
        assert port_of(snapshot, "web") == 90
        assert snapshot.problems == ()


async def test_yaml_error_keeps_the_files_objects(tree: Path) -> None:
    provider = FilesProvider([tree], grace_s=0)
    provider.load()
    path = tree / "web.yaml"
    async with watching(provider) as watch:
        snapshot = await watch.change(lambda: path.write_text(service("web", 1) + "  - port: [\n"))
        assert port_of(snapshot, "web") == 80
        assert port_of(snapshot, "api") == 81
        assert messages(snapshot) == [
            f"{path}:9: invalid YAML: did not find expected node content "
            "(while parsing a flow node started on line 9): kept the last valid objects from this file"
        ]
        # Other files still change while this one is broken.
        snapshot = await watch.change(lambda: (tree / "apps" / "ns.yaml").write_text(namespace("apps2")))
        assert snapshot.resources.namespace("apps2") is not None
        assert snapshot.resources.namespace("apps") is None
        assert port_of(snapshot, "web") == 80
        assert len(snapshot.problems) == 1
        # Repaired.
        snapshot = await watch.change(lambda: path.write_text(service("web", 85)))
        assert port_of(snapshot, "web") == 85
        assert port_of(snapshot, "api") is None
        assert snapshot.problems == ()


async def test_object_never_valid_is_skipped(tree: Path) -> None:
    provider = FilesProvider([tree], grace_s=0)
    provider.load()
    async with watching(provider) as watch:
        snapshot = await watch.change(lambda: (tree / "new.yaml").write_text(service("new", 0)))
        assert port_of(snapshot, "new") is None
        assert messages(snapshot) == [
            f"{tree}/new.yaml:7: Service default/new: spec.ports[0].port: "
            "Invalid value: 0: should be greater than or equal to 1"
        ]


async def test_deleted_object_does_not_come_back_when_re_added_invalid(tree: Path) -> None:
    provider = FilesProvider([tree], grace_s=0)
    provider.load()
    path = tree / "web.yaml"
    async with watching(provider) as watch:
        snapshot = await watch.change(lambda: path.write_text(service("api", 81)))
        assert port_of(snapshot, "web") is None
        snapshot = await watch.change(
            lambda: path.write_text(service("api", 81) + "---\n" + service("web", 0))
        )
        assert port_of(snapshot, "web") is None
        assert messages(snapshot)[0].endswith("should be greater than or equal to 1")


async def test_deleting_a_file_removes_its_objects(tree: Path) -> None:
    provider = FilesProvider([tree], grace_s=0)
    provider.load()
    async with watching(provider) as watch:
        snapshot = await watch.change((tree / "web.yaml").unlink)
        assert sorted(str(k) for k in snapshot.resources.objects) == ["Namespace apps"]
        assert ObjectKey("Service", "default", "web") not in snapshot.origins


async def test_deleting_a_broken_file_removes_its_kept_objects(tree: Path) -> None:
    provider = FilesProvider([tree], grace_s=0)
    provider.load()
    path = tree / "web.yaml"
    async with watching(provider) as watch:
        snapshot = await watch.change(lambda: path.write_text("{"))
        assert port_of(snapshot, "web") == 80
        snapshot = await watch.change(path.unlink)
        assert port_of(snapshot, "web") is None
        assert snapshot.problems == ()


async def test_new_files_are_picked_up_in_new_folders(tree: Path) -> None:
    provider = FilesProvider([tree], grace_s=0)
    provider.load()

    def add() -> None:
        folder = tree / "team" / "deep"
        folder.mkdir(parents=True)
        (folder / "svc.yml").write_text(service("added", 9000, namespace="team"))

    async with watching(provider) as watch:
        snapshot = await watch.change(add)
        assert port_of(snapshot, "added", "team") == 9000
        assert snapshot.origins[ObjectKey("Service", "team", "added")] == (
            str(tree / "team" / "deep" / "svc.yml"),
            1,
        )


async def test_hidden_and_other_files_are_ignored(tree: Path) -> None:
    provider = FilesProvider([tree], grace_s=0)
    provider.load()
    async with watching(provider) as watch:
        (tree / ".hidden.yaml").write_text(namespace("hidden"))
        (tree / ".git").mkdir()
        (tree / ".git" / "x.yaml").write_text(namespace("in-hidden-folder"))
        (tree / "notes.txt").write_text(namespace("notes"))
        await watch.quiet()
        snapshot = await watch.change(lambda: (tree / "apps" / "more.yaml").write_text(namespace("more")))
        names = {key.name for key in snapshot.resources.objects}
        assert "more" in names
        assert not names & {"hidden", "in-hidden-folder", "notes"}


async def test_touch_without_change_gives_no_snapshot(tree: Path) -> None:
    provider = FilesProvider([tree], grace_s=0)
    provider.load()
    async with watching(provider) as watch:
        path = tree / "web.yaml"
        path.write_bytes(path.read_bytes())
        await watch.quiet()


async def test_watching_a_single_file(tmp_path: Path) -> None:
    path = tmp_path / "one.yaml"
    path.write_text(service("one", 1))
    provider = FilesProvider([path], grace_s=0)
    provider.load()
    async with watching(provider) as watch:
        (tmp_path / "sibling.yaml").write_text(service("sibling", 2))
        await watch.quiet()
        snapshot = await watch.change(lambda: path.write_text(service("one", 2)))
        assert port_of(snapshot, "one") == 2
        assert port_of(snapshot, "sibling") is None


async def test_a_missing_file_appears(tmp_path: Path) -> None:
    path = tmp_path / "later.yaml"
    provider = FilesProvider([path], grace_s=0)
    assert messages(provider.load()) == [f"{path}: no such file or directory"]
    async with watching(provider) as watch:
        snapshot = await watch.change(lambda: path.write_text(service("later", 3)))
        assert port_of(snapshot, "later") == 3
        assert snapshot.problems == ()


async def test_a_folder_deleted_and_created_again_is_watched_again(tree: Path) -> None:
    provider = FilesProvider([tree], grace_s=0)
    provider.load()
    async with watching(provider) as watch:
        snapshot = await watch.change(lambda: shutil.rmtree(tree))
        assert len(snapshot.resources) == 0
        assert messages(snapshot) == [f"{tree}: no such file or directory"]

        def recreate() -> None:
            (tree / "sub").mkdir(parents=True)
            (tree / "sub" / "a.yaml").write_text(service("again", 1))

        snapshot = await watch.change(recreate)
        assert port_of(snapshot, "again") == 1
        # And changes inside it are seen again.
        snapshot = await watch.change(lambda: (tree / "sub" / "a.yaml").write_text(service("again", 2)))
        assert port_of(snapshot, "again") == 2
        assert snapshot.problems == ()


async def test_changes_between_load_and_watch_are_caught(tree: Path) -> None:
    provider = FilesProvider([tree], grace_s=0)
    provider.load()
    (tree / "web.yaml").write_text(service("web", 7))
    watch = Watch(provider)
    await watch.start()
    try:
        snapshot = await asyncio.wait_for(watch.queue.get(), DEADLINE)
        assert port_of(snapshot, "web") == 7
    finally:
        await watch.stop()


async def test_watch_without_load_yields_the_initial_snapshot_first(tree: Path) -> None:
    provider = FilesProvider([tree], grace_s=0)
    async with watching(provider) as watch:
        snapshot = await asyncio.wait_for(watch.queue.get(), DEADLINE)
        assert port_of(snapshot, "web") == 80
        assert provider.snapshot is snapshot


async def test_only_changed_files_are_parsed_again(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    parsed: list[str] = []
    real = loader.parse_bytes

    def counting(raw: bytes, file: str):  # type: ignore[no-untyped-def]
        parsed.append(Path(file).name)
        return real(raw, file)

    monkeypatch.setattr("weir.parallelparse.parse_bytes", counting)
    provider = FilesProvider([tree], grace_s=0)
    provider.load()
    assert sorted(parsed) == ["ns.yaml", "web.yaml"]
    parsed.clear()
    async with watching(provider) as watch:
        await watch.change(lambda: (tree / "apps" / "ns.yaml").write_text(namespace("other")))
        assert parsed == ["ns.yaml"]


async def test_each_new_problem_is_logged_once(tree: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="weir.files")
    provider = FilesProvider([tree], grace_s=0)
    provider.load()
    async with watching(provider) as watch:
        await watch.change(lambda: (tree / "bad.yaml").write_text(service("bad", 0)))
        await watch.change(lambda: (tree / "apps" / "ns.yaml").write_text(namespace("x")))
        await watch.change(lambda: (tree / "apps" / "ns.yaml").write_text(namespace("y")))
    logged = [r for r in caplog.records if r.name == "weir.files"]
    assert [(r.levelno, r.getMessage()) for r in logged] == [
        (
            logging.ERROR,
            f"{tree}/bad.yaml:7: Service default/bad: spec.ports[0].port: "
            "Invalid value: 0: should be greater than or equal to 1",
        )
    ]


async def test_cancelling_stops_the_watchers(tree: Path) -> None:
    provider = FilesProvider([tree], grace_s=0)
    provider.load()
    before = {t.get_name() for t in asyncio.all_tasks()}
    watch = Watch(provider)
    await watch.start()
    assert any(t.get_name().startswith("weir.files:") for t in asyncio.all_tasks())
    started = time.perf_counter()
    await watch.stop()
    assert time.perf_counter() - started < DEADLINE
    await asyncio.sleep(0)
    assert {t.get_name() for t in asyncio.all_tasks()} <= before | {asyncio.current_task().get_name()}  # type: ignore[union-attr]


async def test_keeps_serving_under_a_burst_of_writes(tree: Path) -> None:
    provider = FilesProvider([tree], debounce_ms=50, grace_s=0)
    provider.load()
    path = tree / "web.yaml"
    async with watching(provider) as watch:
        for port in range(1000, 1020):
            path.write_text(service("web", port))
            await asyncio.sleep(0.005)
        deadline = time.perf_counter() + DEADLINE + 1.0
        latest: Snapshot | None = None
        while time.perf_counter() < deadline:
            try:
                latest = await asyncio.wait_for(watch.queue.get(), 0.3)
            except TimeoutError:
                break
        assert latest is not None
        assert port_of(latest, "web") == 1019
        assert isinstance(latest.resources.service("default", "web"), Service)


@pytest.mark.parametrize(
    "value",
    ["!!bool maybe", "!!int abc", "!!float x", '!!int ""', "7" * 4301],
    ids=["bool", "int", "float", "int-empty", "int-4301-digits"],
)
async def test_a_value_yaml_cannot_build_keeps_the_files_objects_and_watching_goes_on(
    tree: Path, value: str
) -> None:
    """Such a value killed the watcher with nothing said: every later edit was ignored."""
    provider = FilesProvider([tree], grace_s=0)
    provider.load()
    path = tree / "web.yaml"
    async with watching(provider) as watch:
        bad = service("web", 80) + "---\n" + service("api", 81).replace("port: 81", f"port: {value}")
        snapshot = await watch.change(lambda: path.write_text(bad))
        assert port_of(snapshot, "web") == 80
        assert port_of(snapshot, "api") == 81
        [problem] = snapshot.problems
        assert (problem.file, problem.line, problem.object, problem.field) == (
            str(path),
            15,
            "Service default/api",
            "spec.ports[0].port",
        )
        assert problem.message.startswith("invalid YAML: ")
        assert problem.message.endswith(KEPT_FILE)
        # Watching goes on: other files, then this one.
        snapshot = await watch.change(lambda: (tree / "apps" / "ns.yaml").write_text(namespace("apps2")))
        assert snapshot.resources.namespace("apps2") is not None
        assert port_of(snapshot, "api") == 81
        snapshot = await watch.change(lambda: path.write_text(service("api", 82)))
        assert port_of(snapshot, "api") == 82
        assert port_of(snapshot, "web") is None
        assert snapshot.problems == ()
