"""The two default-corpus tasks: real docstrings, labels that follow their module, the corpus's fixed split."""

import csv

import pytest

from hfzoo.data.default_corpus import load_default_corpus
from hfzoo.data.stdlib_tasks import AREA_OF_MODULE, MODULE_TASK_SIZE, build_stdlib_task, write_task_files


@pytest.fixture(scope="module")
def corpus():
    return load_default_corpus()


def test_module_task_keeps_the_most_frequent_modules(corpus):
    task = build_stdlib_task("module", corpus)
    labels = set(task["train"]["label"])
    assert len(labels) == MODULE_TASK_SIZE and {"asyncio", "email", "logging"} <= labels
    assert set(task["validation"]["label"]) <= labels
    assert not set(task["train"]["text"]) & set(task["validation"]["text"])


def test_area_task_labels_follow_the_module(corpus):
    task = build_stdlib_task("area", corpus)
    by_text = dict(zip(corpus["train"]["text"], corpus["train"]["module"]))
    for text, label in zip(task["train"]["text"][:200], task["train"]["label"][:200]):
        assert AREA_OF_MODULE[by_text[text]] == label
    assert len(set(task["train"]["label"])) == 6


def test_written_files_round_trip(tmp_path, corpus):
    paths = write_task_files("area", tmp_path, corpus)
    with open(paths["validation"], newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert rows and rows[0].keys() == {"text", "label"}
    assert [r["text"] for r in rows] == build_stdlib_task("area", corpus)["validation"]["text"]


def test_unknown_task_lists_the_valid_ones():
    with pytest.raises(ValueError, match="module, area"):
        build_stdlib_task("sentiment")
