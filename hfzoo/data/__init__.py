"""Data layer: the embedded default corpus, corpus loading, packing, tokenizer training and objective collators."""

from .collators import (
    CausalLMCollator,
    DenoisingCollator,
    MaskedLMCollator,
    SpanCorruptionCollator,
    compute_input_and_target_lengths,
)
from .corpus import CorpusError, load_corpus
from .default_corpus import extract_docstrings, load_default_corpus
from .packing import pack
from .tokenizer_training import train_tokenizer, train_tokenizer_on_corpus

__all__ = [
    "CausalLMCollator",
    "DenoisingCollator",
    "MaskedLMCollator",
    "SpanCorruptionCollator",
    "compute_input_and_target_lengths",
    "CorpusError",
    "extract_docstrings",
    "load_corpus",
    "load_default_corpus",
    "pack",
    "train_tokenizer",
    "train_tokenizer_on_corpus",
]
