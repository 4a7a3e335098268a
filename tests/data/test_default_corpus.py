"""The embedded default corpus: stdlib docstrings, extracted deterministically and cached."""

import time
from pathlib import Path

import pytest

from hfzoo.data.default_corpus import cache_path, extract_docstrings, load_default_corpus, split_of


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """A fresh cache directory, so the first load below is a real extraction."""
    with pytest.MonkeyPatch.context() as mp:
        directory = tmp_path_factory.mktemp("hfzoo-cache")
        mp.setenv("HFZOO_CACHE", str(directory))
        yield directory


@pytest.fixture(scope="module")
def cold_load(cache):
    start = time.perf_counter()
    corpus = load_default_corpus()
    return corpus, time.perf_counter() - start


@pytest.fixture(scope="module")
def records():
    return extract_docstrings()


def test_extraction_is_deterministic(records):
    assert extract_docstrings() == records


def test_size_is_plausible(records):
    total_bytes = sum(len(r["text"].encode()) for r in records)
    assert 4_000 <= len(records) <= 12_000
    assert 1_000_000 <= total_bytes <= 3_000_000


def test_records_are_clean_and_sorted(records):
    texts = [r["text"] for r in records]
    assert len(set(texts)) == len(texts)
    assert min(map(len, texts)) >= 40
    keys = [(r["source"].rsplit(":", 1)[0], int(r["source"].rsplit(":", 1)[1])) for r in records]
    assert keys == sorted(keys)
    skipped = ("test/", "tests/", "idlelib/", "lib2to3/", "site-packages/", "encodings/", "turtledemo/")
    assert not [r["source"] for r in records if r["source"].startswith(skipped)]


def test_module_labels_and_qualnames(records):
    by_source = {r["source"].rsplit(":", 1)[0]: r for r in records}
    assert by_source["json/decoder.py"]["module"] == "json"
    assert by_source["email/mime/text.py"]["module"] == "email"
    assert by_source["os.py"]["module"] == "os"
    qualnames = {r["qualname"]: r for r in records}
    assert qualnames["json.decoder.JSONDecoder"]["source"].startswith("json/decoder.py:")
    assert qualnames["json"]["source"].startswith("json/__init__.py:")  # a package's own docstring
    assert all(r["qualname"].split(".")[0] == r["module"] for r in records)


def test_split_is_95_5_disjoint_and_complete(cold_load, records):
    corpus, _ = cold_load
    train, validation = corpus["train"], corpus["validation"]
    assert 0.03 <= len(validation) / len(records) <= 0.07
    assert set(train["source"]).isdisjoint(validation["source"])
    assert sorted([*train["source"], *validation["source"]]) == sorted(r["source"] for r in records)
    assert all(split_of(t) == "validation" for t in validation["text"])
    assert train.column_names == ["text", "module", "qualname", "source"]


def test_cache_hit_is_fast_and_equal(cache, cold_load):
    corpus, cold_seconds = cold_load
    assert cache_path().parent == cache and cache_path().exists()
    assert [p.name for p in cache.iterdir()] == [cache_path().name]  # no temp file left behind
    start = time.perf_counter()
    again = load_default_corpus()
    hit_seconds = time.perf_counter() - start
    assert hit_seconds < min(1.0, cold_seconds / 3)
    for split in ("train", "validation"):
        assert again[split].to_dict() == corpus[split].to_dict()
    assert load_default_corpus("validation").to_dict() == corpus["validation"].to_dict()


def _write(root: Path, rel: str, source: str) -> None:
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    (root / rel).write_text(source)


def test_extraction_rules_on_a_small_tree(tmp_path):
    doc = "A docstring long enough to be kept by the extraction rules."
    _write(tmp_path, "pkg/__init__.py", f'"""Package docstring: {doc}"""\n')
    _write(
        tmp_path,
        "pkg/sub/mod.py",
        f'''"""Short."""
import sys
if sys:
    class Widget:
        """Widget: {doc}"""
        def draw(self):
            """draw: {doc}"""
            def helper():
                """helper: {doc}"""
def duplicate():
    """Widget: {doc}"""
''',
    )
    _write(tmp_path, "pkg/tests/test_mod.py", f'"""Tests: {doc}"""\n')
    _write(tmp_path, "site-packages/other.py", f'"""Third party: {doc}"""\n')
    records = extract_docstrings(tmp_path)
    assert [(r["qualname"], r["source"], r["module"]) for r in records] == [
        ("pkg", "pkg/__init__.py:1", "pkg"),
        ("pkg.sub.mod.Widget", "pkg/sub/mod.py:5", "pkg"),
        ("pkg.sub.mod.Widget.draw", "pkg/sub/mod.py:7", "pkg"),
        ("pkg.sub.mod.Widget.draw.<locals>.helper", "pkg/sub/mod.py:9", "pkg"),
    ]
    # A new file changes neither the records already there nor their split.
    _write(tmp_path, "aaa.py", f'"""New module: {doc}"""\n')
    assert extract_docstrings(tmp_path)[1:] == records
    assert cache_path(tmp_path) != cache_path()
