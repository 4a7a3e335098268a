"""Llama (`LlamaForCausalLM` and its heads) <-> hfzoo's decoder with rotary positions, RMSNorm and a gated MLP.

q, k and v are fused into hfzoo's `qkv_proj` (rows q|k|v), gate and up into `up_proj` (rows gate|up, the order
hfzoo's `FeedForward` chunks them in). Both sides rotate with the rotate-half layout (the first half of each
head's channels pairs with the second) and the same frequencies, so the q/k rows need no permutation.
Mistral (`mistral`), Qwen2 (`qwen2`) and Gemma (`gemma`) have this layout; their modules reuse its config and
weight rules.
"""

from transformers import LlamaConfig, PreTrainedConfig, PreTrainedModel

from ..models import ZooDecoderConfig
from .family import ConfigMap, NativeFamily, require, same_names, tied_head
from .heads import decoder_heads
from .mapping import joined, linear

# Llama's hidden_act is the gate's activation; gelu_pytorch_tanh (Gemma's) is the tanh GELU, one fused kernel.
GATED = {"silu": "swiglu", "gelu": "geglu", "gelu_pytorch_tanh": "geglu_tanh"}
CONFIG = ConfigMap(
    LlamaConfig,
    fields={
        **same_names(
            "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "max_position_embeddings", "attention_bias", "mlp_bias", "attention_dropout",
            "initializer_range", "tie_word_embeddings", "bos_token_id", "eos_token_id", "pad_token_id",
        ),
        "norm_eps": "rms_norm_eps",
    },
    fixed=dict(
        norm_type="rmsnorm", norm_position="pre", position_embedding="rotary", scale_embeddings=False,
        embedding_norm=False, num_experts=0, norm_unit_offset=False,
    ),
)


def zoo_config(model: PreTrainedModel) -> dict:
    return rotary_zoo_config(model, CONFIG)


def rotary_zoo_config(model: PreTrainedModel, config_map: ConfigMap) -> dict:
    """The hfzoo decoder config of a native model with Llama's layout (Llama, Mistral, Qwen2)."""
    config = model.config
    require(config, "hfzoo's decoder", hidden_act=tuple(GATED), pretraining_tp=(1, None))
    require(config, "hfzoo's decoder", head_dim=(None, config.hidden_size // config.num_attention_heads))
    rope = dict(config.rope_parameters or {})
    if rope.get("rope_type", "default") != "default":
        raise ValueError(
            f"hfzoo's rotary positions are unscaled: {type(config).__name__}.rope_parameters "
            f"rope_type={rope['rope_type']!r} cannot be expressed (it needs rope_type='default')."
        )
    return {
        **config_map.zoo_kwargs(config),
        "activation": GATED[config.hidden_act],
        "rope_theta": float(rope.get("rope_theta", 10000.0)),
        "hidden_dropout": 0.0,
        "tie_word_embeddings": tied_head(model),
    }


def native_config(config: ZooDecoderConfig) -> LlamaConfig:
    require(config, "Llama", attention_output_bias=config.attention_bias, sliding_window=None)
    return rotary_native_config(config, CONFIG, "Llama", head_dim=config.head_dim)


def rotary_native_config(config: ZooDecoderConfig, config_map: ConfigMap, what: str, **computed) -> PreTrainedConfig:
    """The native config of Llama's layout (`what` names the class for a refusal); `computed` adds native fields."""
    require(config, what, activation=tuple(GATED.values()))
    return config_map.native_config(
        config, what, hidden_act={zoo: native for native, zoo in GATED.items()}[config.activation],
        rope_parameters={"rope_type": "default", "rope_theta": config.rope_theta}, **computed,
    )


def base_rules(zoo: ZooDecoderConfig, native: LlamaConfig) -> list:
    q_rows, kv_rows = zoo.num_attention_heads * zoo.head_dim, zoo.num_key_value_heads * zoo.head_dim
    rules = linear("embed_tokens", "embed_tokens", False)
    for i in range(zoo.num_hidden_layers):
        z = n = f"layers.{i}."
        attention = [n + "self_attn.q_proj", n + "self_attn.k_proj", n + "self_attn.v_proj"]
        rules += joined(z + "self_attn.qkv_proj", attention, (q_rows, kv_rows, kv_rows), zoo.attention_bias)
        rules += linear(z + "self_attn.o_proj", n + "self_attn.o_proj", zoo.attention_output_bias)
        rules += linear(z + "self_attn_norm", n + "input_layernorm", False)
        rules += joined(z + "mlp.up_proj", [n + "mlp.gate_proj", n + "mlp.up_proj"], [zoo.intermediate_size] * 2, zoo.mlp_bias)
        rules += linear(z + "mlp.down_proj", n + "mlp.down_proj", zoo.mlp_bias)
        rules += linear(z + "mlp_norm", n + "post_attention_layernorm", False)
    return rules + linear("norm", "norm", False)


HEADS = decoder_heads(
    ("LlamaModel", "LlamaForCausalLM", "LlamaForSequenceClassification", "LlamaForTokenClassification", "LlamaForQuestionAnswering"),
    "model.", "score", "transformer.",
)  # fmt: skip
FAMILY = NativeFamily(
    "llama", "rotary", zoo_config, native_config, base_rules, HEADS,
    prefers=lambda config: config.attention_output_bias == config.attention_bias,  # else Qwen2's biases
)
