"""Makes hfzoo models first-class citizens of transformers and PEFT at `import hfzoo`.

Auto classes find the models by `model_type`; `register_for_auto_class` makes `save_pretrained` write the
modeling code and an `auto_map`, so checkpoints load with `trust_remote_code=True` where hfzoo is absent.
PEFT has no public API for per-architecture default targets: `hfzoo.integrations.peft.add_default_targets` adds them.
"""

import transformers
from transformers import AutoConfig

from .. import models
from ..integrations.peft import add_default_targets
from ..integrations.transformers import own_auto_class

# Each family's config class and its heads by Auto class name (`heads_by_auto_class`, declared beside the models so
# that the copy of the code saved with a checkpoint names the same heads in its `auto_map`).
FAMILIES = {
    models.ZooDecoderConfig: models.ZooDecoderPreTrainedModel,
    models.ZooEncoderConfig: models.ZooEncoderPreTrainedModel,
    models.ZooEncoderDecoderConfig: models.ZooEncoderDecoderPreTrainedModel,
    models.ZooBiLMConfig: models.ZooBiLMPreTrainedModel,
}

# The LoRA-like methods whose PEFT mappings are separate copies of LoRA's, made when PEFT is imported (so hfzoo's
# LoRA entry does not reach them): they get the same default targets.
_LORA_LIKE = ("ADALORA", "LOHA", "LOKR", "VERA", "OFT")
# model_type -> module names PEFT targets when the user names none.
PEFT_DEFAULT_TARGETS = {
    "TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING": ["qkv_proj"],
    **{f"TRANSFORMERS_MODELS_TO_{method}_TARGET_MODULES_MAPPING": ["qkv_proj"] for method in _LORA_LIKE},
    "TRANSFORMERS_MODELS_TO_IA3_TARGET_MODULES_MAPPING": ["qkv_proj", "down_proj"],
    "TRANSFORMERS_MODELS_TO_IA3_FEEDFORWARD_MODULES_MAPPING": ["down_proj"],
}
# Per-family replacements of the defaults above: the encoder-decoder also adapts how the decoder reads the source
# (cross-attention's q_proj and fused kv_proj).
PEFT_FAMILY_TARGETS = {
    models.ZooEncoderDecoderConfig.model_type: {
        **{
            f"TRANSFORMERS_MODELS_TO_{method}_TARGET_MODULES_MAPPING": ["qkv_proj", "q_proj", "kv_proj"]
            for method in ("LORA", *_LORA_LIKE)
        },
        "TRANSFORMERS_MODELS_TO_IA3_TARGET_MODULES_MAPPING": ["qkv_proj", "kv_proj", "down_proj"],
    },
}


# Families without attention or feed-forward projections (the biLSTM): PEFT gets no defaults for them, so it asks
# for `target_modules` instead of failing to find `qkv_proj`.
WITHOUT_PEFT_DEFAULTS = {models.ZooBiLMConfig.model_type}


def register() -> None:
    for config_cls, family in FAMILIES.items():
        AutoConfig.register(config_cls.model_type, config_cls, exist_ok=True)
        config_cls.register_for_auto_class()
        for auto_name, heads in family.heads_by_auto_class.items():
            # Several heads for one Auto class: transformers picks by the config's `architectures` (first = default).
            getattr(transformers, auto_name).register(config_cls, heads if len(heads) > 1 else heads[0], exist_ok=True)
            for head in heads:
                # The Auto class a head saves itself under is the first that names it (an own, not inherited, one).
                if own_auto_class(head) is None:
                    head.register_for_auto_class(auto_name)
        if config_cls.model_type in WITHOUT_PEFT_DEFAULTS:
            continue
        family_targets = {**PEFT_DEFAULT_TARGETS, **PEFT_FAMILY_TARGETS.get(config_cls.model_type, {})}
        add_default_targets(config_cls.model_type, family_targets)
