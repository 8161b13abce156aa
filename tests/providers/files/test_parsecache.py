"""The parse cache (weir.providers.files.parsecache): a restart parses only what changed, and the
cache can make a start faster but never different, whatever is in it."""

from __future__ import annotations

import logging
import os
import pickle
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from weir import loader
from weir import parallelparse as parallel
from weir.loader import parse_bytes
from weir.providers.files import parsecache
from weir.providers.files.parsecache import KEEP_FILES, ParseCache
from weir.providers.files.provider import FilesProvider

ROOT = Path(__file__).parents[2]
#: A valid manifest of every kind weir reads, and the translator's golden inputs.
SEEDS = sorted((ROOT / "loader" / "testdata" / "loader" / "valid").glob("*.yaml")) + sorted(
    (ROOT / "translate" / "testdata").glob("*.in.yaml")
)


def _write(folder: Path, files: dict[str, str | bytes]) -> None:
    for name, content in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.encode() if isinstance(content, str) else content)


def _route(i: int, prefix: str = "/") -> str:
    return f"""\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: r{i}, namespace: default}}
spec:
  parentRefs: [{{name: gw}}]
  rules:
  - matches: [{{path: {{type: PathPrefix, value: {prefix}}}}}]
"""


class NoParsing:
    """Stands in for parse_bytes where every file must come from the cache."""

    def __call__(self, raw: bytes, file: str) -> Any:
        raise AssertionError(f"{file} was parsed, not read from the cache")


def _start(folder: Path, cache_dir: Path) -> tuple[FilesProvider, ParseCache, Any]:
    cache = ParseCache(cache_dir, [folder])
    files = FilesProvider([folder], parse_cache=cache)
    return files, cache, files.load()


def test_a_restart_reads_every_unchanged_file_from_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "m"
    _write(folder, {f"r{i}.yaml": _route(i) for i in range(20)})
    first, _, before = _start(folder, tmp_path / "cache")
    assert first.save_parse_cache()
    assert not first.save_parse_cache()  # nothing changed since

    monkeypatch.setattr(parallel, "parse_bytes", NoParsing())
    second, cache, after = _start(folder, tmp_path / "cache")
    assert (cache.hits, cache.misses) == (20, 0)
    assert after.resources.objects == before.resources.objects
    assert after.problems == before.problems and dict(after.origins) == dict(before.origins)
    assert not second.save_parse_cache()  # the cache holds exactly this already


def test_only_the_changed_files_are_parsed_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "m"
    _write(folder, {f"r{i}.yaml": _route(i) for i in range(5)})
    first, _, _ = _start(folder, tmp_path / "cache")
    first.save_parse_cache()
    _write(folder, {"r3.yaml": _route(3, "/three"), "new.yaml": _route(9)})
    parsed: list[str] = []

    def counting(raw: bytes, file: str) -> Any:
        parsed.append(os.path.basename(file))
        return parse_bytes(raw, file)

    monkeypatch.setattr(parallel, "parse_bytes", counting)
    second, cache, snapshot = _start(folder, tmp_path / "cache")
    assert sorted(parsed) == ["new.yaml", "r3.yaml"]
    assert (cache.hits, cache.misses) == (4, 2)
    route = next(o for k, o in snapshot.resources.objects.items() if k.name == "r3")
    assert route.spec.rules[0].matches[0].path.value == "/three"
    assert second.save_parse_cache()  # it held two files that are other files now


def test_a_cache_written_by_other_code_is_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "m"
    _write(folder, {"r.yaml": _route(1)})
    first, _, _ = _start(folder, tmp_path / "cache")
    first.save_parse_cache()
    monkeypatch.setattr(parsecache, "code_fingerprint", lambda: b"another weir 000")
    _, cache, snapshot = _start(folder, tmp_path / "cache")
    assert (cache.hits, cache.misses) == (0, 1)
    assert len(snapshot.resources.objects) == 1


