"""PEFT adapters between an hfzoo model and its native counterpart (`from_native` / `to_native`): an adapter trained
on one side attaches to the other with plain `PeftModel.from_pretrained` and computes the same outputs.

The family's weight rules (`mapping.Rule`) say where each adapted module lives on the other side and how its weight
is re-arranged, and the adapter follows the weight:
- LoRA's update `scaling * B @ A` is a weight and re-arranges like one. A renamed module keeps A and B; GPT-2's
  transposed `Conv1D` keeps them too (PEFT applies them transposed there: `fan_in_fan_out`); hfzoo's fused
  `qkv_proj` (Llama's gate|up `up_proj`) becomes native q, k and v with the same A and B's row blocks (same rank and
  alpha). Back, native q, k, v join into the fused module: to the very same factors when they share A and scaling
  (as mapped ones do), else with their As stacked and B block-diagonal (rank the sum of theirs, a projection
  without LoRA contributing zero rows), which is exact too.
- A bottleneck adapter acts on its module's output, so it maps only where that output is the same tensor on both
  sides (a renamed or transposed module); on a fused projection it is refused, naming the module.
- `modules_to_save` copies (a trained head, a pooler) convert like the weights they are.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch
import transformers
from peft.utils.other import get_pattern_key
from safetensors.torch import save_file
from torch import nn
from transformers import AutoConfig, PreTrainedModel
from transformers.pytorch_utils import Conv1D

from .. import models
from ..adapters.composition.task_adapter import (
    ADAPTER_CONFIG, ADAPTER_WEIGHTS, KEY_PREFIX, adapter_weights_file, base_identity, check_adapter_fits,
    check_base_files, folder_identity, load_safetensors, recorded_base,
)  # fmt: skip
from ..core.files import check_output_folder, staged
from ..core.recorded_paths import recorded_path
from ..integrations.transformers import model_from_config
from ..models.checkpoint_files import read_json_file
from .api import FAMILIES, TOKENIZER_FILES, native_family, zoo_source
from .family import Head, NativeFamily
from .mapping import Rule, convert_state

Tensor = torch.Tensor
ADAPTER_TO_NATIVE, ADAPTER_FROM_NATIVE = "hfzoo convert adapter-to-native", "hfzoo convert adapter-from-native"
# The head an adapter was trained with, from its PEFT task type: the suffix of the hfzoo class's name.
TASK_HEADS = {
    "SEQ_CLS": "ForSequenceClassification", "TOKEN_CLS": "ForTokenClassification",
    "QUESTION_ANS": "ForQuestionAnswering", "CAUSAL_LM": "ForCausalLM", "SEQ_2_SEQ_LM": "ForConditionalGeneration",
    "FEATURE_EXTRACTION": "Model",
}  # fmt: skip
METHOD_PARTS = {
    "LORA": ("lora_", {"lora_A.weight", "lora_B.weight"}),
    "BOTTLENECK": ("bottleneck_", {f"bottleneck_{p}.{t}" for p in ("down", "up", "norm") for t in ("weight", "bias")}),
}
# LoRA options that put tensors or modules where this mapping does not follow them: refused by name.
UNSUPPORTED_LORA_OPTIONS = (
    "use_dora", "lora_bias", "target_parameters", "trainable_token_indices", "layer_replication",
    "alora_invocation_tokens",
)  # fmt: skip


@dataclass
class Pairing:
    """The hfzoo head and the native head of one family, on the meta device (module kinds and shapes, no weights),
    and the rules between their weights."""

    zoo: nn.Module
    native: nn.Module
    rules: list[Rule]

    def rule_of_module(self, to_native: bool) -> dict[str, Rule]:
        """Module path on the source side -> the rule of its weight."""
        index = {}
        for rule in self.rules:
            for key in rule.zoo if to_native else rule.native:
                module, _, parameter = key.rpartition(".")
                if parameter == "weight":
                    index[module] = rule
        return index


def adapter_to_native(
    adapter_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    base: PreTrainedModel | str | os.PathLike,
    overwrite: bool = False,
    allow_other_base: bool = False,
) -> Path:
    """Map a PEFT adapter (LoRA or bottleneck) trained on an hfzoo model to the native model's module names, so that
    `PeftModel.from_pretrained(native_model, out_dir)` computes what the hfzoo model with the adapter computes.

    `base` says which pair of models: the native model or the hfzoo one (a model, or a checkpoint folder); the head
    is the one the adapter's PEFT `task_type` trains (else `base`'s). An adapter that does not fit `base` by its keys
    and shapes (another depth or width) is refused before anything is written, and so is a module whose adapter has
    no exact native counterpart, naming it; so is a `base` of the adapter's recorded side whose weights or config
    differ from those it recorded (another base of the same shape: `check_base_files`), unless `allow_other_base`.
    `out_dir` gets `adapter_config.json`, `adapter_model.safetensors` and the
    adapter folder's tokenizer files; returns it. A folder of other files is refused unless `overwrite` (only the
    mapped adapter's files change there), and so are the adapter's and the base's folders and folders inside or
    around them, all before anything is read.
    """
    return _map_adapter(Path(adapter_dir), Path(out_dir), base, True, overwrite, allow_other_base)


def adapter_from_native(
    adapter_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    base: PreTrainedModel | str | os.PathLike,
    overwrite: bool = False,
    allow_other_base: bool = False,
) -> Path:
    """The reverse of `adapter_to_native`: a PEFT adapter trained on a native model (GPT-2, Llama, BERT, ...) mapped
    to the hfzoo model `from_native` makes of it, for `PeftModel.from_pretrained(zoo_model, out_dir)`."""
    return _map_adapter(Path(adapter_dir), Path(out_dir), base, False, overwrite, allow_other_base)


def pairing(base: PreTrainedModel | str | os.PathLike, task_type: str | None) -> Pairing:
    """The hfzoo and native heads for `base` (either side, a model or a folder) and an adapter of `task_type`."""
    config = base.config if isinstance(base, PreTrainedModel) else AutoConfig.from_pretrained(base)
    class_name = type(base).__name__ if isinstance(base, PreTrainedModel) else (config.architectures or [""])[0]
    if any(family.zoo_config_class is type(config) for family in FAMILIES.values()):
        zoo_class = type(base) if isinstance(base, PreTrainedModel) else getattr(models, class_name, None)
        if zoo_class is None:
            raise ValueError(f"{base}/config.json: `architectures` is {config.architectures}, no hfzoo model class.")
        family = native_family(config, head_name=class_name)
        head = _task_head(family, task_type) or family.head_for_zoo(zoo_class)
        zoo_config, native_config = config, family.native_config(config)
    else:
        family = FAMILIES.get(config.model_type)
        if family is None:
            raise ValueError(
                f"model_type {config.model_type!r} has no hfzoo conversion; supported: {', '.join(FAMILIES)}."
            )
        head = _task_head(family, task_type) or family.head_for_native(class_name)
        native_config = config
        with torch.device("meta"):
            native = model_from_config(getattr(transformers, head.native_class), native_config)
        zoo_config = family.zoo_config_class(**family.zoo_config(native))
    with torch.device("meta"):
        zoo = model_from_config(head.zoo_class, zoo_config)
        native = model_from_config(
            getattr(transformers, head.native_class), native_config, **family.head_kwargs(head, zoo_config)
        )
    return Pairing(zoo, native, family.rules(head, zoo_config, native_config))


def _task_head(family: NativeFamily, task_type: str | None) -> Head | None:
    if task_type is None:
        return None
    suffix = TASK_HEADS.get(task_type)
    heads = [head for head in family.heads if suffix and head.zoo_class.__name__.endswith(suffix)]
    if not heads:
        pairs = ", ".join(f"{head.zoo_class.__name__} <-> {head.native_class}" for head in family.heads)
        raise ValueError(
            f"the adapter's PEFT task_type {task_type!r} trains a head that hfzoo.convert has no {family.model_type} "
            f"pair for; the pairs are {pairs}."
        )
    return heads[0]


def _map_adapter(
    adapter_dir: Path, out_dir: Path, base, to_native: bool, overwrite: bool, allow_other_base: bool
) -> Path:
    command = ADAPTER_TO_NATIVE if to_native else ADAPTER_FROM_NATIVE
    base_folder = None if isinstance(base, PreTrainedModel) else base
    check_output_folder(out_dir, command, overwrite=overwrite, inputs=[adapter_dir, base_folder])
    config = read_json_file(adapter_dir / ADAPTER_CONFIG)
    peft_type = config.get("peft_type")
    if peft_type not in METHOD_PARTS:
        raise ValueError(f"{adapter_dir} is a {peft_type} adapter; hfzoo.convert maps LoRA and bottleneck adapters.")
    refused = [name for name in UNSUPPORTED_LORA_OPTIONS if peft_type == "LORA" and config.get(name)]
    if refused:
        raise ValueError(f"{adapter_dir}: LoRA with {', '.join(refused)} cannot be mapped (their tensors or modules "
                         "have no rule here); train the adapter without them.")  # fmt: skip
    weights = adapter_weights_file(adapter_dir)
    pair = pairing(base, config.get("task_type"))
    # The adapter must fit `base` (its side of the pair, on the meta device) before anything is mapped or written.
    described = type(base).__name__ if isinstance(base, PreTrainedModel) else str(base)
    check_adapter_fits(adapter_dir, pair.zoo if to_native else pair.native, described)
    current = base_identity(base) if isinstance(base, PreTrainedModel) else folder_identity(str(base))
    check_base_files(adapter_dir.name, adapter_dir, recorded_base(adapter_dir, config), current, allow_other_base)
    factors, saved = _split(load_safetensors(weights), *METHOD_PARTS[peft_type])
    if peft_type == "LORA":
        mapped = (_lora_to_native if to_native else _lora_from_native)(config, factors, pair)
        tensors, new_config = _lora_files(config, mapped, pair, to_native)
    else:
        tensors, targets = _bottleneck_to_other_side(factors, pair, to_native)
        new_config = {**config, "target_modules": targets}
    target_keys = set((pair.native if to_native else pair.zoo).state_dict())
    sources = [(rule, rule.zoo if to_native else rule.native) for rule in pair.rules]
    rules = [rule for rule, keys in sources if keys and set(keys) <= set(saved)]
    copies = convert_state(saved, rules, to_zoo=not to_native, source_name=f"{adapter_dir} (modules_to_save)")
    outside = sorted(set(copies) - target_keys)
    if outside:
        raise ValueError(f"{adapter_dir}: the saved module copies map to {outside[0]}, which the target model lacks.")
    tensors.update(copies)
    new_config["modules_to_save"] = sorted({key.rpartition(".")[0] for key in copies}) or None
    new_config["base_model_name_or_path"] = _target_base_path(base, to_native, out_dir)
    _write(adapter_dir, out_dir, new_config, tensors, command)
    return out_dir


def _target_base_path(base, to_native: bool, out_dir: Path) -> str | None:
    """Where the mapped adapter's base loads from (PEFT's `base_model_name_or_path`): the folder of `base` when that
    folder holds a model of the target side (for a model `from_native` made, the native folder it was imported from),
    relative to `out_dir` as hfzoo records an adapter's base (`recorded_path`: no path of the machine; a Hub name as
    it is); else unknown (None). hfzoo's readers resolve it against the adapter folder (`recorded_base`); PEFT's
    `AutoPeftModel` would read it from the working directory: give `PeftModel.from_pretrained` the base model."""
    path = str(zoo_source(base) if isinstance(base, PreTrainedModel) else base)
    try:
        config = AutoConfig.from_pretrained(path) if path else None
    except (OSError, ValueError):  # a model built in memory, a folder since moved, a Hub name offline
        return None
    target_side = config is not None and (config.model_type in FAMILIES) == to_native
    return recorded_path(path, out_dir) if target_side else None


def _split(tensors: dict[str, Tensor], prefix: str, parts: set[str]) -> tuple[dict[str, dict[str, Tensor]], dict]:
    """(module -> {factor name: tensor}, the other tensors: `modules_to_save` copies), keys without PEFT's prefix."""
    factors: dict[str, dict[str, Tensor]] = {}
    saved = {}
    for key, tensor in tensors.items():
        key = key.removeprefix(KEY_PREFIX)
        names = key.split(".")
        at = next((i for i, name in enumerate(names) if name.startswith(prefix)), None)
        if at is None:
            saved[key] = tensor
            continue
        module, part = ".".join(names[:at]), ".".join(names[at:])
        if part not in parts:
            raise ValueError(f"{module}: the adapter tensor {part} (e.g. LoRA on an embedding) cannot be mapped.")
        factors.setdefault(module, {})[part] = tensor
    return factors, saved


