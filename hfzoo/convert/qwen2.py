"""Qwen2 (`Qwen2ForCausalLM` and its heads) <-> hfzoo's decoder: Llama's layout (`llama` holds the rules) with a
bias on query, key and value and none on the attention output or the MLP, which hfzoo expresses as
`attention_bias=True, attention_output_bias=False, mlp_bias=False`.

Qwen2's optional sliding window (`use_sliding_window`, on the layers from `max_window_layers` up) is refused: hfzoo's
`sliding_window` applies to every layer.
"""

from transformers import PreTrainedModel, Qwen2Config

from ..models import ZooDecoderConfig
from .family import ConfigMap, NativeFamily, require
from .heads import decoder_heads
from .llama import CONFIG as LLAMA_CONFIG
from .llama import base_rules, rotary_native_config, rotary_zoo_config

CONFIG = ConfigMap(
    Qwen2Config,
    fields={
        zoo: native for zoo, native in LLAMA_CONFIG.fields.items() if zoo not in ("attention_bias", "mlp_bias")
    },
    fixed={**LLAMA_CONFIG.fixed, "attention_bias": True, "attention_output_bias": False, "mlp_bias": False},
)


def zoo_config(model: PreTrainedModel) -> dict:
    require(model.config, "hfzoo's decoder", use_sliding_window=False)
    return rotary_zoo_config(model, CONFIG)


def native_config(config: ZooDecoderConfig) -> Qwen2Config:
    require(config, "Qwen2", sliding_window=None)
    return rotary_native_config(config, CONFIG, "Qwen2", use_sliding_window=False)


HEADS = decoder_heads(
    ("Qwen2Model", "Qwen2ForCausalLM", "Qwen2ForSequenceClassification", "Qwen2ForTokenClassification",
     "Qwen2ForQuestionAnswering"),
    "model.", "score", "transformer.",
)  # fmt: skip
FAMILY = NativeFamily("qwen2", "rotary", zoo_config, native_config, base_rules, HEADS)
