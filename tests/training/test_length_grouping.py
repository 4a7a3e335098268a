"""Length-grouped batches (hfzoo.training.length_grouping): every example once per epoch, batches of similar lengths
that pad far less than random ones on real SST-2 sentences, the same order for the same (seed, epoch) and another
for the next epoch, and through accelerate's prepared loader the same batches after a resume skips some."""

from __future__ import annotations

from pathlib import Path

import pytest
from accelerate import Accelerator
from torch.utils.data import DataLoader

from hfzoo.training.length_grouping import LengthGroupedSampler, padding_fraction, train_sampling

SST2 = Path(__file__).resolve().parents[3] / "shared" / "data" / "sst2" / "train.tsv"
BATCH = 32


@pytest.fixture(scope="module")
def sst2_features() -> list[dict]:
    """Features whose lengths are those of 3,000 real SST-2 rows (a word per token: padding depends on lengths only)."""
    if not SST2.is_file():
        pytest.skip(f"the shared SST-2 data is not at {SST2}")
    rows = SST2.read_text(encoding="utf-8").splitlines()[1:3001]
    return [{"index": i, "input_ids": list(range(len(row.split("\t")[0].split()) + 2))} for i, row in enumerate(rows)]


def batches(features: list[dict], group_by_length: bool, seed: int = 0, epoch: int = 0) -> list[list[dict]]:
    loader = DataLoader(features, batch_size=BATCH, collate_fn=list,
                        **train_sampling(features, BATCH, seed, group_by_length))  # fmt: skip
    if group_by_length:
        loader.sampler.set_epoch(epoch)
    return list(loader)


def test_grouped_batches_hold_every_example_once_and_pad_far_less(sst2_features):
    grouped, shuffled = batches(sst2_features, True), batches(sst2_features, False)
    assert sorted(f["index"] for batch in grouped for f in batch) == list(range(len(sst2_features)))
    assert [len(b) for b in grouped] == [BATCH] * (len(sst2_features) // BATCH) + [len(sst2_features) % BATCH]
    random_padding, grouped_padding = padding_fraction(shuffled), padding_fraction(grouped)
    assert random_padding > 0.4 and grouped_padding < 0.05, (random_padding, grouped_padding)


def test_the_order_is_drawn_from_seed_and_epoch_and_the_batches_are_shuffled(sst2_features):
    def order(seed: int, epoch: int) -> list[int]:
        sampler = LengthGroupedSampler([len(f["input_ids"]) for f in sst2_features], BATCH, seed)
        sampler.set_epoch(epoch)
        return list(sampler)

    assert order(3, 1) == order(3, 1)
    assert order(3, 1) != order(3, 2) and order(3, 1) != order(4, 1)
    # Not one long sort: the lengths of successive batches go up and down.
    longest = [max(len(f["input_ids"]) for f in batch) for batch in batches(sst2_features, True)[:-1]]
    rises = sum(b > a for a, b in zip(longest, longest[1:]))
    assert 0.25 < rises / (len(longest) - 1) < 0.75


def test_a_prepared_loader_skipping_batches_continues_the_same_epoch(sst2_features):
    """What a resumed run does (hfzoo.training.loop): set the epoch, skip the micro-batches already trained on."""
    accelerator = Accelerator(cpu=True)
    loader = accelerator.prepare(DataLoader(sst2_features, batch_size=BATCH, collate_fn=list,
                                            **train_sampling(sst2_features, BATCH, 7, True)))  # fmt: skip
    def indices(batches) -> list[list[int]]:
        return [[f["index"] for f in batch] for batch in batches]

    loader.set_epoch(1)
    whole = indices(loader)
    loader.set_epoch(1)
    assert indices(accelerator.skip_first_batches(loader, 10)) == whole[10:]
    loader.set_epoch(2)
    assert indices(loader) != whole
