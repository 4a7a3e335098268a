"""The file check a model's own code runs before loading a local checkpoint: weights load from whole safetensors
files only. transformers names neither a truncated `model.safetensors` (safetensors' bare `Error while
deserializing header`) nor the pickle it falls back to, and it unpickles a file that `config.json` names in
`transformers_weights` even with `use_safetensors=True`. hfzoo's fuller checks (a config's JSON named with its line
and column) are `checkpoint_files`, which is not copied into checkpoints.
"""

import json
import re
from pathlib import Path
from typing import NoReturn

from safetensors import SafetensorError, safe_open

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
WEIGHTS_INDEX_NAME = "model.safetensors.index.json"
# The shards of transformers' distributed (DCP) checkpoints: safetensors too.
_DISTRIBUTED_SHARD = re.compile(r"^shard-[0-9]{5}-model-[0-9]{5}-of-[0-9]{5}\.safetensors$")
_PICKLED_WEIGHTS = ("pytorch_model.bin", "pytorch_model.bin.index.json")


class CheckpointFileError(OSError):
    """A file of a checkpoint folder is missing, unreadable or not safetensors; the message names it.

    An `OSError`, as transformers raises for a checkpoint it cannot find, so callers catching that still do.
    """


def weight_files(folder: Path, config: dict) -> list[Path]:
    """The safetensors files transformers would load from `folder`, or `CheckpointFileError` saying what is missing."""
    explicit = config.get("transformers_weights")
    if explicit is not None:
        # A config may name its weights file; transformers accepts `adapter_model.bin` there, a pickle.
        if not str(explicit).endswith((".safetensors", ".safetensors.index.json")):
            raise CheckpointFileError(
                f"{folder / CONFIG_NAME} names its weights {explicit!r} (transformers_weights), which is not a "
                "safetensors file; hfzoo loads weights from safetensors only."
            )
        named = folder / explicit
        return _shards(named) if named.name.endswith(".index.json") else [named]
    if (folder / WEIGHTS_NAME).is_file():
        return [folder / WEIGHTS_NAME]
    if (folder / WEIGHTS_INDEX_NAME).is_file():
        return _shards(folder / WEIGHTS_INDEX_NAME)
    distributed = sorted(p for p in folder.iterdir() if _DISTRIBUTED_SHARD.match(p.name))
    if distributed:
        return distributed
    refuse_missing_safetensors(folder, f"{WEIGHTS_NAME} (nor {WEIGHTS_INDEX_NAME})", _PICKLED_WEIGHTS)


def refuse_missing_safetensors(folder: Path, expected: str, pickled_names: tuple[str, ...]) -> NoReturn:
    """Raise `CheckpointFileError`: `folder` lacks its safetensors weights `expected`. Pickled weights in their place
    (`pickled_names`, e.g. `pytorch_model.bin`, `adapter_model.bin`) are named and never loaded: transformers and PEFT
    would unpickle them, and unpickling can run code. For models and adapters alike."""
    pickled = [name for name in pickled_names if (folder / name).exists()]
    found = (
        f" It has {', '.join(pickled)}, a pickle, which can run code when loaded and which hfzoo never loads; "
        "convert it to safetensors where you trust its origin (load it and `save_pretrained` it again)."
        if pickled
        else " Was the save interrupted, or is this the wrong folder?"
    )
    raise CheckpointFileError(f"{folder} has no {expected}.{found}")


def _shards(index_path: Path) -> list[Path]:
    try:
        weight_map = json.loads(index_path.read_text(encoding="utf-8")).get("weight_map")
    except (ValueError, AttributeError) as error:  # not JSON, or not a JSON object
        raise CheckpointFileError(f"{index_path} is not a JSON object ({error}); save the model again.") from error
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointFileError(f"{index_path} has no `weight_map` from parameter names to shard files.")
    return [index_path.parent / name for name in sorted(set(weight_map.values()))]


def check_safetensors_file(path: Path) -> None:
    """Open the header of `path` (safetensors checks it against the file's size): `CheckpointFileError` naming the
    file when it is missing, truncated or not safetensors."""
    if not path.is_file():
        raise CheckpointFileError(f"{path} is missing; the checkpoint is incomplete. Save or copy it again.")
    try:
        with safe_open(str(path), framework="pt") as weights:
            weights.keys()
    except (SafetensorError, OSError) as error:
        raise CheckpointFileError(
            f"{path} is not a readable safetensors file ({path.stat().st_size} bytes: {error}): it is truncated or "
            "corrupted, e.g. by an interrupted save or copy. Save or copy it again."
        ) from error


def check_weight_files(folder: Path, config: dict) -> None:
    """`CheckpointFileError` naming the file unless the weights of `folder` (whose `config.json` holds `config`) are
    safetensors files that are all present and readable."""
    for path in weight_files(folder, config):
        check_safetensors_file(path)


def check_local_weights(folder: str | Path) -> None:
    """`check_weight_files` for a local folder; an unreadable `config.json` is left for transformers to name."""
    try:
        config = json.loads((Path(folder) / CONFIG_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config = {}
    check_weight_files(Path(folder), config if isinstance(config, dict) else {})
