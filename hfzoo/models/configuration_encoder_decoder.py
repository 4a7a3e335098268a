"""Configuration of the encoder-decoder family (the original Transformer, T5 and BART as presets)."""

import copy

from .configuration_common import ZooTransformerConfig


class ZooEncoderDecoderConfig(ZooTransformerConfig):
    r"""
    Encoder-decoder transformer (Vaswani et al., 2017): a bidirectional encoder stack reads the source, a causal decoder
    stack with cross-attention writes the target. The original Transformer, T5 (Raffel et al., 2020) and BART (Lewis et
    al., 2020) are presets of these flags; see `hfzoo.list_presets()`. Component arguments are documented on
    `ZooTransformerConfig` (`num_hidden_layers` is the encoder depth); the encoder-decoder adds:

    Args:
        num_decoder_layers (`int`, *optional*): depth of the decoder stack; `None` uses `num_hidden_layers`.
        decoder_start_token_id (`int`, defaults to 0): the token the decoder starts from, and that `labels` are
            shifted right behind. T5 starts from its pad token (id 0 in hfzoo's encoder-decoder tokenizers), BART
            from `</s>`.
        share_embeddings (`bool`, defaults to `True`): one token embedding for source and target, as in the original
            Transformer, T5 and BART (Press & Wolf, 2017). `False` gives the encoder its own embedding.
        tie_word_embeddings (`bool`, defaults to `True`): the LM head reuses the decoder's token embedding (T5 v1.1
            unties it). Independent of `share_embeddings`.
        pad_token_id (`int`, defaults to 0), eos_token_id (`int`, defaults to 1): the layout of hfzoo's
            encoder-decoder tokenizers (`<pad>` 0, `</s>` 1, `<unk>` 2, as T5); `-100` in `labels` becomes
            `pad_token_id` in the shifted decoder input.
    """

    model_type = "hfzoo_encoder_decoder"
    keys_to_ignore_at_inference = ["past_key_values"]

    num_decoder_layers: int | None = None
    decoder_start_token_id: int | None = 0
    share_embeddings: bool = True
    is_encoder_decoder: bool = True
    pad_token_id: int | None = 0
    eos_token_id: int | list[int] | None = 1

    def __post_init__(self, **kwargs):
        if self.num_decoder_layers is None:
            self.num_decoder_layers = self.num_hidden_layers
        super().__post_init__(**kwargs)
        if not self.is_encoder_decoder:
            raise ValueError(
                "ZooEncoderDecoderConfig needs is_encoder_decoder=True (generate() relies on it); for a decoder-only "
                "model use ZooDecoderConfig instead."
            )
        if self.num_decoder_layers <= 0:
            raise ValueError(
                f"num_decoder_layers must be a positive integer (or None for num_hidden_layers), "
                f"got {self.num_decoder_layers}."
            )
        if self.decoder_start_token_id is None:
            raise ValueError(
                "decoder_start_token_id is required: generation and the label shift start the decoder from it; set it "
                "to the pad token id (T5) or to the eos token id (BART)."
            )
        if self.pad_token_id is None:
            raise ValueError(
                "pad_token_id is required: the decoder input reads it where labels are -100, and generate pads "
                "finished rows with it; set it to the tokenizer's pad token id."
            )
        for name in ("decoder_start_token_id", "pad_token_id"):
            token_id = getattr(self, name)
            if not 0 <= token_id < self.vocab_size:
                raise ValueError(
                    f"{name}={token_id} is outside the vocabulary (vocab_size={self.vocab_size}); change one of them."
                )

    def get_text_config(self, decoder: bool | None = None, encoder: bool | None = None) -> ZooTransformerConfig:
        """The decoder's view (`decoder=True`) has the decoder's depth in `num_hidden_layers`.

        generate sizes its `DynamicCache` from that view, one cache layer per decoder block.
        """
        config = super().get_text_config(decoder=decoder, encoder=encoder)
        if decoder and not encoder:
            config = copy.deepcopy(config)
            config.num_hidden_layers = self.num_decoder_layers
        return config
