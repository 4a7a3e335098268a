"""mT5 (`MT5ForConditionalGeneration`, `MT5Model`, `MT5EncoderModel` and the classification, QA and tagging heads)
<-> hfzoo's encoder-decoder: T5 v1.1's layout and weight names under mT5's classes (`t5` holds the rules).

What differs from T5 is only what transformers' classes do with the config: mT5 never scales the decoder output
by d_model**-0.5 (`MT5Config` has no `scale_decoder_outputs`, so `t5.generation_head_rules` adds no factor), and
its config always says the head is tied, so whether it is comes from the weights, as for T5.
"""

import dataclasses

from transformers import MT5Config

from ..models import ZooEncoderDecoderConfig
from .family import NativeFamily
from .heads import seq2seq_heads
from .t5 import CONFIG as T5_CONFIG
from .t5 import base_rules, generation_head_rules, layout_native_config, untie_head, zoo_config

CONFIG = dataclasses.replace(T5_CONFIG, native_class=MT5Config)


def native_config(config: ZooEncoderDecoderConfig) -> MT5Config:
    return layout_native_config(config, CONFIG, "mT5")


HEADS = seq2seq_heads("MT5", "", "transformer.", generation_head_rules, tagger_prefix="transformer.")
FAMILY = NativeFamily("mt5", "relative", zoo_config, native_config, base_rules, HEADS, prepare_native=untie_head)
