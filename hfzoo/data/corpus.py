"""Load a text corpus for pretraining or tokenizer training, from anywhere, with clear errors.

``load_corpus()`` with no argument gives the embedded default corpus (stdlib docstrings);
a local file or folder gives its texts; any other name goes to ``datasets.load_dataset`` (the
Hub). Whatever the source, the result has its text in a ``text`` column and has ``train`` and
``validation`` splits (a deterministic one is held out when the source has none).

Local files are read by this module rather than by the ``datasets`` builders, so malformed input
fails with the file and line in the message instead of deep inside pyarrow:

* ``.txt``: **one example per line**, line breaks stripped, blank lines skipped (the
  ``datasets`` "text" convention; put multi-line documents in ``.jsonl``);
* ``.jsonl`` / ``.json``: JSON Lines, one object per line with a string ``text_column``;
* ``.csv`` / ``.tsv``: a header row naming the columns, then one example per row;
* ``.parquet``: a table with a string ``text_column``;
* WikiExtractor output (files such as ``AA/wiki_00`` whose first line opens a ``<doc``): **one example per
  article**, markup dropped (``hfzoo.data.wikiextractor``).

Text files must be UTF-8 (a leading byte-order mark is accepted). Only the text is kept from local
files (the default corpus and Hub datasets keep their other columns, e.g. labels); examples whose
text is empty or whitespace-only are skipped. A folder is searched recursively (hidden files
skipped); a file whose path has the word ``validation``/``valid``/``val``/``dev`` or ``test`` (the
last such word counts) goes to that split, any other to ``train``. Non-streaming loads are cached by
``datasets``, keyed by each file's size and mtime; streaming loads read lazily, so their errors
surface when iteration reaches the bad line.
"""

from __future__ import annotations

import csv
import glob
import hashlib
import json
import logging
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

import datasets
import numpy as np
import pyarrow.parquet as pq

from .default_corpus import load_default_corpus
from .text_files import CorpusError, decoded_lines
from .wikiextractor import check_titles_present, is_wikiextractor_file, read_articles

logger = logging.getLogger(__name__)

FORMATS = {".txt": "txt", ".jsonl": "json", ".json": "json", ".csv": "csv", ".tsv": "tsv", ".parquet": "parquet"}
_SPLIT_WORDS = {"train": "train", "validation": "validation", "valid": "validation", "val": "validation",
                "dev": "validation", "test": "test"}  # fmt: skip
# Bump when the readers change, so datasets' cache of an unchanged file is not reused.
_READER_VERSION = 3

Corpus = datasets.DatasetDict | datasets.Dataset | datasets.IterableDatasetDict | datasets.IterableDataset


def _missing_column(where: str, text_column: str, columns: Iterable) -> CorpusError:
    return CorpusError(f"{where}: no {text_column!r} column; the columns are: {', '.join(map(str, columns)) or 'none'}")


def _text_of(path: str, where: str, record: dict, text_column: str) -> dict | None:
    """``{"text": ...}`` from one record; None if the text is blank."""
    if text_column not in record:
        raise _missing_column(f"{path}, {where}", text_column, record)
    text = record[text_column]
    if not isinstance(text, str):
        raise CorpusError(f"{path}, {where}: {text_column!r} is {type(text).__name__}, not a string")
    return {"text": text} if text.strip() else None


def _read_txt(path: str) -> Iterator[dict]:
    for _, line in decoded_lines(path):
        text = line.rstrip("\r\n")
        if text.strip():
            yield {"text": text}


def _read_json(path: str, text_column: str) -> Iterator[dict]:
    for lineno, line in decoded_lines(path):
        if not line.strip():
            continue
        try:
            record = json.loads(line.rstrip("\r\n"))
        except json.JSONDecodeError as e:
            raise CorpusError(f"{path}, line {lineno}: malformed JSON ({e.msg} at column {e.pos + 1}); "
                              "expected one JSON object per line") from None  # fmt: skip
        if not isinstance(record, dict):
            raise CorpusError(f"{path}, line {lineno}: expected a JSON object, found {type(record).__name__}")
        if (example := _text_of(path, f"line {lineno}", record, text_column)) is not None:
            yield example


