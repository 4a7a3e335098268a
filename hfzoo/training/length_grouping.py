"""Length-grouped batches: examples of similar length share a batch, so dynamic padding (each batch padded to its
longest row, `hfzoo.tasks.task.pad_features`) pads little, and a step computes on real tokens rather than padding.

As transformers' `group_by_length` (`LengthGroupedSampler`): a seeded permutation is cut into mega-batches of 50
batches, each sorted by length and cut into batches; the order of the batches is then shuffled, so the model does
not see the lengths rise and fall through an epoch. Everything is drawn from (seed, epoch), so every process orders
the same way and a resumed run, which skips the batches of its epoch already trained on, sees the same batches.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch.utils.data import Sampler

MEGA_BATCH_BATCHES = 50  # transformers' mega_batch_mult: batches per mega-batch sorted together


def feature_length(feature: dict) -> int:
    """The tokens of a feature that padding is measured against: its input ids."""
    return len(feature["input_ids"])


class LengthGroupedSampler(Sampler[int]):
    """Indices of `lengths`, each run of `batch_size` consecutive ones a batch of similar lengths (see the module).

    The short batch of an epoch (when `batch_size` does not divide the data) comes last, as with a plain random
    sampler, so that a DataLoader cutting the indices into `batch_size` runs cuts exactly these batches."""

    def __init__(self, lengths: Sequence[int], batch_size: int, seed: int):
        self.lengths, self.batch_size, self.seed, self.epoch = list(lengths), batch_size, seed, 0

    def set_epoch(self, epoch: int) -> None:
        """Called by accelerate's loader at each epoch (the loop's `set_epoch`): a new order for each epoch."""
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.lengths)

    def __iter__(self) -> Iterator[int]:
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        permutation = torch.randperm(len(self.lengths), generator=generator).tolist()
        mega = MEGA_BATCH_BATCHES * self.batch_size
        ordered = [index for start in range(0, len(permutation), mega)
                   for index in sorted(permutation[start:start + mega], key=self.lengths.__getitem__)]  # fmt: skip
        batches = [ordered[start:start + self.batch_size] for start in range(0, len(ordered), self.batch_size)]
        short = batches.pop() if batches and len(batches[-1]) < self.batch_size else None
        order = torch.randperm(len(batches), generator=generator).tolist()
        for position in order:
            yield from batches[position]
        if short is not None:
            yield from short


def train_sampling(features: Sequence[dict], batch_size: int, seed: int, group_by_length: bool) -> dict:
    """The training DataLoader's keyword arguments that order its examples: length-grouped batches, or a plain
    shuffle seeded by `seed` (accelerate's seedable sampler then reshuffles it per epoch from the same seed). The
    loader has its own generator either way: without one, each iterator it starts draws its base seed from torch's
    global generator, and a resumed run, which starts one more (to skip batches), would drop out differently."""
    generator = torch.Generator().manual_seed(seed)
    if group_by_length:
        lengths = [feature_length(f) for f in features]
        return {"sampler": LengthGroupedSampler(lengths, batch_size, seed), "generator": generator}
    return {"shuffle": True, "generator": generator}


def padding_fraction(batches: Sequence[Sequence[dict]]) -> float:
    """The fraction of the token positions of `batches` (each padded to its longest feature) that are padding."""
    real = sum(feature_length(f) for batch in batches for f in batch)
    padded = sum(len(batch) * max(map(feature_length, batch)) for batch in batches)
    return 1 - real / padded
