"""DeBERTa-v2 / v3 (`DebertaV2Model`, `DebertaV2ForMaskedLM` and the task heads) <-> hfzoo's post-LayerNorm encoder
with disentangled attention (`position_embedding="disentangled"`, the `deberta-*` presets).

BERT's layer layout under DeBERTa's names (`query_proj`/`key_proj`/`value_proj` fused into `qkv_proj`); the
stack's relative position embeddings and their LayerNorm (`encoder.rel_embeddings`, `encoder.LayerNorm`) are
hfzoo's `positions.disentangled`, whose position projections are each layer's own query and key projections
(`share_att_key=True`, as DeBERTa-v2 and v3 are trained). The differences a checkpoint can carry:
- DeBERTa's pooler (`ContextPooler`: dense + `pooler_hidden_act`, GELU by default) sits in the sequence-classification
  and multiple-choice heads, not in the bare model: it is hfzoo's pooler with `pooler_activation`.
- The masked-LM head comes in two layouts of one computation: transformers' default `legacy=True`
  (`cls.predictions.*`) and `legacy=False` (`lm_predictions.lm_head.*`, the layout of Microsoft's v3 checkpoints,
  whose decoder is always the word embedding). An import from the second records `native_legacy_mlm_head=False`
  in the hfzoo config, so the export writes it back.
- DeBERTa-v2's xlarge and xxlarge checkpoints add a convolution branch after the first block (`encoder.conv`,
  `conv_kernel_size`): hfzoo's `convolution` (`conv_kernel_size`, `conv_groups`, `conv_activation`).
Refused on import, naming the option: absolute positions added to the input (`position_biased_input=True`, DeBERTa
v1's way), no relative attention, separate position projections (`share_att_key=False`), relative embeddings
without their LayerNorm, a factorised embedding (`embedding_size`) and other head or pooler widths. The padding
positions DeBERTa zeroes after the embedding norm are masked keys in every layer (and zeroed for the convolution
here too): the outputs agree at the real tokens.
"""

import torch
from transformers import DebertaV2Config, PreTrainedModel

from ..models import (
    ZooEncoderConfig,
    ZooEncoderForMaskedLM,
    ZooEncoderForMultipleChoice,
    ZooEncoderForQuestionAnswering,
    ZooEncoderForSequenceClassification,
    ZooEncoderForTokenClassification,
    ZooEncoderModel,
)
from ..models.configuration_encoder import UNGATED_ACTIVATIONS
from .bert import ACTIVATIONS, layer_rules
from .family import ConfigMap, Head, NativeFamily, require, same_names, tied_head
from .mapping import Rule, linear, same

CONFIG = ConfigMap(
    DebertaV2Config,
    fields={
        **same_names(
            "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
            "max_position_embeddings", "type_vocab_size", "initializer_range", "pad_token_id", "bos_token_id",
            "eos_token_id",
        ),
        "activation": "hidden_act", "norm_eps": "layer_norm_eps", "hidden_dropout": "hidden_dropout_prob",
        "attention_dropout": "attention_probs_dropout_prob", "classifier_dropout": "cls_dropout",
        "pooler_activation": "pooler_hidden_act",
    },
    fixed=dict(
        norm_type="layernorm", norm_position="post", norm_bias=True, position_embedding="disentangled",
        attention_bias=True, attention_output_bias=True, mlp_bias=True, embedding_norm=True, scale_embeddings=False,
        num_experts=0,
    ),
)
# DeBERTa's options that its config may leave unset, with the values its modules then use, and the values hfzoo's
# encoder computes: relative attention over shared, layer-normed relative embeddings, no absolute positions.
NATIVE_OPTIONS = {
    "relative_attention": (False, (True,)),
    "position_biased_input": (True, (False,)),
    "share_att_key": (False, (True,)),
}
# DeBERTa-v2's convolution options (read with its defaults) <-> hfzoo's.
CONVOLUTION = {"conv_kernel_size": ("conv_kernel_size", 0), "conv_groups": ("conv_groups", 1),
               "conv_activation": ("conv_act", "tanh")}  # fmt: skip
POSITION_TERMS = {frozenset({"c2p", "p2c"}): "c2p|p2c", frozenset({"c2p"}): "c2p", frozenset({"p2c"}): "p2c"}
POOLED_HEADS = ("ForSequenceClassification", "ForMultipleChoice")
# Set on an hfzoo config imported from a masked-LM head of the `lm_predictions` layout (see the module docstring).
LEGACY_HEAD_FIELD = "native_legacy_mlm_head"


