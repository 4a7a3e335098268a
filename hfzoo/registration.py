"""Makes hfzoo models first-class citizens of transformers and PEFT at `import hfzoo`.

Auto classes find the models by `model_type`; `register_for_auto_class` makes `save_pretrained` write the
modeling code and an `auto_map`, so checkpoints load with `trust_remote_code=True` where hfzoo is absent.
PEFT has no public API for per-architecture default targets: `hfzoo.integrations.peft.add_default_targets` adds them.
"""

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForMultipleChoice,
    AutoModelForPreTraining,
    AutoModelForQuestionAnswering,
    AutoModelForSeq2SeqLM,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)

from . import models
from .integrations.peft import add_default_targets

AUTO_CLASSES = {
    models.ZooDecoderConfig: {
        AutoModel: models.ZooDecoderModel,
        AutoModelForCausalLM: models.ZooDecoderForCausalLM,
        AutoModelForSequenceClassification: models.ZooDecoderForSequenceClassification,
        AutoModelForTokenClassification: models.ZooDecoderForTokenClassification,
    },
    models.ZooEncoderConfig: {
        AutoModel: models.ZooEncoderModel,
        AutoModelForMaskedLM: models.ZooEncoderForMaskedLM,
        AutoModelForPreTraining: models.ZooEncoderForPreTraining,
        AutoModelForSequenceClassification: models.ZooEncoderForSequenceClassification,
        AutoModelForTokenClassification: models.ZooEncoderForTokenClassification,
        AutoModelForQuestionAnswering: models.ZooEncoderForQuestionAnswering,
        AutoModelForMultipleChoice: models.ZooEncoderForMultipleChoice,
    },
    models.ZooEncoderDecoderConfig: {
        AutoModel: models.ZooEncoderDecoderModel,
        AutoModelForSeq2SeqLM: models.ZooEncoderDecoderForConditionalGeneration,
        AutoModelForSequenceClassification: models.ZooEncoderDecoderForSequenceClassification,
    },
    models.ZooBiLMConfig: {
        AutoModel: models.ZooBiLMModel,
        AutoModelForPreTraining: models.ZooBiLMForPreTraining,
    },
}

# Heads no Auto class can map, with the Auto class their checkpoints name. transformers maps one class per model type
# and Auto class; the one that fits ELECTRA's discriminator (AutoModelForPreTraining, as for transformers'
# ElectraForPreTraining) holds BERT's MLM + NSP head for the encoder's model type. The discriminator's checkpoints
# still name it there in their auto_map, with the modeling code beside them, so they load as remote code where hfzoo
# is absent; with hfzoo, load one with `ZooEncoderForReplacedTokenDetection.from_pretrained`, or its encoder with
# AutoModel or any task head's Auto class.
AUTO_MAP_ONLY = {models.ZooEncoderForReplacedTokenDetection: AutoModelForPreTraining}

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
    for model_cls, auto_cls in AUTO_MAP_ONLY.items():
        model_cls.register_for_auto_class(auto_cls.__name__)
    for config_cls, heads in AUTO_CLASSES.items():
        AutoConfig.register(config_cls.model_type, config_cls, exist_ok=True)
        config_cls.register_for_auto_class()
        for auto_cls, model_cls in heads.items():
            auto_cls.register(config_cls, model_cls, exist_ok=True)
            model_cls.register_for_auto_class(auto_cls.__name__)
        if config_cls.model_type in WITHOUT_PEFT_DEFAULTS:
            continue
        family_targets = {**PEFT_DEFAULT_TARGETS, **PEFT_FAMILY_TARGETS.get(config_cls.model_type, {})}
        add_default_targets(config_cls.model_type, family_targets)
