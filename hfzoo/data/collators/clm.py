"""Causal language modelling: predict every next token (GPT, Radford et al. 2018/2019)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedTokenizerBase

from .common import IGNORE_INDEX, length_mask, pad, required_token_id


@dataclass
class CausalLMCollator:
    """``input_ids``, ``attention_mask`` and ``labels`` = ``input_ids`` with padding set to -100.

    The model shifts the labels itself (transformers' convention), so no token is dropped here.
    Padding is found by position, not by id: with ``pad_token = eos_token`` (GPT-2's usual
    setup) the EOS tokens that end documents inside a packed block keep their labels. Nothing
    is random, so the collator holds no generator.

    Args:
        tokenizer: supplies the pad id.
        pad_to_multiple_of: round the padded length up to a multiple of this (tensor cores).
    """

    tokenizer: PreTrainedTokenizerBase
    pad_to_multiple_of: int | None = None

    def __post_init__(self) -> None:
        self._pad_id = required_token_id(self.tokenizer, "pad", "padding a batch")

    def __call__(self, examples: Sequence[Mapping[str, Sequence[int]]]) -> dict[str, torch.Tensor]:
        input_ids, lengths = pad([ex["input_ids"] for ex in examples], self._pad_id, self.pad_to_multiple_of)
        attention_mask = length_mask(lengths, input_ids.shape[1])
        labels = input_ids.masked_fill(~attention_mask, IGNORE_INDEX)
        return {"input_ids": input_ids, "attention_mask": attention_mask.long(), "labels": labels}
