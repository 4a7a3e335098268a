"""BERT (`BertModel`, `BertForMaskedLM` and the task heads) <-> hfzoo's post-LayerNorm encoder.

BERT's separate query/key/value become hfzoo's fused `qkv_proj`; its token-type (segment) embeddings, embedding
LayerNorm and pooler keep their meaning one to one. RoBERTa (`roberta`) shares this layer layout and differs in
its positions and its classification head.
"""

from transformers import BertConfig, PreTrainedConfig, PreTrainedModel

from ..models import ZooEncoderConfig
from .family import ConfigMap, Head, NativeFamily, require, same_names, tied_head
from .heads import encoder_heads
from .mapping import joined, linear

ACTIVATIONS = ("gelu", "gelu_new", "relu", "silu")
# BERT's and RoBERTa's configs name their fields alike: one map serves both (the class is swapped for RoBERTa).
CONFIG = ConfigMap(
    BertConfig,
    fields={
        **same_names(
            "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
            "max_position_embeddings", "type_vocab_size", "initializer_range", "classifier_dropout",
            "tie_word_embeddings", "pad_token_id", "bos_token_id", "eos_token_id",
        ),
        "activation": "hidden_act", "norm_eps": "layer_norm_eps", "hidden_dropout": "hidden_dropout_prob",
        "attention_dropout": "attention_probs_dropout_prob",
    },
    fixed=dict(
        norm_type="layernorm", norm_position="post", norm_bias=True, position_embedding="learned", attention_bias=True,
        attention_output_bias=True, mlp_bias=True, embedding_norm=True, scale_embeddings=False, num_experts=0,
        embedding_size=None, pooler_activation="tanh",
    ),  # BERT and RoBERTa embed in hidden_size and pool with tanh (ELECTRA: narrower embeddings, GELU)
)
# Native heads built with BERT's pooler; the others (masked LM, tagging, QA) are built without one.
POOLED_HEADS = ("Model", "ForSequenceClassification", "ForMultipleChoice")


def has_pooler(model: PreTrainedModel) -> bool:
    """Whether hfzoo's config keeps BERT's pooler: a head that never builds one (masked LM, tagging, QA) leaves
    BERT's default (on); a model that could have one says by having it."""
    if not type(model).__name__.endswith(POOLED_HEADS):
        return True
    return getattr(model.base_model, "pooler", None) is not None


def encoder_zoo_config(model: PreTrainedModel, add_pooling_layer: bool) -> dict:
    """The hfzoo encoder config of a BERT-layout native model (BERT, RoBERTa)."""
    config = model.config
    require(config, "hfzoo's encoder", position_embedding_type=("absolute", None), is_decoder=False)
    require(config, "hfzoo's encoder", add_cross_attention=False, hidden_act=ACTIVATIONS)
    return {**CONFIG.zoo_kwargs(config), "add_pooling_layer": add_pooling_layer, "tie_word_embeddings": tied_head(model)}


def require_bert_layout(config: ZooEncoderConfig, what: str) -> None:
    """Refuse, naming the switch, an hfzoo encoder component BERT's layer layout cannot express."""
    require(config, what, **CONFIG.fixed, num_key_value_heads=config.num_attention_heads, activation=ACTIVATIONS)


def layer_rules(zoo: ZooEncoderConfig, attention_names: tuple[str, ...] = ("query", "key", "value")) -> list:
    """The blocks and the pooler, named as BERT and RoBERTa name them; DeBERTa's q/k/v are `attention_names`."""
    rules = []
    rows = zoo.hidden_size
    for i in range(zoo.num_hidden_layers):
        z, n = f"layers.{i}.", f"encoder.layer.{i}."
        attention = [n + f"attention.self.{name}" for name in attention_names]
        rules += joined(z + "self_attn.qkv_proj", attention, (rows, rows, rows), True)
        rules += linear(z + "self_attn.o_proj", n + "attention.output.dense", True)
        rules += linear(z + "self_attn_norm", n + "attention.output.LayerNorm", True)
        rules += linear(z + "mlp.up_proj", n + "intermediate.dense", True)
        rules += linear(z + "mlp.down_proj", n + "output.dense", True)
        rules += linear(z + "mlp_norm", n + "output.LayerNorm", True)
    return rules + linear("pooler.dense", "pooler.dense", True, optional=True)


def base_rules(zoo: ZooEncoderConfig, native: BertConfig) -> list:
    rules = [
        *linear("embed_tokens", "embeddings.word_embeddings", False),
        *linear("positions.embeddings", "embeddings.position_embeddings", False),
        *linear("token_type_embeddings", "embeddings.token_type_embeddings", False),
        *linear("embedding_norm", "embeddings.LayerNorm", True),
    ]
    return rules + layer_rules(zoo)


def zoo_config(model: PreTrainedModel) -> dict:
    return encoder_zoo_config(model, has_pooler(model))


def native_config(config: ZooEncoderConfig) -> BertConfig:
    require_bert_layout(config, "BERT")
    if not config.type_vocab_size:
        raise ValueError(
            "BERT cannot express ZooEncoderConfig.type_vocab_size=0 (BERT always adds a token-type embedding): it "
            "needs type_vocab_size>=1; export with native_type='roberta' instead."
        )
    return CONFIG.native_config(config, "BERT")


def masked_lm_rules(prefix: str, transform: str, norm: str) -> list:
    """The masked-LM head: BERT's `cls.predictions` (transform.dense, transform.LayerNorm), RoBERTa's `lm_head`."""
    return [
        *linear("lm_head.dense", f"{prefix}{transform}", True),
        *linear("lm_head.norm", f"{prefix}{norm}", True),
        *linear("lm_head.decoder", f"{prefix}decoder", True),
    ]


def pooler_kwargs(head: Head, config: ZooEncoderConfig) -> dict:
    """A bare native model is built with a pooler exactly when the hfzoo one has one."""
    if head.native_class.endswith("Model"):
        return {"add_pooling_layer": config.add_pooling_layer}
    if head.native_class.endswith(POOLED_HEADS) and not config.add_pooling_layer:
        raise ValueError(
            f"{head.native_class} classifies the pooler's output, and ZooEncoderConfig.add_pooling_layer=False has "
            "no pooler: it needs add_pooling_layer=True."
        )
    return {}


def _has_token_types(config: PreTrainedConfig) -> bool:
    return config.type_vocab_size >= 2


HEADS = encoder_heads(
    "Bert", "bert.", masked_lm_rules("cls.predictions.", "transform.dense", "transform.LayerNorm"),
    linear("classifier", "classifier", True),
)
FAMILY = NativeFamily(
    "bert", "learned", zoo_config, native_config, base_rules, HEADS, prefers=_has_token_types, head_kwargs=pooler_kwargs
)
