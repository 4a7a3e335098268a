"""Configuration fields shared by the three hfzoo families (decoder, encoder, encoder-decoder).

Each field is one idea from a paper, so an architecture is a choice of flags rather than a copy of code.
"""

import inspect
import os

from transformers import PreTrainedConfig

from .component_options import check_field_types, validate_components


class ZooTransformerConfig(PreTrainedConfig):
    r"""
    Args:
        vocab_size (`int`, defaults to 8192): size of the token vocabulary.
        hidden_size (`int`, defaults to 256): width of the residual stream (`d_model`).
        num_hidden_layers (`int`, defaults to 4): number of transformer blocks.
        num_attention_heads (`int`, defaults to 4): query heads per attention layer.
        num_key_value_heads (`int`, *optional*): key/value heads; fewer than the query heads gives grouped-query
            attention (Ainslie et al., 2023), 1 gives multi-query attention (Shazeer, 2019). Defaults to the query heads.
        intermediate_size (`int`, defaults to 1024): inner width of the feed-forward block.
        activation (`str`, defaults to `"gelu"`): `gelu`, `gelu_new` (GPT-2's tanh approximation), `relu`, `relu2`
            (ReLU squared, So et al., 2021; the modded-nanoGPT speedrun's MLP), `silu`, or the gated `swiglu` /
            `geglu` (Shazeer, 2020) / `geglu_tanh` (gated by GPT-2's tanh GELU: T5 v1.1, mT5).
        norm_type (`str`, defaults to `"layernorm"`): `layernorm` (Ba et al., 2016) or `rmsnorm` (Zhang & Sennrich, 2019).
        norm_position (`str`, defaults to `"pre"`): `pre` (GPT-2, Llama, T5) or `post` (the original Transformer, BERT).
        norm_eps (`float`, defaults to 1e-5): epsilon of every norm.
        norm_bias (`bool`, defaults to `True`): whether LayerNorms have a bias (RMSNorm never has one).
        norm_unit_offset (`bool`, defaults to `False`): RMSNorm scales by `1 + weight`, its weight starting at 0
            (Gemma, Gemma Team, 2024); with `False` it scales by `weight`, starting at 1. RMSNorm only.
        position_embedding (`str`, defaults to `"learned"`): `learned` (GPT-2, BERT), `sinusoidal` (Vaswani et al.,
            2017), `rotary` (RoFormer, Su et al., 2021), `alibi` (Press et al., 2022), `relative` (T5's bucketed
            relative bias, Raffel et al., 2020), `disentangled` (DeBERTa's content-to-position and
            position-to-content attention over log-bucketed relative positions, He et al., 2021) or `none`.
        max_position_embeddings (`int`, defaults to 1024): longest sequence for learned positions (a longer input is an
            error); also the length the other position kinds are documented for.
        rope_theta (`float`, defaults to 10000.0): base of the rotary frequencies.
        relative_attention_num_buckets (`int`, defaults to 32), relative_attention_max_distance (`int`, defaults to
            128): T5's relative bias buckets.
        position_buckets (`int`, defaults to 256), max_relative_positions (`int`, defaults to 512): DeBERTa-v2's
            relative positions: distances up to position_buckets // 2 are exact, longer ones share logarithmic
            buckets up to max_relative_positions; 2 * position_buckets embedding rows. 0 buckets: plain distances
            clipped to +-max_relative_positions (DeBERTa v1).
        position_attention_terms (`str`, defaults to `"c2p|p2c"`): the position terms of disentangled attention
            (DeBERTa's `pos_att_type`): `c2p|p2c`, `c2p` or `p2c`. Scores are scaled by 1/sqrt(head_dim * (1 + terms)).
        attention_bias (`bool`, defaults to `True`): biases on the attention projections.
        attention_output_bias (`bool`, *optional*): a bias on the attention's output projection; defaults to
            `attention_bias`. Qwen2 (Yang et al., 2024) biases query, key and value but not the output.
        sliding_window (`int`, *optional*): each token attends to itself and the `sliding_window - 1` tokens before
            it, in every layer (Mistral; Beltagy et al., 2020); `None` attends to all earlier tokens. Decoder only.
        mlp_bias (`bool`, defaults to `True`): biases on the feed-forward projections.
        hidden_dropout (`float`, defaults to 0.1): dropout on embeddings and on each residual branch.
        attention_dropout (`float`, defaults to 0.1): dropout on attention probabilities.
        initializer_range (`float`, defaults to 0.02): standard deviation of the normal initialisation.
        scale_embeddings (`bool`, defaults to `False`): multiply token embeddings by sqrt(hidden_size) (Vaswani et al.).
        embedding_norm (`bool`, defaults to `False`): a norm on the summed embeddings, as BERT and BART have.
        tie_word_embeddings (`bool`, defaults to `True`): share the input embedding with the output projection.
        num_experts (`int`, defaults to 0): 0 for a dense feed-forward; >= 2 for a mixture of experts
            (Switch Transformer, Fedus et al., 2021; GShard, Lepikhin et al., 2020).
        num_experts_per_tok (`int`, defaults to 2): experts each token is routed to (top-k).
        router_aux_loss_coef (`float`, defaults to 0.01): weight of the load-balancing loss added to `loss`.
        qk_norm (`bool`, defaults to `False`): an RMSNorm over each query and key head before the rotation and the
            scores (Dehghani et al., 2023; OLMo 2, Qwen3, the speedrun): bounded attention logits. Decoder only.
        logit_softcap (`float`, *optional*): the language-model logits become `cap * tanh(logits / cap)` before the
            loss and in the output (Gemma 2; the speedrun uses 30); `None` leaves them as they are. Decoder only.
        zero_init_projections (`bool`, defaults to `False`): attention output and feed-forward down projections start
            at zero, so every block starts as the identity (the speedrun; Fixup-like). Only a fresh model's start.
    """

    vocab_size: int = 8192
    hidden_size: int = 256
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int | None = None
    intermediate_size: int = 1024
    activation: str = "gelu"
    norm_type: str = "layernorm"
    norm_position: str = "pre"
    norm_eps: float = 1e-5
    norm_bias: bool = True
    norm_unit_offset: bool = False
    position_embedding: str = "learned"
    max_position_embeddings: int = 1024
    rope_theta: float = 10000.0
    relative_attention_num_buckets: int = 32
    relative_attention_max_distance: int = 128
    position_buckets: int = 256
    max_relative_positions: int = 512
    position_attention_terms: str = "c2p|p2c"
    attention_bias: bool = True
    attention_output_bias: bool | None = None
    sliding_window: int | None = None
    mlp_bias: bool = True
    hidden_dropout: float = 0.1
    attention_dropout: float = 0.1
    initializer_range: float = 0.02
    scale_embeddings: bool = False
    embedding_norm: bool = False
    tie_word_embeddings: bool = True
    num_experts: int = 0
    num_experts_per_tok: int = 2
    router_aux_loss_coef: float = 0.01
    qk_norm: bool = False
    logit_softcap: float | None = None
    zero_init_projections: bool = False
    use_cache: bool = True
    pad_token_id: int | None = None
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None

    def __post_init__(self, **kwargs):
        try:
            check_field_types(self, self.field_types())
            if self.num_key_value_heads is None:
                self.num_key_value_heads = self.num_attention_heads
            if self.attention_output_bias is None:
                self.attention_output_bias = self.attention_bias
            super().__post_init__(**kwargs)
            validate_components(self)
        except (TypeError, ValueError) as error:
            # Loaded from a checkpoint (`from_pretrained` passes its folder as `name_or_path`): name its config file.
            if not kwargs.get("name_or_path"):
                raise
            raise type(error)(f"{os.path.join(kwargs['name_or_path'], 'config.json')}: {error}") from error

    @classmethod
    def field_types(cls) -> dict[str, object]:
        """The annotated fields hfzoo's config classes declare (this one and each family's), with their types;
        the fields `PreTrainedConfig` declares are transformers' to check."""
        annotations = {}
        for klass in reversed(cls.__mro__):
            if issubclass(klass, ZooTransformerConfig):
                annotations.update(inspect.get_annotations(klass))
        return annotations

    def component_files(self) -> list[str]:
        """The component files (`layers.COMPONENTS`, `layers.POSITION_KINDS`) this config's forward pass runs: the
        ones its checkpoints carry."""
        uses = {
            "alibi_positions": self.position_embedding == "alibi",
            "relative_positions": self.position_embedding == "relative",
            "disentangled_attention": self.position_embedding == "disentangled",
            "mixture_of_experts": self.num_experts,
        }
        return [name for name, used in uses.items() if used]

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads
