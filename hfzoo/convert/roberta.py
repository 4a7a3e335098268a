"""RoBERTa (`RobertaModel`, `RobertaForMaskedLM` and the task heads) <-> hfzoo's post-LayerNorm encoder.

RoBERTa is BERT's layer layout (`bert.layer_rules`) with two differences:
- Positions start after the pad token: a real token at index i reads row `pad_token_id + 1 + i` of the position
  table. hfzoo reads row i, so the table is rolled by that offset; the rows RoBERTa reads only for pad tokens
  (and row 0, which it never reads) move to the end, which keeps the round trip exact. hfzoo's config therefore
  has RoBERTa's table size as `max_position_embeddings`, `pad_token_id + 1` more positions than RoBERTa accepts;
  the outputs agree on right-padded inputs up to RoBERTa's length (left padding shifts RoBERTa's positions).
- Its sequence classifier is dense + tanh + projection on the first token: exactly hfzoo's pooler followed by
  its classifier, so `classifier.dense` is hfzoo's `pooler.dense`.
Its single token-type row is kept as `type_vocab_size=1` (hfzoo adds row 0 when no segment ids are given).
"""

import dataclasses

from transformers import PreTrainedConfig, PreTrainedModel, RobertaConfig

from ..models import ZooEncoderConfig
from .bert import CONFIG as BERT_CONFIG
from .bert import encoder_zoo_config, has_pooler, layer_rules, masked_lm_rules, pooler_kwargs, require_bert_layout
from .family import NativeFamily
from .heads import encoder_heads
from .mapping import linear, native_zeros, rolled_rows

CONFIG = dataclasses.replace(BERT_CONFIG, native_class=RobertaConfig)


def position_offset(config: PreTrainedConfig) -> int:
    return config.pad_token_id + 1


def zoo_config(model: PreTrainedModel) -> dict:
    pooled = type(model).__name__.endswith("ForSequenceClassification") or has_pooler(model)
    return encoder_zoo_config(model, pooled)


def native_config(config: ZooEncoderConfig) -> RobertaConfig:
    require_bert_layout(config, "RoBERTa")
    if config.pad_token_id is None:
        raise ValueError(
            "RoBERTa numbers positions from its pad token, and ZooEncoderConfig.pad_token_id=None names none: it "
            "needs pad_token_id set to the tokenizer's pad token id."
        )
    if config.max_position_embeddings <= position_offset(config):
        raise ValueError(
            f"RoBERTa reads positions from row pad_token_id + 1 = {position_offset(config)}, so "
            f"max_position_embeddings={config.max_position_embeddings} leaves none: it needs more rows."
        )
    return CONFIG.native_config(config, "RoBERTa", type_vocab_size=max(1, config.type_vocab_size))


def base_rules(zoo: ZooEncoderConfig, native: RobertaConfig) -> list:
    token_types = "embeddings.token_type_embeddings.weight"
    rules = [
        *linear("embed_tokens", "embeddings.word_embeddings", False),
        rolled_rows("positions.embeddings.weight", "embeddings.position_embeddings.weight", position_offset(native)),
        *linear("embedding_norm", "embeddings.LayerNorm", True),
    ]
    if zoo.type_vocab_size:
        rules += linear("token_type_embeddings", "embeddings.token_type_embeddings", False)
    else:
        why = "RoBERTa's token-type row, which hfzoo's config has none of (type_vocab_size=0)"
        rules.append(native_zeros(token_types, (1, zoo.hidden_size), why))
    return rules + layer_rules(zoo)


HEADS = encoder_heads(
    "Roberta", "roberta.", masked_lm_rules("lm_head.", "dense", "layer_norm"),
    [*linear("model.pooler.dense", "classifier.dense", True), *linear("classifier", "classifier.out_proj", True)],
)
FAMILY = NativeFamily("roberta", "learned", zoo_config, native_config, base_rules, HEADS, head_kwargs=pooler_kwargs)
