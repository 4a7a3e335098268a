"""ModernBERT (`ModernBertModel`, `ModernBertForMaskedLM` and the task heads) <-> hfzoo's pre-LayerNorm rotary encoder
with ModernBERT's switches.

Weights map one to one: `Wqkv` is hfzoo's fused `qkv_proj` (q|k|v rows), `Wi` its fused GeGLU `up_proj` (the
activated half first on both sides), no biases, the embedding norm, a final norm. ModernBERT's architecture is the
encoder's switches: alternating attention (`layer_types` of the every-n pattern -> `global_attention_every_n_layers`,
`local_attention` -> `local_attention_window`, the sliding layers' rotary base -> `local_rope_theta`), the first
block without an attention norm (`first_block_attention_norm=False`), and the dense + activation + norm
`ModernBertPredictionHead` before every task projection (`classifier_transform=True`; the masked-LM head's transform
is the same module). Unpadding is a kernel detail: the padded path computes the same outputs.
`classifier_pooling` (the first token or the mean) is the encoder's own switch.
Refused on import, naming the option: rotary scaling, a head transform whose bias or activation
differs from the feed-forward's (hfzoo's transform follows those), no decoder bias, and a `layer_types` pattern
other than every-n. Multiple choice with `cls` pooling reads the first token, which is ModernBERT's <cls> (its first
unpadded token) for right-padded inputs.
"""

from transformers import ModernBertConfig, PreTrainedModel

from ..models import (
    ZooEncoderConfig,
    ZooEncoderForMaskedLM,
    ZooEncoderForMultipleChoice,
    ZooEncoderForQuestionAnswering,
    ZooEncoderForSequenceClassification,
    ZooEncoderForTokenClassification,
    ZooEncoderModel,
)
from ..models.component_options import GATED_ACTIVATIONS
from .family import ConfigMap, Head, NativeFamily, require, same_names, tied_head
from .mapping import linear

CONFIG = ConfigMap(
    ModernBertConfig,
    fields={
        **same_names(
            "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
            "max_position_embeddings", "initializer_range", "norm_eps", "norm_bias", "attention_bias", "mlp_bias",
            "attention_dropout", "classifier_pooling", "pad_token_id", "bos_token_id", "eos_token_id",
        ),
        "hidden_dropout": "embedding_dropout",
    },
    fixed=dict(
        norm_type="layernorm", norm_position="pre", norm_unit_offset=False, position_embedding="rotary",
        embedding_norm=True, scale_embeddings=False, num_experts=0, type_vocab_size=0, add_pooling_layer=False,
        first_block_attention_norm=False, classifier_transform=True,
    ),
)
# ModernBERT's feed-forward activation (the GLU's activated half) -> hfzoo's gated activation.
GATED = {gate: gated for gated, gate in GATED_ACTIVATIONS.items()}


def layer_types(num_layers: int, every_n: int) -> list[str]:
    return ["sliding_attention" if i % every_n else "full_attention" for i in range(num_layers)]


def every_n(config: ModernBertConfig) -> int:
    """The n of ModernBERT's `layer_types` (global every n-th layer from the first), or a refusal naming them."""
    for n in range(1, config.num_hidden_layers + 1):
        if config.layer_types == layer_types(config.num_hidden_layers, n):
            return n
    raise ValueError(
        f"hfzoo's encoder cannot express ModernBertConfig.layer_types={config.layer_types!r}: it needs full attention "
        "every n-th layer from the first and sliding attention between (global_attn_every_n_layers)."
    )


def rope_theta(config: ModernBertConfig, layer_type: str) -> float:
    parameters = config.rope_parameters[layer_type]
    if parameters.get("rope_type", "default") != "default":
        raise ValueError(
            f"hfzoo's encoder cannot express ModernBertConfig.rope_parameters[{layer_type!r}] with "
            f"rope_type={parameters['rope_type']!r}: it needs rope_type='default'."
        )
    return float(parameters["rope_theta"])


def zoo_config(model: PreTrainedModel) -> dict:
    config = model.config
    require(config, "hfzoo's encoder", hidden_activation=tuple(GATED), decoder_bias=True)
    activation = GATED[config.hidden_activation]
    require(config, "hfzoo's encoder", classifier_bias=config.mlp_bias, classifier_activation=config.hidden_activation)
    return {
        **CONFIG.zoo_kwargs(config),
        "activation": activation,
        "attention_output_bias": config.attention_bias,
        "classifier_dropout": config.classifier_dropout,
        "local_attention_window": config.local_attention,
        "global_attention_every_n_layers": every_n(config),
        "rope_theta": rope_theta(config, "full_attention"),
        "local_rope_theta": rope_theta(config, "sliding_attention"),
        "tie_word_embeddings": tied_head(model),
    }


