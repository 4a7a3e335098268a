"""Task adapters read from PEFT folders and checked against a base model, for any method in `METHOD_STACKS`.

A PEFT adapter folder (`adapter_config.json` + `adapter_model.safetensors`) is parsed here without PEFT and never
through pickle (`read_adapter`): the method (by `peft_type`) says which tensors are its factors and which options
it supports; every other tensor must be a `modules_to_save` copy of a module (a head, e.g. a classifier).

The families' models share module names (`model.layers.0.self_attn.qkv_proj` on a decoder and on an encoder), so an
adapter's tensors alone may fit a base it was not trained on. hfzoo therefore saves the base's identity beside PEFT's
files (`hfzoo_base.json`, `save_base_identity`: model type, sizes, path, hashes of its `config.json` and of its
safetensors weights) and `check_base` refuses another kind of base naming both. A base of the same kind and sizes with
other weights (another seed) or another config (another dropout) is only told apart by the hashes: `check_base_files`
refuses it, or with `allow_other_base` says so in one line, for `hfzoo generate`, `hfzoo convert adapter-to-native`,
`hfzoo finetune --adapter` and `hfzoo compose` (`ComposedModel.check_base_weights`). PEFT's own
`PeftModel.from_pretrained` offers no hook to check it (it reads the files it knows), so loading an hfzoo adapter with
plain PEFT does not check the base: compare `hfzoo_base.json` with the base's config, or load the adapter through
`compose` or `hfzoo finetune --adapter`, which also check an adapter without the record (a plain PEFT save) by its keys
and shapes (`check_fits`, `check_adapter_fits`). Where two families share module names and sizes (hfzoo's decoder and
encoder do), keys and shapes cannot tell them apart: only the record, or the config of the base PEFT names, can.

Adapter weights are read from `adapter_model.safetensors` only (`adapter_weights_file`): a folder holding PEFT's
pickled `adapter_model.bin` instead is refused, naming it.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from peft import PeftConfig, get_peft_model, get_peft_model_state_dict
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file
from torch import nn

from ...core.files import published_folder, write_atomic
from ...core.recorded_paths import copied_record, recorded_path, resolve_recorded
from ...models.checked_loading import listed_keys
from ...models.checkpoint_files import (
    CONFIG_NAME, CheckpointFileError, check_safetensors_file, read_json_file, refuse_missing_safetensors, weight_files,
)  # fmt: skip
from ..peft_warnings import building_peft_model
from .stacking import METHOD_STACKS, MethodStack
from .stacking.base import expect_shape

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
PICKLED_ADAPTER_WEIGHTS = "adapter_model.bin"  # PEFT's pickle format: never loaded
KEY_PREFIX = "base_model.model."  # PEFT's prefix of every saved tensor key
BASE_RECORD = "hfzoo_base.json"  # the base model an adapter was trained on (`save_base_identity`)
# The config fields that make a base model a different one for an adapter (beside the model type).
_IDENTITY_FIELDS = ("hidden_size", "num_hidden_layers", "vocab_size")
_LAYER_INDEX = re.compile(r"\.[0-9]+\.")  # a layer's index in a module path
# The files of a base an adapter records by hash: what a message calls them -> the record's key.
_BASE_FILES = {"config.json": "config_sha256", "weights": "weights_sha256"}
logger = logging.getLogger(__name__)


@dataclass
class TaskAdapter:
    """A PEFT adapter as plain tensors: per adapted module its factors, per saved head its parameters."""

    name: str
    folder: Path | None
    peft_type: str  # a key of METHOD_STACKS
    config: dict
    modules: dict[str, Any] = field(default_factory=dict)
    heads: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)
    rank: int = 0  # the largest over modules (`MethodStack.rank_part`)
    base: dict | None = None  # the base it was trained on (`BASE_RECORD`), when hfzoo saved it

    @property
    def kind(self) -> str:
        """The adapter method as PEFT names it in lower case ("lora", "bottleneck", "ia3")."""
        return self.peft_type.lower()

    @property
    def stack_type(self) -> type[MethodStack]:
        return METHOD_STACKS[self.peft_type]


def read_adapter(name: str, folder: str | Path) -> TaskAdapter:
    """Parse the PEFT adapter in `folder` (safetensors only); unsupported options raise an error naming them."""
    folder = Path(folder)
    config_file = folder / ADAPTER_CONFIG
    if not config_file.is_file():
        raise FileNotFoundError(f"adapter {name!r}: no {ADAPTER_CONFIG} in {folder}")
    weights_file = adapter_weights_file(folder)
    config = read_json_file(config_file)
    peft_type = config.get("peft_type")
    if peft_type not in METHOD_STACKS:
        raise ValueError(
            f"adapter {name!r} ({folder}) is a {peft_type} adapter; compositions take {', '.join(METHOD_STACKS)}"
        )
    stack_type = METHOD_STACKS[peft_type]
    stack_type.check_options(name, config)
    adapter = TaskAdapter(name, folder, peft_type, config)
    adapter.base = recorded_base(folder, config)
    factors: dict[str, dict[str, torch.Tensor]] = {}
    for key, tensor in load_safetensors(weights_file).items():
        if not key.startswith(KEY_PREFIX):
            raise ValueError(f"adapter {name!r}: tensor {key!r} lacks PEFT's {KEY_PREFIX!r} prefix")
        key = key[len(KEY_PREFIX):]
        match = stack_type.factor_key.fullmatch(key)
        if match:
            factors.setdefault(match["module"], {})[match["part"]] = tensor
            continue
        module, _, param = key.rpartition(".")
        if not _is_saved_module(module, config.get("modules_to_save") or []):
            raise ValueError(
                f"adapter {name!r} holds tensor {key!r}, which is neither a {adapter.kind} factor nor a "
                "`modules_to_save` copy (LoRA on embeddings or other layer kinds is not supported)"
            )
        adapter.heads.setdefault(module, {})[param] = tensor
    for module, parts in factors.items():
        adapter.modules[module] = stack_type.read_factors(name, config, module, parts)
        rank = 1 if stack_type.rank_part is None else parts[stack_type.rank_part].shape[0]
        adapter.rank = max(adapter.rank, rank)
    return adapter


def adapter_weights_file(folder: Path) -> Path:
    """The adapter's `adapter_model.safetensors`, checked before PEFT or hfzoo reads it: a folder holding only a
    pickled `adapter_model.bin` (which PEFT would unpickle) is refused, and a truncated file is named
    (`CheckpointFileError`)."""
    weights = folder / ADAPTER_WEIGHTS
    if not weights.is_file():
        refuse_missing_safetensors(folder, ADAPTER_WEIGHTS, (PICKLED_ADAPTER_WEIGHTS,))
    check_safetensors_file(weights)
    return weights


def load_safetensors(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of `path`; a missing, truncated or corrupted file raises `CheckpointFileError` naming it (not
    safetensors' bare `SafetensorError`)."""
    check_safetensors_file(path)
    try:
        return load_file(path)
    except (SafetensorError, OSError) as error:
        raise CheckpointFileError(f"{path} is not a readable safetensors file ({error}); save or copy it again.") from error


