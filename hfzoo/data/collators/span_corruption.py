"""T5's span corruption (Raffel et al. 2020): drop random spans, predict them after sentinels."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import PreTrainedTokenizerBase

from .common import IGNORE_INDEX, SeededCollator, length_mask, pad, required_token_id, scatter_rows, shift_right
from .spans import interleave, random_segmentation, span_index


def _noise_counts(
    length: torch.Tensor, noise_density: float, mean_noise_span_length: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """T5's ``num_noise_tokens = round(length * density)`` and ``num_noise_spans = round(noise / mean)``."""
    num_noise = (length.double() * noise_density).round().long()
    num_spans = (num_noise.double() / mean_noise_span_length).round().long()
    return num_noise, num_spans


def _one_per_row(positions: torch.Tensor, token_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A :func:`scatter_rows` part writing ``token_id`` at ``positions[b]`` of each row b."""
    column = positions[:, None]
    return column, torch.full_like(column, token_id), torch.ones_like(column, dtype=torch.bool)


def compute_input_and_target_lengths(
    inputs_length: int, noise_density: float = 0.15, mean_noise_span_length: float = 3.0
) -> tuple[int, int]:
    """How many raw tokens to pack per example so span corruption gives exactly ``inputs_length`` inputs.

    T5's ``random_spans_helper`` / transformers' ``compute_input_and_target_lengths``: returns
    ``(tokens_length, targets_length)``; inputs are the non-noise tokens, one sentinel per noise
    span and EOS, targets one sentinel per span, the noise tokens and EOS. E.g. 512 -> (568, 114).
    """

    def lengths_for(tokens_length: int) -> tuple[int, int]:
        counts = _noise_counts(torch.tensor(tokens_length), noise_density, mean_noise_span_length)
        num_noise, num_spans = (int(n) for n in counts)
        return tokens_length - num_noise + num_spans + 1, num_noise + num_spans + 1

    tokens_length = inputs_length
    while lengths_for(tokens_length + 1)[0] <= inputs_length:
        tokens_length += 1
    _, targets_length = lengths_for(tokens_length)
    if noise_density == 0.5 and targets_length > inputs_length:  # T5: keep targets at the (round) inputs length
        tokens_length -= 1
        targets_length -= 1
    return tokens_length, targets_length


def random_spans_noise_mask(
    lengths: torch.Tensor, noise_density: float, mean_noise_span_length: float, generator: torch.Generator | None
) -> torch.Tensor:
    """T5's ``random_spans_noise_mask`` for a batch: ``[B, max length]`` noise-span index per token, -1 if kept.

    ``round(length * density)`` noise tokens (at least 1, at most ``length - 1``) in
    ``round(noise / mean)`` spans (at least 1); noise and non-noise tokens are each cut into that
    many segments uniformly at random and interleaved, non-noise first, so every row starts with
    kept tokens and ends with a noise span.
    """
    length = lengths.clamp(min=2)  # as T5, a row of 1 token is treated as 2 and cut back
    num_noise, num_spans = _noise_counts(length, noise_density, mean_noise_span_length)
    num_noise = torch.minimum(num_noise.clamp(min=1), length - 1)
    num_spans = num_spans.clamp(min=1)
    noise = random_segmentation(num_noise, num_spans, generator)
    kept = random_segmentation(length - num_noise, num_spans, generator)
    span = span_index(interleave(kept, noise), noise, int(length.max()))
    return span[:, : int(lengths.max())].masked_fill(~length_mask(lengths, int(lengths.max())), -1)


@dataclass
class SpanCorruptionCollator(SeededCollator):
    """T5 pretraining batches: ``input_ids``/``attention_mask`` and ``labels`` (+ ``decoder_input_ids``).

    Each example's tokens are split by :func:`random_spans_noise_mask`. ``input_ids`` keep the
    non-noise tokens with each noise span replaced by one sentinel, ``<extra_id_0>``,
    ``<extra_id_1>``, ... in order, then EOS; ``labels`` are ``<extra_id_0> span0 <extra_id_1>
    span1 ... </s>``, padded with -100. Sentinel ids are looked up by their strings, so T5's own
    tokenizers (descending ids at the top of the vocabulary) and hfzoo's ``encoder_decoder``
    tokenizers both work. Pack examples to the ``tokens_length`` from
    :func:`compute_input_and_target_lengths` to get inputs of exactly the wanted length.

    Args:
        tokenizer: with ``<extra_id_i>`` tokens, an EOS and a pad token.
        noise_density: fraction of tokens corrupted (T5: 0.15).
        mean_noise_span_length: average span length (T5: 3).
        decoder_start_token_id: when set, also return ``decoder_input_ids`` = labels shifted right
            (T5 starts with the pad id); leave None for models that shift labels themselves.
        pad_to_multiple_of: round the padded input length up to a multiple of this.
        generator: source of randomness (torch's global RNG when None).
    """

    tokenizer: PreTrainedTokenizerBase
    noise_density: float = 0.15
    mean_noise_span_length: float = 3.0
    decoder_start_token_id: int | None = None
    pad_to_multiple_of: int | None = None
    generator: torch.Generator | None = None

    def __post_init__(self) -> None:
        if not 0 < self.noise_density < 1:
            raise ValueError(f"noise_density must be in (0, 1), got {self.noise_density}")
        if self.mean_noise_span_length < 1:
            raise ValueError(f"mean_noise_span_length must be >= 1, got {self.mean_noise_span_length}")
        self._eos_id = required_token_id(self.tokenizer, "eos", "span corruption (it ends inputs and targets)")
        self._pad_id = required_token_id(self.tokenizer, "pad", "padding a batch")
        vocabulary = self.tokenizer.get_vocab()
        sentinels = []
        while f"<extra_id_{len(sentinels)}>" in vocabulary:
            sentinels.append(vocabulary[f"<extra_id_{len(sentinels)}>"])
        if not sentinels:
            raise ValueError(
                "span corruption needs sentinel tokens <extra_id_0>, <extra_id_1>, ...; this tokenizer has none"
            )
        self._sentinels = torch.tensor(sentinels)

    def __call__(self, examples: Sequence[Mapping[str, Sequence[int]]]) -> dict[str, torch.Tensor]:
        ids, lengths = pad([ex["input_ids"] for ex in examples], self._pad_id)
        span = random_spans_noise_mask(lengths, self.noise_density, self.mean_noise_span_length, self.generator)
        if int(span.max()) >= len(self._sentinels):
            raise ValueError(
                f"a row has {int(span.max()) + 1} noise spans but the tokenizer has only {len(self._sentinels)} "
                "sentinels; use shorter examples, a longer mean_noise_span_length or more <extra_id_i> tokens"
            )
        noise = span >= 0
        starts = noise & (span != F.pad(span[:, :-1], (1, 0), value=-1))  # first token of each noise span
        sentinel = self._sentinels[span.clamp(min=0)]
        valid = length_mask(lengths, ids.shape[1])
        # Inputs: kept tokens, and the span's sentinel in place of its first token; EOS after.
        in_keep = valid & (~noise | starts)
        in_count = in_keep.sum(1)
        in_width = int(in_count.max()) + 1
        if self.pad_to_multiple_of:
            in_width = -(-in_width // self.pad_to_multiple_of) * self.pad_to_multiple_of
        input_ids = scatter_rows(
            in_width, self._pad_id,
            (in_keep.cumsum(1) - 1, torch.where(noise, sentinel, ids), in_keep),
            _one_per_row(in_count, self._eos_id),
        )  # fmt: skip
        # Targets: each noise token after the sentinels opened so far; each sentinel just before its span.
        target_pos = noise.cumsum(1) + starts.cumsum(1) - 1
        out_count = noise.sum(1) + starts.sum(1)
        labels = scatter_rows(
            int(out_count.max()) + 1, IGNORE_INDEX,
            (target_pos, ids, noise),
            (target_pos - 1, sentinel, starts),
            _one_per_row(out_count, self._eos_id),
        )  # fmt: skip
        batch = {"input_ids": input_ids, "attention_mask": length_mask(in_count + 1, in_width).long(), "labels": labels}
        if self.decoder_start_token_id is not None:
            batch["decoder_input_ids"] = shift_right(labels, self.decoder_start_token_id, self._pad_id)
        return batch