def refuse_native_options(config: DebertaV2Config) -> None:
    """Raise `ValueError` naming the first DeBERTa option hfzoo's encoder cannot compute."""
    cannot = "hfzoo's encoder cannot express DebertaV2Config"
    for name, (default, allowed) in NATIVE_OPTIONS.items():
        value = getattr(config, name, default)
        if value not in allowed:
            raise ValueError(f"{cannot}.{name}={value!r}: it needs {name}={allowed[0]!r}.")
    norm = getattr(config, "norm_rel_ebd", "none")
    if "layer_norm" not in [part.strip() for part in norm.lower().split("|")]:
        raise ValueError(f"{cannot}.norm_rel_ebd={norm!r}: it needs norm_rel_ebd='layer_norm'.")
    widths = {
        "embedding_size": config.hidden_size,
        "attention_head_size": config.hidden_size // config.num_attention_heads,
        "pooler_hidden_size": config.hidden_size,
    }
    for name, wanted in widths.items():
        value = getattr(config, name, wanted)
        if value != wanted:
            raise ValueError(f"{cannot}.{name}={value!r}: it needs {name}={wanted}.")
    if frozenset(config.pos_att_type or ()) not in POSITION_TERMS:
        raise ValueError(f"{cannot}.pos_att_type={config.pos_att_type!r}: it needs 'c2p', 'p2c' or both.")
    require(config, "hfzoo's encoder", hidden_act=ACTIVATIONS, pooler_hidden_act=UNGATED_ACTIVATIONS)
    conv_act = getattr(config, "conv_act", "tanh")
    if conv_act not in UNGATED_ACTIVATIONS:
        raise ValueError(f"{cannot}.conv_act={conv_act!r}: it needs one of {', '.join(UNGATED_ACTIVATIONS)}.")


def zoo_config(model: PreTrainedModel) -> dict:
    config = model.config
    refuse_native_options(config)
    max_relative = config.max_relative_positions
    kwargs = {
        **CONFIG.zoo_kwargs(config),
        "position_buckets": max(getattr(config, "position_buckets", -1), 0),
        # DeBERTa reads an unset (< 1) span as max_position_embeddings.
        "max_relative_positions": max_relative if max_relative >= 1 else config.max_position_embeddings,
        "position_attention_terms": POSITION_TERMS[frozenset(config.pos_att_type)],
        # Only the bare model has no pooler; every head fine-tuned from a checkpoint may build DeBERTa's.
        "add_pooling_layer": type(model).__name__ != "DebertaV2Model",
        "tie_word_embeddings": tied_head(model),
        **{zoo: getattr(config, native, default) for zoo, (native, default) in CONVOLUTION.items()},
    }
    if type(model).__name__ == "DebertaV2ForMaskedLM" and not config.legacy:
        kwargs.update({"tie_word_embeddings": True, LEGACY_HEAD_FIELD: False})  # its decoder is the embedding
    return kwargs


def native_config(config: ZooEncoderConfig) -> DebertaV2Config:
    require(config, "DeBERTa-v2", num_key_value_heads=config.num_attention_heads, activation=ACTIVATIONS)
    return CONFIG.native_config(
        config,
        "DeBERTa-v2",
        relative_attention=True,
        position_biased_input=False,
        share_att_key=True,
        norm_rel_ebd="layer_norm",
        pos_att_type=config.position_attention_terms.split("|"),
        position_buckets=config.position_buckets or -1,  # DeBERTa's "no buckets"
        max_relative_positions=config.max_relative_positions,
        legacy=getattr(config, LEGACY_HEAD_FIELD, True),
        tie_word_embeddings=config.tie_word_embeddings,
        **{native: getattr(config, zoo) for zoo, (native, _) in CONVOLUTION.items()},
    )