def _is_saved_module(module: str, modules_to_save: list[str]) -> bool:
    return any(module == saved or module.endswith("." + saved) for saved in modules_to_save)


def check_fits(adapter: TaskAdapter, model: nn.Module) -> None:
    """Raise an error naming the module, the expected and the found shape where `adapter` does not fit `model`."""
    for path, factors in adapter.modules.items():
        adapter.stack_type.check_fits(adapter.name, path, _module_at(adapter, model, path), model, factors)
    for path, params in adapter.heads.items():
        module = _module_at(adapter, model, path)
        if not isinstance(module, nn.Linear):
            raise ValueError(
                f"adapter {adapter.name!r} saves its own copy of {path} (modules_to_save), a "
                f"{type(module).__name__}; compositions stack saved copies of nn.Linear heads only"
            )
        for param, tensor in params.items():
            expect_shape(adapter.name, path, param, tuple(getattr(module, param).shape), tensor)


def _module_at(adapter: TaskAdapter, model: nn.Module, path: str) -> nn.Module:
    try:
        return model.get_submodule(path)
    except AttributeError:
        raise ValueError(
            f"adapter {adapter.name!r} adapts {path}, which the base model ({type(model).__name__}, "
            f"model_type {getattr(model.config, 'model_type', None)!r}) does not have"
        ) from None


