"""A streamed corpus for pretraining: read lazily, tokenised and packed on the fly, split across processes, and
resumed exactly from a checkpoint.

`--streaming true` in the pretraining recipe reads its corpus as `datasets.IterableDataset`s (local files or a Hub
dataset: `load_corpus(..., streaming=True)`) instead of loading and packing it whole before step one, so memory does
not grow with the corpus.

Split: `datasets.distributed.split_dataset_by_node` gives each process its share: whole shards (files, a Hub
dataset's parquet files), which it alone reads, tokenises and packs (`pack_in_windows`), when their number divides by
the number of processes; otherwise every process packs the whole stream and keeps every n-th block.

Endless: each process starts its share again when it ends (its own epochs), so every process runs the same number
of micro-batches whatever the length of its share (a process that ran out while another trained on would leave the
other waiting in DDP's all-reduce); the run ends at max_steps.

Exact resume: `StreamedBatches.state_dict()` is the position (epoch, and the packed stream's own `state_dict()`),
plain JSON that checkpoints keep per process; `load_state_dict` continues from it, re-reading at most one window of
texts. Not shuffled: datasets' shuffle buffer is not part of its `state_dict()` (a resumed run would see other
batches), so a corpus should be shuffled before it is streamed.

Evaluation: `held_out` keeps the first texts of the validation split in memory, the same fixed set at every
evaluation, resume and process count.
"""

from __future__ import annotations

from collections.abc import Iterator

import datasets
from datasets.distributed import split_dataset_by_node
from transformers import PreTrainedTokenizerBase

from .packing import pack_in_windows

HELD_OUT_TEXTS = 1000  # validation texts kept from a stream when the run does not say how many (max_eval_samples)


class StreamedBatches:
    """Lists of `batch_size` packed blocks from one process's share of a stream, without end, that resume exactly.

    An epoch's last batch, short of `batch_size` blocks, is dropped (as the non-streamed loader's `drop_last`).
    """

    def __init__(self, blocks: datasets.IterableDataset, batch_size: int, process_index: int = 0):
        self.blocks, self.batch_size, self.process_index = blocks, batch_size, process_index
        self.epoch = 0
        self._epoch_start = blocks.state_dict()  # after a `load_state_dict`, iteration starts at the loaded state
        self._resumed = False

    def __iter__(self) -> Iterator[list[dict]]:
        resumed_mid_epoch = self._resumed
        while True:
            batch, full_batches = [], 0
            for block in self.blocks:
                batch.append(block)
                if len(batch) == self.batch_size:
                    full_batches += 1
                    yield batch
                    batch = []
            if not full_batches and not resumed_mid_epoch:
                raise ValueError(
                    f"process {self.process_index}'s share of the training stream packs into fewer than "
                    f"{self.batch_size} blocks (one batch); use more data or a smaller block_size/per_device_batch_size"
                )
            self.epoch, resumed_mid_epoch = self.epoch + 1, False
            self.blocks.load_state_dict(self._epoch_start)

    def state_dict(self) -> dict:
        """Where the stream is: after the last batch it yielded (JSON)."""
        return {"epoch": self.epoch, "blocks": self.blocks.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.epoch = state["epoch"]
        self.blocks.load_state_dict(state["blocks"])
        self._resumed = True


def training_stream(
    texts: datasets.IterableDataset,
    tokenizer: PreTrainedTokenizerBase,
    block_size: int,
    batch_size: int,
    process_index: int,
    num_processes: int,
) -> StreamedBatches:
    """This process's share of the training `texts`, packed into blocks of `block_size` tokens, in batches."""
    share = split_dataset_by_node(texts, rank=process_index, world_size=num_processes)
    return StreamedBatches(pack_in_windows(share, tokenizer, block_size), batch_size, process_index)


def held_out(texts: datasets.IterableDataset, limit: int) -> datasets.Dataset:
    """The first `limit` texts of a validation stream, in memory: a fixed held-out set whose size does not grow with
    the corpus (`pack` it as a non-streamed corpus)."""
    return datasets.Dataset.from_dict({"text": [example["text"] for example in texts.take(limit)]})
