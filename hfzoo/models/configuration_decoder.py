"""Configuration of the decoder-only family (GPT, Llama and their relatives as presets)."""

from .configuration_common import ZooTransformerConfig


class ZooDecoderConfig(ZooTransformerConfig):
    r"""
    Decoder-only transformer: causal self-attention blocks over a token embedding, with a language-model head.
    GPT-2 (Radford et al., 2019) and Llama (Touvron et al., 2023) are presets of these flags; see
    `hfzoo.list_presets()`. All component arguments are documented on `ZooTransformerConfig`.
    """

    model_type = "hfzoo_decoder"
    keys_to_ignore_at_inference = ["past_key_values"]
