"""GPT-2 (`GPT2LMHeadModel` and its heads) <-> hfzoo's decoder with learned positions and pre-LayerNorm.

GPT-2 keeps its projections in `Conv1D` modules, whose weights are stored `[in, out]`: they are transposed to
`nn.Linear`'s `[out, in]`. Its fused `c_attn` is already hfzoo's q|k|v row order once transposed.
"""

from transformers import GPT2Config, PreTrainedModel

from ..models import ZooDecoderConfig
from .family import ConfigMap, NativeFamily, require, same_names, tied_head
from .heads import decoder_heads
from .mapping import conv1d, linear

# GPT-2's activation names -> hfzoo's (gelu_pytorch_tanh is gelu_new as one fused kernel, which hfzoo runs anyway).
ACTIVATIONS = {"gelu_new": "gelu_new", "gelu_pytorch_tanh": "gelu_new", "gelu": "gelu", "relu": "relu", "silu": "silu"}
CONFIG = ConfigMap(
    GPT2Config,
    fields={
        **same_names("vocab_size", "initializer_range", "bos_token_id", "eos_token_id", "pad_token_id"),
        "hidden_size": "n_embd", "num_hidden_layers": "n_layer", "num_attention_heads": "n_head",
        "max_position_embeddings": "n_positions", "norm_eps": "layer_norm_epsilon", "hidden_dropout": "resid_pdrop",
        "attention_dropout": "attn_pdrop", "tie_word_embeddings": "tie_word_embeddings",
    },
    fixed=dict(
        norm_type="layernorm", norm_position="pre", norm_bias=True, position_embedding="learned", attention_bias=True,
        attention_output_bias=True, mlp_bias=True, sliding_window=None, scale_embeddings=False, embedding_norm=False,
        num_experts=0,
    ),
)


def zoo_config(model: PreTrainedModel) -> dict:
    config = model.config
    require(config, "hfzoo's decoder", scale_attn_weights=True, scale_attn_by_inverse_layer_idx=False)
    require(config, "hfzoo's decoder", add_cross_attention=False, activation_function=tuple(ACTIVATIONS))
    return {
        **CONFIG.zoo_kwargs(config),
        "intermediate_size": config.n_inner or 4 * config.n_embd,
        "activation": ACTIVATIONS[config.activation_function],
        "tie_word_embeddings": tied_head(model),
    }


def native_config(config: ZooDecoderConfig) -> GPT2Config:
    require(config, "GPT-2", num_key_value_heads=config.num_attention_heads, activation=("gelu_new", "gelu", "relu", "silu"))
    return CONFIG.native_config(
        config, "GPT-2", n_inner=config.intermediate_size, activation_function=config.activation,
        embd_pdrop=config.hidden_dropout,
    )


def base_rules(zoo: ZooDecoderConfig, native: GPT2Config) -> list:
    rules = [*linear("embed_tokens", "wte", False), *linear("positions.embeddings", "wpe", False)]
    for i in range(zoo.num_hidden_layers):
        z, n = f"layers.{i}.", f"h.{i}."
        rules += linear(z + "self_attn_norm", n + "ln_1", True)
        rules += conv1d(z + "self_attn.qkv_proj", n + "attn.c_attn")
        rules += conv1d(z + "self_attn.o_proj", n + "attn.c_proj")
        rules += linear(z + "mlp_norm", n + "ln_2", True)
        rules += conv1d(z + "mlp.up_proj", n + "mlp.c_fc")
        rules += conv1d(z + "mlp.down_proj", n + "mlp.c_proj")
    return rules + linear("norm", "ln_f", True)


HEADS = decoder_heads(
    ("GPT2Model", "GPT2LMHeadModel", "GPT2ForSequenceClassification", "GPT2ForTokenClassification", "GPT2ForQuestionAnswering"),
    "transformer.", "classifier", "transformer.",
)  # fmt: skip
FAMILY = NativeFamily("gpt2", "learned", zoo_config, native_config, base_rules, HEADS)
