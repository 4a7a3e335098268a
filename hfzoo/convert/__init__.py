"""Real pretrained weights in and out: hfzoo models <-> transformers' own GPT-2, Llama, Mistral, Qwen2, Gemma, BERT,
RoBERTa, DistilBERT, ELECTRA, DeBERTa-v2/v3, ModernBERT, T5, mT5 and BART (the table is `FAMILIES`).

`from_native` turns a native model (or folder) into the hfzoo model that computes the same outputs, so a real
checkpoint trains with hfzoo's speed and adapters; `to_native` saves an hfzoo model as the native class, so tools
that refuse remote code (serving engines, exporters) read it. Each family is one module describing its weights
as rules (`mapping`), from which both directions run; the round trip native -> hfzoo -> native is bit-identical.
`adapter_to_native` and `adapter_from_native` map PEFT adapters (LoRA, bottleneck) by the same rules, so an adapter
trained on an imported model attaches to the native one, and back.
"""

from .adapters import adapter_from_native, adapter_to_native
from .api import FAMILIES, from_native, import_checkpoint, native_family, native_model, to_native
from .pretrained import installed_model_path, minilm_model_path

__all__ = [
    "FAMILIES", "adapter_from_native", "adapter_to_native", "from_native", "import_checkpoint", "installed_model_path",
    "minilm_model_path", "native_family", "native_model", "to_native",
]