def _module(weight_key: str) -> str:
    return weight_key.removesuffix(".weight")


# ----------------------------------------------------------------------------------------------- LoRA
@dataclass
class LoraFactors:
    """One module's LoRA: A [r, in], B [out, r] and alpha (scaling = alpha / r, or / sqrt(r) with rsLoRA)."""

    A: Tensor
    B: Tensor
    alpha: float


def _alpha(config: dict, module: str) -> float:
    pattern = config.get("alpha_pattern") or {}
    return pattern.get(get_pattern_key(list(pattern), module), config["lora_alpha"])


def _scaling(config: dict, factors: LoraFactors) -> float:
    rank = factors.A.shape[0]
    return factors.alpha / (math.sqrt(rank) if config.get("use_rslora") else rank)


def _read_lora(config: dict, factors: dict[str, dict[str, Tensor]]) -> dict[str, LoraFactors]:
    return {m: LoraFactors(f["lora_A.weight"], f["lora_B.weight"], _alpha(config, m)) for m, f in factors.items()}


def _lora_rule(index: dict[str, Rule], module: str, layouts: tuple[str, ...]) -> Rule:
    rule = index.get(module)
    if rule is None or rule.layout not in layouts:
        what = "no weight the conversion maps" if rule is None else f"a weight the conversion maps as {rule.layout!r}"
        raise ValueError(f"LoRA on {module}: the module has {what}, so no LoRA on the other side computes the same.")
    return rule


