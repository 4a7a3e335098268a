"""The inputs outside a checkpoint that decide what a resumed run computes: the tokenizer's files and the data files.

A checkpoint holds the weights, the optimizer and where the run was in its data, and `check_resumed_config` keeps the
config; but the token ids come from tokenizer files beside the run (the output folder's trained tokenizer, or the base
model's), and the examples from data files read again on resume. Swapping two vocabulary ids, or editing the training
file in place under the same path, would resume silently to other weights. So each checkpoint records their sizes and
SHA-256 (`inputs.json`, listed in the manifest like every other file), and `check_resumed_inputs` refuses a resume
whose inputs differ, naming the file and what changed, before anything is read or trained.

A Hub dataset or a tokenizer given by its Hub name is recorded by name only (in the config): it has no local file to
hash here.
"""

from __future__ import annotations

import glob
import hashlib
import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from transformers import PreTrainedTokenizerBase
from transformers.tokenization_utils_base import (
    ADDED_TOKENS_FILE, CHAT_TEMPLATE_FILE, FULL_TOKENIZER_FILE, SPECIAL_TOKENS_MAP_FILE, TOKENIZER_CONFIG_FILE,
)  # fmt: skip

from .checkpointing import INPUTS_FILE, CheckpointError

logger = logging.getLogger(__name__)

# The files any tokenizer's save_pretrained may write besides its own vocabulary files (`vocab_files_names`).
_TOKENIZER_FILES = (TOKENIZER_CONFIG_FILE, SPECIAL_TOKENS_MAP_FILE, ADDED_TOKENS_FILE, CHAT_TEMPLATE_FILE,
                    FULL_TOKENIZER_FILE)  # fmt: skip


def _fingerprint(path: Path) -> dict[str, Any] | None:
    """{size, sha256} of a file, None when it does not exist."""
    if not path.is_file():
        return None
    with path.open("rb") as file:
        return {"size": path.stat().st_size, "sha256": hashlib.file_digest(file, "sha256").hexdigest()}


def tokenizer_file_names(tokenizer: PreTrainedTokenizerBase) -> list[str]:
    """The names of the files that make up `tokenizer` when saved (its vocabulary files and its configuration)."""
    return sorted({*tokenizer.vocab_files_names.values(), *_TOKENIZER_FILES})


def local_data_files(sources: Iterable[Any]) -> list[Path]:
    """The local files a run reads its data from: each source a file, a folder (every file in it but hidden ones), a
    glob, or a list / split -> paths mapping of those; a source that is not local (a Hub name, None) gives none."""
    found: list[Path] = []
    for source in sources:
        if isinstance(source, dict):
            found += local_data_files(source.values())
        elif isinstance(source, (list, tuple)):
            found += local_data_files(source)
        elif isinstance(source, (str, os.PathLike)):
            path = Path(os.path.expanduser(source))
            if path.is_dir():
                found += sorted(p for p in path.rglob("*") if p.is_file()
                                and not any(part.startswith(".") for part in p.relative_to(path).parts))  # fmt: skip
            elif path.is_file():
                found.append(path)
            elif any(c in str(source) for c in "*?["):
                found += [Path(p) for p in sorted(glob.glob(str(path), recursive=True)) if Path(p).is_file()]
    return list(dict.fromkeys(found))


def run_inputs(tokenizer_folder: str | os.PathLike | None, tokenizer_names: Iterable[str], data: Iterable[Any]) -> dict:
    """What `inputs.json` records: the tokenizer files named `tokenizer_names` that exist in `tokenizer_folder` (None:
    the tokenizer has no local folder) by name, and the local data files of the `data` sources by path."""
    tokenizer = {}
    if tokenizer_folder is not None:
        for name in tokenizer_names:
            if (found := _fingerprint(Path(tokenizer_folder) / name)) is not None:
                tokenizer[name] = found
    return {"tokenizer": tokenizer, "data": {path.as_posix(): _fingerprint(path) for path in local_data_files(data)}}


def _what_changed(saved: dict[str, Any], now: dict[str, Any] | None) -> str | None:
    if now is None:
        return "is missing"
    if now["size"] != saved["size"]:
        return f"has changed: {now['size']} bytes, {saved['size']} when the checkpoint was saved"
    if now["sha256"] != saved["sha256"]:
        return "has changed: same size, but its SHA-256 differs from the one recorded when the checkpoint was saved"
    return None


def check_resumed_inputs(
    checkpoint: str | os.PathLike, tokenizer_folder: str | os.PathLike | None, data: Iterable[Any]
) -> None:
    """Refuse to resume `checkpoint` when a tokenizer file it recorded (looked up in `tokenizer_folder`) or a data file
    of the `data` sources is missing, changed, or new since it was saved, naming the file and what changed. Reads only
    the files' bytes: call it before loading the tokenizer or the data. A checkpoint without `inputs.json` (an older
    hfzoo) is resumed with a warning."""
    checkpoint = Path(checkpoint)
    if not (checkpoint / INPUTS_FILE).is_file():
        logger.warning("%s records no tokenizer and data fingerprints (%s): resuming unchecked", checkpoint,
                       INPUTS_FILE)
        return
    saved = json.loads((checkpoint / INPUTS_FILE).read_text())
    problems = []
    if saved["tokenizer"] and tokenizer_folder is None:
        problems.append(f"the run's tokenizer was read from files ({', '.join(saved['tokenizer'])}), now it is not")
    elif saved["tokenizer"]:
        for name, recorded in saved["tokenizer"].items():
            file = Path(tokenizer_folder) / name
            if (what := _what_changed(recorded, _fingerprint(file))) is not None:
                problems.append(f"tokenizer file {file} {what}")
    current = run_inputs(None, (), data)["data"]
    for path, recorded in saved["data"].items():
        if (what := _what_changed(recorded, current.get(path))) is not None:
            problems.append(f"data file {path} {what}")
    problems += [f"data file {path} is new (not read by the checkpointed run)" for path in current
                 if path not in saved["data"]]  # fmt: skip
    if problems:
        raise CheckpointError(
            f"resume: the run's inputs differ from those {checkpoint} was trained on: {'; '.join(problems)}. Resuming "
            "would not continue the same run: restore them, or start a new run in another --output_dir"
        )
