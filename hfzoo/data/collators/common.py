"""What the pretraining collators share: padding, special tokens, word boundaries and a saveable RNG.

Every random choice goes through :func:`choose` or ``torch.rand``/``randint`` with the collator's
``generator``, so one ``torch.Generator`` state fixes every batch (see the package docstring for
checkpointing it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

import torch
import torch.nn.functional as F
from transformers import PreTrainedTokenizerBase

IGNORE_INDEX = -100  # the label torch's cross-entropy (and every transformers head) skips


class SeededCollator:
    """``state_dict``/``load_state_dict`` for a collator's ``generator`` field.

    With them a collator can be passed to ``accelerator.register_for_checkpointing``, so
    ``save_state``/``load_state`` restore the exact position in its random stream. Without a
    generator the collator draws from torch's global RNG, which accelerate already checkpoints.
    """

    generator: torch.Generator | None

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {} if self.generator is None else {"generator_state": self.generator.get_state()}

    def load_state_dict(self, state: Mapping[str, torch.Tensor]) -> None:
        if "generator_state" in state:
            if self.generator is None:
                raise ValueError("the saved state holds a generator state but this collator has generator=None")
            self.generator.set_state(state["generator_state"])


def check_probability(name: str, value: float, *, allow_zero: bool = True) -> None:
    if not (0.0 <= value <= 1.0) or (value == 0.0 and not allow_zero):
        interval = "[0, 1]" if allow_zero else "(0, 1]"
        raise ValueError(f"{name} must be in {interval}, got {value}")


def required_token_id(tokenizer: PreTrainedTokenizerBase, role: str, purpose: str) -> int:
    """The id of the tokenizer's ``role`` token (``"mask"``, ``"eos"`` ...), or an error naming what needs it."""
    token_id = getattr(tokenizer, f"{role}_token_id")
    if token_id is None:
        raise ValueError(
            f"{type(tokenizer).__name__} has no {role}_token, which {purpose} needs; set tokenizer.{role}_token"
        )
    return token_id


