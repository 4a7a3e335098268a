"""BART's denoising (Lewis et al. 2020): corrupt the text, reconstruct the original.

The noising functions follow fairseq's ``DenoisingDataset`` and are applied in its order:
sentence permutation, then masking (token masking, deletion or text infilling), then random
insertion, then document rotation. They work on whole right-padded batches ``(ids [B, L],
lengths [B])``; rows change length independently, with no Python loop over rows or tokens.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from transformers import PreTrainedTokenizerBase

from .common import (
    IGNORE_INDEX, SeededCollator, ceil_fraction, check_probability, choose, compact, length_mask, pad, regular_ids,
    required_token_id, scatter_rows, shift_right, unmaskable_ids, word_index, word_start_table,
)  # fmt: skip
from .spans import lengths_until_budget, place_spans, poisson

MaskLength = Literal["subword", "word", "span-poisson"]
MASK_LENGTHS = ("subword", "word", "span-poisson")


def sentence_end_table(tokenizer: PreTrainedTokenizerBase, punctuation: Sequence[str]) -> torch.Tensor:
    """Bool per vocabulary id: a token whose text is one of ``punctuation`` (e.g. ``.``, ``Ġ.``), or EOS/SEP.

    fairseq splits on its full-stop token; document separators end sentences too.
    """
    tokens = tokenizer.convert_ids_to_tokens(range(len(tokenizer)))
    table = torch.tensor([tokenizer.convert_tokens_to_string([t]).strip() in punctuation for t in tokens])
    for separator in (tokenizer.eos_token_id, tokenizer.sep_token_id):
        if separator is not None:
            table[separator] = True
    return table


def permute_sentences(
    ids: torch.Tensor, lengths: torch.Tensor, is_end: torch.Tensor, ratio: float, generator: torch.Generator | None
) -> torch.Tensor:
    """Shuffle ``ceil(ratio * n)`` of each row's ``n`` sentences among their own places (fairseq).

    A sentence ends at the last of a run of ``is_end`` tokens (so "..." stays whole); the row's
    tail after its last full stop is a sentence too.
    """
    batch, width = ids.shape
    valid = length_mask(lengths, width)
    stop = is_end[ids] & valid
    end = stop & ~F.pad(stop[:, 1:], (0, 1), value=False)
    sentence = F.pad(end.long().cumsum(1)[:, :-1], (1, 0))
    num_sentences = torch.where(lengths > 0, sentence.gather(1, (lengths - 1).clamp(min=0)[:, None])[:, 0] + 1, 0)
    if int(num_sentences.max()) < 2:
        return ids
    column = torch.arange(int(num_sentences.max())).expand(batch, -1)
    num_moved = ceil_fraction(num_sentences, ratio)
    moved = choose(column < num_sentences[:, None], num_moved, generator)
    slots = torch.where(moved, column, column.shape[1]).sort(1).values  # places of the moved sentences
    movers = torch.rand(moved.shape, generator=generator).masked_fill(~moved, 2.0).argsort(1)  # them, shuffled
    everywhere = torch.ones_like(moved)
    ordering = scatter_rows(
        column.shape[1], 0, (column, column, everywhere), (slots, movers, column < num_moved[:, None])
    )  # ordering[place] = the sentence put there
    place = torch.empty_like(ordering).scatter_(1, ordering, column)
    key = place.gather(1, sentence.clamp(max=column.shape[1] - 1)) * (width + 1) + torch.arange(width)
    return ids.gather(1, key.masked_fill(~valid, torch.iinfo(torch.long).max).argsort(1))


def apply_spans(
    ids: torch.Tensor, lengths: torch.Tensor, span: torch.Tensor, replace_length: int, replacement: torch.Tensor,
    pad_id: int,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """Corrupt the tokens covered by spans (``span >= 0``), fairseq's ``replace_length``:

    * ``-1``: every covered token becomes its ``replacement`` (token masking);
    * ``0``: covered tokens are deleted (token deletion);
    * ``1``: each span becomes one ``replacement`` token (text infilling). A span split by a
      special token (a document separator) gets one per contiguous piece, so every gap in the
      output is marked.
    """
    valid = length_mask(lengths, ids.shape[1])
    covered = span >= 0
    first = covered & (span != F.pad(span[:, :-1], (1, 0), value=-1))
    if replace_length == -1:
        return compact(torch.where(covered, replacement, ids), valid, pad_id)
    if replace_length == 0:
        return compact(ids, valid & ~covered, pad_id)
    return compact(torch.where(first, replacement, ids), valid & (~covered | first), pad_id)


def insert_tokens(
    ids: torch.Tensor, lengths: torch.Tensor, counts: torch.Tensor, mask_id: int, random_ratio: float,
    vocabulary: torch.Tensor, pad_id: int, generator: torch.Generator | None,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """Insert ``counts[b]`` tokens at uniformly random places of row b: masks, ``ceil(random_ratio * count)``
    of them random tokens from ``vocabulary`` (fairseq's ``add_insertion_noise``)."""
    total = lengths + counts
    width = int(total.max())
    valid = length_mask(total, width)
    new = choose(valid, counts, generator)
    random = choose(new, ceil_fraction(counts, random_ratio), generator)
    old = ids.gather(1, ((~new).cumsum(1) - 1).clamp(0, max(ids.shape[1] - 1, 0)))
    random_tokens = vocabulary[torch.randint(len(vocabulary), (len(ids), width), generator=generator)]
    inserted = torch.where(random, random_tokens, mask_id)
    return torch.where(new, inserted, old).masked_fill(~valid, pad_id), total


def rotate(ids: torch.Tensor, lengths: torch.Tensor, ratio: float, generator: torch.Generator | None) -> torch.Tensor:
    """With probability ``ratio`` per row, rotate it to start at a uniformly random token other than the first."""
    batch, width = ids.shape
    rotated = (torch.rand(batch, generator=generator) < ratio) & (lengths > 1)
    offset = 1 + (torch.rand(batch, generator=generator) * (lengths - 1)).long()
    source = (torch.arange(width) + offset[:, None]) % lengths.clamp(min=1)[:, None]
    keep = ~(rotated[:, None] & length_mask(lengths, width))
    return ids.gather(1, torch.where(keep, torch.arange(width), source))


@dataclass
class DenoisingCollator(SeededCollator):
    """BART pretraining batches: noised ``input_ids``/``attention_mask``, the original as ``labels``.

    Defaults are the paper's final setting, text infilling (30% of words in Poisson(3) spans,
    one ``<mask>`` per span) with sentence permutation. Each noise has its own knob; 0 turns it off:

    * ``permute_sentence_ratio``: fraction of sentences shuffled (:func:`permute_sentences`,
      split at ``sentence_end_tokens`` and EOS/SEP).
    * ``mask_ratio``: fraction of units (``mask_length``: tokens, words, or words in Poisson
      spans) corrupted, ``ceil(ratio * units)`` per row as fairseq. ``replace_length`` -1/0/1 =
      token masking / deletion / one mask per span (:func:`apply_spans`). Poisson spans are laid
      out with at least one intact word between them (:func:`~hfzoo.data.collators.spans.place_spans`);
      zero-length spans insert a mask at a random place, as fairseq. ``random_ratio`` of the
      masks are random tokens instead (fairseq's ``--mask-random``, 0.1 in BART's release).
    * ``insert_ratio``: ``ceil(ratio * length)`` extra masks inserted (:func:`insert_tokens`).
    * ``rotate_ratio``: probability of rotating the row (:func:`rotate`).

    Applied in fairseq's order: permute, mask, insert, rotate. ``labels`` are the example's
    tokens as given (padded with -100); the model makes ``decoder_input_ids`` by shifting them
    right unless ``decoder_start_token_id`` is set (BART starts with EOS, T5-style models with pad).
    Special tokens (other than the unknown token, which is text) are never masked or deleted.
    """

    tokenizer: PreTrainedTokenizerBase
    permute_sentence_ratio: float = 1.0
    mask_ratio: float = 0.3
    mask_length: MaskLength = "span-poisson"
    poisson_lambda: float = 3.0
    replace_length: int = 1
    random_ratio: float = 0.0
    insert_ratio: float = 0.0
    rotate_ratio: float = 0.0
    sentence_end_tokens: tuple[str, ...] = (".", "!", "?")
    decoder_start_token_id: int | None = None
    pad_to_multiple_of: int | None = None
    generator: torch.Generator | None = None

    def __post_init__(self) -> None:
        for name in ("permute_sentence_ratio", "mask_ratio", "random_ratio", "insert_ratio", "rotate_ratio"):
            check_probability(name, getattr(self, name))
        if self.mask_length not in MASK_LENGTHS:
            raise ValueError(f"mask_length={self.mask_length!r}; expected one of {MASK_LENGTHS}")
        if self.replace_length not in (-1, 0, 1):
            raise ValueError(
                f"replace_length must be -1 (mask each token), 0 (delete) or 1 (one mask per span), "
                f"got {self.replace_length}"
            )
        if self.poisson_lambda <= 0:
            raise ValueError(f"poisson_lambda must be positive, got {self.poisson_lambda}")
        self._pad_id = required_token_id(self.tokenizer, "pad", "padding a batch")
        if self.mask_ratio > 0 or self.insert_ratio > 0:
            self._mask_id = required_token_id(self.tokenizer, "mask", "masking and insertion noise")
        self._unmaskable = unmaskable_ids(self.tokenizer)
        self._regular = regular_ids(self.tokenizer)
        by_words = self.mask_ratio > 0 and self.mask_length != "subword"
        self._word_starts = word_start_table(self.tokenizer) if by_words else None
        permutes = self.permute_sentence_ratio > 0
        self._sentence_end = sentence_end_table(self.tokenizer, self.sentence_end_tokens) if permutes else None

    def __call__(self, examples: Sequence[Mapping[str, Sequence[int]]]) -> dict[str, torch.Tensor]:
        original, original_lengths = pad([ex["input_ids"] for ex in examples], self._pad_id)
        ids, lengths = original, original_lengths
        if self.permute_sentence_ratio > 0:
            ids = permute_sentences(ids, lengths, self._sentence_end, self.permute_sentence_ratio, self.generator)
        if self.mask_ratio > 0:
            ids, lengths = self._mask(ids, lengths)
        if self.insert_ratio > 0:
            counts = ceil_fraction(lengths, self.insert_ratio)
            ids, lengths = self._insert(ids, lengths, counts)
        if self.rotate_ratio > 0:
            ids = rotate(ids, lengths, self.rotate_ratio, self.generator)
        if self.pad_to_multiple_of and ids.shape[1] % self.pad_to_multiple_of:
            extra = self.pad_to_multiple_of - ids.shape[1] % self.pad_to_multiple_of
            ids = F.pad(ids, (0, extra), value=self._pad_id)
        labels = original.masked_fill(~length_mask(original_lengths, original.shape[1]), IGNORE_INDEX)
        batch = {"input_ids": ids, "attention_mask": length_mask(lengths, ids.shape[1]).long(), "labels": labels}
        if self.decoder_start_token_id is not None:
            batch["decoder_input_ids"] = shift_right(labels, self.decoder_start_token_id, self._pad_id)
        return batch

    def _insert(
        self, ids: torch.Tensor, lengths: torch.Tensor, counts: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return insert_tokens(
            ids, lengths, counts, self._mask_id, self.random_ratio, self._regular, self._pad_id, self.generator
        )

    def _mask(self, ids: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        maskable = length_mask(lengths, ids.shape[1]) & ~torch.isin(ids, self._unmaskable)
        unit, num_units = word_index(ids, maskable, self._word_starts)
        if not maskable.any():
            return ids, lengths
        budget = ceil_fraction(num_units, self.mask_ratio)
        num_inserts = torch.zeros_like(budget)
        if self.mask_length == "span-poisson":
            span_lengths, num_spans = lengths_until_budget(budget, poisson(self.poisson_lambda), self.generator)
            positive = span_lengths > 0
            num_inserts = num_spans - positive.sum(1)  # zero-length spans become insertions
            span_lengths = span_lengths.gather(1, (~positive).long().argsort(dim=1, stable=True))
            span_of_unit = place_spans(span_lengths, positive.sum(1), num_units, self.generator)
        else:
            units = torch.arange(int(num_units.max())).expand(len(ids), -1)
            span_of_unit = torch.where(choose(units < num_units[:, None], budget, self.generator), units, -1)
        span = torch.where(maskable, span_of_unit.gather(1, unit.clamp(min=0)), -1)
        is_random = torch.rand((len(ids), max(int(span.max()) + 1, 1)), generator=self.generator) < self.random_ratio
        random_tokens = self._regular[torch.randint(len(self._regular), ids.shape, generator=self.generator)]
        replacement = torch.where(is_random.gather(1, span.clamp(min=0)), random_tokens, self._mask_id)
        ids, lengths = apply_spans(ids, lengths, span, self.replace_length, replacement, self._pad_id)
        if num_inserts.any():
            ids, lengths = self._insert(ids, lengths, num_inserts)
        return ids, lengths
