"""DistilBERT (`DistilBertModel`, `DistilBertForMaskedLM`, token classification, question answering) <-> hfzoo's
post-LayerNorm encoder without token types or pooler.

BERT's layer layout under other names (q_lin/k_lin/v_lin fused into `qkv_proj`, `sa_layer_norm`, `ffn.lin1/lin2`,
`output_layer_norm`), LayerNorm epsilon fixed at 1e-12, and a masked-LM head (`vocab_transform`, activation,
`vocab_layer_norm`, `vocab_projector`) that is hfzoo's. Its sequence classification and multiple-choice heads
classify through a ReLU (`pre_classifier`), where hfzoo's pooler has tanh: those two heads are not converted.
"""

from transformers import DistilBertConfig, PreTrainedModel

from ..models import (
    ZooEncoderConfig,
    ZooEncoderForMaskedLM,
    ZooEncoderForQuestionAnswering,
    ZooEncoderForTokenClassification,
    ZooEncoderModel,
)
from .bert import ACTIVATIONS
from .family import ConfigMap, Head, NativeFamily, require, same_names, tied_head
from .mapping import joined, linear

CONFIG = ConfigMap(
    DistilBertConfig,
    fields={
        **same_names(
            "vocab_size", "max_position_embeddings", "initializer_range", "attention_dropout", "activation",
            "tie_word_embeddings", "pad_token_id", "bos_token_id", "eos_token_id",
        ),
        "hidden_size": "dim", "num_hidden_layers": "n_layers", "num_attention_heads": "n_heads",
        "intermediate_size": "hidden_dim", "hidden_dropout": "dropout",
    },
    fixed=dict(
        norm_type="layernorm", norm_position="post", norm_bias=True, norm_eps=1e-12, position_embedding="learned",
        attention_bias=True, attention_output_bias=True, mlp_bias=True, embedding_norm=True, scale_embeddings=False,
        num_experts=0, type_vocab_size=0, add_pooling_layer=False, embedding_size=None,
    ),  # norm_eps: DistilBERT's LayerNorms are built with eps=1e-12 whatever the config says
)


def zoo_config(model: PreTrainedModel) -> dict:
    require(model.config, "hfzoo's encoder", sinusoidal_pos_embds=False, activation=ACTIVATIONS)
    return {**CONFIG.zoo_kwargs(model.config), "tie_word_embeddings": tied_head(model)}


def native_config(config: ZooEncoderConfig) -> DistilBertConfig:
    require(config, "DistilBERT", num_key_value_heads=config.num_attention_heads, activation=ACTIVATIONS)
    return CONFIG.native_config(config, "DistilBERT", sinusoidal_pos_embds=False)


def base_rules(zoo: ZooEncoderConfig, native: DistilBertConfig) -> list:
    rows = zoo.hidden_size
    rules = [
        *linear("embed_tokens", "embeddings.word_embeddings", False),
        *linear("positions.embeddings", "embeddings.position_embeddings", False),
        *linear("embedding_norm", "embeddings.LayerNorm", True),
    ]
    for i in range(zoo.num_hidden_layers):
        z, n = f"layers.{i}.", f"transformer.layer.{i}."
        attention = [n + "attention.q_lin", n + "attention.k_lin", n + "attention.v_lin"]
        rules += joined(z + "self_attn.qkv_proj", attention, (rows, rows, rows), True)
        rules += linear(z + "self_attn.o_proj", n + "attention.out_lin", True)
        rules += linear(z + "self_attn_norm", n + "sa_layer_norm", True)
        rules += linear(z + "mlp.up_proj", n + "ffn.lin1", True)
        rules += linear(z + "mlp.down_proj", n + "ffn.lin2", True)
        rules += linear(z + "mlp_norm", n + "output_layer_norm", True)
    return rules


def masked_lm_rules(zoo: ZooEncoderConfig, native: DistilBertConfig) -> list:
    return [
        *linear("lm_head.dense", "vocab_transform", True),
        *linear("lm_head.norm", "vocab_layer_norm", True),
        *linear("lm_head.decoder", "vocab_projector", True),
    ]


HEADS = (
    Head(ZooEncoderModel, "DistilBertModel", "", ""),
    Head(ZooEncoderForMaskedLM, "DistilBertForMaskedLM", "model.", "distilbert.", masked_lm_rules),
    Head(ZooEncoderForTokenClassification, "DistilBertForTokenClassification", "model.", "distilbert.",
         lambda zoo, native: linear("classifier", "classifier", True)),
    Head(ZooEncoderForQuestionAnswering, "DistilBertForQuestionAnswering", "model.", "distilbert.",
         lambda zoo, native: linear("qa_outputs", "qa_outputs", True)),
)  # fmt: skip
FAMILY = NativeFamily("distilbert", "learned", zoo_config, native_config, base_rules, HEADS,
                      prefers=lambda config: False)  # fmt: skip  # only when named, or imported from DistilBERT
