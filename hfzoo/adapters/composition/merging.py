"""PEFT-merged composition (`compose(..., merge="ties"|"dare_linear"|...)`): the LoRA adapters merged into one
through PEFT's own `add_weighted_adapter`, which the composition then applies as a single adapter. LoRA only: PEFT
merges nothing else."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import torch
from peft import PeftModel
from peft.tuners.lora import LoraLayer
from safetensors.torch import save_file
from transformers import PreTrainedModel

from ..peft_warnings import building_peft_model
from .stacking.lora import LoraFactors, StackedLoRA
from .task_adapter import ADAPTER_CONFIG, ADAPTER_WEIGHTS, KEY_PREFIX, TaskAdapter

MERGED = "__merged__"  # the merged adapter's name


def merge_with_peft(base_model: PreTrainedModel, adapters: list[TaskAdapter], options: dict) -> TaskAdapter:
    """Merge the LoRA adapters into one with PEFT's `add_weighted_adapter`, then give the base model back intact."""
    for adapter in adapters:
        if adapter.peft_type != StackedLoRA.peft_type:
            raise ValueError(
                f"merge={options['merge']!r} merges LoRA adapters through PEFT; adapter {adapter.name!r} is a "
                f"{adapter.kind} adapter (use merge=None: output averaging)"
            )
    requires_grad = {name: p.requires_grad for name, p in base_model.named_parameters()}
    merged = TaskAdapter(MERGED, None, StackedLoRA.peft_type, {"merge": options["merge"]})
    scratch = tempfile.TemporaryDirectory(prefix="hfzoo-merge-")
    folders = [lora_only_copy(adapter, Path(scratch.name) / adapter.name) for adapter in adapters]
    with building_peft_model():
        peft_model = PeftModel.from_pretrained(base_model, folders[0], adapter_name=adapters[0].name)
    try:
        for adapter, folder in zip(adapters[1:], folders[1:]):
            peft_model.load_adapter(folder, adapter_name=adapter.name)
        density = {} if options["density"] is None else {"density": options["density"]}
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(options["seed"])
            peft_model.add_weighted_adapter(
                [a.name for a in adapters], options["weights"], MERGED, combination_type=options["merge"], **density
            )
        for path, module in peft_model.base_model.model.named_modules():
            if isinstance(module, LoraLayer) and MERGED in module.lora_A:
                A, B = module.lora_A[MERGED].weight.detach().clone(), module.lora_B[MERGED].weight.detach().clone()
                merged.modules[path] = LoraFactors(A, B, module.scaling[MERGED])
    finally:
        peft_model.unload()
        scratch.cleanup()
        for name, parameter in base_model.named_parameters():
            parameter.requires_grad_(requires_grad[name])
    return merged


def lora_only_copy(adapter: TaskAdapter, folder: Path) -> Path:
    """`adapter`'s LoRA factors alone as a PEFT folder, for `add_weighted_adapter`: PEFT refuses to merge adapters
    that save their own copy of a module (modules_to_save, e.g. a classification head), and a task type would add
    one (PEFT's sequence classification saves `score`/`classifier` by default). The heads are averaged as outputs
    by the composition itself."""
    folder.mkdir(parents=True)
    config = {**adapter.config, "modules_to_save": None, "task_type": None}
    (folder / ADAPTER_CONFIG).write_text(json.dumps(config), encoding="utf-8")
    tensors = {}
    for path, factors in adapter.modules.items():
        tensors[f"{KEY_PREFIX}{path}.lora_A.weight"] = factors.A.contiguous()
        tensors[f"{KEY_PREFIX}{path}.lora_B.weight"] = factors.B.contiguous()
    save_file(tensors, folder / ADAPTER_WEIGHTS, metadata={"format": "pt"})
    return folder
