"""Two labelled tasks built from the embedded default corpus, so fine-tuning and adapter composition can be shown
on real text with no download.

Both label the same kind of input (a standard-library docstring) by where it comes from, at two granularities:

* ``module``: which of the eight most frequent top-level modules the docstring belongs to;
* ``area``: which of six areas of the standard library (grouped after the chapters of the Python Library
  Reference) its module belongs to.

Sharing inputs but not labels is what makes the pair useful for composition: an adapter trained on one task
carries knowledge the other can use.
"""

import csv
import os
from collections import Counter
from pathlib import Path

import datasets

from .default_corpus import load_default_corpus

MODULE_TASK_SIZE = 8

# Chapters of the Python Library Reference, merged into six areas; modules not listed are left out of the task.
STDLIB_AREAS: dict[str, tuple[str, ...]] = {
    "gui": ("tkinter", "turtle", "curses"),
    "internet": (
        "email", "http", "urllib", "mailbox", "imaplib", "smtplib", "nntplib", "poplib", "ftplib", "wsgiref",
        "xmlrpc", "xml", "html", "json", "mimetypes", "base64", "socketserver", "ssl", "socket", "ipaddress",
        "webbrowser", "uuid",
    ),
    "concurrency": (
        "asyncio", "multiprocessing", "threading", "concurrent", "subprocess", "queue", "sched", "selectors",
        "signal", "contextvars",
    ),
    "language": (
        "importlib", "inspect", "typing", "pydoc", "doctest", "unittest", "pdb", "bdb", "ast", "dis", "tokenize",
        "pickletools", "trace", "traceback", "dataclasses", "abc", "enum", "functools", "operator", "collections",
        "_collections_abc", "warnings", "contextlib", "distutils", "pkgutil", "runpy", "symtable",
    ),
    "files": (
        "tarfile", "zipfile", "pathlib", "shutil", "tempfile", "glob", "fnmatch", "os", "io", "_pyio", "codecs",
        "csv", "configparser", "pickle", "shelve", "dbm", "sqlite3", "gzip", "bz2", "lzma", "zlib", "logging",
    ),
    "numbers_and_text": (
        "_pydecimal", "decimal", "fractions", "statistics", "random", "math", "datetime", "calendar", "difflib",
        "textwrap", "string", "re", "locale", "gettext",
    ),
}  # fmt: skip
AREA_OF_MODULE = {module: area for area, modules in STDLIB_AREAS.items() for module in modules}
TASKS = ("module", "area")


def build_stdlib_task(task: str, corpus: datasets.DatasetDict | None = None, seed: int = 0) -> datasets.DatasetDict:
    """`train`/`validation` splits with `text` and a string `label`, from the default corpus's fixed split.

    Rows are shuffled (seeded): the corpus is ordered by source file, so its first rows share one module.
    """
    if task not in TASKS:
        raise ValueError(f"Unknown task {task!r}; choose one of {', '.join(TASKS)}.")
    corpus = corpus if corpus is not None else load_default_corpus()
    if task == "module":
        frequent = {m for m, _ in Counter(corpus["train"]["module"]).most_common(MODULE_TASK_SIZE)}
        label_of = {module: module for module in frequent}
    else:
        label_of = AREA_OF_MODULE
    return datasets.DatasetDict(
        {
            split: part.filter(lambda row: row["module"] in label_of)
            .map(lambda row: {"label": label_of[row["module"]]})
            .select_columns(["text", "label"])
            .shuffle(seed=seed)
            .flatten_indices()
            for split, part in corpus.items()
        }
    )


def write_task_files(task: str, out_dir: str | os.PathLike, corpus: datasets.DatasetDict | None = None) -> dict[str, Path]:
    """Write the task as `train.csv` / `validation.csv` (header `text,label`) for the fine-tuning recipe."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {}
    for split, part in build_stdlib_task(task, corpus).items():
        paths[split] = out_dir / f"{split}.csv"
        with open(paths[split], "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(["text", "label"])
            writer.writerows(zip(part["text"], part["label"]))
    return paths