def _read_delimited(path: str, text_column: str, delimiter: str) -> Iterator[dict]:
    reader = csv.reader((line for _, line in decoded_lines(path)), delimiter=delimiter, strict=True)
    try:
        header = next(reader, None)
        if header is None:
            return
        if text_column not in header:
            raise _missing_column(f"{path}, line 1", text_column, header)
        for row in reader:
            if not row:
                continue
            if len(row) != len(header):
                raise CorpusError(f"{path}, line {reader.line_num}: {len(row)} fields, the header has {len(header)}")
            if (example := _text_of(path, f"line {reader.line_num}", dict(zip(header, row)), text_column)):
                yield example
    except csv.Error as e:
        raise CorpusError(f"{path}, line {reader.line_num}: malformed {Path(path).suffix[1:]} ({e})") from None


def _read_parquet(path: str, text_column: str) -> Iterator[dict]:
    parquet = pq.ParquetFile(path)
    if text_column not in parquet.schema_arrow.names:
        raise _missing_column(path, text_column, parquet.schema_arrow.names)
    row = 0
    for batch in parquet.iter_batches(columns=[text_column]):
        for record in batch.to_pylist():
            row += 1
            if (example := _text_of(path, f"row {row}", record, text_column)) is not None:
                yield example


def format_of(path: str) -> str | None:
    """The reader a local file takes: by its suffix, or by its content for WikiExtractor's suffix-less files."""
    if (fmt := FORMATS.get(Path(path).suffix.lower())) is not None:
        return fmt
    return "wikiextractor" if os.path.isfile(path) and is_wikiextractor_file(path) else None


def _read_file(path: str, text_column: str, exclude_titles: frozenset[str], keep_titles: bool) -> Iterator[dict]:
    fmt = format_of(path)
    if fmt == "wikiextractor":  # a file of stub or excluded articles is still WikiExtractor output, not a mistake
        yield from read_articles(path, exclude_titles, keep_titles)
        return
    if fmt == "txt":
        examples = _read_txt(path)
    elif fmt == "json":
        examples = _read_json(path, text_column)
    elif fmt == "parquet":
        examples = _read_parquet(path, text_column)
    else:
        examples = _read_delimited(path, text_column, "," if fmt == "csv" else "\t")
    empty = True
    for example in examples:
        empty = False
        yield example
    if empty:
        raise CorpusError(f"{path}: empty corpus (no non-blank text in the file)")


def _generate(
    files: list[tuple[str, int, int]], text_column: str, exclude_titles: tuple[str, ...], keep_titles: bool
) -> Iterator[dict]:
    # Each file comes with its size and mtime so that datasets' cache key changes with it.
    for path, _size, _mtime in files:
        yield from _read_file(path, text_column, frozenset(exclude_titles), keep_titles)


def split_of(relative: str) -> str:
    """The split a data file belongs to, read from the words of its path (`train`, `valid`, `dev`, `test`, ...)."""
    words = re.split(r"[^a-z]+", relative.lower())
    return next((_SPLIT_WORDS[w] for w in reversed(words) if w in _SPLIT_WORDS), "train")


def _expand(pattern: str) -> list[str]:
    if any(c in pattern for c in "*?["):
        return sorted(glob.glob(pattern, recursive=True))
    if not os.path.exists(pattern):
        raise FileNotFoundError(f"no such corpus file: {pattern}")
    return [pattern]


def _local_splits(
    dataset: str | os.PathLike | None,
    data_files: str | Sequence[str] | Mapping[str, str | Sequence[str]] | None,
) -> dict[str, list[str]]:
    """Split name -> files, from a file, a folder, or ``data_files``."""
    if dataset is not None and os.path.isdir(dataset):
        root = Path(dataset)
        found = sorted(p for p in root.rglob("*") if p.is_file() and format_of(str(p)) is not None
                       and not any(part.startswith(".") for part in p.relative_to(root).parts))  # fmt: skip
        if not found:
            raise CorpusError(f"{root}: no corpus files ({', '.join(FORMATS)}, or WikiExtractor output) in this folder")
        splits: dict[str, list[str]] = {}
        for p in found:
            splits.setdefault(split_of(p.relative_to(root).as_posix()), []).append(str(p))
        return splits
    if dataset is not None:
        data_files = str(dataset)
    if isinstance(data_files, (str, os.PathLike)):
        data_files = [data_files]
    if not isinstance(data_files, Mapping):
        data_files = {"train": data_files}
    splits = {}
    for name, patterns in data_files.items():
        patterns = [patterns] if isinstance(patterns, (str, os.PathLike)) else patterns
        files = [f for p in patterns for f in _expand(str(p))]
        if not files:
            raise FileNotFoundError(f"no corpus files match {patterns} (split {name!r})")
        if unsupported := [f for f in files if format_of(f) is None]:
            raise CorpusError(f"{unsupported[0]}: unsupported file type; expected one of {', '.join(FORMATS)}, or "
                              "WikiExtractor output")  # fmt: skip
        splits.setdefault(_SPLIT_WORDS.get(name, name), []).extend(files)
    return splits


