"""Task data as records that remember where they came from, so a malformed row is reported by file and line.

A record is `(where, fields)`: `where` reads "path, line N" (or "name[split] row N" for a Hub dataset) and every
error about the row starts with it. The task modules turn records into their examples (and read the formats only
they have: CoNLL text, SQuAD json); this module reads what several tasks share:

* `.csv` (RFC 4180 quoting), `.tsv` (GLUE's convention: no quoting, since its sentences contain `"`) and
  `.jsonl` (one object per line), each with a header or keys naming the columns;
* parallel text: `train.en` + `train.de`, line i of one the translation of line i of the other; the file suffixes
  are the column names (`text_column: en`, `target_column: de`);
* Hub datasets through `datasets.load_dataset`, with `ClassLabel` ids turned back into their names.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ..data.corpus import CorpusError, decoded_lines, split_of, load_hub_dataset

if TYPE_CHECKING:
    from .options import TaskOptions

Record = tuple[str, dict[str, Any]]
TABLE_SUFFIXES = (".csv", ".tsv", ".jsonl")
Example = TypeVar("Example")


class DataError(CorpusError):
    """Malformed task data; the message starts with the file and line (or the SQuAD question id)."""


def column(where: str, fields: dict[str, Any], name: str) -> Any:
    """`fields[name]`, or an error naming the row and the columns it does have."""
    if name not in fields:
        raise DataError(f"{where}: no {name!r} column; the columns are: {', '.join(map(str, fields)) or 'none'}")
    return fields[name]


def text(where: str, fields: dict[str, Any], name: str) -> str:
    """A non-empty string column: empty text is almost always a broken row, never a useful example."""
    value = column(where, fields, name)
    if not isinstance(value, str):
        raise DataError(f"{where}: {name!r} is {type(value).__name__}, not text")
    if not value.strip():
        raise DataError(f"{where}: {name!r} is empty")
    return value


def read_table(path: str | Path) -> list[Record]:
    """The rows of a csv, tsv or jsonl file, each with its line number."""
    path = str(path)
    suffix = Path(path).suffix.lower()
    if suffix == ".jsonl":
        records = []
        for lineno, line in decoded_lines(path):
            if not line.strip():
                continue
            try:
                fields = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"{path}, line {lineno}: malformed JSON ({e.msg} at column {e.pos + 1})") from None
            if not isinstance(fields, dict):
                raise DataError(f"{path}, line {lineno}: expected a JSON object, found {type(fields).__name__}")
            records.append((f"{path}, line {lineno}", fields))
        return records
    if suffix not in (".csv", ".tsv"):
        raise DataError(f"{path}: unsupported table format; expected one of {', '.join(TABLE_SUFFIXES)}")
    dialect = {"delimiter": "\t", "quoting": csv.QUOTE_NONE} if suffix == ".tsv" else {"delimiter": ","}
    reader = csv.reader((line for _, line in decoded_lines(path)), strict=True, **dialect)
    records = []
    try:
        header = next(reader, None)
        if header is None:
            raise DataError(f"{path}: empty file (no header row)")
        start = reader.line_num + 1  # a quoted field can span lines: a row is named by the line it starts on
        for row in reader:
            if row and len(row) != len(header):
                raise DataError(f"{path}, line {start}: {len(row)} fields, the header has {len(header)}")
            if row:
                records.append((f"{path}, line {start}", dict(zip(header, row))))
            start = reader.line_num + 1
    except csv.Error as e:
        raise DataError(f"{path}, line {reader.line_num}: malformed {suffix[1:]} ({e})") from None
    return records


def read_parallel(source_path: str | Path, source_column: str, target_column: str) -> list[Record]:
    """Aligned lines of `X.<source_column>` and its sibling `X.<target_column>` as `{source, target}` records."""
    source_path = Path(source_path)
    target_path = source_path.with_suffix(f".{target_column}")
    if not target_path.is_file():
        raise DataError(f"{source_path}: parallel text needs its target side {target_path}, which does not exist")
    sources = [line.rstrip("\r\n") for _, line in decoded_lines(str(source_path))]
    targets = [line.rstrip("\r\n") for _, line in decoded_lines(str(target_path))]
    if len(sources) != len(targets):
        raise DataError(
            f"{source_path}, line {min(len(sources), len(targets)) + 1}: {len(sources)} lines, but {target_path} has "
            f"{len(targets)}; parallel files must align line by line"
        )
    return [
        (f"{source_path}, line {i} (and {target_path.name})", {source_column: s, target_column: t})
        for i, (s, t) in enumerate(zip(sources, targets), 1)
    ]


def hub_records(name: str, config_name: str | None, split: str) -> list[Record] | None:
    """The rows of a Hub dataset's split (None if it has no such split), class-label ids replaced by names."""
    import datasets

    loaded = load_hub_dataset(name, config_name)
    aliases = {"validation": ("validation", "dev", "valid", "val")}.get(split, (split,))
    found = next((s for s in aliases if s in loaded), None)
    if found is None:
        return None
    part = loaded[found]
    names = {}
    for key, feature in part.features.items():
        inner = getattr(feature, "feature", None)  # a Sequence / List of class labels (NER tags)
        if isinstance(feature, datasets.ClassLabel) or isinstance(inner, datasets.ClassLabel):
            names[key] = (feature if isinstance(feature, datasets.ClassLabel) else inner).names
    records = []
    for i, row in enumerate(part):
        for key, label_names in names.items():
            value = row[key]
            row[key] = [label_names[v] for v in value] if isinstance(value, list) else label_names[value]
        records.append((f"{name}[{found}] row {i}", row))
    return records


def data_files(config: TaskOptions, suffixes: Sequence[str]) -> dict[str, str | None]:
    """`{"train": path, "validation": path or None}` from `train_file`/`validation_file` or a `dataset` folder.

    In a folder, a file's split is the last split word in its name (train; validation/valid/val/dev; test), as for
    pretraining corpora; only files with one of `suffixes` count, and a split must have at most one of them.
    """
    if config.train_file is not None:
        return {"train": config.train_file, "validation": config.validation_file}
    folder = Path(config.dataset)
    found: dict[str, list[Path]] = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and path.suffix.lower() in suffixes and not path.name.startswith("."):
            found.setdefault(split_of(path.relative_to(folder).as_posix()), []).append(path)
    for split in ("train", "validation"):
        if len(found.get(split, [])) > 1:
            raise DataError(
                f"{folder}: several {split} files ({', '.join(p.name for p in found[split])}); "
                "name one with --train_file/--validation_file"
            )
    if "train" not in found:
        raise DataError(
            f"{folder}: no training file with suffix {' or '.join(suffixes)} (a file whose name says train); "
            "give --train_file, and --validation_split to hold part of it out"
        )
    validation = found.get("validation")
    return {"train": str(found["train"][0]), "validation": str(validation[0]) if validation else None}


def hold_out(
    examples: list[Example], fraction: float, group: Callable[[Example], Any]
) -> tuple[list[Example], list[Example]]:
    """(train, validation): the last `fraction` of the groups (SQuAD: articles) in file order are held out.

    Whole groups move, so no question of a held-out article has a sibling in training; taking the end of the file
    (not a random sample) keeps the split the same whatever `max_train_samples` keeps of the beginning.
    """
    groups = list(dict.fromkeys(group(e) for e in examples))
    held = set(groups[len(groups) - max(1, math.ceil(fraction * len(groups))) :])
    if len(held) == len(groups):
        raise DataError(f"validation_split={fraction} would hold out all {len(groups)} groups of the training data")
    return [e for e in examples if group(e) not in held], [e for e in examples if group(e) in held]
