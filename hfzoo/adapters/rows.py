"""Which adapter each row of a batch takes: the one mechanism behind every per-example choice of adapter.

A choice is a slot index per row (the last slot: no adapter). Rows are either gathered with their slot's weights
(`StackedAdapters.select`) or grouped by slot (`SlotGroups`): the composition's token routing groups rows for
`grouped_mm`, and a PEFT layer's mixed batch (`BottleneckLayer`, `adapter_names=[...]`) groups them to run each
adapter once on its rows. `expand_rows` repeats per-example choices the way generation expands a batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def expand_rows(tensor: torch.Tensor, rows: int, what: str) -> torch.Tensor:
    """Repeat per-example `tensor` to `rows` rows the way beam search and `num_return_sequences` expand a batch
    (`repeat_interleave`): a batch that is a multiple of the given examples repeats each example in place."""
    given = tensor.shape[0]
    if given == rows:
        return tensor
    if given and rows % given == 0:
        return tensor.repeat_interleave(rows // given, dim=0)
    raise ValueError(f"{what} has {given} entries for a batch of {rows} rows; pass one entry per example")


@dataclass
class SlotGroups:
    """The (row, slot) choices of rows sorted by slot, as `grouped_mm` takes them: assignment j is row `rows[j]`
    through slot `slots[j]` with weight `weights[j]` (None: 1); slot s's group ends at `offsets[s]`. The zero slot is
    a group like the others, so the cost does not depend on the choice."""

    rows: torch.Tensor
    slots: torch.Tensor
    weights: torch.Tensor | None
    offsets: torch.Tensor

    @classmethod
    def of(cls, slots: torch.Tensor, weights: torch.Tensor | None, num_slots: int) -> SlotGroups:
        """Group `slots` [n, k] (and their `weights` [n, k]) of n rows."""
        sorted_slots, order = slots.flatten().sort(stable=True)
        slot_ids = torch.arange(num_slots, device=slots.device)
        offsets = torch.searchsorted(sorted_slots, slot_ids, right=True, out_int32=True)
        rows = order if slots.shape[1] == 1 else order.div(slots.shape[1], rounding_mode="floor")
        chosen_weights = None if weights is None else weights.flatten()[order].unsqueeze(-1)
        return cls(rows, sorted_slots, chosen_weights, offsets)

    def per_slot(self) -> tuple[torch.Tensor, ...]:
        """The rows of each slot, in slot order (sorted by row within a slot)."""
        return self.rows.tensor_split(self.offsets[:-1].tolist())