def _load_local(
    splits: dict[str, list[str]], text_column: str, streaming: bool, exclude_titles: tuple[str, ...], keep_titles: bool
) -> datasets.DatasetDict | datasets.IterableDatasetDict:
    loaded = {}
    for name, paths in splits.items():
        files = [(os.path.abspath(p), os.stat(p).st_size, os.stat(p).st_mtime_ns) for p in paths]
        # `files` is the one list: datasets shards over lists (streaming: each process reads whole files).
        gen_kwargs = {"files": files, "text_column": text_column, "exclude_titles": exclude_titles,
                      "keep_titles": keep_titles}  # fmt: skip
        if streaming:
            loaded[name] = datasets.IterableDataset.from_generator(_generate, gen_kwargs=gen_kwargs, split=name)
            continue
        key = hashlib.sha1(repr((_READER_VERSION, name, files, text_column, sorted(exclude_titles), keep_titles))
                           .encode()).hexdigest()  # fmt: skip
        try:
            loaded[name] = datasets.Dataset.from_generator(
                _generate, gen_kwargs=gen_kwargs, split=name, fingerprint=key
            )
        except datasets.exceptions.DatasetGenerationError as e:
            if isinstance(e.__cause__, CorpusError):
                raise e.__cause__ from None
            raise
    return (datasets.IterableDatasetDict if streaming else datasets.DatasetDict)(loaded)


def missing_local_path(name: str) -> bool:
    """Whether `name` can only be a local path (absolute, starting with `.` or `~`, more than one `/`) and nothing is
    there: it is no Hub id either, and asking the Hub would hide the typo behind a network error."""
    path_like = os.path.isabs(name) or name.startswith((".", "~")) or name.count("/") > 1 or "\\" in name
    return path_like and not os.path.exists(name)


def load_hub_dataset(name: str, *args, **kwargs) -> datasets.DatasetDict | datasets.IterableDatasetDict:
    """`datasets.load_dataset(name, ...)`: a Hub dataset, or a local folder `datasets` reads. A missing local path
    (`missing_local_path`, or a name with a data file's suffix) is refused before the Hub is asked; so is a name the
    Hub cannot be asked about (offline, unreachable), rather than with a network error."""
    if missing_local_path(name) or Path(name).suffix.lower() in FORMATS and not os.path.exists(name):
        raise FileNotFoundError(f"{name} does not exist (no such local file or folder)")
    try:
        return datasets.load_dataset(name, *args, **kwargs)
    except ConnectionError as error:
        raise FileNotFoundError(f"{name} does not exist as a local file or folder, and the Hub cannot be asked for "
                                f"a dataset of that name ({error})") from None  # fmt: skip


def _heldout(batch: dict[str, list], seed: int, fraction: float, keep: bool) -> list[bool]:
    """For each text, whether it belongs to the held-out validation split (== ``keep``)."""
    threshold = int(fraction * 2**64)
    return [
        (int.from_bytes(hashlib.sha1(f"{seed}\0{text}".encode()).digest()[:8], "big") < threshold) == keep
        for text in batch["text"]
    ]


def _with_validation(
    corpus: datasets.DatasetDict | datasets.IterableDatasetDict, name: str, fraction: float, seed: int
) -> datasets.DatasetDict | datasets.IterableDatasetDict:
    """Add a ``validation`` split held out from ``train`` if there is none; a corpus without ``train`` (a folder of
    ``valid.txt`` and ``test.txt``) is refused, naming the splits it has, rather than failing at its first use.

    Membership is decided by a seeded hash of each text, so it is the same streaming or not,
    does not depend on the order of the examples, and duplicates never straddle the two splits.
    """
    if "train" not in corpus:
        raise CorpusError(
            f"{name}: no training text; its splits are {', '.join(map(repr, corpus)) or 'none'} (a corpus file goes "
            "to 'train' unless its path says validation, valid, val, dev or test): add a training file, or give "
            "data_files with a train split"
        )
    if "validation" in corpus:
        return corpus
    logger.warning(
        "%s has no validation split; holding out ~%.0f%% of 'train' as 'validation' (hash of the text, seed %d)",
        name, 100 * fraction, seed,
    )  # fmt: skip
    train = corpus["train"]
    if isinstance(train, datasets.IterableDataset):
        kwargs = {"seed": seed, "fraction": fraction}
        corpus["validation"] = train.filter(_heldout, batched=True, fn_kwargs={**kwargs, "keep": True})
        corpus["train"] = train.filter(_heldout, batched=True, fn_kwargs={**kwargs, "keep": False})
        return corpus
    mask = np.concatenate(
        [np.asarray(_heldout(batch, seed, fraction, True), dtype=bool)
         for batch in train.select_columns("text").iter(batch_size=10_000)]
    )  # fmt: skip
    if fraction > 0 and (mask.all() or not mask.any()):
        raise CorpusError(
            f"{name}: {len(train)} texts are too few to hold out a validation split (~{100 * fraction:.0f}% of them, "
            f"chosen by a hash of each text, leaves {'no training' if mask.all() else 'no validation'} text): add "
            "text, or give validation text of your own (a file whose name says validation, valid or dev in a corpus "
            "folder, or data_files with a validation split)"
        )
    corpus["validation"] = train.select(np.flatnonzero(mask))
    corpus["train"] = train.select(np.flatnonzero(~mask))
    return corpus