def pad(
    sequences: Sequence[Sequence[int] | torch.Tensor], pad_id: int, pad_to_multiple_of: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad to the longest sequence (rounded up to ``pad_to_multiple_of``): ``(ids [B, L], lengths [B])``.

    Training collators pad on the right so real tokens keep positions 0..n-1; which tokens are
    padding is known from ``lengths``, never from the pad id (which may equal EOS).
    """
    tensors = [torch.as_tensor(s, dtype=torch.long) for s in sequences]
    lengths = torch.tensor([len(t) for t in tensors], dtype=torch.long)
    ids = torch.nn.utils.rnn.pad_sequence(tensors, batch_first=True, padding_value=pad_id)
    if pad_to_multiple_of and ids.shape[1] % pad_to_multiple_of:
        ids = F.pad(ids, (0, pad_to_multiple_of - ids.shape[1] % pad_to_multiple_of), value=pad_id)
    return ids, lengths


def length_mask(lengths: torch.Tensor, width: int) -> torch.Tensor:
    """``[B, width]`` bool, True at the first ``lengths[b]`` positions of row b."""
    return torch.arange(width) < lengths[:, None]


def special_ids(tokenizer: PreTrainedTokenizerBase) -> torch.Tensor:
    """All the tokenizer's special ids (pad, CLS/SEP, EOS, unknown, mask, sentinels ...): never sampled."""
    return torch.tensor(sorted(set(tokenizer.all_special_ids)), dtype=torch.long)


def unmaskable_ids(tokenizer: PreTrainedTokenizerBase) -> torch.Tensor:
    """The special ids that are structure rather than text: never chosen, covered by a span or moved by one.

    The unknown token is text (it stands for a word, e.g. WikiText's ``<unk>``), so it is masked
    like any other token; it is still never drawn as a random replacement.
    """
    ids = special_ids(tokenizer)
    return ids if tokenizer.unk_token_id is None else ids[ids != tokenizer.unk_token_id]


def regular_ids(tokenizer: PreTrainedTokenizerBase) -> torch.Tensor:
    """The non-special vocabulary, from which random replacement tokens are drawn."""
    vocabulary = torch.arange(len(tokenizer))
    return vocabulary[~torch.isin(vocabulary, special_ids(tokenizer))]


def ceil_fraction(counts: torch.Tensor, ratio: float) -> torch.Tensor:
    """``ceil(counts * ratio)`` as fairseq, without float error pushing 10 * 0.3 = 3.0000000000000004 up to 4."""
    return (counts.double() * ratio - 1e-9).ceil().long().clamp(min=0)


def choose(valid: torch.Tensor, counts: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """Exactly ``counts[b]`` positions of row b, uniformly among its ``valid`` ones (all of them if fewer).

    Random keys with invalid positions pushed to the end; a position is chosen when its rank is
    below the count. One sort per batch instead of a ``randperm`` per row.
    """
    keys = torch.rand(valid.shape, generator=generator).masked_fill(~valid, 2.0)
    ranks = keys.argsort(dim=1).argsort(dim=1)
    return (ranks < counts.clamp(max=valid.sum(1))[:, None]) & valid


def scatter_rows(width: int, fill: int, *parts: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """``[B, width]`` filled with ``fill``, then ``values`` written at ``positions`` where ``where`` holds.

    Each part is ``(positions, values, where)`` of one shape; unselected entries go to a spare
    column that is cut off, so rows can receive different numbers of values without a loop.
    """
    out = torch.full((parts[0][0].shape[0], width + 1), fill, dtype=torch.long)
    for positions, values, where in parts:
        out.scatter_(1, positions.masked_fill(~where, width), values)
    # Contiguous: transformers' losses `.view(-1)` the labels.
    return out[:, :width].contiguous()


def compact(values: torch.Tensor, keep: torch.Tensor, fill: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's ``values`` where ``keep``, moved to the front in order: ``(ids, lengths)``."""
    lengths = keep.sum(1)
    width = int(lengths.max()) if len(lengths) else 0
    return scatter_rows(width, fill, (keep.cumsum(1) - 1, values, keep)), lengths


def shift_right(labels: torch.Tensor, decoder_start_token_id: int, pad_token_id: int) -> torch.Tensor:
    """``decoder_input_ids`` for teacher forcing: start token, then labels[:-1] with -100 read as pad."""
    shifted = F.pad(labels[:, :-1], (1, 0), value=decoder_start_token_id)
    return shifted.masked_fill(shifted == IGNORE_INDEX, pad_token_id)


def _word_marker(pre_tokenizer: dict | None) -> str | None:
    """``Ġ`` for a byte-level pre-tokenizer, the replacement character for Metaspace, else None."""
    if pre_tokenizer is None:
        return None
    if pre_tokenizer["type"] == "Sequence":
        markers = [_word_marker(p) for p in pre_tokenizer["pretokenizers"]]
        return next((m for m in markers if m), None)
    if pre_tokenizer["type"] == "ByteLevel":
        return "\u0120"  # Ġ: byte-level BPE's picture of a leading space
    if pre_tokenizer["type"] == "Metaspace":
        return pre_tokenizer.get("replacement", "\u2581")
    return None


def word_start_table(tokenizer: PreTrainedTokenizerBase) -> torch.Tensor:
    """Bool per vocabulary id: does this token begin a word?

    Packed examples carry only ids (``word_ids()`` is gone after packing), so word boundaries are
    read from the token strings, by the tokenizer's own convention:

    * WordPiece: every token except those with the continuing-subword prefix (``##``);
    * byte-level BPE: tokens beginning with ``Ġ`` (a space), so punctuation and line breaks
      stay with the word before them, as in RoBERTa's whole-word masking;
    * Metaspace (SentencePiece-style): tokens beginning with ``▁``.

    :func:`word_index` also starts a word at the start of a row and after every special token
    (other than the unknown token, which is text).
    """
    if not tokenizer.is_fast:
        raise ValueError("word boundaries are read from a fast tokenizer's backend; load it with use_fast=True")
    backend = json.loads(tokenizer.backend_tokenizer.to_str())
    tokens = tokenizer.convert_ids_to_tokens(range(len(tokenizer)))
    if backend["model"]["type"] == "WordPiece":
        prefix = backend["model"]["continuing_subword_prefix"]
        return torch.tensor([not t.startswith(prefix) for t in tokens])
    marker = _word_marker(backend.get("pre_tokenizer"))
    if marker is None:
        raise ValueError(
            "whole-word and span masking need word boundaries, read from WordPiece '##', byte-level 'Ġ' or "
            f"Metaspace '▁' tokens; this tokenizer has none of these conventions (pre-tokenizer: "
            f"{backend.get('pre_tokenizer')}). Use token-level masking instead."
        )
    return torch.tensor([t.startswith(marker) for t in tokens])


def word_index(
    input_ids: torch.Tensor, maskable: torch.Tensor, starts: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The word each maskable token belongs to (-1 elsewhere) and the number of words per row.

    ``starts`` is :func:`word_start_table`; ``None`` makes every token its own unit. A word also
    starts right after a non-maskable token, so words never straddle a separator or padding.
    """
    if starts is None:
        begins = maskable
    else:
        after_other = F.pad(~maskable[:, :-1], (1, 0), value=True)
        begins = maskable & (after_other | starts[input_ids])
    index = (begins.cumsum(1) - 1).masked_fill(~maskable, -1)
    return index, begins.sum(1)
