"""Checks on a checkpoint folder before its weights load, so that a broken or unsafe folder fails naming the file.

Without them a truncated `model.safetensors` fails with safetensors' bare `Error while deserializing header`, a
folder without it makes transformers look for `pytorch_model.bin`, which it unpickles (pickle can run code), and an
invalid `config.json` fails without saying where. hfzoo loads weights from safetensors only (`use_safetensors=True`);
these checks say which file is missing or broken. The weight checks are `checkpoint_guard`, which the model code
carries into every saved checkpoint; this module adds the JSON checks and is not copied with them (no modeling file
imports it), so the package may use it as a library.
"""

import json
from pathlib import Path

from .checkpoint_guard import (  # noqa: F401  (the names hfzoo imports from here)
    CONFIG_NAME,
    WEIGHTS_INDEX_NAME,
    WEIGHTS_NAME,
    CheckpointFileError,
    check_safetensors_file,
    check_weight_files,
    refuse_missing_safetensors,
    weight_files,
)


def read_json_file(path: Path) -> dict:
    """A JSON object from `path`, or `CheckpointFileError` naming it and the line and column where it breaks."""
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as error:
        raise CheckpointFileError(f"{path} is not UTF-8 text ({error}); save it again.") from error
    except json.JSONDecodeError as error:
        raise CheckpointFileError(
            f"{path} is not valid JSON: {error.msg} at line {error.lineno}, column {error.colno}. The file is "
            "corrupted or was edited by hand; fix it or save the model again."
        ) from error
    if not isinstance(values, dict):
        raise CheckpointFileError(f"{path} must hold a JSON object, found {type(values).__name__}.")
    return values


def check_checkpoint_folder(folder: str | Path, weights: bool = True) -> None:
    """Check a local checkpoint folder before loading it: `config.json` (when present) is valid JSON and, with
    `weights`, the weights are safetensors files that are all present and readable. Raises `CheckpointFileError`
    naming the file; `weights=False` for a folder only the architecture is read from."""
    folder = Path(folder)
    config_path = folder / CONFIG_NAME
    config = read_json_file(config_path) if config_path.is_file() else {}
    if weights:
        check_weight_files(folder, config)
