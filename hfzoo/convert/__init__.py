"""Real pretrained weights in and out: hfzoo models <-> transformers' own GPT-2, Llama, BERT, RoBERTa, T5 and BART.

`from_native` turns a native model (or folder) into the hfzoo model that computes the same outputs, so a real
checkpoint trains with hfzoo's speed and adapters; `to_native` saves an hfzoo model as the native class, so tools
that refuse remote code (serving engines, exporters) read it. Each family is one module describing its weights
as rules (`mapping`), from which both directions run; the round trip native -> hfzoo -> native is bit-identical.
"""

from .api import FAMILIES, from_native, native_family, to_native
from .pretrained import minilm_model_path

__all__ = ["FAMILIES", "from_native", "minilm_model_path", "native_family", "to_native"]