def native_config(config: ZooEncoderConfig) -> ModernBertConfig:
    what = "ModernBERT"
    require(config, what, num_key_value_heads=config.num_attention_heads, activation=tuple(GATED_ACTIVATIONS))
    require(config, what, attention_output_bias=config.attention_bias)
    gate = GATED_ACTIVATIONS[config.activation]
    rope = {"rope_type": "default"}
    # Without a window every layer attends globally; ModernBERT still names one, which no layer then reads.
    window, every = config.local_attention_window, config.global_attention_every_n_layers
    eos = config.eos_token_id[0] if isinstance(config.eos_token_id, list) else config.eos_token_id
    return CONFIG.native_config(
        config,
        what,
        hidden_activation=gate,
        classifier_activation=gate,
        classifier_bias=config.mlp_bias,
        classifier_dropout=config.hidden_dropout if config.classifier_dropout is None else config.classifier_dropout,
        mlp_dropout=config.hidden_dropout,
        local_attention=ModernBertConfig.local_attention if window is None else window,
        layer_types=layer_types(config.num_hidden_layers, 1 if window is None else every),
        rope_parameters={
            "full_attention": {**rope, "rope_theta": config.rope_theta},
            "sliding_attention": {**rope, "rope_theta": config.local_rope_theta or config.rope_theta},
        },
        tie_word_embeddings=config.tie_word_embeddings,
        cls_token_id=config.bos_token_id,  # ModernBERT's <cls> and <sep> are its bos and eos
        sep_token_id=eos,
    )


def base_rules(zoo: ZooEncoderConfig, native: ModernBertConfig) -> list:
    bias = zoo.mlp_bias
    rules = [
        *linear("embed_tokens", "embeddings.tok_embeddings", False),
        *linear("embedding_norm", "embeddings.norm", zoo.norm_bias),
        *linear("norm", "final_norm", zoo.norm_bias),
    ]
    for i in range(zoo.num_hidden_layers):
        z, n = f"layers.{i}.", f"layers.{i}."
        rules += linear(z + "self_attn.qkv_proj", n + "attn.Wqkv", zoo.attention_bias)
        rules += linear(z + "self_attn.o_proj", n + "attn.Wo", zoo.attention_bias)
        if i:
            rules += linear(z + "self_attn_norm", n + "attn_norm", zoo.norm_bias)
        rules += linear(z + "mlp.up_proj", n + "mlp.Wi", bias)
        rules += linear(z + "mlp.down_proj", n + "mlp.Wo", bias)
        rules += linear(z + "mlp_norm", n + "mlp_norm", zoo.norm_bias)
    return rules


def transform_rules(zoo: ZooEncoderConfig, hfzoo_name: str) -> list:
    """ModernBERT's `head` (dense + activation + norm) as hfzoo's `lm_head` or task `transform`."""
    return [
        *linear(f"{hfzoo_name}.dense", "head.dense", zoo.mlp_bias),
        *linear(f"{hfzoo_name}.norm", "head.norm", zoo.norm_bias),
    ]


def masked_lm_rules(zoo: ZooEncoderConfig, native: ModernBertConfig) -> list:
    return [*transform_rules(zoo, "lm_head"), *linear("lm_head.decoder", "decoder", True)]


def classifier_rules(projection: str):
    def rules(zoo: ZooEncoderConfig, native: ModernBertConfig) -> list:
        return [*transform_rules(zoo, "transform"), *linear(projection, "classifier", True)]

    return rules


HEADS = (
    Head(ZooEncoderModel, "ModernBertModel", "", ""),
    Head(ZooEncoderForMaskedLM, "ModernBertForMaskedLM", "model.", "model.", masked_lm_rules),
    Head(ZooEncoderForSequenceClassification, "ModernBertForSequenceClassification", "model.", "model.",
         classifier_rules("classifier")),
    Head(ZooEncoderForTokenClassification, "ModernBertForTokenClassification", "model.", "model.",
         classifier_rules("classifier")),
    Head(ZooEncoderForQuestionAnswering, "ModernBertForQuestionAnswering", "model.", "model.",
         classifier_rules("qa_outputs")),
    Head(ZooEncoderForMultipleChoice, "ModernBertForMultipleChoice", "model.", "model.",
         classifier_rules("classifier")),
)  # fmt: skip
FAMILY = NativeFamily("modernbert", "rotary", zoo_config, native_config, base_rules, HEADS)