# ----------------------------------------------------------------------------------------------- base identity
def base_identity(model: nn.Module) -> dict:
    """What identifies `model` as the base of an adapter: model type, sizes, where it was loaded from, and the
    SHA-256 of that folder's `config.json` (None for a model built in memory)."""
    config = model.config
    identity = {"model_type": config.model_type, **{key: getattr(config, key, None) for key in _IDENTITY_FIELDS}}
    path = getattr(model, "name_or_path", "") or ""
    config_file = Path(path) / "config.json" if path else None
    digest = hashlib.sha256(config_file.read_bytes()).hexdigest() if config_file and config_file.is_file() else None
    return {**identity, "base_model": path or None, "config_sha256": digest}


def recorded_base(folder: Path, config: dict) -> dict | None:
    """The adapter's base identity: its `BASE_RECORD`, else read from the `config.json` of the local folder PEFT
    recorded as `base_model_name_or_path` (when it still exists; as hfzoo writes it, relative to the adapter folder,
    `hfzoo convert`'s adapters too), else None."""
    if (folder / BASE_RECORD).is_file():
        recorded = read_json_file(folder / BASE_RECORD)
        if isinstance(recorded.get("base_model"), str):  # relative to the adapter folder, wherever it now is
            recorded["base_model"] = resolve_recorded(recorded["base_model"], folder)
        return recorded
    base = config.get("base_model_name_or_path")
    return folder_identity(resolve_recorded(base, folder) if isinstance(base, str) else None)


def folder_identity(base: str | None) -> dict | None:
    """`base_identity` of the checkpoint in the local folder `base`, read from its `config.json` (a base given by its
    folder, not loaded); None where there is no readable one."""
    config_file = Path(base) / CONFIG_NAME if base else None
    if config_file is None or not config_file.is_file():
        return None
    try:
        values = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # not ours to judge: the base is checked when it loads
    identity = {key: values.get(key) for key in ("model_type", *_IDENTITY_FIELDS)}
    return {**identity, "base_model": base, "config_sha256": hashlib.sha256(config_file.read_bytes()).hexdigest()}


def weights_sha256(base: str | None) -> str | None:
    """SHA-256 of the bytes (header and data) of the safetensors files the local checkpoint folder `base` loads its
    weights from, in the order transformers reads them; None where `base` is no local folder with such files (a Hub
    name, a model built in memory). Hashed once per set of files as they are on disk (path, size, modification time):
    each adapter of a composition checks the same base."""
    if not base or not Path(base).is_dir():
        return None
    folder = Path(base)
    try:
        config = read_json_file(folder / CONFIG_NAME) if (folder / CONFIG_NAME).is_file() else {}
        files = weight_files(folder, config)
    except CheckpointFileError:
        return None
    return _files_sha256(tuple((str(path), path.stat().st_size, path.stat().st_mtime_ns) for path in files))


@functools.lru_cache(maxsize=8)
def _files_sha256(files: tuple[tuple[str, int, int], ...]) -> str:
    digest = hashlib.sha256()
    for path, _, _ in files:
        with open(path, "rb") as stream:
            while chunk := stream.read(1 << 24):
                digest.update(chunk)
    return digest.hexdigest()


def recorded_base_path(folder: str | Path, model: nn.Module) -> str | None:
    """Where an adapter saved into `folder` records that its base `model` loads from, in `BASE_RECORD` and as PEFT's
    `base_model_name_or_path`: a local base by its path relative to the folder `folder` is published as (no path of
    the machine, and it holds when both are moved together), a Hub name as it is; None for a model built in memory."""
    path = getattr(model, "name_or_path", "") or ""
    return recorded_path(path, published_folder(folder)) if path else None


def save_base_identity(folder: str | Path, model: nn.Module) -> None:
    """Write `BASE_RECORD` into the adapter folder `folder`: the identity of `model`, the adapter's base, by the path
    `recorded_base_path` gives, with the hash of its weights (`weights_sha256`)."""
    identity = base_identity(model)
    identity["weights_sha256"] = weights_sha256(identity["base_model"])
    identity["base_model"] = recorded_base_path(folder, model)
    text = json.dumps(identity, indent=2, sort_keys=True)
    write_atomic(Path(folder) / BASE_RECORD, text + "\n")