def test_the_code_fingerprint_follows_weirs_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An edited checkout is other code at the same version: the fingerprint reads the source."""
    fake = tmp_path / "src" / "weir"
    (fake / "providers" / "files").mkdir(parents=True)
    (fake / "loader.py").write_text("A = 1\n")
    monkeypatch.setattr(parsecache, "__file__", str(fake / "providers" / "files" / "parsecache.py"))
    parsecache.code_fingerprint.cache_clear()
    try:
        one = parsecache.code_fingerprint()
        (fake / "loader.py").write_text("A = 2\n")
        parsecache.code_fingerprint.cache_clear()
        assert parsecache.code_fingerprint() != one
    finally:
        parsecache.code_fingerprint.cache_clear()


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda raw: raw[: len(raw) // 2], id="truncated"),
        pytest.param(lambda raw: raw[:40] + b"\x00" * 64 + raw[104:], id="zeroed"),
        pytest.param(lambda raw: b"", id="empty"),
        pytest.param(lambda raw: raw + pickle.dumps({"not": "a chunk"}), id="alien-chunk"),
        pytest.param(lambda raw: raw + b"\x80\x05junk", id="junk-at-end"),
    ],
)
def test_a_damaged_cache_is_ignored_and_the_files_parsed(
    tmp_path: Path, damage: Any, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "m"
    _write(folder, {f"r{i}.yaml": _route(i) for i in range(3)})
    first, cache, before = _start(folder, tmp_path / "cache")
    first.save_parse_cache()
    cache.path.write_bytes(damage(cache.path.read_bytes()))
    with caplog.at_level(logging.WARNING, "weir.files"):
        _, again, after = _start(folder, tmp_path / "cache")
    assert after.resources.objects == before.resources.objects
    assert after.problems == before.problems
    assert again.hits < 3  # what could not be read was parsed


def test_a_cache_others_can_write_is_not_read(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    folder = tmp_path / "m"
    _write(folder, {"r.yaml": _route(1)})
    first, cache, _ = _start(folder, tmp_path / "cache")
    first.save_parse_cache()
    assert (tmp_path / "cache").stat().st_mode & 0o777 == 0o700
    cache.path.chmod(0o666)
    with caplog.at_level(logging.WARNING, "weir.files"):
        _, again, _ = _start(folder, tmp_path / "cache")
    assert again.hits == 0
    assert "others cannot write" in caplog.text


def test_a_cache_that_cannot_be_written_is_skipped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    folder = tmp_path / "m"
    _write(folder, {"r.yaml": _route(1)})
    blocker = tmp_path / "file-not-folder"
    blocker.write_text("")
    files, _, snapshot = _start(folder, blocker / "cache")
    with caplog.at_level(logging.WARNING, "weir.files"):
        assert not files.save_parse_cache()
    assert "parse cache not written" in caplog.text
    assert len(snapshot.resources.objects) == 1


def test_the_folder_keeps_the_newest_caches(tmp_path: Path) -> None:
    cache_dir = tmp_path / "cache"
    for i in range(KEEP_FILES + 3):
        folder = tmp_path / f"m{i}"
        _write(folder, {"r.yaml": _route(i)})
        files, _, _ = _start(folder, cache_dir)
        files.save_parse_cache()
        os.utime(ParseCache(cache_dir, [folder]).path, (1_000_000 + i, 1_000_000 + i))
    kept = sorted(cache_dir.glob("*.pickle"))
    assert len(kept) == KEEP_FILES
    assert ParseCache(cache_dir, [tmp_path / f"m{KEEP_FILES + 2}"]).path in kept
    assert ParseCache(cache_dir, [tmp_path / "m0"]).path not in kept


def test_a_saved_cache_is_written_in_chunks_that_each_hold_the_gil_briefly(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    n = parsecache.CHUNK * 2 + 7
    _write(folder, {f"r{i}.yaml": _route(i) for i in range(n)})
    files, cache, _ = _start(folder, tmp_path / "cache")
    files.save_parse_cache()
    with open(cache.path, "rb") as stream:
        stream.read(len(parsecache._MAGIC) + 16)
        sizes = []
        while stream.peek(1):
            sizes.append(len(pickle.load(stream)))
    assert sizes == [parsecache.CHUNK, parsecache.CHUNK, 7]


# ------------------------------------------------------------------ any file: the same result


def _mutations(text: bytes) -> st.SearchStrategy[bytes]:
    at = st.integers(0, len(text))
    return st.one_of(
        st.just(text),
        st.tuples(at, at).map(lambda ab: text[: min(ab)] + text[max(ab) :]),  # a piece cut out
        st.tuples(at, st.binary(min_size=1, max_size=32)).map(lambda a: text[: a[0]] + a[1] + text[a[0] :]),
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(SEEDS).flatmap(lambda seed: _mutations(seed.read_bytes())))
def test_whatever_a_file_holds_the_cache_gives_what_parsing_gives(tmp_path: Path, raw: bytes) -> None:
    """Round trip through the cache file for any content: valid manifests of every kind, broken
    ones, bytes that are not text. Equal results, problems and all."""
    folder = tmp_path / f"case{abs(hash(raw))}"
    cache_dir = folder / "cache"
    _write(folder / "m", {"f.yaml": raw})
    name = str(folder / "m" / "f.yaml")
    expected = loader.parse_bytes(raw, name)
    cache = ParseCache(cache_dir, [folder / "m"])
    assert cache.save([(name, b"digest", expected)])
    assert ParseCache(cache_dir, [folder / "m"]).take(name, b"digest") == expected
    assert ParseCache(cache_dir, [folder / "m"]).take(name, b"other") is None