def base_rules(zoo: ZooEncoderConfig, native: DebertaV2Config) -> list:
    rules = [
        *linear("embed_tokens", "embeddings.word_embeddings", False),
        *linear("embedding_norm", "embeddings.LayerNorm", True),
        *linear("positions.disentangled.relative_embeddings", "encoder.rel_embeddings", False),
        *linear("positions.disentangled.relative_norm", "encoder.LayerNorm", True),
    ]
    if zoo.type_vocab_size:
        rules += linear("token_type_embeddings", "embeddings.token_type_embeddings", False)
    if zoo.conv_kernel_size:
        rules += linear("convolution.conv", "encoder.conv.conv", True)
        rules += linear("convolution.norm", "encoder.conv.LayerNorm", True)
    # BERT's layers and its optional pooler rule, which no DeBERTa base model has (a head's rule claims hfzoo's).
    return rules + layer_rules(zoo, ("query_proj", "key_proj", "value_proj"))


def _legacy_output_bias(prefix: str) -> Rule:
    """The legacy head adds `decoder.bias` and keeps a copy, `bias`, that it never reads (tied to it when the head is
    tied to the embedding): exported as the same values, imported only when they agree."""

    def to_zoo(tensors):
        if not torch.equal(tensors[0], tensors[1]):
            raise ValueError(
                f"{prefix}bias differs from {prefix}decoder.bias, which DeBERTa's legacy head adds instead; hfzoo has "
                "one output bias: make them equal (or tie the head to the embedding) before converting."
            )
        return [tensors[0]]

    return Rule(
        ("lm_head.decoder.bias",), (f"{prefix}decoder.bias", f"{prefix}bias"), to_zoo, lambda t: [t[0], t[0].clone()]
    )


def masked_lm_rules(zoo: ZooEncoderConfig, native: DebertaV2Config) -> list:
    """`cls.predictions.*` (legacy) or `lm_predictions.lm_head.*`, whose output projection is the word embedding."""
    if native.legacy:
        prefix = "cls.predictions."
        return [
            *linear("lm_head.dense", prefix + "transform.dense", True),
            *linear("lm_head.norm", prefix + "transform.LayerNorm", True),
            *linear("lm_head.decoder", prefix + "decoder", False),
            _legacy_output_bias(prefix),
        ]
    return [
        *linear("lm_head.dense", "lm_predictions.lm_head.dense", True),
        *linear("lm_head.norm", "lm_predictions.lm_head.LayerNorm", True),
        *same("lm_head.decoder", "lm_predictions.lm_head", ("bias",)),
    ]


def pooled_classifier_rules(zoo: ZooEncoderConfig, native: DebertaV2Config) -> list:
    """DeBERTa's head-level `pooler` is hfzoo's (in the bare model), then the classifier."""
    return [*linear("model.pooler.dense", "pooler.dense", True), *linear("classifier", "classifier", True)]


def pooler_kwargs(head: Head, config: ZooEncoderConfig) -> dict:
    """No extra arguments; refuses an hfzoo pooler where DeBERTa has none, and the reverse."""
    if head.native_class == "DebertaV2Model" and config.add_pooling_layer:
        raise ValueError(
            "DebertaV2Model has no pooler (DeBERTa's pooler belongs to its sequence-classification and "
            "multiple-choice heads), and ZooEncoderConfig.add_pooling_layer=True has one: it needs "
            "add_pooling_layer=False, or export the head that classifies with it."
        )
    if head.native_class.endswith(POOLED_HEADS) and not config.add_pooling_layer:
        raise ValueError(
            f"{head.native_class} classifies its pooler's output, and ZooEncoderConfig.add_pooling_layer=False has "
            "no pooler: it needs add_pooling_layer=True."
        )
    return {}


HEADS = (
    Head(ZooEncoderModel, "DebertaV2Model", "", ""),
    Head(ZooEncoderForMaskedLM, "DebertaV2ForMaskedLM", "model.", "deberta.", masked_lm_rules),
    Head(ZooEncoderForSequenceClassification, "DebertaV2ForSequenceClassification", "model.", "deberta.",
         pooled_classifier_rules),
    Head(ZooEncoderForTokenClassification, "DebertaV2ForTokenClassification", "model.", "deberta.",
         lambda zoo, native: linear("classifier", "classifier", True)),
    Head(ZooEncoderForQuestionAnswering, "DebertaV2ForQuestionAnswering", "model.", "deberta.",
         lambda zoo, native: linear("qa_outputs", "qa_outputs", True)),
    Head(ZooEncoderForMultipleChoice, "DebertaV2ForMultipleChoice", "model.", "deberta.", pooled_classifier_rules),
)  # fmt: skip
FAMILY = NativeFamily(
    "deberta-v2", "disentangled", zoo_config, native_config, base_rules, HEADS, head_kwargs=pooler_kwargs
)
