"""Fine-tuning methods: all weights (`full`), or a PEFT adapter on a frozen base (`lora`, `ia3`, `prefix`,
`bottleneck`, or any PEFT config file such as AdaLoRA).

With an adapter, whatever the pretrained checkpoint did not provide must be trained and saved beside it, or a
reloaded adapter would sit on a freshly random head: the task head (`score` on decoders, `classifier` /
`qa_outputs` on encoders, GPT-2's `score`, BERT's `classifier`, BART's `classification_head`...: every top-level
module outside the pretrained body) and any other weight `from_pretrained` had to initialise (BERT's pooler when the
checkpoint is a masked LM). They go to PEFT's `modules_to_save`, so `PeftModel.from_pretrained` restores them.
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass
from pathlib import Path

from peft import IA3Config, LoraConfig, PeftConfig, PrefixTuningConfig, TaskType, get_peft_model
from peft.mapping import PEFT_TYPE_TO_CONFIG_MAPPING
from peft.utils.peft_types import PeftType
from torch import nn
from transformers.pytorch_utils import Conv1D

from ..core.recipe_config import key, read_yaml
from ..data.tokenizer_training import KINDS
from . import BottleneckConfig
from .peft_warnings import building_peft_model

METHOD_CONFIGS: dict[str, type[PeftConfig]] = {
    "lora": LoraConfig,
    "ia3": IA3Config,
    "prefix": PrefixTuningConfig,
    "bottleneck": BottleneckConfig,
}
# Settings that differ from the PEFT defaults (the LoRA and bottleneck ones are the winners of the adapter defaults
# study, model_cards/results/adapter-defaults-minilm-l6): LoRA on every linear layer of the body with alpha 2r (on
# the attention projection only, as PEFT's per-model default puts it, it stayed 1.6 points behind full fine-tuning on
# SST-2 and 8 on CoNLL-2003 at the same steps); a bottleneck a quarter of the width (Pfeiffer's placement, 1.9% of
# MiniLM's parameters), the most even across both tasks; 20 virtual tokens as in Li & Liang's table-to-text runs
# (PEFT's default needs the value given).
METHOD_DEFAULTS: dict[str, dict] = {
    "lora": {"target_modules": "all-linear", "r": 8, "lora_alpha": 16},
    "bottleneck": {"reduction_factor": 4},
    "prefix": {"num_virtual_tokens": 20},
}
METHODS = ("full", *METHOD_CONFIGS)
# Learning rates when none is given: full fine-tuning moves pretrained weights (BERT: 2e-5 to 5e-5); adapters start
# from zero or near-identity and need larger steps (LoRA, IA3, prefix and bottleneck papers: 1e-4 to 1e-2; in the
# study, LoRA on every linear layer gained 1.6 points on SST-2 and 11.4 on CoNLL-2003 from the LoRA paper's 5e-4 to
# 2e-3, the bottleneck 1.1 and 10.9 from 1e-3 to 3e-3; 1e-2 helped it on CoNLL-2003 and lost 3.8 on SST-2).
DEFAULT_LEARNING_RATES = {"full": 5e-5, "lora": 2e-3, "ia3": 3e-3, "prefix": 1e-2, "bottleneck": 3e-3}


@dataclass
class MethodOptions:
    """The config keys of a fine-tuning method: which weights train, and from which starting point (pretrained
    weights, or random ones with the checkpoint's or a preset's architecture, and the model's tokenizer or one trained
    for the run)."""

    from_scratch: bool = key(
        False, "full fine-tuning of the same architecture from random weights: the baseline that shows what "
        "pretraining is worth"
    )
    train_tokenizer: bool = key(False, "from_scratch: a new tokenizer trained on the task's training texts (seq2seq: "
                                "source and target, one joint vocabulary) instead of the model's; saved with it")
    vocab_size: int = key(8000, "train_tokenizer: its vocabulary, special tokens included", minimum=16)
    tokenizer_kind: str = key("bpe", "train_tokenizer: bpe (byte-level, lossless), wordpiece, unigram or char",
                              choices=KINDS)  # fmt: skip
    method: str = key("full", "all weights, or a PEFT adapter on a frozen base", choices=METHODS,
                      choice_noun="methods")  # fmt: skip
    peft_config: str | None = key(None, "a PEFT config file (JSON/YAML, any method, e.g. AdaLoRA); overrides method")
    method_options: dict = key({}, "fields of the method's PEFT config, e.g. {r: 16, lora_alpha: 32}")

    def check(self) -> None:
        if self.from_scratch and (self.method != "full" or self.peft_config):
            raise ValueError("config key 'from_scratch': an adapter on a randomly initialised body is not a baseline; "
                             "use it with --method full.")
        if self.train_tokenizer and not self.from_scratch:
            raise ValueError("config key 'train_tokenizer': a new vocabulary does not fit the pretrained embeddings; "
                             "use it with --from_scratch true.")  # fmt: skip
        if not self.train_tokenizer and (self.vocab_size != 8000 or self.tokenizer_kind != "bpe"):
            raise ValueError("config keys 'vocab_size' and 'tokenizer_kind' shape the tokenizer a run trains: add "
                             "--train_tokenizer true or drop them.")  # fmt: skip

    def default_learning_rate(self) -> float:
        """The method's learning rate when none is configured (a `--peft_config` file counts as an adapter)."""
        return DEFAULT_LEARNING_RATES["lora" if self.peft_config else self.method]


