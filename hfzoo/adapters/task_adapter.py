"""Task adapters read from PEFT folders and checked against a base model, for any method in `METHOD_STACKS`.

A PEFT adapter folder (`adapter_config.json` + `adapter_model.safetensors`) is parsed here without PEFT and never
through pickle (`read_adapter`): the method (by `peft_type`) says which tensors are its factors and which options
it supports; every other tensor must be a `modules_to_save` copy of a module (a head, e.g. a classifier).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from torch import nn

from .stacking import METHOD_STACKS, MethodStack
from .stacking.base import expect_shape

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
KEY_PREFIX = "base_model.model."  # PEFT's prefix of every saved tensor key


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
    config = json.loads(config_file.read_text(encoding="utf-8"))
    peft_type = config.get("peft_type")
    if peft_type not in METHOD_STACKS:
        raise ValueError(
            f"adapter {name!r} ({folder}) is a {peft_type} adapter; compositions take {', '.join(METHOD_STACKS)}"
        )
    stack_type = METHOD_STACKS[peft_type]
    stack_type.check_options(name, config)
    adapter = TaskAdapter(name, folder, peft_type, config)
    factors: dict[str, dict[str, torch.Tensor]] = {}
    for key, tensor in load_file(weights_file).items():
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