def load_corpus(
    dataset: str | os.PathLike | None = None,
    *,
    data_files: str | Sequence[str] | Mapping[str, str | Sequence[str]] | None = None,
    text_column: str = "text",
    split: str | None = None,
    streaming: bool = False,
    validation_fraction: float = 0.05,
    seed: int = 0,
    exclude_titles: Sequence[str] = (),
    keep_titles: bool = False,
) -> Corpus:
    """Load a corpus with a ``text`` column and ``train``/``validation`` splits.

    Args:
        dataset: ``None`` for the default corpus (stdlib docstrings); a local file or folder
            (see the module docstring for formats); otherwise a Hub dataset name.
        data_files: local files (a path, glob, list, or split name -> paths) when ``dataset`` is
            None; passed on to ``datasets.load_dataset`` with a Hub name.
        text_column: the column holding the text; renamed to ``text`` in the result.
        split: one split to return (e.g. ``"train"``); ``None`` returns them all as a dict.
        streaming: return ``IterableDataset``s that read lazily.
        validation_fraction, seed: how a validation split is held out of ``train`` when the
            source has none.
        exclude_titles: WikiExtractor input: articles to leave out, by title (each must be in the corpus).
        keep_titles: WikiExtractor input: keep each article's title line at the start of its text.

    Raises:
        CorpusError: malformed local input (the message names the file and line).
    """
    if dataset is not None:
        dataset = os.path.expanduser(dataset)
    article_options = [option for option, given in (("exclude_titles", exclude_titles), ("keep_titles", keep_titles))
                       if given]  # fmt: skip
    apply = f"{' and '.join(article_options)} appl{'y' if len(article_options) > 1 else 'ies'}"
    if dataset is None and data_files is None:
        name = "default corpus"
        if article_options:
            raise CorpusError(f"{name}: {apply} to WikiExtractor output, which it is not")
        corpus = load_default_corpus()
        if streaming:
            corpus = datasets.IterableDatasetDict({k: v.to_iterable_dataset() for k, v in corpus.items()})
    elif dataset is None or os.path.exists(dataset):
        if dataset is not None and data_files is not None:
            raise ValueError("pass a local path or data_files, not both")
        name = str(dataset if dataset is not None else data_files)
        splits = _local_splits(dataset, data_files)
        if article_options:
            articles = [path for paths in splits.values() for path in paths if format_of(path) == "wikiextractor"]
            if not articles:
                raise CorpusError(f"{name}: {apply} to the articles of WikiExtractor output, and this corpus "
                                  "has none")  # fmt: skip
        if exclude_titles:
            check_titles_present(articles, exclude_titles, name)
        corpus = _load_local(splits, text_column, streaming, tuple(exclude_titles), keep_titles)
    else:
        name = dataset
        if article_options:
            raise CorpusError(f"{name}: {apply} to a local folder of WikiExtractor output")
        corpus = load_hub_dataset(dataset, data_files=data_files, streaming=streaming)
        corpus = corpus.__class__({_SPLIT_WORDS.get(k, k): v for k, v in corpus.items()})
        for split_name, part in corpus.items():
            columns = part.column_names
            if columns is not None and text_column not in columns:
                raise _missing_column(f"{name} ({split_name})", text_column, columns)
            if text_column != "text":
                corpus[split_name] = part.rename_column(text_column, "text")
    corpus = _with_validation(corpus, name, validation_fraction, seed)
    if split is None:
        return corpus
    if split not in corpus:
        raise KeyError(f"{name} has no split {split!r}; splits: {', '.join(corpus)}")
    return corpus[split]