def copied_records(adapter: TaskAdapter, copy: Path) -> dict[str, dict]:
    """`adapter`'s `ADAPTER_CONFIG` and (when hfzoo saved one) `BASE_RECORD` as a copy of the adapter published as
    the folder `copy` holds them (a composition's `adapters/<name>/`): the base's path recorded again, relative to
    where the copy is published, so that it still names the base (`copied_record`)."""
    where = published_folder(copy)
    records = {ADAPTER_CONFIG: dict(adapter.config)}
    if (adapter.folder / BASE_RECORD).is_file():
        records[BASE_RECORD] = read_json_file(adapter.folder / BASE_RECORD)
    for file, key in ((ADAPTER_CONFIG, "base_model_name_or_path"), (BASE_RECORD, "base_model")):
        if isinstance(records.get(file, {}).get(key), str):
            records[file][key] = copied_record(records[file][key], adapter.folder, where)
    return records


def describe_base(identity: dict) -> str:
    sizes = ", ".join(f"{key} {identity.get(key)}" for key in _IDENTITY_FIELDS)
    where = f" from {identity['base_model']}" if identity.get("base_model") else ""
    return f"{identity.get('model_type')} ({sizes}){where}"


def base_differences(first: dict, second: dict) -> list[str]:
    """The identity fields (model type and sizes) in which two base identities differ; a field one of them lacks
    (a native config.json names its sizes otherwise, e.g. GPT-2's `n_embd`) is not compared."""
    keys = ("model_type", *_IDENTITY_FIELDS)
    return [k for k in keys if None not in (first.get(k), second.get(k)) and first.get(k) != second.get(k)]


def check_recorded_base(name: str, folder: Path | None, recorded: dict | None, model: nn.Module) -> None:
    """Refuse `model` as the base of the adapter `name` in `folder` when its model type or sizes differ from the base
    the adapter recorded (`recorded_base`; None: nothing recorded, nothing to compare)."""
    if recorded is None:
        return
    current = base_identity(model)
    differs = base_differences(recorded, current)
    if differs:
        raise ValueError(
            f"adapter {name!r} ({folder}) was trained on {describe_base(recorded)}; the base model is "
            f"{describe_base(current)} (differs in {', '.join(differs)}). Load it on the base it was trained on."
        )


def check_base_files(
    name: str, folder: Path | None, recorded: dict | None, current: dict | None, allow_other_base: bool = False
) -> None:
    """Refuse the base `current` (a `base_identity`) for the adapter `name` in `folder` when its `config.json` or its
    weights differ from those the adapter recorded (`recorded_base`: the hashes in `BASE_RECORD`): a base of the same
    kind and sizes, but another one (another seed's weights, another dropout), on which the adapter computes something
    it was not trained for. `allow_other_base`: say so in one line instead. A record saved before weights were hashed
    (or a plain PEFT save, whose base is only a path) gets the type and size checks alone, and a base without a local
    folder (a Hub name) is not hashed. Only a base of the recorded side is compared (the same model type, or the very
    config: an adapter trained with `import_native` records the native files): a base of the other side (`hfzoo
    convert`) has other files by construction."""
    if recorded is None or current is None or recorded.get("weights_sha256") is None:
        return
    same_side = recorded.get("model_type") == current.get("model_type") or recorded.get("config_sha256") == current.get(
        "config_sha256"
    )
    if not same_side:
        return
    current = {**current, "weights_sha256": weights_sha256(current.get("base_model"))}
    differs = [what for what, key in _BASE_FILES.items()
               if None not in (recorded.get(key), current.get(key)) and recorded[key] != current[key]]  # fmt: skip
    if not differs:
        return
    trained_on = f" ({recorded['base_model']})" if recorded.get("base_model") else ""
    message = (
        f"the base model {current.get('base_model')} is not the one adapter {name!r} ({folder}) was trained "
        f"on{trained_on}: its {' and '.join(differs)} differ from the recorded ones (the same model type and sizes: "
        "another seed's weights, another dropout, ...)"
    )
    if allow_other_base:
        logger.warning("%s; used anyway (--allow_other_base)", message)
        return
    raise ValueError(f"{message}. Use the base it was trained on, or pass --allow_other_base to use it on this one.")


