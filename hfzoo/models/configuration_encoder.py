"""Configuration of the encoder-only family (BERT, RoBERTa, ModernBERT and DeBERTa-style encoders as presets)."""

from .configuration_common import ZooTransformerConfig

# BERT's pooler squashes with tanh, DeBERTa's ContextPooler with its `pooler_hidden_act` (GELU in every checkpoint).
POOLER_ACTIVATIONS = ("tanh", "gelu", "gelu_new", "relu", "silu")


class ZooEncoderConfig(ZooTransformerConfig):
    r"""
    Encoder-only transformer: bidirectional self-attention blocks over token (+ segment + position) embeddings, with
    heads for masked-LM pretraining and for classification, tagging, extractive QA and multiple choice. BERT (Devlin
    et al., 2019), RoBERTa (Liu et al., 2019), ModernBERT (Warner et al., 2024) and DeBERTa (He et al., 2021:
    `position_embedding="disentangled"`) are presets of these flags; see `hfzoo.list_presets()`. Component arguments
    are documented on `ZooTransformerConfig`; the encoder adds:

    Args:
        type_vocab_size (`int`, defaults to 2): number of token types (BERT's segment A/B embeddings, added to the token
            embeddings). 0 means no token-type embedding: `token_type_ids` are then accepted and ignored, so a
            BERT-style tokenizer that emits segment ids for sentence pairs still works (RoBERTa and ModernBERT drop
            segments).
        add_pooling_layer (`bool`, defaults to `True`): BERT's pooler, a dense layer + tanh on the first ([CLS]) token,
            trained by next-sentence prediction in the paper and used by the sequence-classification and
            multiple-choice heads. Without it those heads read the first token's hidden state directly.
        pooler_activation (`str`, defaults to `"tanh"`): the pooler's activation: BERT's `tanh`, or DeBERTa's `gelu`
            (its `pooler_hidden_act`); `gelu_new`, `relu` and `silu` are accepted too.
        classifier_dropout (`float`, *optional*): dropout before the classification, tagging and multiple-choice
            projections; `None` uses `hidden_dropout`.
    """

    model_type = "hfzoo_encoder"

    type_vocab_size: int = 2
    add_pooling_layer: bool = True
    pooler_activation: str = "tanh"
    classifier_dropout: float | None = None

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        # AutoModelForPreTraining has several encoder heads and picks one by `architectures`; transformers iterates
        # it without a None check, so a fresh config names none as an empty list (the default head is then taken).
        if self.architectures is None:
            self.architectures = []
        if self.type_vocab_size < 0:
            raise ValueError(f"type_vocab_size must be >= 0 (0 = no token types), got {self.type_vocab_size}.")
        if self.pooler_activation not in POOLER_ACTIVATIONS:
            raise ValueError(
                f"pooler_activation={self.pooler_activation!r} is not supported; choose one of "
                f"{', '.join(map(repr, POOLER_ACTIVATIONS))}."
            )
        if self.classifier_dropout is not None and not 0.0 <= self.classifier_dropout < 1.0:
            raise ValueError(
                f"classifier_dropout must be in [0, 1) or None (= hidden_dropout), got {self.classifier_dropout}."
            )