def head_modules(model: nn.Module, missing_parameters: list[str]) -> list[str]:
    """Names of the modules to train and save with an adapter: the task head and everything not loaded.

    PEFT matches `modules_to_save` by name suffix, so each name must end no other module's name (BART-style heads
    named `dense` would also catch every `dense` of the body); that is checked here rather than found at reload.
    """
    body = model.base_model_prefix
    heads = [name for name, child in model.named_children() if name != body and any(True for _ in child.parameters())]
    for key in missing_parameters:
        module = key.rsplit(".", 1)[0]
        if not any(module == head or module.startswith(f"{head}.") for head in heads):
            heads.append(module)
    names = [name for name, _ in model.named_modules()]
    for head in heads:
        clashes = [n for n in names if n.endswith(head) and n != head]
        if clashes:
            raise ValueError(
                f"the head module {head!r} cannot be saved with an adapter: PEFT's modules_to_save matches names by "
                f"suffix and would also catch {clashes[0]!r}; fine-tune with --method full"
            )
    return heads


def _from_file(path: str) -> PeftConfig:
    """Any PEFT config from a JSON or YAML file (e.g. an `adapter_config.json`, or an AdaLoRA config)."""
    values = read_yaml(Path(path).read_text(encoding="utf-8"), path)  # YAML reads JSON too
    if not isinstance(values, dict) or "peft_type" not in values:
        raise ValueError(f"{path}: a PEFT config is a mapping with a 'peft_type' (e.g. LORA, ADALORA, IA3)")
    peft_type = str(values.pop("peft_type")).upper()
    if peft_type not in PeftType.__members__ or PeftType[peft_type] not in PEFT_TYPE_TO_CONFIG_MAPPING:
        raise ValueError(f"{path}: unknown peft_type {peft_type!r}; PEFT knows {', '.join(PeftType.__members__)}")
    config_cls = PEFT_TYPE_TO_CONFIG_MAPPING[PeftType[peft_type]]
    known = {f.name for f in dataclasses.fields(config_cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"{path}: {config_cls.__name__} has no field {', '.join(map(repr, unknown))}")
    return config_cls(**values)


def peft_config_for(config: MethodOptions, task_type: TaskType, heads: list[str]) -> PeftConfig | None:
    """The run's PEFT config (None for full fine-tuning), with the task type and the heads to save filled in."""
    if config.peft_config is not None:
        peft_config = _from_file(config.peft_config)
    elif config.method == "full":
        return None
    else:
        config_cls = METHOD_CONFIGS[config.method]
        options = {**METHOD_DEFAULTS.get(config.method, {}), **config.method_options}
        known = {f.name for f in dataclasses.fields(config_cls)}
        if unknown := sorted(set(options) - known):
            raise ValueError(
                f"config key 'method_options': {config_cls.__name__} has no field {', '.join(map(repr, unknown))}"
            )
        peft_config = config_cls(**options)
    peft_config.task_type = task_type
    if hasattr(peft_config, "modules_to_save") and heads:
        peft_config.modules_to_save = sorted({*(peft_config.modules_to_save or []), *heads})
    return peft_config


def apply_method(model: nn.Module, peft_config: PeftConfig | None) -> nn.Module:
    """The model to train: itself for full fine-tuning, else a `PeftModel` with a frozen base."""
    if peft_config is None:
        return model
    if peft_config.peft_type == PeftType.PREFIX_TUNING and not _takes_past_key_values(model):
        raise ValueError(
            f"prefix tuning feeds learned keys/values through `past_key_values` (a Cache), which "
            f"{type(model).__name__} does not take: hfzoo decoders and encoder-decoders, GPT-2, Llama and T5 do, "
            "hfzoo encoders and BERT do not. Use --method lora, ia3 or bottleneck."
        )
    if isinstance(peft_config, LoraConfig) and any(isinstance(module, Conv1D) for module in model.modules()):
        # GPT-2 keeps its projections [in, out] (Conv1D): say so, as PEFT would otherwise do itself, with a warning.
        peft_config.fan_in_fan_out = True
    with building_peft_model():
        adapted = get_peft_model(model, peft_config)
    saved = adapted.peft_config[adapted.active_adapter]
    if getattr(saved, "modules_to_save", None):  # PEFT's classifiers append "classifier" and "score" to the heads
        saved.modules_to_save = list(dict.fromkeys(saved.modules_to_save))  # named here: adapter_config.json once each
    return adapted


def _takes_past_key_values(model: nn.Module) -> bool:
    """Whether the model or its body takes `past_key_values`: PEFT's own test, which it only runs at the first
    forward pass (after the data is prepared); here it fails before anything else is done."""
    body = getattr(model, model.base_model_prefix, model)
    return any("past_key_values" in inspect.signature(m.forward).parameters for m in (model, body))


def count_trainable_parameters(model: nn.Module) -> dict[str, float]:
    """Trainable and total parameters (an adapter's frozen base counted in the total) and the trainable fraction."""
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    return {"trainable_parameters": trainable, "total_parameters": total, "trainable_fraction": trainable / total}
