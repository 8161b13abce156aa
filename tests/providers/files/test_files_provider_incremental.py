"""The files provider's edit path (only changed files read and assembled) equals a full read.

:meth:`FilesProvider._reload` is given the paths a watcher would report, as
``watch()`` does; after each random step the snapshot must equal that of a
second provider that lists and reads the folder in full at every step (the
same history: last valid versions are kept alike): the same objects,
problems (in order) and origins, and ``changed`` must name every key whose
object differs. (Changes that withdraw objects are served at once here,
``grace_s=0``: what is compared is the result, not when it comes.)
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from weir.api.meta import ObjectKey
from weir.providers.files.provider import FilesProvider, Snapshot

FILES = 8


def service(name: str, port: int) -> str:
    return f"apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\nspec:\n  ports:\n  - port: {port}\n"


def content(rng: random.Random, i: int) -> str:
    """A file's text: mostly its own two Services; sometimes broken, invalid, duplicated or foreign."""
    roll = rng.random()
    own = [service(f"s{i}a", rng.randint(1, 3)), service(f"s{i}b", rng.randint(1, 3))]
    if roll < 0.1:
        return "kind: [unclosed\n"  # the file stops parsing
    if roll < 0.2:
        own[0] = service(f"s{i}a", 0)  # invalid object
    elif roll < 0.3:
        own.append(service(f"s{rng.randrange(FILES)}a", 4))  # a key another file may own
    elif roll < 0.35:
        own.append("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\n")  # unknown kind
    elif roll < 0.4:
        own = own[:1]  # a key fewer
    return "---\n".join(own)


def write(path: Path, text: str, rng: random.Random) -> set[str]:
    """Write as an editor might: in place, or a hidden file renamed over the target."""
    if rng.random() < 0.5:
        path.write_text(text)
        return {os.path.abspath(path)}
    tmp = path.with_name("." + path.name + ".swp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return {os.path.abspath(path), os.path.abspath(tmp)}


def comparable(snapshot: Snapshot) -> tuple[object, ...]:
    objects = {key: obj.model_dump() for key, obj in snapshot.resources.objects.items()}
    by_kind = {
        kind: [o.key for o in snapshot.resources.all(type(objs[0]))] for kind, objs in _kinds(snapshot)
    }
    return objects, by_kind, [str(p) for p in snapshot.problems], dict(snapshot.origins)


def _kinds(snapshot: Snapshot) -> list[tuple[str, list[object]]]:
    grouped: dict[str, list[object]] = {}
    for obj in snapshot.resources.objects.values():
        grouped.setdefault(obj.KIND, []).append(obj)
    return sorted(grouped.items())


#: Seeds past the first 12 that once found a difference: an unreadable file keeping an object whose key
#: another file names (the other file is then not alone), or losing it to another file's object.
@pytest.mark.parametrize("seed", [*range(12), 14, 50, 58, 80, 104])
def test_edits_equal_full_reads(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    for i in range(FILES):
        (tmp_path / f"f{i}.yaml").write_text(service(f"s{i}a", 1) + "---\n" + service(f"s{i}b", 1))
    provider = FilesProvider([tmp_path], grace_s=0)
    reference = FilesProvider([tmp_path], grace_s=0)
    previous = provider.load()
    reference.load()
    for _ in range(40):
        i = rng.randrange(FILES + 2)  # two extra names: files created and deleted
        path = tmp_path / f"f{i}.yaml"
        if path.exists() and rng.random() < 0.1:
            path.unlink()
            changed = {os.path.abspath(path)}
        else:
            changed = write(path, content(rng, i), rng)
        provider._reload(changed)
        got = provider.snapshot
        assert got is not None
        reference._reload(set())  # no paths named: list and stat everything
        assert reference.snapshot is not None
        assert comparable(got) == comparable(reference.snapshot)
        before = {key: obj.model_dump() for key, obj in previous.resources.objects.items()}
        after = {key: obj.model_dump() for key, obj in got.resources.objects.items()}
        differs = {key for key in before.keys() | after.keys() if before.get(key) != after.get(key)}
        assert differs <= got.changed
        previous = got


def test_an_edit_reads_and_assembles_only_its_file(tmp_path: Path) -> None:
    for i in range(50):
        (tmp_path / f"f{i:02d}.yaml").write_text(service(f"s{i}", 1))
    provider = FilesProvider([tmp_path], grace_s=0)
    first = provider.load()
    target = tmp_path / "f07.yaml"
    target.write_text(service("s7", 2))
    assert provider._reload({os.path.abspath(target)})
    second = provider.snapshot
    assert second is not None
    assert second.changed == {("Service", "default", "s7")}
    untouched = ("Service", "default", "s8")
    assert second.resources.objects[untouched] is first.resources.objects[untouched]
    svc = second.resources.service("default", "s7")
    assert svc is not None and svc.spec.ports[0].port == 2
    # Rewriting the same bytes changes nothing.
    target.write_text(service("s7", 2))
    assert not provider._reload({os.path.abspath(target)})


def test_a_broken_file_keeps_its_objects_whatever_other_files_do(tmp_path: Path) -> None:
    """What an unreadable file keeps does not depend on how many times the folder was read since."""
    a, b, c = (tmp_path / f"{n}.yaml" for n in "abc")
    a.write_text(service("x", 1))
    b.write_text(service("y", 1))
    c.write_text(service("z", 1))
    provider = FilesProvider([tmp_path], grace_s=0)
    provider.load()
    b.write_text("kind: [unclosed\n")
    provider._reload({os.path.abspath(b)})
    # a.yaml (read first) now names y too: b.yaml's kept y is served already and stays; a.yaml's
    # is the duplicate...
    a.write_text(service("x", 1) + "---\n" + service("y", 2))
    provider._reload({os.path.abspath(a)})
    duplicate = (
        f"{a}:9: Service default/y: Duplicate value: already defined at {b}:1; this definition is ignored"
    )
    snapshot = provider.snapshot
    assert snapshot is not None and duplicate in [str(p) for p in snapshot.problems]
    assert snapshot.origins[ObjectKey("Service", "default", "y")] == (str(b), 1)
    # ...and stays one when the files are read again for another change,
    c.write_text(service("z", 2))
    provider._reload(set())
    snapshot = provider.snapshot
    assert snapshot is not None and duplicate in [str(p) for p in snapshot.problems]
    assert snapshot.origins[ObjectKey("Service", "default", "y")] == (str(b), 1)
    # and when a.yaml gives y up, b.yaml serves its kept y as before.
    a.write_text(service("x", 1))
    provider._reload({os.path.abspath(a)})
    snapshot = provider.snapshot
    assert snapshot is not None
    assert snapshot.origins[ObjectKey("Service", "default", "y")] == (str(b), 1)
    assert [p.message.endswith("kept the last valid objects from this file") for p in snapshot.problems] == [
        True
    ]
