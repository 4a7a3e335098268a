"""Configuration of the encoder-only family (BERT, RoBERTa, ModernBERT and DeBERTa-style encoders as presets)."""

from .configuration_common import ZooTransformerConfig

# The activations of the encoder's ungated side modules: BERT's pooler squashes with tanh, DeBERTa's ContextPooler
# with its `pooler_hidden_act` (GELU in every checkpoint), DeBERTa-v2's convolution with its `conv_act`.
UNGATED_ACTIVATIONS = ("tanh", "gelu", "gelu_new", "relu", "silu")


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
            (its `pooler_hidden_act`; ELECTRA's classification heads too); `gelu_new`, `relu` and `silu` are accepted too.
        classifier_dropout (`float`, *optional*): dropout before the classification, tagging and multiple-choice
            projections; `None` uses `hidden_dropout`.
        embedding_size (`int`, *optional*): width of the token, position and token-type embeddings and their norm,
            projected to `hidden_size` before the first block (ELECTRA, Clark et al., 2020, whose small models embed
            in 128 channels; ALBERT's factorised embeddings). The masked-LM head maps back to this width and scores
            against the token embedding. `None` (the default) embeds in `hidden_size`, with no projection.
        classifier_pooling (`str`, defaults to `"cls"`): what the sequence-classification and multiple-choice heads
            classify without a pooler: the first token (`cls`) or the mean over the unmasked tokens (`mean`,
            ModernBERT's option).
        classifier_transform (`bool`, defaults to `False`): ModernBERT's task heads: the masked-LM head's transform
            (dense, the feed-forward activation, norm) before the classification, tagging, QA and multiple-choice
            projections, on the sentence representation or on every token.
        local_attention_window (`int`, *optional*): ModernBERT's local attention (Warner et al., 2024; Beltagy et al.,
            2020): in a local layer each token attends to the tokens at most `local_attention_window // 2` positions
            away on either side. `None`: every layer attends globally.
        global_attention_every_n_layers (`int`, defaults to 1): with `local_attention_window`, layer i attends
            globally when i is a multiple of n, locally otherwise (ModernBERT: 3).
        local_rope_theta (`float`, *optional*): base of the rotary frequencies of the local layers (ModernBERT:
            10000, its global layers 160000); `None` uses `rope_theta`.
        first_block_attention_norm (`bool`, defaults to `True`): the pre-norm of the first block's attention; `False`
            lets it read the embedding norm's output directly, as ModernBERT does (pre-norm with `embedding_norm`).
        conv_kernel_size (`int`, defaults to 0): DeBERTa-v2's convolution branch after the first block (its xlarge and
            xxlarge checkpoints: 3): a 1-D convolution of this odd width over the embeddings, activated, added to the
            block's output and normed. 0: none.
        conv_groups (`int`, defaults to 1), conv_activation (`str`, defaults to `"tanh"`): its groups and activation
            (DeBERTa's `conv_groups`, `conv_act`).
    """

    model_type = "hfzoo_encoder"

    type_vocab_size: int = 2
    add_pooling_layer: bool = True
    pooler_activation: str = "tanh"
    classifier_dropout: float | None = None
    embedding_size: int | None = None
    classifier_pooling: str = "cls"
    classifier_transform: bool = False
    local_attention_window: int | None = None
    global_attention_every_n_layers: int = 1
    local_rope_theta: float | None = None
    first_block_attention_norm: bool = True
    conv_kernel_size: int = 0
    conv_groups: int = 1
    conv_activation: str = "tanh"

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        # AutoModelForPreTraining has several encoder heads and picks one by `architectures`; transformers iterates
        # it without a None check, so a fresh config names none as an empty list (the default head is then taken).
        if self.architectures is None:
            self.architectures = []
        if self.type_vocab_size < 0:
            raise ValueError(f"type_vocab_size must be >= 0 (0 = no token types), got {self.type_vocab_size}.")
        for name in ("pooler_activation", "conv_activation"):
            if getattr(self, name) not in UNGATED_ACTIVATIONS:
                raise ValueError(
                    f"{name}={getattr(self, name)!r} is not supported; choose one of "
                    f"{', '.join(map(repr, UNGATED_ACTIVATIONS))}."
                )
        if self.conv_kernel_size < 0 or (self.conv_kernel_size and self.conv_kernel_size % 2 == 0):
            raise ValueError(f"conv_kernel_size must be 0 (no convolution) or odd, got {self.conv_kernel_size}.")
        if self.conv_groups < 1 or self.hidden_size % self.conv_groups:
            raise ValueError(f"conv_groups ({self.conv_groups}) must divide hidden_size ({self.hidden_size}).")
        if self.embedding_size is not None and self.embedding_size <= 0:
            raise ValueError(
                f"embedding_size must be a positive integer or None (= hidden_size), got {self.embedding_size}."
            )
        if self.classifier_dropout is not None and not 0.0 <= self.classifier_dropout < 1.0:
            raise ValueError(
                f"classifier_dropout must be in [0, 1) or None (= hidden_dropout), got {self.classifier_dropout}."
            )
        self._validate_local_attention()
        if self.classifier_pooling not in ("cls", "mean"):
            raise ValueError(f"classifier_pooling={self.classifier_pooling!r} is not supported; use 'cls' or 'mean'.")
        if self.classifier_pooling == "mean" and self.add_pooling_layer:
            raise ValueError(
                "classifier_pooling='mean' averages the tokens where a pooler reads the first one: it needs "
                "add_pooling_layer=False."
            )
        if not self.first_block_attention_norm and (self.norm_position != "pre" or not self.embedding_norm):
            raise ValueError(
                "first_block_attention_norm=False leaves the first block to the embedding norm: it needs "
                f"norm_position='pre' and embedding_norm=True (got {self.norm_position!r}, {self.embedding_norm})."
            )

    def _validate_local_attention(self) -> None:
        if self.global_attention_every_n_layers < 1:
            raise ValueError(
                f"global_attention_every_n_layers must be >= 1, got {self.global_attention_every_n_layers}."
            )
        if self.local_attention_window is not None and self.local_attention_window < 2:
            raise ValueError(f"local_attention_window must be None or >= 2, got {self.local_attention_window}.")
        if self.local_rope_theta is not None and (self.position_embedding != "rotary" or self.local_rope_theta <= 0):
            raise ValueError(
                f"local_rope_theta={self.local_rope_theta} is the base of rotary positions: it needs "
                f"position_embedding='rotary' (got {self.position_embedding!r}) and a positive value."
            )

    def component_files(self) -> list[str]:
        uses = {
            "deberta_convolution": self.conv_kernel_size,
            "local_attention": any(map(self.is_local_layer, range(self.num_hidden_layers))),
        }
        return super().component_files() + [name for name, used in uses.items() if used]

    def is_local_layer(self, layer_idx: int) -> bool:
        """Whether layer `layer_idx` attends locally (`local_attention_window`), not to the whole sequence."""
        return self.local_attention_window is not None and layer_idx % self.global_attention_every_n_layers != 0
