"""Task adapters read from PEFT folders and checked against a base model, for any method in `METHOD_STACKS`.

A PEFT adapter folder (`adapter_config.json` + `adapter_model.safetensors`) is parsed here without PEFT and never
through pickle (`read_adapter`): the method (by `peft_type`) says which tensors are its factors and which options
it supports; every other tensor must be a `modules_to_save` copy of a module (a head, e.g. a classifier).

The families' models share module names (`model.layers.0.self_attn.qkv_proj` on a decoder and on an encoder), so
an adapter's tensors alone may fit a base it was not trained on. hfzoo therefore saves the base's identity beside
PEFT's files (`hfzoo_base.json`, `save_base_identity`: model type, sizes, path, a hash of its `config.json`) and
`check_base` refuses another base naming both. PEFT's own `PeftModel.from_pretrained` offers no hook to check it
(it reads the files it knows), so loading an hfzoo adapter with plain PEFT does not check the base: compare
`hfzoo_base.json` with the base's config, or load the adapter through `compose`.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import nn

from ..files import write_atomic
from ..models.checkpoint_files import CheckpointFileError, check_safetensors_file, read_json_file
from .stacking import METHOD_STACKS, MethodStack
from .stacking.base import expect_shape

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
KEY_PREFIX = "base_model.model."  # PEFT's prefix of every saved tensor key
BASE_RECORD = "hfzoo_base.json"  # the base model an adapter was trained on (`save_base_identity`)
# The config fields that make a base model a different one for an adapter (beside the model type).
_IDENTITY_FIELDS = ("hidden_size", "num_hidden_layers", "vocab_size")
_LAYER_INDEX = re.compile(r"\.[0-9]+\.")  # a layer's index in a module path


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
    config_file, weights_file = folder / ADAPTER_CONFIG, folder / ADAPTER_WEIGHTS
    if not config_file.is_file():
        raise FileNotFoundError(f"adapter {name!r}: no {ADAPTER_CONFIG} in {folder}")
    if not weights_file.is_file():
        pickled = " (there is an adapter_model.bin: compositions read safetensors only, never pickle)"
        raise FileNotFoundError(
            f"adapter {name!r}: no {ADAPTER_WEIGHTS} in {folder}"
            + (pickled if (folder / "adapter_model.bin").exists() else "")
        )
    config = read_json_file(config_file)
    peft_type = config.get("peft_type")
    if peft_type not in METHOD_STACKS:
        raise ValueError(
            f"adapter {name!r} ({folder}) is a {peft_type} adapter; compositions take {', '.join(METHOD_STACKS)}"
        )
    stack_type = METHOD_STACKS[peft_type]
    stack_type.check_options(name, config)
    adapter = TaskAdapter(name, folder, peft_type, config)
    adapter.base = _recorded_base(folder, config)
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


def _recorded_base(folder: Path, config: dict) -> dict | None:
    """The adapter's base identity: its `BASE_RECORD`, else read from the `config.json` of the local folder PEFT
    recorded as `base_model_name_or_path` (when it still exists), else None."""
    if (folder / BASE_RECORD).is_file():
        return read_json_file(folder / BASE_RECORD)
    base = config.get("base_model_name_or_path")
    config_file = Path(base) / "config.json" if base else None
    if config_file is None or not config_file.is_file():
        return None
    try:
        values = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # not ours to judge: the base is checked when it loads
    identity = {key: values.get(key) for key in ("model_type", *_IDENTITY_FIELDS)}
    return {**identity, "base_model": base, "config_sha256": hashlib.sha256(config_file.read_bytes()).hexdigest()}


def save_base_identity(folder: str | Path, model: nn.Module) -> None:
    """Write `BASE_RECORD` into the adapter folder `folder`: the identity of `model`, the adapter's base."""
    text = json.dumps(base_identity(model), indent=2, sort_keys=True)
    write_atomic(Path(folder) / BASE_RECORD, text + "\n")


def describe_base(identity: dict) -> str:
    sizes = ", ".join(f"{key} {identity.get(key)}" for key in _IDENTITY_FIELDS)
    where = f" from {identity['base_model']}" if identity.get("base_model") else ""
    return f"{identity.get('model_type')} ({sizes}){where}"


def base_differences(first: dict, second: dict) -> list[str]:
    """The identity fields (model type and sizes) in which two base identities differ; a field one of them lacks
    (a native config.json names its sizes otherwise, e.g. GPT-2's `n_embd`) is not compared."""
    keys = ("model_type", *_IDENTITY_FIELDS)
    return [k for k in keys if None not in (first.get(k), second.get(k)) and first.get(k) != second.get(k)]


def check_base(adapter: TaskAdapter, model: nn.Module) -> None:
    """Refuse `model` as the base of `adapter` when it is not the kind of model the adapter was trained on: by the
    adapter's `BASE_RECORD` (model type and sizes) when hfzoo saved one, and, with or without it, when the adapter
    covers fewer layers than the base has (e.g. a 2-layer adapter on a 4-layer model, or the reverse, which
    `check_fits` finds as a missing module)."""
    if adapter.base is not None:
        current = base_identity(model)
        differs = base_differences(adapter.base, current)
        if differs:
            raise ValueError(
                f"adapter {adapter.name!r} ({adapter.folder}) was trained on {describe_base(adapter.base)}; the base "
                f"model is {describe_base(current)} (differs in {', '.join(differs)}). Load it on the base it was "
                "trained on."
            )
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

