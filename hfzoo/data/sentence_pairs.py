"""Cut a text corpus into pairs of consecutive segments for BERT's next-sentence prediction.

Where `packing.pack` streams the corpus across document boundaries, next-sentence prediction needs them: segment B
must be the one that follows A *in its document* (the collator then swaps half of the Bs for a segment of another
document, `MaskedLMCollator(next_sentence_prediction=True)`). Each document's tokens are split into an even number of
near-equal segments of at most `(block_size - 3) // 2` tokens, so that `[CLS] A [SEP] B [SEP]` fits `block_size`
whichever B the collator picks, and are paired in order without overlap: (1, 2), (3, 4), ... Every token of a
document of two tokens or more is used once; a shorter document cannot be split and is left out. The pairs are
interleaved across documents (see `sentence_pairs`).
"""

from __future__ import annotations

import datasets
from transformers import PreTrainedTokenizerBase

SPECIAL_TOKENS_PER_PAIR = 3  # [CLS] A [SEP] B [SEP]


def segment_length(block_size: int) -> int:
    """The longest segment two of which, with [CLS] and two [SEP], fit `block_size` tokens."""
    length = (block_size - SPECIAL_TOKENS_PER_PAIR) // 2
    if length < 1:
        raise ValueError(
            f"block_size={block_size} leaves no room for two segments and {SPECIAL_TOKENS_PER_PAIR} special tokens; "
            f"use block_size >= {SPECIAL_TOKENS_PER_PAIR + 2}."
        )
    return length


def split_document(token_ids: list[int], max_length: int) -> list[tuple[list[int], list[int]]]:
    """The (A, B) pairs of one document: an even number of near-equal consecutive segments, paired in order."""
    if len(token_ids) < 2:
        return []
    num_pairs = -(-len(token_ids) // (2 * max_length))  # ceil: each pair holds at most 2 * max_length tokens
    bounds = [len(token_ids) * k // (2 * num_pairs) for k in range(2 * num_pairs + 1)]
    segments = [token_ids[start:end] for start, end in zip(bounds, bounds[1:])]
    return list(zip(segments[0::2], segments[1::2]))


def sentence_pairs(
    dataset: datasets.Dataset, tokenizer: PreTrainedTokenizerBase, block_size: int, *, text_column: str = "text"
) -> datasets.Dataset:
    """Examples `{input_ids: A, next_input_ids: B, document_id}`, B following A in document `document_id` (the
    row index of the text); see the module docstring for how documents are cut."""
    if not isinstance(dataset, datasets.Dataset):
        raise TypeError(
            f"next-sentence pairs are built from an in-memory datasets.Dataset, got {type(dataset).__name__} "
            "(a streamed corpus): load the corpus without streaming."
        )
    max_length = segment_length(block_size)
    documents = tokenizer(list(dataset[text_column]), add_special_tokens=False)["input_ids"]
    pairs = [(index, document_id, pair) for document_id, token_ids in enumerate(documents)
             for index, pair in enumerate(split_document(token_ids, max_length))]  # fmt: skip
    # Every document's first pair, then every second pair, ...: a batch read in order (an evaluation's) holds pairs
    # of many documents, so the collator finds a random B in another document for half of them, as in training's
    # shuffled batches; in document order, a long article filled whole batches that could draw no random B.
    pairs.sort(key=lambda entry: entry[:2])
    rows = {"input_ids": [a for _, _, (a, _) in pairs], "next_input_ids": [b for _, _, (_, b) in pairs],
            "document_id": [document_id for _, document_id, _ in pairs]}  # fmt: skip
    segment = datasets.List(datasets.Value("int32"))
    features = datasets.Features(
        {"input_ids": segment, "next_input_ids": segment, "document_id": datasets.Value("int64")}
    )
    return datasets.Dataset.from_dict(rows, features=features)
