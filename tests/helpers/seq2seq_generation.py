"""Encoder-decoder test models and greedy generation from them, with the pad and eos ids of the tiny presets."""

import torch
from transformers import AutoModelForSeq2SeqLM

PAD, EOS = 0, 1
NEW_TOKENS = 8


def seq2seq(tiny_model, preset: str, **overrides):
    return tiny_model(preset, AutoModelForSeq2SeqLM, **overrides)


def greedy(model, input_ids: torch.Tensor, **kwargs) -> torch.Tensor:
    """Greedy `generate`: the decoder start token followed by NEW_TOKENS new tokens."""
    with torch.no_grad():
        return model.generate(
            input_ids, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False, **kwargs
        )

