"""Pack a text corpus into fixed-length blocks of token ids for language-model pretraining.

Every document is tokenized without per-text special tokens, followed by the tokenizer's
end-of-sequence token (its ``[SEP]`` for encoder tokenizers, which have no EOS), and the resulting
stream is cut into ``block_size`` blocks with no padding; the final partial block is dropped.
Unlike the usual per-batch grouping, the stream continues across batches, so the blocks are
exactly the leading ``n * block_size`` tokens of the whole corpus, streaming or not.

``pack_in_windows`` is the exception, for a training stream that must resume exactly from a checkpoint: it packs
each window of texts on its own, so that datasets can restore its position (``state_dict()``) without replaying the
stream from its start.
"""

from __future__ import annotations

from collections.abc import Iterator

import datasets
import pyarrow as pa
import pyarrow.compute as pc
from transformers import PreTrainedTokenizerBase

AnyDataset = datasets.Dataset | datasets.IterableDataset | datasets.DatasetDict | datasets.IterableDatasetDict


def separator_id(tokenizer: PreTrainedTokenizerBase) -> int:
    """The id that ends each document in the packed stream: EOS, else SEP."""
    token_id = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.sep_token_id
    if token_id is None:
        raise ValueError(f"{type(tokenizer).__name__} has neither an eos_token nor a sep_token to separate documents")
    return token_id


def _tokenize(
    batch: dict[str, list], tokenizer: PreTrainedTokenizerBase, text_column: str, sep: int
) -> dict[str, list[list[int]]]:
    ids = tokenizer(batch[text_column], add_special_tokens=False)["input_ids"]
    return {"input_ids": [doc + [sep] for doc in ids]}


def _features(block_size: int) -> datasets.Features:
    return datasets.Features({"input_ids": datasets.List(datasets.Value("int32"), length=block_size)})


def _pack_dataset(
    dataset: datasets.Dataset, tokenizer: PreTrainedTokenizerBase, block_size: int, text_column: str,
    batch_size: int, num_proc: int | None,
) -> datasets.Dataset:  # fmt: skip
    tokenized = dataset.map(
        _tokenize,
        batched=True,
        batch_size=batch_size,
        num_proc=num_proc,
        remove_columns=dataset.column_names,
        fn_kwargs={"tokenizer": tokenizer, "text_column": text_column, "sep": separator_id(tokenizer)},
        desc="Tokenizing",
    )
    # The token stream is the flattened list column; blocks are zero-copy slices of it.
    stream = pc.list_flatten(tokenized.data.table.column("input_ids"))
    n_tokens = len(stream) // block_size * block_size
    values = stream.slice(0, n_tokens).combine_chunks().cast(pa.int32())
    blocks = pa.FixedSizeListArray.from_arrays(values, block_size)
    return datasets.Dataset(pa.table({"input_ids": blocks}), split=dataset.split).cast(_features(block_size))


def _blocks(
    dataset: datasets.IterableDataset, tokenizer: PreTrainedTokenizerBase, block_size: int, text_column: str,
    batch_size: int,
) -> Iterator[dict[str, list[int]]]:  # fmt: skip
    sep, buffer = separator_id(tokenizer), []
    for batch in dataset.iter(batch_size=batch_size):
        for doc in _tokenize(batch, tokenizer, text_column, sep)["input_ids"]:
            buffer.extend(doc)
        n_tokens = len(buffer) // block_size * block_size
        for start in range(0, n_tokens, block_size):
            yield {"input_ids": buffer[start : start + block_size]}
        del buffer[:n_tokens]


def _pack_window(
    batch: dict[str, list], tokenizer: PreTrainedTokenizerBase, block_size: int, text_column: str, sep: int
) -> dict[str, list[list[int]]]:
    stream = [token for doc in _tokenize(batch, tokenizer, text_column, sep)["input_ids"] for token in doc]
    return {"input_ids": [stream[start : start + block_size]
                          for start in range(0, len(stream) - block_size + 1, block_size)]}  # fmt: skip


def pack_in_windows(
    dataset: datasets.IterableDataset,
    tokenizer: PreTrainedTokenizerBase,
    block_size: int,
    *,
    text_column: str = "text",
    window: int = 1000,
) -> datasets.IterableDataset:
    """``pack`` for a stream that must resume exactly: every ``window`` texts are packed on their own (the
    window's last partial block, fewer than ``block_size`` tokens per ``window`` texts, is dropped).

    Packing a window is a stateless batched ``map``, so the stream's ``state_dict()`` is the position of the window
    in the texts plus the blocks of it already read, and ``load_state_dict()`` resumes by re-reading at most one
    window, where a stream packed across windows (``pack``) would replay everything before it.
    """
    if block_size < 1:
        raise ValueError(f"block_size must be positive, got {block_size}")
    return dataset.select_columns([text_column]).map(
        _pack_window,
        batched=True,
        batch_size=window,
        remove_columns=[text_column],
        fn_kwargs={"tokenizer": tokenizer, "block_size": block_size, "text_column": text_column,
                   "sep": separator_id(tokenizer)},  # fmt: skip
    )


def pack(
    dataset: AnyDataset,
    tokenizer: PreTrainedTokenizerBase,
    block_size: int,
    *,
    text_column: str = "text",
    batch_size: int = 1000,
    num_proc: int | None = None,
) -> AnyDataset:
    """Tokenize, join with EOS separators and cut into ``block_size`` blocks (``input_ids`` only).

    Works on a ``Dataset`` (tokenized with a cached, batched ``map``; ``num_proc`` workers),
    an ``IterableDataset`` (packed lazily) or a dict of either (each split packed).
    """
    if block_size < 1:
        raise ValueError(f"block_size must be positive, got {block_size}")
    if isinstance(dataset, (datasets.DatasetDict, datasets.IterableDatasetDict)):
        kwargs = {"text_column": text_column, "batch_size": batch_size, "num_proc": num_proc}
        return dataset.__class__({name: pack(part, tokenizer, block_size, **kwargs) for name, part in dataset.items()})
    if isinstance(dataset, datasets.Dataset):
        return _pack_dataset(dataset, tokenizer, block_size, text_column, batch_size, num_proc)
    return datasets.IterableDataset.from_generator(
        _blocks,
        features=_features(block_size),
        gen_kwargs={"dataset": dataset, "tokenizer": tokenizer, "block_size": block_size,
                    "text_column": text_column, "batch_size": batch_size},  # fmt: skip
    )
