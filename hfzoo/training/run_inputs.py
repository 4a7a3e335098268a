"""The inputs outside a checkpoint that decide what a resumed run computes: the tokenizer's files, the data files, and
the files of the base model and adapters the run starts from.

A checkpoint holds the weights, the optimizer and where the run was in its data, and `check_resumed_config` keeps the
config; but the token ids come from tokenizer files beside the run (the output folder's trained tokenizer, or the base
model's), the examples from data files read again on resume, and the frozen weights (a LoRA fine-tune's base, a
composition's base and adapters) from their folders, which a checkpoint names but does not copy. Swapping two
vocabulary ids, editing the training file in place under the same path, or putting another model of the same shape
where the base was, would resume silently to other weights (a composition trained on, then failed its reload check). So
each checkpoint records their sizes and SHA-256 (`inputs.json`, listed in the manifest like every other file), and
`check_resumed_inputs` refuses a resume whose inputs differ, naming the file and what changed, before anything is read
or trained: a run on other inputs is another run, not the same one resumed.

A Hub dataset or a tokenizer given by its Hub name is recorded by name only (in the config): it has no local file to
hash here. Data and model files are named relative to the run folder (`recorded_path`: no path of the machine in what a
run writes, however it was given), which the file says (`PATHS`); a checkpoint of an older hfzoo names them as they
were given (absolute when given absolute, else from the working directory) and says nothing: it is still checked, its
names read as such (`_run_relative`).
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

from transformers import CONFIG_NAME, PreTrainedTokenizerBase
from transformers.tokenization_utils_base import (
    ADDED_TOKENS_FILE, CHAT_TEMPLATE_FILE, FULL_TOKENIZER_FILE, SPECIAL_TOKENS_MAP_FILE, TOKENIZER_CONFIG_FILE,
)  # fmt: skip

from ..adapters.composition.task_adapter import ADAPTER_CONFIG
from ..core.recorded_paths import recorded_path, resolve_recorded
from .checkpointing import INPUTS_FILE, CheckpointError

logger = logging.getLogger(__name__)

# The files any tokenizer's save_pretrained may write besides its own vocabulary files (`vocab_files_names`).
_TOKENIZER_FILES = (TOKENIZER_CONFIG_FILE, SPECIAL_TOKENS_MAP_FILE, ADDED_TOKENS_FILE, CHAT_TEMPLATE_FILE,
                    FULL_TOKENIZER_FILE)  # fmt: skip
# The files of a model or adapter folder that decide the weights a run starts from: the configs and the tensors.
_MODEL_FILE_PATTERNS = (CONFIG_NAME, ADAPTER_CONFIG, "*.safetensors")
# What `inputs.json` records, by section, and how a refusal names a file of each.
_FILE_KINDS = {"data": "data file", "models": "model file"}
# `inputs.json`'s "paths": how it names data and model files. An older one has no "paths": as the run was given them.
PATHS = "relative to the run folder"


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


def model_files(folders: Iterable[str | os.PathLike | None]) -> list[Path]:
    """The files of the local model and adapter `folders` that decide the weights a run starts from: their configs
    and safetensors files (top level only); a name that is no local folder (a Hub name, a preset) gives none."""
    found: list[Path] = []
    for folder in folders:
        if folder is not None and Path(folder).is_dir():
            found += sorted({p for pattern in _MODEL_FILE_PATTERNS for p in Path(folder).glob(pattern) if p.is_file()})
    return list(dict.fromkeys(found))


def run_inputs(
    run_folder: str | os.PathLike, tokenizer_folder: str | os.PathLike | None, tokenizer_names: Iterable[str],
    data: Iterable[Any], models: Iterable[str | os.PathLike | None] = (),
) -> dict:  # fmt: skip
    """What `inputs.json` records in the checkpoints of the run in `run_folder`: the tokenizer files named
    `tokenizer_names` that exist in `tokenizer_folder` (None: the tokenizer has no local folder) by name, the local data
    files of the `data` sources and the `model_files` of the `models` folders (the base model and adapters the run
    starts from) by their paths relative to `run_folder` (`recorded_path`)."""
    tokenizer = {}
    if tokenizer_folder is not None:
        for name in tokenizer_names:
            if (found := _fingerprint(Path(tokenizer_folder) / name)) is not None:
                tokenizer[name] = found
    files = {"data": local_data_files(data), "models": model_files(models)}
    named = {section: {recorded_path(path, run_folder): _fingerprint(path) for path in paths}
             for section, paths in files.items()}  # fmt: skip
    return {"tokenizer": tokenizer, "paths": PATHS, **named}


def _run_relative(saved: dict, section: str, run_folder: Path) -> dict[str, Any] | None:
    """A section of files of a saved `inputs.json` named as `run_inputs` names them now (relative to `run_folder`):
    an older file's paths as given (absolute, or from the working directory) recorded again; None: no such section."""
    files = saved.get(section)
    if files is None or saved.get("paths") == PATHS:
        return files
    return {recorded_path(name, run_folder): fingerprint for name, fingerprint in files.items()}


def _what_changed(saved: dict[str, Any], now: dict[str, Any] | None) -> str | None:
    if now is None:
        return "is missing"
    if now["size"] != saved["size"]:
        return f"has changed: {now['size']} bytes, {saved['size']} when the checkpoint was saved"
    if now["sha256"] != saved["sha256"]:
        return "has changed: same size, but its SHA-256 differs from the one recorded when the checkpoint was saved"
    return None


def check_resumed_inputs(
    checkpoint: str | os.PathLike, tokenizer_folder: str | os.PathLike | None, data: Iterable[Any],
    models: Iterable[str | os.PathLike | None] = (),
) -> None:  # fmt: skip
    """Refuse to resume `checkpoint` when a tokenizer file it recorded (looked up in `tokenizer_folder`), a data file
    of the `data` sources or a model file of the `models` folders is missing, changed, or new since it was saved,
    naming the file and what changed. Reads only the files' bytes: call it before loading the tokenizer, the data or
    the models. A checkpoint without `inputs.json` (an older hfzoo) is resumed with a warning; one whose
    `inputs.json` has no models' section (also older) resumes without comparing them. Files are compared by their
    paths relative to the checkpoint's run folder (`<run>/checkpoints/step-N`), as `run_inputs` names them."""
    checkpoint = Path(checkpoint)
    run_folder = checkpoint.parent.parent
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
    now = run_inputs(run_folder, None, (), data, models)
    for section, kind in _FILE_KINDS.items():
        recorded_files, current = _run_relative(saved, section, run_folder), now[section]
        if recorded_files is None:
            continue
        for path, recorded in recorded_files.items():  # named in a refusal from the working directory, as given
            if (what := _what_changed(recorded, current.get(path))) is not None:
                problems.append(f"{kind} {resolve_recorded(path, run_folder)} {what}")
        problems += [f"{kind} {resolve_recorded(path, run_folder)} is new (not read by the checkpointed run)"
                     for path in current if path not in recorded_files]  # fmt: skip
    if problems:
        raise CheckpointError(
            f"resume: the run's inputs differ from those {checkpoint} was trained on: {'; '.join(problems)}. Resuming "
            "would not continue the same run: restore them, or start a new run in another --output_dir"
        )
