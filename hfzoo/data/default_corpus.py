"""The default corpus: docstrings of the installed Python standard library.

Every machine that runs hfzoo has Python, so the stdlib docstrings are real English prose
(~1.5 MB over ~6,000 docstrings on CPython 3.11) that needs no download. They are extracted by
parsing the source with :mod:`ast` (no module is imported), which is deterministic for a given
Python installation. Each record carries the top-level module it comes from (``module``), a
natural label for downstream classification tasks.

The train/validation split is decided per record by a hash of its text, so adding or moving a
file in a newer stdlib does not reshuffle the split of the docstrings that did not change.
The extraction takes a couple of seconds; the result is cached as a parquet file under
``~/.cache/hfzoo`` (or ``$HFZOO_CACHE``), keyed by the Python version and the stdlib file list.
"""

from __future__ import annotations

import ast
import gc
import hashlib
import logging
import os
import sys
import sysconfig
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..core.files import atomic_path, cache_dir

logger = logging.getLogger(__name__)

# Bump when the extraction rules change, so stale caches are not reused.
EXTRACTION_VERSION = 1
MIN_CHARS = 40
VALIDATION_PERCENT = 5
# Directories that hold tests, tools, third-party code, generated tables or boilerplate
# (the ``encodings`` codecs all carry the same generated "Character Mapping Codec" docstring).
SKIP_DIRS = frozenset(
    {
        "site-packages", "dist-packages", "test", "tests", "idle_test", "idlelib", "lib2to3",
        "turtledemo", "ensurepip", "__pycache__", "lib-dynload", "encodings", "pydoc_data",
        "__phello__",
    }
)
COLUMNS = ("text", "module", "qualname", "source")
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def stdlib_dir() -> Path:
    """The directory holding the standard library's ``.py`` sources."""
    return Path(sysconfig.get_paths()["stdlib"])


def _stdlib_files(root: Path) -> list[str]:
    files = []
    for directory, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith("config-")]
        for name in names:
            if name.endswith(".py"):
                files.append(Path(directory, name).relative_to(root).as_posix())
    return sorted(files)


def _module_path(rel: str) -> str:
    parts = rel.removesuffix(".py").split("/")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _docstring_nodes(node: ast.AST, prefix: str) -> Iterator[tuple[ast.AST, str]]:
    """Yield (definition, qualname) for every class/function under ``node``, in source order.

    Definitions nested in ``if``/``try``/``with`` blocks are included; names follow Python's
    ``__qualname__`` convention (``outer.<locals>.inner`` for functions defined in functions).
    """
    for child in ast.iter_child_nodes(node):
        if isinstance(child, _DEFS):
            qualname = f"{prefix}.{child.name}"
            yield child, qualname
            inner = qualname if isinstance(child, ast.ClassDef) else f"{qualname}.<locals>"
            yield from _docstring_nodes(child, inner)
        elif isinstance(child, (ast.stmt, ast.excepthandler, ast.match_case)):
            yield from _docstring_nodes(child, prefix)


@contextmanager
def _gc_paused() -> Iterator[None]:
    # ASTs hold no reference cycles, but building ~450 of them triggers many cyclic-GC passes
    # over everything else alive (torch, transformers): pausing the collector is ~3x faster.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def extract_docstrings(root: str | os.PathLike | None = None) -> list[dict[str, str]]:
    """Extract the docstrings of the standard library at ``root`` (default: this Python's).

    Returns records ``{"text", "module", "qualname", "source"}`` sorted by file then line,
    with docstrings shorter than ``MIN_CHARS`` and exact duplicates (after the first) removed.
    ``source`` is ``"relative/path.py:line"`` where ``line`` is the docstring's first line.
    """
    root = Path(root) if root is not None else stdlib_dir()
    with _gc_paused():
        return _extract(root)


def _extract(root: Path) -> list[dict[str, str]]:
    records, seen = [], set()
    for rel in _stdlib_files(root):
        try:
            tree = ast.parse((root / rel).read_bytes(), filename=rel)
        except (SyntaxError, ValueError):  # e.g. deliberately broken test data in other versions
            logger.debug("skipping unparsable %s", rel)
            continue
        module_path = _module_path(rel)
        # Depth-first in source order, so records come sorted by file, then line.
        for node, qualname in [(tree, module_path), *_docstring_nodes(tree, module_path)]:
            text = ast.get_docstring(node, clean=True)
            if text is None or len(text) < MIN_CHARS or text in seen:
                continue
            seen.add(text)
            records.append(
                {
                    "text": text,
                    "module": module_path.split(".")[0],
                    "qualname": qualname,
                    "source": f"{rel}:{node.body[0].lineno}",
                }
            )
    return records


def split_of(text: str) -> str:
    """The fixed split of a docstring: ``"validation"`` for ~5% of texts, chosen by SHA-1."""
    bucket = int.from_bytes(hashlib.sha1(text.encode("utf-8")).digest()[:8], "big") % 100
    return "validation" if bucket < VALIDATION_PERCENT else "train"


def cache_path(root: str | os.PathLike | None = None) -> Path:
    """The cache file for the stdlib at ``root``: keyed by Python version and file list."""
    root = Path(root) if root is not None else stdlib_dir()
    digest = hashlib.sha1(f"v{EXTRACTION_VERSION}\n".encode())
    for rel in _stdlib_files(root):
        digest.update(f"{rel}\t{(root / rel).stat().st_size}\n".encode())
    version = ".".join(map(str, sys.version_info[:3]))
    return cache_dir() / f"stdlib-docstrings-py{version}-{digest.hexdigest()[:16]}.parquet"


def _corpus_table(use_cache: bool) -> pa.Table:
    path = cache_path()
    if use_cache and path.exists():
        return pq.read_table(path)
    records = extract_docstrings()
    table = pa.table(
        {
            **{column: [r[column] for r in records] for column in COLUMNS},
            "split": [split_of(r["text"]) for r in records],
        }
    )
    if use_cache:
        try:
            with atomic_path(path) as temporary:
                pq.write_table(table, temporary)
        except OSError as error:  # a read-only home must not stop training
            logger.warning("could not cache the default corpus at %s: %s", path, error)
    return table


def load_default_corpus(
    split: str | None = None, *, use_cache: bool = True
) -> datasets.DatasetDict | datasets.Dataset:
    """Load the stdlib-docstring corpus.

    Args:
        split: ``"train"`` or ``"validation"`` for one :class:`datasets.Dataset`; ``None`` for a
            :class:`datasets.DatasetDict` with both.
        use_cache: read/write the parquet cache (see :func:`cache_path`).

    Columns: ``text``, ``module`` (top-level stdlib module, e.g. ``"email"``), ``qualname``
    (e.g. ``"json.decoder.JSONDecoder.decode"``) and ``source`` (``"json/decoder.py:343"``).
    """
    if split not in (None, "train", "validation"):
        raise ValueError(f"unknown split {split!r}; the default corpus has 'train' and 'validation'")
    table = _corpus_table(use_cache)
    parts = {
        name: datasets.Dataset(
            table.filter(pc.equal(table["split"], name)).drop_columns(["split"]),
            split=datasets.Split(name),
        )
        for name in ("train", "validation")
    }
    return parts[split] if split else datasets.DatasetDict(parts)
