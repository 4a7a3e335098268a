"""ELECTRA (`ElectraModel`, the discriminator `ElectraForPreTraining`, the generator `ElectraForMaskedLM` and the
classification, tagging, QA and multiple-choice heads) <-> hfzoo's post-LayerNorm encoder.

BERT's layer layout and names (`bert.layer_rules`) behind ELECTRA's embeddings, which may be narrower than the
hidden states (`embedding_size`, 128 in ELECTRA-Small): hfzoo's `embedding_size` switch builds the same embeddings,
norm and `embeddings_project`. The discriminator's head (dense, activation, one score per token) is hfzoo's
`ZooEncoderForReplacedTokenDetection`; the generator's (dense to the embedding width, GELU, LayerNorm, the tied
vocabulary projection) is hfzoo's masked-LM head, whose activation is the config's: the generator converts with
`hidden_act="gelu"` only. The sequence-classification and multiple-choice heads classify the first token through a
dense layer with GELU: hfzoo's pooler with `pooler_activation="gelu"` (ELECTRA's classifier also drops out the first
token before that layer, which hfzoo's pooler does not: a difference in training only, as for RoBERTa). An imported
ELECTRA keeps `add_pooling_layer` on (except the bare `ElectraModel`, which has no pooler), so a task head
fine-tuned on it gets ELECTRA's classifier.
"""

from transformers import ElectraConfig, PreTrainedModel

from ..models import (
    ZooEncoderConfig,
    ZooEncoderForMaskedLM,
    ZooEncoderForMultipleChoice,
    ZooEncoderForQuestionAnswering,
    ZooEncoderForReplacedTokenDetection,
    ZooEncoderForSequenceClassification,
    ZooEncoderForTokenClassification,
    ZooEncoderModel,
)
from .bert import ACTIVATIONS, layer_rules
from .bert import CONFIG as BERT_CONFIG
from .family import ConfigMap, Head, NativeFamily, require, tied_head
from .mapping import linear

# BERT's fields under the same names; BERT's fixed switches but the two ELECTRA sets itself.
ELECTRA_SETS = ("embedding_size", "pooler_activation")
CONFIG = ConfigMap(
    ElectraConfig,
    fields=BERT_CONFIG.fields,
    fixed={name: value for name, value in BERT_CONFIG.fixed.items() if name not in ELECTRA_SETS},
)
# The generator's head and the classifiers apply GELU whatever `hidden_act` says (transformers' Electra
# GeneratorPredictions, ClassificationHead; the multiple-choice summary's `summary_activation` defaults to it).
GELU = "gelu"
# How ElectraForMultipleChoice's sequence summary must be set to be hfzoo's pooler: dense + GELU on the first token.
SUMMARY = dict(summary_type="first", summary_use_proj=True, summary_activation=GELU)


def zoo_config(model: PreTrainedModel) -> dict:
    config = model.config
    require(config, "hfzoo's encoder", position_embedding_type=("absolute", None), is_decoder=False)
    require(config, "hfzoo's encoder", add_cross_attention=False, hidden_act=ACTIVATIONS)
    if type(model).__name__ == "ElectraForMaskedLM":
        require(config, "hfzoo's masked-LM head (ELECTRA's generator head is GELU)", hidden_act=GELU)
    if type(model).__name__ == "ElectraForMultipleChoice":
        require(config, "hfzoo's pooler", **SUMMARY, summary_first_dropout=(None, 0, 0.0))
        require(config, "hfzoo's pooler (a summary as wide as the hidden states)", summary_proj_to_labels=(None, False))
    embedding_size = config.embedding_size if config.embedding_size != config.hidden_size else None
    return {
        **CONFIG.zoo_kwargs(config),
        "embedding_size": embedding_size,
        "add_pooling_layer": type(model).__name__ != "ElectraModel",
        "pooler_activation": GELU,
        "tie_word_embeddings": tied_head(model),
    }


def native_config(config: ZooEncoderConfig) -> ElectraConfig:
    require(config, "ELECTRA", num_key_value_heads=config.num_attention_heads, activation=ACTIVATIONS)
    if not config.type_vocab_size:
        raise ValueError(
            "ELECTRA cannot express ZooEncoderConfig.type_vocab_size=0 (ELECTRA always adds a token-type embedding): "
            "it needs type_vocab_size>=1."
        )
    embedding_size = config.embedding_size or config.hidden_size
    return CONFIG.native_config(config, "ELECTRA", embedding_size=embedding_size, **SUMMARY)


def head_kwargs(head: Head, config: ZooEncoderConfig) -> dict:
    """Refuse, naming the switch, what the native head cannot hold: a pooler on the bare model, a generator head
    whose activation is not GELU, a classifier without a GELU pooler. ELECTRA's heads take no extra arguments."""
    if head.zoo_class is ZooEncoderModel:
        require(config, "ElectraModel (no pooler)", add_pooling_layer=False)
    if head.zoo_class is ZooEncoderForMaskedLM:
        require(config, "ElectraForMaskedLM (its head's activation is GELU)", activation=GELU)
    if head.zoo_class in (ZooEncoderForSequenceClassification, ZooEncoderForMultipleChoice):
        require(config, f"{head.native_class} (a GELU projection of the first token)", add_pooling_layer=True,
                pooler_activation=GELU)  # fmt: skip
    return {}


def base_rules(zoo: ZooEncoderConfig, native: ElectraConfig) -> list:
    rules = [
        *linear("embed_tokens", "embeddings.word_embeddings", False),
        *linear("positions.embeddings", "embeddings.position_embeddings", False),
        *linear("token_type_embeddings", "embeddings.token_type_embeddings", False),
        *linear("embedding_norm", "embeddings.LayerNorm", True),
        *linear("embeddings_project", "embeddings_project", True, optional=True),  # narrower embeddings only
    ]
    return rules + layer_rules(zoo)


def discriminator_rules(zoo: ZooEncoderConfig, native: ElectraConfig) -> list:
    return [
        *linear("dense", "discriminator_predictions.dense", True),
        *linear("dense_prediction", "discriminator_predictions.dense_prediction", True),
    ]


def generator_rules(zoo: ZooEncoderConfig, native: ElectraConfig) -> list:
    return [
        *linear("lm_head.dense", "generator_predictions.dense", True),
        *linear("lm_head.norm", "generator_predictions.LayerNorm", True),
        *linear("lm_head.decoder", "generator_lm_head", True),
    ]


def classifier_rules(zoo: ZooEncoderConfig, native: ElectraConfig) -> list:
    """ELECTRA's classification head: dense + GELU (hfzoo's pooler), then the label projection."""
    return [*linear("model.pooler.dense", "classifier.dense", True), *linear("classifier", "classifier.out_proj", True)]


def multiple_choice_rules(zoo: ZooEncoderConfig, native: ElectraConfig) -> list:
    """ELECTRA's sequence summary (dense + GELU on the first token: hfzoo's pooler), then one score per choice."""
    return [*linear("model.pooler.dense", "sequence_summary.summary", True), *linear("classifier", "classifier", True)]


HEADS = (
    Head(ZooEncoderModel, "ElectraModel", "", ""),
    Head(ZooEncoderForReplacedTokenDetection, "ElectraForPreTraining", "model.", "electra.", discriminator_rules),
    Head(ZooEncoderForMaskedLM, "ElectraForMaskedLM", "model.", "electra.", generator_rules),
    Head(ZooEncoderForTokenClassification, "ElectraForTokenClassification", "model.", "electra.",
         lambda zoo, native: linear("classifier", "classifier", True)),
    Head(ZooEncoderForQuestionAnswering, "ElectraForQuestionAnswering", "model.", "electra.",
         lambda zoo, native: linear("qa_outputs", "qa_outputs", True)),
    Head(ZooEncoderForSequenceClassification, "ElectraForSequenceClassification", "model.", "electra.",
         classifier_rules),
    Head(ZooEncoderForMultipleChoice, "ElectraForMultipleChoice", "model.", "electra.", multiple_choice_rules),
)  # fmt: skip
FAMILY = NativeFamily("electra", "learned", zoo_config, native_config, base_rules, HEADS, head_kwargs=head_kwargs,
                      prefers=lambda config: config.embedding_size is not None)  # fmt: skip
