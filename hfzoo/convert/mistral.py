"""Mistral (`MistralForCausalLM` and its heads) <-> hfzoo's decoder: Llama's layout (`llama` holds the rules),
without biases, and attention over a sliding window of `sliding_window` tokens in every layer, which is hfzoo's
`sliding_window` switch (`None` on both sides: full causal attention).
"""

from transformers import MistralConfig, PreTrainedModel

from ..models import ZooDecoderConfig
from .family import ConfigMap, NativeFamily, require, same_names
from .heads import decoder_heads
from .llama import CONFIG as LLAMA_CONFIG
from .llama import base_rules, rotary_native_config, rotary_zoo_config

CONFIG = ConfigMap(
    MistralConfig,
    fields={
        **{zoo: native for zoo, native in LLAMA_CONFIG.fields.items() if zoo not in ("attention_bias", "mlp_bias")},
        **same_names("sliding_window"),
    },
    fixed={**LLAMA_CONFIG.fixed, "attention_bias": False, "attention_output_bias": False, "mlp_bias": False},
)


def zoo_config(model: PreTrainedModel) -> dict:
    # Mistral warns about and then ignores `layer_types` (alternating windows are Ministral's): refused, not dropped.
    require(model.config, "hfzoo's decoder", layer_types=None)
    return rotary_zoo_config(model, CONFIG)


def native_config(config: ZooDecoderConfig) -> MistralConfig:
    return rotary_native_config(config, CONFIG, "Mistral", head_dim=config.head_dim)


HEADS = decoder_heads(
    ("MistralModel", "MistralForCausalLM", "MistralForSequenceClassification", "MistralForTokenClassification",
     "MistralForQuestionAnswering"),
    "model.", "score", "model.",
)  # fmt: skip
FAMILY = NativeFamily(
    "mistral", "rotary", zoo_config, native_config, base_rules, HEADS,
    prefers=lambda config: config.sliding_window is not None,  # else Llama, which has no window
)