def check_adapter_fits(folder: Path, base: nn.Module, described: str) -> None:
    """Refuse the PEFT adapter in `folder` unless its saved tensors are exactly those PEFT makes for it on `base`
    (`described` in the error), by key and shape: a `ValueError` naming the file and the keys. For any PEFT method and
    for a plain PEFT save, which records no base; before PEFT loads it, which skips tensors of modules the base lacks
    (an adapter trained on a deeper model) and leaves those it misses at their initialisation (a shallower one), with
    a warning at most. `base` is best on the meta device (module kinds and shapes, no weights): PEFT's adapter is built
    on a copy of it."""
    peft_config = PeftConfig.from_pretrained(str(folder))
    peft_config.base_model_name_or_path = None  # this copy only measures: PEFT would warn that `base` is another path
    with building_peft_model():
        peft_model = get_peft_model(copy.deepcopy(base), peft_config)
    # As hfzoo saves adapters (`save_embedding_layers=False`: the recipes never resize the vocabulary).
    state = get_peft_model_state_dict(peft_model, save_embedding_layers=False)
    expected = {key: tuple(tensor.shape) for key, tensor in state.items()}
    weights = folder / ADAPTER_WEIGHTS
    with safe_open(str(weights), framework="pt") as saved_file:
        saved = {key: tuple(saved_file.get_slice(key).get_shape()) for key in saved_file.keys()}
    problems = []
    for what, keys in (("the base has no place for", sorted(set(saved) - set(expected))),
                       ("the base needs but the file lacks", sorted(set(expected) - set(saved)))):  # fmt: skip
        if keys:
            problems.append(f"{len(keys)} tensors {what} ({listed_keys(keys)})")
    # A trained head's copy (`modules_to_save`) is sized by the task (its number of labels), not by the base.
    heads = peft_config.modules_to_save or []
    reshaped = [f"{key} {list(saved[key])} where the base needs {list(expected[key])}"
                for key in sorted(set(saved) & set(expected))
                if saved[key] != expected[key] and not _is_saved_module(key.rpartition(".")[0], heads)]  # fmt: skip
    if reshaped:
        problems.append(f"{len(reshaped)} tensors of another shape ({listed_keys(reshaped)})")
    if problems:
        raise ValueError(f"{weights} does not fit the base model {described}: {'; '.join(problems)}. It was trained on "
                         "another base; use the base it was trained on.")  # fmt: skip


def check_base(adapter: TaskAdapter, model: nn.Module) -> None:
    """Refuse `model` as the base of `adapter` when it is not the kind of model the adapter was trained on: by the
    adapter's `BASE_RECORD` (model type and sizes) when hfzoo saved one, and, with or without it, when the adapter
    covers fewer layers than the base has (e.g. a 2-layer adapter on a 4-layer model, or the reverse, which
    `check_fits` finds as a missing module)."""
    check_recorded_base(adapter.name, adapter.folder, adapter.base, model)
    config = adapter.config
    if isinstance(config.get("target_modules"), str) or any(
        config.get(key) for key in ("layers_to_transform", "layers_pattern", "exclude_modules")
    ):
        return  # the adapter may adapt some layers only, on purpose
    names = [name for name, _ in model.named_modules()]
    for pattern in sorted({_LAYER_INDEX.sub(".*.", path) for path in adapter.modules}):
        matcher = re.compile(re.escape(pattern).replace(r"\.\*\.", r"\.[0-9]+\."))
        in_base = [name for name in names if matcher.fullmatch(name)]
        adapted = [path for path in adapter.modules if matcher.fullmatch(path)]
        if len(adapted) < len(in_base):
            raise ValueError(
                f"adapter {adapter.name!r} ({adapter.folder}) adapts {len(adapted)} modules {pattern} but the base "
                f"model ({type(model).__name__}, model_type {getattr(model.config, 'model_type', None)!r}) has "
                f"{len(in_base)}: it was trained on a model with other layers. Load it on the base it was trained on."
            )