def _lora_to_native(config: dict, factors: dict, pair: Pairing) -> dict[str, LoraFactors]:
    """Each hfzoo module's LoRA on its native module(s): A kept, B re-arranged as the weight's rows are."""
    index, mapped = pair.rule_of_module(to_native=True), {}
    for module, lora in _read_lora(config, factors).items():
        rule = _lora_rule(index, module, ("same", "transposed", "rows", "scaled"))
        blocks = [lora.B] * len(rule.native) if rule.layout == "transposed" else rule.to_native([lora.B])
        for key, block in zip(rule.native, blocks):
            mapped[_module(key)] = LoraFactors(lora.A, block.contiguous(), lora.alpha)
    return mapped


def _lora_from_native(config: dict, factors: dict, pair: Pairing) -> dict[str, LoraFactors]:
    """The native modules' LoRAs on hfzoo's modules; the parts of a fused module join (`_join`)."""
    index, mapped = pair.rule_of_module(to_native=False), {}
    by_rule: dict[int, dict[str, LoraFactors]] = {}
    for module, lora in _read_lora(config, factors).items():
        rule = _lora_rule(index, module, ("same", "transposed", "rows", "scaled"))
        by_rule.setdefault(id(rule), {})[module] = lora
    rules = {id(rule): rule for rule in index.values()}
    shapes = {key: tuple(t.shape) for key, t in pair.native.state_dict().items()}
    for rule_id, parts in by_rule.items():
        rule = rules[rule_id]
        if rule.layout == "transposed":
            lora = next(iter(parts.values()))
        else:
            lora = _join(config, rule, parts, shapes)
        mapped[_module(rule.zoo[0])] = lora
    return mapped


