"""Gemma (`GemmaForCausalLM` and its heads) <-> hfzoo's decoder: Llama's layout (`llama` holds the rules) with
two differences, each an hfzoo switch:
- its RMSNorms scale by `1 + weight` (stored as the offset, computed in fp32): `norm_unit_offset=True`, so the
  weights are copied as they are and the round trip stays bit-identical;
- it multiplies the token embeddings by sqrt(hidden_size): `scale_embeddings=True`.
Its gate is the tanh GELU (`gelu_pytorch_tanh`, hfzoo's `geglu_tanh`); it has no question-answering class.
"""

from transformers import GemmaConfig, PreTrainedModel

from ..models import ZooDecoderConfig
from .family import ConfigMap, NativeFamily, require
from .heads import decoder_heads
from .llama import CONFIG as LLAMA_CONFIG
from .llama import base_rules, rotary_native_config, rotary_zoo_config

CONFIG = ConfigMap(
    GemmaConfig,
    fields={zoo: native for zoo, native in LLAMA_CONFIG.fields.items() if zoo != "mlp_bias"},
    fixed={**LLAMA_CONFIG.fixed, "norm_unit_offset": True, "scale_embeddings": True, "mlp_bias": False},
)


def zoo_config(model: PreTrainedModel) -> dict:
    require(model.config, "hfzoo's decoder", use_bidirectional_attention=(None, False))
    return rotary_zoo_config(model, CONFIG)


def native_config(config: ZooDecoderConfig) -> GemmaConfig:
    require(config, "Gemma", attention_output_bias=config.attention_bias, sliding_window=None)
    return rotary_native_config(config, CONFIG, "Gemma", head_dim=config.head_dim)


HEADS = decoder_heads(
    ("GemmaModel", "GemmaForCausalLM", "GemmaForSequenceClassification", "GemmaForTokenClassification"),
    "model.", "score", None,
)
FAMILY = NativeFamily("gemma", "rotary", zoo_config, native_config, base_rules, HEADS,
                      prefers=lambda config: config.norm_unit_offset)  # fmt: skip
