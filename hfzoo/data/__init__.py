"""Data layer: the embedded default corpus, corpus loading, packing, tokenizer training and objective collators."""

from . import collators
from .collators import *  # noqa: F403 (the collators package owns its public names)
from .corpus import CorpusError, load_corpus
from .default_corpus import extract_docstrings, load_default_corpus
from .packing import pack
from .tokenizer_training import train_tokenizer, train_tokenizer_on_corpus

__all__ = [
    *collators.__all__,
    "CorpusError",
    "extract_docstrings",
    "load_corpus",
    "load_default_corpus",
    "pack",
    "train_tokenizer",
    "train_tokenizer_on_corpus",
]