def _join(config: dict, rule: Rule, parts: dict[str, LoraFactors], shapes: dict[str, tuple]) -> LoraFactors:
    """The LoRA of the hfzoo module that `rule` makes of the native ones, from the LoRAs on some or all of them."""
    present = [parts.get(_module(key)) for key in rule.native]
    loras = [lora for lora in present if lora is not None]
    first = loras[0]
    scaling = _scaling(config, first)
    shared = all(
        lora is not None and torch.equal(lora.A, first.A) and _scaling(config, lora) == scaling for lora in present
    )
    if shared:  # what adapter_to_native made of a fused module: the same factors back
        return LoraFactors(first.A, rule.to_zoo([lora.B for lora in present])[0], first.alpha)
    rank = sum(lora.A.shape[0] for lora in loras)
    blocks, column = [], 0
    for key, lora in zip(rule.native, present):
        block = first.B.new_zeros(shapes[key][0], rank)
        if lora is not None:
            width = lora.A.shape[0]
            block[:, column : column + width] = lora.B * (_scaling(config, lora) / scaling)
            column += width
        blocks.append(block)
    alpha = scaling * (math.sqrt(rank) if config.get("use_rslora") else rank)
    return LoraFactors(torch.cat([lora.A for lora in loras]), rule.to_zoo(blocks)[0], alpha)


