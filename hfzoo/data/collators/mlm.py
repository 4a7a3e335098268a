"""Masked language modelling (BERT, Devlin et al. 2019; SpanBERT, Joshi et al. 2020) and next-sentence prediction."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import torch

from transformers import PreTrainedTokenizerBase

from .common import (
    IGNORE_INDEX, SeededCollator, check_probability, choose, length_mask, pad, regular_ids, required_token_id,
    unmaskable_ids, word_index, word_start_table,
)  # fmt: skip
from .spans import lengths_until_budget, place_spans, truncated_geometric

Masking = Literal["token", "whole_word", "span"]
MASKINGS = ("token", "whole_word", "span")


def truncate_pair(a: list[int], b: list[int], max_tokens: int) -> tuple[list[int], list[int]]:
    """Cut the longer segment (``b`` on ties) from the end until both fit, as BERT's ``truncate_seq_pair``.

    BERT cuts a random end of the segment; cutting the tail keeps "B follows A" true for label 0.
    """
    excess = len(a) + len(b) - max_tokens
    if excess <= 0:
        return a, b
    len_a, len_b = len(a), len(b)
    equalise = min(excess, abs(len_a - len_b))
    if len_a > len_b:
        len_a -= equalise
    else:
        len_b -= equalise
    rest = excess - equalise
    return a[: len_a - rest // 2], b[: len_b - (rest + 1) // 2]


@dataclass
class MaskedLMCollator(SeededCollator):
    """Choose ``mlm_probability`` of each row's tokens to predict; ``labels`` hold them, -100 elsewhere.

    Special tokens ([CLS], [SEP], EOS separators, padding ...) are never chosen; the unknown
    token is text and can be. Selection (``masking``), with budgets rounded as BERT
    (``max(1, round(p * n))``):

    * ``"token"``: exactly the budget of the row's ``n`` other tokens, uniformly (BERT's
      ``create_pretraining_data``; transformers' collator flips a coin per token instead).
    * ``"whole_word"``: exactly the budget of the row's words, with every sub-token of each
      chosen word (BERT's whole-word masking). Word boundaries come from the token strings
      (:func:`~hfzoo.data.collators.common.word_start_table`: WordPiece ``##``, byte-level
      ``Ġ``, Metaspace ``▁``). Counting words rather than tokens keeps every chosen word whole,
      so the token fraction is ``p`` in expectation rather than exactly.
    * ``"span"``: SpanBERT. Span lengths in words follow a geometric(``span_geometric_p``)
      truncated to ``max_span_length`` (mean 3.8 words), drawn until the word budget is spent
      (the last one cut to fit), then laid out at random with at least one unchosen word between
      spans (:func:`~hfzoo.data.collators.spans.place_spans`).

    Each chosen token becomes ``[MASK]`` with probability ``mask_replace_prob``, a random
    non-special token with probability ``random_replace_prob``, and stays unchanged otherwise
    (BERT's 80/10/10); in span mode one draw decides for a whole span (SpanBERT).

    Next-sentence prediction (``next_sentence_prediction=True``): each example holds segment A
    in ``input_ids`` and the segment that follows it in its document in ``next_input_ids``
    (optionally a ``document_id``). With probability 1/2, B is replaced by the
    ``next_input_ids`` of another example of the batch from a different document (examples
    without ``document_id`` count as separate documents); the batch gets
    ``[CLS] A [SEP] B [SEP]``, ``token_type_ids`` (0 for ``[CLS] A [SEP]``, 1 for ``B [SEP]``) and
    ``next_sentence_label`` (0 = B follows A, 1 = random, as BERT). ``max_length`` caps the pair
    (see :func:`truncate_pair`). Masking then applies to the pair.

    Args:
        tokenizer: fast tokenizer with a mask token (and CLS/SEP for NSP).
        mlm_probability: fraction of tokens (or words) to predict.
        masking: ``"token"``, ``"whole_word"`` or ``"span"``.
        mask_replace_prob, random_replace_prob: the 80/10/10 split.
        span_geometric_p, max_span_length: SpanBERT's span-length distribution.
        next_sentence_prediction, max_length: see above.
        pad_to_multiple_of: round the padded length up to a multiple of this.
        generator: source of randomness (torch's global RNG when None).
    """

    tokenizer: PreTrainedTokenizerBase
    mlm_probability: float = 0.15
    masking: Masking = "token"
    mask_replace_prob: float = 0.8
    random_replace_prob: float = 0.1
    span_geometric_p: float = 0.2
    max_span_length: int = 10
    next_sentence_prediction: bool = False
    max_length: int | None = None
    pad_to_multiple_of: int | None = None
    generator: torch.Generator | None = None

    def __post_init__(self) -> None:
        if self.masking not in MASKINGS:
            raise ValueError(f"masking={self.masking!r}; expected one of {MASKINGS}")
        check_probability("mlm_probability", self.mlm_probability, allow_zero=False)
        check_probability("mask_replace_prob", self.mask_replace_prob)
        check_probability("random_replace_prob", self.random_replace_prob)
        if self.mask_replace_prob + self.random_replace_prob > 1:
            raise ValueError(
                f"mask_replace_prob + random_replace_prob = {self.mask_replace_prob + self.random_replace_prob} > 1"
            )
        check_probability("span_geometric_p", self.span_geometric_p, allow_zero=False)
        if self.max_span_length < 1:
            raise ValueError(f"max_span_length must be >= 1, got {self.max_span_length}")
        self._mask_id = required_token_id(self.tokenizer, "mask", "masked language modelling")
        self._pad_id = required_token_id(self.tokenizer, "pad", "padding a batch")
        if self.next_sentence_prediction:
            self._cls_id = required_token_id(self.tokenizer, "cls", "next-sentence prediction")
            self._sep_id = required_token_id(self.tokenizer, "sep", "next-sentence prediction")
            if self.max_length is not None and self.max_length < 5:
                raise ValueError(f"max_length={self.max_length} leaves no room for two segments and 3 special tokens")
        self._unmaskable = unmaskable_ids(self.tokenizer)
        self._regular = regular_ids(self.tokenizer)
        self._word_starts = None if self.masking == "token" else word_start_table(self.tokenizer)

    def __call__(self, examples: Sequence[Mapping[str, Sequence[int]]]) -> dict[str, torch.Tensor]:
        batch = {}
        if self.next_sentence_prediction:
            sequences, token_types, batch["next_sentence_label"] = self._sentence_pairs(examples)
            batch["token_type_ids"], _ = pad(token_types, 0, self.pad_to_multiple_of)
        else:
            sequences = [ex["input_ids"] for ex in examples]
        input_ids, lengths = pad(sequences, self._pad_id, self.pad_to_multiple_of)
        attention_mask = length_mask(lengths, input_ids.shape[1])
        maskable = attention_mask & ~torch.isin(input_ids, self._unmaskable)
        chosen, decision = self._choose(input_ids, maskable)
        labels = input_ids.masked_fill(~chosen, IGNORE_INDEX)
        random_tokens = self._regular[torch.randint(len(self._regular), input_ids.shape, generator=self.generator)]
        to_mask = chosen & (decision < self.mask_replace_prob)
        to_random = chosen & ~to_mask & (decision < self.mask_replace_prob + self.random_replace_prob)
        input_ids = torch.where(to_random, random_tokens, input_ids.masked_fill(to_mask, self._mask_id))
        return {"input_ids": input_ids, "attention_mask": attention_mask.long(), "labels": labels, **batch}

    def _budget(self, units: torch.Tensor) -> torch.Tensor:
        return torch.where(units > 0, (units.double() * self.mlm_probability).round().long().clamp(min=1), 0)

    def _choose(self, input_ids: torch.Tensor, maskable: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Which tokens to predict, and a uniform draw per token deciding its replacement."""
        if self.masking == "token":
            chosen = choose(maskable, self._budget(maskable.sum(1)), self.generator)
            return chosen, torch.rand(input_ids.shape, generator=self.generator)
        word, num_words = word_index(input_ids, maskable, self._word_starts)
        if not maskable.any():
            return maskable, torch.rand(input_ids.shape, generator=self.generator)
        if self.masking == "whole_word":
            is_word = torch.arange(int(num_words.max())) < num_words[:, None]
            chosen_words = choose(is_word, self._budget(num_words), self.generator)
            chosen = maskable & chosen_words.gather(1, word.clamp(min=0))
            return chosen, torch.rand(input_ids.shape, generator=self.generator)
        draw = truncated_geometric(self.span_geometric_p, self.max_span_length)
        lengths, num_spans = lengths_until_budget(self._budget(num_words), draw, self.generator)
        span_of_word = place_spans(lengths, num_spans, num_words, self.generator)
        span = torch.where(maskable, span_of_word.gather(1, word.clamp(min=0)), -1)
        per_span = torch.rand(lengths.shape, generator=self.generator)
        return span >= 0, per_span.gather(1, span.clamp(min=0))

    def _sentence_pairs(
        self, examples: Sequence[Mapping[str, Sequence[int]]]
    ) -> tuple[list[list[int]], list[list[int]], torch.Tensor]:
        """``[CLS] A [SEP] B [SEP]`` per example with its token types, and the NSP labels."""
        if any("next_input_ids" not in ex for ex in examples):
            raise KeyError(
                "next_sentence_prediction=True needs examples with 'input_ids' (segment A) and 'next_input_ids' "
                f"(the segment that follows A in its document); got keys {sorted(examples[0])}"
            )
        documents = torch.tensor([ex.get("document_id", -1 - i) for i, ex in enumerate(examples)])
        other_document = documents[:, None] != documents[None, :]
        scores = torch.rand((len(examples), len(examples)), generator=self.generator)
        partner = scores.masked_fill(~other_document, -1.0).argmax(1).tolist()
        is_random = (torch.rand(len(examples), generator=self.generator) < 0.5) & other_document.any(1)
        sequences, token_types = [], []
        for i, example in enumerate(examples):
            a = list(example["input_ids"])
            b = list(examples[partner[i]]["next_input_ids"] if is_random[i] else example["next_input_ids"])
            if self.max_length is not None:
                a, b = truncate_pair(a, b, self.max_length - 3)
            sequences.append([self._cls_id, *a, self._sep_id, *b, self._sep_id])
            token_types.append([0] * (len(a) + 2) + [1] * (len(b) + 1))
        return sequences, token_types, is_random.long()