def _lora_files(config: dict, mapped: dict[str, LoraFactors], pair: Pairing, to_native: bool) -> tuple[dict, dict]:
    """(tensors, adapter_config) of the mapped LoRA: every target named in full, the ranks and alphas that differ
    from the config's `r` and `lora_alpha` in `rank_pattern` / `alpha_pattern`."""
    target = pair.native if to_native else pair.zoo
    conv1d = {isinstance(target.get_submodule(module), Conv1D) for module in mapped}
    if len(conv1d) > 1:
        raise ValueError("the mapped LoRA would adapt both Conv1D and nn.Linear modules, which one PEFT config "
                         "(fan_in_fan_out) cannot express; map adapters on one kind of module.")  # fmt: skip
    tensors, ranks, alphas = {}, {}, {}
    for module, lora in mapped.items():
        tensors[f"{module}.lora_A.weight"], tensors[f"{module}.lora_B.weight"] = lora.A, lora.B
        if lora.A.shape[0] != config["r"]:
            ranks[re.escape(module)] = lora.A.shape[0]
        if lora.alpha != config["lora_alpha"]:
            alphas[re.escape(module)] = lora.alpha
    new_config = {
        **config, "target_modules": sorted(mapped), "rank_pattern": ranks, "alpha_pattern": alphas,
        "fan_in_fan_out": conv1d == {True}, "exclude_modules": None, "layers_to_transform": None,
        "layers_pattern": None,
    }  # fmt: skip
    return tensors, new_config


# ----------------------------------------------------------------------------------------------- bottleneck
def _bottleneck_to_other_side(factors: dict, pair: Pairing, to_native: bool) -> tuple[dict, list[str]]:
    """A bottleneck adapter on the module whose output is the same tensor on the other side."""
    index, tensors = pair.rule_of_module(to_native), {}
    for module, parts in factors.items():
        rule = index.get(module)
        if rule is None or rule.layout not in ("same", "transposed"):
            other = ", ".join(_module(key) for key in (rule.native if to_native else rule.zoo)) if rule else "nothing"
            raise ValueError(
                f"bottleneck adapter on {module}: it adds to the module's output, and the other side computes that "
                f"output in {other} ({rule.layout if rule else 'no rule'}); no adapter there computes the same. "
                "Adapt a module both sides have (an output projection), or use LoRA."
            )
        other = _module((rule.native if to_native else rule.zoo)[0])
        tensors.update({f"{other}.{part}": tensor for part, tensor in parts.items()})
    return tensors, sorted({key.split(".bottleneck_")[0] for key in tensors})


def _write(adapter_dir: Path, out_dir: Path, config: dict, tensors: dict[str, Tensor], command: str) -> None:
    """The mapped adapter and the adapter folder's tokenizer files, published as the output of `command`."""
    weights = {KEY_PREFIX + key: tensor.clone() for key, tensor in tensors.items()}  # one file entry each: no sharing
    with staged(out_dir, command) as staging:
        save_file(weights, staging / ADAPTER_WEIGHTS, metadata={"format": "pt"})
        (staging / ADAPTER_CONFIG).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        for name in TOKENIZER_FILES:
            if (adapter_dir / name).is_file():
                shutil.copy2(adapter_dir / name, staging / name)
